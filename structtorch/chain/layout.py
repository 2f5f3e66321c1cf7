"""Linear chains' canonical form (:class:`Chain`) and its checks (:func:`check_chain`): the
type-and-checks room of :mod:`structtorch.chain`. Every chain function validates its arguments
once, here, and the backends can assume canonical, contiguous tensors."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

from .._checks import LengthsLike, _fmt, check_all_values, check_float, check_lengths, check_unary
from .._numerics import accumulate

__all__ = ["Chain", "check_chain", "labeling_score"]


@dataclass
class Chain:
    """Canonical chain potentials.

    Attributes
    ----------
    unary : Tensor (B, T, N)
    transitions : Tensor (N, N) when ``shared`` else (B, T-1, N, N)
    start, end : Tensor (B, N) contiguous
    lengths : Tensor (B,) int64 contiguous, on the potentials' device
    name : str
        What errors call the unary scores (``"emissions"`` in :class:`structtorch.LinearChainCRF`).
    """

    unary: Tensor
    transitions: Tensor
    start: Tensor
    end: Tensor
    lengths: Tensor
    name: str = field(default="unary", compare=False)

    @property
    def potentials(self) -> str:
        """The potentials' names, for overflow messages."""
        return f"{self.name}, transitions, start and end"

    def map(self, fn: Callable[[Tensor], Tensor]) -> Chain:
        """The chain with ``fn`` applied to each potential (not to the lengths)."""
        parts = (self.unary, self.transitions, self.start, self.end)
        return Chain(*(fn(x) for x in parts), self.lengths, self.name)

    def rows(self, index: Tensor) -> Chain:
        """The batch rows ``index`` (a 1-d int64 tensor) of the potentials and lengths."""
        transitions = self.transitions if self.shared else self.transitions[index]
        return Chain(self.unary[index], transitions, self.start[index], self.end[index], self.lengths[index],
                     self.name)

    @property
    def shared(self) -> bool:
        return self.transitions.dim() == 2

    @property
    def shape(self) -> tuple[int, int, int]:
        B, T, N = self.unary.shape
        return B, T, N

    def mask(self) -> Tensor:
        """(B, T) bool, True at positions inside each sequence."""
        T = self.unary.shape[1]
        return torch.arange(T, device=self.unary.device) < self.lengths[:, None]


def _check_transitions(transitions: object, B: int, T: int, N: int, ref: Tensor, ref_name: str) -> Tensor:
    t = check_float("transitions", transitions, ref, ref_name, values=False)
    steps = max(T - 1, 0)
    if t.dim() == 2 and t.shape == (N, N):
        return t.contiguous()
    if t.dim() == 4 and t.shape == (B, steps, N, N):
        return t.contiguous()
    if (t.dim() == 3 and t.shape == (steps, N, N)) or (t.dim() == 4 and t.shape == (1, steps, N, N)):
        return t.expand(B, steps, N, N).contiguous()  # one set of steps for every row
    raise ValueError(
        f"transitions must have shape (N, N) = ({N}, {N}), or per step (B, T-1, N, N) = "
        f"({B}, {steps}, {N}, {N}), (1, T-1, N, N) or (T-1, N, N), got {_fmt(t.shape)}"
    )


def _check_boundary(name: str, x: Tensor | None, B: int, N: int, ref: Tensor, ref_name: str) -> Tensor:
    if x is None:
        return ref.new_zeros(B, N)
    x = check_float(name, x, ref, ref_name, values=False)
    if x.shape == (N,):
        return x.expand(B, N).contiguous()
    if x.shape == (B, N):
        return x.contiguous()
    raise ValueError(f"{name} must have shape (N,) = ({N},) or (B, N) = ({B}, {N}), got {_fmt(x.shape)}")


def check_chain(
    unary: Tensor,
    transitions: Tensor,
    start: Tensor | None = None,
    end: Tensor | None = None,
    lengths: LengthsLike = None,
    *,
    name: str = "unary",
) -> Chain:
    """Validate chain potentials and return them in canonical form; ``name`` is what the errors
    call the unary scores (``"emissions"`` for :class:`structtorch.LinearChainCRF`)."""
    unary = check_unary(unary, name, values=False)
    B, T, N = unary.shape
    given = [(name, unary), ("transitions", transitions), ("start", start), ("end", end)]
    if start is None and end is None:
        start, end = unary.new_zeros(2, B, N)  # one fill for both (contiguous rows)
    chain = Chain(
        unary=unary.contiguous(),
        transitions=_check_transitions(transitions, B, T, N, unary, name),
        start=_check_boundary("start", start, B, N, unary, name),
        end=_check_boundary("end", end, B, N, unary, name),
        lengths=check_lengths(lengths, B, T, unary.device, name, values=False),
        name=name,
    )
    floats = [(what, x, False) for what, x in given if x is not None]  # defaults need no look
    check_all_values(floats, chain.lengths if lengths is not None else None, T)
    return chain


def labeling_score(chain: Chain, labels: Tensor) -> Tensor:
    """(B,) score of in-range ``labels`` (B, T) (any value beyond each length), summed in the
    accumulation precision (float64 on CPU) and unchecked: :func:`structtorch.path_score` checks
    the labels, guards against overflow and casts back."""
    unary, lengths = chain.unary, chain.lengths
    B, T, N = unary.shape
    if T == 0:
        return accumulate(unary.sum(dim=(1, 2)))  # zeros, connected to the graph
    mask = chain.mask()
    zero = accumulate(unary.new_zeros(()))
    total = torch.where(mask, accumulate(unary.gather(2, labels.unsqueeze(2)).squeeze(2)), zero).sum(1)
    if T > 1:
        prev, nxt = labels[:, :-1], labels[:, 1:]
        if chain.shared:
            trans = chain.transitions[prev, nxt]
        else:
            flat = chain.transitions.flatten(2)
            trans = flat.gather(2, (prev * N + nxt).unsqueeze(2)).squeeze(2)
        total = total + torch.where(mask[:, 1:], accumulate(trans), zero).sum(1)
    last = labels.gather(1, (lengths - 1).clamp(min=0).unsqueeze(1))
    first_end = accumulate(chain.start.gather(1, labels[:, :1])) + accumulate(chain.end.gather(1, last))
    return total + torch.where(lengths > 0, first_end.squeeze(1), zero)
