"""CoNLL-2000-style chunking with sparse window features: a CRF (LBFGS) and a structural SVM (BCFW).

Both models score each token by a sum of weights of its indicator features (words, POS tags,
suffixes and shapes at offsets -2..+2, POS bigrams and trigrams, word bigrams), held by
``st.SparseFeaturePotentials``, plus label-transition scores:

- CRF: the feature scores are the emissions of ``st.LinearChainCRF`` with the BIO constraints
  (``st.allowed_transitions``), trained by ``st.train.fit`` with full-batch LBFGS and an L2
  penalty, decoded by the CRF under the same constraints;
- SVM: the same linear model with its own transitions, start and end scores, trained as a
  margin-rescaled structural SVM (Hamming loss) by block-coordinate Frank-Wolfe
  (``solver="bcfw"``), decoded by Viterbi with its learned scores masked by the BIO constraints.
  BCFW keeps its per-sentence blocks of the weights sparse (each holds its sentence's features), so
  memory grows with the data, not with sentences x features.

The baseline tags each token with the chunk tag most frequent for its POS tag in the training
data (the CoNLL-2000 shared task's baseline). Reported on the test set: chunk precision, recall
and F1 (conlleval semantics, ``st.chunk_f1``), per chunk type, and token accuracy.

    python examples/chunking.py                                   # generated data (toy grammar)
    python examples/chunking.py --train train.txt --test test.txt # CoNLL-2000 files: word POS chunk
    python examples/chunking.py --data conll2000/                 # the same: DIR/train.txt, DIR/test.txt
    python examples/chunking.py --n-train 200 --n-test 100 --save-data /tmp/chunks  # write the data
"""

from __future__ import annotations

import argparse
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path

import torch
from torch import Tensor, nn

import structtorch as st
from structtorch.data.conll import (
    decode_tags,
    encode_tags,
    read_conll,
    synthetic_chunking,
    to_bio,
    window_features,
    write_conll,
)
from structtorch.data.tagging import SequenceData

Sentences = list[tuple[list[str], ...]]
Decoder = Callable[[SequenceData], Tensor]  # data -> Viterbi paths (B, T), -1 beyond each length


class Emissions(nn.Module):
    """Feature ids (B, T, K) -> unary scores (B, T, N); the CRF holds the transitions."""

    def __init__(self, num_features: int, num_labels: int) -> None:
        super().__init__()
        self.features = st.SparseFeaturePotentials(num_features, num_labels)
        self.features.transitions.requires_grad_(False)  # unused: the CRF's transitions are trained

    def forward(self, ids: Tensor) -> Tensor:
        return self.features(ids)[0]


def load(args: argparse.Namespace) -> tuple[Sentences, Sentences, str]:
    """(train, test, description) from the given files or the generator."""
    if args.data is not None:  # the CoNLL-2000 distribution's file names
        if args.train is not None or args.test is not None:
            raise SystemExit("give --data DIR or --train/--test files, not both")
        args.train, args.test = args.data / "train.txt", args.data / "test.txt"
    if (args.train is None) != (args.test is None):
        raise SystemExit("give both --train and --test, or neither (generated data)")
    if args.train is not None:
        train, test = (read_conll(p, columns=(0, 1, 2)) for p in (args.train, args.test))
        source = f"{args.train} / {args.test}"
    else:
        train = synthetic_chunking(args.n_train, seed=args.seed, pos_noise=args.pos_noise)
        test = synthetic_chunking(args.n_test, seed=args.seed + 1, unknown=args.unknown, pos_noise=args.pos_noise)
        source = f"generated (seed {args.seed}, {args.unknown:.0%} of open-class test words unseen)"
        if args.save_data is not None:  # write the CoNLL files and train on what is read back
            args.save_data.mkdir(parents=True, exist_ok=True)
            paths = [args.save_data / name for name in ("train.txt", "test.txt")]
            for path, data in zip(paths, (train, test), strict=True):
                write_conll(path, data)
            train, test = (read_conll(p) for p in paths)
            source += f", written to {paths[0]} and {paths[1]}"
    fixed = 0
    for data in (train, test):
        for i, (words, pos, chunks) in enumerate(data):
            bio = to_bio(chunks)
            fixed += bio != chunks
            data[i] = (words, pos, bio)
    if fixed:
        print(f"note: {fixed} sentences had chunks starting with I- (IOB1); read as BIO")
    return train, test, source


