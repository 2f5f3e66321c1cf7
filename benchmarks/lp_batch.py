"""Batches of LP solves in parallel and the cached MAPRelaxation problem (issue 12, item 4).

Part 1: a batch of 16 denoising instances (``examples/connectivity_denoising.py``: 32x32 "X",
node noise sigma, Potts edges of strength k; the 16 instances cycle through four (sigma, k)
settings, from easy to ones that need many cuts), solved with ``num_workers`` = 1 and 2 threads:

- ``map_lp`` without connectivity (one LP per instance);
- ``map_lp`` with hard connectivity of the foreground (cutting planes);
- ``relaxed_hinge`` with hard connectivity (the loss-augmented LPs of a training step, forward and
  backward, at most 10 LP solves per instance);
- ``MAPRelaxation`` (smoothing 1e-2, Clarabel) forward and backward: diffcp's threads.

Medians of repeated runs (1 and 2 threads alternating, round by round), the median ratio 1
thread / 2 threads (the speed-up), and the share of the 1-thread time spent inside HiGHS's solves
(the part that runs in parallel: HiGHS releases the GIL, while building the models, separating
cuts and collecting results hold it; with a share f the speed-up on 2 free cores is at most
1 / (1 - f / 2)). The results of 1 and 2 threads are checked to be identical. On a machine whose
cores are busy with other work the second thread finds no free core: the load average is
printed.

Part 1 starts with the bare HiGHS solves of two prebuilt 48x48 grid LPs, one after the other
against two threads: what the solver itself gains.

Part 2: constructing ``MAPRelaxation`` on the 32x32 grid (L = 2: the reduced binary form; L = 3:
the full local polytope): cold (compiling the problem, after
``MAPRelaxation.cache_clear()``) against cached (same structure again).

    python benchmarks/lp_batch.py [--batch 16] [--budget 3] [--no-layer] [--no-batch]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch
from chain import fmt

from structtorch import lp

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from connectivity_denoising import instance, x_pattern  # noqa: E402

SETTINGS = ((0.4, 1.0), (0.6, 2.0), (1.0, 2.0), (1.0, 4.0))  # (sigma, k)
# LP solves per loss-augmented inference, as in the training loops of the examples. The loss is
# the default area-normalized one: with normalize=False (+1 on every wrong label) the denoising
# instances become near-ties, and one of them took 22 rounds, 602 cuts and 71 s of separation.
TRAIN_MAX_ITER = 10


def batch(B: int, H: int = 32):
    """(unary (B, V, 2), pairwise (B, E, 2, 2), edges, target (B, V)) of B denoising instances."""
    truth, edges = x_pattern(H, H), lp.grid_edges(H, H)
    pairs = [instance(truth, edges, *SETTINGS[b % len(SETTINGS)], torch.Generator().manual_seed(b))
             for b in range(B)]
    unary = torch.stack([u for u, _ in pairs])
    pairwise = torch.stack([p for _, p in pairs])
    return unary, pairwise, edges, truth.expand(B, -1).clone()


def cases(unary, pairwise, edges, target, layer: bool):
    """name -> fn(num_workers) returning (tensors to compare across thread counts, seconds spent
    inside HiGHS's solves summed over the instances, or None)."""

    def highs_seconds(res):
        return sum(t["lp"] for t in res.timings)

    def plain(w):
        res = lp.map_lp(unary, pairwise, edges, num_workers=w)
        return (res.mu,), highs_seconds(res)

    def hard(w):
        res = lp.map_lp(unary, pairwise, edges, connected=[1], num_workers=w)
        return (res.mu, res.iterations), highs_seconds(res)

    def hinge(w):
        u = unary.clone().requires_grad_()
        loss, res = lp.relaxed_hinge(u, pairwise, edges, target, connected=[1], max_iter=TRAIN_MAX_ITER,
                                     num_workers=w, return_result=True)
        loss.backward()
        return (loss.detach(), u.grad), highs_seconds(res)

    out = {"map_lp (no connectivity)": plain, "map_lp (hard connectivity)": hard,
           "relaxed_hinge hard, fwd+bwd": hinge}
    if layer:
        layers = {w: lp.MAPRelaxation(edges, 2, num_workers=w, solver="cvxpylayers") for w in (1, 2)}

        def smoothed(w):
            u = unary.clone().requires_grad_()
            mu = layers[w](u, pairwise)
            mu[..., 1].sum().backward()
            return (mu.detach(), u.grad), None

        out["MAPRelaxation fwd+bwd (diffcp)"] = smoothed
    return out


def paired_medians(fn, budget: float, min_rounds: int = 3,
                   max_rounds: int = 15) -> tuple[float, float, float]:
    """Median seconds of fn(1) and fn(2) and the median of the per-round ratios, timed in
    alternating order round by round (the two thread counts see the same load of the machine)."""
    fn(1), fn(2)  # warm-up
    one, two = [], []
    began = time.perf_counter()
    while len(one) < min_rounds or (len(one) < max_rounds and time.perf_counter() - began < budget):
        for w in ((1, 2) if len(one) % 2 == 0 else (2, 1)):
            t0 = time.perf_counter()
            fn(w)
            (one if w == 1 else two).append(time.perf_counter() - t0)
    ratios = [a / b for a, b in zip(one, two, strict=True)]
    return statistics.median(one), statistics.median(two), statistics.median(ratios)


def construction(repeats: int, L: int, H: int = 32) -> tuple[float, float]:
    """Median seconds of MAPRelaxation(grid, L) cold (cache cleared) and cached."""
    edges = lp.grid_edges(H, H)
    cold, cached = [], []
    for _ in range(repeats):
        lp.MAPRelaxation.cache_clear()
        t0 = time.perf_counter()
        first = lp.MAPRelaxation(edges, L, solver="cvxpylayers")
        cold.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        second = lp.MAPRelaxation(edges, L, solver="cvxpylayers")
        cached.append(time.perf_counter() - t0)
        assert second.layer.ctx is first.layer.ctx
    return statistics.median(cold), statistics.median(cached)


def highs_pair(budget: float, H: int = 48) -> tuple[float, float, float]:
    """Two HiGHS solves of H x H grid LPs (no cuts, already built): one after the other and on two
    threads at once. HiGHS releases the GIL while it solves, so on two free cores the pair takes
    the time of one."""
    import numpy as np

    from structtorch.lp._parallel import parallel_map
    from structtorch.lp.relaxation import _constraints, _Instance

    edges = lp.grid_edges(H, H)
    V, E = H * H, len(edges)
    A, rhs = _constraints(V, 2, edges), np.concatenate([np.ones(V), np.zeros(4 * E)])
    costs = [np.random.default_rng(s).uniform(-1, 1, A.shape[1]) for s in (0, 1)]

    def fn(w):
        instances = [_Instance(c, A, rhs, 0) for c in costs]
        return parallel_map(lambda inst: inst.solve(), instances, w), None

    return paired_medians(fn, budget)


def part1(args: argparse.Namespace) -> None:
    unary, pairwise, edges, target = batch(args.batch)
    print(f"# {args.batch} denoising instances (32x32 X, (sigma, k) in {list(SETTINGS)}), torch "
          f"{torch.__version__}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")
    print("| case | 1 thread | 2 threads | speed-up (paired 1 / 2) | HiGHS share (1 thread) | identical |")
    print("|---|---|---|---|---|---|")
    one, two, ratio = highs_pair(args.budget)
    print(f"| 2 HiGHS solves alone (48x48 grid LP) | {fmt(one)} | {fmt(two)} | {ratio:.2f} | 100% | - |")
    for name, fn in cases(unary, pairwise, edges, target, not args.no_layer).items():
        (first, highs), (second, _) = fn(1), fn(2)
        same = "yes" if all(torch.equal(a, b) for a, b in zip(first, second, strict=True)) else "NO"
        one, two, ratio = paired_medians(fn, args.budget)
        share = "-" if highs is None else f"{100 * highs / one:.0f}%"
        print(f"| {name} | {fmt(one)} | {fmt(two)} | {ratio:.2f} | {share} | {same} |", flush=True)
    print(f"\nload average after part 1: {os.getloadavg()[0]:.2f}")


def part2(args: argparse.Namespace) -> None:
    print(f"\n# MAPRelaxation(grid_edges(32, 32), L) construction, median of {args.repeats}")
    print("| L | cold (compile) | cached (same structure) | cold / cached |")
    print("|---|---|---|---|")
    for L in (2, 3):
        cold, cached = construction(args.repeats, L)
        print(f"| {L} | {fmt(cold)} | {fmt(cached)} | {cold / cached:.0f} |", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--budget", type=float, default=3.0, help="seconds of repeats per case and thread count")
    p.add_argument("--repeats", type=int, default=3, help="MAPRelaxation constructions cold and cached")
    p.add_argument("--no-layer", action="store_true", help="skip the MAPRelaxation batch")
    p.add_argument("--no-batch", action="store_true", help="skip part 1 (only the construction times)")
    args = p.parse_args()
    torch.set_num_threads(2)
    if not args.no_batch:
        part1(args)
    part2(args)


if __name__ == "__main__":
    main()
