"""Validation of the scalar options and cost arrays shared by every LP entry point.

Each check raises a ``TypeError`` for a wrong type and a ``ValueError`` for a wrong value, with the
argument's name and the expected range in the message. Integers and numbers go through the
package's :func:`structtorch._checks.check_int` / :func:`~structtorch._checks.check_number`; the
LP-specific parts are tolerances, real tensors and the solver's cost limit.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from .. import _checks

__all__ = ["check_tol", "check_real", "check_costs", "check_real_tensor", "as_real_tensor",
           "is_integer_dtype", "MAX_COST"]

MAX_COST = 1e20
"""Costs of this magnitude or more are infinite to HiGHS (its ``infinite_cost`` option)."""


def is_integer_dtype(dtype: torch.dtype) -> bool:
    """Integer tensor dtypes (not bool, floating point or complex)."""
    return not (dtype.is_floating_point or dtype.is_complex or dtype == torch.bool)


def check_real(name: str, value: object, *, minimum: float = -math.inf, strict: bool = False) -> float:
    """``value`` (a number or a one-element real tensor, e.g. a weight that takes gradients) as a
    finite float >= ``minimum`` (> ``minimum`` when ``strict``)."""
    if isinstance(value, Tensor) and value.numel() == 1 and not value.dtype.is_complex:
        value = value.item()
    return _checks.check_number(name, value, low=minimum, open_low=strict)


def check_tol(name: str, value: object, upper: float | None = 1.0) -> float:
    """A tolerance: finite, > 0 and (when ``upper`` is given) < ``upper``; a tolerance on values in
    [0, 1] of 1 or more would accept everything."""
    value = check_real(name, value, minimum=0.0, strict=True)
    if upper is not None and not value < upper:
        raise ValueError(f"{name} must lie in (0, {upper:g}), got {value}")
    return value


def check_real_tensor(name: str, x: object, shape: tuple[int, ...] | None = None,
                      shape_text: str = "") -> Tensor:
    """A real (integer or float, not bool or complex) tensor of ``shape`` (any when None)."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor{' of shape ' + shape_text if shape_text else ''}, "
                        f"got {type(x).__name__}")
    if x.dtype.is_complex or x.dtype == torch.bool:
        raise TypeError(f"{name} must be a real (integer or floating point) tensor, got {x.dtype}")
    if shape is not None and tuple(x.shape) != shape:
        got = tuple(int(s) for s in x.shape)
        raise ValueError(f"{name} must be a tensor of shape {shape_text or shape}, got shape {got}")
    return x


def as_real_tensor(name: str, x: object, shape: tuple[int, ...] | None = None,
                   shape_text: str = "") -> Tensor:
    """:func:`check_real_tensor` that first converts array-likes (lists, numpy arrays)."""
    if not isinstance(x, Tensor):
        try:
            x = torch.as_tensor(np.asarray(x))
        except (TypeError, ValueError, RuntimeError) as exc:
            raise TypeError(f"{name} must be a real tensor{' of shape ' + shape_text if shape_text else ''}: "
                            f"{exc}") from None
    return check_real_tensor(name, x, shape, shape_text)


def check_costs(name: str, values: Tensor | np.ndarray) -> None:
    """Costs must be finite and below :data:`MAX_COST` in magnitude (HiGHS reads larger ones as
    infinite)."""
    v = values.detach().double().cpu().numpy() if isinstance(values, Tensor) else np.asarray(values, float)
    if v.size and not np.isfinite(v).all():
        raise ValueError(f"{name} must be finite")
    if v.size and float(np.abs(v).max()) >= MAX_COST:
        raise ValueError(f"{name} must be below {MAX_COST:g} in magnitude (the LP solver's infinity), "
                         f"got {float(np.abs(v).max()):g}")
