"""Exact structural-SVM solvers to a relative duality gap: cutting planes (1-slack, n-slack) vs BCFW.

The chunking example's data (``examples/chunking.py``: generated CoNLL-style sentences, the CRF++
window templates as sparse features, :class:`structtorch.SparseFeaturePotentials` with start and
end scores), margin-rescaled Hamming hinge, lambda = 1 / (n C). Every solver runs until its
duality gap is at most ``--rtol`` times its primal objective (or ``--max-iters``). Reported: the
iterations (BCFW: passes), oracle calls (sequences), the time in the dual QP, the total time and
the final primal, dual and gap; a solver that reaches neither stops at ``--max-seconds``. Time is
measured on this machine; quote ratios.

    python benchmarks/cutting_plane.py [--n-train 500] [--C 0.1] [--rtol 1e-3] [--threads 1]
        [--solvers one_slack,n_slack,bcfw] [--max-seconds 600]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

import structtorch as st
from structtorch.data import SequenceData
from structtorch.data.conll import encode_tags, synthetic_chunking, to_bio, window_features
from structtorch.learn.solvers.bcfw import BCFW
from structtorch.learn.solvers.cutting_plane import CuttingPlane


def chunking_data(n: int, seed: int) -> SequenceData:
    sentences = [(w, p, to_bio(c)) for w, p, c in synthetic_chunking(n, seed=seed)]
    ids, lengths, _ = window_features(sentences, min_count=2)
    tags, _, _ = encode_tags([s[2] for s in sentences])
    return SequenceData(ids, tags, lengths)


def model_for(data: SequenceData) -> st.SparseFeaturePotentials:
    return st.SparseFeaturePotentials(int(data.x.max()) + 1, int(data.labels.max()) + 1, boundary=True)


def until_gap(step, rtol: float, max_iters: int, max_seconds: float) -> tuple[dict, int, float]:
    """Call ``step()`` (-> record with objective, dual, gap) until gap <= rtol * objective (or the
    iteration or time limit)."""
    began, record, iters = time.perf_counter(), {}, 0
    while iters < max_iters and time.perf_counter() - began < max_seconds:
        record, iters = step(), iters + 1
        if record["gap"] <= rtol * abs(record["objective"]):
            break
    return record, iters, time.perf_counter() - began


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n-train", type=int, default=500)
    p.add_argument("--C", type=float, default=0.1)
    p.add_argument("--rtol", type=float, default=1e-3)
    p.add_argument("--max-iters", type=int, default=5000)
    p.add_argument("--max-seconds", type=float, default=600.0, help="per solver")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--solvers", default="one_slack,n_slack,bcfw", help="comma-separated, run in this order")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    data = chunking_data(args.n_train, args.seed)
    lam = 1.0 / (len(data) * args.C)
    loss = st.StructuredHingeLoss()
    weights = sum(p.numel() for p in model_for(data).parameters())
    print(f"chunking: {len(data)} sentences, {int(data.lengths.sum())} tokens, {weights} weights; "
          f"C = {args.C}, stop at gap <= {args.rtol} x objective; {args.threads} thread(s)")
    head = ("solver", "iters", "oracle", "QP s", "total s", "objective", "gap")
    print(f"{head[0]:<12} {head[1]:>6} {head[2]:>8} {head[3]:>7} {head[4]:>8} {head[5]:>11} {head[6]:>10}",
          flush=True)

    def show(name: str, iters: int, calls: float, qp: float, seconds: float, record: dict) -> None:
        objective, gap = record["objective"], record["gap"]
        print(f"{name:<12} {iters:>6} {int(calls):>8} {qp:>7.2f} {seconds:>8.2f} {objective:>11.6f} "
              f"{gap:>10.2e}", flush=True)

    for solver in args.solvers.split(","):
        if solver == "bcfw":
            state = BCFW(model_for(data), data, None, lam, tol=0.0, seed=args.seed)
            record, iters, seconds = until_gap(state.run_pass, args.rtol, args.max_iters, args.max_seconds)
            show("bcfw", iters, 2 * iters * len(data), 0.0, seconds, record)  # n block steps + a gap pass
            continue
        state = CuttingPlane(model_for(data), data, loss, lam, variant=solver, tol=0.0)
        record, iters, seconds = until_gap(state.iterate, args.rtol, args.max_iters, args.max_seconds)
        show(solver, iters, record["oracle_calls"], record["qp_time"], seconds, record)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    main()
