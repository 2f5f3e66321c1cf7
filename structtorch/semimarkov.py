"""Semi-Markov (segment) dynamic programs: Viterbi and log-partition over segmentations.

A segmentation splits positions [0, L) into consecutive segments [s, e) with labels n and lengths
d = e - s <= max_len. A segment scores

    sum_{t=s}^{e-1} content[b, t, n] + length_scores[d-1, n] + boundary[b, e-1, n]
        (+ segment_scores[b, e-1, d-1, n] when given),

consecutive segments m -> n add transitions[m, n], and start/end score the first/last segment's
label. ``segment_plif`` (a :class:`structtorch.SegmentPLiF`) adds PLiF_n of the mean of a
per-position track over each segment (eq. 7 of Rätsch & Sonnenburg). Segment content sums
accumulate as each segment grows (-inf entries are counted separately, so a forbidden position
forbids every segment that covers it), so memory stays O(B T N) unless
``segment_scores`` (B, T, max_len, N) is given.

On CPU the DPs run in compiled kernels (``csrc/semimarkov.cpp``); this module holds the glue and
the batched PyTorch implementation (a loop over segment ends, vectorized over batch, length and
label), which runs on any device and is the reference. Shapes: B batch, T max length, N labels,
S = max_len (clamped to T internally).
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from . import chain as _chain
from ._chain_torch import NEG_INF, accumulate, grads_through, safe_logsumexp
from ._checks import (
    LengthsLike,
    _fmt,
    check_float,
    check_lengths,
    check_unary,
    forbidden_pattern,
    guard_overflow,
)
from .features import SegmentPLiF, check_support, plif_interpolate

__all__ = ["semimarkov_viterbi", "semimarkov_log_partition", "semimarkov_score", "SemiMarkov"]


@dataclass
class SemiMarkov:
    """Canonical semi-Markov potentials (see the module docstring).

    content (B, T, N); transitions (N, N); length_scores (B, S, N); boundary (B, T, N);
    segment_scores (B, T, S, N) or None; start, end (B, N); lengths (B,) int64; segment_plif
    (tracks (B, T, N), ordinates (N, P)) or None.
    """

    content: Tensor
    transitions: Tensor
    length_scores: Tensor
    boundary: Tensor
    segment_scores: Tensor | None
    start: Tensor
    end: Tensor
    lengths: Tensor
    segment_plif: SegmentPLiF | None = None

    def map(self, fn: Callable[[Tensor], Tensor]) -> SemiMarkov:
        """The potentials (and segment PLiF tracks and ordinates) passed through ``fn``."""
        def apply(x):
            return None if x is None else fn(x)
        plif = self.segment_plif
        if plif is not None:
            plif = SegmentPLiF(fn(plif.tracks), fn(plif.ordinates), plif.low, plif.high)
        return SemiMarkov(apply(self.content), apply(self.transitions), apply(self.length_scores),
                          apply(self.boundary), apply(self.segment_scores), apply(self.start),
                          apply(self.end), self.lengths, plif)

    def detached(self) -> SemiMarkov:
        """The same potentials cut from the autograd graph."""
        return self.map(Tensor.detach)

    @property
    def shape(self) -> tuple[int, int, int, int]:
        B, T, N = self.content.shape
        return B, T, self.length_scores.shape[1], N

    def forbidden_counts(self) -> Tensor:
        """F (B, T+1, N): cumulative count of -inf content, so a segment [s, e) is forbidden iff
        F[e] - F[s] > 0."""
        forbidden = (self.content == NEG_INF).long()
        pad = forbidden.new_zeros(forbidden.shape[0], 1, forbidden.shape[2])
        return torch.cat([pad, forbidden.cumsum(1)], 1)


def _check_segment_plif(plif: object, content: Tensor) -> SegmentPLiF | None:
    if plif is None:
        return None
    if not isinstance(plif, SegmentPLiF):
        raise TypeError("segment_plif must be a SegmentPLiF (see PLiF.over_segments), "
                        f"got {type(plif).__name__}")
    B, T, N = content.shape
    tracks = check_float("segment_plif.tracks", plif.tracks, content, "content")
    if tracks.shape != (B, T, N):
        raise ValueError(f"segment_plif.tracks must have shape (B, T, N) = ({B}, {T}, {N}), "
                         f"got {_fmt(tracks.shape)}")
    if not bool(torch.isfinite(tracks).all()):
        raise ValueError("segment_plif.tracks must be finite")
    ordinates = check_float("segment_plif.ordinates", plif.ordinates, content, "content")
    if ordinates.dim() != 2 or ordinates.shape[0] != N or ordinates.shape[1] < 2:
        raise ValueError(f"segment_plif.ordinates must have shape (N, P) = ({N}, P) with P >= 2, "
                         f"got {_fmt(ordinates.shape)}")
    if not bool(torch.isfinite(ordinates).all()):
        raise ValueError("segment_plif.ordinates must be finite")
    try:
        low, high = check_support(ordinates.shape[1], plif.low, plif.high)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"segment_plif: {exc}") from None
    return SegmentPLiF(tracks.contiguous(), ordinates.contiguous(), low, high)


def check_semimarkov(content, transitions, max_len, length_scores, boundary, segment_scores,
                     start, end, lengths, segment_plif=None) -> SemiMarkov:
    """Validate semi-Markov potentials; shapes are named in every error."""
    content = check_unary(content, "content").contiguous()
    B, T, N = content.shape
    if isinstance(max_len, bool) or not isinstance(max_len, numbers.Integral):
        raise TypeError(f"max_len must be an int, got {type(max_len).__name__}")
    if max_len < 1:
        raise ValueError(f"max_len must be an int >= 1, got {max_len!r}")
    S = int(max_len)
    transitions = check_float("transitions", transitions, content, "content")
    if transitions.shape != (N, N):
        raise ValueError(f"transitions must have shape (N, N) = ({N}, {N}), got {_fmt(transitions.shape)}")

    # segments never exceed T: work with S' = min(max_len, T) so that memory and time do not grow
    # with a max_len meant as "unbounded" (defaults are built at S' directly)
    used = max(1, min(S, T))

    def optional(name, x, shapes, default_shape):
        if x is None:
            return content.new_zeros(default_shape)
        x = check_float(name, x, content, "content")
        if x.shape not in shapes:
            wanted = " or ".join(_fmt(s) for s in shapes)
            raise ValueError(f"{name} must have shape {wanted}, got {_fmt(x.shape)}")
        return x.expand(default_shape) if x.shape != default_shape else x

    if length_scores is None:
        length_scores = content.new_zeros(B, used, N)
    else:
        length_scores = optional("length_scores", length_scores, [(S, N), (B, S, N)], (B, S, N))[:, :used]
    boundary = optional("boundary", boundary, [(B, T, N)], (B, T, N))
    start = optional("start", start, [(N,), (B, N)], (B, N))
    end = optional("end", end, [(N,), (B, N)], (B, N))
    if segment_scores is not None:
        segment_scores = check_float("segment_scores", segment_scores, content, "content")
        if segment_scores.shape != (B, T, S, N):
            raise ValueError(
                f"segment_scores must have shape (B, T, max_len, N) = ({B}, {T}, {S}, {N}), "
                f"got {_fmt(segment_scores.shape)}"
            )
        segment_scores = segment_scores[:, :, :used]
    return SemiMarkov(content, transitions, length_scores, boundary, segment_scores, start, end,
                      check_lengths(lengths, B, T, content.device),
                      _check_segment_plif(segment_plif, content))


def _segment_terms(sm: SemiMarkov, F: Tensor, e: int) -> Tensor:
    """(B, D, N) score of the segments ending at e (exclusive) with lengths 1..D, D = min(S, e),
    without the incoming term (start or transition). Content sums accumulate backwards from e
    (never a difference of prefix sums, which one huge-magnitude entry would ruin)."""
    D = min(sm.shape[2], e)
    s = torch.arange(e - 1, e - D - 1, -1, device=F.device)  # segment starts for d = 1..D
    window = sm.content[:, e - D:e].double().flip(1)  # positions e-1, e-2, ..., e-D
    content = torch.where(window == NEG_INF, 0.0, window).cumsum(1)
    blocked = (F[:, e].unsqueeze(1) - F[:, s]) > 0
    terms = content + sm.length_scores[:, :D].double() + sm.boundary[:, e - 1].double().unsqueeze(1)
    if sm.segment_scores is not None:
        terms = terms + sm.segment_scores[:, e - 1, :D].double()
    if sm.segment_plif is not None:
        plif = sm.segment_plif
        d = torch.arange(1, D + 1, device=F.device, dtype=torch.float64).view(1, D, 1)
        means = plif.tracks[:, e - D:e].double().flip(1).cumsum(1) / d
        terms = terms + plif_interpolate(means, plif.ordinates.double(), plif.low, plif.high)
    return torch.where(blocked, NEG_INF, terms)


def _log_forward(sm: SemiMarkov) -> Tensor:
    """(B, N): log-sum over segmentations of [0, L) whose last segment has label n, plus end[n];
    computed through alpha[e], the same over [0, e) for every e (differentiable by autograd)."""
    reduce = safe_logsumexp
    B, T, S, N = sm.shape
    F = sm.forbidden_counts()
    alpha = [sm.start.new_full((B, N), NEG_INF, dtype=torch.float64)]
    incoming = [sm.start.double()]  # incoming[s]: term of a segment starting at s
    trans = sm.transitions.double()
    for e in range(1, T + 1):
        D = min(S, e)
        terms = _segment_terms(sm, F, e) + torch.stack(incoming[e - D:e][::-1], 1)
        alpha.append(reduce(terms, 1))
        incoming.append(reduce(alpha[e].unsqueeze(2) + trans, 1))
    final = torch.stack(alpha, 1).gather(1, sm.lengths.view(B, 1, 1).expand(B, 1, N)).squeeze(1)
    return final + sm.end.double()


def _length_pick(sm: SemiMarkov, d: Tensor, lab: Tensor) -> Tensor:
    """(B, T) length_scores[b, d-1, lab] for per-position lengths d and labels lab."""
    B, _, S, N = sm.shape
    return sm.length_scores.reshape(B, S * N).gather(1, (d - 1) * N + lab)


def semimarkov_score(sm: SemiMarkov, labels: Tensor, starts: Tensor) -> Tensor:
    """(B,) differentiable score of a segmentation given as labels (B, T) and starts (B, T) bool
    (trusted: valid inside each length; anything beyond)."""
    B, T, S, N = sm.shape
    if T == 0:
        return accumulate(sm.content.sum(dim=(1, 2)))
    lengths = sm.lengths
    lay = segment_layout(labels, starts, lengths)
    t, inside, lab, starts, ends = lay.t, lay.inside, lay.labels, lay.starts, lay.ends
    d = lay.length.clamp(1, S)
    zero = accumulate(sm.content.new_zeros(()))

    def pick(x: Tensor) -> Tensor:  # (B, T, N) -> (B, T) at the labels, in the accumulation dtype
        return accumulate(x.gather(2, lab.unsqueeze(2)).squeeze(2))

    per_end = pick(sm.boundary) + accumulate(_length_pick(sm, d, lab))
    if sm.segment_scores is not None:
        flat = sm.segment_scores.reshape(B, T, S * N)
        per_end = per_end + accumulate(flat.gather(2, ((d - 1) * N + lab).unsqueeze(2)).squeeze(2))
    if sm.segment_plif is not None:
        plif = sm.segment_plif
        means = lay.means(pick(plif.tracks)).unsqueeze(2).expand(B, T, N)
        per_end = per_end + pick(plif_interpolate(means, accumulate(plif.ordinates), plif.low, plif.high))
    total = torch.where(inside, pick(sm.content), zero).sum(1) + torch.where(ends, per_end, zero).sum(1)
    prev = torch.cat([lab[:, :1], lab[:, :-1]], 1)
    total = total + torch.where(starts & (t > 0), accumulate(sm.transitions[prev, lab]), zero).sum(1)
    last = lab.gather(1, (lengths - 1).clamp(min=0).unsqueeze(1)).squeeze(1)
    edge = accumulate(sm.start.gather(1, lab[:, :1]).squeeze(1)) + accumulate(
        sm.end.gather(1, last.unsqueeze(1)).squeeze(1))
    return total + torch.where(lengths > 0, edge, zero)


@dataclass
class SegmentLayout:
    """Per-position bookkeeping of segmentations (B, T): positions ``t``, ``inside`` the length,
    ``labels`` (0 outside), ``starts`` (one at position 0), segment ``ends``, the index of each
    position's ``segment`` and the ``length`` so far (the full length at the segment's end)."""

    t: Tensor
    inside: Tensor
    labels: Tensor
    starts: Tensor
    ends: Tensor
    segment: Tensor
    length: Tensor

    def means(self, values: Tensor) -> Tensor:
        """Mean of ``values`` (B, T) or (B, T, K) over each position's segment, valid at the
        segment's end (sums by segment, not as differences of prefix sums)."""
        index = self.segment if values.dim() == 2 else self.segment.unsqueeze(2).expand_as(values)
        inside = self.inside if values.dim() == 2 else self.inside.unsqueeze(2)
        values = torch.where(inside, values, 0.0)
        sums = torch.zeros_like(values).scatter_add(1, index, values).gather(1, index)
        length = self.length.to(sums.dtype)
        return sums / (length if values.dim() == 2 else length.unsqueeze(2))


