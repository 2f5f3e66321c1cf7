"""The canonical form of semi-Markov potentials, their validation, and segmentations as
per-position layouts with their (differentiable) scores.

A segmentation splits positions [0, L) into consecutive segments [s, e) with labels n and lengths
d = e - s <= max_len. A segment scores

    sum_{t=s}^{e-1} content[b, t, n] + length_scores[d-1, n] + boundary[b, e-1, n]
        (+ segment_scores[b, e-1, d-1, n] when given),

consecutive segments m -> n add transitions[m, n], and start/end score the first/last segment's
label. ``segment_plif`` (a :class:`structtorch.SegmentPLiF`) adds PLiF_n of the mean of a
per-position track over each segment (eq. 7 of Rätsch & Sonnenburg). Shapes: B batch, T max length,
N labels, S = max_len (clamped to T internally).
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from .._checks import (
    _counted,
    _fmt,
    check_finite,
    check_float,
    check_label_tensor,
    check_label_values,
    check_lengths,
    check_unary,
    on_host,
    plain,
    require,
    validation_enabled,
)
from .._numerics import NEG_INF, accumulate, zeroed
from ..chain.masking import Compaction, compaction
from .plif import SegmentPLiF, check_support, plif_interpolate

__all__ = ["SemiMarkov", "check_semimarkov", "check_segmentation", "semimarkov_score", "SegmentLayout",
           "segment_layout"]


POTENTIALS = "the content, transition, length, boundary and segment scores"


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

    def into(self, e: int) -> Tensor:
        """Transitions (B or 1, N, N) scoring the step into a segment that starts at ``e`` >= 1:
        the shared (N, N) matrix, per-row ones (B, N, N) (the expectations' form), or row b's
        ``transitions[b, e - 1]`` of per-position ones (zeros past the last step, which no segment
        takes)."""
        t = self.transitions
        if t.dim() < 4:
            return t if t.dim() == 3 else t.unsqueeze(0)
        if e - 1 < t.shape[1]:
            return t[:, e - 1]
        return t.new_zeros(t.shape[0], *t.shape[2:])

    @property
    def per_position(self) -> bool:
        """Whether the transitions are per row and position (B, T-1, N, N)."""
        return self.transitions.dim() == 4

    def rows(self, index: Tensor) -> SemiMarkov:
        """The batch rows ``index`` (a 1-d int64 tensor) of the potentials."""
        def take(x):
            return None if x is None else x[index]
        plif = self.segment_plif
        if plif is not None:
            plif = SegmentPLiF(plif.tracks[index], plif.ordinates, plif.low, plif.high)
        transitions = self.transitions[index] if self.transitions.dim() > 2 else self.transitions
        return SemiMarkov(self.content[index], transitions, self.length_scores[index],
                          self.boundary[index], take(self.segment_scores), self.start[index],
                          self.end[index], self.lengths[index], plif)

    def replace(self, **changes: Tensor) -> SemiMarkov:
        """The same potentials with the fields ``changes`` replaced."""
        return dataclasses.replace(self, **changes)

    @property
    def potentials(self) -> str:
        """The potentials' names, for overflow messages."""
        return POTENTIALS

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
    check_finite("segment_plif.tracks", tracks)
    ordinates = check_float("segment_plif.ordinates", plif.ordinates, content, "content")
    if ordinates.dim() != 2 or ordinates.shape[0] != N or ordinates.shape[1] < 2:
        raise ValueError(f"segment_plif.ordinates must have shape (N, P) = ({N}, P) with P >= 2, "
                         f"got {_fmt(ordinates.shape)}")
    check_finite("segment_plif.ordinates", ordinates)
    try:
        low, high = check_support(ordinates.shape[1], plif.low, plif.high)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"segment_plif: {exc}") from None
    return SegmentPLiF(tracks.contiguous(), ordinates.contiguous(), low, high)


