"""The (sub)gradient solver of :func:`structtorch.train.fit` (``solver="subgradient"``, the
default): shuffled mini-batches, any torch optimizer (closures for LBFGS and the like), an
optional learning-rate scheduler stepped once per epoch.

Under ``torch.distributed`` every process draws the same shuffled batches and takes its share of
each, its batch mean weighted by the share's size, so the averaged gradients equal those of one
process on the whole batch.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from ...sequence_data import SequenceData
from ..task import Task
from .base import FitOptions

__all__ = ["SubgradientSolver", "needs_closure"]


def needs_closure(optimizer: torch.optim.Optimizer) -> bool:
    """Whether ``optimizer.step`` requires a closure (LBFGS and the like)."""
    if isinstance(optimizer, torch.optim.LBFGS):
        return True
    try:
        param = inspect.signature(optimizer.step).parameters.get("closure")
    except (TypeError, ValueError):
        return False
    return param is not None and param.default is inspect.Parameter.empty


class SubgradientSolver:
    """(Sub)gradient steps of ``options.optimizer`` (default: SGD with lr 0.01) on the mean loss
    plus the penalty, over shuffled batches of ``options.batch_size``.

    Records ``objective`` (the full training objective after the epoch; not with
    ``options.objective=False``), ``train_loss`` (mean over the epoch's batches of loss + penalty,
    on this process) and ``time`` (cumulative seconds of training steps).
    """

    def __init__(self, model: nn.Module, data: SequenceData, loss: object, options: FitOptions) -> None:
        if options.solver_options:
            raise ValueError("solver='subgradient' takes no solver_options (they are the options of "
                             "solver='bcfw' and solver='cutting_plane')")
        if loss is None:
            raise TypeError("loss is None: pass a loss (None, the Hamming hinge, is for solver='bcfw' only)")
        self.task = Task(model, loss)
        self.data, self.options = data, options
        self.optimizer = options.optimizer or torch.optim.SGD(self.task.parameters, lr=0.01)
        self.records = {"train_loss": "min", "time": "max"}
        if options.objective:
            self.records["objective"] = "min"
        self.closure_step = needs_closure(self.optimizer)
        self.gen = torch.Generator().manual_seed(options.seed)
        self.elapsed = 0.0

    def _step(self, idx: Tensor) -> float | None:
        """One optimizer step on this process's share of the batch ``idx``; the batch's loss."""
        rank, world, task, optimizer = self.options.rank, self.options.world, self.task, self.optimizer
        mine = idx.tensor_split(world)[rank]
        # weight this process's batch mean by its share, so that averaging over processes gives the
        # mean over the whole batch even when it does not split evenly
        share = len(mine) * world / len(idx)
        # the whole data set is passed as it is: the same tensors at every step, so that a model
        # may keep what it derives from them (SparseFeaturePotentials' CSR bags under L-BFGS)
        batch = self.data if len(mine) == len(self.data) else self.data.batch(mine)

        def closure() -> Tensor:
            optimizer.zero_grad()
            value = share * task.batch_loss(batch) + task.penalty(self.options.lam)
            value.backward()
            return value

        if self.closure_step:
            value = optimizer.step(closure)
        else:
            value = closure()
            optimizer.step()
        if value is None:  # an optimizer's step(closure) may return None
            return None
        return float(value.detach()) if isinstance(value, Tensor) else float(value)

    def epoch(self) -> dict[str, float]:
        began = time.perf_counter()
        self.task.train(True)
        losses = []
        n = len(self.data)
        order = torch.arange(n) if self.options.batch_size >= n else torch.randperm(n, generator=self.gen)
        for idx in order.split(self.options.batch_size):  # a full batch in order: it has no order
            value = self._step(idx)
            if value is not None:
                losses.append(value)
        if self.options.scheduler is not None:
            self.options.scheduler.step()
        self.elapsed += time.perf_counter() - began
        self.task.train(False)
        record = {}
        if self.options.objective:
            record["objective"] = self.task.objective(self.data, self.options.lam, 256)
        record["train_loss"] = sum(losses) / max(len(losses), 1)
        record["time"] = self.elapsed
        return record

    def converged(self, record: Mapping[str, float]) -> bool:
        return False  # runs all epochs (fit's patience stops it early)

    def state_dict(self) -> dict[str, Any]:
        """The optimizer's and the scheduler's states, the shuffling generator's and the time."""
        scheduler = self.options.scheduler
        return {"optimizer": self.optimizer.state_dict(), "generator": self.gen.get_state(),
                "scheduler": None if scheduler is None else scheduler.state_dict(), "elapsed": self.elapsed}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        if self.options.scheduler is not None:
            self.options.scheduler.load_state_dict(state["scheduler"])
        self.gen.set_state(state["generator"])
        self.elapsed = float(state["elapsed"])
