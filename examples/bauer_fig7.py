"""Reproduce Fig. 7 of Bauer et al. (2014): accuracy against the number of training examples.

Synthetic gene-finding data (section IV.A), the HM-SVM linear model on histogram features
(10 bins), trained on the structured hinge loss with slack and with margin rescaling (Hamming
loss), C chosen on a validation set from a grid. ``--solver cutting_plane`` trains each model to a
certificate as the paper does (n-slack cutting planes, duality gap <= ``--tol``) and also reports
the iterations it took (the paper's Fig. 7b); the default, subgradient descent with Adam, is
faster. The paper used 3000 examples and 10 repetitions; the defaults here are smaller so that it
runs on a laptop CPU in minutes.

    python examples/bauer_fig7.py [--sizes 25 50 100 200] [--sigmas 1 2 5 7 10 12] [--epochs 12]
    python examples/bauer_fig7.py --solver cutting_plane [--variant n_slack] [--tol 0.01]
                                  [--jobs 2] [--cache examples/out/bauer_fig7_runs.jsonl]

``--cache`` keeps every finished training (one JSON line each), so a long protocol can run in
parts: a later call with the same settings reads them back and runs only the missing ones, and
``--report`` makes the tables from the data sets it holds complete, training nothing.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import time
from pathlib import Path

import torch

import structtorch as st
from structtorch.data import bauer_features, bauer_synthetic


def run(n, sigma, rescaling, C, args, seed, binning_bins=10):
    """-> (validation accuracy, test accuracy, iterations, converged, seconds) of one model."""
    began = time.perf_counter()
    train = bauer_synthetic(n, sigma, seed=seed)
    val = bauer_synthetic(100, sigma, seed=seed + 1000)
    test = bauer_synthetic(300, sigma, seed=seed + 2000)
    binning = st.HistogramBinning(train.x.shape[2], binning_bins).fit(train.x)
    feats = [d.map_x(lambda x: bauer_features(x, binning)) for d in (train, val, test)]
    torch.manual_seed(seed)
    model = st.LinearChainPotentials(feats[0].x.shape[2], 4)
    loss = st.StructuredHingeLoss(rescaling=rescaling)
    if args.solver == "cutting_plane":
        history = st.train.fit(model, feats[0], loss, epochs=args.max_iters, C=C, progress=False,
                               objective=False, solver="cutting_plane",
                               solver_options={"variant": args.variant, "tol": args.tol})
        if not history.converged:
            print(f"  (n={n}, sigma={sigma:g}, C={C:g}: gap {history.epochs[-1]['gap']:.3g} after "
                  f"{args.max_iters} iterations)")
    else:
        opt = torch.optim.Adam(model.parameters(), lr=0.05)
        schedule = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.epochs)
        history = st.train.fit(model, feats[0], loss, optimizer=opt, epochs=args.epochs, C=C, progress=False,
                               batch_size=16, seed=seed, scheduler=schedule)
    accuracy = [st.train.evaluate(model, f)["accuracy"] for f in feats[1:]]
    converged = args.solver != "cutting_plane" or history.converged
    return accuracy[0], accuracy[1], len(history.epochs), converged, time.perf_counter() - began


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[25, 50, 100, 200, 400])
    p.add_argument("--sigmas", type=float, nargs="+", default=[1, 2, 5, 7, 10, 12])
    p.add_argument("--grid", type=float, nargs="+", default=[0.1, 1.0, 10.0], help="values of C")
    p.add_argument("--epochs", type=int, default=15, help="subgradient: epochs of Adam")
    p.add_argument("--rescalings", nargs="+", choices=["slack", "margin"], default=["slack", "margin"])
    p.add_argument("--solver", choices=["subgradient", "cutting_plane"], default="subgradient")
    p.add_argument("--variant", choices=["n_slack", "one_slack"], default="n_slack", help="cutting_plane")
    p.add_argument("--tol", type=float, default=0.01, help="cutting_plane: the duality gap to reach")
    p.add_argument("--max-iters", type=int, default=500, help="cutting_plane: iterations at most")
    p.add_argument("--repeats", type=int, default=3, help="data sets per point (the paper: 10)")
    p.add_argument("--out", type=Path, default=Path("examples/out/bauer_fig7"))
    p.add_argument("--jobs", type=int, default=1, help="trainings run in parallel (one thread each)")
    p.add_argument("--cache", type=Path, default=None,
                   help="a JSON-lines file of finished trainings: read first, appended to (resumable runs)")
    p.add_argument("--report", action="store_true",
                   help="train nothing: tables from the data sets --cache holds complete (up to --repeats)")
    args = p.parse_args()
    began = time.perf_counter()
    done = _cached(args) if args.report else _trainings(args)
    results, iterations, sets = {}, {}, {}  # (rescaling, sigma, n) -> test accuracy at the best C, ...
    for rescaling in args.rescalings:
        for sigma in args.sigmas:
            for n in args.sizes:
                cell = (rescaling, sigma, n)
                tests, iters = [], []
                for rep in range(args.repeats):
                    keys = [_key(args, rescaling, sigma, n, rep, C) for C in args.grid]
                    if not all(key in done for key in keys):  # --report: a data set not (fully) run
                        continue
                    runs = [done[key] for key in keys]
                    tests.append(max(runs, key=lambda r: r[0])[1])
                    iters.append(sum(r[2] for r in runs) / len(runs))
                sets[cell] = len(tests)
                results[cell] = sum(tests) / len(tests) if tests else None
                iterations[cell] = sum(iters) / len(iters) if iters else None
                if tests:
                    print(f"{rescaling:6s} sigma={sigma:4.1f} n={n:4d}: test accuracy {results[cell]:.3f}, "
                          f"{iterations[cell]:.0f} iterations (mean of {len(tests)})", flush=True)
    how = (f"{args.epochs} epochs of Adam (cosine-annealed learning rate)" if args.solver == "subgradient" else
           f"{args.variant} cutting planes to a duality gap <= {args.tol:g}")
    lines = [f"Test accuracy per position (300 test sequences, T = 100), C from {args.grid} on 100 "
             f"validation sequences, {how}, mean of {_counted(sets)} data sets.", ""]
    lines += _table(results, args, "{:.3f}")
    if args.solver == "cutting_plane":
        lines += ["", "Iterations to the gap (Fig. 7b), mean over the C grid and the data sets.", ""]
        lines += _table(iterations, args, "{:.0f}")
    if len(set(sets.values())) > 1:
        lines += ["", "Data sets per point.", ""] + _table(sets, args, "{}")
    table = "\n".join(lines)
    print(table)
    print(f"total time {time.perf_counter() - began:.0f} s")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".md").write_text(table + "\n")
    plot(results, args, args.out.with_suffix(".png"), iterations if args.solver == "cutting_plane" else None)
    print(f"table and plot saved to {args.out}.md / .png")


def _key(args: argparse.Namespace, rescaling: str, sigma: float, n: int, rep: int, C: float) -> str:
    """The name of one training (its settings, data set and C) in the cache."""
    how = (f"cutting_plane/{args.variant}/tol={args.tol:g}/cap={args.max_iters}" if args.solver == "cutting_plane"
           else f"subgradient/epochs={args.epochs}")
    return f"{how}/{rescaling}/sigma={sigma:g}/n={n}/rep={rep}/C={C:g}"


def _train(task: tuple) -> tuple[str, tuple]:
    key, (n, sigma, rescaling, C, seed), args = task
    torch.set_num_threads(1 if args.jobs > 1 else torch.get_num_threads())
    return key, run(n, sigma, rescaling, C, args, seed)


def _trainings(args: argparse.Namespace) -> dict[str, tuple]:
    """Every training of the protocol, key -> (validation accuracy, test accuracy, iterations): read
    from ``--cache`` where it has them, the others run (on ``--jobs`` processes) and appended to it."""
    tasks = {_key(args, r, sigma, n, rep, C): (n, sigma, r, C, 10_000 * rep + n)
             for r in args.rescalings for sigma in args.sigmas for n in args.sizes
             for rep in range(args.repeats) for C in args.grid}
    cached = _cached(args) if args.cache is not None and args.cache.exists() else {}
    done = {key: result for key, result in cached.items() if key in tasks}
    todo = [(key, task, args) for key, task in tasks.items() if key not in done]
    print(f"{len(tasks)} trainings: {len(done)} from the cache, {len(todo)} to run", flush=True)
    pool = multiprocessing.get_context("fork").Pool(args.jobs) if args.jobs > 1 and len(todo) > 1 else None
    try:
        for key, result in (pool.imap_unordered(_train, todo) if pool else map(_train, todo)):
            done[key] = result
            if args.cache is not None:
                args.cache.parent.mkdir(parents=True, exist_ok=True)
                with args.cache.open("a") as f:
                    f.write(json.dumps({"key": key, "result": list(result)}) + "\n")
    finally:
        if pool is not None:
            pool.close()
    return done


def _cached(args: argparse.Namespace) -> dict[str, tuple]:
    """Every training ``--cache`` holds, key -> result (read by every run; ``--report`` trains nothing)."""
    if args.cache is None or not args.cache.exists():
        raise SystemExit("--report reads the trainings from --cache: give an existing file")
    records = (json.loads(line) for line in args.cache.read_text().splitlines() if line.strip())
    return {record["key"]: tuple(record["result"]) for record in records}


def _counted(sets: dict) -> str:
    """"3" where every point has 3 data sets, else "1-3"."""
    low, high = min(sets.values()), max(sets.values())
    return f"{low}" if low == high else f"{low}-{high}"


def _table(values: dict, args: argparse.Namespace, fmt: str) -> list[str]:
    """A markdown table of ``values[rescaling, sigma, n]`` (None: "-", a point not run)."""
    header = "| rescaling | sigma | " + " | ".join(f"n={n}" for n in args.sizes) + " |"
    lines = [header, "|" + "---|" * (2 + len(args.sizes))]
    for rescaling in args.rescalings:
        for sigma in args.sigmas:
            row = " | ".join("-" if values[rescaling, sigma, n] is None else fmt.format(values[rescaling, sigma, n])
                             for n in args.sizes)
            lines.append(f"| {rescaling} | {sigma:g} | {row} |")
    return lines


def plot(results, args, path: Path, iterations: dict | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(results, "test accuracy per position")] + ([(iterations, "cutting-plane iterations")]
                                                          if iterations else [])
    columns = len(args.rescalings)
    fig, axes = plt.subplots(len(panels), columns, figsize=(5.5 * columns, 4 * len(panels)), sharey="row",
                             squeeze=False)
    for row, (values, ylabel) in zip(axes, panels, strict=True):
        for ax, rescaling in zip(row, args.rescalings, strict=True):
            for sigma in args.sigmas:
                points = [(n, values[rescaling, sigma, n]) for n in args.sizes
                          if values[rescaling, sigma, n] is not None]
                if points:
                    ax.plot(*zip(*points, strict=True), "o-", label=f"σ={sigma:g}")
            ax.set(xscale="log", xlabel="number of training examples", title=f"{rescaling} rescaling")
            ax.set_xticks(args.sizes, [str(n) for n in args.sizes])
            ax.minorticks_off()
        row[0].set_ylabel(ylabel)
    axes[0, -1].legend(fontsize=8)
    fig.suptitle("Bauer et al. (2014) Fig. 7, reproduced with structtorch")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