def majority_baseline(train: Sentences, test: Sentences) -> list[list[str]]:
    """The chunk tag most frequent for each POS tag in ``train`` (then the most frequent tag)."""
    counts: dict[str, Counter] = defaultdict(Counter)
    for _, pos, chunks in train:
        for p, c in zip(pos, chunks, strict=True):
            counts[p][c] += 1
    overall = Counter(c for _, _, chunks in train for c in chunks).most_common(1)[0][0]
    best = {p: c.most_common(1)[0][0] for p, c in counts.items()}
    return [[best.get(p, overall) for p in pos] for _, pos, _ in test]


def train_crf(train: SequenceData, num_features: int, labels: list[str],
              args: argparse.Namespace) -> tuple[Decoder, float]:
    """LinearChainCRF with BIO constraints on sparse emissions, full-batch LBFGS; -> (decode, seconds)."""
    model = Emissions(num_features, len(labels))
    crf = st.LinearChainCRF(len(labels), constraints=st.allowed_transitions("BIO", labels))
    params = [p for p in (*model.parameters(), *crf.parameters()) if p.requires_grad]
    lbfgs = torch.optim.LBFGS(params, max_iter=20, history_size=20, line_search_fn="strong_wolfe")
    began = time.perf_counter()
    st.train.fit(model, train, crf, optimizer=lbfgs, epochs=max(1, -(-args.crf_iters // 20)), l2=args.l2,
                 batch_size=len(train), objective=False, progress=False, seed=args.seed)
    seconds = time.perf_counter() - began

    @torch.no_grad()
    def decode(data: SequenceData) -> Tensor:
        return crf.decode(model(data.x), lengths=data.lengths)[1]

    return decode, seconds


def train_svm(train: SequenceData, num_features: int, labels: list[str],
              args: argparse.Namespace) -> tuple[Decoder, float, dict]:
    """Structural SVM on the same features by BCFW; decoded under the BIO constraints.
    -> (decode, seconds, last BCFW record)."""
    model = st.SparseFeaturePotentials(num_features, len(labels), boundary=True)
    began = time.perf_counter()
    history = st.train.fit(model, train, None, epochs=args.svm_passes, C=args.C, solver="bcfw",
                           solver_options={"tol": args.tol}, progress=False, seed=args.seed)
    seconds = time.perf_counter() - began
    allowed, first, last = st.allowed_transitions("BIO", labels)

    def masked(x: Tensor, ok: Tensor) -> Tensor:
        return x.masked_fill(~ok, float("-inf"))

    @torch.no_grad()
    def decode(data: SequenceData) -> Tensor:
        unary, transitions, start, end = model(data.x)
        return st.viterbi(unary, masked(transitions, allowed), start=masked(start, first),
                          end=masked(end, last), lengths=data.lengths)[1]

    return decode, seconds, {**history.epochs[-1], "passes": len(history), "converged": history.converged}


def scores(pred: list[list[str]], gold: list[list[str]]) -> tuple[st.metrics.ChunkScores, float]:
    """(chunk scores, token accuracy) of tag-name sequences."""
    right = sum(p == g for ps, gs in zip(pred, gold, strict=True) for p, g in zip(ps, gs, strict=True))
    return st.chunk_f1(pred, gold), right / max(sum(map(len, gold)), 1)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, help="a folder with CoNLL-2000's train.txt and test.txt")
    p.add_argument("--train", type=Path, help="CoNLL training file (word POS chunk per line)")
    p.add_argument("--test", type=Path, help="CoNLL test file")
    p.add_argument("--n-train", type=int, default=500, help="generated training sentences")
    p.add_argument("--n-test", type=int, default=500, help="generated test sentences")
    p.add_argument("--unknown", type=float, default=0.1, help="share of unseen open-class test words")
    p.add_argument("--pos-noise", type=float, default=0.2, help="share of ambiguous words with the other POS")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--save-data", type=Path, help="write the generated data here as CoNLL files")
    p.add_argument("--min-count", type=int, default=2, help="keep features seen this often in training")
    p.add_argument("--l2", type=float, default=1e-3, help="CRF: (l2/2)||w||^2 added to the mean NLL")
    p.add_argument("--crf-iters", type=int, default=100, help="CRF: LBFGS iterations at most")
    p.add_argument("--C", type=float, default=1.0, help="SVM: trade-off, lambda = 1 / (n C)")
    p.add_argument("--svm-passes", type=int, default=20, help="SVM: BCFW passes at most")
    p.add_argument("--tol", type=float, default=1e-3, help="SVM: stop at this duality gap")
    p.add_argument("--threads", type=int, default=1,
                   help="torch intra-op threads (BCFW steps on one sentence are tiny: more threads only wait)")
    args = p.parse_args()
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)

    began = time.perf_counter()
    train, test, source = load(args)
    ids, lengths, vocab = window_features(train, min_count=args.min_count)
    test_ids, test_lengths, _ = window_features(test, vocab)
    tags, _, labels = encode_tags([s[2] for s in train])
    unseen = sorted({t for s in test for t in s[2]} - set(labels))
    if unseen:
        raise SystemExit(f"the test data has chunk tags never seen in training: {unseen}")
    test_tags, _, _ = encode_tags([s[2] for s in test], labels)
    train_data = SequenceData(ids, tags, lengths)
    test_data = SequenceData(test_ids, test_tags, test_lengths)
    gold = [s[2] for s in test]
    kept = float((test_ids >= 0).sum()) / max(float(test_lengths.sum()) * test_ids.shape[2], 1.0)
    print(f"data: {source}")
    print(f"train {len(train)} sentences ({int(lengths.sum())} tokens), test {len(test)} "
          f"({int(test_lengths.sum())} tokens); {len(labels)} tags, {len(vocab)} features "
          f"(K = {ids.shape[2]} templates, seen >= {args.min_count} times; {kept:.1%} of test features known)")

    rows = {}
    rows["baseline (chunk tag by POS)"] = (*scores(majority_baseline(train, test), gold), 0.0)
    crf_decode, crf_seconds = train_crf(train_data, len(vocab), labels, args)
    pred = decode_tags(crf_decode(test_data), test_lengths, labels)
    rows["CRF, LBFGS"] = (*scores(pred, gold), crf_seconds)
    svm_decode, svm_seconds, record = train_svm(train_data, len(vocab), labels, args)
    pred = decode_tags(svm_decode(test_data), test_lengths, labels)
    rows["SVM, BCFW"] = (*scores(pred, gold), svm_seconds)

    print()
    print("| model | training (s) | token accuracy | chunk precision | chunk recall | chunk F1 |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, (chunks, acc, seconds) in rows.items():
        print(f"| {name} | {seconds:.1f} | {acc:.4f} | {chunks.precision:.4f} | {chunks.recall:.4f} | "
              f"{chunks.f1:.4f} |")
    support = Counter(c[0] for g in gold for c in st.metrics.get_chunks(g))
    names = list(rows)
    print()
    print("| chunk type | test chunks | " + " | ".join(f"F1 {n}" for n in names) + " |")
    print("|---|---:|" + "---:|" * len(names))
    for kind, count in support.most_common():
        f1 = [rows[n][0].per_type.get(kind, {}).get("f1", 0.0) for n in names]
        print(f"| {kind} | {count} | " + " | ".join(f"{v:.4f}" for v in f1) + " |")
    print()
    print(f"SVM: {record['passes']} BCFW passes, duality gap {record['gap']:.2e} (primal "
          f"{record['objective']:.4f}{', converged' if record['converged'] else ''}); "
          f"total {time.perf_counter() - began:.1f} s")


if __name__ == "__main__":
    main()
