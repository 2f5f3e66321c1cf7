"""Validation of the scalar options and cost arrays shared by every LP entry point.

Each check raises a ``TypeError`` for a wrong type and a ``ValueError`` for a wrong value, with the
argument's name and the expected range in the message. Integers and numbers go through the
package's :func:`structtorch._checks.check_int` / :func:`~structtorch._checks.check_number`; the
LP-specific parts are tolerances, real tensors and the solver's cost limit.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from numbers import Integral

import numpy as np
import torch
from torch import Tensor

from .. import _checks

__all__ = ["check_tol", "check_real", "check_costs", "check_real_tensor", "as_real_tensor",
           "check_connected", "is_integer_dtype", "MAX_COST"]

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


def check_connected(connected: object, connected_soft: object,
                    L: int) -> tuple[list[int], list[tuple[int, object]]]:
    """The hard ``connected`` labels (a list of ints in [0, L), repeats dropped, in order) and the soft
    ``connected_soft`` ones as (label, weight >= 0) pairs; a label may not be both."""
    if connected is not None and (not isinstance(connected, Iterable) or isinstance(connected, (str, bytes))):
        raise TypeError(f"connected must be a list of labels, got {type(connected).__name__}")
    if connected_soft is not None and not isinstance(connected_soft, Mapping):
        raise TypeError(f"connected_soft must be a dict {{label: weight}}, got "
                        f"{type(connected_soft).__name__}")
    hard = [] if connected is None else list(connected)
    soft = [] if connected_soft is None else list(connected_soft.items())
    for c in hard + [c for c, _ in soft]:
        if isinstance(c, bool) or not isinstance(c, Integral) or not 0 <= c < L:
            raise ValueError(f"connected labels must be ints in [0, L) = [0, {L}), got {c!r}")
    for _, w in soft:  # the LP is unbounded for a negative weight
        check_real("connected_soft weights", w, minimum=0.0)
    if set(hard) & {c for c, _ in soft}:
        raise ValueError("a label cannot be both in connected and in connected_soft")
    return list(dict.fromkeys(int(c) for c in hard)), [(int(c), w) for c, w in soft]
