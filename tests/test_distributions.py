"""ChainDistribution, SemiMarkovDistribution and SemiMarkovCRF against brute-force enumeration."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from brute import brute, brute_logsumexp, enumerate_row, instances, problems, tensors
from brute import check_kbest as _check_kbest
from conftest import use_backend
from hypothesis import given
from hypothesis import strategies as st_
from scipy.stats import chisquare

import structtorch as st
from structtorch.distributions import ChainDistribution, SegmentMarginals, SemiMarkovDistribution
from structtorch.nn.semimarkov_crf import SemiMarkovCRF

NEG_INF = float("-inf")


@pytest.fixture(params=["compiled", "torch"])
def dp_backend(request):
    with use_backend(request.param):
        yield request.param


def _entropy(scores: np.ndarray, logz: float) -> float:
    p = np.exp(scores[scores > NEG_INF] - logz)
    return float(-(p * (scores[scores > NEG_INF] - logz)).sum())


# ------------------------------------------------------------------------------------------------
# linear chains


@given(inst=instances(max_t=5, max_n=3), k=st_.integers(1, 4), seed=st_.integers(0, 2**31))
def test_chain_matches_enumeration(dp_backend, inst, k, seed):
    B, T, N = inst.unary.shape
    tol = 1e-8 if inst.unary.dtype == torch.float64 else 1e-4
    dist = ChainDistribution(*inst.args(), **inst.kwargs)
    logz, best, path = dist.log_partition, dist.max, dist.argmax
    marg, edge, ent = dist.marginals, dist.edge_marginals, dist.entropy
    scores_k, paths_k = dist.kbest(k)
    for x in (logz, best, marg, edge, ent, scores_k):
        assert x.dtype == inst.unary.dtype
    assert marg.shape == (B, T, N) and edge.shape == (B, max(T - 1, 0), N, N) and path.shape == (B, T)
    rng = np.random.default_rng(seed)
    picks, expected_lp = torch.zeros(B, T, dtype=torch.long), []
    for b in range(B):
        rows = enumerate_row(inst, b)
        L = int(inst.lengths[b])
        scores = np.array([s for _, s in rows])
        lz = brute_logsumexp(scores)
        y, s = rows[rng.integers(len(rows))]
        picks[b, :L] = torch.tensor(y, dtype=torch.long)
        expected_lp.append(NEG_INF if lz == NEG_INF or s == NEG_INF else s - lz)
        _check_kbest(scores_k[b].tolist(), [tuple(p[:L].tolist()) for p in paths_k[b]],
                     {tuple(y): s for y, s in rows}, k, tol)
        if lz == NEG_INF:
            assert logz[b] == NEG_INF and best[b] == NEG_INF and (path[b] == -1).all()
            assert ent[b] == 0 and (marg[b] == 0).all() and (edge[b] == 0).all()
            continue
        assert np.isclose(logz[b].item(), lz, atol=tol)
        assert np.isclose(best[b].item(), scores.max(), atol=tol)
        assert np.isclose(dict(rows)[tuple(path[b, :L].tolist())], scores.max(), atol=tol)
        assert (path[b, L:] == -1).all()
        p = np.exp(scores - lz)
        node, pair = np.zeros((T, N)), np.zeros((max(T - 1, 0), N, N))
        for (y, _), w in zip(rows, p, strict=True):
            for t in range(L):
                node[t, y[t]] += w
                if t + 1 < L:
                    pair[t, y[t], y[t + 1]] += w
        np.testing.assert_allclose(marg[b].double().numpy(), node, atol=tol)
        np.testing.assert_allclose(edge[b].double().numpy(), pair, atol=tol)
        assert np.isclose(ent[b].item(), _entropy(scores, lz), atol=tol)
    np.testing.assert_allclose(dist.log_prob(picks).double().numpy(), expected_lp, atol=tol)


def test_chain_matches_the_functions():
    torch.manual_seed(0)
    u, A = torch.randn(4, 7, 3), torch.randn(3, 3)
    start, end, lengths = torch.randn(3), torch.randn(4, 3), torch.tensor([7, 5, 1, 0])
    import structtorch as st

    dist = ChainDistribution(u, A, start=start, end=end, lengths=lengths)
    kw = {"start": start, "end": end, "lengths": lengths}
    torch.testing.assert_close(dist.log_partition, st.log_partition(u, A, **kw))
    torch.testing.assert_close(dist.marginals, st.marginals(u, A, **kw))
    score, path = st.viterbi(u, A, **kw)
    torch.testing.assert_close(dist.max, score)
    assert torch.equal(dist.argmax, path)
    ks, kp = st.kbest(u, A, 3, **kw)
    torch.testing.assert_close(dist.kbest(3)[0], ks)
    assert torch.equal(dist.kbest(3)[1], kp)
    assert dist.lengths.tolist() == [7, 5, 1, 0] and dist.num_labels == 3 and "B=4" in repr(dist)


def test_chain_gradients():
    """log_partition's gradient is the marginals; the edge marginals sum (over positions and rows) to
    the gradient of the shared transitions; entropy and marginals are differentiable."""
    torch.manual_seed(1)
    u = torch.randn(2, 5, 3, dtype=torch.float64, requires_grad=True)
    A = torch.randn(3, 3, dtype=torch.float64, requires_grad=True)
    lengths = torch.tensor([5, 3])
    dist = ChainDistribution(u, A, lengths=lengths)
    gu, gA = torch.autograd.grad(dist.log_partition.sum(), (u, A), retain_graph=True)
    torch.testing.assert_close(gu, dist.marginals)
    torch.testing.assert_close(gA, dist.edge_marginals.sum((0, 1)))
    # d max / d unary = the indicator of the argmax
    (gmax,) = torch.autograd.grad(dist.max.sum(), u)
    path = dist.argmax
    expected = torch.nn.functional.one_hot(path.clamp(min=0), 3).double() * (path >= 0).unsqueeze(2)
    torch.testing.assert_close(gmax, expected)
    # log_prob gradient = indicator - marginals
    y = path.clamp(min=0)
    (glp,) = torch.autograd.grad(ChainDistribution(u, A, lengths=lengths).log_prob(y).sum(), u)
    torch.testing.assert_close(glp, expected - dist.marginals.detach())


def test_chain_entropy_gradcheck():
    torch.manual_seed(2)
    u = torch.randn(2, 3, 2, dtype=torch.float64, requires_grad=True)
    A = torch.randn(2, 2, dtype=torch.float64)
    A[0, 1] = NEG_INF  # a forbidden transition: masked in the entropy, no NaN in its gradient
    A.requires_grad_()
    s = torch.randn(2, dtype=torch.float64, requires_grad=True)
    lengths = torch.tensor([3, 2])

    def entropy(u, A, s):
        return ChainDistribution(u, A, start=s, lengths=lengths).entropy

    assert torch.autograd.gradcheck(entropy, (u, A, s))
    per_position = torch.randn(2, 2, 2, 2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda u, A: ChainDistribution(u, A, lengths=lengths).entropy, (u, per_position))


def test_chain_infeasible_rows_are_nan_free():
    u = torch.zeros(3, 4, 2, dtype=torch.float64)
    u[0, 2] = NEG_INF  # no label at position 2: row 0 infeasible
    u.requires_grad_()
    A = torch.zeros(2, 2, dtype=torch.float64, requires_grad=True)
    dist = ChainDistribution(u, A, lengths=torch.tensor([4, 4, 0]))
    ent = dist.entropy
    assert ent[0] == 0 and ent[2] == 0 and np.isclose(ent[1].item(), 4 * np.log(2))
    assert dist.log_partition[0] == NEG_INF and dist.log_partition[2] == 0
    lp = dist.log_prob(torch.zeros(3, 4, dtype=torch.long))
    assert lp[0] == NEG_INF and lp[2] == 0 and np.isclose(lp[1].item(), -4 * np.log(2))
    gu, gA = torch.autograd.grad(ent.sum() + lp[1:].sum(), (u, A))
    assert torch.isfinite(gu).all() and torch.isfinite(gA).all() and (gu[0] == 0).all()
    samples = dist.sample(5)
    assert (samples[:, 0] == -1).all() and (samples[:, 2] == -1).all() and (samples[:, 1] >= 0).all()
    scores, paths = dist.kbest(2)
    assert (scores[0] == NEG_INF).all() and scores[2].tolist() == [0.0, NEG_INF] and (paths[0] == -1).all()


@pytest.mark.parametrize("shared", [True, False])
def test_chain_sampling_frequencies(dp_backend, shared):
    """20000 samples of a tiny chain (two rows, one shorter, a forbidden transition) follow the
    enumerated distribution (chi-square, fixed seed)."""
    g = torch.Generator().manual_seed(0)
    u = torch.randn(2, 3, 3, generator=g, dtype=torch.float64) * 0.7
    A = torch.randn(3, 3, generator=g, dtype=torch.float64) * 0.7 if shared else \
        torch.randn(2, 2, 3, 3, generator=g, dtype=torch.float64) * 0.7
    A[..., 0, 2] = NEG_INF
    start = torch.randn(3, generator=g, dtype=torch.float64)
    lengths = torch.tensor([3, 2])
    dist = ChainDistribution(u, A, start=start, lengths=lengths)
    n = 20000
    samples = dist.sample(n, generator=torch.Generator().manual_seed(123))
    assert samples.shape == (n, 2, 3) and samples.dtype == torch.long
    assert (samples[:, 1, 2] == -1).all()
    inst = type("I", (), {})()
    inst.unary, inst.transitions, inst.start, inst.end, inst.lengths = u, A, start, None, lengths
    for b in range(2):
        L = int(lengths[b])
        rows = enumerate_row(inst, b)
        scores = np.array([s for _, s in rows])
        p = np.exp(scores - brute_logsumexp(scores))
        index = {y: i for i, (y, _) in enumerate(rows)}
        counts = np.zeros(len(rows))
        for y, c in zip(*np.unique(samples[:, b, :L].numpy(), axis=0, return_counts=True), strict=True):
            counts[index[tuple(y.tolist())]] += c
        assert counts[p == 0].sum() == 0  # never a forbidden labeling
        assert chisquare(counts[p > 0], p[p > 0] * n).pvalue > 1e-3
    # the same generator seed gives the same samples
    again = dist.sample(n, generator=torch.Generator().manual_seed(123))
    assert torch.equal(samples, again)


# ------------------------------------------------------------------------------------------------
# semi-Markov


def _problem(problem):
    p, S, lengths, integer = problem
    p = {**p, "plif": None}  # segment PLiFs are not part of the distribution
    content, trans, kw = tensors(p)
    kw.pop("segment_plif")
    return p, S, lengths, SemiMarkovDistribution(content, trans, max_len=S, lengths=lengths, **kw)


@given(problem=problems(), k=st_.integers(1, 4), seed=st_.integers(0, 2**31))
def test_semimarkov_matches_enumeration(dp_backend, problem, k, seed):
    p, S, lengths, dist = _problem(problem)
    B, T, N = p["content"].shape
    Su = max(1, min(S, T))
    logz, best, (labels, starts), ent = dist.log_partition, dist.max, dist.argmax, dist.entropy
    marg = dist.marginals
    assert isinstance(marg, SegmentMarginals)
    assert marg.positions.shape == (B, T, N) and marg.segments.shape == (B, T, Su, N)
    assert marg.transitions.shape == (B, N, N) and marg.start.shape == marg.end.shape == (B, N)
    k_scores, k_labels, k_starts = dist.kbest(k)
    assert k_labels.shape == k_starts.shape == (B, k, T)
    rng = np.random.default_rng(seed)
    pick_labels, pick_starts = torch.zeros(B, T, dtype=torch.long), torch.zeros(B, T, dtype=torch.bool)
    expected_lp = []
    for b in range(B):
        L = int(lengths[b])
        rows = brute(p, b, L, S, N)
        scores = np.array([r[2] for r in rows])
        lz = brute_logsumexp(scores)
        lab, sts, s = rows[rng.integers(len(rows))]
        pick_labels[b, :L], pick_starts[b, :L] = torch.tensor(lab, dtype=torch.long), torch.tensor(sts, dtype=torch.bool)
        expected_lp.append(NEG_INF if lz == NEG_INF or s == NEG_INF else s - lz)
        _check_kbest(k_scores[b].tolist(),
                     [(tuple(x[:L].tolist()), tuple(y[:L].tolist())) for x, y in zip(k_labels[b], k_starts[b], strict=True)],
                     {(r[0], r[1]): r[2] for r in rows}, k, 1e-8)
        assert (k_labels[b, :, L:] == -1).all() and not k_starts[b, :, L:].any()
        if lz == NEG_INF:
            assert logz[b] == NEG_INF and best[b] == NEG_INF and (labels[b] == -1).all() and not starts[b].any()
            assert ent[b] == 0 and all((x[b] == 0).all() for x in marg)
            continue
        assert np.isclose(logz[b].item(), lz, atol=1e-8)
        assert np.isclose(best[b].item(), scores.max(), atol=1e-8)
        lookup = {(r[0], r[1]): r[2] for r in rows}
        assert np.isclose(lookup[(tuple(labels[b, :L].tolist()), tuple(starts[b, :L].tolist()))], scores.max(), atol=1e-8)
        w = np.exp(scores - lz)
        pos, seg, trans = np.zeros((T, N)), np.zeros((T, Su, N)), np.zeros((N, N))
        first, last = np.zeros(N), np.zeros(N)
        for (lab, sts, _), wi in zip(rows, w, strict=True):
            bounds = [i for i in range(L) if sts[i]] + [L]
            segs = [(s0, e0, lab[s0]) for s0, e0 in itertools.pairwise(bounds)]
            for t, n in enumerate(lab):
                pos[t, n] += wi
            for j, (s0, e0, n) in enumerate(segs):
                seg[e0 - 1, e0 - s0 - 1, n] += wi
                if j:
                    trans[segs[j - 1][2], n] += wi
            if segs:
                first[segs[0][2]] += wi
                last[segs[-1][2]] += wi
        for got, want in zip(marg, (pos, seg, trans, first, last), strict=True):
            np.testing.assert_allclose(got[b].numpy(), want, atol=1e-8)
        assert np.isclose(ent[b].item(), _entropy(scores, lz), atol=1e-8)
    np.testing.assert_allclose(dist.log_prob((pick_labels, pick_starts)).numpy(), expected_lp, atol=1e-8)


def test_semimarkov_marginals_are_gradients():
    torch.manual_seed(4)
    B, T, N, S = 2, 6, 3, 3
    c = torch.randn(B, T, N, dtype=torch.float64, requires_grad=True)
    A = torch.randn(N, N, dtype=torch.float64, requires_grad=True)
    ls = torch.randn(S, N, dtype=torch.float64, requires_grad=True)
    bd = torch.randn(B, T, N, dtype=torch.float64, requires_grad=True)
    dist = SemiMarkovDistribution(c, A, max_len=S, length_scores=ls, boundary=bd, lengths=torch.tensor([6, 4]))
    gc, gA, gl, gb = torch.autograd.grad(dist.log_partition.sum(), (c, A, ls, bd))
    m = dist.marginals
    torch.testing.assert_close(gc, m.positions)
    torch.testing.assert_close(gA, m.transitions.sum(0))
    torch.testing.assert_close(gl, m.segments.sum((0, 1)))
    torch.testing.assert_close(gb, m.segments.sum(2))


def test_semimarkov_entropy_gradcheck():
    torch.manual_seed(3)
    c = torch.randn(2, 4, 2, dtype=torch.float64, requires_grad=True)
    A = torch.randn(2, 2, dtype=torch.float64, requires_grad=True)
    ls = torch.randn(2, 2, dtype=torch.float64)
    ls[1, 0] = NEG_INF  # label 0 segments have length 1
    ls.requires_grad_()
    lengths = torch.tensor([4, 3])

    def entropy(c, A, ls):
        return SemiMarkovDistribution(c, A, max_len=2, length_scores=ls, lengths=lengths).entropy

    assert torch.autograd.gradcheck(entropy, (c, A, ls))


def test_max_len_one_is_the_chain():
    torch.manual_seed(5)
    u, A = torch.randn(3, 5, 3, dtype=torch.float64), torch.randn(3, 3, dtype=torch.float64)
    lengths = torch.tensor([5, 2, 0])
    chain = ChainDistribution(u, A, lengths=lengths)
    sm = SemiMarkovDistribution(u, A, max_len=1, lengths=lengths)
    torch.testing.assert_close(sm.entropy, chain.entropy)
    torch.testing.assert_close(sm.marginals.positions, chain.marginals)
    torch.testing.assert_close(sm.marginals.transitions, chain.edge_marginals.sum(1))
    torch.testing.assert_close(sm.kbest(4)[0], chain.kbest(4)[0])


@pytest.mark.parametrize("segment_scores", [False, True])
def test_semimarkov_sampling_frequencies(dp_backend, segment_scores):
    g = torch.Generator().manual_seed(1)
    B, T, N, S = 2, 4, 2, 3

    def r(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64) * 0.6

    content, A, ls, bd = r(B, T, N), r(N, N), r(S, N), r(B, T, N)
    ls[2, 1] = NEG_INF  # label 1 segments are at most 2 long
    seg = r(B, T, S, N) if segment_scores else None
    lengths = torch.tensor([4, 3])
    dist = SemiMarkovDistribution(content, A, max_len=S, length_scores=ls, boundary=bd, segment_scores=seg,
                                  lengths=lengths)
    n = 20000
    labels, starts = dist.sample(n, generator=torch.Generator().manual_seed(7))
    assert labels.shape == starts.shape == (n, B, T) and starts.dtype == torch.bool
    assert (labels[:, 1, 3] == -1).all() and not starts[:, 1, 3].any() and starts[:, :, 0].all()
    p = {"content": content.numpy(), "trans": A.numpy(), "length": np.broadcast_to(ls.numpy(), (B, S, N)),
         "boundary": bd.numpy(), "start": np.zeros((B, N)), "end": np.zeros((B, N)),
         "segment": None if seg is None else seg.numpy()}
    for b in range(B):
        L = int(lengths[b])
        rows = brute(p, b, L, S, N)
        scores = np.array([x[2] for x in rows])
        prob = np.exp(scores - brute_logsumexp(scores))
        index = {(x[0], x[1]): i for i, x in enumerate(rows)}
        counts = np.zeros(len(rows))
        keys = torch.cat([labels[:, b, :L], starts[:, b, :L].long()], 1).numpy()
        for key, c in zip(*np.unique(keys, axis=0, return_counts=True), strict=True):
            counts[index[(tuple(key[:L].tolist()), tuple(bool(v) for v in key[L:]))]] += c
        assert counts[prob == 0].sum() == 0
        expected = prob[prob > 0] * n
        observed = counts[prob > 0]
        small = expected < 5  # pool rare segmentations into one bin
        if small.any():
            expected = np.append(expected[~small], expected[small].sum())
            observed = np.append(observed[~small], observed[small].sum())
        assert chisquare(observed, expected).pvalue > 1e-3
    # every sample is a valid segmentation with a finite log-probability
    lp = dist.log_prob((labels[0], starts[0]))
    assert torch.isfinite(lp).all()


def test_semimarkov_degenerate_rows():
    c = torch.zeros(3, 4, 2, dtype=torch.float64)
    c[0, 1] = NEG_INF  # row 0: no label at position 1
    c.requires_grad_()
    A = torch.zeros(2, 2, dtype=torch.float64, requires_grad=True)
    dist = SemiMarkovDistribution(c, A, max_len=2, lengths=torch.tensor([4, 4, 0]))
    assert dist.log_partition[0] == NEG_INF and dist.log_partition[2] == 0
    ent = dist.entropy
    assert ent[0] == 0 and ent[2] == 0 and ent[1] > 0
    (gc,) = torch.autograd.grad(ent.sum(), c)
    assert torch.isfinite(gc).all() and (gc[0] == 0).all()
    labels, starts = dist.sample(3)
    assert (labels[:, 0] == -1).all() and (labels[:, 2] == -1).all() and not starts[:, 0].any()
    scores, k_labels, _ = dist.kbest(2)
    assert (scores[0] == NEG_INF).all() and scores[2].tolist() == [0.0, NEG_INF]
    empty = SemiMarkovDistribution(torch.zeros(2, 0, 3), torch.zeros(3, 3), max_len=4)
    assert empty.log_partition.tolist() == [0.0, 0.0] and empty.entropy.tolist() == [0.0, 0.0]
    assert empty.sample(2)[0].shape == (2, 2, 0) and empty.kbest(2)[0].tolist() == [[0.0, NEG_INF]] * 2


@pytest.mark.parametrize("T", [0, 3])
@pytest.mark.parametrize("kind", ["chain", "chain per-position", "semimarkov"])
def test_empty_batches_give_empty_results_everywhere(kind, T):
    """Issue 21 item 10: entropy on B = 0 raised a bare reshape error; every property and method
    gives an empty result (and a graph to differentiate) instead."""
    u = torch.zeros(0, T, 3, dtype=torch.float64, requires_grad=True)
    if kind == "semimarkov":
        dist = SemiMarkovDistribution(u, torch.zeros(3, 3, dtype=torch.float64), max_len=2)
        structure = (torch.zeros(0, T, dtype=torch.long), torch.zeros(0, T, dtype=torch.bool))
    else:
        A = torch.zeros(3, 3) if kind == "chain" else torch.zeros(0, max(T - 1, 0), 3, 3)
        dist = ChainDistribution(u, A.double())
        structure = torch.zeros(0, T, dtype=torch.long)
    for name in ("entropy", "log_partition", "max"):
        value = getattr(dist, name)
        assert value.shape == (0,) and value.dtype == torch.float64, name
    (grad,) = torch.autograd.grad(dist.entropy.sum() + dist.log_partition.sum(), u)
    assert grad.shape == u.shape
    assert dist.log_prob(structure).shape == (0,) and dist.score(structure).shape == (0,)
    assert dist.kbest(2)[0].shape == (0, 2)
    draws = dist.sample(2)
    assert (draws[0] if kind == "semimarkov" else draws).shape == (2, 0, T)
    if kind == "semimarkov":
        assert dist.argmax[0].shape == (0, T) and dist.marginals.positions.shape == (0, T, 3)
    else:
        assert dist.argmax.shape == (0, T) and dist.marginals.shape == (0, T, 3)
        assert dist.edge_marginals.shape == (0, max(T - 1, 0), 3, 3)


def test_half_precision_and_autocast():
    torch.manual_seed(6)
    u, A = torch.randn(2, 5, 3), torch.randn(3, 3)
    ref = ChainDistribution(u.bfloat16().float(), A)
    dist = ChainDistribution(u.bfloat16(), A)  # bf16 beside float32: float32 results
    torch.testing.assert_close(dist.entropy, ref.entropy)
    assert dist.entropy.dtype == dist.marginals.dtype == dist.log_partition.dtype == torch.float32
    half = SemiMarkovDistribution(u.bfloat16(), A.bfloat16(), max_len=2)
    assert half.entropy.dtype == half.log_partition.dtype == half.kbest(2)[0].dtype == torch.bfloat16
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert ChainDistribution(u, A).entropy.dtype == torch.float32


# ------------------------------------------------------------------------------------------------
# SemiMarkovCRF


def test_semimarkov_crf_nll_and_training():
    torch.manual_seed(0)
    B, T, N, S = 16, 6, 2, 3
    crf = SemiMarkovCRF(N, S).double()
    # targets: alternating labels, segments of length 3
    labels = torch.tensor([[0, 0, 0, 1, 1, 1]]).repeat(B, 1)
    starts = torch.tensor([[True, False, False, True, False, False]]).repeat(B, 1)
    lengths = torch.tensor([6] * (B - 2) + [3, 0])
    content = (torch.nn.functional.one_hot(labels, N).double() - 0.5) + 0.8 * torch.randn(B, T, N, dtype=torch.float64)
    content.requires_grad_()
    nll = crf(content, labels, starts, lengths=lengths)
    torch.testing.assert_close(crf.log_likelihood(content, labels, starts, lengths=lengths), -nll)
    assert nll.shape == (B,) and nll[-1] == 0
    # the NLL is logZ - score by enumeration
    p = {"content": content.detach().numpy(), "trans": crf.transitions.detach().numpy(),
         "length": np.broadcast_to(crf.length_scores.detach().numpy(), (B, S, N)),
         "boundary": np.zeros((B, T, N)), "start": np.broadcast_to(crf.start.detach().numpy(), (B, N)),
         "end": np.broadcast_to(crf.end.detach().numpy(), (B, N)), "segment": None}
    for b in (0, B - 2, B - 1):
        L = int(lengths[b])
        rows = brute(p, b, L, S, N)
        gold = {(r[0], r[1]): r[2] for r in rows}[(tuple(labels[b, :L].tolist()), tuple(starts[b, :L].tolist()))]
        assert np.isclose(nll[b].item(), brute_logsumexp([r[2] for r in rows]) - gold, atol=1e-9)
    # training lowers the NLL and the length scores learn that segments are 3 long
    opt = torch.optim.Adam(crf.parameters(), lr=0.1)
    first = None
    for _ in range(30):
        loss = crf(content.detach(), labels, starts, lengths=lengths, reduction="mean")
        first = loss.item() if first is None else first
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.7 * first
    assert (crf.length_scores[2] > crf.length_scores[0]).all()
    score, got_labels, got_starts = crf.decode(content.detach(), lengths=lengths)
    assert score.shape == (B,) and got_labels.shape == (B, T)
    dist = crf.distribution(content.detach(), lengths)
    torch.testing.assert_close(dist.max, score)
    assert "num_labels=2, max_len=3" in repr(crf)


def test_semimarkov_crf_float32_default():
    crf = SemiMarkovCRF(3, 4)
    x = torch.randn(2, 7, 3)
    y = torch.zeros(2, 7, dtype=torch.long)
    st = torch.zeros(2, 7, dtype=torch.bool)
    st[:, ::4] = True
    nll = crf(x, y, st)
    assert nll.dtype == torch.float32 and (nll > 0).all()
    nll.sum().backward()
    assert crf.transitions.grad is not None and crf.length_scores.grad.shape == (4, 3)


def test_semimarkov_crf_takes_mask_reduction_and_keyword_lengths_as_the_chain_crf():
    """Issue 41: forward(content, labels, starts, lengths) took lengths positionally and had no
    mask or reduction, unlike LinearChainCRF(emissions, tags, mask, *, lengths, reduction); a mask
    gave "lengths must be an integer tensor". The positional lengths still work, deprecated."""
    import warnings

    g = torch.Generator().manual_seed(0)
    crf = SemiMarkovCRF(3, 2).double()
    B, T = 3, 5
    content = torch.randn(B, T, 3, generator=g, dtype=torch.float64)
    lengths = torch.tensor([5, 3, 0])
    labels = torch.tensor([[0, 0, 1, 2, 2], [1, 2, 2, 0, 0], [0] * 5])
    starts = torch.tensor([[1, 0, 1, 1, 0], [1, 1, 0, 0, 0], [0] * 5], dtype=torch.bool)
    ref = crf(content, labels, starts, lengths=lengths)
    mask = torch.arange(T) < lengths[:, None]
    torch.testing.assert_close(crf(content, labels, starts, mask), ref)
    # left padding: the same sequences moved right, read at the mask's positions
    shift = T - lengths
    idx = (torch.arange(T) - shift[:, None]) % T
    left = lambda x: x.gather(1, idx.view(B, T, *[1] * (x.dim() - 2)).expand_as(x))  # noqa: E731
    torch.testing.assert_close(crf(left(content), left(labels), left(starts), left(mask)), ref)
    torch.testing.assert_close(crf.log_likelihood(content, labels, starts, mask=mask, reduction="sum"), -ref.sum())
    torch.testing.assert_close(crf(content, labels, starts, mask, reduction="mean"), ref.mean())
    torch.testing.assert_close(crf(content, labels, starts, lengths=lengths, reduction="token_mean"), ref.sum() / 8)
    score, got_labels, got_starts = crf.decode(content, lengths=lengths)
    score_l, labels_l, starts_l = crf.decode(left(content), left(mask))
    torch.testing.assert_close(score_l, score)
    assert torch.equal(labels_l, torch.where(left(mask), left(got_labels), -1))
    assert torch.equal(starts_l, left(got_starts) & left(mask))
    for old, want in ((lambda: crf(content, labels, starts, lengths), ref),
                      (lambda: crf(content, labels, starts, [5, 3, 0]), ref),
                      (lambda: -crf.log_likelihood(content, labels, starts, lengths), ref),
                      (lambda: crf.decode(content, lengths)[0], score)):
        with pytest.warns(DeprecationWarning, match="pass lengths=lengths"):
            torch.testing.assert_close(old(), want)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        crf(content, labels, starts, mask, reduction="sum")
    with pytest.raises(TypeError, match="lengths twice"):
        crf(content, labels, starts, lengths, lengths=lengths)
    with pytest.raises(ValueError, match="give mask or lengths, not both"):
        crf(content, labels, starts, mask, lengths=lengths)
    with pytest.raises(ValueError, match="reduction must be one of"):
        crf(content, labels, starts, mask, reduction="avg")
    with pytest.raises(TypeError, match=r"mask must be a bool \(or uint8\) tensor"):
        crf(content, labels, starts, mask.long())
    with warnings.catch_warnings():  # issue 53, item 7: a nested list was taken for lengths, deprecated
        warnings.simplefilter("error")
        with pytest.raises(TypeError, match=r"mask must be a bool \(or uint8\) tensor"):
            crf(content, labels, starts, mask.tolist())


def test_semimarkov_crf_warns_of_an_infinite_reduced_loss():
    """Issue 53, item 6: the log-likelihood was reduced and negated after the check for +inf, so a
    reduced loss of +inf (a target through a -inf content score) trained on nothing without a word."""
    import warnings

    crf = SemiMarkovCRF(3, 2)
    content = torch.randn(2, 4, 3)
    content[0, 1, :] = float("-inf")
    labels = torch.zeros(2, 4, dtype=torch.long)
    starts = torch.tensor([[1, 0, 1, 0], [1, 0, 1, 0]], dtype=torch.bool)
    for reduction in ("sum", "mean", "token_mean"):
        with pytest.warns(RuntimeWarning, match=r"negative log-likelihood is \+inf for rows \[0\] of 2"):
            assert crf(content, labels, starts, reduction=reduction).item() == float("inf")
        with pytest.warns(RuntimeWarning, match=r"\+inf for rows \[0\]"):
            assert crf.log_likelihood(content, labels, starts, reduction=reduction).item() == float("-inf")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert torch.isinf(crf(content, labels, starts)).tolist() == [True, False]  # per row: visible


# ------------------------------------------------------------------------------------------------
# errors


def test_errors_name_the_argument():
    u, A = torch.zeros(2, 4, 3), torch.zeros(3, 3)
    dist = ChainDistribution(u, A)
    with pytest.raises(ValueError, match="n must be an int >= 1, got 0"):
        dist.sample(0)
    with pytest.raises(TypeError, match="n must be an int, got float"):
        dist.sample(1.5)
    with pytest.raises(TypeError, match="generator must be a torch.Generator"):
        dist.sample(2, generator=0)
    with pytest.raises(ValueError, match="k must be an int >= 1, got 0"):
        dist.kbest(0)
    with pytest.raises(ValueError, match=r"structure must have shape \(B, T\) = \(2, 4\), got \(2, 3\)"):
        dist.log_prob(torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(TypeError, match="structure must be an integer tensor"):
        dist.log_prob(torch.zeros(2, 4))
    with pytest.raises(ValueError, match=r"structure must lie in \[0, N\) = \[0, 3\)"):
        dist.log_prob(torch.full((2, 4), 3))
    with pytest.raises(ValueError, match=r"transitions must have shape \(N, N\) = \(3, 3\)"):
        ChainDistribution(u, torch.zeros(2, 2))
    with pytest.raises(ValueError, match=r"lengths must lie in \[0, T\]"):
        ChainDistribution(u, A, lengths=torch.tensor([5, 1]))

    sm = SemiMarkovDistribution(u, A, max_len=2)
    y, s = torch.zeros(2, 4, dtype=torch.long), torch.tensor([[True, False, True, False]] * 2)
    assert torch.isfinite(sm.log_prob((y, s))).all()
    with pytest.raises(TypeError, match=r"structure must be a \(labels, starts\) pair"):
        sm.log_prob(y)
    with pytest.raises(TypeError, match=r"starts must be a bool tensor of shape \(B, T\) = \(2, 4\)"):
        sm.log_prob((y, s.long()))
    with pytest.raises(ValueError, match=r"starts must have shape \(B, T\) = \(2, 4\), got \(2, 3\)"):
        sm.log_prob((y, s[:, :3]))
    with pytest.raises(ValueError, match=r"labels must have shape \(B, T\) = \(2, 4\)"):
        sm.log_prob((y[:, :3], s))
    with pytest.raises(ValueError, match=r"labels change inside a segment at \[0, 1\]"):
        sm.log_prob((torch.tensor([[0, 1, 1, 1]] * 2), s))
    with pytest.raises(ValueError, match="structure has a segment longer than max_len = 2"):
        sm.log_prob((y, torch.tensor([[True, False, False, True]] * 2)))
    with pytest.raises(ValueError, match="n must be an int >= 1"):
        sm.sample(-1)
    with pytest.raises(ValueError, match="k must be an int >= 1"):
        sm.kbest(0)
    with pytest.raises(ValueError, match="max_len must be an int >= 1, got 0"):
        SemiMarkovDistribution(u, A, max_len=0)
    with pytest.raises(ValueError, match=r"length_scores must have shape \(2, 3\) or \(2, 2, 3\)"):
        SemiMarkovDistribution(u, A, max_len=2, length_scores=torch.zeros(3, 3))
    with pytest.raises(ValueError, match=r"content must have shape \(B, T, num_labels\) = \(B, T, 2\)"):
        SemiMarkovCRF(2, 3)(u, y, s)
    with pytest.raises(ValueError, match="max_len must be an int >= 1"):
        SemiMarkovCRF(2, 0)
    with pytest.raises(ValueError, match="num_labels must be an int >= 1"):
        SemiMarkovCRF(0, 2)


@pytest.mark.parametrize("rescaling", ["margin", "slack"])
def test_structured_hinge_takes_a_structure(rescaling):
    """structured_hinge(structure, target) equals the keyword form for chains, segmentations and
    graphs, and the structures score targets as the functions do."""
    g = torch.Generator().manual_seed(11)
    unary, trans = torch.randn(3, 6, 4, generator=g, dtype=torch.float64), torch.randn(4, 4, generator=g,
                                                                                       dtype=torch.float64)
    lengths, target = torch.tensor([6, 4, 0]), torch.randint(0, 4, (3, 6), generator=g)
    chain = st.ChainDistribution(unary, trans, lengths=lengths)
    torch.testing.assert_close(st.structured_hinge(chain, target, rescaling=rescaling, reduction="none"),
                               st.structured_hinge(unary, trans, target, rescaling=rescaling, lengths=lengths,
                                                   reduction="none"))
    torch.testing.assert_close(st.StructuredHingeLoss(rescaling)(chain, target),
                               st.structured_hinge(chain, target, rescaling=rescaling))
    torch.testing.assert_close(chain.score(target), st.path_score(unary, trans, target, lengths=lengths))
    value, path, hamming = chain.loss_augmented(target, rescaling=rescaling)
    ref = st.loss_augmented(unary, trans, target, rescaling=rescaling, lengths=lengths)
    torch.testing.assert_close(value, ref[0])
    assert torch.equal(path, ref[1]) and torch.equal(hamming, ref[2])

    ls = torch.randn(3, 4, generator=g, dtype=torch.float64)
    labels, starts = st.semimarkov_viterbi(unary, trans, max_len=3, length_scores=ls, lengths=lengths)[1:]
    labels = torch.where(labels >= 0, (labels + 1) % 4, 0)
    seg = st.SemiMarkovDistribution(unary, trans, max_len=3, length_scores=ls, lengths=lengths)
    torch.testing.assert_close(
        st.structured_hinge(seg, (labels, starts), rescaling=rescaling, reduction="sum"),
        st.structured_hinge(unary, trans, labels, max_len=3, target_starts=starts, length_scores=ls,
                            lengths=lengths, rescaling=rescaling, reduction="sum"))
    torch.testing.assert_close(seg.score((labels, starts)),
                               st.semimarkov_score(unary, trans, labels, starts, max_len=3, length_scores=ls,
                                                   lengths=lengths))


def test_structured_hinge_on_a_graph_structure_and_errors():
    from structtorch.lp import GraphStructure, grid_edges

    g = torch.Generator().manual_seed(12)
    edges = grid_edges(3, 3)
    unary = torch.randn(2, 9, 2, generator=g, dtype=torch.float64)
    pairwise = torch.randn(2, len(edges), 2, 2, generator=g, dtype=torch.float64)
    target = torch.zeros(2, 9, dtype=torch.long)
    target[0, [0, 1, 2]] = 1  # label 1 connected in both rows
    target[1, [4, 5, 8]] = 1
    graph = GraphStructure(unary, pairwise, edges, connected=[1])
    torch.testing.assert_close(st.structured_hinge(graph, target),
                               st.structured_hinge(unary, pairwise, target, edges=edges, connected=[1]))
    chain = st.ChainDistribution(torch.randn(1, 3, 2), torch.randn(2, 2))
    with pytest.raises(ValueError, match="lengths belong to the structure"):
        st.structured_hinge(chain, torch.zeros(1, 3, dtype=torch.long), lengths=torch.tensor([3]))
    with pytest.raises(TypeError, match="takes the target second"):
        st.structured_hinge(chain, torch.zeros(1, 3, dtype=torch.long), torch.zeros(1, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="margin rescaling with the area-weighted Hamming loss"):
        st.structured_hinge(graph, target, rescaling="slack")
    seg = st.SemiMarkovDistribution(torch.randn(1, 3, 2), torch.randn(2, 2), max_len=2)
    with pytest.raises(ValueError, match="cost is not supported"):
        seg.loss_augmented((torch.zeros(1, 3, dtype=torch.long), torch.ones(1, 3, dtype=torch.bool)),
                           cost=torch.zeros(2, 2))


def test_samplers_and_kbest_are_public_functions_of_their_structure():
    """The distributions are thin classes over the structures' functions (issue 22)."""
    from structtorch.chain import sample
    from structtorch.semimarkov import semimarkov_kbest, semimarkov_sample

    g = torch.Generator().manual_seed(0)
    u, A = torch.randn(3, 5, 3, generator=g, dtype=torch.float64), torch.randn(3, 3, generator=g, dtype=torch.float64)
    L = torch.tensor([5, 2, 0])
    dist = ChainDistribution(u, A, lengths=L)
    draws = sample(u, A, 4, lengths=L, generator=torch.Generator().manual_seed(1))
    assert torch.equal(draws, dist.sample(4, generator=torch.Generator().manual_seed(1)))
    sdist = SemiMarkovDistribution(u, A, max_len=2, lengths=L)
    got = semimarkov_sample(u, A, 4, max_len=2, lengths=L, generator=torch.Generator().manual_seed(2))
    want = sdist.sample(4, generator=torch.Generator().manual_seed(2))
    assert all(torch.equal(x, y) for x, y in zip(got, want, strict=True))
    got = semimarkov_kbest(u, A, 3, max_len=2, lengths=L)
    assert all(torch.equal(x, y) for x, y in zip(got, sdist.kbest(3), strict=True))
    with pytest.raises(TypeError, match="generator must be a torch.Generator"):
        sample(u, A, 1, generator=0)
    with pytest.raises(ValueError, match="k must be an int >= 1"):
        semimarkov_kbest(u, A, 0, max_len=2)
