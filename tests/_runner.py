"""Run an example script in a subprocess, as a user would (shared by the example tests)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_example(script: str, *args: str, timeout: float = 600) -> str:
    """Run ``examples/<script>`` with ``args`` from the repository root; return its stdout (the test
    fails with the script's stderr on a non-zero exit)."""
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / script), *args],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout
