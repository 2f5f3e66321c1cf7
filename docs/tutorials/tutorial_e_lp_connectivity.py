"""
Graph labeling with connectivity: LP relaxations, a differentiable layer, multicuts and stability
=================================================================================================

:mod:`structtorch.lp` labels the nodes of a graph (the pixels of a grid, superpixels, ...) by
maximizing unary and pairwise scores over the LP relaxation of MAP (the local polytope), and can
require the nodes of a label to form **one connected region**. Connectivity is a global
constraint with exponentially many inequalities; they are added as cutting planes, each found by a
min-cut separation oracle (Nowozin 2009, ch. 5-6). This page walks through:

1. MAP with and without connectivity on a noisy grid;
2. fractional solutions, and the two ways to a connected labeling (a rounding, the exact MAP);
3. the differentiable relaxation layer and max-margin training over the LP, and what the layers
   cost next to a CNN backbone;
4. graph partitioning over the multicut polytope (modularity clustering);
5. stability ranges: how far a weight can move before the optimal solution changes.

Scores are maximized (the thesis minimizes energies, energy = -score). V nodes, E edges (i < j),
L labels, B instances on one graph. All problems here are tiny; each LP is solved by HiGHS.
"""
import importlib.util

PLOT = importlib.util.find_spec("matplotlib") is not None  # the figures need matplotlib (docs extra)
if PLOT:
    import matplotlib.pyplot as plt

# %%
# A noisy X
# ---------
# The truth is an "X" of two-pixel strokes on a 12 x 12 grid (label 1) on background (label 0).
# Each pixel's unary score favours its true label, plus strong noise; a Potts pairwise score
# rewards equal labels on neighbouring pixels. :func:`~structtorch.lp.grid_edges` gives the
# 4-neighbourhood.
import time

import networkx as nx
import torch

from structtorch import lp

H = W = 12
edges = lp.grid_edges(H, W)  # (E, 2) int64, i < j
r = torch.arange(H, dtype=torch.float64).view(H, 1)
c = torch.arange(W, dtype=torch.float64).view(1, W)
x_mask = ((r - c).abs() <= 1) | ((r + c - (W - 1)).abs() <= 1)
x_mask[0], x_mask[-1], x_mask[:, 0], x_mask[:, -1] = False, False, False, False
truth = x_mask.long().reshape(-1)  # (V,)

g = torch.Generator().manual_seed(2)
unary = torch.zeros(H * W, 2, dtype=torch.float64)
unary[:, 1] = torch.where(truth == 1, 0.8, -0.8) + torch.randn(H * W, generator=g, dtype=torch.float64)
pairwise = torch.zeros(len(edges), 2, 2, dtype=torch.float64)
pairwise[:, 0, 0] = pairwise[:, 1, 1] = 0.5  # Potts: equal labels on an edge score 0.5


def show(*labelings, titles=()):
    """Labelings (V,) of the grid side by side: '#' label 1, '.' label 0."""
    rows = [f"{t:<{W + 3}}" for t in titles]
    print("".join(rows))
    for i in range(H):
        print("".join("".join("#" if int(y[i * W + j]) else "." for j in range(W)) + "   "
                      for y in labelings))


def draw(panels, title=None):
    """Grids side by side: (title, (V,) values in [0, 1]) each, grey scale (white = label 1)."""
    if not PLOT:
        return
    fig, axes = plt.subplots(1, len(panels), figsize=(2.3 * len(panels), 2.6), squeeze=False)
    for ax, (name, values) in zip(axes[0], panels, strict=True):
        side = int(round(len(values) ** 0.5))
        ax.imshow(values.detach().reshape(side, side).numpy(), cmap="gray", vmin=0, vmax=1)
        ax.set_title(name, fontsize=8)
        ax.axis("off")
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    plt.show()


