"""Semi-supervised structured max-margin learning with graph-regularized kernels (Altun, McAllester &
Belkin 2005, Tables 1 and 2).

A chain structural SVM (margin-rescaled Hamming hinge, ``st.StructuredHingeLoss``) over the kernel
potentials ``f(s, u) = sum_i beta[s, i] k~(x_i, u)`` of the labeled tokens
(``semisup.KernelChainPotentials``), with the graph-regularized kernel
``k~ = (1/lam1) [k - k_x^T (I + M K)^-1 M k_z]``, ``M = (lam2/lam1) L``, built from an RBF base kernel
and the 5-nearest-neighbour heat-kernel graph (``semisup.knn_graph``) over the tokens of the
labeled AND U unlabeled sequences (``semisup.GraphRegularizedKernel``). The paper's lam1 : lam2 =
1 : 9 is taken per token: ``lam2 = 9 lam1 c / n`` over n graph tokens, with c = ``--graph-weight``,
by default chosen for each U among {0, 10, 100, 1e3, 1e4, 1e5} by cross-validation of the SVM (ties
to the smaller; U = 0 keeps the graph over the labeled tokens). "SVM" is the same model without
transitions (per-token multiclass SVM, same kernel), "STR" the chain. The RBF width is chosen by
cross-validation of the SVM without the graph, and c after it; both on the labeled sequences (the
40 of Table 1, reused for 4) and reused for STR, as the paper does for the width. Training solves
eq. 15 by block-coordinate Frank-Wolfe (``st.train.fit(..., solver="bcfw")``). Per-label (token)
accuracy on held-out test sequences and on the in-sample unlabeled sequences, averaged over
random labeled selections.

- Table 1: pitch-accent-like chains (``data.pitch_accent_like``: binary labels, 31-dim features on
  two wrinkled sheets, alternating labels, 30% of the tokens on a random label's sheet), 4 and 40 labeled sequences, U in {0, 80, 200}.
- Table 2: OCR-like words of scikit-learn's 8x8 digits (``data.digit_sequences``, pixel noise 0.1),
  10 labeled words, U in {0, 412}, with informative and with uniform label transitions.
- The transductive kernel of eq. 18 (``semisup.TransductiveKernel``, a weighted mean of k and a
  graph kernel defined in sample only): good on the in-sample unlabeled tokens, not on new ones.
- The regularizer with a neural potential model: an MLP encoder + transitions trained with the
  hinge on the labeled words plus ``semisup.laplacian_penalty`` on the unlabeled tokens.

    python examples/semisupervised.py [--repeats 5] [--passes 100] [--quick]
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from collections.abc import Callable

import torch
from torch import Tensor, nn

import structtorch as st
from structtorch.data import SequenceData, digit_sequences, pitch_accent_like
from structtorch.semisup import (
    GraphRegularizedKernel,
    KernelChainPotentials,
    TransductiveKernel,
    knn_graph,
    laplacian_penalty,
    rbf_kernel,
)

LAM1, RATIO = 0.05, 9.0  # lam2 = RATIO * lam1 * c / n (the paper's 1 : 9, per token)
HINGE = st.StructuredHingeLoss()
# the paper's numbers (per-label accuracy, %): (test, in-sample unlabeled); our reading of the
# extracted layout: Table 1's left side (4 labeled) has the columns U = 0 and 80, its right side
# (40 labeled) U = 0, 80 and 200, each U > 0 cell test above unlabeled, rows SVM then STR
PAPER_PA = {
    (4, 0): {"SVM": (65.92, None), "STR": (65.81, None)},
    (4, 80): {"SVM": (68.83, 69.94), "STR": (70.28, 70.72)},
    (40, 0): {"SVM": (70.34, None), "STR": (72.15, None)},
    (40, 80): {"SVM": (71.27, 73.68), "STR": (76.37, 74.92)},
    (40, 200): {"SVM": (73.11, 72.00), "STR": (75.66, 77.45)},
}
PAPER_OCR = {0: {"SVM": (43.62, None), "STR": (49.25, None)}, 412: {"SVM": (49.96, 47.56), "STR": (49.91, 49.65)}}


# --------------------------------------------------------------------------------------------------
# data helpers


def subset(data: SequenceData, idx: Tensor) -> SequenceData:
    T = int(data.lengths[idx].max())
    return SequenceData(data.x[idx, :T].double(), data.labels[idx, :T], data.lengths[idx])


def tokens(data: SequenceData) -> Tensor:
    """The (n_tokens, D) observations inside the lengths."""
    inside = torch.arange(data.x.shape[1]) < data.lengths[:, None]
    return data.x[inside]


def digits_as_sequences(d) -> SequenceData:
    B, T = d.labels.shape
    return SequenceData(d.images.reshape(B, T, -1).double(), d.labels, d.lengths)


# --------------------------------------------------------------------------------------------------
# models


def train(model: nn.Module, data: SequenceData, *, epochs: int) -> nn.Module:
    """Eq. 15 divided by n, the mean hinge + (1/n) beta^T K~ beta, by block-coordinate Frank-Wolfe
    (the model's regularizer is the squared norm of its whitened weights, so BCFW applies; at most
    ``epochs`` passes, stopping at a duality gap of 1e-3)."""
    st.train.fit(model, data, None, solver="bcfw", epochs=epochs, l2=2.0 / len(data), progress=False, metrics=())
    return model


def accuracy(model: nn.Module, data: SequenceData, rows: Callable[[Tensor], Tensor] | None = None) -> float:
    """Per-label accuracy of Viterbi decoding."""
    with torch.no_grad():
        unary, trans = model(rows(data.x) if rows is not None else data.x)
        _, path = st.viterbi(unary, trans, lengths=data.lengths)
    inside = torch.arange(path.shape[1]) < data.lengths[:, None]
    return float((path == data.labels)[inside].double().mean())


def fit_eval(kernel, labeled: SequenceData, evals: dict[str, SequenceData], num_labels: int, structured: bool,
             epochs: int) -> dict[str, float]:
    model = KernelChainPotentials(kernel, tokens(labeled), num_labels, transitions=structured, inputs="rows")
    rows = labeled.map_x(lambda x: model.kernel_rows(x).detach())
    train(model, rows, epochs=epochs)
    return {name: accuracy(model, d, lambda x: model.kernel_rows(x)) for name, d in evals.items()}


def graph_kernel(k: Callable, x_all: Tensor, graph_weight: float) -> GraphRegularizedKernel:
    """k~ over the tokens ``x_all`` with the graph term per token: lam2 = 9 lam1 c / n, so that adding
    unlabeled tokens does not by itself strengthen the smoothing (Belkin et al. divide by (l + u)^2)."""
    W = knn_graph(x_all, min(5, len(x_all) - 1))
    return GraphRegularizedKernel(k, x_all, W, LAM1, RATIO * LAM1 * graph_weight / len(x_all))


def cv_accuracy(labeled: SequenceData, num_labels: int, make_kernel: Callable[[Tensor], object],
                epochs: int) -> float:
    """Mean validation accuracy of the SVM over 4 folds of the labeled sequences;
    ``make_kernel(training tokens)`` builds the kernel of a fold."""
    folds = torch.arange(len(labeled)) % min(4, len(labeled))
    accs = []
    for f in range(int(folds.max()) + 1):
        tr, va = subset(labeled, torch.nonzero(folds != f)[:, 0]), subset(labeled, torch.nonzero(folds == f)[:, 0])
        accs.append(fit_eval(make_kernel(tokens(tr)), tr, {"val": va}, num_labels, False, epochs)["val"])
    return statistics.mean(accs)


def choose(scores: dict[float, float]) -> float:
    """The best setting; ties go to the smallest."""
    return max(scores, key=lambda v: (scores[v], -v))


def choose_gamma(labeled: SequenceData, num_labels: int, grid: list[float], epochs: int) -> float:
    """The RBF width by cross-validation of the SVM (no graph) over the labeled sequences."""
    scale = float(torch.cdist(tokens(labeled), tokens(labeled)).pow(2).mean())
    return choose({g: cv_accuracy(labeled, num_labels, lambda x, g=g: graph_kernel(
        functools.partial(rbf_kernel, gamma=g / scale), x, 0.0), epochs) for g in grid}) / scale


def choose_graph_weights(labeled: SequenceData, pool: SequenceData, Us: list[int], num_labels: int, gamma: float,
                         grid: list[float], epochs: int, fixed: float | None = None) -> dict[int, float]:
    """c for each number U of unlabeled sequences, by cross-validation of the SVM over the labeled
    sequences with the graph over each training fold and the first U sequences of ``pool``."""
    if fixed is not None:
        return dict.fromkeys(Us, fixed)
    k = functools.partial(rbf_kernel, gamma=gamma)
    out = {}
    for U in Us:
        xu = tokens(subset(pool, torch.arange(U))) if U else tokens(labeled)[:0]
        def make(x: Tensor, c: float, xu: Tensor = xu) -> GraphRegularizedKernel:
            return graph_kernel(k, torch.cat([x, xu]), c)

        out[U] = choose({c: cv_accuracy(labeled, num_labels, functools.partial(make, c=c), epochs) for c in grid})
    return out


def semi_supervised_cells(pool: SequenceData, test: SequenceData, num_labels: int, L: int, Us: list[int],
                          gamma: float, graph_weight: dict[int, float], seed: int, epochs: int,
                          transductive: bool = False) -> dict:
    """One random labeled selection: SVM and STR for each U (and the eq. 18 kernel at the largest U)."""
    g = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(pool), generator=g)
    labeled = subset(pool, order[:L])
    k = functools.partial(rbf_kernel, gamma=gamma)
    out = {}
    for U in Us:
        unl = subset(pool, order[L:L + U]) if U else None
        x_all = tokens(labeled) if unl is None else torch.cat([tokens(labeled), tokens(unl)])
        kernel = graph_kernel(k, x_all, graph_weight[U])
        evals = {"test": test} | ({"unlabeled": unl} if unl is not None else {})
        for name, structured in (("SVM", False), ("STR", True)):
            out[U, name] = fit_eval(kernel, labeled, evals, num_labels, structured, epochs)
        if transductive and unl is not None and U == max(Us):
            tk = TransductiveKernel(k, x_all, kernel.W, 0.1 / LAM1, 0.9 / LAM1)
            out[U, "STR, eq. 18 kernel"] = fit_eval(tk, labeled, evals, num_labels, True, epochs)
    return out


def average(runs: list[dict]) -> dict:
    keys = runs[0].keys()
    return {k: {m: statistics.mean(r[k][m] for r in runs) for m in runs[0][k]} for k in keys}


def fmt(acc: dict, key: str) -> str:
    return f"{100 * acc[key]:6.2f}" if key in acc else "     -"


def print_table(title: str, results: dict, paper: dict, Ls: list[int], Us: list[int]) -> None:
    print(f"\n== {title}: per-label accuracy (%), test / in-sample unlabeled; paper beside ==")
    print(f"  {'L':>3} {'U':>4} {'model':<20} {'test':>7} {'unlab.':>7}   {'paper test':>10} {'unlab.':>7}")
    for L in Ls:
        for U in Us:
            for name in [m for (u, m) in results[L] if u == U]:
                acc = results[L][U, name]
                ref = paper.get((L, U), {}).get(name)
                p = (f"{ref[0]:10.2f} {ref[1]:7.2f}" if ref and ref[1] is not None
                     else f"{ref[0]:10.2f}       -" if ref else "         -       -")
                print(f"  {L:>3} {U:>4} {name:<20} {fmt(acc, 'test')} {fmt(acc, 'unlabeled')}   {p}")


# --------------------------------------------------------------------------------------------------
# neural potentials + laplacian_penalty


class MLPChain(nn.Module):
    def __init__(self, D: int, N: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(D, 64), nn.ReLU(), nn.Linear(64, N))
        self.transitions = nn.Parameter(torch.zeros(N, N, dtype=torch.float64))
        self.double()

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        return self.net(x), self.transitions


def neural(labeled: SequenceData, unlabeled: SequenceData, test: SequenceData, weight: float, epochs: int,
           seed: int) -> float:
    """Hinge on the labeled words + weight * tr(F^T L F) / n over the unlabeled tokens' scores."""
    torch.manual_seed(seed)
    model = MLPChain(labeled.x.shape[-1], 10)
    xu = tokens(unlabeled)
    W = knn_graph(xu, 5)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3, weight_decay=1e-4)
    for _ in range(epochs):
        opt.zero_grad()
        unary, trans = model(labeled.x)
        loss = HINGE(unary, trans, labeled.labels, lengths=labeled.lengths)
        if weight:
            loss = loss + weight * laplacian_penalty(model.net(xu), W) / len(xu)
        loss.backward()
        opt.step()
    return accuracy(model, test)


