"""Activity recognition by subsequence boosting, against a chi^2-kernel SVM (Nowozin 2009, ch. 4, Table 7).

Clips are KTH-like synthetic itemset sequences (``structtorch.data.action_sequences``: six classes in
two groups of three that share motion words; each clip's interest points binned into B overlapping
temporal bins). Two classifiers, each model-selected on the validation split, retrained once on
train + validation and evaluated once on the test split (191 / 192 / 216 clips, the KTH protocol):

- subsequence LPBoost (``structtorch.mining.LPBoost`` over ``best_patterns``, one-vs-one DDAG), with
  B and nu selected on validation;
- an SVM on binarized word histograms with the chi^2 kernel
  ``K(h, h') = exp(-(1/A) 1/2 sum (h - h')^2 / (h + h'))``, A the mean chi^2 distance between
  training clips (scikit-learn ``SVC(kernel="precomputed")``, one-vs-one), C selected on validation.

Two settings: ``order``, where the three classes of a group use the same words in different
temporal orders (bags of words cannot tell them apart), and ``identity``, where each class has
words of its own (as the thesis found on KTH, where the SVM matched boosting). Prints the accuracy
table beside the thesis's Table 7, the boosting confusion matrix, and the patterns selected by each
one-vs-one classifier (the thesis reports 20-70 per classifier).

    python examples/action_mining.py [--settings order identity] [--B 1 4 8 12] [--nu 0.01 0.05 0.1 0.25]
"""

from __future__ import annotations

import argparse
import functools
import time

import numpy as np
from sklearn.svm import SVC

from structtorch.data import ACTION_CLASSES, ActionData, action_sequences
from structtorch.mining import LPBoost, best_patterns

THESIS = {"boosting": 84.72, "chi2-SVM": 87.04}  # Table 7, KTH test accuracy (%)
SHORT = ("box", "clap", "wave", "jog", "run", "walk")


def chi2_distance(a: np.ndarray, b: np.ndarray, chunk: int = 64) -> np.ndarray:
    """``1/2 sum_k (a_k - b_k)^2 / (a_k + b_k)`` over the k with ``a_k + b_k > 0``, (len(a), len(b))."""
    out = np.empty((len(a), len(b)))
    for s in range(0, len(a), chunk):
        x = a[s:s + chunk, None, :]
        num, den = (x - b[None]) ** 2, x + b[None]
        out[s:s + chunk] = 0.5 * np.divide(num, den, out=np.zeros_like(num), where=den > 0).sum(-1)
    return out


def chi2_svm(data: ActionData, fit_idx: np.ndarray, eval_idx: np.ndarray, C: float) -> np.ndarray:
    """Train on ``fit_idx``, predict ``eval_idx`` (binarized histograms)."""
    H = (data.histograms.numpy() > 0).astype(np.float64)
    D = chi2_distance(H[fit_idx], H[fit_idx])
    A = D.mean()
    svm = SVC(kernel="precomputed", C=C).fit(np.exp(-D / A), data.labels.numpy()[fit_idx])
    return svm.predict(np.exp(-chi2_distance(H[eval_idx], H[fit_idx]) / A))


def lpboost(nu: float, args: argparse.Namespace) -> LPBoost:
    miner = functools.partial(best_patterns, max_size=args.max_size, min_support=args.min_support)
    return LPBoost(miner, nu=nu, columns=args.columns)


def subset(data: ActionData, idx: np.ndarray) -> list:
    return [data.sequences[i] for i in idx]


def confusion(pred: np.ndarray, true: np.ndarray, K: int) -> np.ndarray:
    """Row-normalized confusion matrix in %, rows = true class."""
    M = np.zeros((K, K))
    np.add.at(M, (true, pred), 1.0)
    return 100.0 * M / np.maximum(M.sum(1, keepdims=True), 1.0)


def splits_for(n: int) -> tuple[int, int, int]:
    a, b = round(n * 191 / 599), round(n * 192 / 599)
    return a, b, n - a - b


def run_setting(setting: str, args: argparse.Namespace) -> dict:
    datas = {B: action_sequences(args.n, setting=setting, B=B, signal=args.signal, splits=splits_for(args.n),
                                 seed=args.seed) for B in args.B}  # the same clips, binned B ways
    first = datas[args.B[0]]
    y = first.labels.numpy()
    tr, va, te = first.train.numpy(), first.val.numpy(), first.test.numpy()
    trva = np.sort(np.concatenate([tr, va]))

    # boosting: select (B, nu) on validation
    grid, t0 = {}, time.perf_counter()
    for B, data in datas.items():
        for nu in args.nu:
            model = lpboost(nu, args).fit(subset(data, tr), y[tr])
            grid[B, nu] = model.score(subset(data, va), y[va])
    B, nu = max(grid, key=lambda k: (grid[k], -k[1]))
    t_select = time.perf_counter() - t0
    t0 = time.perf_counter()
    final = lpboost(nu, args).fit(subset(datas[B], trva), y[trva])
    t_fit = time.perf_counter() - t0
    pred = final.predict(subset(datas[B], te))

    # chi^2 SVM on binarized histograms: select C on validation
    svm_val = {C: float((chi2_svm(first, tr, va, C) == y[va]).mean()) for C in args.C}
    C = max(svm_val, key=lambda c: (svm_val[c], -c))
    svm_pred = chi2_svm(first, trva, te, C)
    return {
        "setting": setting, "grid": grid, "B": B, "nu": nu, "val": grid[B, nu], "test": float((pred == y[te]).mean()),
        "svm_C": C, "svm_val": svm_val[C], "svm_test": float((svm_pred == y[te]).mean()),
        "confusion": confusion(pred, y[te], len(ACTION_CLASSES)), "model": final,
        "t_select": t_select, "t_fit": t_fit,
    }


