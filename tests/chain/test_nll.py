"""The CRF loss logZ - score(labels) (``chain_nll``; fused into one launch forward and one backward
on the Triton backend) against enumeration: values, +inf conventions and gradients (the marginals
minus the labeling's indicators), on every backend."""

from __future__ import annotations

import numpy as np
import torch
from brute import brute_edge_marginals, brute_logsumexp, enumerate_row, instances
from chain.test_chain_grad import fold_boundary, grad_or_zero, leaf
from hypothesis import given
from hypothesis import strategies as hst

import structtorch as st


def _labels(inst, seed):
    B, T, N = inst.unary.shape
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, N, (B, T), generator=g)
    outside = torch.arange(T) >= inst.lengths[:, None]
    return torch.where(outside, -100, labels)  # anything beyond the lengths (the HF ignore index here)


def _brute(inst, b, y):
    """(nll, node (T, N), edge (T-1, N, N)): logZ - score(y) and its gradient w.r.t. unary and
    per-position transitions, by enumeration."""
    rows = enumerate_row(inst, b)
    logz = brute_logsumexp([s for _, s in rows])
    gold = dict(rows)[tuple(y)]
    node, edge = brute_edge_marginals(inst, b)
    if logz == -np.inf:
        return np.inf, node, edge
    for t, j in enumerate(y):
        node[t, j] -= 1
    for t in range(len(y) - 1):
        edge[t, y[t], y[t + 1]] -= 1
    return logz - gold, node, edge


@given(inst=instances(), seed=hst.integers(0, 2**16))
def test_nll_and_its_gradient_match_enumeration(backend, inst, seed):
    u, A, s, e = leaf(inst.unary), leaf(inst.transitions), leaf(inst.start), leaf(inst.end)
    labels = _labels(inst, seed)
    nll = st.train.chain_nll(u, A, labels, start=s, end=e, lengths=inst.lengths, reduction="none")
    B, T, N = u.shape
    weights = torch.arange(1.0, B + 1, dtype=nll.dtype)
    expected, nodes, edges = [], [], []
    for b in range(B):
        L = int(inst.lengths[b])
        value, node, edge = _brute(inst, b, labels[b, :L].tolist())
        expected.append(value)
        nodes.append(node)
        edges.append(edge)
    expected = torch.tensor(expected, dtype=torch.float64)
    torch.testing.assert_close(nll.double(), expected, atol=inst.tol, rtol=inst.tol)
    finite = torch.isfinite(nll)
    (nll[finite] * weights[finite]).sum().backward()
    tol = {"atol": inst.tol, "rtol": inst.tol}
    w = weights.double().numpy()
    g_unary = np.stack([w[b] * nodes[b] * finite[b].item() for b in range(B)]) if B else np.zeros((0, T, N))
    torch.testing.assert_close(grad_or_zero(u).double(), torch.from_numpy(g_unary).reshape(B, T, N), **tol)
    per_step = np.stack([w[b] * edges[b] * finite[b].item() for b in range(B)])
    g_trans = per_step.sum((0, 1)) if A.dim() == 2 else per_step
    torch.testing.assert_close(grad_or_zero(A).double(), torch.from_numpy(np.asarray(g_trans)).reshape(A.shape),
                               **tol)
    gs, ge = np.zeros((B, N)), np.zeros((B, N))  # the first and last positions' unary gradients
    for b in range(B):
        L = int(inst.lengths[b])
        if L:
            gs[b], ge[b] = g_unary[b, 0], g_unary[b, L - 1]
    for x, per_row in ((s, gs), (e, ge)):
        if x is not None:
            torch.testing.assert_close(grad_or_zero(x).double(), fold_boundary(torch.from_numpy(per_row), x), **tol)


def test_nll_infeasible_row_and_forbidden_labeling(backend):
    u = torch.zeros(3, 3, 2, dtype=torch.float64, requires_grad=True)
    A = torch.tensor([[0.0, float("-inf")], [0.0, 0.0]], dtype=torch.float64, requires_grad=True)
    start = torch.tensor([[0.0, 0.0], [float("-inf")] * 2, [0.0, 0.0]], dtype=torch.float64)
    labels = torch.tensor([[0, 0, 0], [0, 0, 0], [0, 1, 1]])  # row 2 uses the forbidden 0 -> 1
    nll = st.train.chain_nll(u, A, labels, start=start, reduction="none")
    assert torch.isinf(nll[1]) and torch.isinf(nll[2]) and torch.isfinite(nll[0])
    nll[:2].sum().backward()  # the infeasible row contributes a zero gradient, never NaN
    assert torch.isfinite(u.grad).all() and (u.grad[1] == 0).all()


def test_gradcheck_nll(backend):
    torch.manual_seed(3)
    B, T, N = 3, 4, 3
    u = torch.randn(B, T, N, dtype=torch.float64, requires_grad=True)
    A = torch.randn(B, T - 1, N, N, dtype=torch.float64, requires_grad=True)
    s = torch.randn(N, dtype=torch.float64, requires_grad=True)
    labels = torch.randint(0, N, (B, T))
    lengths = torch.tensor([4, 2, 0])
    f = lambda u, A, s: st.train.chain_nll(u, A, labels, start=s, lengths=lengths, reduction="none")  # noqa: E731
    with st.set_validation(False):  # many forward calls on valid inputs; the checks are tested elsewhere
        # interpreted triton: one random projection of the Jacobian (any wrong entry shows there)
        assert torch.autograd.gradcheck(f, (u, A, s), fast_mode=backend == "triton")


def test_compiled_kernel_takes_labels_of_zero_length():
    """(B, 0) labels are labels (the CRF loss (B,) of zeros), not the empty "no labels" marker."""
    from structtorch._extension import fast_ops

    B, N = 2, 3
    u, A = torch.zeros(B, 0, N, dtype=torch.float64), torch.zeros(N, N, dtype=torch.float64)
    s = e = torch.zeros(B, N, dtype=torch.float64)
    lengths = torch.zeros(B, dtype=torch.long)
    ops = fast_ops()
    nll = ops.logz_forward(u, A, s, e, lengths, torch.zeros(B, 0, dtype=torch.long))[4]
    assert nll.shape == (B,) and (nll == 0).all()
    assert ops.logz_forward(u, A, s, e, lengths, None)[4].shape == (0,)
