"""Glue of the compiled tree kernels (``csrc/trees.cpp``): Eisner's log-partition (forward, and the
outside pass for its gradient, the arc marginals), Eisner's Viterbi with backpointers, and
Chu-Liu-Edmonds for the best non-projective tree, each in double, one sentence per thread task."""

from __future__ import annotations

import torch
from torch import Tensor

from .._extension import chain_ops


def log_partition_forward(arcs: Tensor, lengths: Tensor, single_root: bool) -> tuple[Tensor, list[Tensor]]:
    """logZ (B,) float64 and the saved charts [(B, 5, T + 1, T + 1)]."""
    arcs = arcs.double().contiguous()
    logz, charts = chain_ops().eisner_logz_forward(arcs, lengths.contiguous(), single_root)
    return logz, [charts]


def log_partition_backward(arcs: Tensor, lengths: Tensor, single_root: bool, logz: Tensor,
                           state: list[Tensor], grad: Tensor) -> Tensor:
    """grad (B,) times the arc marginals, (B, T + 1, T + 1) in the dtype of ``arcs``."""
    out = chain_ops().eisner_logz_backward(grad.double().contiguous(), arcs.double().contiguous(),
                                           lengths.contiguous(), single_root, logz, state[0])
    return out.to(arcs.dtype)


def viterbi(arcs: Tensor, lengths: Tensor, single_root: bool) -> tuple[Tensor, Tensor]:
    """(best score (B,) float64, heads (B, T + 1))."""
    return chain_ops().eisner_viterbi_forward(arcs.double().contiguous(), lengths.contiguous(), single_root)


def mst(arcs: Tensor, lengths: Tensor, single_root: bool) -> Tensor:
    """Heads (B, T + 1) of the best non-projective trees (on a CPU copy for other devices)."""
    host = arcs.detach().to("cpu", torch.float64).contiguous()
    return chain_ops().tree_mst_forward(host, lengths.cpu().contiguous(), single_root).to(arcs.device)


def cky_log_partition_forward(spans: Tensor, lengths: Tensor) -> tuple[Tensor, list[Tensor]]:
    """logZ (B,) float64 of the bracketings of span values (B, T, T) and the saved charts."""
    logz, charts = chain_ops().cky_logz_forward(spans.double().contiguous(), lengths.contiguous())
    return logz, [charts]


def cky_log_partition_backward(spans: Tensor, lengths: Tensor, logz: Tensor, state: list[Tensor],
                               grad: Tensor) -> Tensor:
    """grad (B,) times the bracket marginals, (B, T, T) in the dtype of ``spans``."""
    out = chain_ops().cky_logz_backward(grad.double().contiguous(), spans.double().contiguous(),
                                        lengths.contiguous(), logz, state[0])
    return out.to(spans.dtype)


def cky_brackets(spans: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
    """(best score (B,) float64, the best bracketing's spans (B, T, T) 0/1 float64)."""
    return chain_ops().cky_viterbi_forward(spans.double().contiguous(), lengths.contiguous())


def matrix_tree_forward(arcs: Tensor, lengths: Tensor, single_root: bool) -> tuple[Tensor, list[Tensor]]:
    """logZ (B,) float64 of the non-projective trees and the saved state [scaled weights (B, T + 1,
    T + 1), inverse Laplacians (B, T, T)]."""
    logz, weights, inverse = chain_ops().matrix_tree_forward(arcs.double().contiguous(), lengths.contiguous(),
                                                             single_root)
    return logz, [weights, inverse]


def matrix_tree_backward(arcs: Tensor, lengths: Tensor, single_root: bool, logz: Tensor, state: list[Tensor],
                         grad: Tensor) -> Tensor:
    """grad (B,) times the arc marginals, (B, T + 1, T + 1) in the dtype of ``arcs``."""
    grad = grad.double().contiguous()
    out = chain_ops().matrix_tree_backward(grad, lengths.contiguous(), single_root, logz, *state)
    return out.to(arcs.dtype)


def count_table(arcs: Tensor, cost: Tensor, lengths: Tensor, single_root: bool) -> Tensor:
    """(B, T + 1) float64: the best score of the projective trees whose 0/1 ``cost`` (B, T + 1, T + 1)
    adds up to exactly k (-inf where none)."""
    return chain_ops().eisner_count_forward(arcs.double().contiguous(), cost.long().contiguous(),
                                            lengths.contiguous(), single_root)


def count_heads(arcs: Tensor, cost: Tensor, lengths: Tensor, single_root: bool, k: Tensor) -> Tensor:
    """Heads (B, T + 1) of the best projective tree of cost exactly ``k`` (B,)."""
    return chain_ops().eisner_count_heads(arcs.double().contiguous(), cost.long().contiguous(),
                                          lengths.contiguous(), single_root, k.long().contiguous())


def _by_cost(spans: Tensor, cost: Tensor) -> Tensor:
    """(B, T, T, 2): each span's best label score at cost 0 and at cost 1 (-inf where none)."""
    return torch.stack([spans.masked_fill(cost != c, float("-inf")).amax(3) for c in (0, 1)], -1)


def cky_count_table(spans: Tensor, cost: Tensor, lengths: Tensor) -> Tensor:
    """(B, 2T) float64: the best score of the labeled trees whose 0/1 ``cost`` (B, T, T, N) adds up to
    exactly k (-inf where none)."""
    x = _by_cost(spans.double(), cost).contiguous()
    return chain_ops().cky_count_forward(x, lengths.contiguous())


def cky_count_spans(spans: Tensor, cost: Tensor, lengths: Tensor, k: Tensor) -> Tensor:
    """The labeled spans (B, T, T, N) 0/1 of the best tree of cost exactly ``k`` (B,): the kernel
    chooses the spans and their costs, each span's label is its best at that cost."""
    spans = spans.double()
    chosen = chain_ops().cky_count_spans(_by_cost(spans, cost).contiguous(), lengths.contiguous(),
                                         k.long().contiguous())
    label = spans.masked_fill(cost != chosen.clamp(min=0).unsqueeze(3), float("-inf")).argmax(3)
    onehot = label.unsqueeze(3) == torch.arange(spans.shape[3], device=label.device)
    return onehot.to(spans.dtype) * (chosen >= 0).unsqueeze(3)
