"""Checkpoints of fit (``checkpoint=``): kill-and-resume equals an uninterrupted run for every solver,
writes are atomic, and a checkpoint of another training or a damaged file is refused by name."""

from __future__ import annotations

import hashlib
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import structtorch as st
from structtorch.data import make_tagging_data
from structtorch.learn.checkpoint import ENTRIES, FORMAT, MAGIC, read_checkpoint, write_checkpoint

JOB = Path(__file__).with_name("training_job.py")
SOLVERS = "sgd,lbfgs,bcfw,one_slack,n_slack"


@pytest.mark.skipif(sys.platform == "win32", reason="fork and SIGKILL")
def test_killed_and_resumed_equals_uninterrupted(tmp_path):
    """Every solver (SGD with momentum and a scheduler, LBFGS, BCFW, 1-slack and n-slack cutting
    planes), killed with SIGKILL mid-epoch in a child process, resumed from its checkpoint: the same
    weights, history and best epoch, bit for bit, as a run from scratch."""
    out = tmp_path / "out.pt"
    proc = subprocess.run([sys.executable, str(JOB), SOLVERS, "--out", str(out), "--checkpoint",
                           str(tmp_path / "SOLVER.pt"), "--kill-at", "auto", "--reference"],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr
    results = torch.load(out)
    for solver in SOLVERS.split(","):
        assert 0 < results[f"{solver}/killed after"] < 7, solver  # killed mid-run, after a checkpoint
        weights, records, best, _ = results[solver]
        ref_weights, ref_records, ref_best, _ = results[f"{solver}/reference"]
        assert torch.equal(weights, ref_weights), solver  # bit for bit
        assert records == ref_records and best == ref_best and len(records) == 7, solver


def _fit(path, *, solver="subgradient", n=8, labels=3, epochs=2, **kwargs):
    data = make_tagging_data(n, seed=0, min_length=2, max_length=4, num_features=2, num_labels=3)
    model = st.LinearChainPotentials(2, labels)
    return st.train.fit(model, data, st.StructuredHingeLoss("margin"), epochs=epochs, C=1.0, solver=solver,
                        progress=False, checkpoint=path, **kwargs)


def test_resume_with_more_epochs_and_a_finished_run(tmp_path):
    path = tmp_path / "fit.pt"
    first = _fit(path, epochs=2)
    again = _fit(path, epochs=2)  # finished: nothing to do
    assert again.epochs == first.epochs
    longer = _fit(path, epochs=4)
    assert longer.epochs[:2] == first.epochs and len(longer) == 4


@pytest.mark.parametrize("change, match", [
    ({"solver": "bcfw"}, "solver: 'subgradient' in the checkpoint, 'bcfw' now"),
    ({"n": 9}, "training sequences: 8 in the checkpoint, 9 now"),
    ({"labels": 4}, "model parameters"),
    ({"batch_size": 5}, "batch_size: 32 in the checkpoint, 5 now"),
    ({"seed": 1}, "seed"),
])
def test_checkpoint_of_another_training_is_refused(tmp_path, change, match):
    path = tmp_path / "fit.pt"
    _fit(path)
    with pytest.raises(ValueError, match=match):
        _fit(path, **change)


def test_other_solver_options_are_refused(tmp_path):
    path = tmp_path / "fit.pt"
    _fit(path, solver="cutting_plane", solver_options={"variant": "one_slack"})
    with pytest.raises(ValueError, match="solver_options"):
        _fit(path, solver="cutting_plane", solver_options={"variant": "n_slack"})


def test_damaged_or_foreign_files_are_refused(tmp_path):
    path = tmp_path / "fit.pt"
    _fit(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="is damaged"):
        _fit(path)
    torch.save({"weights": torch.zeros(3)}, path)
    with pytest.raises(ValueError, match="not a checkpoint of structtorch's fit"):
        _fit(path)

    class Payload:  # a pickle that would run code: weights_only refuses it, behind a valid digest
        def __reduce__(self):
            return (os.getcwd, ())

    payload = pickle.dumps(Payload(), protocol=2)
    path.write_bytes(MAGIC + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload)
    with pytest.raises(ValueError, match="cannot be read"):
        _fit(path)


def _flipped(data: bytes, offset: int, count: int = 1) -> bytes:
    damaged = bytearray(data)
    for k in range(offset, min(offset + count, len(data))):
        damaged[k] ^= 0xFF
    return bytes(damaged)


def test_a_damaged_byte_anywhere_is_refused_never_resumed(tmp_path):
    """Byte flips (one byte, and 64 bytes as the campaign's) at offsets spread over the whole file,
    header and digest included, and truncations at as many lengths: each a ValueError naming the file
    (issue 53, item 1: 64 flipped bytes in the stored generator state used to load)."""
    path = tmp_path / "fit.pt"
    _fit(path, epochs=1)
    data = path.read_bytes()
    offsets = sorted({*range(0, len(MAGIC) + 66, 7), *range(0, len(data), max(1, len(data) // 60)), len(data) - 1})
    damaged = [_flipped(data, k) for k in offsets] + [_flipped(data, len(data) // 3, 64)]
    damaged += [data[:k] for k in offsets] + [data + b"\0"]
    for bad in damaged:
        path.write_bytes(bad)
        with pytest.raises(ValueError, match=re.escape(repr(str(path)))):
            _fit(path, epochs=2)
    path.write_bytes(data)
    assert len(_fit(path, epochs=2)) == 2  # the intact file resumes


@pytest.mark.parametrize("entry", list(ENTRIES))
def test_a_checkpoint_missing_an_entry_names_it(tmp_path, entry):
    path = tmp_path / "fit.pt"
    _fit(path, epochs=1)
    state = read_checkpoint(path)
    del state[entry]
    write_checkpoint(path, state)
    with pytest.raises(ValueError, match=f"(no entry {entry!r}|format)"):
        _fit(path)


@pytest.mark.parametrize("entry, value", [
    ("model", torch.zeros(3)), ("solver", [1, 2]), ("meta", "meta"), ("history", {"epochs": 3}),
    ("solver", {}), ("model", [{"weight": torch.zeros(1)}]), ("rng", {"torch": torch.zeros(2)}),
    ("selection", {"best": "x"}), ("history", {"epochs": [], "best_epoch": None}),
])
def test_a_mistyped_or_foreign_entry_names_it(tmp_path, entry, value):
    """Issue 53, item 2: a missing key in the solver's state was a bare KeyError, a tensor for the
    model's state a TypeError naming neither the checkpoint nor the entry."""
    path = tmp_path / "fit.pt"
    _fit(path, epochs=1)
    state = read_checkpoint(path)
    state[entry] = value
    write_checkpoint(path, state)
    with pytest.raises(ValueError, match=f"{re.escape(repr(str(path)))}.*entry {entry!r}"):
        _fit(path)


def test_resuming_with_another_objective_option_is_refused(tmp_path):
    """Issue 53, item 3: the history would mix records with and without the objective."""
    path = tmp_path / "fit.pt"
    _fit(path, objective=True)
    with pytest.raises(ValueError, match="objective: True in the checkpoint, False now"):
        _fit(path, objective=False, epochs=3)


def test_a_write_interrupted_leaves_the_last_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "fit.pt"
    write_checkpoint(path, {"format": FORMAT, "value": torch.ones(3)})

    def fail(*args, **kwargs):
        raise KeyboardInterrupt  # as if killed between the write and the rename

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(KeyboardInterrupt):
        write_checkpoint(path, {"format": FORMAT, "value": torch.zeros(3)})
    assert torch.equal(read_checkpoint(path)["value"], torch.ones(3))
    assert [p.name for p in tmp_path.iterdir()] == ["fit.pt"]  # no temporary file left


def test_checkpoint_argument_errors(tmp_path):
    with pytest.raises(ValueError, match="checkpoint_every"):
        _fit(tmp_path / "a.pt", checkpoint_every=0)
    with pytest.raises(TypeError, match="checkpoint must be a path"):
        _fit(3.5)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        _fit(tmp_path / "missing" / "a.pt")
    with pytest.raises(TypeError, match="solver_options must be a dict"):  # issue 53, item 8
        _fit(None, solver="bcfw", solver_options="tol")
    with pytest.raises(TypeError, match="solver_options must have str keys"):
        _fit(None, solver="bcfw", solver_options={1: 2})
