"""Multicut and stability benchmark: modularity clustering of karate and Les Miserables with LP-C
and LP-CO (cutting planes, HiGHS warm-started row additions), and one stability range per edge of
karate (d = e_m), against the thesis's times (2009 hardware).

    python benchmarks/multicut.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

import networkx as nx
import torch

from structtorch import lp

THESIS = {("karate", "cycle"): 0.2, ("karate", "cycle+oddwheel"): 0.2, ("lesmis", "cycle"): 6.9,
          ("lesmis", "cycle+oddwheel"): 11.7}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    print("| data | relaxation | Q | integral | LP solves | cuts | median time | thesis | ratio |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, G in (("karate", nx.karate_club_graph()), ("lesmis", nx.les_miserables_graph())):
        edges, w = lp.modularity_weights(G)
        for relaxation in lp.RELAXATIONS:
            runs = [lp.multicut(edges, w, relaxation=relaxation) for _ in range(args.repeats)]
            t = statistics.median(r.time for r in runs)
            r = runs[0]
            paper = THESIS[(name, relaxation)]
            print(f"| {name} | {relaxation} | {-2 * r.objective:.4f} | {r.integral} | {r.iterations} | "
                  f"{len(r.cuts)} | {t:.3f} s | {paper} s | {t / paper:.3f} |", flush=True)
    edges, w = lp.modularity_weights(nx.karate_club_graph())
    res = lp.multicut(edges, w)
    times = []
    for m in range(len(edges)):
        d = torch.zeros(len(edges), dtype=torch.float64)
        d[m] = 1.0
        t0 = time.perf_counter()
        lp.stability_range(res, d)
        times.append(time.perf_counter() - t0)
    print(f"\nkarate, stability range per edge (d = e_m, {len(edges)} pairs of the complete graph): median "
          f"{statistics.median(times) * 1e3:.1f} ms, total {sum(times):.1f} s")


if __name__ == "__main__":
    main()
