"""Gradients: path indicators for max DPs, marginals for the log-partition, gradcheck in float64."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from brute import brute_edge_marginals, enumerate_row, instances
from hypothesis import given

import structtorch as st


def leaf(x):
    return None if x is None else x.clone().requires_grad_(True)


def grad_or_zero(x):
    return None if x is None else (torch.zeros_like(x) if x.grad is None else x.grad)


def fold_boundary(per_row: torch.Tensor, like):
    """(B, N) per-row boundary gradients, summed over B when the boundary was given as (N,)."""
    if like is None:
        return None
    return per_row.sum(0) if like.dim() == 1 else per_row


@given(inst=instances())
def test_viterbi_gradient_is_path_indicator(backend, inst):
    u, A, s, e = leaf(inst.unary), leaf(inst.transitions), leaf(inst.start), leaf(inst.end)
    score, path = st.viterbi(u, A, start=s, end=e, lengths=inst.lengths)
    weights = torch.arange(1.0, len(score) + 1, dtype=u.dtype)
    feasible = torch.isfinite(score)
    (score[feasible] * weights[feasible]).sum().backward()
    B, T, N = u.shape
    gu, gA = torch.zeros_like(u), torch.zeros_like(A)
    gs, ge = torch.zeros(B, N, dtype=u.dtype), torch.zeros(B, N, dtype=u.dtype)
    for b in range(B):
        L = int(inst.lengths[b])
        if not feasible[b] or L == 0:
            continue
        y = path[b, :L].tolist()
        w = weights[b]
        for t in range(L):
            gu[b, t, y[t]] += w
        for t in range(L - 1):
            if A.dim() == 2:
                gA[y[t], y[t + 1]] += w
            else:
                gA[b, t, y[t], y[t + 1]] += w
        gs[b, y[0]] += w
        ge[b, y[-1]] += w
    torch.testing.assert_close(grad_or_zero(u), gu)
    torch.testing.assert_close(grad_or_zero(A), gA)
    for x, per_row in ((s, gs), (e, ge)):
        if x is not None:
            torch.testing.assert_close(grad_or_zero(x), fold_boundary(per_row, x))


@given(inst=instances())
def test_log_partition_gradient_is_marginals(backend, inst):
    u, A, s, e = leaf(inst.unary), leaf(inst.transitions), leaf(inst.start), leaf(inst.end)
    logz = st.log_partition(u, A, start=s, end=e, lengths=inst.lengths)
    weights = torch.arange(1.0, len(logz) + 1, dtype=u.dtype)
    finite = torch.isfinite(logz)
    (logz[finite] * weights[finite]).sum().backward()
    B, T, N = u.shape
    g_trans = torch.zeros_like(A, dtype=torch.float64)
    gs, ge = torch.zeros(B, N, dtype=torch.float64), torch.zeros(B, N, dtype=torch.float64)
    for b in range(B):
        node, edge = brute_edge_marginals(inst, b)
        w = weights[b].item()
        np.testing.assert_allclose(grad_or_zero(u)[b].double().numpy(), w * node, atol=inst.tol)
        if A.dim() == 2:
            g_trans += w * torch.from_numpy(edge.sum(0) if len(edge) else np.zeros(A.shape))
        else:
            g_trans[b] = w * torch.from_numpy(edge)
        L = int(inst.lengths[b])
        if L > 0:
            gs[b], ge[b] = w * torch.from_numpy(node[0]), w * torch.from_numpy(node[L - 1])
    tol = {"atol": inst.tol, "rtol": inst.tol}
    torch.testing.assert_close(grad_or_zero(A).double(), g_trans, **tol)
    for x, per_row in ((s, gs), (e, ge)):
        if x is not None:
            torch.testing.assert_close(grad_or_zero(x).double(), fold_boundary(per_row, x), **tol)


@pytest.mark.parametrize("shared", [True, False])
def test_gradcheck_log_partition(backend, shared):
    torch.manual_seed(1)
    B, T, N = 3, 5, 3
    u = torch.randn(B, T, N, dtype=torch.float64, requires_grad=True)
    A = torch.randn(*((N, N) if shared else (B, T - 1, N, N)), dtype=torch.float64, requires_grad=True)
    s = torch.randn(N, dtype=torch.float64, requires_grad=True)
    e = torch.randn(B, N, dtype=torch.float64, requires_grad=True)
    lengths = torch.tensor([5, 2, 1])
    f = lambda u, A, s, e: st.log_partition(u, A, start=s, end=e, lengths=lengths)  # noqa: E731
    with st.set_validation(False):  # many forward calls on valid inputs; the checks are tested elsewhere
        # interpreted triton: one random projection of the Jacobian (any wrong entry shows there)
        assert torch.autograd.gradcheck(f, (u, A, s, e), fast_mode=backend == "triton")


def _covariances(inst, b, weights):
    """By enumeration, for row b: Cov(indicator, s(y)) of every node, edge, first and last label,
    where s(y) = sum_t weights[t, y_t] (the gradient of sum(marginals * weights))."""
    rows = enumerate_row(inst, b)
    T, N = inst.unary.shape[1:]
    L = int(inst.lengths[b])
    node, edge = np.zeros((T, N)), np.zeros((max(T - 1, 0), N, N))
    first, last = np.zeros(N), np.zeros(N)
    finite = [(y, sc) for y, sc in rows if sc > -np.inf]
    if L == 0 or not finite:
        return node, edge, first, last
    top = max(sc for _, sc in finite)
    p = np.array([np.exp(sc - top) for _, sc in finite])
    p /= p.sum()
    s = np.array([sum(weights[t, j] for t, j in enumerate(y)) for y, _ in finite])
    centred = p * (s - p @ s)
    for (y, _), c in zip(finite, centred, strict=True):
        for t, j in enumerate(y):
            node[t, j] += c
        for t in range(L - 1):
            edge[t, y[t], y[t + 1]] += c
        first[y[0]] += c
        last[y[-1]] += c
    return node, edge, first, last


@given(inst=instances(max_t=5, max_n=3))
def test_marginals_gradient_is_a_covariance(backend, inst):
    """The backward of the node marginals (the Hessian of logZ times the upstream gradient) against
    enumeration: d sum(mu * W) / d theta = Cov(indicator of theta, sum_t W[t, y_t])."""
    u, A, s, e = leaf(inst.unary), leaf(inst.transitions), leaf(inst.start), leaf(inst.end)
    B, T, N = u.shape
    W = torch.randn(B, T, N, generator=torch.Generator().manual_seed(B * 100 + T * 10 + N), dtype=u.dtype)
    out = (st.marginals(u, A, start=s, end=e, lengths=inst.lengths) * W).sum()
    if out.requires_grad:  # not on empty chains (T = 0): constant zeros
        out.backward()
    parts = [_covariances(inst, b, W[b].double().numpy()) for b in range(B)]
    node, edge, first, last = (np.stack(x) for x in zip(*parts, strict=True))
    tol = dict(atol=1e-8, rtol=1e-6) if u.dtype == torch.float64 else dict(atol=1e-4, rtol=1e-3)
    check = lambda got, want: torch.testing.assert_close(got, torch.as_tensor(want, dtype=u.dtype), **tol)  # noqa: E731
    check(grad_or_zero(u), node)
    check(grad_or_zero(A), edge.sum((0, 1)) if A.dim() == 2 else edge)
    for x, per_row in ((s, first), (e, last)):
        if x is not None:
            check(grad_or_zero(x), fold_boundary(torch.as_tensor(per_row), x))


def test_gradcheck_marginals(backend):
    torch.manual_seed(2)
    B, T, N = 2, 4, 3
    u = torch.randn(B, T, N, dtype=torch.float64, requires_grad=True)
    A = torch.randn(N, N, dtype=torch.float64, requires_grad=True)
    A_masked = torch.tensor([[0.0, float("-inf"), 0.0]] * 3, dtype=torch.float64)
    lengths = torch.tensor([4, 3])
    f = lambda u, A: st.marginals(u, A + A_masked, lengths=lengths)  # noqa: E731
    with st.set_validation(False):  # many forward calls on valid inputs; the checks are tested elsewhere
        # the interpreted Triton kernels: random projections (test_marginals_gradient_is_a_covariance
        # checks every entry against enumeration)
        assert torch.autograd.gradcheck(f, (u, A), fast_mode=backend == "triton")
        assert torch.autograd.gradgradcheck(lambda u: st.log_partition(u, A.detach(), lengths=lengths), (u,))


def test_kbest_scores_are_differentiable():
    torch.manual_seed(3)
    u = torch.randn(1, 3, 2, dtype=torch.float64, requires_grad=True)
    A = torch.randn(2, 2, dtype=torch.float64)
    scores, paths = st.kbest(u, A, 2)
    scores[0, 1].backward()
    expected = torch.zeros_like(u)
    for t, j in enumerate(paths[0, 1].tolist()):
        expected[0, t, j] = 1
    torch.testing.assert_close(u.grad, expected)


def test_viterbi_gradient_through_expanded_start():
    """start given as (N,) is shared by the batch: its gradient sums the first-label indicators."""
    u = torch.tensor([[[1.0, 0.0]], [[1.0, 0.0]], [[0.0, 1.0]]])
    s = torch.zeros(2, requires_grad=True)
    score, _ = st.viterbi(u, torch.zeros(2, 2), start=s)
    score.sum().backward()
    assert s.grad.tolist() == [2.0, 1.0]


def test_enumeration_helper_counts():
    """Guard for the brute force itself: N^L labelings per row."""
    inst = type("I", (), {})()
    inst.unary = torch.zeros(1, 3, 2, dtype=torch.float64)
    inst.transitions = torch.zeros(2, 2, dtype=torch.float64)
    inst.start = inst.end = None
    inst.lengths = torch.tensor([3])
    rows = enumerate_row(inst, 0)
    assert sorted(y for y, _ in rows) == list(itertools.product(range(2), repeat=3))


@pytest.mark.parametrize("shared", [True, False])
def test_gradient_when_factored_scales_overflow(backend, shared):
    """Row maxima and column maxima point different ways by 1000 nats: the exact edge path runs."""
    u = torch.tensor([[[0.0, float("-inf")], [-1000.0, 0.0]]], dtype=torch.float64, requires_grad=True)
    A0 = torch.tensor([[0.0, -1000.0], [0.0, 0.0]], dtype=torch.float64)
    A = (A0 if shared else A0.expand(1, 1, 2, 2)).clone().requires_grad_(True)
    logz = st.log_partition(u, A)
    assert np.isclose(logz.item(), -1000.0 + np.log(2.0))
    logz.backward()
    torch.testing.assert_close(u.grad[0], torch.tensor([[1.0, 0.0], [0.5, 0.5]], dtype=torch.float64))
    torch.testing.assert_close(A.grad.reshape(2, 2), torch.tensor([[0.5, 0.5], [0.0, 0.0]], dtype=torch.float64))


@given(inst=instances(max_t=9, max_n=5))
def test_backend_gradients_agree(inst):
    from conftest import use_backend

    grads = []
    for name in ("compiled", "torch"):
        with use_backend(name):
            u, A, s, e = leaf(inst.unary), leaf(inst.transitions), leaf(inst.start), leaf(inst.end)
            logz = st.log_partition(u, A, start=s, end=e, lengths=inst.lengths)
            logz[torch.isfinite(logz)].sum().backward()
            grads.append([grad_or_zero(x) for x in (u, A, s, e) if x is not None])
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("shared", [True, False])
def test_log_partition_saves_linear_memory(shared):
    """The compiled path keeps O(B T N) for the backward beyond the inputs, never O(B T N^2)."""
    from conftest import use_backend

    B, T, N = 4, 60, 40
    u = torch.randn(B, T, N, requires_grad=True)
    A = torch.randn(*((N, N) if shared else (B, T - 1, N, N)), requires_grad=True)
    saved = []

    def pack(x):
        saved.append(x)
        return x

    with use_backend("compiled"), torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x):
        st.log_partition(u, A)
    inputs = {u.data_ptr(), A.data_ptr()}
    extra = sum(x.numel() * x.element_size() for x in saved if x.data_ptr() not in inputs)
    assert extra <= 3 * B * T * N * 8 + 4096, extra
