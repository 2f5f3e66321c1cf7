"""Deprecated aliases of renamed public functions: the old name keeps working, with a
``DeprecationWarning`` that names the new one (see the CHANGELOG for the list)."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import TypeVar

import torch

F = TypeVar("F", bound=Callable)


def deprecated_alias(fn: F, old: str, new: str) -> F:
    """``fn`` under its former name ``old``: the same call, after a ``DeprecationWarning``."""

    @functools.wraps(fn)
    def alias(*args, **kwargs):
        if not torch.compiler.is_compiling():  # dynamo cannot trace warnings.warn
            warnings.warn(f"structtorch.{old} is deprecated and will be removed; use structtorch.{new} "
                          "(same arguments)", DeprecationWarning, stacklevel=2)
        return fn(*args, **kwargs)

    alias.__name__ = alias.__qualname__ = old
    alias.__doc__ = f"Deprecated alias of :func:`structtorch.{new}` (same arguments and results)."
    return alias  # type: ignore[return-value]
