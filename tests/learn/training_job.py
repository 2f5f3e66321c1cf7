"""A small training run in its own process, for the checkpoint and distributed tests (not collected).

    python tests/learn/training_job.py SOLVER[,SOLVER...] --out FILE [--checkpoint PATH]
        [--kill-at K] [--epochs E] [--worlds W[,W...] --rank R --init FILE] [--reference]

SOLVER is one of sgd, lbfgs, bcfw, one_slack, n_slack. With ``--kill-at K`` a forked child
process trains each solver with the checkpoint and sends itself SIGKILL at the model's K-th forward
call (mid-epoch, between checkpoints; K is that solver's entry of ``KILL_AT`` with ``--kill-at
auto``); this process then checks that it died so, and resumes from the checkpoint. With
``--worlds 3,2`` the process (if its rank is below each size) joins a gloo group of 3 processes
through the file ``--init`` + "3", trains, leaves it, then one of 2. Rank 0 writes
{solver: (weights, history without the wall-clock records, best epoch, forward calls)} to ``--out``
(WORLD in it replaced by the world size), and with
``--reference`` also the same training run again from scratch without a checkpoint (key
"SOLVER/reference") in this process.
"""

from __future__ import annotations

import argparse
import os
import signal

import torch
import torch.distributed as dist
from torch import nn

import structtorch as st
from structtorch.data import make_tagging_data
from structtorch.learn.checkpoint import read_checkpoint

TIMES = ("time", "qp_time")
# the model's forward call at which a killed run ends: mid-epoch, after the checkpoint of epoch 2 or 4
# (checkpoint_every=2) and before the last of the 7 epochs
KILL_AT = {"sgd": 19, "lbfgs": 19, "bcfw": 60, "one_slack": 18, "n_slack": 18}


class Killer(nn.Module):
    """A linear chain model that kills its process at its ``at``-th forward call (never: 0)."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.inner = st.LinearChainPotentials(3, 3).double()  # float64: equal to 1e-9 at any world size
        self.at, self.calls = at, 0

    def forward(self, x):
        self.calls += 1
        if self.calls == self.at:
            os.kill(os.getpid(), signal.SIGKILL)
        return self.inner(x)


def train(solver: str, epochs: int, checkpoint: str | None, kill_at: int = 0):
    """(weights, history records without times, best epoch, the model's forward calls) of one run."""
    torch.manual_seed(0)
    data = make_tagging_data(12, seed=1, min_length=2, max_length=6, num_features=3, num_labels=3).map_x(torch.Tensor.double)
    model = Killer(kill_at)
    kwargs: dict = {"C": 1.0, "select": "objective"}
    if solver in ("sgd", "lbfgs"):
        kwargs["optimizer"] = (torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9) if solver == "sgd"
                               else torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=3))
        kwargs["batch_size"] = 4 if solver == "sgd" else 100
        kwargs["scheduler"] = (torch.optim.lr_scheduler.StepLR(kwargs["optimizer"], 2, 0.5)
                               if solver == "sgd" else None)
        name = "subgradient"
    elif solver in ("one_slack", "n_slack"):
        name, kwargs["solver_options"] = "cutting_plane", {"variant": solver, "tol": 1e-12, "batch_size": 5}
    else:
        name = solver
    history = st.train.fit(model, data, st.StructuredHingeLoss("margin"), epochs=epochs, solver=name,
                           progress=False, checkpoint=checkpoint, checkpoint_every=2, **kwargs)
    weights = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).double()
    records = [{k: v for k, v in e.items() if k not in TIMES} for e in history.epochs]
    return weights, records, history.best_epoch, model.calls


def killed(solver: str, epochs: int, checkpoint: str, kill_at: str) -> int:
    """Train ``solver`` in a forked child that kills itself mid-run; the epochs its checkpoint holds."""
    at = KILL_AT[solver] if kill_at == "auto" else int(kill_at)
    pid = os.fork()
    if pid == 0:
        try:
            train(solver, epochs, checkpoint, at)
        finally:
            os._exit(3)  # not killed: the parent sees exit code 3
    _, status = os.waitpid(pid, 0)
    if not (os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL):
        raise SystemExit(f"{solver}: the run was not killed (wait status {status})")
    return len(read_checkpoint(checkpoint)["history"]["epochs"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("solvers")
    parser.add_argument("--out", required=True)
    parser.add_argument("--checkpoint")
    parser.add_argument("--kill-at", default="", help="a forward call, or 'auto'")
    parser.add_argument("--epochs", type=int, default=7)
    parser.add_argument("--worlds", default="1", help="world sizes in turn, e.g. 3,2 (ranks below each join)")
    parser.add_argument("--rank", type=int, default=0)
    parser.add_argument("--init", help="the gloo file store's path, the world size appended")
    parser.add_argument("--reference", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    for world in (int(w) for w in args.worlds.split(",")):
        if args.rank >= world:
            continue
        if world > 1:
            dist.init_process_group("gloo", init_method=f"file://{args.init}{world}", rank=args.rank,
                                    world_size=world)
        results = run(args, world)
        if args.rank == 0:
            torch.save(results, args.out.replace("WORLD", str(world)))
        if world > 1:
            dist.barrier()  # no process tears gloo down while another still uses it
            dist.destroy_process_group()


def run(args: argparse.Namespace, world: int = 1) -> dict:
    results = {}
    for solver in args.solvers.split(","):
        checkpoint = (None if args.checkpoint is None
                      else args.checkpoint.replace("SOLVER", solver).replace("WORLD", str(world)))
        if args.kill_at:
            results[f"{solver}/killed after"] = killed(solver, args.epochs, checkpoint, args.kill_at)
        results[solver] = train(solver, args.epochs, checkpoint)
        if args.reference:
            results[f"{solver}/reference"] = train(solver, args.epochs, None)
    return results


if __name__ == "__main__":
    main()
