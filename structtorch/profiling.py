"""Counting what a call would launch on a GPU, without a GPU.

On CUDA every ATen operator that computes is a kernel launch (5-10 us each), and a few of them
(``item``, ``nonzero``, ``bool(tensor)``, ...) wait for the device: a host sync. :func:`device_ops`
runs a function under :mod:`torch.profiler` and counts, among the operators it calls, the leaves
of the call tree that would launch a kernel, the Triton launches (structtorch labels them
``structtorch::triton::<kernel>``), and the syncs. Run on CPU tensors on the "triton" backend in
Triton's interpreter (``TRITON_INTERPRET=1`` before Triton is imported), it shows the CUDA path's
launches and syncs on any machine; the tests hold every public call to a budget with it.

An operator that calls others (``sum`` calling ``fill_``, ``mul`` converting a Python scalar)
counts as the kernels of the operators it calls, so each launch counts once. A device assertion
(``torch._assert_async``) counts as one op and no sync, as on a GPU. Not counted: operators that
only make views or metadata (``view``, ``expand``, ``slice``, ...), allocations (``empty``),
conversions that return their input, and whatever runs inside a Triton launch (the interpreter's
copies of the kernel's arguments).
"""

from __future__ import annotations

import collections
import contextlib
import inspect
import os
import re
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = ["DeviceOps", "device_ops", "SYNC_OPS"]

TRITON_PREFIX = "structtorch::triton::"

SYNC_OPS = frozenset({"aten::_local_scalar_dense", "aten::item", "aten::is_nonzero", "aten::nonzero",
                      "aten::nonzero_static", "aten::tolist", "aten::equal"})
"""Operators that copy a device value to the host (a sync on CUDA)."""

_FREE = frozenset({
    # views and metadata
    "aten::view", "aten::_unsafe_view", "aten::as_strided", "aten::expand", "aten::expand_as",
    "aten::slice", "aten::select", "aten::unsqueeze", "aten::squeeze", "aten::permute",
    "aten::transpose", "aten::t", "aten::alias", "aten::detach", "aten::detach_", "aten::lift_fresh",
    "aten::unbind", "aten::split", "aten::split_with_sizes", "aten::chunk", "aten::narrow",
    "aten::reshape", "aten::flatten", "aten::unflatten", "aten::view_as", "aten::diagonal",
    "aten::movedim", "aten::numpy_T", "aten::unfold", "aten::_reshape_alias", "aten::real",
    "aten::resolve_conj", "aten::resolve_neg", "aten::_conj", "aten::conj", "aten::result_type",
    "aten::requires_grad_", "aten::set_", "aten::resize_", "aten::_has_compatible_shallow_copy_type",
    "aten::is_same_size", "aten::size", "aten::stride", "aten::dim", "aten::numel",
    # allocations without a kernel
    "aten::empty", "aten::empty_strided", "aten::empty_like", "aten::new_empty",
    "aten::new_empty_strided",
    # conversions that return their input when nothing changes
    "aten::to", "aten::contiguous", "aten::type_as",
})


@dataclass
class DeviceOps:
    """What a call ran: ``ops`` (leaf operators that would each launch a kernel on a GPU, besides
    the Triton launches), ``launches`` (Triton launches) and ``syncs`` (host syncs), each with its
    per-name counts in ``names``, ``kernels`` and ``sync_names``."""

    ops: int = 0
    launches: int = 0
    syncs: int = 0
    names: collections.Counter = field(default_factory=collections.Counter)
    kernels: collections.Counter = field(default_factory=collections.Counter)
    sync_names: collections.Counter = field(default_factory=collections.Counter)


ASSERT = "aten::_assert_async"


def _uncounted(name: str) -> bool:
    """Inside a Triton launch (the interpreter's work) or a device assertion (its CPU read)."""
    return name.startswith(TRITON_PREFIX) or name == ASSERT


