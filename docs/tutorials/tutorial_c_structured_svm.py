"""
Structured SVMs: hinge losses, margin and slack rescaling, solvers with a certificate
=====================================================================================

A structured SVM (Taskar et al. 2003, Tsochantaridis et al. 2005) learns scores ``s(y)`` of
whole labelings so that the true labeling ``y`` beats every other ``y'`` by a margin that grows
with the loss ``Delta(y, y')``. Its loss per sequence is the structured hinge

* margin rescaling: ``max_y' [s(y') + Delta(y, y')] - s(y)``,
* slack rescaling: ``max_y' Delta(y, y') * [1 + s(y') - s(y)]``,

both ``>= 0`` (``y' = y`` gives 0) and both found by *loss-augmented inference*: a Viterbi-like
search for the most violating labeling. This page runs that search on a tiny chain and checks it
by brute force, trains a linear chain model (an HM-SVM) with the hinge by subgradient steps, by
block-coordinate Frank-Wolfe (BCFW) and by cutting planes, reads the duality-gap certificate of
the last two, and goes through the losses the search supports: Hamming (weighted, any function
of the count), per-label and per-pair costs, and the segment, boundary and 0/1 losses of
segmentations.
"""

# %%
# Loss-augmented inference on a tiny chain
# ----------------------------------------
# Three labels, four positions: 81 labelings, few enough to enumerate. ``st.path_score`` scores
# any labeling; ``st.loss_augmented`` finds the maximizer of either objective with the Hamming
# loss ``Delta = H(y, y')``, the number of positions where the labels differ.
import itertools
import time

import torch

import structtorch as st

start_time = time.perf_counter()
g = torch.Generator().manual_seed(0)
unary = torch.randn(1, 4, 3, generator=g, dtype=torch.float64)  # (B, T, N)
trans = torch.randn(3, 3, generator=g, dtype=torch.float64)  # (N, N): label i then label j
target = torch.tensor([[0, 0, 1, 2]])

every = torch.tensor(list(itertools.product(range(3), repeat=4)))  # (81, T) all labelings
s = st.path_score(unary.expand(81, -1, -1), trans, every)  # (81,)
s_target = st.path_score(unary, trans, target)
hamming = (every != target).sum(1)
brute = {"margin": (s + hamming - s_target).max(), "slack": (hamming * (1 + s - s_target)).max()}
for rescaling in ("margin", "slack"):
    value, path, count = st.loss_augmented(unary, trans, target, rescaling=rescaling)
    print(f"{rescaling:>6}: hinge {value.item():.4f} (brute force {brute[rescaling].item():.4f}), "
          f"violator {path[0].tolist()} at Hamming distance {count.item()}")

# %%
# The two rescalings pick different violators: margin rescaling adds the loss to the score, so
# a labeling far from the target can win on its loss alone even when it scores badly; slack
# rescaling multiplies the score gap by the loss, so a labeling that the model already ranks well
# below the target contributes nothing, however wrong it is. Margin rescaling folds a loss that
# decomposes over positions into the unary scores and costs one Viterbi; slack rescaling (and any
# non-linear function of the count) runs a table over the count, O(T^2 N^2) instead of O(T N^2).
#
# The hinge as a loss
# -------------------
# ``st.StructuredHingeLoss`` (or the function ``st.structured_hinge``) returns ``max(0, value)``
# reduced over the batch, and its gradient is the exact subgradient: the violator's indicator
# minus the target's.
u = unary.clone().requires_grad_()
loss = st.StructuredHingeLoss("margin")(u, trans, target)
loss.backward()
print(f"hinge {loss.item():.4f}")
print("d hinge / d unary at t=1:", u.grad[0, 1].tolist())  # violator's label 1 minus target's label 0

# %%
# Training an HM-SVM: three solvers
# ---------------------------------
# :func:`structtorch.data.make_tagging_data` draws noisy Gaussian features around a label mean,
# with labels that stay or step to the next class. ``st.LinearChainPotentials`` is the linear
# model ``x -> (unary = x W + b, transitions)``. :func:`structtorch.train.fit` minimizes the mean
# hinge plus ``||w||^2 / (2 n C)``:
#
# * ``solver="subgradient"`` (the default): any torch optimizer on any model (neural too), no
#   certificate;
# * ``solver="bcfw"``: block-coordinate Frank-Wolfe on the dual (Lacoste-Julien et al. 2013), one
#   sequence per step, no learning rate, margin rescaling;
# * ``solver="cutting_plane"``: 1-slack (Joachims et al. 2009) or n-slack (Tsochantaridis et al.
#   2005) cutting planes, any ``StructuredHingeLoss``, margin or slack.
#
# The last two record ``objective`` (the primal at the current weights), ``dual`` (a lower bound
# on the optimum) and ``gap = objective - dual``: the weights are provably within ``gap`` of the
# best possible objective.
train_data = st.data.make_tagging_data(48, min_length=10, max_length=25, seed=1)
test_data = st.data.make_tagging_data(48, min_length=10, max_length=25, seed=2)
C = 1.0