def _check_transitions(t: Tensor, B: int, T: int, N: int) -> Tensor:
    """(N, N), or per row and position (B, T-1, N, N) (``t[b, s - 1]`` scores the step into a
    segment starting at s), broadcast from (T-1, N, N) or (1, T-1, N, N)."""
    steps = max(T - 1, 0)
    if t.dim() == 2 and t.shape == (N, N):
        return t
    if t.dim() == 4 and t.shape == (B, steps, N, N):
        return t.contiguous()
    if (t.dim() == 3 and t.shape == (steps, N, N)) or (t.dim() == 4 and t.shape == (1, steps, N, N)):
        return t.expand(B, steps, N, N).contiguous()
    raise ValueError(f"transitions must have shape (N, N) = ({N}, {N}), or per position (B, T-1, N, N) = "
                     f"({B}, {steps}, {N}, {N}), (1, T-1, N, N) or (T-1, N, N), got {_fmt(t.shape)}")


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
    transitions = _check_transitions(check_float("transitions", transitions, content, "content"), B, T, N)

    # segments never exceed T: work with S' = min(max_len, T) so that memory and time do not grow
    # with a max_len meant as "unbounded" (defaults are built at S' directly)
    used = max(1, min(S, T))

    given = {"length_scores": length_scores, "boundary": boundary, "start": start, "end": end}
    shapes = {"length_scores": (B, used, N), "boundary": (B, T, N), "start": (B, N), "end": (B, N)}
    absent = [name for name, x in given.items() if x is None]
    defaults = dict(zip(absent, zeroed([shapes[name] for name in absent], content.dtype, content.device),
                        strict=True))  # one fill for every absent potential

    def optional(name, allowed, full):
        if given[name] is None:
            return defaults[name]
        x = check_float(name, given[name], content, "content")
        # ranks first: shapes of other ranks are never compared entry by entry (which would guard
        # a symbolic batch size against N or max_len under torch.export)
        if not any(x.dim() == len(shape) and x.shape == shape for shape in allowed):
            wanted = " or ".join(_fmt(s) for s in allowed)
            raise ValueError(f"{name} must have shape {wanted}, got {_fmt(x.shape)}")
        return x.expand(full)

    length_scores = optional("length_scores", [(S, N), (B, S, N)], (B, S, N))[:, :used]
    boundary = optional("boundary", [(B, T, N)], (B, T, N))
    start = optional("start", [(N,), (B, N)], (B, N))
    end = optional("end", [(N,), (B, N)], (B, N))
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


def masked_semimarkov(content, transitions, max_len, length_scores, boundary, segment_scores, start, end,
                      lengths, segment_plif=None,
                      mask: Tensor | None = None) -> tuple[SemiMarkov, Compaction]:
    """:func:`check_semimarkov` over ``mask``'s positions (given instead of ``lengths``: the
    per-position potentials, per-position transitions and PLiF tracks compacted to the left), and
    the :class:`~structtorch.chain.masking.Compaction` that moves per-position results back (one
    that moves nothing without a mask)."""
    moved = None
    if mask is not None and isinstance(content, Tensor) and content.dim() == 3:
        if lengths is not None:
            raise ValueError("give mask or lengths, not both")
        moved = compaction(mask, content.shape[0], content.shape[1], content.device)
        content, boundary, segment_scores = (moved.take_positions(x)
                                             for x in (content, boundary, segment_scores))
        if isinstance(transitions, Tensor):
            transitions = moved.take_transitions(transitions)
        if isinstance(segment_plif, SegmentPLiF):
            segment_plif = SegmentPLiF(moved.take_positions(segment_plif.tracks), segment_plif.ordinates,
                                       segment_plif.low, segment_plif.high)
        lengths = moved.lengths
    sm = check_semimarkov(content, transitions, max_len, length_scores, boundary, segment_scores, start, end,
                          lengths, segment_plif)
    return sm, moved or Compaction(sm.lengths)


