"""The solvers of :func:`structtorch.train.fit`, registered by name (``fit(solver=name)``).

A solver is one module: a factory ``factory(model, train_data, loss, options)`` returning an
object with ``records``, ``task``, ``epoch()`` and ``converged(record)`` (the protocol of
:mod:`structtorch.learn.solvers.base`). ``fit`` looks it up here with :func:`get_solver`; a new
solver is one file plus one :func:`register_solver` call (or one entry of :data:`SOLVERS`).
"""

from __future__ import annotations

from .base import FitOptions, Solver, SolverFactory
from .bcfw import BCFWSolver
from .subgradient import SubgradientSolver

__all__ = ["FitOptions", "Solver", "SolverFactory", "SOLVERS", "get_solver", "register_solver"]


def _cutting_plane(model, data, loss, options: FitOptions):
    """The factory of ``solver="cutting_plane"``: imports its module (DAQP, Clarabel, scipy.sparse)
    on first use (see :class:`structtorch.learn.solvers.cutting_plane.CuttingPlaneSolver`)."""
    from .cutting_plane import CuttingPlaneSolver

    return CuttingPlaneSolver(model, data, loss, options)


SOLVERS: dict[str, SolverFactory] = {"subgradient": SubgradientSolver, "bcfw": BCFWSolver,
                                     "cutting_plane": _cutting_plane}


def register_solver(name: str, factory: SolverFactory) -> None:
    """Make ``factory`` available as ``fit(solver=name)`` (replacing any solver of that name)."""
    if not isinstance(name, str) or not name:
        raise TypeError(f"a solver's name must be a non-empty str, got {name!r}")
    if not callable(factory):
        raise TypeError(f"factory must be callable (model, train_data, loss, options) -> Solver, got "
                        f"{type(factory).__name__}")
    SOLVERS[name] = factory


def get_solver(name: object) -> SolverFactory:
    """The factory registered as ``name``; ValueError naming the solvers otherwise."""
    if not isinstance(name, str) or name not in SOLVERS:
        raise ValueError(f"solver must be one of {tuple(SOLVERS)}, got {name!r}")
    return SOLVERS[name]
