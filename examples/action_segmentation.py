"""Temporal action segmentation: mined window features against bags of words, in one chain SVM.

Streams of KTH-like clips (``structtorch.data.actions.action_streams``): each stream is a random
sequence of 3-6 actions (no two consecutive ones equal), each clip's interest points binned into 6
temporal bins, so a stream is an itemset sequence of 18-36 bins labeled per bin with its clip's
action. The task is to label every bin (frame accuracy) and recover the action segments (segmental
F1@{0.1, 0.25, 0.5}, ``st.segment_f1``, Lea et al. 2017).

One model, two feature maps (Nowozin 2009, §4.5: "for temporal CRFs, compute Phi_T on sliding
windows of the itemset sequence"). Each bin gets the binary features of the window of ``--width``
bins around it (``SubstructureFeatures.transform_windows``), as active ids
(``SubstructureFeatures.to_ids``) for ``st.SparseFeaturePotentials``; the chain structural SVM
(margin rescaling, Hamming loss: ``st.StructuredHingeLoss()``) is trained by block-coordinate
Frank-Wolfe through ``st.train.fit(..., solver="bcfw")`` and decoded by Viterbi.

- bag of words: one itemset pattern ``{w}`` per codeword, tested on the union of the window (does
  word w occur in the window?);
- mined: LPBoost (``best_patterns``, itemset-sequence patterns of at most ``--max-size`` words
  with support >= 2, one-vs-one over the six actions) fitted on ``--windows`` training windows
  labeled by their centre bin's action; its selected patterns, tested on each window as a
  sequence (temporal order inside the window counts). ``nu`` is fixed at 0.05 (the thesis's KTH
  choice) unless several ``--nu`` are given: then the one with the best validation window accuracy
  of the LPBoost classifier is taken (no SVM is trained for the selection);
- mined + bag of words: both dictionaries side by side.

The per-window LPBoost classifier (its DDAG prediction at each centre bin, no chain) is shown too.
Expected: in the "order" setting (the classes of a group share their words, in different temporal
orders) bags of words reach only the group, about a third of the frames within it, while mined
order patterns separate the classes; in the "identity" setting (each class has words of its own)
the feature maps are about equal.

    python examples/action_segmentation.py                        # both settings, about 1 min on 2 cores
    python examples/action_segmentation.py --n 24 --windows 60 --passes 3   # quick check, < 10 s
"""

from __future__ import annotations

import argparse
import functools
import time

import numpy as np
import torch
from torch import Tensor

import structtorch as st
from structtorch.data.actions import ActionStreams, action_streams
from structtorch.data.tagging import SequenceData
from structtorch.mining import LPBoost, SubstructureFeatures, best_patterns

OVERLAPS = (0.1, 0.25, 0.5)


def windows(streams: ActionStreams, index: np.ndarray, width: int) -> tuple[list, np.ndarray]:
    """Every window (an itemset sequence of <= ``width`` bins, clipped as in ``transform_windows``)
    of the streams ``index`` and its centre bin's action."""
    left, right = (width - 1) // 2, width // 2
    out, labels = [], []
    for i in index:
        seq = streams.sequences[i]
        for j in range(len(seq)):
            out.append(seq[max(0, j - left):j + right + 1])
            labels.append(int(streams.labels[i, j]))
    return out, np.asarray(labels)


def mine(streams: ActionStreams, args: argparse.Namespace) -> tuple[LPBoost, float, dict[float, float]]:
    """LPBoost on a subsample of training windows; nu fixed or selected on validation windows.
    -> (model, selected nu, validation window accuracy per nu)."""
    X, y = windows(streams, streams.train.numpy(), args.width)
    pick = np.random.default_rng(args.seed).choice(len(X), min(args.windows, len(X)), replace=False)
    X, y = [X[k] for k in pick], y[pick]
    miner = functools.partial(best_patterns, max_size=args.max_size, min_support=args.min_support)
    models = {nu: LPBoost(miner, nu=nu, columns=args.columns).fit(X, y) for nu in args.nu}
    if len(models) == 1:
        return models[args.nu[0]], args.nu[0], {}
    Xv, yv = windows(streams, streams.val.numpy(), args.width)
    val = {nu: m.score(Xv, yv) for nu, m in models.items()}
    nu = max(val, key=lambda v: (val[v], -v))
    return models[nu], nu, val


def ids_of(dictionaries: list[SubstructureFeatures], streams: ActionStreams, width: int) -> Tensor:
    """Active ids (n, T, K) of the dictionaries' window features, side by side, -1 padding."""
    parts, offset = [], 0
    for feats in dictionaries:
        parts.append(SubstructureFeatures.to_ids(feats.transform_windows(streams.sequences, width), offset=offset))
        offset += len(feats)
    return torch.cat(parts, dim=-1)


def sequence_data(ids: Tensor, streams: ActionStreams, index: Tensor) -> SequenceData:
    return SequenceData(ids[index], streams.labels[index], streams.lengths[index])


def scores(paths: Tensor, data: SequenceData) -> dict[str, float]:
    out = {"accuracy": st.train.accuracy(paths, data.labels, data.lengths)}
    out.update({f"F1@{k:g}": st.segment_f1(paths, data.labels, data.lengths, overlap=k) for k in OVERLAPS})
    return out


