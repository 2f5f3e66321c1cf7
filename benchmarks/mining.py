"""Timings of structtorch.mining: the miners, LPBoost and the feature maps (medians of repeats).

- ``frequent_patterns`` / ``best_patterns`` on 600 sequences of 12 itemsets over 768 words, all
  patterns of size <= 3 with support >= 5% (the issue's target: under 10 s on one core);
- ``LPBoost`` on the KTH-like clips (``data.action_sequences``): one binary problem and the
  6-class one-vs-one model, rounds and patterns;
- ``SubstructureFeatures``: ``transform``, ``transform_windows`` and ``transform_neighbourhoods``.

    python benchmarks/mining.py [--repeats 3] [--quick]
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
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


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="smaller cases (a smoke run)")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, 1 thread, medians of {args.repeats}")
    miners(args.repeats, args.quick)
    boosting(args.repeats, args.quick)
    features(args.repeats, args.quick)


if __name__ == "__main__":
    main()
