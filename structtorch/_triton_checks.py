"""The value checks of one call as Triton launches that count bad entries into one flag, so that a
call with validation on makes one device assertion at its end (:func:`structtorch._checks.one_assertion`)
instead of several reductions and an assertion per checked tensor.

Kinds of check (``KIND``): 0, no NaN and no +inf (scores, which may be -inf); 1, no NaN; 2, finite;
3, integers in [lo, hi] (lengths); 4, labels in [lo, hi] inside each row's length (``lengths``,
row length ``T``), anything beyond it.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from ._triton_common import launch

KINDS = {"values": 0, "nan": 1, "finite": 2, "range": 3, "labels": 4}
BLOCK = 1024


@triton.jit
def _check_kernel(x, n, flag, lo, hi, lengths, T, KIND: tl.constexpr, BLOCK: tl.constexpr):
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
    else:
        row_length = tl.load(lengths + i // T, mask=inside, other=0)
        bad = ((i % T) < row_length) & ((v < lo) | (v > hi))
    count = tl.sum((bad & inside).to(tl.int32), axis=0)
    tl.atomic_add(flag, count)


def count_bad(flag: Tensor, x: Tensor, kind: str, lo: int = 0, hi: int = 0, lengths: Tensor | None = None,
              T: int = 1) -> None:
    """Add the number of bad entries of ``x`` (see the module docstring) to ``flag`` (an int32 (1,)
    tensor on ``x``'s device), asynchronously: one launch, nothing read on the host."""
    n = x.numel()
    if n == 0:
        return
    x = x.detach().contiguous()
    rows = x if lengths is None else lengths.contiguous()
    grid = (triton.cdiv(n, BLOCK),)
    launch("check_values", _check_kernel, grid, x, n, flag, lo, hi, rows, max(T, 1), KIND=KINDS[kind],
           BLOCK=BLOCK)


def new_flag(device: torch.device) -> Tensor:
    """A zero int32 (1,) counter of bad entries."""
    return torch.zeros(1, dtype=torch.int32, device=device)