def _length_pick(sm: SemiMarkov, d: Tensor, lab: Tensor) -> Tensor:
    """(B, T) length_scores[b, d-1, lab] for per-position lengths d and labels lab."""
    B, _, S, N = sm.shape
    return sm.length_scores.reshape(B, S * N).gather(1, (d - 1) * N + lab)


def check_segmentation(labels: object, starts: object, sm: SemiMarkov, names: tuple[str, str, str] = (
        "labels", "starts", "structure")) -> tuple[Tensor, Tensor]:
    """Validate a segmentation given as labels (B, T) and starts (B, T) bool against ``sm``.

    Labels must lie in [0, N) inside each length (0 beyond), a segment starts at position 0, the
    labels do not change inside a segment, and no segment is longer than ``max_len``. ``names``
    are the labels', the starts' and the whole's names in the errors. Value checks follow
    :class:`structtorch.set_validation` (asynchronous off the CPU). Returns (labels, starts), with
    starts cleared beyond each length and set at position 0.
    """
    labels_name, starts_name, whole = names
    B, T, S, N = sm.shape
    t = torch.arange(T, device=sm.content.device)
    inside = t < sm.lengths[:, None]
    labels = check_label_tensor(labels, (B, T), sm.content.device, labels_name)
    check_label_values(labels, sm.lengths, N, labels_name)  # counted on the device where it can be
    labels = labels * inside  # 0 beyond each length
    if not isinstance(starts, Tensor) or starts.dtype != torch.bool:
        raise TypeError(f"{starts_name} must be a bool tensor of shape (B, T) = ({B}, {T})")
    if starts.shape != (B, T):
        raise ValueError(f"{starts_name} must have shape (B, T) = ({B}, {T}), got {_fmt(starts.shape)}")
    if starts.device != labels.device:
        raise ValueError(f"{starts_name} is on {starts.device} but content is on {labels.device}; "
                         "use one device")
    starts = (starts | (t == 0)) & inside
    if not validation_enabled() or not T:
        return labels, starts
    message = (f"{labels_name} change inside a segment (no {starts_name} there), or {whole} has a segment "
               f"longer than max_len = {S}")
    if not on_host(starts) and _counted(labels * 2 + starts, "segmentation", message, lo=S,
                                        lengths=sm.lengths, T=T):
        return labels, starts
    changes = inside[:, 1:] & (labels[:, 1:] != labels[:, :-1]) & ~starts[:, 1:]
    seg_start = torch.where(starts, t, 0).cummax(1).values
    too_long = inside & (t - seg_start + 1 > S)
    if not on_host(changes):
        require(~changes.any(), f"{labels_name} change inside a segment (no {starts_name} there)")
        require(~too_long.any(), f"{whole} has a segment longer than max_len = {S}")
    elif bool(plain(changes).any()):
        b, pos = (int(i) for i in plain(changes).nonzero()[0].tolist()[-2:])
        raise ValueError(f"{labels_name} change inside a segment at [{b}, {pos + 1}] ({starts_name} is False "
                         "there)")
    elif bool(plain(too_long).any()):
        b, pos = (int(i) for i in plain(too_long).nonzero()[0].tolist()[-2:])
        raise ValueError(f"{whole} has a segment longer than max_len = {S} ending after position "
                         f"[{b}, {pos}]")
    return labels, starts


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
    if sm.per_position and T > 1:  # the step into position t (> 0): transitions[b, t - 1]
        steps = torch.cat([sm.transitions[:, :1], sm.transitions], 1).flatten(2)  # (B, T, N N)
        pair = steps.gather(2, (prev * N + lab).unsqueeze(2)).squeeze(2)
    elif sm.per_position:
        pair = zero.expand(B, T)
    else:
        pair = sm.transitions[prev, lab]
    total = total + torch.where(starts & (t > 0), accumulate(pair), zero).sum(1)
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
