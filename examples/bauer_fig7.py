"""Reproduce Fig. 7 of Bauer et al. (2014): accuracy against the number of training examples.

Synthetic gene-finding data (section IV.A), the HM-SVM linear model on histogram features
(10 bins), trained by subgradient descent on the structured hinge loss with slack and with margin
rescaling (Hamming loss), C chosen on a validation set from a grid. The paper used 3000 examples
and 10 repetitions; the defaults here are smaller so that it runs on a laptop CPU in minutes.

    python examples/bauer_fig7.py [--sizes 25 50 100 200] [--sigmas 1 2 5 7 10 12] [--epochs 12]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

import structtorch as st
from structtorch.data import bauer_features, bauer_synthetic


def run(n, sigma, rescaling, C, epochs, seed, binning_bins=10):
    train = bauer_synthetic(n, sigma, seed=seed)
    val = bauer_synthetic(100, sigma, seed=seed + 1000)
    test = bauer_synthetic(300, sigma, seed=seed + 2000)
    binning = st.HistogramBinning(train.x.shape[2], binning_bins).fit(train.x)
    feats = [d.map_x(lambda x: bauer_features(x, binning)) for d in (train, val, test)]
    torch.manual_seed(seed)
    model = st.LinearChainPotentials(feats[0].x.shape[2], 4)
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs)
    loss = st.StructuredHingeLoss(rescaling=rescaling)
    st.train.fit(model, feats[0], loss, optimizer=opt, epochs=epochs, C=C, progress=False,
                 batch_size=16, seed=seed, scheduler=schedule)
    return st.train.evaluate(model, feats[1])["accuracy"], st.train.evaluate(model, feats[2])["accuracy"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[25, 50, 100, 200, 400])
    p.add_argument("--sigmas", type=float, nargs="+", default=[1, 2, 5, 7, 10, 12])
    p.add_argument("--grid", type=float, nargs="+", default=[0.1, 1.0, 10.0], help="values of C")
    p.add_argument("--epochs", type=int, default=15)
    p.add_argument("--repeats", type=int, default=3, help="data sets per point (the paper: 10)")
    p.add_argument("--out", type=Path, default=Path("examples/out/bauer_fig7"))
    args = p.parse_args()
    began = time.perf_counter()
    results = {}  # (rescaling, sigma, n) -> test accuracy at the C best on validation
    for rescaling in ("slack", "margin"):
        for sigma in args.sigmas:
            for n in args.sizes:
                tests = []
                for rep in range(args.repeats):
                    seed = 10_000 * rep + n
                    runs = [(run(n, sigma, rescaling, C, args.epochs, seed), C) for C in args.grid]
                    (val_acc, test_acc), C = max(runs, key=lambda r: r[0][0])
                    tests.append(test_acc)
                results[rescaling, sigma, n] = sum(tests) / len(tests)
                print(f"{rescaling:6s} sigma={sigma:4.1f} n={n:4d}: test accuracy "
                      f"{results[rescaling, sigma, n]:.3f} (mean of {args.repeats})", flush=True)
    lines = [f"Test accuracy per position (300 test sequences, T = 100), C from {args.grid} on 100 "
             f"validation sequences, {args.epochs} epochs of Adam (cosine-annealed learning rate), mean of {args.repeats} data sets.", ""]
    header = "| rescaling | sigma | " + " | ".join(f"n={n}" for n in args.sizes) + " |"
    lines += [header, "|" + "---|" * (2 + len(args.sizes))]
    for rescaling in ("slack", "margin"):
        for sigma in args.sigmas:
            row = " | ".join(f"{results[rescaling, sigma, n]:.3f}" for n in args.sizes)
            lines.append(f"| {rescaling} | {sigma:g} | {row} |")
    table = "\n".join(lines)
    print(table)
    print(f"total time {time.perf_counter() - began:.0f} s")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".md").write_text(table + "\n")
    plot(results, args, args.out.with_suffix(".png"))
    print(f"table and plot saved to {args.out}.md / .png")


def plot(results, args, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, rescaling in zip(axes, ("slack", "margin"), strict=True):
        for sigma in args.sigmas:
            ax.plot(args.sizes, [results[rescaling, sigma, n] for n in args.sizes], "o-", label=f"σ={sigma:g}")
        ax.set(xscale="log", xlabel="number of training examples", title=f"{rescaling} rescaling")
        ax.set_xticks(args.sizes, [str(n) for n in args.sizes])
        ax.minorticks_off()
    axes[0].set_ylabel("test accuracy per position")
    axes[1].legend(fontsize=8)
    fig.suptitle("Bauer et al. (2014) Fig. 7, reproduced with structtorch")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