def segment_layout(labels: Tensor, starts: Tensor, lengths: Tensor) -> SegmentLayout:
    """The :class:`SegmentLayout` of segmentations given as labels and starts (B, T)."""
    T = labels.shape[1]
    t = torch.arange(T, device=labels.device)
    inside = t < lengths[:, None]
    lab = torch.where(inside, labels, 0).clamp(min=0)
    first = torch.zeros_like(starts)
    first[:, :1] = True
    starts = (starts | first) & inside
    next_starts = torch.cat([starts[:, 1:], torch.ones_like(starts[:, :1])], 1)
    ends = inside & (next_starts | (t == lengths[:, None] - 1))
    segment = (starts.long().cumsum(1) - 1).clamp(min=0)
    length = t - torch.where(starts, t, torch.zeros_like(t)).cummax(1).values + 1
    return SegmentLayout(t, inside, lab, starts, ends, segment, length)


def _last_forbidden(content: Tensor) -> Tensor:
    """(B, T+1, N) int64: for each segment end e, the last position < e whose content is -inf
    (-1 if none); a segment [s, e) is allowed iff s exceeds it."""
    B, T, N = content.shape
    t = torch.arange(T, device=content.device).view(1, T, 1)
    last = torch.where(content == NEG_INF, t, -1).cummax(1).values if T else content.new_empty(B, 0, N).long()
    return torch.cat([torch.full((B, 1, N), -1, dtype=torch.long, device=content.device), last], 1)


