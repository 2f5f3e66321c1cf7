"""Build-on-first-use loader for the compiled CPU kernels in ``csrc/*.cpp``.

The kernels are registered as torch operators (``torch.ops.structtorch_chain.*``) and compiled
with ``-march=native`` for the machine that runs them; the build is cached by torch under
``~/.cache/torch_extensions`` (or ``$TORCH_EXTENSIONS_DIR``) in a folder named after the CPU, so
machines sharing a home directory never load each other's builds. Building needs a C++ compiler
and ninja (a dependency). Without them, or with ``STRUCTTORCH_NO_EXTENSION=1``, the "torch" backend
(the PyTorch loops of each structure's ``_torch.py``) runs instead, after one warning; see
:mod:`structtorch._backend`. The kernels check every shape, count and index they read
(``csrc/common.h``), so a wrong call raises a RuntimeError rather than touching memory.
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import warnings
from pathlib import Path

import torch

_SOURCES = sorted(str(p) for p in (Path(__file__).parent / "csrc").glob("*.cpp"))
# -fopenmp makes at::parallel_for (inline OpenMP) split the batch over torch's intra-op threads;
# the extension then shares the libgomp that torch has already loaded.
_FLAG_SETS = (
    ["-O3", "-fopenmp", "-march=native"],
    ["-O3", "-fopenmp"],
    ["-O3", "-fopenmp-simd"],
)


def _cpu_tag() -> str:
    """A short hash of the CPU model and feature flags."""
    text = platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            text += "".join(sorted({ln for ln in fh if ln.startswith(("model name", "flags"))}))
    except OSError:
        text += platform.processor()
    return hashlib.sha1(text.encode()).hexdigest()[:10]


@functools.cache
def chain_ops():
    """Return ``torch.ops.structtorch_chain`` once built, or ``None`` when unavailable."""
    if os.environ.get("STRUCTTORCH_NO_EXTENSION", "") not in ("", "0"):
        return None
    from torch.utils.cpp_extension import load

    errors = []
    for variant, flags in enumerate(_FLAG_SETS):
        try:
            load(
                name=f"structtorch_chain_{_cpu_tag()}_{variant}",
                sources=_SOURCES,
                extra_cflags=flags,
                extra_ldflags=["-fopenmp"] if "-fopenmp" in flags else [],
                is_python_module=False,
                verbose=False,
            )
            return torch.ops.structtorch_chain
        except Exception as exc:  # pragma: no cover - depends on the machine's toolchain
            errors.append(f"{' '.join(flags)}: {type(exc).__name__}: {exc}")
    warnings.warn(
        "structtorch: compiled CPU kernels unavailable; falling back to the pure-PyTorch "
        "dynamic programs, which are slower.\n" + "\n".join(errors),
        RuntimeWarning,
        stacklevel=3,
    )
    return None
