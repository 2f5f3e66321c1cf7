"""Glue between the compiled semi-Markov kernels (``csrc/semimarkov.cpp``) and autograd: Viterbi
segmentations, and the log-partition with its hand-written segment-marginal backward (double
backward differentiates the PyTorch reference instead)."""

from __future__ import annotations

import torch
from torch import Tensor

from .._extension import chain_ops
from .._numerics import NEG_INF, grads_through
from . import _torch
from .layout import SemiMarkov
from .plif import SegmentPLiF


def last_forbidden(content: Tensor) -> Tensor:
    """(B, T+1, N) int64: for each segment end e, the last position < e whose content is -inf
    (-1 if none); a segment [s, e) is allowed iff s exceeds it."""
    B, T, N = content.shape
    t = torch.arange(T, device=content.device).view(1, T, 1)
    last = torch.where(content == NEG_INF, t, -1).cummax(1).values if T else content.new_empty(B, 0, N).long()
    return torch.cat([torch.full((B, 1, N), -1, dtype=torch.long, device=content.device), last], 1)


@torch.no_grad()
def viterbi_segmentation(sm: SemiMarkov) -> tuple[Tensor, Tensor, Tensor]:
    """(best (B,) float64, labels (B, T), starts (B, T)) from the compiled segment Viterbi."""
    ops = chain_ops()
    segment = sm.content.new_empty(0) if sm.segment_scores is None else sm.segment_scores.contiguous()
    parts = (sm.length_scores, sm.boundary, segment, sm.transitions, sm.start, sm.end)
    plif = sm.segment_plif or SegmentPLiF(sm.content.new_empty(0), sm.content.new_empty(0, 2), 0.0, 1.0)
    return ops.semimarkov_viterbi_forward(sm.content.detach().contiguous(), last_forbidden(sm.content),
                                          *(x.detach().contiguous() for x in parts), sm.lengths,
                                          plif.tracks.detach(), plif.ordinates.detach(), plif.low, plif.high)


def model_of(content, length, boundary, segment, transitions, start, end, lengths) -> SemiMarkov:
    """The SemiMarkov of a log-partition Function's inputs (an empty ``segment`` means none)."""
    segment = segment if segment.numel() else None
    return SemiMarkov(content, transitions, length, boundary, segment, start, end, lengths)


class LogPartition(torch.autograd.Function):
    """Compiled semi-Markov log-partition with the hand-written segment-marginal backward; double
    backward differentiates the PyTorch recursion instead."""

    @staticmethod
    def forward(ctx, content, length, boundary, segment, transitions, start, end, lengths):
        forb = last_forbidden(content)
        args = (content, forb, length, boundary, segment, transitions, start, end, lengths)
        logz, alpha, inc = chain_ops().semimarkov_logz_forward(*args)
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
            sm = model_of(content, length, boundary, segment, transitions, start, end, lengths)
            ref = _torch.log_partition(sm)
            return (*grads_through(ref, inputs, ctx.needs_input_grad[:7], grad), None)
        grads = chain_ops().semimarkov_logz_backward(
            grad.double().contiguous(), logz, alpha, inc, content, forb, length, boundary, segment,
            transitions, start, end, lengths)
        grads[4] = grads[4].sum(0)  # transitions are shared by the batch
        return (*(g.to(content.dtype) for g in grads), None)


def log_partition(sm: SemiMarkov) -> Tensor:
    """(B,) log-partition on the compiled kernels, differentiable (no segment PLiFs: see segments)."""
    segment = sm.content.new_empty(0) if sm.segment_scores is None else sm.segment_scores
    parts = (sm.length_scores, sm.boundary, segment, sm.transitions, sm.start, sm.end)
    return LogPartition.apply(sm.content, *(x.contiguous() for x in parts), sm.lengths)


SEGMENT_PLIF_LOG_PARTITION = False  # the compiled log-partition has no segment PLiFs