def chain_svm(name: str, dictionaries: list[SubstructureFeatures], streams: ActionStreams,
              args: argparse.Namespace, seconds: float = 0.0) -> dict:
    """Featurize, train the chain SVM on train, score test; the row of the table."""
    began = time.perf_counter()
    ids = ids_of(dictionaries, streams, args.width)
    featurize = time.perf_counter() - began
    train = sequence_data(ids, streams, streams.train)
    test = sequence_data(ids, streams, streams.test)
    model = st.SparseFeaturePotentials(sum(len(d) for d in dictionaries), 6, boundary=True)
    began = time.perf_counter()
    history = st.train.fit(model, train, st.StructuredHingeLoss(), epochs=args.passes, C=args.C, solver="bcfw",
                           solver_options={"tol": args.tol}, progress=False, seed=args.seed)
    train_seconds = time.perf_counter() - began
    with torch.no_grad():
        unary, transitions, start, end = model(test.x)
        paths = st.viterbi(unary, transitions, start=start, end=end, lengths=test.lengths)[1]
    return {"name": name, "features": sum(len(d) for d in dictionaries), "K": ids.shape[-1],
            "mine": seconds, "featurize": featurize, "train": train_seconds, "passes": len(history),
            "gap": history.epochs[-1]["gap"], **scores(paths, test)}


def window_classifier(model: LPBoost, streams: ActionStreams, args: argparse.Namespace, seconds: float) -> dict:
    """The LPBoost DDAG at each test bin's window, without a chain."""
    index = streams.test.numpy()
    X, _ = windows(streams, index, args.width)
    flat = torch.as_tensor(model.predict(X), dtype=torch.long)
    paths = torch.full((len(index), streams.labels.shape[1]), -1, dtype=torch.long)
    start = 0
    for row, i in enumerate(index):
        n = int(streams.lengths[i])
        paths[row, :n] = flat[start:start + n]
        start += n
    test = sequence_data(streams.labels, streams, streams.test)
    return {"name": "LPBoost per window (no chain)", "features": sum(len(p) for p in model.patterns_), "K": 0,
            "mine": seconds, "featurize": 0.0, "train": 0.0, "passes": 0, "gap": float("nan"),
            **scores(paths, test)}


def run_setting(setting: str, args: argparse.Namespace) -> list[dict]:
    streams = action_streams(args.n, setting=setting, vocab=args.vocab, signal=args.signal, seed=args.seed)
    began = time.perf_counter()
    boost, nu, val = mine(streams, args)
    seconds = time.perf_counter() - began
    mined = SubstructureFeatures.from_model(boost)
    bow = SubstructureFeatures([frozenset({w}) for w in range(args.vocab)])
    T = streams.lengths.float()
    print(f"\n== setting '{setting}': {len(streams)} streams (train / val / test {len(streams.train)} / "
          f"{len(streams.val)} / {len(streams.test)}), {int(T.min())}-{int(T.max())} bins each, "
          f"window {args.width} bins ==")
    chosen = f"nu = {nu:g}" + (" (selected on validation windows: " + ", ".join(
        f"{v:g}: {100 * a:.1f}%" for v, a in val.items()) + ")" if val else " (fixed)")
    print(f"LPBoost on {min(args.windows, int(streams.lengths[streams.train].sum()))} training windows, "
          f"{chosen}: {len(mined)} distinct patterns in {seconds:.1f} s")
    rows = [window_classifier(boost, streams, args, seconds),
            chain_svm("chain SVM, bag of words", [bow], streams, args),
            chain_svm("chain SVM, mined", [mined], streams, args, seconds),
            chain_svm("chain SVM, mined + bag of words", [mined, bow], streams, args, seconds)]
    print("| features | dictionary | frame accuracy | " + " | ".join(f"F1@{k:g}" for k in OVERLAPS)
          + " | mine (s) | featurize (s) | train (s) | BCFW passes, gap |")
    print("|---|---:|---:|" + "---:|" * len(OVERLAPS) + "---:|---:|---:|---:|")
    for r in rows:
        bcfw = f"{r['passes']}, {r['gap']:.1e}" if r["passes"] else "-"
        print(f"| {r['name']} | {r['features']} | {100 * r['accuracy']:.1f} | "
              + " | ".join(f"{100 * r[f'F1@{k:g}']:.1f}" for k in OVERLAPS)
              + f" | {r['mine']:.1f} | {r['featurize']:.2f} | {r['train']:.1f} | {bcfw} |")
    print("(dictionary: binary features per window; for the LPBoost row, its patterns summed over the 15 "
          "one-vs-one classifiers. Times: mining LPBoost, computing the window features of all streams, "
          "BCFW training.)")
    return rows


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--settings", nargs="+", choices=("order", "identity"), default=["order", "identity"])
    p.add_argument("--n", type=int, default=200, help="streams (split n/2, n/4, n/4)")
    p.add_argument("--vocab", type=int, default=768, help="codebook size (words)")
    p.add_argument("--signal", type=float, default=0.3, help="fraction of a clip's words that are informative")
    p.add_argument("--width", type=int, default=7, help="window of bins around each position")
    p.add_argument("--windows", type=int, default=300, help="training windows LPBoost is fitted on")
    p.add_argument("--nu", type=float, nargs="+", default=[0.05],
                   help="LPBoost nu (several: select on validation window accuracy)")
    p.add_argument("--max-size", type=int, default=3, help="most words in a pattern")
    p.add_argument("--min-support", type=int, default=2, help="fewest windows a pattern must occur in")
    p.add_argument("--columns", type=int, default=10, help="patterns added per LPBoost round")
    p.add_argument("--C", type=float, default=1.0, help="SVM trade-off, lambda = 1 / (n C)")
    p.add_argument("--passes", type=int, default=30, help="BCFW passes at most")
    p.add_argument("--tol", type=float, default=1e-3, help="stop BCFW at this duality gap")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = p.parse_args(argv)
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    began = time.perf_counter()
    for setting in args.settings:
        run_setting(setting, args)
    print(f"\ntotal {time.perf_counter() - began:.1f} s")


if __name__ == "__main__":
    main()
