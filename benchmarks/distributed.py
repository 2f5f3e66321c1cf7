"""Cutting planes with the oracle shared by processes: wall-clock time on 1, 2, ... gloo processes.

Two oracle-bound trainings, each a fixed number of cutting-plane iterations (``tol=0``: the same
work at every world size), one intra-op thread per process:

- ``hsm``: the HSM SVM of the gene-structure demo (``examples/gene_structure.py``: synthetic
  genes, the demo's sensors, segment loss, n-slack, C = 1) on the demo's 200 training genes;
- ``chunking``: the chunking example's sparse CRF++ features (``benchmarks/cutting_plane.py``'s
  data) on 8,936 sentences (CoNLL-2000's training size), margin-rescaled Hamming hinge, 1-slack,
  C = 0.1.

Each world size runs in fresh processes (``torch.multiprocessing.spawn``, gloo through a file);
printed: seconds per iteration (median over iterations after the first), the total, the speedup
against one process, and the largest difference of the final weights from one process's (they are
the same training). Quote ratios: the machine is shared.

    python benchmarks/distributed.py [--task hsm chunking] [--world 1 2] [--iterations 8]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import structtorch as st

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "benchmarks"))


def hsm_task():
    """(model, data, loss, C, solver options) of the demo's HSM SVM."""
    from gene_structure import HSMStructure

    from structtorch.data import synthetic_genes
    from structtorch.data.gene_sensors import GeneSensors

    sensor_split, train_split = synthetic_genes(200, seed=100), synthetic_genes(200, seed=101)
    signals, contents = GeneSensors.fit(sensor_split).tracks(train_split)
    data = st.SequenceData(torch.cat([signals, contents], 2).double(), train_split.labels.clamp(min=0),
                           train_split.lengths, train_split.starts)
    loss = st.StructuredHingeLoss(loss="segment")
    return HSMStructure(signals.shape[2]), data, loss, 1.0, {"variant": "n_slack"}


def chunking_task():
    from cutting_plane import chunking_data, model_for

    data = chunking_data(8936, seed=0)  # CoNLL-2000 size
    return model_for(data), data, st.StructuredHingeLoss("margin"), 0.1, {"variant": "one_slack"}


TASKS = {"hsm": hsm_task, "chunking": chunking_task}


def worker(rank: int, world: int, task: str, iterations: int, init: str, out: str) -> None:
    torch.set_num_threads(1)
    if world > 1:
        dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=world)
    model, data, loss, C, options = TASKS[task]()
    began = time.perf_counter()
    history = st.train.fit(model, data, loss, C=C, epochs=iterations, solver="cutting_plane",
                           solver_options={**options, "tol": 0.0}, progress=False, objective=False)
    total = time.perf_counter() - began
    if rank == 0:
        weights = torch.cat([p.detach().reshape(-1).double() for p in model.parameters()])
        torch.save({"times": history["time"], "total": total, "weights": weights,
                    "gap": history.epochs[-1]["gap"]}, out)
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()


def run(task: str, world: int, iterations: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "out.pt")
        init = str(Path(tmp) / "init")
        mp.spawn(worker, args=(world, task, iterations, init, out), nprocs=world, join=True)
        return torch.load(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--task", nargs="+", default=list(TASKS), choices=list(TASKS))
    p.add_argument("--world", type=int, nargs="+", default=[1, 2])
    p.add_argument("--iterations", type=int, default=8)
    args = p.parse_args()
    print("| task | processes | s / iteration | total s | speedup | max abs weight difference |")
    print("|---|---|---|---|---|---|")
    for task in args.task:
        base = None
        for world in args.world:
            result = run(task, world, args.iterations)
            steps = [b - a for a, b in zip([0.0, *result["times"]], result["times"], strict=False)][1:]
            per = statistics.median(steps) if steps else float("nan")
            base = base or (per, result["weights"])
            diff = float((result["weights"] - base[1]).abs().max())
            print(f"| {task} | {world} | {per:.3f} | {result['total']:.1f} | {base[0] / per:.2f} "
                  f"| {diff:.1e} |", flush=True)


if __name__ == "__main__":
    main()
