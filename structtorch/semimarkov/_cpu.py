"""Glue between the compiled semi-Markov kernels (``csrc/semimarkov.cpp``) and autograd: Viterbi
segmentations, and the log-partition with its hand-written segment-marginal backward (double
backward differentiates the PyTorch reference instead)."""

from __future__ import annotations

import torch
from torch import Tensor

from .._extension import chain_ops
from .._numerics import NEG_INF
from .layout import SemiMarkov
from .plif import SegmentPLiF


def last_forbidden(content: Tensor) -> Tensor:
    """(B, T+1, N) int64: for each segment end e, the last position < e whose content is -inf
    (-1 if none); a segment [s, e) is allowed iff s exceeds it."""
    B, T, N = content.shape
    t = torch.arange(T, device=content.device).view(1, T, 1)
    last = torch.where(content == NEG_INF, t, -1).cummax(1).values if T else content.new_empty(B, 0, N).long()
    return torch.cat([torch.full((B, 1, N), -1, dtype=torch.long, device=content.device), last], 1)


def _plif_args(sm: SemiMarkov) -> tuple:
    """The kernels' segment-PLiF arguments: tracks, ordinates (detached, contiguous; empty without
    a PLiF), low and high."""
    plif = sm.segment_plif or SegmentPLiF(sm.content.new_empty(0), sm.content.new_empty(0, 2), 0.0, 1.0)
    return plif.tracks.detach().contiguous(), plif.ordinates.detach().contiguous(), plif.low, plif.high


def kernel_args(sm: SemiMarkov) -> tuple:
    """content, last_forbidden, length, boundary, segment (empty when absent), transitions, start,
    end and lengths, detached and contiguous, then :func:`_plif_args`."""
    segment = sm.content.new_empty(0) if sm.segment_scores is None else sm.segment_scores
    parts = (sm.content, last_forbidden(sm.content), sm.length_scores, sm.boundary, segment, sm.transitions,
             sm.start, sm.end)
    return (*(x.detach().contiguous() for x in parts), sm.lengths, *_plif_args(sm))


@torch.no_grad()
def viterbi_segmentation(sm: SemiMarkov) -> tuple[Tensor, Tensor, Tensor]:
    """(best (B,) float64, labels (B, T), starts (B, T)) from the compiled segment Viterbi."""
    return chain_ops().semimarkov_viterbi_forward(*kernel_args(sm))


def log_partition_forward(sm: SemiMarkov) -> tuple[Tensor, tuple[Tensor, Tensor]]:
    """logZ (B,) float64 (0 on empty rows) and the factors alpha, inc (B, T+1, N) float64 that the
    backward reuses (see ``semimarkov/_ops.py``)."""
    logz, alpha, inc = chain_ops().semimarkov_logz_forward(*kernel_args(sm))
    return torch.where(sm.lengths > 0, logz, 0.0), (alpha, inc)


def log_partition_backward(sm: SemiMarkov, logz: Tensor, state, g: Tensor) -> list[Tensor | None]:
    """Gradients w.r.t. content, length, boundary, segment, transitions, start, end, and with a
    segment PLiF its tracks and ordinates (input dtype; None for an absent input) for upstream
    g (B,) float64."""
    alpha, inc = state
    grads = chain_ops().semimarkov_logz_backward(g, logz, alpha, inc, *kernel_args(sm))
    grads[4] = grads[4].sum(0)  # transitions and ordinates are shared by the batch
    grads[8] = grads[8].sum(0)
    grads = [x.to(sm.content.dtype) for x in grads]
    if sm.segment_scores is None:
        grads[3] = None
    return grads if sm.segment_plif is not None else grads[:7]
