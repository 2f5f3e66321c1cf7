"""Timings of structtorch.mining: the miners, LPBoost and the feature maps (medians of repeats).

- ``frequent_patterns`` / ``best_patterns`` on 600 sequences of 12 itemsets over 768 words, all
  patterns of size <= 3 with support >= 5% (the issue's target: under 10 s on one core);
- ``LPBoost`` on the KTH-like clips (``data.action_sequences``): one binary problem and the
  6-class one-vs-one model, rounds and patterns;
- ``SubstructureFeatures``: ``transform``, ``transform_windows`` and ``transform_neighbourhoods``;
- against pure-Python peers, pattern sets asserted equal: ``frequent_patterns`` on sequences of single
  items against the ``prefixspan`` package (PrefixSpan's setting: 500-2000 sequences of length 5-20,
  alphabets of 20-100 items, support 1-5%), and the graph miner against ``gspan-mining`` (random
  sparse labeled graphs, minimum DFS codes and supports compared). Both are in the ``bench`` extra;
  a missing one is reported and skipped. Each repeat times our miner and the peer back to back.

    python benchmarks/mining.py [--repeats 3] [--quick] [--peers]
"""

from __future__ import annotations

import argparse
import functools
import gc
import statistics
import sys
import time
import types
from collections.abc import Callable

import numpy as np
import torch

from structtorch.data import action_sequences
from structtorch.mining import LPBoost, SubstructureFeatures, best_patterns, frequent_patterns
from structtorch.mining import graphs as G


