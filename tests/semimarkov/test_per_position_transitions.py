"""Semi-Markov transitions per row and position (issue 54, item 4): ``transitions[b, s - 1, m, n]``
scores a segment of label m followed by one of label n that starts at s. Every semi-Markov
function against enumeration of the segmentations, scored independently here; broadcast shapes;
the gradient of the best score w.r.t. the transitions is its indicator."""

from __future__ import annotations

import math

import pytest
import torch
from brute import all_segmentations
from hypothesis import given, settings
from hypothesis import strategies as hst

import structtorch as st


def _score(content, trans, length, start, end, labels, starts, L):
    """One segmentation's score of one row, segment by segment."""
    total, prev = 0.0, None
    bounds = [s for s in range(L) if starts[s]] + [L]
    for s, e in zip(bounds[:-1], bounds[1:], strict=True):
        n = int(labels[s])
        total += float(content[s:e, n].sum()) + float(length[e - s - 1, n])
        total += float(start[n]) if prev is None else float(trans[s - 1, prev, n])
        prev = n
    return total + (float(end[prev]) if prev is not None else 0.0)


@settings(max_examples=30, deadline=None, database=None)
@given(hst.integers(1, 3), hst.integers(1, 4), hst.integers(1, 3), hst.integers(1, 3), hst.integers(0, 2**16),
       hst.booleans())
def test_every_function_equals_enumeration(B, T, N, S, seed, forbid):
    g = torch.Generator().manual_seed(seed)
    content = torch.randn(B, T, N, generator=g, dtype=torch.float64)
    trans = torch.randn(B, max(T - 1, 0), N, N, generator=g, dtype=torch.float64)
    if forbid:
        trans[torch.rand(trans.shape, generator=g) < 0.3] = float("-inf")
    length = torch.randn(S, N, generator=g, dtype=torch.float64)
    start, end = torch.randn(N, generator=g, dtype=torch.float64), torch.randn(N, generator=g, dtype=torch.float64)
    lengths = torch.randint(0, T + 1, (B,), generator=g)
    kw = dict(max_len=S, length_scores=length, start=start, end=end, lengths=lengths)
    logz = st.semimarkov_log_partition(content, trans, **kw)
    best, labels, starts = st.semimarkov_viterbi(content, trans, **kw)
    k_scores = st.semimarkov_kbest(content, trans, 3, **kw)[0]
    dist = st.SemiMarkovDistribution(content, trans, **kw)
    marginals = dist.marginals.positions
    for b in range(B):
        L = int(lengths[b])
        seg_labels, seg_starts = all_segmentations(L, T, N, S)
        scores = torch.tensor([_score(content[b], trans[b], length, start, end, y, st_, L)
                               for y, st_ in zip(seg_labels, seg_starts, strict=True)], dtype=torch.float64)
        rows = torch.full((len(scores),), b)
        got = st.semimarkov_score(content[rows], trans[rows], seg_labels.clamp(min=0), seg_starts, max_len=S,
                                  length_scores=length, start=start, end=end, lengths=lengths[rows])
        torch.testing.assert_close(got, scores)
        want_logz = torch.logsumexp(scores, 0) if L else torch.tensor(0.0, dtype=torch.float64)
        torch.testing.assert_close(logz[b], want_logz)
        if L and not math.isinf(float(scores.max())):
            assert float(best[b]) == pytest.approx(float(scores.max()), abs=1e-10)
            assert _score(content[b], trans[b], length, start, end, labels[b], starts[b], L) == pytest.approx(
                float(scores.max()), abs=1e-10)
            top = scores.sort(descending=True).values[:3]
            torch.testing.assert_close(k_scores[b, :len(top)], top)
            p = torch.softmax(scores, 0)
            want = torch.zeros(T, N, dtype=torch.float64)
            for w, y in zip(p, seg_labels, strict=True):
                for t in range(L):
                    want[t, int(y[t])] += w
            torch.testing.assert_close(marginals[b], want, rtol=1e-9, atol=1e-10)
    if ((lengths == 0) | (logz > float("-inf"))).all():  # an infeasible row samples nothing (-1)
        sampled = dist.log_prob(dist.sample(3, generator=g))
        assert (sampled > float("-inf")).all()  # each draw is a segmentation the potentials allow