def report(res: dict) -> None:
    setting = res["setting"]
    print(f"\n== setting '{setting}': validation accuracy of subsequence LPBoost over (B, nu) ==")
    Bs = sorted({b for b, _ in res["grid"]})
    nus = sorted({n for _, n in res["grid"]})
    print("      B " + "".join(f"  nu={n:<5g}" for n in nus))
    for b in Bs:
        print(f"  {b:5d} " + "".join(f"  {100 * res['grid'][b, n]:8.2f}" for n in nus))
    print(f"selected B = {res['B']}, nu = {res['nu']:g}; grid {res['t_select']:.1f} s, final fit {res['t_fit']:.1f} s")

    print("\nconfusion matrix of subsequence LPBoost on test (%, rows = true; thesis Fig. 31 for KTH)")
    print("        " + "".join(f"{s:>6}" for s in SHORT))
    for s, row in zip(SHORT, res["confusion"], strict=True):
        print(f"  {s:>5} " + "".join(f"{v:6.0f}" for v in row))

    model = res["model"]
    counts = [len(p) for p in model.patterns_]
    print(f"\npatterns per one-vs-one classifier (thesis: around 20-70): min {min(counts)}, "
          f"median {int(np.median(counts))}, max {max(counts)}")
    for (i, j), pats, alpha in zip(model.pairs_, model.patterns_, model.alpha_, strict=True):
        t, d = pats[int(np.argmax(alpha))]
        shown = ", ".join("{" + ", ".join(str(w) for w in sorted(e)) + "}" for e in t)
        vote = SHORT[j] if d > 0 else SHORT[i]
        print(f"  {SHORT[i]:>5} vs {SHORT[j]:<5} {len(pats):3d} patterns; heaviest ({shown}) "
              f"alpha {alpha.max():.3f} votes {vote}")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--settings", nargs="+", choices=("order", "identity"), default=["order", "identity"])
    p.add_argument("--n", type=int, default=599, help="clips (KTH: 599, split 191 / 192 / 216)")
    p.add_argument("--B", type=int, nargs="+", default=[1, 4, 8, 12], help="temporal bins to select from")
    p.add_argument("--nu", type=float, nargs="+", default=[0.01, 0.05, 0.1, 0.25], help="LPBoost nu values")
    p.add_argument("--C", type=float, nargs="+", default=[1.0, 10.0, 100.0], help="SVM C values")
    p.add_argument("--max-size", type=int, default=3, help="most items in a pattern")
    p.add_argument("--min-support", type=int, default=2, help="fewest clips a pattern must occur in")
    p.add_argument("--columns", type=int, default=10, help="patterns added per LPBoost round")
    p.add_argument("--signal", type=float, default=0.3, help="fraction of a clip's words that are informative")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    results = [run_setting(s, args) for s in args.settings]
    for res in results:
        report(res)
    print("\n== test accuracy (%), model-selected on validation, retrained on train + validation ==")
    print(f"  {'setting':<10} {'method':<24} {'selected':<18} {'val':>7} {'test':>7}   thesis (KTH, Table 7)")
    for res in results:
        chosen, C = f"B={res['B']} nu={res['nu']:g}", f"C={res['svm_C']:g}"
        print(f"  {res['setting']:<10} {'subsequence LPBoost':<24} {chosen:<18} "
              f"{100 * res['val']:7.2f} {100 * res['test']:7.2f}   {THESIS['boosting']:.2f} (B=12, nu=0.05)")
        print(f"  {res['setting']:<10} {'chi2-SVM, binarized':<24} {C:<18} "
              f"{100 * res['svm_val']:7.2f} {100 * res['svm_test']:7.2f}   {THESIS['chi2-SVM']:.2f} (C=10)")
    print("\nOn KTH the thesis found no significant gain of subsequence boosting over the chi^2-SVM: word "
          "identity sufficed. Here\nthe 'identity' setting reproduces that; in the 'order' setting only "
          "temporal order separates the classes of a group,\nand the bag-of-words SVM falls to chance "
          "within each group while the subsequence patterns recover the order.")


if __name__ == "__main__":
    main()
