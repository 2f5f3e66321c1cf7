"""Structural SVM training: primal objective against passes over the data, subgradient vs BCFW.

Margin-rescaled Hamming hinge, linear HM-SVM potentials (:class:`structtorch.LinearChainPotentials`),
regularizer l2 = 1 / (n C). Subgradient: ``train.fit`` with SGD (batch size 1 by default, learning
rate lr0 / (1 + epoch), the best lr0 of a small grid by final objective); BCFW:
``train.fit(solver="bcfw")`` with line search, with and without weighted averaging. One pass = n
oracle calls (plus, for BCFW, one batched oracle pass for the duality gap, not in the time column).
The subgradient rows' "gap" is primal - (best BCFW dual): an upper bound on their suboptimality.

Data: ``make_tagging_data`` (5 labels, 8 features, lengths 20-60, noise 1.5) and Bauer et al.'s
synthetic data (``bauer_synthetic``, sigma 1, T = 100, histogram features).

    python benchmarks/bcfw.py [--n 100] [--passes 30] [--C 1.0] [--batch-size 1]
"""

from __future__ import annotations

import argparse

import torch

import structtorch as st
from structtorch.data import bauer_features, bauer_synthetic, make_tagging_data

SHOW = (1, 2, 3, 5, 10, 15, 20, 30, 50, 100)


def datasets(n: int) -> dict[str, st.data.SequenceData]:
    bauer = bauer_synthetic(n, 1.0, seed=0)
    binning = st.HistogramBinning(bauer.x.shape[2], 10).fit(bauer.x)
    return {
        "tagging": make_tagging_data(n, seed=1),
        "bauer": bauer.map_x(lambda x: bauer_features(x, binning)),
    }


def run_sgd(data, lam, passes, lr0, batch_size):
    torch.manual_seed(0)
    model = st.LinearChainPotentials(data.x.shape[2], int(data.labels.max()) + 1)
    opt = torch.optim.SGD(model.parameters(), lr=lr0)
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda e: 1.0 / (1.0 + e))
    return st.train.fit(model, data, st.StructuredHingeLoss(), optimizer=opt, scheduler=schedule,
                        epochs=passes, l2=lam, batch_size=batch_size, progress=False)


def run_bcfw(data, lam, passes, averaging):
    model = st.LinearChainPotentials(data.x.shape[2], int(data.labels.max()) + 1)
    return st.train.fit(model, data, None, epochs=passes, l2=lam, solver="bcfw", progress=False,
                        solver_options={"averaging": averaging})


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=100)
    p.add_argument("--passes", type=int, default=30)
    p.add_argument("--C", type=float, default=1.0)
    p.add_argument("--batch-size", type=int, default=1)
    p.add_argument("--lrs", type=float, nargs="+", default=[0.1, 0.01, 0.001])
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    for name, data in datasets(args.n).items():
        lam = 1.0 / (len(data) * args.C)
        runs = {}
        for averaging in (False, True):
            runs[f"BCFW{' avg' if averaging else ''}"] = run_bcfw(data, lam, args.passes, averaging)
        best_dual = max(max(h["dual"]) for h in runs.values())
        sgd = {lr: run_sgd(data, lam, args.passes, lr, args.batch_size) for lr in args.lrs}
        lr = min(sgd, key=lambda k: sgd[k]["objective"][-1])
        runs[f"SGD lr0={lr:g} b={args.batch_size}"] = sgd[lr]
        print(f"\n{name}: n={len(data)}, T<={data.x.shape[1]}, F={data.x.shape[2]}, "
              f"N={int(data.labels.max()) + 1}, C={args.C} (l2={lam:.3g}); best dual {best_dual:.5f}")
        print(f"{'solver':<22} {'passes':>6} {'objective':>10} {'gap':>10} {'time s':>7}")
        for solver, h in runs.items():
            for k in [s for s in SHOW if s <= len(h)]:
                rec = h.epochs[k - 1]
                gap = rec["gap"] if "gap" in rec else rec["objective"] - best_dual
                print(f"{solver:<22} {k:>6} {rec['objective']:>10.5f} {gap:>10.5f} {rec['time']:>7.2f}")
        others = ", ".join(f"lr0={k:g}: {h['objective'][-1]:.4f}" for k, h in sgd.items())
        print(f"(SGD final objectives by lr0: {others})")


if __name__ == "__main__":
    main()