def accuracy(model):
    path = st.viterbi(*model(test_data.x), lengths=test_data.lengths)[1]
    inside = path >= 0
    return float((path == test_data.labels)[inside].float().mean())


torch.manual_seed(0)
sgd = st.LinearChainPotentials(8, 5)
t0 = time.perf_counter()
h_sgd = st.train.fit(sgd, train_data, st.StructuredHingeLoss("margin"), epochs=15, C=C, progress=False,
                     optimizer=torch.optim.Adam(sgd.parameters(), lr=0.05), batch_size=8)
print(f"subgradient: objective {h_sgd['objective'][-1]:.4f} after {len(h_sgd)} epochs "
      f"({time.perf_counter() - t0:.1f} s), test accuracy {accuracy(sgd):.3f}")

bcfw = st.LinearChainPotentials(8, 5)
t0 = time.perf_counter()
h_bcfw = st.train.fit(bcfw, train_data, None, epochs=20, C=C, solver="bcfw", progress=False,
                      solver_options={"tol": 1e-3})
print(f"BCFW: objective {h_bcfw['objective'][-1]:.4f}, dual {h_bcfw['dual'][-1]:.4f}, "
      f"gap {h_bcfw['gap'][-1]:.2e} after {len(h_bcfw)} passes ({time.perf_counter() - t0:.1f} s), "
      f"test accuracy {accuracy(bcfw):.3f}")

one = st.LinearChainPotentials(8, 5)
t0 = time.perf_counter()
h_one = st.train.fit(one, train_data, st.StructuredHingeLoss("margin"), epochs=200, C=C,
                     solver="cutting_plane", progress=False, solver_options={"tol": 1e-4})
print(f"1-slack cutting planes: converged {h_one.converged} in {len(h_one)} iterations "
      f"({time.perf_counter() - t0:.1f} s), test accuracy {accuracy(one):.3f}")
