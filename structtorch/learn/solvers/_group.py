"""The processes an exact solver runs on under ``torch.distributed`` (gloo on the CPU, nccl on
GPUs): each one's share of the training sequences, and the few collectives cutting planes need.
One process (world 1) is the same code with every collective a no-op."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

__all__ = ["Group"]


@dataclass(frozen=True)
class Group:
    """This process's ``rank`` among ``world`` processes (world 1: no torch.distributed)."""

    rank: int = 0
    world: int = 1

    @property
    def leader(self) -> bool:
        """Whether this process solves the QP and holds the working set (rank 0)."""
        return self.rank == 0

    def share(self, n: int) -> Tensor:
        """This process's training sequences: the rank-th of ``world`` contiguous, near-equal parts
        of 0..n-1 (in order, so that gathering the parts in rank order restores 0..n-1)."""
        return torch.arange(n).tensor_split(self.world)[self.rank]

    def sum(self, x: Tensor) -> Tensor:
        """The sum of ``x`` over the processes (the same tensor on every one)."""
        if self.world > 1:
            dist.all_reduce(x, op=dist.ReduceOp.SUM)
        return x

    def broadcast(self, x: Tensor) -> Tensor:
        """Rank 0's ``x`` on every process (in place)."""
        if self.world > 1:
            dist.broadcast(x, src=0)
        return x

    def gather(self, obj: Any) -> list[Any]:
        """Every process's ``obj`` in rank order on rank 0 (an empty list elsewhere)."""
        if self.world == 1:
            return [obj]
        out: list[Any] | None = [None] * self.world if self.leader else None
        dist.gather_object(obj, out, dst=0)
        return out or []
