"""What :func:`structtorch.train.fit` returns (:class:`History`) and how it picks the best epoch
and stops early (:class:`Selection`), the same for every solver."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from .task import Task

__all__ = ["History", "Selection"]

MODES = ("max", "min")


@dataclass
class History:
    """Per-epoch records: ``epochs[e]`` maps names (objective, val_accuracy, ...) to floats.

    ``best_epoch`` is the index of the selected epoch (``select=``; its weights are the returned
    ones unless ``restore_best=False``), ``stopped_early`` whether ``patience`` ended training and
    ``converged`` whether the solver's stopping test ended it (BCFW: the duality gap reached its
    tolerance).
    """

    epochs: list[dict[str, float]] = field(default_factory=list)
    best_epoch: int | None = None
    stopped_early: bool = False
    converged: bool = False

    @classmethod
    def from_state(cls, state: Mapping[str, object]) -> History:
        """The history saved as ``state`` (the fields of a :class:`History` as a dict), checked: a
        KeyError or TypeError naming what is missing or of another type."""
        fields = ("epochs", "best_epoch", "stopped_early", "converged")
        missing = [name for name in fields if name not in state]
        if missing or len(state) != len(fields):
            raise KeyError(f"a history holds {', '.join(fields)}; got {sorted(state)}")
        epochs, best = state["epochs"], state["best_epoch"]
        def record(e: object) -> bool:
            return isinstance(e, dict) and all(isinstance(k, str) and isinstance(v, (int, float))
                                               for k, v in e.items())

        if not isinstance(epochs, list) or not all(record(e) for e in epochs):
            raise TypeError("a history's epochs must be a list of {name: number} records")
        index = isinstance(best, int) and not isinstance(best, bool) and 0 <= best < len(epochs)
        if best is not None and not index:
            raise TypeError(f"a history's best_epoch must be None or an epoch's index, got {best!r}")
        if not all(isinstance(state[name], bool) for name in ("stopped_early", "converged")):
            raise TypeError("a history's stopped_early and converged must be bools")
        return cls(epochs, best, state["stopped_early"], state["converged"])

    def __getitem__(self, name: str) -> list[float]:
        return [e[name] for e in self.epochs]

    def __len__(self) -> int:
        return len(self.epochs)


def _mode(select: str | None, mode: str | None, directions: Mapping[str, str]) -> str | None:
    """The direction in which ``select`` improves: ``mode``, else the record's own direction."""
    if select is not None:
        if select not in directions:
            raise ValueError(f"select={select!r} is not recorded; choose from {sorted(directions)}")
        if mode is None:
            mode = directions[select]
    if mode not in (None, *MODES):
        raise ValueError(f"mode must be 'max' or 'min', got {mode!r}")
    return "max" if select == "dual" else mode  # a dual value is a lower bound: larger is better


class Selection:
    """Best-epoch selection and early stopping on one record (``select=`` of :func:`fit`).

    Parameters
    ----------
    select : str or None
        The record watched; None: no selection (``update`` never stops, ``restore`` does nothing).
    mode : {"max", "min"} or None
        None: ``directions[select]``.
    patience : int or None
        Stop after this many epochs without improvement.
    restore_best : bool
        Keep the best epoch's weights and load them at the end.
    directions : mapping record name -> "max" or "min"
        Every record of the run with the direction in which it improves.
    """

    def __init__(self, select: str | None, mode: str | None, patience: int | None, restore_best: bool,
                 directions: Mapping[str, str]) -> None:
        self.mode = _mode(select, mode, directions)
        self.select, self.patience, self.restore_best = select, patience, restore_best
        self.best: float | None = None
        self.best_state: list | None = None
        self.waited = 0

    def _better(self, value: float) -> bool:
        best = self.best
        if best is None or (math.isnan(best) and not math.isnan(value)):
            return True
        return value > best if self.mode == "max" else value < best

    def update(self, history: History, task: Task) -> bool:
        """Read the last epoch of ``history``: remember it when best, and say whether to stop
        (``history.stopped_early``)."""
        if self.select is None:
            return False
        value = history.epochs[-1][self.select]
        if self._better(value):
            self.best, self.waited, history.best_epoch = value, 0, len(history) - 1
            if self.restore_best:
                self.best_state = task.state()
            return False
        self.waited += 1
        history.stopped_early = self.patience is not None and self.waited >= self.patience
        return history.stopped_early

    def state_dict(self) -> dict:
        """What a checkpoint keeps: the best value, its weights (with ``restore_best``) and the epochs
        waited since."""
        return {"best": self.best, "best_state": self.best_state, "waited": self.waited}

    def load_state_dict(self, state: Mapping) -> None:
        self.best, self.best_state, self.waited = state["best"], state["best_state"], state["waited"]

    def restore(self, history: History, task: Task) -> None:
        """Load the best epoch's weights unless they are the last epoch's."""
        if self.best_state is not None and history.best_epoch != len(history) - 1:
            task.load(self.best_state)
