"""The PyTorch reference of the semi-Markov dynamic programs: a loop over segment ends, vectorized
over batch, segment length and label, in float64 (runs on any device; differentiable by autograd,
so it also serves double backward). Segment content sums accumulate backwards from each end, never
as differences of prefix sums, which one huge-magnitude entry would ruin.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from .._checks import forbidden_pattern, guard_overflow
from .._numerics import NEG_INF, safe_logsumexp
from .layout import POTENTIALS, SemiMarkov, segment_layout
from .plif import _plif_position, plif_interpolate


def segment_terms(sm: SemiMarkov, F: Tensor, e: int) -> Tensor:
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


def log_forward(sm: SemiMarkov) -> Tensor:
    """(B, N): log-sum over segmentations of [0, L) whose last segment has label n, plus end[n];
    computed through alpha[e], the same over [0, e) for every e (differentiable by autograd)."""
    reduce = safe_logsumexp
    B, T, S, N = sm.shape
    F = sm.forbidden_counts()
    alpha = [sm.start.new_full((B, N), NEG_INF, dtype=torch.float64)]
    incoming = [sm.start.double()]  # incoming[s]: term of a segment starting at s
    for e in range(1, T + 1):
        D = min(S, e)
        terms = segment_terms(sm, F, e) + torch.stack(incoming[e - D:e][::-1], 1)
        alpha.append(reduce(terms, 1))
        incoming.append(reduce(alpha[e].unsqueeze(2) + sm.into(e).double(), 1))
    final = torch.stack(alpha, 1).gather(1, sm.lengths.view(B, 1, 1).expand(B, 1, N)).squeeze(1)
    return final + sm.end.double()


@torch.no_grad()
def viterbi_segmentation(sm: SemiMarkov) -> tuple[Tensor, Tensor, Tensor]:
    """(best (B,), labels (B, T), starts (B, T)) by max-plus over segment ends, then backtracking
    that jumps one segment per step for every row at once. Ties: the shortest last segment, then
    the smallest previous label."""
    B, T, S, N = sm.shape
    F = sm.forbidden_counts()
    dev = F.device
    alpha = [sm.start.new_full((B, N), NEG_INF, dtype=torch.float64)]
    incoming, came_from = [sm.start.double()], [torch.zeros(B, N, dtype=torch.long, device=dev)]
    best_len = [torch.zeros(B, N, dtype=torch.long, device=dev)]
    for e in range(1, T + 1):
        D = min(S, e)
        terms = segment_terms(sm, F, e) + torch.stack(incoming[e - D:e][::-1], 1)
        d = terms.argmax(1)
        alpha.append(terms.gather(1, d.unsqueeze(1)).squeeze(1))
        best_len.append(d + 1)
        cand = alpha[e].unsqueeze(2) + sm.into(e).double()
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


def log_partition(sm: SemiMarkov) -> Tensor:
    final = log_forward(sm)
    return torch.where(sm.lengths > 0, safe_logsumexp(final, 1), 0.0)


def detached64(sm: SemiMarkov) -> SemiMarkov:
    """The potentials detached and in float64 (``segment_terms`` computes in float64 anyway)."""
    return sm.map(lambda x: x.detach().double())


def terms_with_incoming(sm: SemiMarkov, F: Tensor, e: int, incoming: list[Tensor]) -> Tensor:
    """(B, D, ...) scores of the segments ending at e with lengths d = 1..D, D = min(S, e), with their
    incoming term: ``incoming[s]`` (B, N, ...) scores a segment of label n starting at s."""
    D = min(sm.shape[2], e)
    terms = segment_terms(sm, F, e)  # (B, D, N)
    stacked = torch.stack(incoming[e - D:e][::-1], 1)  # (B, D, N, ...)
    return terms.reshape(terms.shape + (1,) * (stacked.dim() - 3)) + stacked


def mark_segments(starts: Tensor, seg_label: Tensor, active: Tensor, s: Tensor, label: Tensor) -> None:
    """In place, where ``active`` (...,): ``starts[..., s] = True`` and ``seg_label[..., s] = label``
    (starts, seg_label (..., T)), by gather and scatter: no ``nonzero`` (a host sync on a GPU)."""
    idx = s.clamp(0, starts.shape[-1] - 1).unsqueeze(-1)
    on = active.unsqueeze(-1)
    starts.scatter_(-1, idx, starts.gather(-1, idx) | on)
    seg_label.scatter_(-1, idx, torch.where(on, label.unsqueeze(-1), seg_label.gather(-1, idx)))


def fill_labels(starts: Tensor, seg_label: Tensor, inside: Tensor) -> Tensor:
    """Per-position labels (..., T) from the labels written at segment starts; -1 outside."""
    T = starts.shape[-1]
    filled = torch.where(starts, torch.arange(T, device=starts.device), 0).cummax(-1).values
    return torch.where(inside, seg_label.gather(-1, filled), -1)


def guard(sm: SemiMarkov, result: Tensor, what: str, feasible: Callable[[], Tensor] | None = None) -> Tensor:
    """``result`` (B,), or a ValueError where it overflowed (see :func:`guard_overflow`);
    ``feasible`` defaults to "some segmentation avoids every -inf entry"."""
    if feasible is None:
        def feasible() -> Tensor:
            return viterbi_segmentation(sm.map(forbidden_pattern))[0] > NEG_INF

    plif = [] if sm.segment_plif is None else [sm.segment_plif.ordinates]
    potentials = [x for x in (sm.content, sm.transitions, sm.length_scores, sm.boundary, sm.segment_scores,
                              sm.start, sm.end) if x is not None] + plif
    return guard_overflow(result, potentials, 5 * sm.shape[1] + 2, feasible, what, POTENTIALS)


def indicator_grads(sm: SemiMarkov, labels: Tensor, starts: Tensor, grad: Tensor) -> list[Tensor | None]:
    """The gradients of the scores of segmentations (labels, starts) (B, T) (trusted), scaled by
    ``grad`` (B,), w.r.t. content, length scores, boundary, segment scores, transitions, start, end
    and the segment PLiF's tracks and ordinates (None where absent), in ``grad``'s dtype: the
    indicators of the segmentation's parts, by scatters (no autograd, so ``torch.compile`` traces
    it), the PLiF's by its interpolation weights and slope."""
    B, T, S, N = sm.shape
    lay = segment_layout(labels, starts, sm.lengths)
    lab, d = lay.labels, lay.length.clamp(1, S)
    at_pos = torch.where(lay.inside, grad[:, None], 0.0)
    at_end = torch.where(lay.ends, grad[:, None], 0.0)

    def onto_labels(weights: Tensor) -> Tensor:  # (B, T) -> (B, T, N) at the labels
        return grad.new_zeros(B, T, N).scatter_(2, lab.unsqueeze(2), weights.unsqueeze(2))

    length_at = (d - 1) * N + lab
    g_length = grad.new_zeros(B, S * N).scatter_add_(1, length_at, at_end).view(B, S, N)
    g_segment = None
    if sm.segment_scores is not None:
        g_segment = grad.new_zeros(B, T, S * N).scatter_(2, length_at.unsqueeze(2), at_end.unsqueeze(2))
        g_segment = g_segment.view(B, T, S, N)
    prev = torch.cat([lab[:, :1], lab[:, :-1]], 1)
    steps = torch.where(lay.starts & (lay.t > 0), at_pos, 0.0)
    if sm.per_position:  # the step into position t: row b's transitions[b, t - 1]
        into = ((torch.arange(B, device=lab.device)[:, None] * max(T - 1, 0) + (lay.t - 1).clamp(min=0)) * N
                + prev) * N + lab
        g_trans = grad.new_zeros(B * max(T - 1, 0) * N * N).index_add_(0, into.flatten(), steps.flatten())
        g_trans = g_trans.view(B, max(T - 1, 0), N, N)
    else:
        g_trans = grad.new_zeros(N * N).index_add_(0, (prev * N + lab).flatten(), steps.flatten()).view(N, N)
    edge = torch.where(sm.lengths > 0, grad, 0.0).unsqueeze(1)
    last = lab.gather(1, (sm.lengths - 1).clamp(min=0).unsqueeze(1)) if T else lab.new_zeros(B, 1)
    first = lab[:, :1] if T else lab.new_zeros(B, 1)
    g_start = grad.new_zeros(B, N).scatter_(1, first, edge)
    g_end = grad.new_zeros(B, N).scatter_(1, last, edge)
    grads = [onto_labels(at_pos), g_length, onto_labels(at_end), g_segment, g_trans, g_start, g_end]
    return grads + _plif_indicator_grads(sm, lay, at_end)