@torch.no_grad()
def _compiled_segmentation(sm: SemiMarkov, ops) -> tuple[Tensor, Tensor, Tensor]:
    segment = sm.content.new_empty(0) if sm.segment_scores is None else sm.segment_scores.contiguous()
    parts = (sm.length_scores, sm.boundary, segment, sm.transitions, sm.start, sm.end)
    plif = sm.segment_plif or SegmentPLiF(sm.content.new_empty(0), sm.content.new_empty(0, 2), 0.0, 1.0)
    return ops.semimarkov_viterbi_forward(sm.content.detach().contiguous(), _last_forbidden(sm.content),
                                          *(x.detach().contiguous() for x in parts), sm.lengths,
                                          plif.tracks.detach(), plif.ordinates.detach(), plif.low, plif.high)


@torch.no_grad()
def _viterbi_segmentation(sm: SemiMarkov) -> tuple[Tensor, Tensor, Tensor]:
    """(best (B,), labels (B, T), starts (B, T)) by max-plus over segment ends, then backtracking
    that jumps one segment per step for every row at once. Ties: the shortest last segment, then
    the smallest previous label."""
    B, T, S, N = sm.shape
    F = sm.forbidden_counts()
    dev = F.device
    trans = sm.transitions.double()
    alpha = [sm.start.new_full((B, N), NEG_INF, dtype=torch.float64)]
    incoming, came_from = [sm.start.double()], [torch.zeros(B, N, dtype=torch.long, device=dev)]
    best_len = [torch.zeros(B, N, dtype=torch.long, device=dev)]
    for e in range(1, T + 1):
        D = min(S, e)
        terms = _segment_terms(sm, F, e) + torch.stack(incoming[e - D:e][::-1], 1)
        d = terms.argmax(1)
        alpha.append(terms.gather(1, d.unsqueeze(1)).squeeze(1))
        best_len.append(d + 1)
        cand = alpha[e].unsqueeze(2) + trans
        m = cand.argmax(1)
        incoming.append(cand.gather(1, m.unsqueeze(1)).squeeze(1))
        came_from.append(m)
    alpha_t, len_t, from_t = (torch.stack(x, 1) for x in (alpha, best_len, came_from))
    lengths = sm.lengths
    final = alpha_t.gather(1, lengths.view(B, 1, 1).expand(B, 1, N)).squeeze(1) + sm.end.double()
    label = final.argmax(1)
    best = torch.where(lengths > 0, final.gather(1, label.unsqueeze(1)).squeeze(1), 0.0)
    labels = torch.full((B, T), -1, dtype=torch.long, device=dev)
    starts = torch.zeros(B, T, dtype=torch.bool, device=dev)
    rows = torch.arange(B, device=dev)
    e = lengths.clone()
    active = (lengths > 0) & (best > NEG_INF)
    seg_label = torch.full((B, T), -1, dtype=torch.long, device=dev)
    while bool(active.any()):
        d = len_t[rows, e, label]
        s = e - d
        starts[rows[active], s[active]] = True
        seg_label[rows[active], s[active]] = label[active]
        label = torch.where(active, from_t[rows, s, label], label)
        e = torch.where(active, s, e)
        active = active & (e > 0)
    filled = torch.where(starts, torch.arange(T, device=dev), 0).cummax(1).values
    inside = torch.arange(T, device=dev) < lengths[:, None]
    labels = torch.where(inside & (best > NEG_INF)[:, None], seg_label.gather(1, filled), -1)
    starts &= (best > NEG_INF)[:, None]
    return best, labels, starts


