"""Reproduce Fig. 4 of Bauer et al. (2014): inference time against the sequence length, N = 4.

Times loss-augmented Viterbi with slack rescaling (the Hamming table, O(T^2 N^2)), plain Viterbi
(O(T N^2)) and brute-force enumeration (O(N^T), small T only) on one sequence. The paper reports
about 60 s at T = 2000 for its Algorithm 1 and under 0.2 s for generalized Viterbi.

    python examples/bauer_fig4.py [--lengths 10 25 50 100 250 500 1000 2000] [--brute-max 8]
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
from pathlib import Path

import torch

import structtorch as st


def median_seconds(fn, repeats: int = 5) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def brute_force_slack(u, A, target):
    """max over all N^T labelings of H(y, y') (1 + s(y') - s(y)), scoring them in one batch."""
    T, N = u.shape[1:]
    labelings = torch.tensor(list(itertools.product(range(N), repeat=T)))
    K = labelings.shape[0]
    scores = st.path_score(u.expand(K, T, N), A, labelings)
    gold = st.path_score(u, A, target)
    hamming = (labelings != target).sum(1)
    return (hamming * (1 + scores - gold)).max()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lengths", type=int, nargs="+", default=[10, 25, 50, 100, 250, 500, 1000, 2000])
    p.add_argument("--brute-max", type=int, default=8, help="largest T for brute force (4^T labelings)")
    p.add_argument("--out", type=Path, default=Path("examples/out/bauer_fig4"))
    args = p.parse_args()
    torch.manual_seed(0)
    N, rows = 4, []
    for T in sorted(set(args.lengths) | set(range(2, args.brute_max + 1, 2))):
        u, A = torch.randn(1, T, N), torch.randn(N, N)
        target = torch.randint(0, N, (1, T))
        lossaug = median_seconds(lambda: st.loss_augmented(u, A, target, rescaling="slack"))  # noqa: B023
        plain = median_seconds(lambda: st.viterbi(u, A))  # noqa: B023
        brute = None
        if T <= args.brute_max:
            brute = median_seconds(lambda: brute_force_slack(u, A, target), repeats=1)  # noqa: B023
            exact = st.loss_augmented(u, A, target, rescaling="slack")[0]
            assert torch.allclose(exact, brute_force_slack(u, A, target), atol=1e-4)
        rows.append((T, lossaug, plain, brute))
        print(f"T={T:5d}  loss-augmented (slack) {lossaug * 1e3:9.3f} ms   viterbi {plain * 1e3:7.3f} ms   "
              f"brute force {'-' if brute is None else f'{brute * 1e3:.1f} ms'}", flush=True)
    lines = ["| T | loss-augmented Viterbi, slack (ms) | Viterbi (ms) | brute force (ms) |", "|---|---|---|---|"]
    lines += [f"| {T} | {la * 1e3:.3f} | {v * 1e3:.3f} | {'-' if b is None else f'{b * 1e3:.1f}'} |"
              for T, la, v, b in rows]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    plot(rows, args.out.with_suffix(".png"))
    print("\n".join(lines))
    print(f"table and plot saved to {args.out}.md / .png")


def plot(rows, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    T = [r[0] for r in rows]
    ax.plot(T, [r[1] for r in rows], "o-", label="loss-augmented Viterbi (slack)")
    ax.plot(T, [r[2] for r in rows], "s-", label="Viterbi")
    brute = [(r[0], r[3]) for r in rows if r[3] is not None]
    ax.plot([b[0] for b in brute], [b[1] for b in brute], "^-", label="brute force")
    ax.set(xscale="log", yscale="log", xlabel="sequence length T", ylabel="seconds (median)",
           title="Bauer et al. (2014) Fig. 4 with structtorch, N = 4")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
