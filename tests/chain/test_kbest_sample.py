"""k-best lists and sampling of chains on every backend: the k-best order against brute force
(ties included), the same lists and the same draws as the torch backend, the scores' gradients."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from brute import Instance, brute_logsumexp, enumerate_row, instances
from conftest import use_backend
from hypothesis import given
from scipy.stats import chisquare

import structtorch as st

NEG_INF = float("-inf")


def _expected_order(inst: Instance, b: int, k: int) -> list[tuple[tuple[int, ...], float]]:
    """The k best feasible labelings of row b in the documented order: score descending, then
    reverse-lexicographically smallest first (the first maximal index at every step)."""
    rows = [(y, s) for y, s in enumerate_row(inst, b) if s > NEG_INF]
    return sorted(rows, key=lambda row: (-row[1], tuple(reversed(row[0]))))[:k]


@given(inst=instances(max_t=5))
def test_kbest_order_matches_enumeration_with_ties(backend, inst):
    """On integer-valued potentials (exact sums, many ties) the lists are the enumeration's,
    in its order; the zero-length row has one empty labeling."""
    if inst.unary.dtype == torch.float64 and not bool((inst.unary[inst.unary > NEG_INF] % 1 == 0).all()):
        inst.unary = inst.unary.round()  # Gaussian instances: make the ties exact too
        inst.transitions = inst.transitions.round()
        inst.start = None if inst.start is None else inst.start.round()
        inst.end = None if inst.end is None else inst.end.round()
    k = 6
    scores, paths = st.kbest(*inst.args(), k, **inst.kwargs)
    B, T, _ = inst.unary.shape
    assert scores.dtype == inst.unary.dtype and paths.dtype == torch.int64 and paths.shape == (B, k, T)
    for b in range(B):
        L = int(inst.lengths[b])
        want = _expected_order(inst, b, k)
        n = len(want)
        assert [tuple(p[:L]) for p in paths[b, :n].tolist()] == [y for y, _ in want]
        assert scores[b, :n].tolist() == [s for _, s in want]
        assert (scores[b, n:] == NEG_INF).all() and (paths[b, n:] == -1).all() and (paths[b, :, L:] == -1).all()


def _chain_case(seed: int, dtype: torch.dtype, shared: bool):
    g = torch.Generator().manual_seed(seed)
    B, T, N = 4, 5, 3
    u = torch.randn(B, T, N, generator=g, dtype=torch.float64)
    a = torch.randn((N, N) if shared else (B, T - 1, N, N), generator=g, dtype=torch.float64)
    u[torch.rand(B, T, N, generator=g) < 0.15] = NEG_INF
    a[torch.rand(a.shape, generator=g) < 0.15] = NEG_INF
    a[..., 1, :] = NEG_INF  # row 3 below: label 1 leads nowhere
    u[3, 1:, 0] = u[3, 1:, 2] = NEG_INF  # so row 3 is infeasible
    start, end = torch.randn(2, B, N, generator=g, dtype=torch.float64)
    lengths = torch.tensor([T, 2, 0, T])
    return [x.to(dtype) for x in (u, a, start, end)], lengths


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shared", [True, False])
def test_kbest_equals_the_torch_backend(backend, dtype, shared):
    """Gaussian potentials with -inf entries, an empty and an infeasible row, k above the number
    of labelings of the short rows: the same scores and paths, bit for bit."""
    (u, a, start, end), lengths = _chain_case(1, dtype, shared)
    k = 12  # above the 9 labelings of row 1
    got = st.kbest(u, a, k, start=start, end=end, lengths=lengths)
    with use_backend("torch"):
        want = st.kbest(u, a, k, start=start, end=end, lengths=lengths)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert (got[0][1, 9:] == NEG_INF).all() and (got[1][1, 9:] == -1).all()
    assert (got[0][3] == NEG_INF).all() and got[0][2].tolist() == [0.0] + [NEG_INF] * (k - 1)
    score, path = st.viterbi(u, a, start=start, end=end, lengths=lengths)
    assert torch.equal(got[0][:, 0], score) and torch.equal(got[1][:, 0], path)


@pytest.mark.parametrize("shared", [True, False])
def test_kbest_scores_gradient_is_the_paths_indicators(backend, shared):
    """d (w . scores) equals d (w . path_score(paths)) over the valid entries, w.r.t. every
    potential; missing entries get no gradient."""
    (u, a, start, end), lengths = _chain_case(2, torch.float64, shared)
    leaves = [x.requires_grad_() for x in (u, a, start, end)]
    k = 8
    scores, paths = st.kbest(u, a, k, start=start, end=end, lengths=lengths)
    w = torch.randn(scores.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    got = torch.autograd.grad((torch.where(scores > NEG_INF, scores, 0.0) * w).sum(), leaves)
    B, T, N = u.shape
    valid = scores > NEG_INF
    rep = [x.repeat_interleave(k, 0) for x in (u, start, end)]
    trans = a if shared else a.repeat_interleave(k, 0)
    ref = st.path_score(rep[0], trans, paths.reshape(B * k, T).clamp(min=0), start=rep[1], end=rep[2],
                        lengths=lengths.repeat_interleave(k))
    ref = torch.where(valid.reshape(-1) & (lengths.repeat_interleave(k) > 0), ref, 0.0)
    want = torch.autograd.grad((ref * w.reshape(-1)).sum(), leaves)
    for g, h in zip(got, want, strict=True):
        torch.testing.assert_close(g, h, rtol=0, atol=1e-12)


def test_kbest_under_vmap(backend):
    g = torch.Generator().manual_seed(3)
    u, a = torch.randn(2, 3, 4, 3, generator=g, dtype=torch.float64), torch.randn(3, 3, dtype=torch.float64)
    scores, paths = torch.func.vmap(lambda x: st.kbest(x, a, 4))(u)
    for v in range(2):
        want = st.kbest(u[v], a, 4)
        assert torch.equal(scores[v], want[0]) and torch.equal(paths[v], want[1])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shared", [True, False])
def test_sample_draws_equal_the_torch_backend(backend, dtype, shared):
    """The same generator state gives the same labels on every backend: -1 beyond each length,
    on the empty and the infeasible row."""
    (u, a, start, end), lengths = _chain_case(4, dtype, shared)
    n = 6
    got = st.sample(u, a, n, start=start, end=end, lengths=lengths, generator=torch.Generator().manual_seed(5))
    with use_backend("torch"):
        want = st.sample(u, a, n, start=start, end=end, lengths=lengths, generator=torch.Generator().manual_seed(5))
    assert got.shape == (n, 4, 5) and got.dtype == torch.int64
    assert torch.equal(got, want)
    assert (got[:, 2:] == -1).all() and (got[:, 1, 2:] == -1).all() and (got[:, :2, :2] >= 0).all()


def test_sample_frequencies_follow_enumeration(backend):
    """600 draws of a 3-label chain of length 3 with a forbidden transition follow the enumerated
    distribution (chi-square, fixed seed: deterministic), never a forbidden labeling."""
    g = torch.Generator().manual_seed(0)
    u = torch.randn(1, 3, 3, generator=g, dtype=torch.float64) * 0.5
    a = torch.randn(3, 3, generator=g, dtype=torch.float64) * 0.5
    a[0, 2] = NEG_INF
    n = 600
    draws = st.sample(u, a, n, generator=torch.Generator().manual_seed(11))[:, 0]
    inst = Instance(u, a, None, None, torch.tensor([3]))
    rows = enumerate_row(inst, 0)
    scores = np.array([s for _, s in rows])
    p = np.exp(scores - brute_logsumexp(scores))
    index = {y: i for i, (y, _) in enumerate(rows)}
    counts = np.zeros(len(rows))
    for y in draws.tolist():
        counts[index[tuple(y)]] += 1
    assert counts[p == 0].sum() == 0
    assert chisquare(counts[p > 0], p[p > 0] * n).pvalue > 1e-3