def semimarkov_viterbi(
    content: Tensor,
    transitions: Tensor,
    *,
    max_len: int,
    length_scores: Tensor | None = None,
    boundary: Tensor | None = None,
    segment_scores: Tensor | None = None,
    start: Tensor | None = None,
    end: Tensor | None = None,
    lengths: LengthsLike = None,
    segment_plif: SegmentPLiF | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Highest-scoring segmentation of each sequence.

    Parameters
    ----------
    content : Tensor (B, T, N)
        Per-position label scores, summed over each segment.
    transitions : Tensor (N, N)
        ``transitions[m, n]`` scores a segment of label m followed by one of label n.
    max_len : int
        S, the longest segment.
    length_scores : Tensor (S, N) or (B, S, N), optional
        ``length_scores[d-1, n]`` scores a segment of length d and label n.
    boundary : Tensor (B, T, N), optional
        ``boundary[b, e-1, n]`` scores a segment of label n ending at e.
    segment_scores : Tensor (B, T, S, N), optional
        ``segment_scores[b, e-1, d-1, n]``: any further score of the segment [e-d, e).
    start, end : Tensor (N,) or (B, N), optional
        Scores of the first and last segment's label.
    lengths : Tensor (B,), optional
    segment_plif : SegmentPLiF, optional
        Adds ``PLiF_n(mean(tracks[b, s:e, n]))`` to each segment [s, e) of label n (see
        :meth:`structtorch.PLiF.over_segments`); compiled on CPU, O(T S N) time, O(T N) memory.

    Returns
    -------
    score : Tensor (B,)
        0 for empty rows, -inf where no segmentation is feasible; its gradient w.r.t. every input
        is the indicator of the returned segmentation.
    labels : Tensor (B, T) int64
        The label of each position, -1 beyond the length and on infeasible rows.
    starts : Tensor (B, T) bool
        True where a segment begins.
    """
    sm = check_semimarkov(content, transitions, max_len, length_scores, boundary, segment_scores,
                          start, end, lengths, segment_plif)
    ops = _chain._ops_for(sm.content) if sm.shape[1] > 0 else None
    best, labels, starts = _viterbi_segmentation(sm) if ops is None else _compiled_segmentation(sm, ops)
    score = semimarkov_score(sm, labels, starts).to(sm.content.dtype)
    return _guard(sm, torch.where(best > NEG_INF, score, NEG_INF), "the Viterbi score"), labels, starts


def _guard(sm: SemiMarkov, result: Tensor, what: str) -> Tensor:
    """``result`` (B,), or a ValueError where it overflowed (see :func:`guard_overflow`)."""
    def feasible() -> Tensor:
        return _viterbi_segmentation(sm.map(forbidden_pattern))[0] > NEG_INF

    plif = [] if sm.segment_plif is None else [sm.segment_plif.ordinates]
    potentials = [x for x in (sm.content, sm.transitions, sm.length_scores, sm.boundary, sm.segment_scores,
                              sm.start, sm.end) if x is not None] + plif
    return guard_overflow(result, potentials, 5 * sm.shape[1] + 2, feasible, what,
                          "the content, transition, length, boundary and segment scores")


class _LogPartition(torch.autograd.Function):
    """Compiled semi-Markov log-partition with the hand-written segment-marginal backward; double
    backward differentiates the PyTorch recursion instead."""

    @staticmethod
    def forward(ctx, content, length, boundary, segment, transitions, start, end, lengths):
        forb = _last_forbidden(content)
        args = (content, forb, length, boundary, segment, transitions, start, end, lengths)
        logz, alpha, inc = _chain.chain_ops().semimarkov_logz_forward(*args)
        logz = torch.where(lengths > 0, logz, 0.0)
        ctx.save_for_backward(content, length, boundary, segment, transitions, start, end, lengths,
                              logz, alpha, inc, forb)
        return logz.to(content.dtype)

    @staticmethod
    def backward(ctx, grad):
        content, length, boundary, segment, transitions, start, end, lengths, logz, alpha, inc, forb = (
            ctx.saved_tensors)
        inputs = (content, length, boundary, segment, transitions, start, end)
        if torch.is_grad_enabled():  # create_graph: differentiate the PyTorch recursion
            sm = SemiMarkov(content, transitions, length, boundary, segment if segment.numel() else None,
                            start, end, lengths)
            ref = _reference_log_partition(sm)
            return (*grads_through(ref, inputs, ctx.needs_input_grad[:7], grad), None)
        grads = _chain.chain_ops().semimarkov_logz_backward(
            grad.double().contiguous(), logz, alpha, inc, content, forb, length, boundary, segment,
            transitions, start, end, lengths)
        grads[4] = grads[4].sum(0)  # transitions are shared by the batch
        return (*(g.to(content.dtype) for g in grads), None)


def _reference_log_partition(sm: SemiMarkov) -> Tensor:
    final = _log_forward(sm)
    return torch.where(sm.lengths > 0, safe_logsumexp(final, 1), 0.0)


def semimarkov_log_partition(
    content: Tensor,
    transitions: Tensor,
    *,
    max_len: int,
    length_scores: Tensor | None = None,
    boundary: Tensor | None = None,
    segment_scores: Tensor | None = None,
    start: Tensor | None = None,
    end: Tensor | None = None,
    lengths: LengthsLike = None,
    segment_plif: SegmentPLiF | None = None,
) -> Tensor:
    """Log of the sum over all segmentations of exp(score), (B,); arguments as for
    :func:`semimarkov_viterbi`. 0 for empty rows, -inf for infeasible ones. Its gradients are the
    segment marginals: on CPU a compiled forward and a hand-written backward (O(T S N) time, O(T N)
    memory per sequence); elsewhere, and with ``segment_plif``, autograd through the PyTorch
    recursion."""
    sm = check_semimarkov(content, transitions, max_len, length_scores, boundary, segment_scores,
                          start, end, lengths, segment_plif)
    if sm.shape[1] == 0:
        return sm.content.sum(dim=(1, 2))  # zeros, connected to the graph (as the chain's)
    if sm.segment_plif is None and _chain._ops_for(sm.content) is not None:
        segment = sm.content.new_empty(0) if sm.segment_scores is None else sm.segment_scores
        parts = (sm.length_scores, sm.boundary, segment, sm.transitions, sm.start, sm.end)
        logz = _LogPartition.apply(sm.content, *(x.contiguous() for x in parts), sm.lengths)
    else:
        logz = _reference_log_partition(sm).to(sm.content.dtype)
    return _guard(sm, logz, "the log-partition")
