"""The one place that decides which implementation of a dynamic program runs, and finds it.

Backends
--------
``"compiled"``
    The C++ CPU kernels of ``csrc/`` (built on first use, double accumulators), for CPU tensors:
    the linear-chain Viterbi, log-partition (forward and backward), marginals and CRF loss (logZ -
    score fused forward and backward), the bag sums of sparse features, the semi-Markov
    Viterbi and log-partition (forward and backward; segment-mean PLiFs included), the
    Hamming-count tables of linear chains and segmentations, and the trees: Eisner's and CKY's
    inside and outside passes, Viterbi and count tables, the matrix-tree theorem and
    Chu-Liu-Edmonds.
``"triton"``
    Fused Triton kernels, one launch per call, for CUDA tensors; with ``TRITON_INTERPRET=1`` set
    before Triton is imported, also for CPU tensors (Triton's interpreter: slow, for tests). They
    cover what the compiled kernels cover but the semi-Markov Hamming-count tables, and k-best
    lists, sampling, order-l window Viterbi, segmentation scores, and the whole loss-augmented
    search of the unweighted Hamming loss with h the identity (chains and windows: margin and
    slack; segmentations: margin); few long chains run parallel-in-time kernels. Trees: Eisner's
    and CKY's forward and outside passes (log-partition, marginals, Viterbi); Chu-Liu-Edmonds runs
    on the host (the compiled kernel on a CPU copy), the matrix-tree theorem and the trees' count
    tables by the PyTorch references.
``"torch"``
    The batched PyTorch loops of each structure's ``_torch.py``: the reference, and the path on
    every other device. Weighted or custom losses of the semi-Markov and window searches, the
    gradient of the marginals and double backward run these loops on every backend (the compiled
    backend also for k-best lists, sampling and windows).

By default CPU tensors use ``"compiled"`` (``"torch"`` when the kernels did not build), CUDA
tensors ``"triton"`` when Triton is installed, and everything else ``"torch"``. The choice can be
forced with :func:`use_backend` (a context manager, or a plain call that sets it for the process)
or the environment variable ``STRUCTTORCH_BACKEND``; :func:`use_backend` wins over the variable. A
backend that cannot run the given tensors (compiled kernels on a CUDA tensor, kernels that failed to
build, Triton on CPU tensors without the interpreter) falls back to ``"torch"`` after one warning
per reason.

Lookup
------
:func:`backend_for` names the backend for tensors like the given one; :func:`kernel_module` finds a
structure's implementation of it: the module ``_cpu`` ("compiled") or ``_triton`` ("triton") of the
structure's package (``structtorch.chain``, ``structtorch.semimarkov``, ``structtorch.lossaug``,
``structtorch.trees``),
None for "torch", where the structure calls its own ``_torch.py``. Each structure asks
:func:`backend_for` once per call and adds only its own vetoes, cases its kernels do not take,
which then run "torch": empty sequences (T = 0) in ``chain``, ``semimarkov`` and ``trees``, more than 32767
labels on the compiled chain kernels (int16 backpointers). The
Triton kernels share their tile loops and reductions through :mod:`structtorch._triton_common`.
"""

from __future__ import annotations

import functools
import importlib
import os
import warnings
from types import ModuleType

from torch import Tensor

from ._extension import chain_ops, fast_ops  # noqa: F401 - fast_ops: for _checks

__all__ = ["use_backend", "backend_for", "kernel_module", "BACKENDS"]

BACKENDS = ("compiled", "triton", "torch")
ENV = "STRUCTTORCH_BACKEND"
_state: dict[str, str | None] = {"name": None}
_warned: set[str] = set()


def _check_name(name: object, what: str) -> str | None:
    if name is None or name == "auto":
        return None
    if name not in BACKENDS:
        raise ValueError(f"{what} must be one of {BACKENDS} or 'auto', got {name!r}")
    return name


