"""Build-on-first-use loader for the compiled CPU kernels in ``csrc/*.cpp``.

The kernels are registered as torch operators (``torch.ops.structtorch_chain.*``), and those that
small calls use are also bound as a Python module (:func:`fast_ops`); they are compiled
with ``-march=native`` for the machine that runs them; the build is cached by torch under
``~/.cache/torch_extensions`` (or ``$TORCH_EXTENSIONS_DIR``) in a folder named after the CPU, so
machines sharing a home directory never load each other's builds. Building needs a C++ compiler
and ninja (a dependency). Without them, or with ``STRUCTTORCH_NO_EXTENSION=1``, the "torch" backend
(the PyTorch loops of each structure's ``_torch.py``) runs instead, after one warning; see
:mod:`structtorch._backend`. The kernels check every shape, count and index they read
(``csrc/common.h``), so a wrong call raises a RuntimeError rather than touching memory.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import platform
import sys
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


@contextlib.contextmanager
def _quiet(logger_name: str):
    """Hold back a library logger's warnings (torch's cpp_extension logs "No CUDA runtime is
    found" at import on a CUDA build without a GPU): a library call prints nothing."""
    logger = logging.getLogger(logger_name)
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _needs_build(name: str) -> bool:
    """Whether loading extension ``name`` will compile: no cached library, or sources newer than it."""
    try:
        from torch.utils.cpp_extension import _get_build_directory

        library = Path(_get_build_directory(name, verbose=False)) / f"{name}.so"
        built = library.stat().st_mtime
    except (ImportError, OSError, TypeError):
        return True
    return any(Path(src).stat().st_mtime > built for src in _SOURCES + [str(p) for p in _headers()])


def _headers() -> list[Path]:
    return sorted((Path(__file__).parent / "csrc").glob("*.h"))


@functools.cache
def chain_ops():
    """Return ``torch.ops.structtorch_chain`` once built, or ``None`` when unavailable.

    A build (first use on a machine, or after the sources changed) prints one line to stderr saying
    so; ``make test``/``make demo`` build ahead of time (:func:`main`).
    """
    return None if fast_ops() is None else torch.ops.structtorch_chain


@functools.cache
def fast_ops():
    """The Python module of the same build (``csrc/python.cpp``): the kernels small calls use,
    called without the dispatcher; ``None`` when the kernels are unavailable."""
    if os.environ.get("STRUCTTORCH_NO_EXTENSION", "") not in ("", "0"):
        return None
    with _quiet("torch.utils.cpp_extension"):
        from torch.utils.cpp_extension import load

        errors = []
        for variant, flags in enumerate(_FLAG_SETS):
            name = f"structtorch_chain_{_cpu_tag()}_{variant}"
            if _needs_build(name):
                print(f"structtorch: compiling the C++ CPU kernels for this machine ({name}; once, "
                      "about 1-3 minutes)...", file=sys.stderr, flush=True)
            try:
                return load(
                    name=name,
                    sources=_SOURCES,
                    extra_cflags=flags,
                    extra_ldflags=["-fopenmp"] if "-fopenmp" in flags else [],
                    is_python_module=True,
                    verbose=False,
                )
            except Exception as exc:  # pragma: no cover - depends on the machine's toolchain
                errors.append(f"{' '.join(flags)}: {type(exc).__name__}: {exc}")
    warnings.warn(
        "structtorch: compiled CPU kernels unavailable; falling back to the pure-PyTorch "
        "dynamic programs, which are slower.\n" + "\n".join(errors),
        RuntimeWarning,
        stacklevel=3,
    )
    return None


def main() -> int:
    """Build (or load) the kernels now (the Makefile's install step calls it); exit status 1 when
    they are unavailable."""
    import time

    start = time.perf_counter()
    ok = chain_ops() is not None
    print(f"structtorch: compiled CPU kernels {'ready' if ok else 'UNAVAILABLE'} "
          f"({time.perf_counter() - start:.1f} s)")
    return 0 if ok else 1
