"""Chain DPs against brute-force enumeration of every labeling (both backends)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from brute import brute_best, brute_logsumexp, brute_marginals, enumerate_row, instances, pad
from hypothesis import given

import structtorch as st


@given(inst=instances())
def test_viterbi_matches_enumeration(backend, inst):
    score, path = st.viterbi(*inst.args(), **inst.kwargs)
    B, T, _ = inst.unary.shape
    assert score.shape == (B,) and path.shape == (B, T) and path.dtype == torch.int64
    for b in range(B):
        best, y = brute_best(enumerate_row(inst, b))
        if y is None:
            assert score[b] == float("-inf")
            assert (path[b] == -1).all()
        else:
            assert np.isclose(float(score[b]), best, rtol=0, atol=1e-9)
            assert path[b].tolist() == pad(y, T)


@given(inst=instances())
def test_log_partition_matches_enumeration(backend, inst):
    logz = st.log_partition(*inst.args(), **inst.kwargs)
    for b in range(inst.unary.shape[0]):
        expected = brute_logsumexp([s for _, s in enumerate_row(inst, b)])
        if expected == -np.inf:
            assert logz[b] == float("-inf")
        else:
            assert np.isclose(float(logz[b]), expected, rtol=inst.tol, atol=inst.tol)


@given(inst=instances())
def test_marginals_match_enumeration(backend, inst):
    marg = st.marginals(*inst.args(), **inst.kwargs)
    assert marg.shape == inst.unary.shape
    for b in range(inst.unary.shape[0]):
        np.testing.assert_allclose(marg[b].numpy(), brute_marginals(inst, b), atol=inst.tol)


@given(inst=instances(max_t=5))
def test_kbest_matches_enumeration(backend, inst):
    k = 5
    scores, paths = st.kbest(*inst.args(), k, **inst.kwargs)
    B, T, _ = inst.unary.shape
    assert scores.shape == (B, k) and paths.shape == (B, k, T)
    finite = scores[:, :-1] > float("-inf")
    assert (scores[:, :-1][finite] >= scores[:, 1:][finite]).all(), "scores must be descending"
    for b in range(B):
        rows = enumerate_row(inst, b)
        table = {tuple(y): s for y, s in rows}
        feasible = sorted((s for s in table.values() if s > -np.inf), reverse=True)
        n = min(k, len(feasible))
        np.testing.assert_allclose(scores[b, :n].numpy(), feasible[:n], atol=1e-9)
        assert (scores[b, n:] == float("-inf")).all() and (paths[b, n:] == -1).all()
        got = [tuple(p[: int(inst.lengths[b])]) for p in paths[b, :n].tolist()]
        assert len(set(got)) == n, "k-best labelings must be distinct"
        for y, s in zip(got, scores[b, :n].tolist(), strict=False):
            assert np.isclose(table[y], s, atol=1e-9)
        assert (paths[b, :n, int(inst.lengths[b]):] == -1).all()


@given(inst=instances())
def test_path_score_matches_enumeration(backend, inst):
    B, T, N = inst.unary.shape
    rng = np.random.default_rng(0)
    labels = torch.tensor(rng.integers(0, N, size=(B, T)))
    got = st.path_score(*inst.args(), labels, **inst.kwargs)
    for b in range(B):
        table = dict(enumerate_row(inst, b))
        y = tuple(labels[b, : int(inst.lengths[b])].tolist())
        expected = table[y]
        assert (got[b] == expected) if expected == -np.inf else np.isclose(float(got[b]), expected)


@given(inst=instances())
def test_batched_equals_per_example(backend, inst):
    """Padding never leaks: each row alone, cropped to its length, gives the same answers."""
    score, path = st.viterbi(*inst.args(), **inst.kwargs)
    logz = st.log_partition(*inst.args(), **inst.kwargs)
    marg = st.marginals(*inst.args(), **inst.kwargs)
    for b in range(inst.unary.shape[0]):
        L = int(inst.lengths[b])
        trans = inst.transitions
        if trans.dim() == 4:
            trans = trans[b : b + 1, : max(L - 1, 0)]
        kw = {
            "start": inst.start if inst.start is None or inst.start.dim() == 1 else inst.start[b : b + 1],
            "end": inst.end if inst.end is None or inst.end.dim() == 1 else inst.end[b : b + 1],
        }
        u = inst.unary[b : b + 1, :L]
        s1, p1 = st.viterbi(u, trans, **kw)
        assert torch.equal(p1[0], path[b, :L]) and (path[b, L:] == -1).all()
        torch.testing.assert_close(s1[0], score[b], rtol=0, atol=1e-12)
        torch.testing.assert_close(st.log_partition(u, trans, **kw)[0], logz[b])
        torch.testing.assert_close(st.marginals(u, trans, **kw)[0], marg[b, :L])
        assert (marg[b, L:] == 0).all()


@given(inst=instances(max_t=8, max_n=5))
def test_backends_agree(inst):
    from conftest import use_backend

    with use_backend("compiled"):
        a = st.viterbi(*inst.args(), **inst.kwargs), st.log_partition(*inst.args(), **inst.kwargs)
    with use_backend("torch"):
        b = st.viterbi(*inst.args(), **inst.kwargs), st.log_partition(*inst.args(), **inst.kwargs)
    assert torch.equal(a[0][1], b[0][1])
    torch.testing.assert_close(a[0][0], b[0][0])
    torch.testing.assert_close(a[1], b[1])


def test_documented_tie_break(backend):
    """All-zero potentials: every labeling ties; the answer is all zeros (smallest labels)."""
    score, path = st.viterbi(torch.zeros(2, 5, 3), torch.zeros(3, 3), lengths=torch.tensor([5, 3]))
    assert score.tolist() == [0.0, 0.0]
    assert path.tolist() == [[0, 0, 0, 0, 0], [0, 0, 0, -1, -1]]


def test_no_feasible_path_gives_minus_inf(backend):
    """Transitions forbid every move: length 1 is feasible, length >= 2 is not."""
    u = torch.zeros(3, 4, 2)
    A = torch.full((2, 2), float("-inf"))
    lengths = torch.tensor([4, 1, 0])
    score, path = st.viterbi(u, A, lengths=lengths)
    assert score.tolist() == [float("-inf"), 0.0, 0.0]
    assert path.tolist() == [[-1] * 4, [0, -1, -1, -1], [-1] * 4]
    logz = st.log_partition(u, A, lengths=lengths)
    assert logz[0] == float("-inf") and np.isclose(float(logz[1]), np.log(2)) and logz[2] == 0
    u.requires_grad_(True)
    st.log_partition(u, A, lengths=lengths).sum().backward()
    assert torch.isfinite(u.grad).all() and (u.grad[0] == 0).all()
    assert torch.allclose(u.grad[1, 0], torch.tensor([0.5, 0.5]))


def test_float32_long_chain_matches_float64(backend):
    torch.manual_seed(0)
    u = torch.randn(2, 300, 5, dtype=torch.float64)
    A = torch.randn(5, 5, dtype=torch.float64)
    with st.use_backend("torch"):  # the float64 reference (the PyTorch code; interpreted triton is slow)
        s64, p64 = st.viterbi(u, A)
        l64 = st.log_partition(u, A)
    s32, p32 = st.viterbi(u.float(), A.float())
    assert s32.dtype == torch.float32 and torch.equal(p32, p64)
    torch.testing.assert_close(s32.double(), s64, rtol=1e-5, atol=1e-3)
    l32 = st.log_partition(u.float(), A.float())
    assert l32.dtype == torch.float32
    torch.testing.assert_close(l32.double(), l64, rtol=1e-5, atol=1e-3)


def test_extreme_ranges_stay_exact(backend):
    """Scores spanning thousands of nats (forcing the exact fallbacks) keep logZ and marginals."""
    u = torch.tensor([[[0.0, -2000.0], [-2000.0, 0.0], [0.0, 0.0]]], dtype=torch.float64)
    A = torch.tensor([[-3000.0, 0.0], [0.0, -1000.0]], dtype=torch.float64)
    logz = st.log_partition(u, A)
    # labelings: y=(0,1,0) -> 0 and y=(0,1,1) -> -1000; all others <= -2000
    assert np.isclose(float(logz[0]), 0.0, atol=1e-12)
    marg = st.marginals(u, A)
    torch.testing.assert_close(marg[0], torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]], dtype=torch.float64))


def test_kbest_rounding_near_ties_stay_sorted():
    """0.1 + 0.1 + 0.7 and 0.1 + 0.6 + 0.2 tie exactly but round differently in float64."""
    d = torch.float64
    scores, paths = st.kbest(torch.tensor([[[0.1, 0.6]]], dtype=d), torch.zeros(2, 2, dtype=d), 2,
                             start=torch.tensor([0.1, 0.1], dtype=d), end=torch.tensor([0.7, 0.2], dtype=d))
    assert scores[0, 0] >= scores[0, 1]
    assert sorted(paths[0, :, 0].tolist()) == [0, 1]


@pytest.mark.parametrize("fn", [st.marginals, st.log_partition, st.viterbi])
def test_inference_mode(backend, fn):
    with torch.inference_mode():
        u, A = torch.randn(2, 4, 3), torch.randn(3, 3)
        out = fn(u, A, lengths=torch.tensor([4, 2]))
    expected = fn(u.clone(), A.clone(), lengths=torch.tensor([4, 2]))
    for a, b in zip(out if isinstance(out, tuple) else (out,), expected if isinstance(expected, tuple) else (expected,),
                    strict=True):
        torch.testing.assert_close(a, b.detach())


def test_marginals_sum_to_one_at_large_magnitudes(backend):
    torch.manual_seed(0)
    u = 1e8 * torch.randn(3, 20, 4, dtype=torch.float64)
    A = 1e8 * torch.randn(4, 4, dtype=torch.float64)
    marg = st.marginals(u, A)
    torch.testing.assert_close(marg.sum(-1), torch.ones(3, 20, dtype=torch.float64), atol=1e-12, rtol=0)