# --------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5, help="random labeled selections per cell")
    p.add_argument("--passes", type=int, default=100, help="most BCFW passes per model")
    p.add_argument("--graph-weight", type=float, default=None,
                   help="c in lam2 = 9 lam1 c / n (default: cross-validated on the SVM)")
    p.add_argument("--noise", type=float, default=0.1, help="pixel noise of the digit words")
    p.add_argument("--quick", action="store_true", help="a small run (fewer sequences and passes, 1 repeat)")
    args = p.parse_args(argv)
    torch.set_default_dtype(torch.float64)
    quick = args.quick
    repeats, passes = (1, 8) if quick else (args.repeats, args.passes)  # --quick: a smoke run for the tests
    # RBF widths around 1 / (mean squared distance); narrower kernels shrink the unary scores of
    # new tokens, against which STR's transition scores do not shrink (on digits the SVM's CV chose
    # 8 and STR fell 30 points below the SVM: RESULTS.md)
    grid = [0.5, 2.0] if quick else [0.25, 0.5, 1.0, 2.0]
    c_grid = [0.0, 100.0] if quick else [0.0, 10.0, 100.0, 1e3, 1e4, 1e5]
    t0 = time.perf_counter()

    # ---- Table 1: pitch-accent-like; the RBF width by CV of the SVM on the largest labeled set
    Ls, Us = ([4], [0, 40]) if quick else ([4, 40], [0, 80, 200])
    pool = pitch_accent_like(max(Ls) + max(Us), seed=1)
    n_test = 60 if quick else 200
    test = subset(pitch_accent_like(n_test, seed=2), torch.arange(n_test))
    cv_set, cv_unl = subset(pool, torch.arange(max(Ls))), subset(pool, torch.arange(max(Ls), len(pool)))
    gamma = choose_gamma(cv_set, 2, grid, passes)
    c = choose_graph_weights(cv_set, cv_unl, Us, 2, gamma, c_grid, passes, args.graph_weight)
    print(f"Table 1: RBF gamma = {gamma:.4g}, graph weight c by U = {c} (cross-validated on the SVM, "
          f"{max(Ls)} labeled sequences)")
    results = {}
    for L in Ls:
        runs = [semi_supervised_cells(pool, test, 2, L, Us, gamma, c, seed=r, epochs=passes, transductive=True)
                for r in range(repeats)]
        results[L] = average(runs)
    print_table("Table 1, pitch-accent-like", results, PAPER_PA, Ls, Us)
    t1 = time.perf_counter()

    # ---- Table 2: digit words, informative and uniform label transitions
    n_unl = 40 if quick else 412
    n_test = 60 if quick else 300
    for transitions in ("informative", "uniform"):
        words = digits_as_sequences(digit_sequences(10 + n_unl, transitions=transitions, noise=args.noise, seed=3))
        test_words = digits_as_sequences(digit_sequences(n_test, transitions=transitions, noise=args.noise,
                                                         split="test", seed=4))
        cv_set, cv_unl = subset(words, torch.arange(10)), subset(words, torch.arange(10, len(words)))
        gamma = choose_gamma(cv_set, 10, grid, passes)
        c = choose_graph_weights(cv_set, cv_unl, [0, n_unl], 10, gamma, c_grid, passes, args.graph_weight)
        print(f"\nTable 2 ({transitions}): RBF gamma = {gamma:.4g}, graph weight c by U = {c}")
        runs = [semi_supervised_cells(words, test_words, 10, 10, [0, n_unl], gamma, c, seed=r, epochs=passes)
                for r in range(repeats)]
        paper = {(10, u): v for u, v in PAPER_OCR.items()} if transitions == "informative" else {}
        print_table(f"Table 2, digit words ({transitions} transitions)", {10: average(runs)}, paper, [10],
                    [0, n_unl])
    t2 = time.perf_counter()

    # ---- neural potentials with the Laplacian penalty (the paper's regularizer where kernels stop)
    words = digits_as_sequences(digit_sequences(10 + n_unl, transitions="informative", noise=args.noise, seed=3))
    test_words = digits_as_sequences(digit_sequences(n_test, transitions="informative", noise=args.noise,
                                                     split="test", seed=4))
    print("\n== MLP encoder + transitions, 10 labeled digit words + laplacian_penalty on the unlabeled "
          "tokens: test per-label accuracy (%) ==")
    for weight in (0.0, 1.0) if quick else (0.0, 1.0, 10.0):
        accs = []
        for r in range(repeats):
            order = torch.randperm(len(words), generator=torch.Generator().manual_seed(r))
            accs.append(neural(subset(words, order[:10]), subset(words, order[10:]), test_words, weight,
                               100 if quick else 600, seed=r))
        print(f"  penalty weight {weight:5.1f}: {100 * statistics.mean(accs):6.2f}")
    t3 = time.perf_counter()
    print(f"\ntime: Table 1 {t1 - t0:.0f} s, Table 2 {t2 - t1:.0f} s, neural {t3 - t2:.0f} s")


if __name__ == "__main__":
    main()
