"""Run an example script in a subprocess, as a user would (shared by the example tests)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_example(script: str, *args: str, timeout: float = 600) -> str:
    """Run ``examples/<script>`` with ``args`` from the repository root; return its stdout (the test
    fails with the script's stderr on a non-zero exit). One intra-op thread: the test workers
    already share the machine's cores, and a second thread of a small example mostly spins (the
    semi-supervised example: 42 s of CPU with two, 25 s with one, the same wall time alone)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / script), *args],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout
