"""The compiled Hamming-count table for linear chains on CPU (``csrc/hamming.cpp``)."""

from __future__ import annotations

from torch import Tensor

from .._extension import chain_ops
from ..chain.layout import Chain
from ._torch import Tables


def chain_tables(chain: Chain, target: Tensor, weights: Tensor, K: int) -> Tables:
    """Compiled tables for a linear chain on CPU; weights (B, T) int64."""
    ops = chain_ops()
    args = (chain.lengths, target.contiguous(), weights.contiguous())
    best, last, bp = ops.hamming_forward(
        chain.unary, chain.transitions, chain.start, chain.end, *args, K
    )

    def backtrack(k: Tensor) -> Tensor:
        end_label = last.gather(1, k.clamp(min=0).unsqueeze(1)).squeeze(1)
        return ops.hamming_backtrack(bp, *args, k.contiguous(), end_label.contiguous())

    return Tables(best, backtrack)