def components(labels):
    """Connected components of the label-1 nodes."""
    nodes = [v for v in range(H * W) if labels[v] == 1]
    graph = nx.Graph()
    graph.add_nodes_from(nodes)
    graph.add_edges_from((i, j) for i, j in edges.tolist() if labels[i] == 1 and labels[j] == 1)
    return nx.number_connected_components(graph)


# %%
# MAP over the local polytope
# ---------------------------
# :func:`~structtorch.lp.map_lp` returns an :class:`~structtorch.lp.LPResult`: node variables
# ``mu`` (B, V, L), edge variables, the LP's ``score`` (differentiable: its gradient is ``mu``) and
# whether the solution is ``integral``. A binary Potts model is submodular, so this LP is tight:
# its solution is the exact MAP. The noise breaks the X into pieces.
plain = lp.map_lp(unary, pairwise, edges)
mrf = lp.round_labels(plain.mu)[0][0]
print(plain)
print(f"score {float(plain.score[0]):.3f}, errors {int((mrf != truth).sum())}, "
      f"foreground components {components(mrf)}")

# %%
# One connected region
# --------------------
# ``connected=[1]`` asks the label-1 nodes to form one connected subgraph. The solver adds
# vertex-separator cuts ``mu_i + mu_j - sum_{k in S} mu_k <= 1`` (if i and j are both label 1, some
# node of every separator S between them must be too) as long as the separation oracle finds one
# violated, then returns. ``cuts`` lists them, ``iterations`` counts the LP solves.
began = time.perf_counter()
res = lp.map_lp(unary, pairwise, edges, connected=[1])
seconds = time.perf_counter() - began
cmrf = lp.round_labels(res.mu)[0][0]
print(res)
print(f"{len(res.cuts[0])} cuts, {int(res.iterations[0])} LP solves, {seconds:.2f} s; score "
      f"{float(res.score[0]):.3f} (<= {float(plain.score[0]):.3f} without the constraint)")
print(f"errors {int((cmrf != truth).sum())}, foreground components {components(cmrf)}")
show(truth, mrf, cmrf, titles=("truth", "MRF", "connected"))
draw([("truth", truth.double()), ("noisy input: sigmoid(unary)", torch.sigmoid(2 * unary[:, 1])),
      ("MRF (LP = MAP)", mrf.double()), ("connected (LP + cuts)", cmrf.double())])

# %%
# The oracle itself is public: :func:`~structtorch.lp.connectivity_cut` returns the most violated
# inequality for one label plane, here for the plain MRF solution, whose foreground is split.
violation, i, j, separator = lp.connectivity_cut(plain.mu[0, :, 1], edges)
print(f"violation {violation:.2f} between nodes {i} and {j}; separator of {len(separator)} nodes")
print(lp.connectivity_cut(res.mu[0, :, 1], edges)[0], "for the connected solution (nothing violated)")

# %%
# Soft connectivity (``connected_soft={1: weight}``) charges ``weight`` for each unit of violation
# instead of forbidding it; a weight of 0 is the plain MRF, a large one the hard constraint.
for weight in (0.1, 1.0):
    soft = lp.map_lp(unary, pairwise, edges, connected_soft={1: weight})
    labels = lp.round_labels(soft.mu)[0][0]
    print(f"soft weight {weight}: errors {int((labels != truth).sum())}, components {components(labels)}, "
          f"slack {float(soft.slack[0, 0]):.2f}")

