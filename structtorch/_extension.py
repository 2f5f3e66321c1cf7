"""Build-on-first-use loader for the compiled CPU kernels in ``csrc/chain.cpp``.

The kernels are registered as torch operators (``torch.ops.structtorch_chain.*``). Building needs
a C++ compiler and ninja; when either is missing, or ``STRUCTTORCH_NO_EXTENSION=1`` is set, the
pure-PyTorch implementations in :mod:`structtorch._chain_torch` are used instead (one warning).
"""

from __future__ import annotations

import functools
import os
import warnings
from pathlib import Path

import torch

_SOURCE = Path(__file__).parent / "csrc" / "chain.cpp"


@functools.cache
def chain_ops():
    """Return ``torch.ops.structtorch_chain`` once built, or ``None`` when unavailable."""
    if os.environ.get("STRUCTTORCH_NO_EXTENSION", "") not in ("", "0"):
        return None
    try:
        from torch.utils.cpp_extension import load

        load(
            name="structtorch_chain",
            sources=[str(_SOURCE)],
            extra_cflags=["-O3"],
            is_python_module=False,
            verbose=False,
        )
    except Exception as exc:  # pragma: no cover - depends on the machine's toolchain
        warnings.warn(
            f"structtorch: compiled CPU kernels unavailable ({type(exc).__name__}: {exc}); "
            "falling back to the pure-PyTorch dynamic programs, which are slower.",
            RuntimeWarning,
            stacklevel=3,
        )
        return None
    return torch.ops.structtorch_chain
