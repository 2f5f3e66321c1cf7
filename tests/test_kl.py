"""Cross-entropy and KL divergence between two chain (and two semi-Markov) distributions (issue 54,
item 3): exact, against enumeration of every structure, with -inf potentials (q forbidding what p
allows: +inf; both forbidding the same: finite, never NaN), empty rows; registered with
torch.distributions.kl_divergence; log_prob over a sample shape; batch_shape, event_shape, mode."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from brute import all_segmentations
from hypothesis import given, settings
from hypothesis import strategies as hst

import structtorch as st

SETTINGS = settings(max_examples=30, deadline=None, database=None)


def _potentials(g, B, T, N, forbid):
    unary = torch.randn(B, T, N, generator=g, dtype=torch.float64)
    trans = torch.randn(N, N, generator=g, dtype=torch.float64)
    for x in (unary, trans):
        x[torch.rand(x.shape, generator=g) < forbid] = float("-inf")
    return unary, trans


def _brute(scores_p: torch.Tensor, scores_q: torch.Tensor) -> tuple[float, float]:
    """(cross-entropy, KL) over one row's structures from their scores under p and q."""
    logp = scores_p - torch.logsumexp(scores_p, 0) if (scores_p > -math.inf).any() else None
    if logp is None:
        return 0.0, 0.0
    if not (scores_q > -math.inf).any():  # q has no structure
        return math.inf, math.inf
    logq = scores_q - torch.logsumexp(scores_q, 0)
    p = logp.exp()
    on = p > 0
    if (on & (logq == -math.inf)).any():
        return math.inf, math.inf
    ce = float(-(p[on] * logq[on]).sum())
    return ce, float((p[on] * (logp[on] - logq[on])).sum())


def _check(got_ce, got_kl, want):
    for b, (ce, kl) in enumerate(want):
        if math.isinf(ce):
            assert got_ce[b] == math.inf and got_kl[b] == math.inf
        else:
            assert got_ce[b].item() == pytest.approx(ce, rel=1e-9, abs=1e-9)
            assert got_kl[b].item() == pytest.approx(kl, rel=1e-9, abs=1e-9)


@SETTINGS
@given(hst.integers(1, 3), hst.integers(1, 4), hst.integers(1, 3), hst.integers(0, 2**16),
       hst.sampled_from([0.0, 0.15, 0.4]))
def test_chain_cross_entropy_and_kl_equal_enumeration(B, T, N, seed, forbid):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, T + 1, (B,), generator=g)
    (up, ap), (uq, aq) = _potentials(g, B, T, N, forbid), _potentials(g, B, T, N, forbid)
    p = st.ChainDistribution(up, ap, lengths=lengths)
    q = st.ChainDistribution(uq, aq, lengths=lengths)
    want = []
    for b in range(B):
        L = int(lengths[b])
        ys = torch.zeros(N**L, T, dtype=torch.long)  # one empty labeling when L = 0
        if L:
            ys[:, :L] = torch.tensor(list(itertools.product(range(N), repeat=L)), dtype=torch.long)
        sp = torch.stack([st.path_score(up[b:b + 1], ap, y[None], lengths=lengths[b:b + 1])[0] for y in ys])
        sq = torch.stack([st.path_score(uq[b:b + 1], aq, y[None], lengths=lengths[b:b + 1])[0] for y in ys])
        want.append(_brute(sp, sq))
    got_ce, got_kl = p.cross_entropy(q), torch.distributions.kl_divergence(p, q)
    assert not torch.isnan(got_ce).any() and not torch.isnan(got_kl).any()
    _check(got_ce, got_kl, want)
    torch.testing.assert_close(p.kl_divergence(p), torch.zeros(B, dtype=torch.float64), rtol=0, atol=1e-10)


@SETTINGS
@given(hst.integers(1, 2), hst.integers(1, 4), hst.integers(1, 3), hst.integers(1, 3), hst.integers(0, 2**16),
       hst.sampled_from([0.0, 0.2]), hst.booleans())
