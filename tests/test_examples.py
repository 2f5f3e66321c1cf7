"""The demo runs end to end, and the synthetic data has the documented structure."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import torch

from structtorch.data import make_tagging_data

ROOT = Path(__file__).resolve().parents[1]


def test_tagging_data_structure():
    data = make_tagging_data(64, num_labels=4, num_features=3, min_length=5, max_length=9, seed=3)
    B, T, F = data.x.shape
    assert (B, F) == (64, 3) and T == int(data.lengths.max()) and T <= 9
    assert int(data.lengths.min()) >= 5
    inside = torch.arange(T) < data.lengths[:, None]
    moves = (data.labels[:, 1:] - data.labels[:, :-1]) % 4
    assert set(moves[inside[:, 1:]].tolist()) <= {0, 1}, "labels only stay or move to the next"
    assert (data.x[~inside] == 0).all() and (data.labels[~inside] == 0).all()
    again = make_tagging_data(64, num_labels=4, num_features=3, min_length=5, max_length=9, seed=3)
    assert torch.equal(again.x, data.x)


def test_demo_runs(tmp_path):
    out = tmp_path / "demo.png"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "tagging_demo.py"), "--epochs", "2", "--out", str(out)],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    assert "after training" in proc.stdout and "baseline" in proc.stdout
    assert out.stat().st_size > 10_000
