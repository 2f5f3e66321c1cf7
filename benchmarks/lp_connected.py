"""Connected labelings: the LP relaxation with connectivity cuts, its connectivity-preserving
rounding and the exact MAP by branch and cut, side by side (issue 42).

Instances (hard connectivity of label 1, one thread):

- ``blobs``: the 6x6 two-blob toy (unary +2 inside two 2x2 blobs, -1 outside, Potts 0.2);
- ``thin``: the 32x32 X of 1-pixel diagonal strokes of ``benchmarks/lp.py``'s part 3 (neither
  stroke 4-connected), noise and edge strength as there;
- ``wide``: the connectivity denoising example's 32x32 X of width 3 (``examples/
  connectivity_denoising.py``), at the Fig. 51 corner settings.

Per instance: whether the LP came back integral, its time, the rounding's time and score, the exact
solve's time, score, bound and whether it certified the optimum; the gaps LP bound - exact and
exact - rounding. Printed as one markdown table per kind with medians over the instances.

    python benchmarks/lp_connected.py [--instances 3] [--kinds blobs thin wide] [--time-limit 120]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

from structtorch import lp

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from connectivity_denoising import instance, x_pattern  # noqa: E402

THIN = ((0.6, 1.0), (1.0, 0.5))
WIDE = ((0.6, 1.0), (1.0, 2.0))


def blobs(_: int = 0):
    H = W = 6
    edges = lp.grid_edges(H, W)
    u = torch.full((H, W), -1.0, dtype=torch.float64)
    u[0:2, 0:2] = 2
    u[4:6, 4:6] = 2
    unary = torch.stack([torch.zeros(H * W, dtype=torch.float64), u.reshape(-1)], 1)
    pairwise = torch.tensor([[0.2, 0.0], [0.0, 0.2]], dtype=torch.float64).expand(len(edges), 2, 2)
    return "6x6 two blobs", unary, pairwise, edges


def strokes(width: int, settings, H: int = 32):
    truth, edges = x_pattern(H, H, width=width), lp.grid_edges(H, H)

    def make(rep: int):
        sigma, k = settings[rep % len(settings)]
        unary, pairwise = instance(truth, edges, sigma, k, torch.Generator().manual_seed(100 * rep + 7))
        return f"sigma {sigma:g}, k {k:g}", unary, pairwise, edges
    return make


def measure(unary, pairwise, edges, time_limit: float) -> dict:
    t0 = time.perf_counter()
    relaxed = lp.map_lp(unary, pairwise, edges, connected=[1], max_iter=200, num_workers=1)
    t1 = time.perf_counter()
    rounded = lp.round_connected(relaxed.mu, edges, [1])
    t2 = time.perf_counter()
    exact = lp.map_exact(unary, pairwise, edges, connected=[1], time_limit=time_limit, max_iter=200,
                         num_workers=1)
    t3 = time.perf_counter()
    return {"integral": bool(relaxed.integral[0]), "fractional": float(relaxed.fractional_fraction[0]),
            "lp_s": t1 - t0, "lp": float(relaxed.score[0]), "round_s": t2 - t1,
            "round": float(lp.labeling_score(unary, pairwise, edges, rounded)[0]), "exact_s": t3 - t2,
            "exact": float(exact.score[0]), "bound": float(exact.bound[0]),
            "optimal": bool(exact.optimal[0]), "solves": int(exact.solves[0])}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--instances", type=int, default=3, help="per kind (blobs: 1)")
    p.add_argument("--kinds", nargs="+", default=["blobs", "thin", "wide"],
                   choices=["blobs", "thin", "wide"])
    p.add_argument("--time-limit", type=float, default=120.0, help="seconds per exact solve")
    args = p.parse_args()
    torch.set_num_threads(1)
    makers = {"blobs": (blobs, 1), "thin": (strokes(0, THIN), args.instances),
              "wide": (strokes(3, WIDE), args.instances)}
    print("| instances | LP integral | fractional nodes | LP s | rounding s | exact s | certified | "
          "LP bound - exact | exact - rounding | B&C solves |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for kind in args.kinds:
        make, count = makers[kind]
        rows = []
        for rep in range(count):
            name, unary, pairwise, edges = make(rep)
            r = measure(unary, pairwise, edges, args.time_limit)
            rows.append(r)
            print(f"  {kind} {name}: {r}", file=sys.stderr, flush=True)

        def med(key, rows=rows):
            return statistics.median(r[key] for r in rows)
        above = statistics.median(r["lp"] - r["exact"] for r in rows)
        below = statistics.median(r["exact"] - r["round"] for r in rows)
        print(f"| {kind} ({count}) | {sum(r['integral'] for r in rows)}/{count} | {med('fractional'):.1%} | "
              f"{med('lp_s'):.3f} | {med('round_s'):.4f} | {med('exact_s'):.3f} | "
              f"{sum(r['optimal'] for r in rows)}/{count} | {above:.4g} | {below:.4g} | {med('solves'):g} |",
              flush=True)


if __name__ == "__main__":
    main()