def test_semimarkov_cross_entropy_and_kl_equal_enumeration(B, T, N, S, seed, forbid, segment):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, T + 1, (B,), generator=g)
    (cp, ap), (cq, aq) = _potentials(g, B, T, N, forbid), _potentials(g, B, T, N, forbid)
    lp, lq = (torch.randn(S, N, generator=g, dtype=torch.float64) for _ in range(2))
    seg = torch.randn(B, T, S, N, generator=g, dtype=torch.float64) if segment else None
    p = st.SemiMarkovDistribution(cp, ap, max_len=S, length_scores=lp, lengths=lengths, segment_scores=seg)
    q = st.SemiMarkovDistribution(cq, aq, max_len=S, length_scores=lq, lengths=lengths)
    want = []
    for b in range(B):
        labels, starts = all_segmentations(int(lengths[b]), T, N, S)
        M = len(labels)
        rows = torch.full((M,), b)

        def scores(content, trans, length, segments, rows=rows, labels=labels, starts=starts):
            return st.semimarkov_score(content[rows], trans, labels.clamp(min=0), starts, max_len=S,
                                       length_scores=length, lengths=lengths[rows],
                                       segment_scores=None if segments is None else segments[rows])

        want.append(_brute(scores(cp, ap, lp, seg), scores(cq, aq, lq, None)))
    got_ce, got_kl = p.cross_entropy(q), torch.distributions.kl_divergence(p, q)
    assert not torch.isnan(got_ce).any() and not torch.isnan(got_kl).any()
    _check(got_ce, got_kl, want)


def test_kl_is_differentiable_and_refuses_other_rows():
    g = torch.Generator().manual_seed(0)
    u = torch.randn(2, 5, 3, generator=g, dtype=torch.float64, requires_grad=True)
    a = torch.randn(3, 3, generator=g, dtype=torch.float64)
    p, q = st.ChainDistribution(u, a), st.ChainDistribution(u.detach().flip(1), a)
    torch.distributions.kl_divergence(p, q).sum().backward()
    assert torch.isfinite(u.grad).all() and u.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="same rows"):
        p.kl_divergence(st.ChainDistribution(u.detach(), a, lengths=torch.tensor([5, 4])))
    with pytest.raises(TypeError, match="must be a ChainDistribution"):
        p.cross_entropy(st.SemiMarkovDistribution(u.detach(), a, max_len=2))


def test_sample_shapes_modes_and_log_prob_over_samples():
    g = torch.Generator().manual_seed(1)
    u, a = torch.randn(3, 6, 4, generator=g), torch.randn(4, 4, generator=g)
    lengths = torch.tensor([6, 2, 0])
    chain = st.ChainDistribution(u, a, lengths=lengths)
    assert chain.batch_shape == (3,) and chain.event_shape == (6,) and torch.equal(chain.mode, chain.argmax)
    y = chain.sample(5, generator=g)
    torch.testing.assert_close(chain.log_prob(y), torch.stack([chain.log_prob(y[i]) for i in range(5)]))
    assert chain.log_prob(y.reshape(5, 1, 3, 6)).shape == (5, 1, 3)
    semi = st.SemiMarkovDistribution(u, a, max_len=3, lengths=lengths)
    assert semi.batch_shape == (3,) and semi.event_shape == (6,) and semi.mode[0].shape == (3, 6)
    labels, starts = semi.sample(4, generator=g)
    want = torch.stack([semi.log_prob((labels[i], starts[i])) for i in range(4)])
    torch.testing.assert_close(semi.log_prob((labels, starts)), want)


