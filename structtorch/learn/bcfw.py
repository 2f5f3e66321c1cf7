"""Block-coordinate Frank-Wolfe for margin-rescaled structural SVMs: the algorithm
(:class:`BCFW`) is the solver :mod:`structtorch.learn.solvers.bcfw` (``fit(solver="bcfw")``);
:func:`fit_bcfw` is in :mod:`structtorch.learn.train`. Both are re-exported here, where they were.
"""

from .solvers.bcfw import BCFW, BCFWSolver, check_linear
from .train import fit_bcfw

__all__ = ["BCFW", "BCFWSolver", "check_linear", "fit_bcfw"]
