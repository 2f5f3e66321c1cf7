"""Mixed precision: float16 and bfloat16 potentials, and ``torch.autocast``.

The dynamic programs compute in float32 or better (float64 on CPU, see
:func:`structtorch._numerics.accumulate`). :func:`mixed_precision` wraps a public entry point so
that half-precision potentials are widened once on the way in and every floating result is cast
back on the way out:

* all floating inputs in one half dtype (float16 or bfloat16): computed in float32, results in that
  dtype;
* half-precision inputs mixed with float32 or float64 ones, as under ``torch.autocast`` (a bf16
  encoder output beside a float32 transition matrix): computed and returned in the promoted dtype
  (``torch.promote_types``), so float32 for bf16 + float32;
* no half-precision input: unchanged (float32 and float64 must still not be mixed).

The widening and the narrowing casts are differentiable, so gradients reach the inputs in their own
dtypes. Inside the wrapped function autocast is switched off, so no matrix product of the
recursions runs in reduced precision. A result beyond the range of its dtype (65504 for float16)
raises a ValueError rather than becoming inf (see :func:`structtorch._checks.cast_checked`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Callable
from typing import Any, TypeVar

import torch
from torch import Tensor

from ._checks import cast_checked, one_assertion
from ._library import refuse_jit_tracing
from ._threads import call_threads

__all__ = ["HALF_DTYPES", "mixed_precision", "map_tensors", "widen"]

HALF_DTYPES = (torch.float16, torch.bfloat16)
F = TypeVar("F", bound=Callable[..., Any])


def map_tensors(x: Any, fn: Callable[[Tensor], Tensor]) -> Any:
    """``x`` with ``fn`` applied to every tensor inside tuples, lists, dicts and dataclasses."""
    if isinstance(x, Tensor):
        return fn(x)
    if isinstance(x, tuple) and hasattr(x, "_fields"):  # named tuple
        return type(x)(*(map_tensors(v, fn) for v in x))
    if isinstance(x, (tuple, list)):
        return type(x)(map_tensors(v, fn) for v in x)
    if isinstance(x, dict):
        return {k: map_tensors(v, fn) for k, v in x.items()}
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        changes = {f.name: map_tensors(getattr(x, f.name), fn) for f in dataclasses.fields(x) if f.init}
        return dataclasses.replace(x, **changes)
    return x


def _float_dtypes(args: tuple, kwargs: dict) -> list[torch.dtype]:
    """The dtypes of the floating tensors among the arguments (one level into containers)."""
    found: list[torch.dtype] = []

    def note(t: Tensor) -> Tensor:
        if t.is_floating_point():
            found.append(t.dtype)
        return t

    for x in (*args, *kwargs.values()):
        if isinstance(x, Tensor):
            note(x)
        elif x is not None and not isinstance(x, (str, int, float, bool)):
            map_tensors(x, note)
    return found


def _no_half(args: tuple, kwargs: dict) -> bool:
    """True when no argument is a half-precision tensor, seen without a walk (tensors, None and
    scalars only); False means "look closer" (:func:`widen`)."""
    for x in (*args, *kwargs.values()):
        if isinstance(x, Tensor):
            if x.dtype in HALF_DTYPES:
                return False
        elif x is not None and not isinstance(x, (str, int, float, bool)):
            return False
    return True


def _device_of(args: tuple, kwargs: dict) -> str | None:
    """The device type of the first tensor argument (None when there is none)."""
    for x in (*args, *kwargs.values()):
        if isinstance(x, Tensor):
            return x.device.type
    return None


def _no_autocast(device: str | None):
    """A context that switches autocast off for ``device`` while it is on, else a null context."""
    if device in ("cpu", "cuda") and torch.is_autocast_enabled(device):
        return torch.autocast(device_type=device, enabled=False)
    return contextlib.nullcontext()


def widen(inputs: Any) -> tuple[Any, torch.dtype | None]:
    """``inputs`` (tensors inside tuples, lists, dicts, dataclasses) with the floating tensors
    widened to the compute dtype when one of them is float16/bfloat16, and the dtype results go
    back to; ``(inputs, None)`` unchanged when no input is half precision (see the module doc)."""
    dtypes = _float_dtypes(inputs if isinstance(inputs, tuple) else (inputs,), {})
    if not any(d in HALF_DTYPES for d in dtypes):
        return inputs, None
    result = functools.reduce(torch.promote_types, dtypes)
    compute = torch.promote_types(result, torch.float32)
    return map_tensors(inputs, lambda t: t.to(compute) if t.is_floating_point() else t), result


def mixed_precision(fn: F) -> F:
    """Wrap ``fn`` so that it accepts float16/bfloat16 potentials (see the module docstring); the
    public entry points it wraps also run under :func:`structtorch._threads.call_threads`, so
    their eager checks use fewer threads while other processes keep the CPUs busy, and refuse
    ``torch.jit.trace`` (:func:`structtorch._library.refuse_jit_tracing`)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        refuse_jit_tracing()  # never a trace that answers other inputs wrongly
        device = _device_of(args, kwargs)
        result = None
        if not _no_half(args, kwargs):
            (args, kwargs), result = widen((args, kwargs))
        with _no_autocast(device), one_assertion(), call_threads():
            out = fn(*args, **kwargs)
        if result is None:
            return out
        compute = torch.promote_types(result, torch.float32)

        def narrow(t: Tensor) -> Tensor:
            if t.dtype != compute or compute == result:
                return t
            return cast_checked(t, result, f"a result of {fn.__name__}", "the potentials")

        return map_tensors(out, narrow)

    return wrapper  # type: ignore[return-value]