def test_relaxed_samples_are_perturb_and_map_with_straight_through_gradients():
    g = torch.Generator().manual_seed(3)
    u = torch.randn(2, 5, 3, generator=g, dtype=torch.float64, requires_grad=True)
    a = torch.randn(3, 3, generator=g, dtype=torch.float64)
    lengths = torch.tensor([5, 3])
    dist = st.ChainDistribution(u, a, lengths=lengths)
    hard = dist.rsample(6, temperature=0.7, generator=torch.Generator().manual_seed(9))
    soft = dist.rsample(6, temperature=0.7, hard=False, generator=torch.Generator().manual_seed(9))
    inside = (torch.arange(5) < lengths[:, None]).double()
    torch.testing.assert_close(hard.detach().sum(-1), inside.expand(6, 2, 5))  # one-hot inside, 0 beyond
    torch.testing.assert_close(soft.detach().sum(-1), inside.expand(6, 2, 5))
    assert torch.equal(hard.detach().argmax(-1)[hard.detach().sum(-1) > 0],
                       dist.rsample(6, temperature=1e-3, hard=False,
                                    generator=torch.Generator().manual_seed(9)).detach().argmax(-1)[
                           hard.detach().sum(-1) > 0])  # the soft sample tends to the perturbed MAP
    w = torch.randn(6, 2, 5, 3, generator=g, dtype=torch.float64)
    (g_hard,) = torch.autograd.grad((hard * w).sum(), u)
    (g_soft,) = torch.autograd.grad((soft * w).sum(), u)
    torch.testing.assert_close(g_hard, g_soft)  # straight-through: the soft sample's gradient
    independent = st.ChainDistribution(u.detach(), torch.zeros(3, 3, dtype=torch.float64))
    draws = independent.rsample(4000, generator=torch.Generator().manual_seed(1)).mean(0)
    torch.testing.assert_close(draws, independent.marginals, rtol=0, atol=0.04)  # exact where independent
    with pytest.raises(ValueError, match="temperature"):
        dist.rsample(2, temperature=0.0)
    with pytest.raises(ValueError, match="temperature"):
        dist.rsample(2, temperature=-1.0)


def test_a_chain_distribution_over_a_mask_equals_the_functions_with_the_mask():
    """Issue 54, item 3: mask= on ChainDistribution, every per-position result at the mask's
    positions (gaps, left padding, an empty row), structures read there."""
    g = torch.Generator().manual_seed(4)
    u = torch.randn(3, 6, 3, generator=g, dtype=torch.float64)
    a = torch.randn(3, 3, generator=g, dtype=torch.float64)
    mask = torch.tensor([[1, 0, 1, 1, 0, 1], [0, 0, 1, 1, 1, 1], [0] * 6], dtype=torch.bool)
    dist = st.ChainDistribution(u, a, mask=mask)
    score, path = st.viterbi(u, a, mask=mask)
    assert torch.equal(dist.argmax, path) and torch.equal(dist.mode, path)
    torch.testing.assert_close(dist.max, score)
    torch.testing.assert_close(dist.marginals, st.marginals(u, a, mask=mask))
    torch.testing.assert_close(dist.log_partition, st.log_partition(u, a, mask=mask))
    y = dist.sample(4, generator=g)
    assert ((y >= 0) == mask).all()  # labels exactly at the mask's positions
    torch.testing.assert_close(dist.log_prob(y), torch.stack([dist.log_prob(y[i]) for i in range(4)]))
    torch.testing.assert_close(dist.log_prob(y[0]), st.path_score(u, a, y[0].clamp(min=0), mask=mask)
                               - st.log_partition(u, a, mask=mask))
    scores, paths = dist.kbest(2)
    want_scores, want_paths = st.kbest(u, a, 2, mask=mask)
    torch.testing.assert_close(scores, want_scores)
    assert torch.equal(paths, want_paths)
    value, found, _ = dist.loss_augmented(y[0].clamp(min=0))
    want_value, want_found, _ = st.loss_augmented(u, a, y[0].clamp(min=0), mask=mask)
    torch.testing.assert_close(value, want_value)
    assert torch.equal(found, want_found)
    relaxed = dist.rsample(2)
    assert relaxed.shape == (2, 3, 6, 3) and torch.equal(relaxed.sum(-1) > 0, mask.expand(2, 3, 6))
    edges = dist.edge_marginals
    assert edges.shape == (3, 5, 3, 3)
    torch.testing.assert_close(edges.sum((2, 3))[0], torch.tensor([1.0, 0, 1, 1, 0], dtype=torch.float64))


