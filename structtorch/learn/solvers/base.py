"""The solver protocol of :func:`structtorch.train.fit`.

``fit`` validates its common arguments into :class:`FitOptions`, builds the solver registered
under ``solver=`` as ``factory(model, train_data, loss, options)`` and then owns the loop that is
the same for every solver: per epoch it calls :meth:`Solver.epoch`, adds the validation metrics,
updates the progress bar, the best epoch and early stopping (``select``/``mode``/``patience``),
asks :meth:`Solver.converged`, and at the end restores the best weights through
:attr:`Solver.task`. A solver therefore holds only its algorithm: its own arguments (checked in
its constructor, from ``options.solver_options`` and the options it uses), one epoch, and its
stopping test. Its records are its own: a cutting-plane solver records e.g. ``objective``,
``dual``, ``gap``, ``constraints``, ``oracle_calls`` and ``time`` by listing them in
:attr:`Solver.records`, and ``select=`` accepts them without a change to ``fit``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import nn

from ...sequence_data import SequenceData
from ..task import Task

__all__ = ["FitOptions", "Solver", "SolverFactory", "solver_kwargs"]


@dataclass(frozen=True)
class FitOptions:
    """The arguments of :func:`structtorch.train.fit` that reach the solver, validated.

    Attributes
    ----------
    epochs : int
        Passes (iterations) at most.
    lam : float
        The regularizer's weight: the objective is the mean loss plus ``lam / 2 ||theta||^2``
        (``l2``, or ``1 / (n C)``); 0 for none.
    batch_size, seed, objective : as for ``fit``
    optimizer, scheduler : as for ``fit`` (None when not given)
    solver_options : mapping
        The solver's own options (``solver_options=`` of ``fit``; empty when not given).
    distributed : bool
        Whether torch.distributed is initialized; ``rank`` and ``world`` are then this process's
        rank and the number of processes (else 0 and 1).
    """

    epochs: int
    lam: float
    batch_size: int
    seed: int
    objective: bool = True
    optimizer: torch.optim.Optimizer | None = None
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None
    solver_options: Mapping[str, Any] = field(default_factory=dict)
    distributed: bool = False
    rank: int = 0
    world: int = 1


class Solver(Protocol):
    """A training algorithm for :func:`structtorch.train.fit`, built by its registered factory
    ``factory(model, train_data, loss, options)`` (which raises on arguments it does not take)."""

    records: Mapping[str, str]
    """Each record :meth:`epoch` returns -> the direction in which it improves, ``"min"`` or
    ``"max"`` (the default ``mode`` when it is ``select=``)."""

    task: Task
    """The model with its loss: ``fit`` decodes the validation data, saves the best epoch's
    weights and restores them through it."""

    def epoch(self) -> dict[str, float]:
        """One epoch (pass or iteration) of training; its record, keyed as :attr:`records` (with
        ``time``, the cumulative seconds of training)."""
        ...

    def converged(self, record: Mapping[str, float]) -> bool:
        """Whether the solver's own stopping test holds after the epoch of ``record``."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """The solver's own state after an epoch (tensors and plain Python values, as
        ``torch.load(weights_only=True)`` reads them), for ``fit(checkpoint=...)``; the model's
        parameters are saved apart. Optional: a solver without it cannot be checkpointed."""
        ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from ``state`` (from :meth:`state_dict`; its tensors on the CPU)."""
        ...


SolverFactory = Callable[[nn.Module, SequenceData, Any, FitOptions], Solver]


def solver_kwargs(options: FitOptions, algorithm: Callable, solver: str,
                  given: tuple[str, ...]) -> dict[str, Any]:
    """``options.solver_options`` as keyword arguments of ``algorithm`` (a class), each name one of
    its keyword-only options other than those ``fit`` passes itself (``given``): a TypeError
    naming ``solver_options`` and the options there are, not one from deep inside."""
    taken = [name for name, p in inspect.signature(algorithm).parameters.items()
             if p.kind == p.KEYWORD_ONLY and name not in given]
    unknown = sorted(set(options.solver_options) - set(taken))
    if unknown:
        raise TypeError(f"solver_options of solver={solver!r} take {taken}, got {unknown}")
    return dict(options.solver_options)
