"""structtorch.profiling.device_ops as a library call: it prints nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = """
import sys, torch
from structtorch.profiling import device_ops
counts = device_ops(lambda: (torch.zeros(3) + 1, print("the function's own line", file=sys.stderr)))
assert counts.ops == 2, counts
device_ops(lambda: torch.ones(2).sum())
"""


def test_device_ops_prints_nothing_of_its_own():
    """Issue 41: on a CUDA build without a GPU the profiler printed "gpuGetDeviceCount failed with
    code 35" (and its start/stop lines) to stderr. What the profiled function writes stays."""
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "" and proc.stderr == "the function's own line\n", proc.stderr
