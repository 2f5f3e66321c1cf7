"""Loss-augmented inference for semi-Markov models with the position Hamming loss.

Margin rescaling with an affine h folds the loss into the content scores (O(T S N)); any other h,
and slack rescaling, run the Hamming-count table over segment ends,

    alpha[e, k, n] = max_d  segment(e - d, e, n) + inc[e - d, k - c(e - d, e, n), n],

where c(s, e, n) counts the positions of [s, e) whose target label is not n. That costs
O(T S K N + T K N^2) time and O(T K N) memory with K = T (the PyTorch loop here runs on any device).
Segmentations travel through the solver of :mod:`structtorch.hamming` encoded as one (B, T) tensor:
label + N * (1 where a segment starts), -1 beyond each length.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .._checks import LengthsLike
from .._numerics import NEG_INF, accumulate
from .._precision import mixed_precision
from ..semimarkov._torch import segment_terms
from ..semimarkov.layout import SemiMarkov, check_segmentation, check_semimarkov, semimarkov_score
from ..semimarkov.plif import SegmentPLiF
from ..semimarkov.segments import semimarkov_viterbi
from ._torch import Tables, negate_scores
from .hamming import HLike, _solve, resolve_loss

__all__ = ["semimarkov_loss_augmented"]


def encode(labels: Tensor, starts: Tensor, N: int) -> Tensor:
    return torch.where(labels >= 0, labels + N * starts.long(), -1)


def decode(struct: Tensor, N: int) -> tuple[Tensor, Tensor]:
    inside = struct >= 0
    return torch.where(inside, struct % N, -1), inside & (struct >= N)


def check_target(labels: Tensor, starts: object, sm: SemiMarkov) -> tuple[Tensor, Tensor]:
    """Validate a target segmentation (see :func:`structtorch.semimarkov.layout.check_segmentation`)."""
    return check_segmentation(labels, starts, sm, ("target_labels", "target_starts", "target"))


class _SemiMarkovStructure:
    operator = "semimarkov_loss_augmented"

    def __init__(self, sm: SemiMarkov, labels: Tensor, starts: Tensor, mask: Tensor):
        self.sm, self.N, self.starts = sm, sm.shape[3], starts
        self.truth = torch.where(mask, encode(labels, starts, self.N), -1)

    def arguments(self) -> tuple:
        sm, p = self.sm, self.sm.segment_plif
        plif = (None, None, 0.0, 0.0) if p is None else (p.tracks, p.ordinates, p.low, p.high)
        return (sm.content, sm.transitions, sm.length_scores, sm.boundary, sm.segment_scores, sm.start,
                sm.end, sm.lengths, *plif, self.starts)

    def labels(self, struct: Tensor) -> Tensor:
        return decode(struct, self.N)[0]

    def score(self, struct: Tensor) -> Tensor:
        labels, starts = decode(struct, self.N)
        return semimarkov_score(self.sm, labels, starts)

    def fold_path(self, label_loss: Tensor) -> Tensor:
        sm = self.sm.detached().map(accumulate)  # the loss is added in double on CPU
        _, labels, starts = semimarkov_viterbi(
            sm.content + label_loss.to(sm.content.dtype), sm.transitions, max_len=sm.shape[2],
            length_scores=sm.length_scores, boundary=sm.boundary, segment_scores=sm.segment_scores,
            start=sm.start, end=sm.end, lengths=sm.lengths, segment_plif=sm.segment_plif)
        return encode(labels, starts, self.N)

    def tables(self, target: Tensor, weights: Tensor, K: int, negate: bool) -> Tables:
        sm = self.sm.detached()
        if negate:
            plif = sm.segment_plif
            if plif is not None:
                plif = SegmentPLiF(plif.tracks, -plif.ordinates, plif.low, plif.high)
            parts = [sm.content, sm.transitions, sm.length_scores, sm.boundary, sm.segment_scores,
                     sm.start, sm.end]
            sm = SemiMarkov(*(None if x is None else negate_scores(x) for x in parts), sm.lengths, plif)
        return _tables(sm, target, weights, K)


def _tables(sm: SemiMarkov, target: Tensor, weights: Tensor, K: int) -> Tables:
    B, T, S, N = sm.shape
    dev, K1 = sm.content.device, K + 1
    F = sm.forbidden_counts()
    wrong = weights.unsqueeze(2) * (torch.arange(N, device=dev) != target.unsqueeze(2))
    mis = torch.cat([wrong.new_zeros(B, 1, N), wrong.cumsum(1)], 1)  # (B, T+1, N)
    kidx = torch.arange(K1, device=dev)
    alpha = torch.full((B, T + 1, K1, N), NEG_INF, dtype=torch.float64, device=dev)
    inc = torch.full((B, T + 1, K1, N), NEG_INF, dtype=torch.float64, device=dev)
    inc[:, 0, 0] = sm.start.double()
    bp_d = torch.zeros(B, T + 1, K1, N, dtype=torch.long, device=dev)
    bp_m = torch.zeros_like(bp_d)
    trans = sm.transitions.double()
    for e in range(1, T + 1):
        D = min(S, e)
        s = torch.arange(e - 1, e - D - 1, -1, device=dev)  # starts for d = 1..D
        count = mis[:, e].unsqueeze(1) - mis[:, s]  # (B, D, N)
        src = kidx.view(1, 1, K1, 1) - count.unsqueeze(2)  # (B, D, K1, N)
        prev = inc[:, s].gather(2, src.clamp(min=0))
        cand = torch.where(src >= 0, prev, NEG_INF) + segment_terms(sm, F, e).unsqueeze(2)
        d = cand.argmax(1)
        alpha[:, e] = cand.gather(1, d.unsqueeze(1)).squeeze(1)
        bp_d[:, e] = d + 1
        step = alpha[:, e].unsqueeze(3) + trans  # (B, K1, m, n)
        m = step.argmax(2)
        inc[:, e] = step.gather(2, m.unsqueeze(2)).squeeze(2)
        bp_m[:, e] = m
    lengths = sm.lengths
    final = alpha[torch.arange(B, device=dev), lengths] + sm.end.double().unsqueeze(1)  # (B, K1, N)
    last = final.argmax(2)
    best = final.gather(2, last.unsqueeze(2)).squeeze(2)
    best[lengths == 0] = torch.where(kidx == 0, 0.0, NEG_INF).to(best.dtype)

    def backtrack(k: Tensor) -> Tensor:
        rows = torch.arange(B, device=dev)
        kk = k.clamp(min=0)
        label = last[rows, kk]
        e = lengths.clone()
        active = (lengths > 0) & (k >= 0)
        starts = torch.zeros(B, T, dtype=torch.bool, device=dev)
        seg_label = torch.zeros(B, T, dtype=torch.long, device=dev)
        while bool(active.any()):
            s = e - bp_d[rows, e, kk, label]
            starts[rows[active], s[active]] = True
            seg_label[rows[active], s[active]] = label[active]
            kk = torch.where(active, kk - (mis[rows, e, label] - mis[rows, s, label]), kk)
            label = torch.where(active, bp_m[rows, s, kk, label], label)
            e = torch.where(active, s, e)
            active = active & (e > 0)
        t = torch.arange(T, device=dev)
        filled = torch.where(starts, t, 0).cummax(1).values if T else t.expand(B, 0)
        inside = (t < lengths[:, None]) & (k >= 0)[:, None]
        return torch.where(inside, seg_label.gather(1, filled) + N * starts.long(), -1)

    return Tables(best, backtrack)


@mixed_precision
def semimarkov_loss_augmented(
    content: Tensor,
    transitions: Tensor,
    target_labels: Tensor,
    target_starts: Tensor,
    *,
    max_len: int,
    h: HLike = None,
    rescaling: str = "margin",
    length_scores: Tensor | None = None,
    boundary: Tensor | None = None,
    segment_scores: Tensor | None = None,
    start: Tensor | None = None,
    end: Tensor | None = None,
    lengths: LengthsLike = None,
    weights: Tensor | None = None,
    algorithm: str = "auto",
    segment_plif: SegmentPLiF | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Most violating segmentation under the position Hamming loss.

    Arguments as for :func:`structtorch.semimarkov_viterbi` (``segment_plif`` included), plus the
    target segmentation (``target_labels`` (B, T) int64 and ``target_starts`` (B, T) bool) and
    ``h``, ``rescaling``, ``weights`` and ``algorithm`` as for
    :func:`structtorch.loss_augmented_viterbi`
    (H = number of positions inside the length whose label differs from the target's).

    Returns
    -------
    value : Tensor (B,)
        margin: max s(z) + h(H) - s(target); slack: max h(H) (1 + s(z) - s(target)); its
        gradient is the exact subgradient.
    labels : Tensor (B, T) int64 and starts : Tensor (B, T) bool
        The maximizing segmentation (-1 / False beyond each length).
    hamming : Tensor (B,)
    """
    sm = check_semimarkov(content, transitions, max_len, length_scores, boundary, segment_scores,
                          start, end, lengths, segment_plif)
    return segmentation_loss_augmented(sm, target_labels, target_starts, h=h, rescaling=rescaling,
                                       weights=weights, algorithm=algorithm)


def segmentation_loss_augmented(sm: SemiMarkov, target_labels: Tensor, target_starts: Tensor, *,
                                h: HLike = None, rescaling: str = "margin", weights: Tensor | None = None,
                                algorithm: str = "auto") -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """:func:`semimarkov_loss_augmented` on already validated :class:`SemiMarkov` potentials (the
    target and the loss arguments are checked here)."""
    labels, starts = check_target(target_labels, target_starts, sm)
    B, T, _, N = sm.shape
    mask = torch.arange(T, device=labels.device) < sm.lengths[:, None]
    spec = resolve_loss(h, rescaling, weights, None, labels, mask, sm.content, algorithm)
    model = _SemiMarkovStructure(sm, labels, starts, mask)
    value, struct, hamming = _solve(model, spec, labels, N, algorithm, sm.content.dtype)
    out_labels, out_starts = decode(struct, N)
    return value, out_labels, out_starts, hamming
