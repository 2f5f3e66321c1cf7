"""The value checks of one call as one Triton launch (per :data:`SLOTS` checked tensors) that counts
bad entries into one flag, so that a call with validation on makes one device assertion at its end
(:func:`structtorch._checks.one_assertion`) instead of several reductions and an assertion per
checked tensor.

Kinds of check (``KIND``): 0, no NaN and no +inf (scores, which may be -inf); 1, no NaN; 2, finite;
3, integers in [lo, hi] (lengths); 4, labels in [lo, hi] inside each row's length (``lengths``,
row length ``T``), anything beyond it; 5, a (B, T) mask with more than one run of True per row
(``lengths`` its row sums: the count is the run starts beyond one per non-empty row); 6,
segmentations coded label * 2 + start (B, T): positions inside each length where the label
changes without a segment start, or that lie more than ``lo`` (max_len) positions from the last
start.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from ._triton_common import launch

KINDS = {"values": 0, "nan": 1, "finite": 2, "range": 3, "labels": 4, "segmentation": 6}
BLOCK = 1024


SLOTS = 4
"""Checked tensors per launch of :func:`count_all` (more take more launches)."""


@triton.jit
def _count(x, n, lo, hi, lengths, T, KIND: tl.constexpr, BLOCK: tl.constexpr):
    """The number of bad entries in this program's block of ``x`` (n entries), by ``KIND``."""
    i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    inside = i < n
    v = tl.load(x + i, mask=inside, other=0)
    if KIND == 0:
        bad = (v != v) | (v == float("inf"))
    elif KIND == 1:
        bad = v != v
    elif KIND == 2:
        bad = (v != v) | (v == float("inf")) | (v == float("-inf"))
    elif KIND == 3:
        bad = (v < lo) | (v > hi)
    elif KIND == 4:
        row_length = tl.load(lengths + i // T, mask=inside, other=0)
        bad = ((i % T) < row_length) & ((v < lo) | (v > hi))
    elif KIND == 6:  # codes label * 2 + start of segmentations, segments of at most lo positions
        t = i % T
        row = inside & (t < tl.load(lengths + i // T, mask=inside, other=0))
        start = ((v & 1) != 0) | (t == 0)
        before = tl.load(x + i - 1, mask=row & (t > 0), other=0)
        bad = row & (t > 0) & ((v >> 1) != (before >> 1)) & ~start  # a label change inside a segment
        seen = start
        for j in range(1, lo):  # a start among the lo positions up to t
            back = tl.load(x + i - j, mask=row & (t >= j), other=0)
            seen = seen | ((t >= j) & (((back & 1) != 0) | (t == j)))
        bad = bad | (row & ~seen)
    return tl.sum((bad & inside).to(tl.int32), axis=0)


@triton.jit
def _checks_kernel(flag, x0, n0, lo0, hi0, lengths0, T0, x1, n1, lo1, hi1, lengths1, T1, x2, n2, lo2, hi2,
                   lengths2, T2, x3, n3, lo3, hi3, lengths3, T3, KIND0: tl.constexpr, KIND1: tl.constexpr,
                   KIND2: tl.constexpr, KIND3: tl.constexpr, BLOCK: tl.constexpr):
    """Count the bad entries of up to SLOTS tensors (slot s unused when KINDs < 0) into flag."""
    count = _count(x0, n0, lo0, hi0, lengths0, T0, KIND0, BLOCK)
    if KIND1 >= 0:
        count += _count(x1, n1, lo1, hi1, lengths1, T1, KIND1, BLOCK)
    if KIND2 >= 0:
        count += _count(x2, n2, lo2, hi2, lengths2, T2, KIND2, BLOCK)
    if KIND3 >= 0:
        count += _count(x3, n3, lo3, hi3, lengths3, T3, KIND3, BLOCK)
    tl.atomic_add(flag, count)


def _slot(x: Tensor, kind: str, lo: int = 0, hi: int = 0, lengths: Tensor | None = None, T: int = 1) -> tuple:
    """One slot's arguments: the tensor (flat, contiguous), its size, bounds, row lengths, T."""
    x = x.detach().contiguous()
    return (x, x.numel(), lo, hi, x if lengths is None else lengths.contiguous(), max(T, 1)), KINDS[kind]


def count_all(checks: list[tuple[Tensor, str, dict]], flag: Tensor | None = None) -> Tensor:
    """``flag`` (an int32 (1,) counter; default: a new zero one) plus the number of bad entries of
    every (tensor, kind, params) check (see the module docstring), asynchronously: one launch per
    :data:`SLOTS` checks, nothing read on the host."""
    slots = [_slot(x, kind, **params) for x, kind, params in checks if x.numel()]
    if flag is None:
        flag = torch.zeros(1, dtype=torch.int32, device=checks[0][0].device)
    for i in range(0, len(slots), SLOTS):
        group = slots[i:i + SLOTS]
        blocks = max(triton.cdiv(args[1], BLOCK) for args, _ in group)
        unused = ((flag, 0, 0, 0, flag, 1), -1)
        group += [unused] * (SLOTS - len(group))
        args = [a for slot, _ in group for a in slot]
        kinds = {f"KIND{s}": kind for s, (_, kind) in enumerate(group)}
        launch("check_values", _checks_kernel, (blocks,), flag, *args, **kinds, BLOCK=BLOCK)
    return flag
