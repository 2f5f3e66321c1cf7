"""Any (B, T) mask on a chain: the chain runs over the masked-in positions in order, exactly as if
they had been compacted to the left.

A mask need not be one contiguous run per row: a tokenizer's first-sub-token mask
``[0, 1, 0, 1, 1, 0, ...]``, a row whose first position is off, or an all-off row (an empty
sequence) are all fine. :class:`Compaction` moves each row's masked-in positions to the front (one
stable sort on the device: no host read, no loop over the batch) and moves per-position results
back (``fill`` elsewhere). Per-position transitions (B, T-1, N, N) follow the positions they enter:
between the masked-in positions p < q the chain scores ``transitions[b, q - 1]``, the transition
into q (for a contiguous run, the usual one).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .._checks import LengthsLike, _fmt, on_host, plain
from .layout import Chain, check_chain

__all__ = ["Compaction", "compaction", "masked_chain"]


@dataclass
class Compaction:
    """Where each row's masked-in positions go.

    Attributes
    ----------
    lengths : Tensor (B,) int64
        The number of masked-in positions of each row.
    index : Tensor (B, T) int64 or None
        At compacted position i < length, the original position (each row a permutation, the
        masked-in positions first, in order); None when every row is already left-aligned.
    """

    lengths: Tensor
    index: Tensor | None = None

    def take(self, x: Tensor) -> Tensor:
        """Per-position inputs (B, T, ...) compacted to the left (beyond each length: the
        masked-out entries, which no dynamic program reads)."""
        if self.index is None:
            return x
        return x.gather(1, self._expand(self.index, x))

    def take_positions(self, x: object) -> object:
        """:meth:`take` of a per-position tensor (B, T, ...) of the mask's shape; anything else
        (None, a shared cost matrix, a misshapen argument that the checks then name) as it is."""
        if self.index is None or not isinstance(x, Tensor) or x.shape[:2] != self.index.shape:
            return x
        return self.take(x)

    def take_transitions(self, transitions: Tensor) -> Tensor:
        """Transitions (N, N) as they are; per-position (B, T-1, N, N) compacted: the transition into
        compacted position i + 1 is the one into its original position (per-step ones shared by the
        rows, (T-1, N, N) or (1, T-1, N, N), first broadcast over them)."""
        shared_steps = transitions.dim() == 3 or (transitions.dim() == 4 and transitions.shape[0] == 1)
        if self.index is not None and shared_steps:
            transitions = transitions.expand(self.index.shape[0], *transitions.shape[-3:])
        if self.index is None or transitions.dim() != 4 or transitions.shape[:2] != (
                self.index.shape[0], self.index.shape[1] - 1) or transitions.shape[1] == 0:
            return transitions
        into = (self.index[:, 1:] - 1).clamp(min=0)  # (B, T-1)
        return transitions.gather(1, self._expand(into, transitions))

    def blank(self, x: Tensor, fill: float | int) -> Tensor:
        """``x`` (B, W, ...) with ``fill`` at positions >= each row's length."""
        inside = torch.arange(x.shape[1], device=x.device) < self.lengths[:, None]
        inside = inside.view(inside.shape + (1,) * (x.dim() - 2))
        if x.dtype == torch.bool:  # logical operators: ONNX Runtime has no Where over bools
            return x | ~inside if fill else x & inside
        return torch.where(inside, x, torch.full((), fill, dtype=x.dtype, device=x.device))

    def put(self, x: Tensor, fill: float | int) -> Tensor:
        """Per-position results (B, T, ...) back at the original positions, ``fill`` elsewhere."""
        if self.index is None:
            return x
        kept = self.blank(x, fill)
        index = self.index.view(self.index.shape + (1,) * (x.dim() - 2))
        return torch.empty_like(kept).scatter_(1, index.expand_as(kept), kept)

    def put_edges(self, x: Tensor, fill: float | int) -> Tensor:
        """Per-edge results (B, T-1, ...) back at the original position of each edge's first node
        (the edge of compacted positions i, i + 1 joins the original positions index[i] and
        index[i + 1])."""
        if self.index is None or x.shape[1] + 1 != self.index.shape[1]:  # nothing moves, or T = 0
            return x
        padded = torch.cat([x, x.new_full((x.shape[0], 1, *x.shape[2:]), fill)], 1)
        return self.put(padded, fill)[:, :-1]

    @staticmethod
    def _expand(index: Tensor, like: Tensor) -> Tensor:
        return index.view(index.shape + (1,) * (like.dim() - 2)).expand(*index.shape, *like.shape[2:])


def compaction(mask: object, B: int, T: int, device: torch.device, layout: str = "(B, T)",
               name: str = "mask") -> Compaction:
    """The :class:`Compaction` of a (B, T) bool (or uint8) mask, checked (type, shape, device).

    On the host, a left-aligned mask (every row a prefix) gives ``index=None`` (nothing moves); on
    a device the rows are always moved, so that nothing is read back."""
    if not isinstance(mask, Tensor) or mask.dtype not in (torch.bool, torch.uint8):
        raise TypeError(f"{name} must be a bool (or uint8) tensor of shape {layout}; pass integer lengths "
                        "as lengths=...")
    if mask.shape != (B, T):
        raise ValueError(f"{name} must have shape {layout} = {_fmt((B, T) if '(B' in layout else (T, B))}, "
                         f"got {_fmt(mask.shape)}")
    if mask.device != device:
        raise ValueError(f"{name} is on {mask.device} but the scores are on {device}; use one device")
    mask = mask.bool()
    lengths = mask.sum(1)
    if on_host(mask):
        prefix = torch.arange(T, device=device) < lengths[:, None]
        if bool(plain(prefix == mask).all()):
            return Compaction(lengths)
    if not torch.compiler.is_compiling():  # eager: one stable sort (one launch on a device)
        index = torch.sort(mask.view(torch.uint8), dim=1, descending=True, stable=True).indices
        return Compaction(lengths, index)
    # traced (torch.compile, torch.export): the same order by counting, which ONNX can express (it
    # has no stable sort and no view of a bool as uint8): each position's slot, the masked-in ones
    # first, then the rest, each in order
    keep = mask.long()
    slot = torch.where(mask, keep.cumsum(1) - 1, lengths[:, None] + (1 - keep).cumsum(1) - 1)
    order = torch.arange(T, device=device).expand(mask.shape[0], T)
    return Compaction(lengths, torch.empty_like(slot).scatter_(1, slot, order))


def masked_chain(unary: Tensor, transitions: Tensor, start: Tensor | None, end: Tensor | None,
                 lengths: LengthsLike, mask: Tensor | None) -> tuple[Chain, Compaction]:
    """:func:`structtorch.chain.layout.check_chain` of the chain over ``mask``'s positions (given
    instead of ``lengths``), and the :class:`Compaction` that moves per-position results back (one
    that moves nothing without a mask)."""
    if mask is None or not (isinstance(unary, Tensor) and unary.dim() == 3):
        chain = check_chain(unary, transitions, start, end, lengths)
        return chain, Compaction(chain.lengths)
    if lengths is not None:
        raise ValueError("give mask or lengths, not both")
    B, T, _ = unary.shape
    moved = compaction(mask, B, T, unary.device)
    if isinstance(transitions, Tensor):
        transitions = moved.take_transitions(transitions)
    return check_chain(moved.take(unary), transitions, start, end, moved.lengths), moved
