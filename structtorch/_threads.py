"""Threads per call on a busy machine.

PyTorch's CPU operators each open a parallel region over ``torch.get_num_threads()`` threads and
wait at its end for all of them. When another process keeps a core busy (a data-loader worker,
another job), one of those threads is often descheduled, and every region waits for it: a call made
of dozens of regions ran 3-40x slower at two threads than at one on a two-core machine.

So each structtorch entry point and operator runs under :func:`call_threads`: when other processes'
runnable threads leave fewer free CPUs than the thread count, the call runs on the free ones only
(at least one) and restores the thread count after. On a quiet machine nothing changes. Free CPUs
are ``os.cpu_count()`` minus the runnable threads of other processes: the instantaneous count in
``/proc/loadavg`` minus this process's own runnable threads (``/proc/self/task``), read at most
every :data:`INTERVAL` seconds (Linux; elsewhere nothing changes). In PyTorch's OpenMP builds the
thread count is a setting of the calling OS thread, so calls from several Python threads do not
undo each other's choice.

:func:`set_adaptive_threads` switches it off (or the environment variable
``STRUCTTORCH_ADAPTIVE_THREADS=0``).
"""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Callable

import torch

from ._checks import check_bool

__all__ = ["call_threads", "free_cpus", "set_adaptive_threads"]

INTERVAL = 0.05
"""Seconds for which one reading of the machine's load is reused."""

_STATE = {"on": os.environ.get("STRUCTTORCH_ADAPTIVE_THREADS", "1") != "0", "until": 0.0, "free": None}
class _Local(threading.local):
    """Each thread's ``depth``: calls nested inside one that already chose (set in every thread from
    the start, so that a compiled graph's guard on it does not change after the first call)."""

    def __init__(self) -> None:
        self.depth = 0


_LOCAL = _Local()


def set_adaptive_threads(enabled: bool) -> None:
    """Let structtorch calls use fewer threads while other processes keep CPUs busy (the
    default), or always ``torch.get_num_threads()`` (``enabled=False``)."""
    _STATE["on"] = check_bool("enabled", enabled)  # "0" would be True: refused, never cast


def _own_running() -> int:
    """This process's runnable threads (state R in ``/proc/self/task/*/stat``)."""
    count = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:  # the thread ended meanwhile
            continue
        count += stat[stat.rindex(")") + 2] == "R"
    return count


def free_cpus() -> int | None:
    """CPUs not taken by other processes' runnable threads, now; None where unknown (no /proc)."""
    try:
        with open("/proc/loadavg") as f:
            running = int(f.read().split()[3].split("/")[0])
        total = os.cpu_count() or 1
        if running <= 1:  # this thread alone
            return total
        return total - max(running - _own_running(), 0)
    except (OSError, ValueError, IndexError):
        return None


def _free() -> int | None:
    now = time.monotonic()
    if now >= _STATE["until"]:
        _STATE["free"], _STATE["until"] = free_cpus(), now + INTERVAL
    return _STATE["free"]


class call_threads:  # noqa: N801 - used like a function, as torch's context managers are
    """Run the block on at most the free CPUs (see the module docstring); calls nested inside it
    keep its choice. A context manager (a new one per block) and a decorator (one per call); a
    class rather than a generator, so that entering costs about a microsecond."""

    __slots__ = ("_outer", "_threads")

    def __enter__(self) -> call_threads:
        self._outer, self._threads = False, 0
        if _LOCAL.depth or not _STATE["on"] or torch.compiler.is_compiling():
            return self
        threads = torch.get_num_threads()
        free = _free() if threads > 1 else None
        self._outer = True
        _LOCAL.depth = 1
        if free is not None and free < threads:
            try:  # the depth comes back even when setting the count fails
                torch.set_num_threads(max(free, 1))
            except BaseException:
                _LOCAL.depth = 0
                raise
            self._threads = threads
        return self

    def __exit__(self, *exc) -> None:
        if self._outer:
            _LOCAL.depth = 0
            if self._threads:
                torch.set_num_threads(self._threads)

    def __call__(self, fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with call_threads():
                return fn(*args, **kwargs)

        return wrapper
