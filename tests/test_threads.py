"""structtorch._threads: fewer threads per call while other processes keep the CPUs busy."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import torch

import structtorch as st
from structtorch import _threads


@pytest.fixture
def two_threads(monkeypatch):
    """Two torch threads, a fresh reading of the load on every call, and the previous count back
    afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    monkeypatch.setattr(_threads, "INTERVAL", 0.0)
    monkeypatch.setitem(_threads._STATE, "on", True)
    monkeypatch.setitem(_threads._STATE, "until", 0.0)  # no reading cached by an earlier call
    yield
    torch.set_num_threads(before)


def threads_inside() -> int:
    with _threads.call_threads():
        return torch.get_num_threads()


def test_busy_machine_gets_the_free_cpus_and_the_count_comes_back(two_threads, monkeypatch):
    monkeypatch.setattr(_threads, "free_cpus", lambda: 1)
    assert threads_inside() == 1
    assert torch.get_num_threads() == 2
    monkeypatch.setattr(_threads, "free_cpus", lambda: -3)  # more runnable threads than CPUs
    assert threads_inside() == 1
    monkeypatch.setattr(_threads, "free_cpus", lambda: 8)  # never more than asked for
    assert threads_inside() == 2
    monkeypatch.setattr(_threads, "free_cpus", lambda: None)  # unknown: unchanged
    assert threads_inside() == 2


def test_nested_calls_keep_the_outer_choice_and_errors_restore(two_threads, monkeypatch):
    monkeypatch.setattr(_threads, "free_cpus", lambda: 1)
    with _threads.call_threads():
        monkeypatch.setattr(_threads, "free_cpus", lambda: 2)
        assert threads_inside() == 1
    with pytest.raises(RuntimeError), _threads.call_threads():
        raise RuntimeError("inside")
    assert torch.get_num_threads() == 2 and not _threads._LOCAL.depth


def test_a_failing_thread_count_change_leaves_the_depth_at_zero(two_threads, monkeypatch):
    monkeypatch.setattr(_threads, "free_cpus", lambda: 1)

    def refuse(n: int) -> None:
        raise RuntimeError("refused")

    with monkeypatch.context() as patch:  # undone before the fixture sets the count back
        patch.setattr(torch, "set_num_threads", refuse)
        with pytest.raises(RuntimeError, match="refused"), _threads.call_threads():
            pass
    assert not _threads._LOCAL.depth  # later calls still choose their thread count


def test_switched_off(two_threads, monkeypatch):
    monkeypatch.setattr(_threads, "free_cpus", lambda: 1)
    st.set_adaptive_threads(False)
    try:
        assert threads_inside() == 2
    finally:
        st.set_adaptive_threads(True)
    assert threads_inside() == 1


def test_operators_and_entry_points_run_under_it(two_threads, monkeypatch):
    """Every operator and public entry point asks: a busy reading reaches the kernels."""
    seen = []
    real = torch.set_num_threads
    monkeypatch.setattr(_threads, "free_cpus", lambda: 1)
    monkeypatch.setattr(torch, "set_num_threads", lambda n: (seen.append(n), real(n)))
    u, A = torch.randn(2, 5, 3), torch.randn(3, 3)
    st.viterbi(u, A)
    st.log_partition(u.requires_grad_(), A).sum().backward()  # the backward operator too
    st.semisup.knn_graph(torch.randn(20, 3), 3)
    assert seen and set(seen) == {1, 2} and seen.count(1) >= 3


@pytest.mark.skipif(not os.path.exists("/proc/loadavg"), reason="needs Linux /proc")
def test_free_cpus_sees_another_busy_process():
    """A spinning process takes a CPU; this process's own runnable threads do not count."""
    total = os.cpu_count() or 1
    quiet = _threads.free_cpus()
    assert quiet is not None and quiet <= total
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        readings = [_threads.free_cpus() for _ in range(5)]
    finally:
        proc.kill()
        proc.wait()
    assert min(readings) <= total - 1