# %%
# Fractional solutions, and two ways out
# --------------------------------------
# With connectivity the LP is no longer tight in general. Two blobs that each want label 1, joined
# only at a cost, give a fractional optimum: a band of half-integral nodes. Rounding each node to
# its largest marginal may break the very constraint asked for; ``str(res)`` says so. Two fixes:
# :func:`~structtorch.lp.round_connected`, a rounding that keeps every constraint (milliseconds),
# and :func:`~structtorch.lp.map_exact`, the exact MAP by branch and cut with a certified gap.
edges6 = lp.grid_edges(6, 6)
u = torch.full((6, 6), -1.0, dtype=torch.float64)
u[:2, :2] = u[4:, 4:] = 2.0  # two blobs want label 1
blobs = torch.stack([torch.zeros(36, dtype=torch.float64), u.reshape(-1)], 1)
potts = (0.2 * torch.eye(2, dtype=torch.float64)).expand(len(edges6), 2, 2)
frac = lp.map_lp(blobs, potts, edges6, connected=[1])
print(frac)
rounded = lp.round_connected(frac.mu, edges6, [1])
exact = lp.map_exact(blobs, potts, edges6, connected=[1])
rounded_score = float(lp.labeling_score(blobs, potts, edges6, rounded)[0])
print(f"LP bound {float(frac.score[0]):.3f}; rounding {rounded_score:.3f}; exact {float(exact.score[0]):.3f} "
      f"(bound {float(exact.bound[0]):.3f}, optimal {bool(exact.optimal[0])})")
for name, labels in (("rounded", rounded[0]), ("exact", exact.labels[0])):
    print(name)
    for row in labels.reshape(6, 6).tolist():
        print("  " + "".join("#" if v else "." for v in row))

# %%
# Side by side: the input (the blobs' unary scores), the LP's node marginals mu_i(1) (grey: the
# half-integral band the LP spreads between the blobs), the connected rounding and the exact MAP.
draw([("input: sigmoid(unary)", torch.sigmoid(blobs[:, 1])), ("LP marginals mu(1)", frac.mu[0, :, 1]),
      (f"round_connected ({rounded_score:.2f})", rounded[0].double()),
      (f"map_exact ({float(exact.score[0]):.2f})", exact.labels[0].double())],
     title=f"two blobs under connectivity: LP bound {float(frac.score[0]):.2f}")

# %%
# A differentiable relaxation layer
# ---------------------------------
# The LP's solution is piecewise constant in the scores, so its gradient is zero almost
# everywhere. :class:`~structtorch.lp.MAPRelaxation` adds a small quadratic smoothing: ``mu`` is
# then a differentiable function of the unary and pairwise scores, and any loss on it trains what
# produced them. Each instance is solved as a quadratic program (Clarabel), polished on its
# active set, and differentiated exactly through that active set's KKT system
# (``solver="cvxpylayers"`` is the older path through cvxpy and diffcp, 5-16x slower).
# Connectivity enters through a fixed block of cut rows (``max_cuts``), e.g. those
# :func:`~structtorch.lp.map_lp` found, or those the layer's own output violates
# (:func:`~structtorch.lp.connectivity_cuts`), passed in on the next call.
small = lp.grid_edges(5, 5)
target = torch.zeros(25, dtype=torch.long)
target[[6, 7, 8, 11, 16, 17, 18]] = 1  # a "C" shape
feature = (2 * target - 1).double() + 1.5 * torch.randn(25, generator=g, dtype=torch.float64)  # noisy
scale = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)  # learned: unary = scale * feature
strength = torch.tensor(0.0, dtype=torch.float64, requires_grad=True)  # learned Potts strength
layer = lp.MAPRelaxation(small, num_labels=2, smoothing=0.1, max_cuts=4)
optimizer = torch.optim.Adam([scale, strength], lr=0.05)
began = time.perf_counter()
curve = []
for step in range(20):
    unary_s = torch.stack([torch.zeros(25, dtype=torch.float64), scale * feature], 1)
    pairwise_s = (strength * torch.eye(2, dtype=torch.float64)).expand(len(small), 2, 2)
    mu = layer(unary_s, pairwise_s)  # (1, V, L), differentiable
    loss = (mu[0, :, 1] - target.double()).pow(2).mean()  # squared error of the relaxed labeling
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    curve.append(loss.item())
    if step % 5 == 0 or step == 19:
        errors = int((mu[0].argmax(1) != target).sum())
        print(f"step {step:2d}: loss {loss.item():.3f}, scale {scale.item():.2f}, "
              f"strength {strength.item():.2f}, {errors} of 25 pixels wrong")
