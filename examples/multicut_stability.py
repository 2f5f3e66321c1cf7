"""Graph partitioning and solution stability (Nowozin 2009, ch. 7: Table 10, Fig. 64, §2.9c-d).

- Table 10: modularity clustering (unweighted graphs) of Zachary's karate club and Les Miserables
  with the LP-C and
  LP-CO relaxations (an integral optimum certifies the optimal partition) against networkx's
  greedy modularity and Louvain heuristics.
- The K4 example of Fig. 64: LP-C is fractional at -1.55, the odd-wheel cut makes it integral.
- Critical edges of karate: edges whose removal changes the optimal partition, one stability
  range per edge.
- Fig. 69 at reduced size: integrality of LP-C / LP-CO and the Rand index against the latent classes.
- A solution path of a correlation-clustering instance along d = 1 (a common bias on all pairs),
  from many clusters to one, with each solution's stability interval.

    python examples/multicut_stability.py [--quick] [--out examples/out/multicut.md]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import networkx as nx
import torch

from structtorch import lp

PAPER = {"karate": (0.4198, 0.4198, 0.4198, 0.2, 0.2), "lesmis": (0.5491, 0.5609, 0.5600, 6.9, 11.7)}


def table10(graphs: dict) -> list[str]:
    lines = ["| data | greedy Q (s) | Louvain Q (s) | LP-C Q | LP-C s | LP-CO Q | LP-CO s | thesis LP-C / LP-CO s |",
             "|---|---|---|---|---|---|---|---|"]
    for name, G in graphs.items():
        cells = []
        for heuristic in (lambda g: nx.community.greedy_modularity_communities(g, weight=None),
                          lambda g: nx.community.louvain_communities(g, weight=None, seed=0)):
            t0 = time.perf_counter()
            q = nx.community.modularity(G, heuristic(G), weight=None)  # unweighted, as the thesis
            cells.append(f"{q:.4f} ({time.perf_counter() - t0:.2f})")
        edges, w = lp.modularity_weights(G)
        for relaxation in lp.RELAXATIONS:
            res = lp.multicut(edges, w, relaxation=relaxation)
            q = f"{-2 * res.objective:.4f}"
            cells += [q if res.integral else f"({q})", f"{res.time:.2f}"]
        paper = PAPER.get(name)
        cells.append(f"{paper[3]} / {paper[4]}" if paper else "-")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("Q in parentheses: fractional LP optimum (an upper bound on the modularity).")
    return lines


def k4_example() -> list[str]:
    edges = torch.tensor([[0, 1], [1, 2], [1, 3], [0, 2], [0, 3], [2, 3]])
    w = torch.tensor([0.2, 0.8, 0.9, -0.7, -0.9, -0.9], dtype=torch.float64)
    out = []
    for relaxation in lp.RELAXATIONS:
        res = lp.multicut(edges, w, relaxation=relaxation)
        out.append(f"- K4, {relaxation}: objective {res.objective:.2f}, integral {res.integral}, "
                   f"z = {[round(v, 2) for v in res.z.tolist()]}")
    return out


def correlation_instance(V: int = 12, seed: int = 0):
    """Three latent groups; similarity 0.7 within, 0.3 across, plus noise."""
    g = torch.Generator().manual_seed(seed)
    group = torch.arange(V) % 3
    sim = torch.where(group[:, None] == group[None, :], 0.7, 0.3) + 0.2 * torch.randn(V, V, generator=g)
    return lp.correlation_weights(((sim + sim.T) / 2).double())


def rand_index(a: torch.Tensor, b: torch.Tensor) -> float:
    """Fraction of node pairs on which two partitions agree (together / apart)."""
    i, j = torch.triu_indices(len(a), len(a), offset=1)
    return float(((a[i] == a[j]) == (b[i] == b[j])).double().mean())


def latent_instance(V: int, density: float, noise: float, g: torch.Generator):
    """Digest §2.9b: 3 latent classes; a ``density`` share of all pairs are edges; with
    probability ``noise`` an edge weight is U[-1, 1], else U[0, 1] within and U[-1, 0] across."""
    latent = torch.randint(0, 3, (V,), generator=g)
    pairs = lp.all_pairs(V)
    edges = pairs[torch.randperm(len(pairs), generator=g)[: max(1, round(density * len(pairs)))]]
    edges = edges[torch.argsort(edges[:, 0] * V + edges[:, 1])]
    same = latent[edges[:, 0]] == latent[edges[:, 1]]
    u = torch.rand(len(edges), generator=g, dtype=torch.float64)
    w = torch.where(same, u, -u)
    noisy = torch.rand(len(edges), generator=g) < noise
    return latent, edges, torch.where(noisy, 2 * torch.rand(len(edges), generator=g, dtype=torch.float64) - 1, w)


def fig69(V: int, densities, noises, graphs: int) -> list[str]:
    """Integrality and Rand index of LP-C and LP-CO on the latent-class instances (reduced Fig. 69)."""
    lines = ["| density | noise | LP-C integral | LP-CO integral | LP-CO Rand index | LP-CO s |",
             "|---|---|---|---|---|---|"]
    for density in densities:
        for noise in noises:
            g = torch.Generator().manual_seed(int(1000 * density + 10 * noise))
            counts, rand, seconds = {r: 0 for r in lp.RELAXATIONS}, [], []
            for _ in range(graphs):
                latent, edges, w = latent_instance(V, density, noise, g)
                for relaxation in lp.RELAXATIONS:
                    res = lp.multicut(edges, w, relaxation=relaxation, num_nodes=V)
                    counts[relaxation] += res.integral
                    if relaxation == "cycle+oddwheel":
                        seconds.append(res.time)
                        if res.integral:
                            rand.append(rand_index(res.clusters, latent))
            mean_rand = f"{sum(rand) / len(rand):.3f}" if rand else "-"
            lines.append(f"| {density} | {noise} | {counts['cycle']}/{graphs} | {counts['cycle+oddwheel']}/{graphs} | "
                         f"{mean_rand} | {sum(seconds) / len(seconds):.2f} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="karate only, no critical edges (tests)")
    parser.add_argument("--out", type=Path, default=Path("examples/out/multicut.md"))
    args = parser.parse_args()
    t0 = time.time()
    graphs = {"karate": nx.karate_club_graph()}
    if not args.quick:
        graphs["lesmis"] = nx.les_miserables_graph()
    lines = ["# Modularity clustering (Table 10)", "", *table10(graphs), "", "# Fig. 64", "", *k4_example()]
    if not args.quick:
        t1 = time.perf_counter()
        critical = lp.critical_edges(graphs["karate"])
        lines += ["", "# Critical edges of karate", "",
                  f"{len(critical)} of {graphs['karate'].number_of_edges()} edges change the optimal partition when "
                  f"removed ({time.perf_counter() - t1:.1f} s): {critical}"]
    if not args.quick:
        lines += ["", "# Fig. 69, reduced: 40 nodes, 3 latent classes, 3 graphs per cell", "",
                  *fig69(40, (0.2, 0.5, 1.0), (0.0, 0.2, 0.4), 3)]
    edges, w = correlation_instance()
    ones = torch.ones(len(edges), dtype=torch.float64)
    path = lp.solution_path(lp.multicut(edges, w - 0.5), ones, -1.0, 1.0)
    lines += ["", "# Solution path, correlation clustering (12 nodes, w - 0.5 + theta)", "",
              "| theta interval | clusters | objective at its start |", "|---|---|---|"]
    for (lo, hi), sol in path:
        lines.append(f"| [{lo:.3f}, {hi:.3f}] | {int(sol.clusters.max()) + 1} | {sol.objective:.3f} |")
    text = "\n".join(lines)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n")
    print(text)
    print(f"\nwrote {args.out} in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