def _plif_indicator_grads(sm: SemiMarkov, lay, at_end: Tensor) -> list[Tensor | None]:
    """Gradients of a segmentation's segment-PLiF terms (``lay`` its layout, ``at_end`` (B, T) the
    upstream gradient at each segment's end) w.r.t. the tracks (B, T, N) and the ordinates (N, P):
    the interpolation weights, and the slope over the segment's length (inside the support, as
    autograd differentiates the clamp)."""
    plif = sm.segment_plif
    if plif is None:
        return [None, None]
    B, T, N = sm.content.shape
    P = plif.ordinates.shape[1]
    lab = lay.labels
    dtype = at_end.dtype
    mean = lay.means(plif.tracks.to(dtype).gather(2, lab.unsqueeze(2)).squeeze(2))  # at the ends
    left, frac = _plif_position(mean, P, plif.low, plif.high)
    at = lab * P + left
    g_ordinates = at_end.new_zeros(N * P).index_add_(0, at.flatten(), (at_end * (1 - frac)).flatten())
    g_ordinates = g_ordinates.index_add_(0, (at + 1).flatten(), (at_end * frac).flatten()).view(N, P)
    flat = plif.ordinates.to(dtype).reshape(-1)
    support = (mean >= plif.low) & (mean <= plif.high)
    slope = (flat[at + 1] - flat[at]) * ((P - 1) / (plif.high - plif.low)) / lay.length
    per_end = torch.where(lay.ends & support, at_end * slope, 0.0)
    per_segment = torch.zeros_like(per_end).scatter_add_(1, lay.segment, per_end)  # one end per segment
    per_position = torch.where(lay.inside, per_segment.gather(1, lay.segment), 0.0)
    g_tracks = at_end.new_zeros(B, T, N).scatter_(2, lab.unsqueeze(2), per_position.unsqueeze(2))
    return [g_tracks, g_ordinates]
