"""Learning, on top of the structures, the losses (:mod:`structtorch.losses`) and the modules
(:mod:`structtorch.nn`): :func:`fit` and :func:`evaluate` (``train``), the model/loss adapter
(``task``), the registered solvers (``solvers``: subgradient, BCFW) and the per-epoch
:class:`History` with best-epoch selection (``history``).

``learn.losses`` and ``learn.bcfw`` are the former homes of the hinge losses and of BCFW, kept so
that old imports work.
"""

from ..losses import StructuredHingeLoss, structured_hinge
from . import bcfw, losses, solvers, train
from .history import History
from .train import evaluate, fit, fit_bcfw

__all__ = ["StructuredHingeLoss", "structured_hinge", "train", "bcfw", "losses", "solvers", "fit", "evaluate",
           "fit_bcfw", "History"]