def median_time(fn: Callable[[], object], repeats: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def random_sequences(n: int, length: int, vocab: int, per_set: int, zipf: bool, seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, vocab + 1) if zipf else np.ones(vocab)
    p /= p.sum()
    return [tuple(frozenset(rng.choice(vocab, size=max(1, rng.poisson(per_set)), p=p).tolist())
                  for _ in range(length)) for _ in range(n)]


def miners(repeats: int, quick: bool) -> None:
    print("\n## Miners: 600 sequences x 12 itemsets, 768 words, size <= 3, support >= 5%\n")
    print("| data | patterns | frequent_patterns | best_patterns top 10 |")
    print("|---|---|---|---|")
    cases = [("uniform, ~8 words per itemset", False, 8), ("Zipf, ~8 words per itemset", True, 8)]
    if not quick:
        cases.append(("uniform, ~20 words per itemset", False, 20))
    for name, zipf, k in cases:
        data = random_sequences(600, 12, 768, k, zipf)
        y = np.where(np.arange(600) % 2 == 0, 1.0, -1.0)
        t_f, pats = median_time(lambda d=data: frequent_patterns(d, 0.05, max_size=3), repeats)
        w = np.full(600, 1 / 600)
        t_b, _ = median_time(lambda d=data, y=y, w=w: best_patterns(d, y, w, top_k=10, max_size=3,
                                                                    min_support=0.05), repeats)
        print(f"| {name} | {len(pats):,} | {t_f:.2f} s | {t_b:.2f} s |")


def boosting(repeats: int, quick: bool) -> None:
    print("\n## LPBoost on data.action_sequences (599 clips, B = 12, max_size 3, min_support 2, "
          "columns 10)\n")
    print("| setting | problem | instances | fit | rounds | patterns | train acc |")
    print("|---|---|---|---|---|---|---|")
    miner = functools.partial(best_patterns, max_size=3, min_support=2)
    for setting in ("order",) if quick else ("order", "identity"):
        data = action_sequences(setting=setting, B=12, signal=0.3)
        y, tr = data.labels.numpy(), data.train.numpy()
        X = [data.sequences[i] for i in tr]
        pair = np.flatnonzero(np.isin(y[tr], (3, 5)))  # jogging vs walking
        Xp, yp = [X[i] for i in pair], np.where(y[tr][pair] == 5, 1, -1)
        t, m = median_time(lambda Xp=Xp, yp=yp: LPBoost(miner, nu=0.05, columns=10).fit(Xp, yp), repeats)
        print(f"| {setting} | jog vs walk | {len(Xp)} | {t:.2f} s | {m.n_iter_} | {len(m.patterns_)} | "
              f"{m.score(Xp, yp):.3f} |")
        t, m = median_time(lambda X=X, yy=y[tr]: LPBoost(miner, nu=0.05, columns=10).fit(X, yy),
                           max(1, repeats // 2))
        print(f"| {setting} | 6 classes, 15 pairs | {len(X)} | {t:.2f} s | max {m.n_iter_} | "
              f"{sum(len(p) for p in m.patterns_)} | {m.score(X, y[tr]):.3f} |")


def features(repeats: int, quick: bool) -> None:
    print("\n## SubstructureFeatures\n")
    print("| call | input | patterns | output | time |")
    print("|---|---|---|---|---|")
    data = action_sequences(setting="order", B=12, signal=0.3)
    pats = [t for t, _ in frequent_patterns(data.sequences, 0.05, max_size=3)][:2000]
    feats = SubstructureFeatures(pats)
    t, out = median_time(lambda: feats.transform(data.sequences), repeats)
    print(f"| transform | 599 clips x 12 itemsets | {len(feats)} | {tuple(out.shape)} | {t:.2f} s |")
    count = 16 if quick else 64
    streams = [sum((data.sequences[i] for i in range(k, k + 6)), ()) for k in range(0, 6 * count, 6)]
    t, out = median_time(lambda: feats.transform_windows(streams, 5), repeats)
    print(f"| transform_windows, width 5 | {len(streams)} streams x 72 itemsets | {len(feats)} | "
          f"{tuple(out.shape)} | {t:.2f} s |")
    rng = np.random.default_rng(0)
    V = 300 if quick else 1000
    edges = np.array([(u, v) for u in range(V) for v in rng.choice(V, 2) if u < v])
    edges = np.unique(edges, axis=0)
    graph = (rng.integers(0, 4, V), edges, rng.integers(0, 2, len(edges)))
    gp = [c for c, _ in G.frequent_patterns([graph], 1, max_size=3)]
    gfeats = SubstructureFeatures(gp)
    for radius in (1, 2):
        t, out = median_time(lambda r=radius: gfeats.transform_neighbourhoods(graph, r), repeats)
        print(f"| transform_neighbourhoods, radius {radius} | {V} nodes, {len(edges)} edges | {len(gp)} | "
              f"{tuple(out.shape)} | {t:.2f} s |")


def median_times(fns: list[Callable[[], object]], repeats: int) -> list[float]:
    """Median time of each function, the functions run back to back in every repeat (shared noise),
    each after a full garbage collection (the same collector state for both)."""
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for fn, ts in zip(fns, times, strict=True):
            gc.collect()
            t = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t)
    return [statistics.median(ts) for ts in times]


def item_sequences(n: int, length: tuple[int, int], vocab: int, zipf: bool, seed: int = 0) -> list[list[int]]:
    """``n`` sequences of single items, lengths uniform in ``length``, items uniform or Zipf(1)."""
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, vocab + 1) if zipf else np.ones(vocab)
    p /= p.sum()
    sizes = rng.integers(length[0], length[1] + 1, size=n)
    return [rng.choice(vocab, size=int(k), p=p).tolist() for k in sizes]


def versus_prefixspan(repeats: int, quick: bool) -> None:
    print("\n## Sequences of single items: frequent_patterns vs the prefixspan package\n")
    try:
        from prefixspan import PrefixSpan
    except ImportError:
        print("skipped: prefixspan is not installed (pip install prefixspan)")
        return
    print("| sequences | length | items | min support | patterns | ours | prefixspan | ratio |")
    print("|---|---|---|---|---|---|---|---|")
    cases = [(500, 20, False, 0.05), (1000, 50, False, 0.02)]
    if not quick:
        cases += [(2000, 100, False, 0.01), (2000, 20, False, 0.05), (1000, 100, True, 0.01),
                  (500, 20, False, 0.01)]
    for n, vocab, zipf, frac in cases:
        db = item_sequences(n, (5, 20), vocab, zipf)
        data = [tuple(frozenset((i,)) for i in s) for s in db]
        sigma = int(np.ceil(frac * n - 1e-9))
        found, peer_found = frequent_patterns(data, sigma), PrefixSpan(db).frequent(sigma)
        ours = {tuple(i for (i,) in t): c for t, c in found}  # (i,) = e: one item an element
        peer = {tuple(t): c for c, t in peer_found}
        assert len(ours) == len(found) and len(peer) == len(peer_found), "a pattern found twice"
        assert ours == peer, "frequent_patterns and prefixspan disagree"
        t_ours, t_peer = median_times([lambda d=data, s=sigma: frequent_patterns(d, s),
                                       lambda d=db, s=sigma: PrefixSpan(d).frequent(s)], repeats)
        items = f"{vocab}, Zipf" if zipf else f"{vocab}"
        print(f"| {n} | 5-20 | {items} | {frac:.0%} ({sigma}) | {len(ours):,} | {1e3 * t_ours:.1f} ms | "
              f"{1e3 * t_peer:.1f} ms | {t_peer / t_ours:.1f}x |")


def _gspan_class() -> type | None:
    """gspan-mining's ``gSpan`` with its report replaced by a list of (code, support), or None.

    The package prints every pattern and appends it to a pandas frame (``DataFrame.append``, gone in
    pandas 2); the subclass records the code instead, and reads the graphs from memory rather than from
    its text format. pandas is imported by the package only for that frame: a stand-in module is
    registered for the import when pandas is absent.
    """
    shim = "pandas" not in sys.modules
    if shim:
        try:
            import pandas  # noqa: F401
            shim = False
        except ImportError:
            stand_in = types.ModuleType("pandas")
            stand_in.DataFrame = lambda *args, **kwargs: None
            sys.modules["pandas"] = stand_in
    try:
        from gspan_mining.graph import AUTO_EDGE_ID, Graph
        from gspan_mining.gspan import gSpan
    except ImportError:
        return None
    finally:
        if shim:
            sys.modules.pop("pandas", None)

    class Peer(gSpan):
        def __init__(self, graphs: list, min_support: int) -> None:
            super().__init__("", min_support=min_support)
            self.input, self.found = graphs, []

        def _read_graphs(self) -> None:
            self.graphs = {}
            for gid, (labels, edges, edge_labels) in enumerate(self.input):
                g = Graph(gid, is_undirected=True, eid_auto_increment=True)
                for v, label in enumerate(labels):
                    g.add_vertex(v, label)
                for (u, v), label in zip(edges, edge_labels, strict=True):
                    g.add_edge(AUTO_EDGE_ID, u, v, label)
                self.graphs[gid] = g

        def _report_size1(self, g: object, support: int) -> None:
            pass  # single vertices: not patterns of ours (they have no edge)

        def _report(self, projected: object) -> None:
            self.found.append((tuple((e.frm, e.to, e.vevlb) for e in self._DFScode), self._support))

    return Peer


def peer_code(code: tuple) -> tuple:
    """Our minimum DFS code of a pattern found by gspan-mining (its tuples ``(i, j, (l_i, l_e, l_j))``
    leave a label -1 where the vertex is already labeled)."""
    labels: dict[int, int] = {}
    for i, j, (li, _, lj) in code:
        if li != -1:
            labels[i] = li
        if lj != -1:
            labels[j] = lj
    edges = [(i, j) for i, j, _ in code]
    return G.dfs_code(([labels[v] for v in range(len(labels))], edges, [le for _, _, (_, le, _) in code]))


def random_graphs(n: int, nodes: tuple[int, int], node_labels: int, edge_labels: int, cycles: float,
                  seed: int = 0) -> list:
    """Sparse connected labeled graphs: a random tree plus Poisson(``cycles``) extra edges."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        V = int(rng.integers(nodes[0], nodes[1] + 1))
        edges = {(int(rng.integers(0, v)), v) for v in range(1, V)}
        for _ in range(int(rng.poisson(cycles))):
            u, v = sorted(rng.choice(V, 2, replace=False).tolist())
            edges.add((u, v))
        edges = sorted(edges)
        out.append((rng.integers(0, node_labels, V).tolist(), edges,
                    rng.integers(0, edge_labels, len(edges)).tolist()))
    return out


def versus_gspan(repeats: int, quick: bool) -> None:
    print("\n## Graphs: graphs.frequent_patterns vs the gspan-mining package\n")
    Peer = _gspan_class()
    if Peer is None:
        print("skipped: gspan-mining is not installed (pip install gspan-mining)")
        return
    print("| graphs | nodes | labels (node, edge) | extra edges (mean) | min support | patterns | ours | "
          "gspan-mining | ratio |")
    print("|---|---|---|---|---|---|---|---|---|")
    cases = [(100, (10, 20), 4, 2, 2.0, 0.1), (300, (10, 25), 5, 3, 3.0, 0.05)]
    if not quick:
        cases += [(500, (10, 20), 3, 2, 2.0, 0.1), (200, (10, 20), 2, 1, 1.0, 0.2),
                  (200, (15, 30), 6, 3, 4.0, 0.05)]
    for n, nodes, nl, el, cycles, frac in cases:
        graphs = random_graphs(n, nodes, nl, el, cycles)
        sigma = int(np.ceil(frac * n - 1e-9))
        ours = dict(G.frequent_patterns(graphs, sigma))
        peer = Peer(graphs, sigma)
        peer.run()
        theirs = {peer_code(code): c for code, c in peer.found}
        assert len(theirs) == len(peer.found) and ours == theirs, "graph miner and gspan-mining disagree"
        t_ours, t_peer = median_times([lambda g=graphs, s=sigma: G.frequent_patterns(g, s),
                                       lambda g=graphs, s=sigma: Peer(g, s).run()], repeats)
        print(f"| {n} | {nodes[0]}-{nodes[1]} | {nl}, {el} | {cycles:g} | {frac:.0%} ({sigma}) | "
              f"{len(ours):,} | {1e3 * t_ours:.1f} ms | {1e3 * t_peer:.1f} ms | {t_peer / t_ours:.1f}x |")


def versus_peers(repeats: int, quick: bool) -> None:
    versus_prefixspan(repeats, quick)
    versus_gspan(repeats, quick)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="smaller cases (a smoke run)")
    p.add_argument("--peers", action="store_true",
                   help="only the comparisons with prefixspan and gspan-mining")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, 1 thread, medians of {args.repeats}")
    if args.peers:
        versus_peers(args.repeats, args.quick)
        return
    miners(args.repeats, args.quick)
    boosting(args.repeats, args.quick)
    features(args.repeats, args.quick)
    versus_peers(args.repeats, args.quick)


if __name__ == "__main__":
    main()
