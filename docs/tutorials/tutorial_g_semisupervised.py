"""
Semi-supervised structured learning with a kNN graph
====================================================

Labels are expensive, unlabeled sequences cheap. Altun, McAllester & Belkin (2005) add unlabeled
data to structured max-margin learning through a similarity graph over the *tokens* of labeled
and unlabeled sequences: part scores that differ across a heavily weighted edge are penalized
(``lam2 f^T L f``, L the graph Laplacian, eq. 9). :mod:`structtorch.semisup` gives that
regularizer two ways:

- as a kernel: the graph-regularized kernel ``k~`` turns the problem into a *supervised*
  structural SVM over the labeled tokens (a representer theorem), defined for any new token, and
  trained by BCFW with a duality-gap certificate;
- as a penalty, :func:`~structtorch.semisup.laplacian_penalty`, for any other potential model,
  e.g. a neural encoder trained by gradient steps.

The data are :func:`structtorch.data.pitch_accent_like` chains: binary labels with strong
dependencies between neighbours, and 31-dimensional token features on two wrinkled sheets, one
per label, close in Euclidean distance but each connected along itself, so that a kNN graph
over many tokens links tokens of one label.
"""

# %%
# Data: a few labeled sequences, many unlabeled ones
# --------------------------------------------------
# 10 labeled sequences, 150 unlabeled ones (their labels are never used) and a test set.
# Kernels need float64 observations; ``tokens`` collects the observations inside the lengths.
import functools
import time

import torch

import structtorch as st
from structtorch import semisup
from structtorch.data import SequenceData, pitch_accent_like

pool = pitch_accent_like(160, seed=1)
pool = SequenceData(pool.x.double(), pool.labels, pool.lengths)
test = pitch_accent_like(100, seed=2)
test = SequenceData(test.x.double(), test.labels, test.lengths)
labeled = SequenceData(pool.x[:10], pool.labels[:10], pool.lengths[:10])
unlabeled = SequenceData(pool.x[10:], pool.labels[10:], pool.lengths[10:])


def tokens(data):
    """(n_tokens, D): the observations of all tokens of the sequences."""
    inside = torch.arange(data.x.shape[1]) < data.lengths[:, None]
    return data.x[inside]


x_l, x_u = tokens(labeled), tokens(unlabeled)
print(f"{len(x_l)} labeled tokens in {len(labeled)} sequences, {len(x_u)} unlabeled tokens, "
      f"{int(test.lengths.sum())} test tokens; {x_l.shape[1]} features")
print("labels of the first sequence:", labeled.labels[0, :int(labeled.lengths[0])].tolist())

# %%
# The graph
# ---------
# :func:`~structtorch.semisup.knn_graph` links each token to its 5 nearest neighbours (exact brute
# force, no ``n x n`` matrix), with heat-kernel weights; it returns a sparse symmetric ``(n, n)``
# tensor. How often do neighbours share their (hidden) label?
x_all = torch.cat([x_l, x_u])
y_all = torch.cat([labeled.labels[torch.arange(labeled.x.shape[1]) < labeled.lengths[:, None]],
                   unlabeled.labels[torch.arange(unlabeled.x.shape[1]) < unlabeled.lengths[:, None]]])
began = time.perf_counter()
W = semisup.knn_graph(x_all, 5)
i, j = W.coalesce().indices()
print(f"{W._nnz()} directed edges over {len(x_all)} tokens in {time.perf_counter() - began:.2f} s; "
      f"{float((y_all[i] == y_all[j]).double().mean()):.1%} of them join tokens of one label")

# %%
# The graph-regularized kernel
# ----------------------------
# From an RBF base kernel ``k``, :class:`~structtorch.semisup.GraphRegularizedKernel` builds
# ``k~(x, z) = (1/lam1) [k(x, z) - k_x^T (I + M K)^-1 M k_z]`` with ``M = (lam2/lam1) L`` over all
# the graph's tokens. The paper's ratio lam1 : lam2 = 1 : 9 is taken per token here, times a graph
# weight c. :class:`~structtorch.semisup.KernelChainPotentials` scores each (label, token) part by
# ``sum_i beta[label, i] k~(x_i, token)`` over the labeled tokens, plus learned transitions
# (``transitions=False`` gives the per-token SVM with the same kernel). BCFW
# (``solver="bcfw"``) solves the dual of eq. 15; ``l2=2 / n`` makes ``fit``'s objective eq. 15
# divided by n, with the model's own regularizer ``beta^T K~ beta``.
scale = float(torch.cdist(x_l, x_l).pow(2).mean())
kernel_fn = functools.partial(semisup.rbf_kernel, gamma=1.0 / scale)
lam1 = 0.05


