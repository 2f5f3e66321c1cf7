"""Reproduce Fig. 5 of Bauer et al. (2014): the highest objective of loss-augmented inference by Hamming loss.

For a random chain with N = 4 labels and potentials g_t(i, j) drawn uniformly from [-50, 50], a random
true labeling y* and each Hamming loss L = 0..T, it finds M[L] = max over y with H(y, y*) = L of
F(y) - F(y*) (F the path score), then the highest objective values of the paper's (14) with h the
identity: L + M[L] for margin rescaling and L * (1 + M[L]) for slack rescaling, averaged over
``--datasets`` random data sets and drawn as two heat maps (T down, L across, log colour scale).

M[L] comes from :func:`structtorch.loss_augmented` alone: a batch of T + 1 copies of the chain, copy
L0 with h(L0) = 0 and h(L) = -1e9 elsewhere (h must be finite), so that its margin value is M[L0]
(the returned count, which must equal L0, checks it). That is T + 1 Hamming tables of O(T^2 N^2),
O(T^3 N^2) time per data set and about 1.5 GB of memory at T = 600; the defaults (T = 50, 100, ...,
600, 10 data sets) take about a minute on one CPU core. The paper does not give its lengths; the
maxima here grow like about 37 T (margin) and 32 T^2 (slack), which reach its ranges (~1e5 and
~1e8) near T = 2000, the longest length of its Fig. 4. ``--check`` compares M with brute-force
enumeration on tiny chains and exits.

``--potentials g`` (the default) follows the paper: g_1(j) (the unary scores at t = 1) and g_t(i, j)
(the transitions into t = 2..T) uniform on [-50, 50], the other unary scores zero; ``unary+pair``
draws uniform unary scores at every position as well (each position's score is then the sum of two
uniforms, on [-100, 100]).

    python examples/bauer_fig5.py [--lengths 50 100 ... 600] [--datasets 10] [--seed 0] [--potentials g]
    python examples/bauer_fig5.py --check
"""

from __future__ import annotations

import argparse
import itertools
import time
from pathlib import Path

import torch
from torch import Tensor

import structtorch as st

N_LABELS = 4
SPREAD = 50.0  # potentials uniform on [-SPREAD, SPREAD]
EXCLUDED = -1e9  # h(L) for the losses a row does not look at


def draw_chain(T: int, N: int, gen: torch.Generator, potentials: str = "g") -> tuple[Tensor, Tensor, Tensor]:
    """-> unary (1, T, N), transitions (1, T-1, N, N), target (1, T) of one random data set."""
    def uniform(*shape: int) -> Tensor:
        return (torch.rand(*shape, generator=gen, dtype=torch.float64) * 2 - 1) * SPREAD

    unary = uniform(1, T, N)
    if potentials == "g":
        unary[:, 1:] = 0  # only g_1(j) is unary; g_t(i, j) for t >= 2 are the transitions
    transitions = uniform(1, max(T - 1, 0), N, N)
    target = torch.randint(0, N, (1, T), generator=gen)
    return unary, transitions, target


def best_by_loss(unary: Tensor, transitions: Tensor, target: Tensor) -> Tensor:
    """M (T+1,) float64: M[L] = max over y with Hamming(y, target) = L of F(y) - F(target), one chain."""
    T, N = unary.shape[1:]
    rows = torch.arange(T + 1)
    h = torch.full((T + 1, T + 1), EXCLUDED, dtype=torch.float64)
    h[rows, rows] = 0.0
    value, _, count = st.loss_augmented(unary.expand(T + 1, T, N), transitions.expand(T + 1, *transitions.shape[1:]),
                                        target.expand(T + 1, T), h=h, rescaling="margin")
    assert torch.equal(count.long(), rows), f"a row's best labeling has the wrong loss: {count.tolist()}"
    return value.double()


def brute_best_by_loss(unary: Tensor, transitions: Tensor, target: Tensor) -> Tensor:
    """:func:`best_by_loss` by enumerating all N^T labelings (tiny T only)."""
    T, N = unary.shape[1:]
    labelings = torch.tensor(list(itertools.product(range(N), repeat=T)))
    K = labelings.shape[0]
    scores = st.path_score(unary.expand(K, T, N), transitions.expand(K, *transitions.shape[1:]), labelings)
    gap = scores - st.path_score(unary, transitions, target)
    loss = (labelings != target).sum(1)
    return torch.stack([gap[loss == L].max() for L in range(T + 1)]).double()


def objectives(M: Tensor) -> tuple[Tensor, Tensor]:
    """-> (margin, slack) objective values (T+1,): L + M[L] and L * (1 + M[L])."""
    L = torch.arange(M.shape[0], dtype=M.dtype)
    return L + M, L * (1 + M)


