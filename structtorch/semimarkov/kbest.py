"""The k highest-scoring distinct segmentations: k-best lists of the forward and incoming scores
over segment ends, with backpointers."""

from __future__ import annotations

import torch
from torch import Tensor

from .._checks import LengthsLike, cast_checked, check_int
from .._numerics import NEG_INF
from .._precision import mixed_precision
from . import _ops
from ._torch import POTENTIALS, detached64, fill_labels, guard, mark_segments, terms_with_incoming
from .layout import SemiMarkov, masked_semimarkov, semimarkov_score

__all__ = ["semimarkov_kbest"]


@mixed_precision
def semimarkov_kbest(
    content: Tensor,
    transitions: Tensor,
    k: int,
    *,
    max_len: int,
    length_scores: Tensor | None = None,
    boundary: Tensor | None = None,
    segment_scores: Tensor | None = None,
    start: Tensor | None = None,
    end: Tensor | None = None,
    lengths: LengthsLike = None,
    mask: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """The k highest-scoring distinct segmentations (a k-list Viterbi over segment ends).

    Potentials, ``lengths`` or ``mask`` as for :func:`structtorch.semimarkov_viterbi` (without
    segment PLiFs).

    Parameters
    ----------
    k : int
        >= 1.

    Returns
    -------
    scores : Tensor (B, k)
        Descending; -inf where fewer than k feasible segmentations exist (a zero-length row has one,
        of score 0). Differentiable (the gradient of each is the indicator of its segmentation).
    labels : Tensor (B, k, T) int64
        -1 beyond each length and in the missing entries.
    starts : Tensor (B, k, T) bool
        True where a segment begins.

    Notes
    -----
    Time O(T (B S N k log k + B N^2 k)), memory O(B T N k).
    """
    sm, moved = masked_semimarkov(content, transitions, max_len, length_scores, boundary, segment_scores,
                                  start, end, lengths, mask=mask)
    scores, labels, starts = kbest_semimarkov(sm, check_int("k", k, 1))
    return scores, moved.put(labels.transpose(1, 2), -1).transpose(1, 2), moved.put(
        starts.transpose(1, 2), False).transpose(1, 2)


@torch.no_grad()
def _kbest_structures(sm: SemiMarkov, k: int) -> tuple[Tensor, Tensor, Tensor]:
    """labels (B, k, T), starts (B, k, T) and valid (B, k) of the k best distinct segmentations, by
    k-best lists of the forward scores (alpha) and of the incoming scores, with backpointers."""
    sm = detached64(sm)
    B, T, S, N = sm.shape
    dev = sm.content.device
    first = torch.arange(k, device=dev) == 0
    labels = torch.full((B, k, T), -1, dtype=torch.long, device=dev)
    starts = torch.zeros((B, k, T), dtype=torch.bool, device=dev)
    if T == 0 or B == 0:
        return labels, starts, first.expand(B, k)
    F = sm.forbidden_counts()
    begin = sm.start.new_full((B, N, k), NEG_INF)
    begin[:, :, 0] = sm.start
    incoming, inc_bp = [begin], [torch.zeros(B, N, k, dtype=torch.long, device=dev)]
    alpha = [sm.start.new_full((B, N, k), NEG_INF)]
    alpha_bp = [torch.zeros(B, N, k, dtype=torch.long, device=dev)]
    for e in range(1, T + 1):
        cand = terms_with_incoming(sm, F, e, incoming)  # (B, D, N, k): code (d - 1) * k + rank
        D = cand.shape[1]
        vals, idx = cand.permute(0, 2, 1, 3).reshape(B, N, D * k).topk(k, dim=2)
        alpha.append(vals)
        alpha_bp.append(idx)
        # incoming[e][b, n, r]: the r-th best alpha[e][b, m, q] + transitions[m, n], code m * k + q
        cand = (vals.unsqueeze(2) + sm.into(e)[:, :, :, None]).permute(0, 2, 1, 3).reshape(B, N, N * k)
        vals, idx = cand.topk(k, dim=2)
        incoming.append(vals)
        inc_bp.append(idx)
    alphas, alpha_bps, inc_bps = (torch.stack(x, 1) for x in (alpha, alpha_bp, inc_bp))  # (B, T+1, N, k)
    lengths = sm.lengths
    rows = torch.arange(B, device=dev)
    final = (alphas[rows, lengths] + sm.end.unsqueeze(2)).reshape(B, N * k)
    best, code = final.topk(k, dim=1)  # code = label * k + rank
    valid = torch.where((lengths == 0)[:, None], first, best > NEG_INF)
    rows = rows[:, None].expand(B, k)
    label, rank = code // k, code % k
    e_cur = lengths[:, None].expand(B, k).clone()
    active = valid & (e_cur > 0)
    seg_label = torch.full((B, k, T), -1, dtype=torch.long, device=dev)
    for _ in range(T):  # one segment per structure and step, from the last (at most T segments)
        bp = alpha_bps[rows, e_cur, label, rank]
        s = e_cur - (bp // k + 1)
        mark_segments(starts, seg_label, active, s, label)
        bp = inc_bps[rows, s.clamp(min=0), label, bp % k]
        label = torch.where(active, bp // k, label)
        rank = torch.where(active, bp % k, rank)
        e_cur = torch.where(active, s, e_cur)
        active = active & (e_cur > 0)
    inside = (torch.arange(T, device=dev) < lengths[:, None]).unsqueeze(1) & valid.unsqueeze(2)
    return fill_labels(starts, seg_label, inside), starts & valid.unsqueeze(2), valid


def kbest_semimarkov(sm: SemiMarkov, k: int) -> tuple[Tensor, Tensor, Tensor]:
    """Scores (B, k), labels (B, k, T), starts (B, k, T) of canonical potentials (see
    :func:`semimarkov_kbest`): the backend's k-best kernel where it has one (scores from the
    kernel, differentiated as the scores of their segmentations), else the loop above."""
    if _ops.has_kernel(sm, "kbest") and sm.shape[0] and sm.segment_plif is None:
        scores, labels, starts = _ops.kbest(sm, k)
        guard(sm, scores[:, 0], "a k-best score")  # an overflow shows in the best (raises or asserts)
        return cast_checked(scores, sm.content.dtype, "a k-best score", POTENTIALS), labels, starts
    labels, starts, valid = _kbest_structures(sm, k)
    B, T, S, N = sm.shape

    def rep(x: Tensor | None) -> Tensor | None:
        return None if x is None else x.repeat_interleave(k, 0)

    many = SemiMarkov(rep(sm.content), rep(sm.transitions) if sm.per_position else sm.transitions,
                      rep(sm.length_scores), rep(sm.boundary),
                      rep(sm.segment_scores), rep(sm.start), rep(sm.end), rep(sm.lengths))
    scores = semimarkov_score(many, labels.reshape(B * k, T).clamp(min=0), starts.reshape(B * k, T))
    scores = scores.reshape(B, k)
    # -inf in a valid entry, or no best segmentation for a feasible row, is an overflow (guard_overflow)
    first = torch.arange(k, device=scores.device) == 0
    checked = torch.where(valid, scores, torch.where(first, NEG_INF, 0.0))
    checked = cast_checked(guard(sm, checked, "a k-best score"), sm.content.dtype, "a k-best score",
                           POTENTIALS)
    scores = torch.where(valid, checked, NEG_INF)
    # re-rank: the recomputed sums may differ from the DP's by rounding on near-ties
    order = scores.detach().argsort(dim=1, descending=True, stable=True)
    index = order.unsqueeze(2).expand(B, k, T)
    return scores.gather(1, order), labels.gather(1, index), starts.gather(1, index)