def _has_ancestor(event: Any, test: Callable[[str], bool]) -> bool:
    parent = event.cpu_parent
    while parent is not None:
        if test(parent.name):
            return True
        parent = parent.cpu_parent
    return False


def _works(event: Any) -> bool:
    """Whether ``event`` or an operator it calls would launch a kernel."""
    own = event.name.startswith("aten::") and event.name not in _FREE and not _uncounted(event.name)
    return own or any(_works(c) for c in event.cpu_children)


def _is_leaf(event: Any) -> bool:
    """An operator that would launch a kernel of its own: none of the operators it calls would."""
    return not any(_works(c) for c in event.cpu_children if not _uncounted(c.name))


_PROFILER_LOG = re.compile(r"^[A-Z]+:\d{4}-\d\d-\d\d [^\]]*\.cpp:\d+\] .*\n?", re.M)
"""A line of the profiler's (Kineto's) own log: ``ERROR:2026-12-04 16:23:06 24181:24181
DeviceProperties.cpp:56] gpuGetDeviceCount failed with code 35`` on a CUDA build without a GPU."""


@contextlib.contextmanager
def _profiler_log_dropped() -> Iterator[None]:
    """Within it, what is written to the process's stderr (file descriptor 2, where the profiler's
    C++ log goes) is held back; at its end the profiler's log lines are dropped and anything else
    is written to ``sys.stderr``: a library call prints nothing of its own. Used around the
    profiler's start, stop and event collection only, never around the profiled function."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):  # no file descriptor 2 to hold back
        yield
        return
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            rest = _PROFILER_LOG.sub("", held.read().decode(errors="replace"))
            if rest:
                sys.stderr.write(rest)


def _check_fn(fn: object) -> None:
    """``fn`` is a callable that takes no arguments (else a TypeError naming ``fn``, before the
    profiler starts: not the call's own "object is not callable" or missing-argument error)."""
    if not callable(fn):
        raise TypeError(f"fn must be a callable taking no arguments, got {type(fn).__name__}")
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # no signature to read (some builtins): the call decides
        return
    try:
        signature.bind()
    except TypeError as error:
        raise TypeError(f"fn must be a callable taking no arguments, got {fn!r} ({error})") from None


def device_ops(fn: Callable[[], Any]) -> DeviceOps:
    """Count what ``fn()`` launches and syncs (see the module docstring).

    Parameters
    ----------
    fn : callable
        Called once with no arguments, under the profiler. The profiler's own log (on a CUDA
        build without a GPU, an error about the device count on stderr) is not printed.

    Returns
    -------
    DeviceOps
        The counts. A sync operator counts once as a sync (an ``item`` and the
        ``_local_scalar_dense`` it calls are one), and as an op too when it is a leaf.

    Examples
    --------
    >>> import torch, structtorch as st
    >>> counts = device_ops(lambda: st.viterbi(torch.randn(2, 5, 3), torch.randn(3, 3)))
    >>> counts.syncs >= 0
    True
    """
    _check_fn(fn)
    prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
    with _profiler_log_dropped():
        prof.start()
    try:
        fn()
    finally:
        with _profiler_log_dropped():
            prof.stop()
    with _profiler_log_dropped():
        events = prof.events()
    out = DeviceOps()
    for event in events:
        name = event.name
        if name.startswith(TRITON_PREFIX):
            out.launches += 1
            out.kernels[name.removeprefix(TRITON_PREFIX)] += 1
            continue
        if not name.startswith("aten::") or _has_ancestor(event, _uncounted):
            continue
        if name == ASSERT:  # one asynchronous kernel on a GPU (on CPU it reads its flag at once)
            out.ops += 1
            out.names[name] += 1
            continue
        if name in SYNC_OPS and not _has_ancestor(event, SYNC_OPS.__contains__):
            out.syncs += 1
            out.sync_names[name] += 1
        if name not in _FREE and _is_leaf(event):
            out.ops += 1
            out.names[name] += 1
    return out