def graph_kernel(x_graph, graph_weight):
    """k~ over the tokens of the graph, lam2 = 9 lam1 c / n."""
    W = semisup.knn_graph(x_graph, 5)
    return semisup.GraphRegularizedKernel(kernel_fn, x_graph, W, lam1, 9 * lam1 * graph_weight / len(x_graph))


def train_and_test(kernel, structured):
    model = semisup.KernelChainPotentials(kernel, x_l, num_labels=2, transitions=structured, inputs="rows")
    rows = SequenceData(model.kernel_rows(labeled.x).detach(), labeled.labels, labeled.lengths)
    st.train.fit(model, rows, None, solver="bcfw", epochs=30, l2=2 / len(rows), progress=False, metrics=())
    with torch.no_grad():
        unary, transitions = model(model.kernel_rows(test.x))  # any new tokens: out of sample
        _, path = st.viterbi(unary, transitions, lengths=test.lengths)
    return st.train.accuracy(path, test.labels, test.lengths)


began = time.perf_counter()
print(f"{'graph over':<28} {'SVM':>6} {'STR':>6}   (test accuracy)")
for name, x_graph, c in (("labeled tokens only", x_l, 0.0), ("labeled + unlabeled tokens", x_all, 100.0)):
    kernel = graph_kernel(x_graph, c)
    svm, chain = (train_and_test(kernel, structured) for structured in (False, True))
    print(f"{name:<28} {svm:6.3f} {chain:6.3f}")
print(f"({time.perf_counter() - began:.1f} s)")

# %%
# The chain (STR) beats per-token classification (SVM), and with the unlabeled tokens in the graph
# the chain gains a little more at this size (gains depend on the draw of labeled sequences:
# ``examples/semisupervised.py`` averages over several, beside the paper's Table 1). The kernel is
# defined out of sample: the test tokens were not in the graph.
# :class:`~structtorch.semisup.TransductiveKernel` is the paper's eq. 18 kernel, defined on the
# graph's tokens only, for comparison.
#
# The same regularizer for any model
# ----------------------------------
# Kernels stop at a few thousand tokens (the kernel factors an ``n x n`` system once; beyond 6,000
# points it runs conjugate gradients). For any other potential model the Laplacian term is a
# penalty on the scores of the graph's tokens, ``tr(F^T L F) = 1/2 sum_ij W_ij ||f_i - f_j||^2``:
# here an MLP encoder and a transition matrix, trained with the structured hinge on the labeled
# sequences plus the penalty on all tokens.


def train_mlp(weight, steps=150):
    torch.manual_seed(0)
    encoder = torch.nn.Sequential(torch.nn.Linear(31, 32), torch.nn.Tanh(), torch.nn.Linear(32, 2)).double()
    transitions = torch.zeros(2, 2, dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.Adam([*encoder.parameters(), transitions], lr=1e-2)
    hinge = st.StructuredHingeLoss()
    for _ in range(steps):
        loss = hinge(encoder(labeled.x), transitions, labeled.labels, lengths=labeled.lengths)
        if weight:
            loss = loss + weight * semisup.laplacian_penalty(encoder(x_all), W) / len(x_all)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        _, path = st.viterbi(encoder(test.x), transitions, lengths=test.lengths)
    return st.train.accuracy(path, test.labels, test.lengths)


began = time.perf_counter()
for weight in (0.0, 10.0):
    print(f"MLP + transitions, Laplacian penalty weight {weight:4.1f}: test accuracy {train_mlp(weight):.3f}")
print(f"({time.perf_counter() - began:.1f} s)")

# %%
# ``examples/semisupervised.py`` reproduces the paper's Tables 1 and 2 (pitch-accent-like chains
# and OCR-like digit words), with the RBF width and the graph weight chosen by cross-validation.