def test_a_semimarkov_distribution_over_a_mask_equals_one_over_the_compacted_rows():
    g = torch.Generator().manual_seed(5)
    content = torch.randn(3, 6, 3, generator=g, dtype=torch.float64)
    a = torch.randn(3, 3, generator=g, dtype=torch.float64)
    mask = torch.tensor([[1, 0, 1, 1, 0, 1], [0, 0, 1, 1, 1, 1], [0] * 6], dtype=torch.bool)
    dist = st.SemiMarkovDistribution(content, a, max_len=2, mask=mask)
    order = torch.sort((~mask).int(), dim=1, stable=True).indices  # each row's positions first
    packed = st.SemiMarkovDistribution(content.gather(1, order[..., None].expand(-1, -1, 3)), a, max_len=2,
                                       lengths=mask.sum(1))
    torch.testing.assert_close(dist.log_partition, packed.log_partition)
    labels, starts = dist.argmax
    assert torch.equal(labels >= 0, mask) and not (starts & ~mask).any()
    packed_labels = packed.argmax[0]
    assert torch.equal(labels[mask], packed_labels[packed_labels >= 0])
    torch.testing.assert_close(dist.marginals.positions.sum(-1), mask.double())
    sample = dist.sample(3, generator=g)
    assert torch.equal(sample[0] >= 0, mask.expand(3, 3, 6))
    torch.testing.assert_close(dist.log_prob(sample), torch.stack([dist.log_prob((sample[0][i], sample[1][i]))
                                                                   for i in range(3)]))
    scores, k_labels, _ = dist.kbest(2)
    torch.testing.assert_close(scores, packed.kbest(2)[0])
    assert torch.equal(k_labels[:, 0], labels)
    value, found, _, _ = dist.loss_augmented((labels.clamp(min=0), starts))
    assert torch.equal(found >= 0, mask)


def test_semimarkov_relaxed_samples():
    g = torch.Generator().manual_seed(6)
    content = torch.randn(2, 5, 3, generator=g, dtype=torch.float64, requires_grad=True)
    a = torch.randn(3, 3, generator=g, dtype=torch.float64)
    dist = st.SemiMarkovDistribution(content, a, max_len=2, lengths=torch.tensor([5, 3]))
    hard = dist.rsample(4, temperature=0.5, generator=torch.Generator().manual_seed(2))
    soft = dist.rsample(4, temperature=0.5, hard=False, generator=torch.Generator().manual_seed(2))
    inside = (torch.arange(5) < torch.tensor([5, 3])[:, None]).double()
    torch.testing.assert_close(hard.detach().sum(-1), inside.expand(4, 2, 5))
    torch.testing.assert_close(soft.detach().sum(-1), inside.expand(4, 2, 5))
    w = torch.randn(4, 2, 5, 3, generator=g, dtype=torch.float64)
    torch.testing.assert_close(torch.autograd.grad((hard * w).sum(), content)[0],
                               torch.autograd.grad((soft * w).sum(), content)[0])
    with pytest.raises(ValueError, match="temperature"):
        dist.rsample(temperature=0.0)


def test_the_hinge_takes_a_mask_for_chains_and_segmentations():
    g = torch.Generator().manual_seed(7)
    u, a = torch.randn(2, 5, 3, generator=g, dtype=torch.float64), torch.randn(3, 3, generator=g, dtype=torch.float64)
    y = torch.randint(0, 3, (2, 5), generator=g)
    mask = torch.tensor([[1, 0, 1, 1, 1], [0, 1, 1, 0, 0]], dtype=torch.bool)
    want = st.loss_augmented(u, a, y, mask=mask)[0].clamp(min=0)
    torch.testing.assert_close(st.structured_hinge(u, a, y, mask=mask, reduction="none"), want)
    torch.testing.assert_close(st.StructuredHingeLoss()(u, a, y, mask=mask), want.mean())
    starts = torch.ones(2, 5, dtype=torch.bool)
    value = st.semimarkov_loss_augmented(u, a, y, starts, max_len=2, mask=mask)[0].clamp(min=0)
    got = st.structured_hinge(u, a, y, max_len=2, target_starts=starts, mask=mask, reduction="none")
    torch.testing.assert_close(got, value)