print(f"{time.perf_counter() - began:.2f} s for 20 steps (each a QP solve and its derivative)")
draw([("target", target.double()), ("feature (noisy)", torch.sigmoid(feature)),
      ("layer output mu(1)", mu[0, :, 1])], title=f"after 20 steps: loss {curve[0]:.3f} -> {curve[-1]:.3f}")

# %%
# Max-margin training over the LP
# -------------------------------
# For models linear in their parameters the usual route is the structured hinge with
# loss-augmented inference over the relaxation, :func:`~structtorch.lp.relaxed_hinge`: the LP is
# solved once with the Hamming loss added to the unary scores, and the subgradient comes from its
# solution (Danskin's theorem). ``connected=`` keeps the constraint in the loop (the target's
# label-1 nodes must then be connected, as the X's are). On the noisy X, with the scores as they
# are:
unary_t = unary.clone().requires_grad_()
hinge, augmented = lp.relaxed_hinge(unary_t, pairwise, edges, truth, connected=[1], return_result=True)
hinge.backward()
print(f"hinge {hinge.item():.3f} (the normalized Hamming loss of a labeling is at most 1); "
      f"loss-augmented LP: {len(augmented.cuts[0])} cuts")
print("the subgradient moves the unary scores toward the truth at",
      int((unary_t.grad.abs().sum(1) > 0).sum()), "of", H * W, "pixels")

# %%
# :class:`~structtorch.lp.RelaxedHingeLoss` is the same loss as a module for
# :func:`structtorch.train.fit`, and :class:`~structtorch.lp.GraphStructure` makes graph labelings a
# structure for the cutting-plane solver (``fit(..., solver="cutting_plane")``, a duality-gap
# certificate); ``examples/connected_segmentation.py`` trains both ways.

# %%
# What the graph layers cost in a training loop
# ---------------------------------------------
# Both losses sit on top of a network. Here a small CNN reads synthetic images
# (:func:`structtorch.data.synthetic_objects`: a bar on clutter, 4 features per node of a 12 x 12
# grid) and outputs the unary scores; a learned Potts strength gives the pairwise ones. Two models
# train for 4 epochs on 16 images in batches of 8: the smoothed layer on the expected Hamming
# loss ``mean_i (1 - mu_i(y_i))``, and the relaxed hinge with soft connectivity of the bar, whose
# :class:`~structtorch.lp.WarmStart` keeps each image's cuts, LP and cut pool from one epoch
# to the next (``ids`` are the image indices), at most 5 LP solves per step
# (the loss-augmented LPs grow fractional as the network sharpens its scores, and their cutting
# planes then dominate the step). Each step times the network (forward and backward) apart from
# the structured loss. ``examples/vision_segmentation.py`` runs the same
# comparison with a ResNet-18 stem, and ``benchmarks/lp_layers.py`` measures the layers alone.
from torch import nn

from structtorch.data import synthetic_objects

torch.manual_seed(0)
objects = synthetic_objects(16, "bar", H=12, W=12, num_features=4, noise=1.0, seed=3)
images = objects.x.transpose(1, 2).reshape(16, 4, 12, 12).float()  # (n, channels, H, W)
grid = objects.edges


