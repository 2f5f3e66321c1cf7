"""LP relaxation benchmark: HiGHS LP, the cvxpylayers layer (plain and smoothed), and connectivity.

(``benchmarks/lp_layers.py`` compares MAPRelaxation's default QP path with cvxpylayers.)

Part 1, on a 32x32 binary grid with random unaries and attractive Potts edges (batch 1):
- ``map_lp`` (HiGHS dual simplex on the local polytope);
- ``MAPRelaxation`` with smoothing 0 (the plain LP through cvxpylayers/diffcp) and with the
  default smoothing 1e-2, Clarabel and SCS, forward and forward+backward;
  ratios against the HiGHS LP time measured in the same run.
Part 2, per denoising instance (``examples/connectivity_denoising.py`` setup) with hard
connectivity: LP solves, cuts, separation time and total time, medians over the instances.
Part 3 (issue 26), the same on thin strokes: an X of 1-pixel diagonals, which a 4-neighbourhood
does not connect, so hard connectivity must add pixels and the separation has far more to do.
Per instance: LP solves, cuts, LP and separation seconds, and the wall-clock time of ``map_lp``.
``--save`` writes each thin-stroke instance's optimum and a digest of its cuts to a JSON file,
``--compare`` checks a run against such a file (the same LP optimum, the same cuts).

    python benchmarks/lp.py [--budget 2.0] [--instances 3] [--only thin] [--save F] [--compare F]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from chain import fmt, median_time

from structtorch import lp

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from connectivity_denoising import instance, x_pattern  # noqa: E402


def grid_problem(H: int = 32, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    edges = lp.grid_edges(H, H)
    unary = torch.randn(H * H, 2, generator=g, dtype=torch.float64)
    pairwise = torch.zeros(len(edges), 2, 2, dtype=torch.float64)
    pairwise[:, 0, 0] = pairwise[:, 1, 1] = 0.5 * torch.rand(len(edges), generator=g, dtype=torch.float64)
    return unary, pairwise, edges


def layer_cases(unary, pairwise, edges, budget):
    rows = []
    for smoothing, method in ((0.0, "Clarabel"), (1e-2, "Clarabel"), (1e-2, "SCS")):
        layer = lp.MAPRelaxation(edges, 2, smoothing=smoothing, solver="cvxpylayers", solve_method=method)

        def forward(layer=layer):
            with torch.no_grad():
                layer(unary, pairwise)

        def forward_backward(layer=layer):
            u = unary.detach().requires_grad_()
            layer(u, pairwise)[..., 1].sum().backward()

        cpu = torch.device("cpu")
        rows.append((f"layer smoothing={smoothing:g} ({method})", median_time(forward, budget, cpu),
                     median_time(forward_backward, budget, cpu)))
    return rows


def denoising_stats(instances: int):
    H = 32
    truth, edges = x_pattern(H, H), lp.grid_edges(H, H)
    out = []
    for sigma, k in ((0.4, 1.0), (0.6, 2.0), (0.8, 1.0), (1.0, 2.0), (1.0, 4.0), (0.6, 0.5)):
        stats = []
        for r in range(instances):
            unary, pairwise = instance(truth, edges, sigma, k, torch.Generator().manual_seed(100 * r + 7))
            res = lp.map_lp(unary, pairwise, edges, connected=[1], max_iter=200)
            t = res.timings[0]
            stats.append((int(res.iterations[0]), len(res.cuts[0]), t["separation"],
                          t["lp"] + t["separation"], float(res.fractional_fraction[0])))
        out.append(((sigma, k), [statistics.median(s[c] for s in stats) for c in range(5)],
                    [s[3] for s in stats]))
    return out


THIN_SETTINGS = ((0.4, 1.0), (0.6, 0.5), (0.6, 2.0), (0.8, 1.0), (1.0, 0.5), (1.0, 2.0))


def thin_x(H: int = 32) -> torch.Tensor:
    """(H * H,) foreground mask of an X of 1-pixel diagonal strokes (``x_pattern`` with width 0):
    diagonal neighbours only, so neither stroke is 4-connected."""
    return x_pattern(H, H, width=0)


def thin_stats(instances: int, H: int = 32) -> list[dict]:
    """One record per thin-stroke instance: setting, LP optimum, solves, cuts, timings, cut digest."""
    truth, edges = thin_x(H), lp.grid_edges(H, H)
    records = []
    for sigma, k in THIN_SETTINGS:
        for r in range(instances):
            unary, pairwise = instance(truth, edges, sigma, k, torch.Generator().manual_seed(100 * r + 7))
            t0 = time.perf_counter()
            res = lp.map_lp(unary, pairwise, edges, connected=[1], max_iter=200, num_workers=1)
            wall = time.perf_counter() - t0
            cuts = repr([(c, i, j, S.tolist()) for c, i, j, S in res.cuts[0]])
            records.append({"sigma": sigma, "k": k, "rep": r, "score": float(res.score[0]),
                            "solves": int(res.iterations[0]), "cuts": len(res.cuts[0]),
                            "lp": res.timings[0]["lp"], "separation": res.timings[0]["separation"],
                            "wall": wall, "converged": bool(res.converged[0]),
                            "cut_digest": hashlib.sha1(cuts.encode()).hexdigest()})
    return records


def print_thin(records: list[dict], compare: Path | None) -> None:
    print(f"\n# Thin strokes (32x32 X of 1-pixel diagonals, 4-neighbourhood, hard connectivity), "
          f"{len(records)} instances")
    print("| sigma, k | rep | LP solves | cuts | LP | separation | map_lp |")
    print("|---|---|---|---|---|---|---|")
    for r in records:
        print(f"| {r['sigma']}, {r['k']} | {r['rep']} | {r['solves']} | {r['cuts']} | {fmt(r['lp'])} | "
              f"{fmt(r['separation'])} | {fmt(r['wall'])}{'' if r['converged'] else ' (max_iter)'} |")
    med = {key: statistics.median(r[key] for r in records)
           for key in ("solves", "cuts", "lp", "separation", "wall")}
    print(f"| median | | {med['solves']:.0f} | {med['cuts']:.0f} | {fmt(med['lp'])} | "
          f"{fmt(med['separation'])} | {fmt(med['wall'])} |")
    print(f"\nmedian map_lp time {fmt(med['wall'])} (target <= 0.3 s)")
    if compare is not None:
        ref = {(r["sigma"], r["k"], r["rep"]): r for r in json.loads(compare.read_text())}
        pairs = [(ref[key], r) for r in records if (key := (r["sigma"], r["k"], r["rep"])) in ref]
        if not pairs:
            print(f"against {compare}: no instance in common")
            return
        gap = max(abs(a["score"] - b["score"]) for a, b in pairs)
        same = sum(a["cut_digest"] == b["cut_digest"] for a, b in pairs)
        print(f"against {compare}: largest LP optimum difference {gap:.3g}, identical cuts in {same} of "
              f"{len(pairs)} instances; median map_lp {fmt(statistics.median(a['wall'] for a, _ in pairs))} "
              f"there, {fmt(statistics.median(b['wall'] for _, b in pairs))} here")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--budget", type=float, default=2.0)
    p.add_argument("--instances", type=int, default=3)
    p.add_argument("--only", choices=["thin"], help="run only part 3")
    p.add_argument("--save", type=Path, help="write the thin-stroke records to this JSON file")
    p.add_argument("--compare", type=Path, help="compare the thin-stroke records with this JSON file")
    args = p.parse_args()
    torch.set_num_threads(1)
    if args.only != "thin":
        layers_and_denoising(args)
    records = thin_stats(args.instances)
    print_thin(records, args.compare)
    if args.save is not None:
        args.save.write_text(json.dumps(records, indent=1) + "\n")


def layers_and_denoising(args: argparse.Namespace) -> None:
    unary, pairwise, edges = grid_problem()
    highs = median_time(lambda: lp.map_lp(unary, pairwise, edges), args.budget, torch.device("cpu"))
    print("# 32x32 binary grid, batch 1, 1 thread (medians)")
    print("| solver | forward | forward+backward | fwd / HiGHS | fwd+bwd / HiGHS |")
    print("|---|---|---|---|---|")
    print(f"| map_lp (HiGHS LP) | {fmt(highs)} | - | 1.00 | - |")
    for name, fwd, fb in layer_cases(unary, pairwise, edges, args.budget):
        print(f"| {name} | {fmt(fwd)} | {fmt(fb)} | {fwd / highs:.2f} | {fb / highs:.2f} |", flush=True)
    print(f"\n# Denoising instances (32x32 X, hard connectivity), medians over {args.instances} per setting")
    print("| sigma, k | LP solves | cuts | separation | total | fractional nodes |")
    print("|---|---|---|---|---|---|")
    totals = []
    for (sigma, k), med, times in denoising_stats(args.instances):
        totals += times
        print(f"| {sigma}, {k} | {med[0]:.0f} | {med[1]:.0f} | {fmt(med[2])} | {fmt(med[3])} | "
              f"{100 * med[4]:.2f}% |", flush=True)
    print(f"\nmedian over all {len(totals)} instances: {fmt(statistics.median(totals))} (target <= 1 s)")


if __name__ == "__main__":
    main()