class use_backend:  # noqa: N801 - used like a function, as torch's context managers are
    """Force the backend of every dynamic program.

    ``use_backend("torch")`` sets it for the process; ``with use_backend("torch"): ...`` sets it for
    the block and restores the previous choice after it. ``None`` or ``"auto"`` returns to the
    defaults (compiled on CPU, triton on CUDA when installed, torch elsewhere), still below
    ``STRUCTTORCH_BACKEND`` when set.

    Parameters
    ----------
    name : {"compiled", "triton", "torch", "auto"} or None
    """

    def __init__(self, name: str | None) -> None:
        self.name = _check_name(name, "backend")
        self._previous = _state["name"]
        _state["name"] = self.name

    def __enter__(self) -> use_backend:
        return self

    def __exit__(self, *exc) -> None:
        _state["name"] = self._previous

    def __repr__(self) -> str:
        return f"use_backend({self.name!r})"


def requested() -> str | None:
    """The backend forced by :func:`use_backend` or ``STRUCTTORCH_BACKEND``, else None."""
    if _state["name"] is not None:
        return _state["name"]
    return _check_name(_environment() or None, ENV)


def _environment() -> str | None:
    """``os.environ.get(ENV)``, read from the mapping's own dict where CPython keeps one (a tenth
    of a microsecond against two: it is read on every call)."""
    data = getattr(os.environ, "_data", None)
    if not isinstance(data, dict):
        return os.environ.get(ENV)
    raw = data.get(_ENV_KEY)
    return None if raw is None else os.environ.decodevalue(raw)


_ENV_KEY = os.environ.encodekey(ENV) if hasattr(os.environ, "encodekey") else ENV


def _fallback(reason: str) -> str:
    if reason not in _warned:
        _warned.add(reason)
        warnings.warn(f"structtorch: {reason}; using the 'torch' backend", RuntimeWarning, stacklevel=4)
    return "torch"


@functools.cache
def triton_installed() -> bool:
    """Whether Triton imports (checked once; importing it is not free)."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def _triton_reason(x: Tensor | str) -> str | None:
    """Why the Triton kernels cannot run on ``x`` (a tensor or a device type), or None when they can."""
    device = x if isinstance(x, str) else x.device.type
    if not triton_installed():
        return "Triton is not installed"
    if device == "cuda" or (device == "cpu" and os.environ.get("TRITON_INTERPRET") == "1"):
        return None
    return f"the Triton kernels need CUDA tensors (or TRITON_INTERPRET=1 for CPU ones), not {device}"


def triton_interpreted() -> bool:
    """Whether the Triton kernels can run on CPU tensors (Triton's interpreter)."""
    return _triton_reason("cpu") is None


def backend_for(x: Tensor) -> str:
    """The backend that runs a dynamic program on tensors like ``x``: "compiled", "triton" or "torch"."""
    return _choose(x.device.type)


def _choose(device: str) -> str:
    """:func:`backend_for` by device type; under ``torch.compile`` decided once, at trace time."""
    name = requested()
    on_cpu = device == "cpu"
    if name is None:
        if on_cpu:
            return "compiled" if chain_ops() is not None else "torch"
        return "triton" if device == "cuda" and _triton_reason(device) is None else "torch"
    if name == "compiled":
        if not on_cpu:
            return _fallback(f"the compiled kernels run on CPU tensors only, not on {device}")
        if chain_ops() is None:
            return _fallback("the compiled kernels are unavailable (see the build warning)")
    if name == "triton":
        reason = _triton_reason(device)
        if reason is not None:
            return _fallback(reason)
    return name


# what torch.compiler.assume_constant_result does (it only sets this mark), without importing
# torch._dynamo with the package: under torch.compile the choice is made once, at trace time
_choose._dynamo_marked_constant = True  # type: ignore[attr-defined]

_MODULES = {"compiled": "._cpu", "triton": "._triton"}


@functools.cache
def kernel_module(backend: str, package: str) -> ModuleType | None:
    """The kernel module of structure ``package`` for ``backend``: its ``_cpu`` ("compiled") or
    ``_triton`` ("triton"), None for "torch". Imported on first use, so Triton loads only when
    chosen. Dynamo refuses to trace the import: call it inside operators and their fake
    implementations, not in the code ``torch.compile`` traces."""
    return None if backend == "torch" else importlib.import_module(_MODULES[backend], package)