def make_model():
    torch.manual_seed(0)
    cnn = nn.Sequential(nn.Conv2d(4, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(),
                        nn.Conv2d(16, 1, 1))
    return cnn, torch.zeros((), requires_grad=True)  # the CNN and the Potts strength


def train_graph_model(kind, epochs=4):
    cnn, potts_strength = make_model()
    opt = torch.optim.Adam([*cnn.parameters(), potts_strength], lr=0.003)
    layer = lp.MAPRelaxation(grid, 2, smoothing=0.5)
    warm = lp.WarmStart()
    history = []
    for _ in range(epochs):
        losses, t_net, t_struct = [], [], []
        for idx in torch.randperm(16).split(8):
            t0 = time.perf_counter()
            score = cnn(images[idx]).flatten(1).double()  # (B, V): label 1's score
            t1 = time.perf_counter()
            leaf = score.detach().requires_grad_()
            unary_b = torch.stack([torch.zeros_like(leaf), leaf], 2)  # (B, V, 2)
            pairwise_b = (potts_strength.double() * torch.eye(2, dtype=torch.float64)).expand(len(grid), 2, 2)
            target_b = objects.labels[idx]
            if kind == "MAPRelaxation":
                mu_b = layer(unary_b, pairwise_b)
                loss_b = (1 - mu_b.gather(2, target_b.unsqueeze(2))).mean()
            else:
                loss_b = lp.relaxed_hinge(unary_b, pairwise_b, grid, target_b, connected_soft={1: 0.5},
                                          warm_start=warm, ids=idx, max_iter=5, num_workers=1)
            opt.zero_grad()
            loss_b.backward()
            t2 = time.perf_counter()
            score.backward(leaf.grad)
            opt.step()
            t3 = time.perf_counter()
            losses.append(loss_b.item())
            t_net.append((t1 - t0) + (t3 - t2))
            t_struct.append(t2 - t1)
        history.append((sum(losses) / len(losses), 1e3 * sum(t_net) / len(t_net), 1e3 * sum(t_struct) / len(t_struct)))
    return history


histories = {kind: train_graph_model(kind) for kind in ("MAPRelaxation", "relaxed hinge (soft, warm)")}
for kind, history in histories.items():
    print(kind)
    for epoch, (loss_e, net_ms, struct_ms) in enumerate(history, 1):
        print(f"  epoch {epoch}: loss {loss_e:.4f}, per batch: network {net_ms:.1f} ms, structured {struct_ms:.1f} ms")

if PLOT:
    fig, axes = plt.subplots(1, 3, figsize=(10, 3))
    for col, (kind, history) in enumerate(histories.items()):
        epochs_axis = range(1, len(history) + 1)
        axes[0].plot(epochs_axis, [h[0] / history[0][0] for h in history], marker="o", label=kind)
        axes[col + 1].bar(epochs_axis, [h[1] for h in history], label="network fwd+bwd")
        axes[col + 1].bar(epochs_axis, [h[2] for h in history], bottom=[h[1] for h in history],
                          label="structured loss fwd+bwd")
        axes[col + 1].set_title(kind, fontsize=8)
        axes[col + 1].set_xlabel("epoch")
        axes[col + 1].set_ylabel("ms per batch of 8")
    axes[0].set_xlabel("epoch")
    axes[0].set_ylabel("training loss / first epoch's")
    axes[0].legend(fontsize=7)
    axes[2].legend(fontsize=7)
    fig.tight_layout()
    plt.show()

# %%
# Graph partitioning: the multicut polytope
# -----------------------------------------
# Partitioning a graph into any number of clusters is a binary labeling of its *edges*
# (``z_e = 1``: cut). :func:`~structtorch.lp.multicut` minimizes ``sum_e w_e z_e`` over the cycle
# relaxation (LP-C) or with odd-wheel cuts too (LP-CO); an integral solution certifies the optimal
# partition. Modularity clustering of Zachary's karate club is such a problem over all pairs of
# members, with weights from :func:`~structtorch.lp.modularity_weights`.
karate = nx.karate_club_graph()
pairs, w = lp.modularity_weights(karate)
part = lp.multicut(pairs, w, relaxation="cycle+oddwheel")
print(f"modularity {-2 * part.objective:.4f}, integral (certified optimal) {part.integral}, "
      f"{int(part.clusters.max()) + 1} clusters, {len(part.cuts)} cuts, {part.iterations} LP solves, "
      f"{part.time:.2f} s")
print("cluster of each member:", part.clusters.tolist())
print("networkx agrees:", round(lp.modularity(karate, part.clusters), 4))

# %%
# The cycle relaxation alone can be fractional: on this K4 instance (Fig. 64 of the thesis) LP-C
# stops at z = 1/2 on several edges; the odd-wheel cuts make it integral.
k4 = torch.tensor([[0, 1], [1, 2], [1, 3], [0, 2], [0, 3], [2, 3]])
wk4 = torch.tensor([0.2, 0.8, 0.9, -0.7, -0.9, -0.9], dtype=torch.float64)
for relaxation in lp.RELAXATIONS:
    sol = lp.multicut(k4, wk4, relaxation=relaxation)
    print(f"{relaxation:>15}: objective {sol.objective:+.2f}, integral {sol.integral}, "
          f"z = {[round(v, 2) for v in sol.z.tolist()]}")

# %%
# Stability ranges
# ----------------
# An optimal solution z* stays optimal for the weights ``w + theta d`` over an interval of theta,
# ``[rho_minus, rho_plus]`` (:func:`~structtorch.lp.stability_range`, Nowozin ch. 7). With
# ``d = e_m`` (one weight moved alone) this tells how much each weight may be wrong before the
# partition changes (:func:`~structtorch.lp.variable_stability`). Here for a correlation
# clustering of 9 items in three noisy groups (:func:`~structtorch.lp.correlation_weights` of a
# similarity matrix, shifted so that unlike items repel).
group = torch.arange(9) % 3
sim = torch.where(group[:, None] == group[None, :], 0.7, 0.3) + 0.2 * torch.randn(9, 9, generator=g,
                                                                               dtype=torch.float64)
pairs9, w9 = lp.correlation_weights(((sim + sim.T) / 2).double())
sol = lp.multicut(pairs9, w9 - 0.5)
print("clusters:", sol.clusters.tolist(), "integral:", sol.integral)
ranges = lp.variable_stability(sol)  # (E, 2): [rho_minus, rho_plus] per pair
cut = (sol.z > 0.5).nonzero().flatten()
kept = (sol.z < 0.5).nonzero().flatten()
for name, among, side in (("cut", cut, 1), ("kept", kept, 0)):
    e = int(among[ranges[among, side].abs().argmin()])  # the least stable pair of each kind
    a, b = pairs9[e].tolist()
    print(f"pair ({a}, {b}) {name}: the partition stays optimal while its weight moves within "
          f"[{ranges[e, 0]:+.3f}, {ranges[e, 1]:+.3f}]")
print("weight shifts the partition tolerates, per pair: at least", round(float(ranges.abs().min()), 3))
d = torch.zeros(len(pairs9), dtype=torch.float64)
d[0] = 1.0  # any direction d: here pair (0, 1) alone
print("range along d = e_0:", lp.stability_range(sol, d))

# %%
# Along one direction the optimal solutions form a path of intervals
# (:func:`~structtorch.lp.solution_path`): here a common shift of all pair weights, from "split
# everything" to "one cluster".
ones = torch.ones(len(pairs9), dtype=torch.float64)
for (lo, hi), step in lp.solution_path(sol, ones, -0.5, 0.5):
    print(f"theta in [{lo:+.3f}, {hi:+.3f}]: {int(step.clusters.max()) + 1} clusters")

# %%
# The same question for a labeling: :func:`~structtorch.lp.node_stability` gives, for each node of
# an integral MAP labeling, how much energy its chosen label can take before the optimal labeling
# changes; a non-probabilistic confidence map. Low values mark the pixels the labeling is least
# sure of (here printed as digits, 0 = least stable).
began = time.perf_counter()
stab = lp.node_stability(plain)
finite = torch.where(torch.isfinite(stab), stab, stab[torch.isfinite(stab)].max())
level = (9 * finite / finite.max()).round().long()
print(f"node stability of the MRF labeling ({time.perf_counter() - began:.1f} s), beside the labeling:")
for i in range(H):
    print("".join(str(int(v)) for v in level[i * W:(i + 1) * W]) + "   "
          + "".join("#" if int(mrf[i * W + j]) else "." for j in range(W)))