print(" iter   objective        dual         gap  planes  oracle calls")
for e in [*range(0, len(h_one), max(1, len(h_one) // 6)), len(h_one) - 1]:
    r = h_one.epochs[e]
    print(f"{e + 1:5d}  {r['objective']:10.5f}  {r['dual']:10.5f}  {r['gap']:10.2e}  "
          f"{r['constraints']:6.0f}  {r['oracle_calls']:12.0f}")

# %%
# The certificate says where the other solvers stand: the optimum lies in
# ``[dual, objective]`` of the converged run, so the subgradient run's objective is at most its
# own value minus that lower bound away from optimal.
best_lower = h_one["dual"][-1]
for name, h in (("subgradient", h_sgd), ("BCFW", h_bcfw), ("1-slack", h_one)):
    print(f"{name:>12}: objective {h['objective'][-1]:.5f}, at most {h['objective'][-1] - best_lower:.2e} "
          f"above the optimum")

# %%
# Subgradient steps and BCFW reach weights within a few percent of the optimum quickly; the
# difference lies in what they can prove. The subgradient run proves nothing; BCFW's dual rises
# slowly with the Hamming loss of whole sequences and a weak regularizer, so its own gap stays
# loose; 1-slack cutting planes close the gap to 1e-4 in well under a second here. On many
# sequences and a loose tolerance BCFW's cheap steps win (see the pitfalls page, "Which solver for
# which C").
#
# Slack rescaling trains the same way; ``"n_slack"`` (one plane per violated sequence) suits it,
# since the 1-slack solver's combined planes fit slack rescaling poorly. ``tol`` is an absolute
# gap, ``rtol`` one relative to the objective.
slack = st.LinearChainPotentials(8, 5)
t0 = time.perf_counter()
h_slack = st.train.fit(slack, train_data, st.StructuredHingeLoss("slack"), epochs=100, C=C,
                       solver="cutting_plane", progress=False,
                       solver_options={"variant": "n_slack", "tol": 0.0, "rtol": 1e-3})
print(f"slack rescaling, n-slack: converged {h_slack.converged} in {len(h_slack)} iterations "
      f"({time.perf_counter() - t0:.1f} s), objective {h_slack['objective'][-1]:.4f}, "
      f"gap {h_slack['gap'][-1]:.1e}, {h_slack['constraints'][-1]:.0f} planes, "
      f"test accuracy {accuracy(slack):.3f}")

# %%
# The losses
# ----------
# The search is exact for any function ``h`` of the Hamming count (``h=`` a callable on the
# counts or a table ``h(0..T)``), for position weights, for a cost per (true, predicted) label
# pair, and for costs on pairs of neighbouring predicted labels (a loss of order 2). Each case on
# the same tiny chain, checked by brute force:


def check(name, delta, **kwargs):
    """The margin-rescaled hinge of loss ``delta`` (81,) by brute force against loss_augmented."""
    value, path, count = st.loss_augmented(unary, trans, target, **kwargs)
    expected = (s + delta - s_target).max()
    print(f"{name:<36} hinge {value.item():.4f} (brute force {expected.item():.4f}), loss {count.item():g}")


check("Hamming, h(k) = min(k, 2)", hamming.clamp(max=2).double(), h=lambda k: k.clamp(max=2))
weights = torch.tensor([[1.0, 1.0, 2.0, 0.5]])  # the third position counts double
check("weighted Hamming", ((every != target) * weights).sum(1), weights=weights)
cost = torch.ones(3, 3) - torch.eye(3)
cost[0, 1] = cost[1, 0] = 0.25  # confusing labels 0 and 1 is cheap
check("label costs cost[y_t, y'_t]", cost[target, every].sum(1).double(), cost=cost)
# pair costs: a predicted change of label where the target keeps its label costs 1
keeps = (target[:, 1:] == target[:, :-1])  # (B, T-1)
pair_cost = (keeps[..., None, None] & ~torch.eye(3, dtype=torch.bool)).double()  # (B, T-1, N, N)
moves = (every[:, 1:] != every[:, :-1]) & keeps
check("pair costs (spurious label changes)", moves.sum(1).double(), pair_cost=pair_cost)

# %%
# Slack rescaling and any ``h`` work with these losses too, with the costs read as integers
# after a common scale (here quarters). In training the same keywords go to the hinge:
# ``hinge(unary, trans, labels, lengths=lengths, cost=cost)``.
value, path, count = st.loss_augmented(unary, trans, target, cost=cost, rescaling="slack")
expected = (cost[target, every].sum(1) * (1 + s - s_target)).max()
print(f"slack rescaling with label costs: {value.item():.4f} (brute force {expected.item():.4f})")
x, labels, lengths = train_data.x[:8], train_data.labels[:8], train_data.lengths[:8]
print("a training batch's hinge with label costs:",
      f"{st.StructuredHingeLoss('slack')(*slack(x), labels, lengths=lengths, cost=torch.ones(5, 5) - torch.eye(5)):.4f}")

# %%
# Segment-level losses
# --------------------
# For segmentations (semi-Markov models, see the semi-Markov tutorial) the loss may count whole
# segments: ``"segment"`` counts the (start, end, label) segments in the symmetric difference of
# the two segmentations, ``"boundary"`` the positions where "a segment starts here" differs, and
# ``"zero_one"`` is 1 for any difference; ``"hamming"`` counts positions as for chains. A target
# of three segments on 8 positions, with segments of at most 4:
content = torch.randn(1, 8, 2, generator=g, dtype=torch.float64)  # (B, T, N)
seg_trans = torch.zeros(2, 2, dtype=torch.float64)
t_labels = torch.tensor([[0, 0, 0, 1, 1, 0, 0, 0]])
t_starts = torch.tensor([[True, False, False, True, False, True, False, False]])
for loss in ("hamming", "segment", "boundary", "zero_one"):
    value, labels_, starts_, count = st.semimarkov_loss_augmented(
        content, seg_trans, t_labels, t_starts, max_len=4, loss=loss, rescaling="margin")
    cuts = starts_[0].nonzero().flatten().tolist()
    print(f"{loss:>9}: hinge {value.item():7.4f}, violator labels {labels_[0].tolist()} "
          f"starting at {cuts}, loss {count.item()}")

# %%
# The hinge takes them by name, ``st.StructuredHingeLoss(loss="segment")``, on a
# ``st.SemiMarkovDistribution`` (a model's output) and a ``(labels, starts)`` target; the gene
# finder of ``examples/gene_structure.py`` trains on the segment loss with n-slack cutting planes.
dist = st.SemiMarkovDistribution(content, seg_trans, max_len=4)
print(f"segment hinge: {st.StructuredHingeLoss(loss='segment')(dist, (t_labels, t_starts)).item():.4f}")
print(f"total {time.perf_counter() - start_time:.1f} s")
