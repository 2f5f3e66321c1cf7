"""A sparse-feature CRF trained by full-batch L-BFGS, structtorch against crfsuite, side by side.

The workload of issue 26: CoNLL-2000-sized chunking data (by default generated:
``structtorch.data.synthetic_chunking``, 8,936 training and 2,012 test sentences as in the shared
task; ``--data DIR`` reads ``train.txt``/``test.txt``), the CRF++ chunking template (19 unigram
templates: words and POS tags in a window of +-2 with POS bigrams and trigrams and word bigrams),
every (feature, label) pair and every transition as a weight (crfsuite's
``feature.possible_states`` and ``possible_transitions``), the L2 penalty c2 ||w||^2 on the summed
NLL, ``--iters`` L-BFGS iterations with ``--memory`` corrections.

- crfsuite: ``pycrfsuite.Trainer`` (python-crfsuite, one thread: crfsuite has no threads);
- structtorch: ``SparseFeaturePotentials`` (float64) + ``LinearChainCRF`` as the loss of
  ``st.train.fit`` with ``torch.optim.LBFGS`` over the whole batch, the path issue 26 names.

Both objectives are the same function of the weights (checked: structtorch's objective evaluated
at crfsuite's final weights equals crfsuite's reported loss). Reported: seconds per function
evaluation, total seconds, evaluations, final objective, test chunk F1.

    python benchmarks/crf_sparse.py [--n-train 8936 --n-test 2012] [--threads 1 2] [--iters 100]
    python benchmarks/crf_sparse.py --quick          # 500 sentences, 10 iterations
    python benchmarks/crf_sparse.py --min-freq 2     # attributes seen at least twice, both trainers
    python benchmarks/crf_sparse.py --hash 65536     # attributes hashed into 65,536 buckets, both
    python benchmarks/crf_sparse.py --svm margin slack  # also the structured SVMs on the features
    python benchmarks/crf_sparse.py --threads 1 --certificate 0.1  # the SVM to a 1e-3 certificate

``--min-freq`` and ``--hash`` change the attributes both trainers see (crfsuite gets the pruned
or hashed attribute names, so the two objectives stay the same function).
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
import zlib
from collections import Counter
from pathlib import Path

import torch

import structtorch as st
from structtorch.data.conll import read_conll, synthetic_chunking, to_bio

Sentence = tuple[list[str], list[str], list[str]]


def crfpp_features(words: list[str], pos: list[str]) -> list[list[str]]:
    """The CRF++ chunking template (U00-U22) of each token: attribute strings."""
    L = len(words)

    def at(seq: list[str], i: int) -> str:
        return seq[i] if 0 <= i < L else (f"_B-{-i}" if i < 0 else f"_B+{i - L + 1}")

    out = []
    for i in range(L):
        w = [at(words, i + d) for d in range(-2, 3)]
        p = [at(pos, i + d) for d in range(-2, 3)]
        f = [f"U0{k}={w[k]}" for k in range(5)]
        f += [f"U05={w[1]}/{w[2]}", f"U06={w[2]}/{w[3]}"]
        f += [f"U1{k}={p[k]}" for k in range(5)]
        f += [f"U15={p[0]}/{p[1]}", f"U16={p[1]}/{p[2]}", f"U17={p[2]}/{p[3]}", f"U18={p[3]}/{p[4]}"]
        f += [f"U20={p[0]}/{p[1]}/{p[2]}", f"U21={p[1]}/{p[2]}/{p[3]}", f"U22={p[2]}/{p[3]}/{p[4]}"]
        out.append(f)
    return out


class Attributes:
    """The attributes of each token as both trainers see them: the CRF++ template's, pruned to those
    seen at least ``min_freq`` times in training, or hashed into ``buckets`` names (CRC-32)."""

    def __init__(self, train: list[Sentence], min_freq: int = 1, buckets: int | None = None) -> None:
        self.buckets, self.keep = buckets, None
        if min_freq > 1:
            counts = Counter(f for w, p, _ in train for tok in crfpp_features(w, p) for f in tok)
            self.keep = {f for f, c in counts.items() if c >= min_freq}

    def __call__(self, words: list[str], pos: list[str]) -> list[list[str]]:
        feats = crfpp_features(words, pos)
        if self.keep is not None:
            feats = [[f for f in tok if f in self.keep] for tok in feats]
        if self.buckets is not None:
            feats = [[f"h{zlib.crc32(f.encode()) % self.buckets}" for f in tok] for tok in feats]
        return feats


def load(args: argparse.Namespace) -> tuple[list[Sentence], list[Sentence], str]:
    if args.data is not None:
        train, test = (read_conll(args.data / name) for name in ("train.txt", "test.txt"))
        source = str(args.data)
    else:
        train = synthetic_chunking(args.n_train, seed=0, vocab_size=args.vocab)
        test = synthetic_chunking(args.n_test, seed=1, vocab_size=args.vocab, unknown=0.1)
        source = f"generated ({args.n_train} / {args.n_test} sentences, vocab_size {args.vocab})"
    fix = [[(list(s[0]), list(s[1]), to_bio(s[2])) for s in part] for part in (train, test)]
    return fix[0], fix[1], source


def encode(sentences: list[Sentence], vocab: dict[str, int], labels: list[str], grow: bool,
           attributes=crfpp_features):
    """Feature ids (B, T, 19) (-1: padding, pruned or unseen), labels (B, T), lengths (B,)."""
    feats = [attributes(s[0], s[1]) for s in sentences]
    if grow:
        for sent in feats:
            for tok in sent:
                for f in tok:
                    vocab.setdefault(f, len(vocab))
    T = max(len(s[0]) for s in sentences)
    ids = torch.full((len(sentences), T, 19), -1, dtype=torch.long)
    tags = torch.zeros(len(sentences), T, dtype=torch.long)
    index = {t: i for i, t in enumerate(labels)}
    for b, (sent, s) in enumerate(zip(feats, sentences, strict=True)):
        for t, tok in enumerate(sent):
            known = [vocab[f] for f in tok if f in vocab]
            ids[b, t, : len(known)] = torch.tensor(known, dtype=torch.long)
        tags[b, : len(sent)] = torch.tensor([index[t] for t in s[2]])
    return ids, tags, torch.tensor([len(s[0]) for s in sentences])


def run_crfsuite(train, test, args, attributes) -> dict:
    import pycrfsuite

    trainer = pycrfsuite.Trainer(verbose=False)
    for words, pos, tags in train:
        trainer.append(attributes(words, pos), tags)
    trainer.set_params(
        {
            "c1": 0.0,
            "c2": args.c2,
            "max_iterations": args.iters,
            "num_memories": args.memory,
            "feature.possible_states": True,
            "feature.possible_transitions": True,
            "epsilon": 0.0,
            "delta": 0.0,
        }
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "model.crfsuite")
        began = time.perf_counter()
        trainer.train(path)
        seconds = time.perf_counter() - began
        tagger = pycrfsuite.Tagger()
        tagger.open(path)
        predicted = [tagger.tag(attributes(w, p)) for w, p, _ in test]
        info = tagger.info()
    log = trainer.logparser
    evaluations = sum(int(it.get("linesearch_trials", 1)) for it in log.iterations)
    return {
        "seconds": seconds,
        "objective": float(log.last_iteration["loss"]),
        "iterations": len(log.iterations),
        "evaluations": evaluations,
        "f1": float(st.chunk_f1(predicted, [t for _, _, t in test])),
        "state": info.state_features,
        "transitions": info.transitions,
    }


class Emissions(torch.nn.Module):
    """Feature ids (B, T, K) -> unary scores (B, T, N): the CRF holds the transitions."""

    def __init__(self, num_features: int, num_labels: int) -> None:
        super().__init__()
        self.features = st.SparseFeaturePotentials(num_features, num_labels, bias=False).double()
        self.features.transitions.requires_grad_(False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.features(ids)[0]


class Trace:
    """crfsuite's objective (summed NLL + c2 ||w||^2) at every evaluation fit makes, with its time:
    a forward hook on the CRF (fit minimizes the same function divided by n)."""

    def __init__(self, model: Emissions, crf: st.LinearChainCRF, n: int, c2: float) -> None:
        self.params = [model.features.emission.weight, crf.transitions]
        self.n, self.c2, self.points, self.began = n, c2, [], time.perf_counter()
        crf.register_forward_hook(self.record)

    def record(self, module, inputs, output) -> None:
        with torch.no_grad():
            value = float(output.sum()) + self.c2 * sum(float((p * p).sum()) for p in self.params)
        self.points.append((time.perf_counter() - self.began, value))

    def reached(self, target: float) -> float | None:
        """Seconds until the objective was within 1e-6 (relative) of ``target`` or below."""
        return next((t for t, v in self.points if v <= target * (1 + 1e-6)), None)


def run_structtorch(train, test, args, threads: int, target: float, attributes) -> dict:
    """``st.train.fit`` with the CRF as the loss and full-batch ``torch.optim.LBFGS``: the path a
    user reaches for (fit minimizes the mean NLL + l2 / 2 ||w||^2, with l2 = 2 c2 / n the same
    minimizer as crfsuite's objective)."""
    torch.set_num_threads(threads)
    labels = sorted({t for _, _, tags in train for t in tags})
    vocab: dict[str, int] = {}
    ids, tags, lengths = encode(train, vocab, labels, grow=True, attributes=attributes)
    data = st.SequenceData(ids, tags, lengths)
    model = Emissions(len(vocab), len(labels))
    crf = st.LinearChainCRF(len(labels)).double()
    for p in (crf.start, crf.end):  # crfsuite has no start/end scores
        p.requires_grad_(False).zero_()
    trace = Trace(model, crf, len(data), args.c2)
    lbfgs = torch.optim.LBFGS(
        [model.features.emission.weight, crf.transitions],
        max_iter=args.iters,
        history_size=args.memory,
        line_search_fn="strong_wolfe",
        tolerance_grad=0.0,
        tolerance_change=0.0,
    )
    trace.began = time.perf_counter()
    st.train.fit(
        model,
        data,
        crf,
        optimizer=lbfgs,
        epochs=1,
        l2=2 * args.c2 / len(data),
        batch_size=len(data),
        objective=False,
        progress=False,
    )
    seconds = time.perf_counter() - trace.began
    with torch.no_grad():
        test_ids, _, test_lengths = encode(test, vocab, labels, grow=False, attributes=attributes)
        path = crf.decode(model(test_ids), lengths=test_lengths)[1]
    predicted = [
        [labels[i] for i in row[:n]] for row, n in zip(path.tolist(), test_lengths.tolist(), strict=True)
    ]
    return {
        "seconds": seconds,
        "objective": min(v for _, v in trace.points),
        "evaluations": len(trace.points),
        "to_target": trace.reached(target),
        "f1": float(st.chunk_f1(predicted, [t for _, _, t in test])),
        "vocab": vocab,
        "labels": labels,
        "model": model,
        "crf": crf,
        "data": data,
    }


def run_svm(train, test, args, attributes, rescaling: str) -> dict:
    """The structured SVM (Hamming hinge) on the same features and the same L2 weight, one thread:
    margin rescaling by BCFW (``fit(solver="bcfw")``), slack rescaling by 1-slack cutting planes
    (``fit(solver="cutting_plane")``), for ``--svm-passes`` passes or iterations."""
    data, vocab, labels = svm_data(train, attributes)
    # BCFW's steps touch one sequence's features: sparse gradients keep them O(support)
    model = st.SparseFeaturePotentials(len(vocab), len(labels), bias=False,
                                       sparse_grad=rescaling == "margin").double()
    began = time.perf_counter()
    loss = st.StructuredHingeLoss(rescaling)
    solver = "bcfw" if rescaling == "margin" else "cutting_plane"
    options = {"tol": 0.0} if rescaling == "margin" else {"variant": "one_slack", "tol": 0.0}
    history = st.train.fit(model, data, loss, solver=solver, epochs=args.svm_passes,
                           l2=2 * args.c2 / len(data), objective=False, progress=False, metrics=(),
                           solver_options=options)
    seconds = time.perf_counter() - began
    last = history.epochs[-1]
    return {"seconds": seconds, "passes": len(history), "primal": last["objective"], "gap": last["gap"],
            "f1": tagger_f1(model, test, vocab, labels, attributes), "solver": solver}


def svm_data(train, attributes) -> tuple[st.SequenceData, dict[str, int], list[str]]:
    """The training sentences as feature ids (one thread from here on), their vocabulary and tags."""
    torch.set_num_threads(1)
    labels = sorted({t for _, _, tags in train for t in tags})
    vocab: dict[str, int] = {}
    ids, tags, lengths = encode(train, vocab, labels, grow=True, attributes=attributes)
    return st.SequenceData(ids, tags, lengths), vocab, labels


def tagger_f1(model, test, vocab, labels, attributes) -> float:
    """The test chunk F1 of the model's Viterbi tags."""
    with torch.no_grad():
        test_ids, _, test_lengths = encode(test, vocab, labels, grow=False, attributes=attributes)
        path = st.viterbi(*model(test_ids), lengths=test_lengths)[1]
    rows = zip(path.tolist(), test_lengths.tolist(), strict=True)
    predicted = [[labels[i] for i in row[:n]] for row, n in rows]
    return float(st.chunk_f1(predicted, [t for _, _, t in test]))


def run_certificate(train, test, args, attributes, C: float) -> dict:
    """The margin-rescaled Hamming SVM (``fit``'s C convention, lambda = 1 / (n C)) by 1-slack
    cutting planes until the duality gap is at most ``--rtol`` of the primal, one thread."""
    data, vocab, labels = svm_data(train, attributes)
    model = st.SparseFeaturePotentials(len(vocab), len(labels), bias=False).double()
    began = time.perf_counter()
    history = st.train.fit(model, data, st.StructuredHingeLoss("margin"), solver="cutting_plane",
                           epochs=100_000, C=C, objective=False, progress=False, metrics=(),
                           solver_options={"variant": "one_slack", "tol": 0.0, "rtol": args.rtol})
    seconds = time.perf_counter() - began
    last = history.epochs[-1]
    return {"seconds": seconds, "iterations": len(history), "primal": last["objective"], "gap": last["gap"],
            "qp": last["qp_time"], "planes": last["constraints"], "converged": history.converged,
            "f1": tagger_f1(model, test, vocab, labels, attributes),
            "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def crfsuite_objective_check(mine: dict, theirs: dict, c2: float) -> float:
    """structtorch's objective at crfsuite's final weights (equal to crfsuite's loss when the two
    optimize the same function)."""
    vocab, labels, model, crf = mine["vocab"], mine["labels"], mine["model"], mine["crf"]
    index = {t: i for i, t in enumerate(labels)}
    weight, trans = model.features.emission.weight, crf.transitions
    with torch.no_grad():
        weight.zero_()
        trans.zero_()
        for (attr, label), value in theirs["state"].items():
            if attr in vocab:
                weight[vocab[attr], index[label]] = value
        for (a, b), value in theirs["transitions"].items():
            trans[index[a], index[b]] = value
        data = mine["data"]
        nll = crf(model(data.x), data.labels, lengths=data.lengths, reduction="sum")
        return float(nll) + c2 * float((weight * weight).sum() + (trans * trans).sum())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, help="a folder with CoNLL-2000 train.txt and test.txt")
    p.add_argument("--n-train", type=int, default=8936)
    p.add_argument("--n-test", type=int, default=2012)
    p.add_argument("--vocab", type=int, default=2000, help="noun forms of the generator's lexicon")
    p.add_argument("--iters", type=int, default=100)
    p.add_argument("--memory", type=int, default=6)
    p.add_argument("--c2", type=float, default=0.125)
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--min-freq", type=int, default=1, help="drop attributes seen fewer times in training")
    p.add_argument("--hash", type=int, default=None, help="hash the attributes into this many buckets")
    p.add_argument("--svm", nargs="*", choices=["margin", "slack"], default=None,
                   help="also train the structured SVM (margin: BCFW; slack: 1-slack cutting planes)")
    p.add_argument("--svm-passes", type=int, default=10)
    p.add_argument("--certificate", type=float, default=None, metavar="C",
                   help="also train the margin-rescaled SVM with this C to a certificate (1-slack)")
    p.add_argument("--rtol", type=float, default=1e-3, help="--certificate's relative duality gap")
    args = p.parse_args()
    if args.quick:
        args.n_train, args.n_test, args.iters, args.vocab = 500, 200, 10, 200
    train, test, source = load(args)
    tokens = sum(len(s[0]) for s in train)
    print(f"data: {source}; {len(train)} training sentences ({tokens} tokens), {len(test)} test")
    attributes = Attributes(train, args.min_freq, args.hash)
    theirs = run_crfsuite(train, test, args, attributes)
    print(
        f"crfsuite: {theirs['seconds']:.2f} s, {theirs['iterations']} iterations, objective "
        f"{theirs['objective']:.6g}, test chunk F1 {theirs['f1']:.4f}",
        flush=True,
    )
    rows = [("crfsuite (1 thread)", theirs)]
    for threads in args.threads:
        mine = run_structtorch(train, test, args, threads, theirs["objective"], attributes)
        rows.append(
            (f"structtorch, `fit` + torch LBFGS ({threads} thread{'s' if threads > 1 else ''})", mine)
        )
        reached = "never" if mine["to_target"] is None else f"{mine['to_target']:.2f} s"
        print(
            f"structtorch, {threads} thread(s): {mine['seconds']:.2f} s, {mine['evaluations']} evaluations "
            f"({mine['seconds'] / max(mine['evaluations'], 1):.3f} s each), "
            f"objective {mine['objective']:.6g} "
            f"(crfsuite's final objective reached after {reached}), test chunk F1 {mine['f1']:.4f}",
            flush=True,
        )
    last = rows[-1][1]
    weights = len(last["vocab"]) * len(last["labels"]) + len(last["labels"]) ** 2
    check = crfsuite_objective_check(last, theirs, args.c2)
    print(
        f"\n{weights} weights; structtorch's objective at crfsuite's weights: {check:.6g} "
        f"(crfsuite reports {theirs['objective']:.6g})\n"
    )
    print(
        "| trainer | total s | evaluations | s per evaluation | final objective | s to crfsuite's objective "
        "| test chunk F1 |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, r in rows:
        evals = r["evaluations"]
        target = r["seconds"] if r is theirs else r["to_target"]
        print(
            f"| {name} | {r['seconds']:.1f} | {evals} | {r['seconds'] / max(evals, 1):.3f} | "
            f"{r['objective']:.6g} | {'-' if target is None else f'{target:.1f}'} | {r['f1']:.4f} |"
        )
    if args.certificate is not None:
        cert = run_certificate(train, test, args, attributes, args.certificate)
        print(f"\nstructured SVM to a certificate (margin-rescaled Hamming hinge, C = {args.certificate}, "
              f"1-slack cutting planes, 1 thread): {cert['iterations']} iterations in "
              f"{cert['seconds']:.1f} s "
              f"({cert['seconds'] / theirs['seconds']:.2f}x crfsuite's {theirs['seconds']:.1f} s), of it "
              f"dual QP {cert['qp']:.1f} s; relative gap {cert['gap'] / cert['primal']:.3g} "
              f"({'reached' if cert['converged'] else 'NOT reached'}), primal {cert['primal']:.6g}, "
              f"{cert['planes']:.0f} planes, process peak RSS {cert['peak_mb']:.0f} MB, "
              f"test chunk F1 {cert['f1']:.4f}")
    for rescaling in args.svm or ():
        svm = run_svm(train, test, args, attributes, rescaling)
        print(f"\nstructured SVM ({rescaling}-rescaled Hamming hinge, {svm['solver']}, 1 thread, "
              "l2 = 2 c2 / n): "
              f"{svm['passes']} passes in {svm['seconds']:.1f} s, primal {svm['primal']:.6g}, duality gap "
              f"{svm['gap']:.3g} ({svm['gap'] / svm['primal']:.2%} of the primal), "
              f"test chunk F1 {svm['f1']:.4f}")


if __name__ == "__main__":
    main()
