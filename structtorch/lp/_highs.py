"""The HiGHS solver as the LP modules use it: silent, on costs scaled to [-1, 1].

Silence: ``highspy.Highs()`` registers its Python callback in its constructor, and HiGHS logs its
banner ("Running HiGHS ...") to the C stdout when a callback is set while ``output_flag`` still has
its default True; the option cannot be set before the constructor returns. :func:`new_highs`
therefore builds the solver core ``highspy._Highs`` (the same C++ object without the Python
callback layer, which these modules do not use) and turns the output off before anything can log.

Scale: HiGHS's optimality tolerances are absolute (dual feasibility 1e-7), so costs of 1e-8 look
like zeros to it and costs beyond about 1e7 lose the tolerance's meaning. Every LP is solved for
``cost / cost_scale(cost)`` (largest magnitude 1) and the reported objectives are scaled back,
which makes the answers invariant under scaling all costs. What stays is floating point: a cost
below about 1e-7 of the instance's largest one is at the solver's resolution, so an instance
mixing 1e-9 and 1 is solved as if the 1e-9 entries were (nearly) zero, an error of about 1e-7 of
the largest cost in the objective.
"""

from __future__ import annotations

import highspy
import numpy as np

__all__ = ["new_highs", "cost_scale"]

_CORE = getattr(highspy, "_Highs", highspy.Highs)  # older highspy: Highs is the core itself


def new_highs():
    """A HiGHS instance that never prints."""
    h = _CORE()
    h.setOptionValue("output_flag", False)
    return h


def cost_scale(*costs: np.ndarray) -> float:
    """The largest magnitude among ``costs`` (1.0 when all are zero or empty)."""
    peak = max((float(np.abs(c).max()) for c in costs if np.size(c)), default=0.0)
    return peak if peak > 0 else 1.0