def test_broadcast_shapes_and_the_indicator_gradient():
    g = torch.Generator().manual_seed(0)
    content = torch.randn(2, 5, 3, generator=g, dtype=torch.float64)
    steps = torch.randn(4, 3, 3, generator=g, dtype=torch.float64)
    full = steps.expand(2, 4, 3, 3)
    for shape in (steps, steps[None]):
        torch.testing.assert_close(st.semimarkov_log_partition(content, shape, max_len=2),
                                   st.semimarkov_log_partition(content, full, max_len=2))
    shared = torch.randn(3, 3, generator=g, dtype=torch.float64)
    torch.testing.assert_close(st.semimarkov_log_partition(content, shared.expand(2, 4, 3, 3), max_len=2),
                               st.semimarkov_log_partition(content, shared, max_len=2))
    leaf = full.clone().requires_grad_()
    best, labels, starts = st.semimarkov_viterbi(content, leaf, max_len=2)
    (grad,) = torch.autograd.grad(best.sum(), leaf)
    want = torch.zeros_like(grad)
    for b in range(2):
        prev = int(labels[b, 0])
        for t in range(1, 5):
            if starts[b, t]:
                want[b, t - 1, prev, int(labels[b, t])] += 1
            prev = int(labels[b, t])
    torch.testing.assert_close(grad, want)
    value = st.semimarkov_loss_augmented(content, full, labels, starts, max_len=2)[0]
    assert (value >= -1e-9).all()
    with pytest.raises(ValueError, match="transitions must have shape"):
        st.semimarkov_viterbi(content, torch.randn(2, 5, 3, 3, dtype=torch.float64), max_len=2)


def test_every_semimarkov_function_takes_a_mask():
    """Issue 54, item 3: mask= wherever lengths= is taken: each function over a mask with gaps and
    left padding equals it over the compacted rows, its results back at the mask's positions."""
    g = torch.Generator().manual_seed(3)
    content = torch.randn(3, 6, 3, generator=g, dtype=torch.float64)
    trans = torch.randn(3, 5, 3, 3, generator=g, dtype=torch.float64)  # per position, moved with the mask
    mask = torch.tensor([[1, 0, 1, 1, 0, 1], [0, 0, 1, 1, 1, 1], [0] * 6], dtype=torch.bool)
    order = torch.sort((~mask).int(), dim=1, stable=True).indices
    packed = content.gather(1, order[..., None].expand(-1, -1, 3))
    into = (order[:, 1:] - 1).clamp(min=0)  # the step into each compacted position
    packed_trans = trans.gather(1, into[..., None, None].expand(-1, -1, 3, 3))
    lengths = mask.sum(1)
    kw = dict(max_len=2)

    def back(x, fill):  # compacted (B, T) -> the mask's positions
        out = torch.full_like(x, fill)
        for b in range(3):
            out[b, mask[b]] = x[b, :int(lengths[b])]
        return out

    best, labels, starts = st.semimarkov_viterbi(content, trans, mask=mask, **kw)
    ref_best, ref_labels, ref_starts = st.semimarkov_viterbi(packed, packed_trans, lengths=lengths, **kw)
    torch.testing.assert_close(best, ref_best)
    assert torch.equal(labels, back(ref_labels, -1)) and torch.equal(starts, back(ref_starts, False))
    torch.testing.assert_close(st.semimarkov_log_partition(content, trans, mask=mask, **kw),
                               st.semimarkov_log_partition(packed, packed_trans, lengths=lengths, **kw))
    torch.testing.assert_close(st.semimarkov_score(content, trans, labels.clamp(min=0), starts, mask=mask, **kw),
                               ref_best)
    scores, k_labels, _ = st.semimarkov_kbest(content, trans, 2, mask=mask, **kw)
    torch.testing.assert_close(scores, st.semimarkov_kbest(packed, packed_trans, 2, lengths=lengths, **kw)[0])
    assert torch.equal(k_labels[:, 0], labels)
    sampled, sampled_starts = st.semimarkov_sample(content, trans, 4, mask=mask, generator=g, **kw)
    assert torch.equal(sampled >= 0, mask.expand(4, 3, 6)) and not (sampled_starts & ~mask).any()
    value, found, _, _ = st.semimarkov_loss_augmented(content, trans, labels.clamp(min=0), starts, mask=mask, **kw)
    ref_value = st.semimarkov_loss_augmented(packed, packed_trans, ref_labels.clamp(min=0), ref_starts,
                                             lengths=lengths, **kw)[0]
    torch.testing.assert_close(value, ref_value)
    assert torch.equal(found >= 0, mask)
    with pytest.raises(ValueError, match="mask or lengths"):
        st.semimarkov_viterbi(content, trans, mask=mask, lengths=lengths, **kw)
