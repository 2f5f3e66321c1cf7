"""Batches of LP solves in parallel and the cached MAPRelaxation problem (issue 12, item 4).

Part 1: a batch of 16 denoising instances (``examples/connectivity_denoising.py``: 32x32 "X",
node noise sigma, Potts edges of strength k; the 16 instances cycle through four (sigma, k)
settings, from easy to ones that need many cuts), solved with ``num_workers`` = 1 and 2 threads:

- ``map_lp`` without connectivity (one LP per instance);
- ``map_lp`` with hard connectivity of the foreground (cutting planes);
- ``relaxed_hinge`` with hard connectivity (the loss-augmented LPs of a training step, forward and
  backward);
- ``MAPRelaxation`` (smoothing 1e-2, Clarabel) forward and backward: diffcp's threads.

Medians of repeated runs and the ratio 1 thread / 2 threads (the speed-up); the results of 1 and
2 threads are checked to be identical.

Part 2: constructing ``MAPRelaxation`` on the 32x32 grid: cold (compiling the problem, after
``MAPRelaxation.cache_clear()``) against cached (same structure again).

    python benchmarks/lp_batch.py [--batch 16] [--budget 3] [--no-layer]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch
from chain import fmt, median_time

from structtorch import lp

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from connectivity_denoising import instance, x_pattern  # noqa: E402

SETTINGS = ((0.4, 1.0), (0.6, 2.0), (1.0, 2.0), (1.0, 4.0))  # (sigma, k)


def batch(B: int, H: int = 32):
    """(unary (B, V, 2), pairwise (B, E, 2, 2), edges, target (B, V)) of B denoising instances."""
    truth, edges = x_pattern(H, H), lp.grid_edges(H, H)
    pairs = [instance(truth, edges, *SETTINGS[b % len(SETTINGS)], torch.Generator().manual_seed(b))
             for b in range(B)]
    unary = torch.stack([u for u, _ in pairs])
    pairwise = torch.stack([p for _, p in pairs])
    return unary, pairwise, edges, truth.expand(B, -1).clone()


def cases(unary, pairwise, edges, target, layer: bool):
    """name -> fn(num_workers) returning tensors to compare across thread counts."""

    def plain(w):
        return (lp.map_lp(unary, pairwise, edges, num_workers=w).mu,)

    def hard(w):
        res = lp.map_lp(unary, pairwise, edges, connected=[1], num_workers=w)
        return res.mu, res.iterations

    def hinge(w):
        u = unary.clone().requires_grad_()
        loss = lp.relaxed_hinge(u, pairwise, edges, target, connected=[1], normalize=False, num_workers=w)
        loss.backward()
        return loss.detach(), u.grad

    out = {"map_lp (no connectivity)": plain, "map_lp (hard connectivity)": hard,
           "relaxed_hinge hard, fwd+bwd": hinge}
    if layer:
        layers = {w: lp.MAPRelaxation(edges, 2, num_workers=w) for w in (1, 2)}

        def smoothed(w):
            u = unary.clone().requires_grad_()
            mu = layers[w](u, pairwise)
            mu[..., 1].sum().backward()
            return mu.detach(), u.grad

        out["MAPRelaxation fwd+bwd (diffcp)"] = smoothed
    return out


def construction(repeats: int, H: int = 32) -> tuple[float, float]:
    """Median seconds of MAPRelaxation(grid, 2) cold (cache cleared) and cached."""
    edges = lp.grid_edges(H, H)
    cold, cached = [], []
    for _ in range(repeats):
        lp.MAPRelaxation.cache_clear()
        t0 = time.perf_counter()
        first = lp.MAPRelaxation(edges, 2)
        cold.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        second = lp.MAPRelaxation(edges, 2)
        cached.append(time.perf_counter() - t0)
        assert second.layer.ctx is first.layer.ctx
    return statistics.median(cold), statistics.median(cached)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--budget", type=float, default=3.0, help="seconds of repeats per case and thread count")
    p.add_argument("--repeats", type=int, default=3, help="MAPRelaxation constructions cold and cached")
    p.add_argument("--no-layer", action="store_true", help="skip the MAPRelaxation batch")
    args = p.parse_args()
    torch.set_num_threads(2)
    unary, pairwise, edges, target = batch(args.batch)
    cpu = torch.device("cpu")
    print(f"# {args.batch} denoising instances (32x32 X, (sigma, k) in {list(SETTINGS)}), torch "
          f"{torch.__version__}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")
    print("| case | 1 thread | 2 threads | speed-up (1 / 2) | identical |")
    print("|---|---|---|---|---|")
    for name, fn in cases(unary, pairwise, edges, target, not args.no_layer).items():
        same = all(torch.equal(a, b) for a, b in zip(fn(1), fn(2), strict=True))
        one = median_time(lambda fn=fn: fn(1), args.budget, cpu)
        two = median_time(lambda fn=fn: fn(2), args.budget, cpu)
        same_text = "yes" if same else "NO"
        print(f"| {name} | {fmt(one)} | {fmt(two)} | {one / two:.2f} | {same_text} |", flush=True)
    cold, cached = construction(args.repeats)
    print(f"\n# MAPRelaxation(grid_edges(32, 32), 2) construction, median of {args.repeats}")
    print("| construction | time |")
    print("|---|---|")
    print(f"| cold (compile) | {fmt(cold)} |")
    print(f"| cached (same structure) | {fmt(cached)} |")
    print(f"| ratio cold / cached | {cold / cached:.0f} |")


if __name__ == "__main__":
    main()
