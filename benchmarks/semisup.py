"""Timings of structtorch.semisup: kNN graphs, the graph-regularized kernel (dense against conjugate
gradients) and training a kernel chain model (medians of repeats).

    python benchmarks/semisup.py [--repeats 3] [--quick] [--device cuda]
    python benchmarks/semisup.py --busy    # knn_graph under load: default threads against one
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from collections.abc import Callable

import torch
from busy import busy_table

import structtorch as st
from structtorch.data import SequenceData, pitch_accent_like
from structtorch.semisup import GraphRegularizedKernel, KernelChainPotentials, knn_graph, rbf_kernel


def median_time(fn: Callable[[], object], repeats: int, device: torch.device) -> float:
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def knn(repeats: int, quick: bool, device: torch.device) -> None:
    """Our exact kNN graph beside scikit-learn's brute-force ``kneighbors_graph`` (all cores)."""
    try:
        from sklearn.neighbors import kneighbors_graph
    except ImportError:  # scikit-learn is an extra
        kneighbors_graph = None
    print("\n## knn_graph (k = 5, heat weights, union), float32, against sklearn kneighbors_graph\n")
    print("| n | D | knn_graph | sklearn | sklearn / ours |")
    print("|---|---|---|---|---|")
    sizes = [(10_000, 64), (20_000, 64)] + ([] if quick else [(50_000, 64), (100_000, 64)])
    for n, D in sizes:
        x = torch.randn(n, D, device=device)
        t = median_time(lambda x=x: knn_graph(x, 5), repeats, device)
        ref = "- | -"
        if kneighbors_graph is not None:
            xn = x.cpu().numpy()
            ts = median_time(lambda xn=xn: kneighbors_graph(xn, 5, mode="distance", n_jobs=-1), repeats,
                             torch.device("cpu"))
            ref = f"{ts:.2f} s | {ts / t:.1f}x"
        print(f"| {n:,} | {D} | {t:.2f} s | {ref} |")
    if not quick:  # the hard case for the distance tiles: two tight clusters far apart (re-searched)
        n, D = 100_000, 64
        label = torch.randint(0, 2, (n, 1), device=device).float()
        x = torch.randn(n, D, device=device) * 1e-2 + label * 2e4
        t = median_time(lambda x=x: knn_graph(x, 5), repeats, device)
        print(f"| {n:,}, two clusters 2e4 apart, sd 1e-2 | {D} | {t:.2f} s | - | - |")


def kernels(repeats: int, quick: bool, device: torch.device) -> None:
    print("\n## GraphRegularizedKernel: construction + k~ against 500 labeled points, float64\n")
    print("| n | dense | cg | cg / dense |")
    print("|---|---|---|---|")
    for n in [500, 1000, 2000] + ([] if quick else [4000, 6000]):
        x = torch.randn(n, 31, dtype=torch.float64, device=device)
        W = knn_graph(x, 5)
        k = functools.partial(rbf_kernel, gamma=1.0 / 31)
        b = x[:500]

        def run(method: str, x=x, W=W, k=k, b=b) -> None:
            GraphRegularizedKernel(k, x, W, 0.05, 0.45, method=method).against(b)

        td = median_time(lambda: run("dense"), repeats, device)
        tc = median_time(lambda: run("cg"), repeats, device)
        print(f"| {n:,} | {td:.2f} s | {tc:.2f} s | {tc / td:.2f} |")


def training(repeats: int, device: torch.device) -> None:
    print("\n## KernelChainPotentials + BCFW (40 labeled sequences, U = 200, 100 passes), float64\n")
    data = pitch_accent_like(240, seed=1)
    x = data.x.double().to(device)
    inside = torch.arange(x.shape[1], device=device) < data.lengths.to(device)[:, None]
    tokens = x[inside]
    n_l = int(data.lengths[:40].sum())
    t_graph = median_time(lambda: knn_graph(tokens, 5), repeats, device)
    W = knn_graph(tokens, 5)
    scale = float(torch.cdist(tokens[:500], tokens[:500]).pow(2).mean())
    k = functools.partial(rbf_kernel, gamma=1.0 / scale)

    def build() -> KernelChainPotentials:
        kernel = GraphRegularizedKernel(k, tokens, W, 0.05, 0.45)
        return KernelChainPotentials(kernel, tokens[:n_l], 2, inputs="rows")

    t_kernel = median_time(build, repeats, device)
    model = build()
    T = int(data.lengths[:40].max())
    rows = SequenceData(model.kernel_rows(x[:40, :T]).detach(), data.labels[:40, :T].to(device),
                        data.lengths[:40])

    def fit() -> None:  # from zero weights each time (BCFW stops at its gap tolerance)
        with torch.no_grad():
            for p in model.parameters():
                p.zero_()
        st.train.fit(model, rows, None, solver="bcfw", epochs=100, l2=2 / 40, progress=False, metrics=())

    t_fit = median_time(fit, repeats, device)
    print("| tokens (labeled + unlabeled) | knn_graph | kernel + model | BCFW fit |")
    print("|---|---|---|---|")
    print(f"| {len(tokens):,} ({n_l} + {len(tokens) - n_l}) | {t_graph:.2f} s | {t_kernel:.2f} s | "
          f"{t_fit:.2f} s |")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--device", default="cpu")
    p.add_argument("--busy", action="store_true", help="time knn_graph beside a competing busy process")
    args = p.parse_args(argv)
    device = torch.device(args.device)
    if args.busy:
        x = torch.randn(20_000, 64)
        busy_table({"knn_graph 20,000 x 64": lambda: knn_graph(x, 5)}, 0.0, min_runs=args.repeats)
        return
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {device}, "
          f"medians of {args.repeats}")
    knn(args.repeats, args.quick, device)
    kernels(args.repeats, args.quick, device)
    training(args.repeats, device)


if __name__ == "__main__":
    main()
