"""The compiled loss-augmented searches on CPU: the folded chain search (``csrc/chain.cpp``) and
the count tables of linear chains (``csrc/hamming.cpp``) and segmentations (``csrc/semimarkov.cpp``)."""

from __future__ import annotations

import torch
from torch import Tensor

from .._extension import chain_ops, fast_ops
from .._numerics import NEG_INF
from ..chain.layout import Chain
from ..semimarkov import _cpu as _semimarkov_cpu
from ..semimarkov.layout import SemiMarkov
from ._torch import SegmentCountTerms, Tables
from .spec import weights_as_costs


def fold_search(chain: Chain, target: Tensor, units: Tensor | None = None,
                pair: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Margin rescaling with a loss that folds into the scores, in one compiled call: the
    arguments and outputs of ``lossaug/_triton.py``'s ``fold_search`` (value, path, count, scale,
    gold; the count int64 unless ``units`` or ``pair`` are real)."""
    costs = weights_as_costs(units, target, chain.shape[2])
    costs = None if costs is None else costs.double().contiguous()
    c = chain.map(torch.Tensor.double)
    value, path, count, scale, gold = fast_ops().fold_forward(
        c.unary, c.transitions, c.start, c.end, c.lengths, target.contiguous(), costs,
        None if pair is None else pair.double().contiguous())
    real = any(x is not None and x.is_floating_point() for x in (units, pair))
    return value, path, count if real else count.long(), scale, gold


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


def semimarkov_tables(sm: SemiMarkov, terms: SegmentCountTerms, offset: Tensor, K: int) -> Tables:
    """Compiled tables over segment ends (see :func:`structtorch.lossaug._torch.semimarkov_tables`):
    the same best scores, ties and backtracked segmentations."""
    ops = chain_ops()
    counts = (terms.prefix.contiguous(), terms.first.contiguous(), terms.target_end.contiguous(),
              terms.target_label.contiguous(), terms.match)
    best, last, bp_d, bp_m = ops.semimarkov_table_forward(*_semimarkov_cpu.kernel_args(sm), *counts,
                                                          offset.contiguous(), K)

    def backtrack(k: Tensor) -> Tensor:  # -1 rows for unreached counts
        reached = best.gather(1, k.clamp(min=0).unsqueeze(1)).squeeze(1) > NEG_INF
        return ops.semimarkov_table_backtrack(bp_d, bp_m, last, sm.lengths, *counts,
                                              torch.where(reached & (k >= 0), k, -1).contiguous())

    return Tables(best, backtrack)