def heat(lengths: list[int], datasets: int, seed: int, potentials: str) -> dict[int, tuple[Tensor, Tensor]]:
    """T -> (margin, slack) values (T+1,) averaged over ``datasets`` random chains."""
    gen = torch.Generator().manual_seed(seed)
    results = {}
    for T in lengths:
        margin, slack = torch.zeros(T + 1, dtype=torch.float64), torch.zeros(T + 1, dtype=torch.float64)
        for _ in range(datasets):
            m, s = objectives(best_by_loss(*draw_chain(T, N_LABELS, gen, potentials)))
            margin += m / datasets
            slack += s / datasets
        results[T] = (margin, slack)
    return results


def check(seed: int, potentials: str) -> None:
    """M from :func:`best_by_loss` against brute force on chains with T = 1..6, N = 3."""
    gen = torch.Generator().manual_seed(seed)
    worst = 0.0
    for T, _ in itertools.product(range(1, 7), range(3)):
        chain = draw_chain(T, 3, gen, potentials)
        exact, brute = best_by_loss(*chain), brute_best_by_loss(*chain)
        worst = max(worst, float((exact - brute).abs().max()))
        assert torch.allclose(exact, brute, atol=1e-9), (T, exact, brute)
    print(f"M[L] agrees with brute force on 18 chains, T = 1..6, N = 3 (largest difference {worst:.2e})")


def table(results: dict[int, tuple[Tensor, Tensor]], args: argparse.Namespace, seconds: float) -> list[str]:
    lengths = sorted(results)
    shown = sorted({lengths[round(i * (len(lengths) - 1) / 4)] for i in range(5)})
    lines = [f"Highest objective of (14) with h the identity, N = {N_LABELS}, potentials ({args.potentials}) "
             f"uniform on [-{SPREAD:g}, {SPREAD:g}], mean of {args.datasets} data sets (seed {args.seed}), "
             f"{seconds:.1f} s.", "",
             "| T | margin: max over L | at L | slack: max over L | at L |", "|---|---|---|---|---|"]
    for T in shown:
        margin, slack = results[T]
        lines.append(f"| {T} | {margin.max():.4g} | {int(margin.argmax())} | {slack.max():.4g} | "
                     f"{int(slack.argmax())} |")
    lines.append("")
    for name, k in (("margin", 0), ("slack", 1)):
        values = torch.cat([results[T][k] for T in lengths])
        lines.append(f"- {name} rescaling: values from {values.min():.4g} to {values.max():.4g} "
                     f"(the paper: 0 to ~1e{5 if k == 0 else 8})")
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lengths", type=int, nargs="+", default=list(range(50, 601, 50)))
    p.add_argument("--datasets", type=int, default=10, help="random data sets per length (the paper: 10)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--potentials", choices=["g", "unary+pair"], default="g")
    p.add_argument("--check", action="store_true", help="compare with brute force on tiny chains and exit")
    p.add_argument("--out", type=Path, default=Path("examples/out/bauer_fig5"))
    args = p.parse_args()
    torch.set_num_threads(1)
    if args.check:
        check(args.seed, args.potentials)
        return
    began = time.perf_counter()
    results = heat(sorted(set(args.lengths)), args.datasets, args.seed, args.potentials)
    lines = table(results, args, time.perf_counter() - began)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    plot(results, args.out.with_suffix(".png"))
    print("\n".join(lines))
    print(f"table and plot saved to {args.out}.md / .png")


def plot(results: dict[int, tuple[Tensor, Tensor]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm

    lengths = sorted(results)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    for ax, (k, name) in zip(axes, enumerate(("margin", "slack")), strict=True):
        grid = torch.full((len(lengths), lengths[-1] + 1), float("nan"), dtype=torch.float64)
        for row, T in enumerate(lengths):
            grid[row, :T + 1] = results[T][k]
        cmap = plt.get_cmap("viridis").copy()
        cmap.set_bad("white")  # L > T
        cmap.set_under("black")  # values below 1, zero and negative ones included
        image = ax.imshow(grid.numpy(), aspect="auto", cmap=cmap, interpolation="nearest",
                          norm=LogNorm(vmin=1, vmax=max(float(grid.nan_to_num(1).max()), 10)))
        ax.set_yticks(range(len(lengths)), [str(T) for T in lengths])
        ax.set(xlabel="Hamming loss L", ylabel="sequence length T", title=f"{name} rescaling")
        fig.colorbar(image, ax=ax, extend="min", label="highest objective value (mean)")
    fig.suptitle("Bauer et al. (2014) Fig. 5 with structtorch (black: below 1)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
