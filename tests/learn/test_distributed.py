"""Exact solvers under torch.distributed: cutting planes with the oracle shared by 2 and 3 gloo
processes give one process's weights and history (float64, 1e-9); BCFW refuses clearly."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from training_job import train

import structtorch as st
from structtorch.data import make_tagging_data
from structtorch.learn.checkpoint import read_checkpoint

JOB = Path(__file__).with_name("training_job.py")
VARIANTS = "one_slack,n_slack"


@pytest.mark.skipif(sys.platform == "win32", reason="gloo file store")
def test_cutting_planes_on_2_and_3_processes_equal_one(tmp_path):
    """Three processes train in a group of 3, then two of them in a group of 2 (with checkpoints,
    which rank 0 writes); one process here."""
    procs = [subprocess.Popen([sys.executable, str(JOB), VARIANTS, "--out", str(tmp_path / "worldWORLD.pt"),
                               "--worlds", "3,2", "--rank", str(rank), "--init", str(tmp_path / "init"),
                               "--checkpoint", str(tmp_path / "WORLD-SOLVER.pt")],  # rank 0 writes them
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "OMP_NUM_THREADS": "1"}) for rank in range(3)]
    with torch.random.fork_rng():
        one = {variant: train(variant, 7, None) for variant in VARIANTS.split(",")}
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    for world in (2, 3):
        many = torch.load(tmp_path / f"world{world}.pt")
        for variant in VARIANTS.split(","):  # the checkpoint holds the whole run
            assert len(read_checkpoint(tmp_path / f"{world}-{variant}.pt")["history"]["epochs"]) == 7
        for variant in VARIANTS.split(","):
            weights, records, best, _ = many[variant]
            ref_weights, ref_records, ref_best, _ = one[variant]
            torch.testing.assert_close(weights, ref_weights, atol=1e-9, rtol=0)
            assert best == ref_best and len(records) == len(ref_records) == 7
            for got, want in zip(records, ref_records, strict=True):
                assert got.keys() == want.keys()
                for key in want:
                    assert abs(got[key] - want[key]) <= 1e-9 * max(1.0, abs(want[key])), (world, variant, key)


@pytest.fixture
def process_group(tmp_path):
    """torch.distributed initialized in this process alone (world size 1)."""
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'init'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_bcfw_refuses_torch_distributed_and_names_the_solvers(process_group):
    data = make_tagging_data(4, seed=0, min_length=2, max_length=3, num_features=2, num_labels=2)
    with pytest.raises(ValueError, match="solver='bcfw' runs in one process; under torch.distributed use "
                                         "solver='cutting_plane'"):
        st.train.fit(st.LinearChainPotentials(2, 2), data, None, epochs=1, C=1.0, solver="bcfw", progress=False)
    history = st.train.fit(st.LinearChainPotentials(2, 2), data, st.StructuredHingeLoss(), epochs=2, C=1.0,
                           solver="cutting_plane", progress=False)
    assert len(history) == 2
