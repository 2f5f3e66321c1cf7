"""A biaffine dependency parser (BiLSTM encoder, Dozat & Manning 2017) trained as a tree CRF and as a
structured SVM with slack rescaling, on the synthetic treebank of :mod:`structtorch.data.treebank`.

Two experiments, each reporting unlabeled and labeled attachment scores (UAS, LAS) on held-out
sentences and the training time:

1. projective trees: the CRF loss (``st.DependencyCRF``, Eisner's algorithm) against the
   slack-rescaled structured hinge (``st.structured_hinge`` on ``st.DependencyDistribution``,
   exact through Eisner's DP over a Hamming-count dimension);
2. non-projective trees (extraposed prepositional phrases cross the verb's arcs): the projective CRF
   against the non-projective one (the matrix-tree theorem for the loss, Chu-Liu-Edmonds to
   decode), with UAS on the non-projective sentences apart.

Relation labels come from a classifier on (head, word) pairs, trained with cross-entropy on the gold
arcs and applied to the predicted ones.

    python examples/dependency_parser.py [--quick] [--epochs 12] [--out parser.png]
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn

import structtorch as st
from structtorch.data.treebank import RELATIONS, VOCABULARY, Treebank, synthetic_treebank


class BiaffineParser(nn.Module):
    """Word embeddings, a BiLSTM, and biaffine arc scores (B, T + 1, T + 1) with a learned root
    vector at position 0; a relation classifier on the (head, word) pairs."""

    def __init__(self, dim: int = 48, hidden: int = 64, arc_dim: int = 64, rel_dim: int = 32):
        super().__init__()
        self.embed = nn.Embedding(VOCABULARY, dim, padding_idx=0)
        self.root = nn.Parameter(torch.randn(dim) * 0.1)
        self.lstm = nn.LSTM(dim, hidden, batch_first=True, bidirectional=True)
        self.arc_head, self.arc_dep = nn.Linear(2 * hidden, arc_dim), nn.Linear(2 * hidden, arc_dim)
        self.biaffine = nn.Parameter(torch.zeros(arc_dim, arc_dim))
        self.head_bias = nn.Linear(arc_dim, 1)
        self.rel_head, self.rel_dep = nn.Linear(2 * hidden, rel_dim), nn.Linear(2 * hidden, rel_dim)
        self.rel = nn.Linear(2 * rel_dim, len(RELATIONS))

    def encode(self, words: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """(B, T + 1, 2 hidden) states of the root and the words."""
        x = torch.cat([self.root.expand(len(words), 1, -1), self.embed(words)], 1)
        packed = nn.utils.rnn.pack_padded_sequence(x, (lengths + 1).cpu(), batch_first=True, enforce_sorted=False)
        out, _ = self.lstm(packed)
        return nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])[0]

    def arcs(self, states: torch.Tensor) -> torch.Tensor:
        """Arc scores (B, T + 1, T + 1): [b, h, m] = dep_m W head_h + bias(head_h)."""
        head, dep = torch.relu(self.arc_head(states)), torch.relu(self.arc_dep(states))
        return head @ self.biaffine @ dep.transpose(1, 2) + self.head_bias(head)

    def relations(self, states: torch.Tensor, heads: torch.Tensor) -> torch.Tensor:
        """Relation logits (B, T + 1, R) of each word under the given heads (B, T + 1)."""
        head = torch.relu(self.rel_head(states)).gather(1, heads.clamp(min=0)[..., None].expand(
            -1, -1, self.rel_head.out_features))
        return self.rel(torch.cat([head, torch.relu(self.rel_dep(states))], -1))


def arc_loss(kind: str, arcs: torch.Tensor, heads: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """The structured loss of the arc scores: "crf" (projective), "crf-nonprojective" or "slack"."""
    if kind == "slack":
        return st.structured_hinge(st.DependencyDistribution(arcs, lengths), heads, rescaling="slack")
    return st.DependencyCRF(projective=kind == "crf")(arcs, heads, lengths, reduction="token_mean")


def train(kind: str, data: Treebank, epochs: int, seed: int = 0) -> tuple[BiaffineParser, float]:
    """A parser trained with ``kind``'s loss (plus the relations' cross-entropy); its training time."""
    torch.manual_seed(seed)
    model = BiaffineParser()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    began = time.perf_counter()
    for _ in range(epochs):
        for index in torch.randperm(len(data)).split(32):
            batch = data.batch(index)
            states = model.encode(batch.words, batch.lengths)
            loss = arc_loss(kind, model.arcs(states), batch.heads, batch.lengths)
            rel = model.relations(states, batch.heads)
            loss = loss + nn.functional.cross_entropy(rel.flatten(0, 1), batch.relations.flatten(), ignore_index=-1)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model, time.perf_counter() - began


@torch.no_grad()
def parse(model: BiaffineParser, data: Treebank, projective: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Predicted heads and relations (B, T + 1) of every sentence (-1 at the root and padding)."""
    states = model.encode(data.words, data.lengths)
    heads = st.dependency_viterbi(model.arcs(states), data.lengths, projective=projective)[1]
    relations = model.relations(states, heads).argmax(-1)
    return heads, torch.where(heads >= 0, relations, -1)


def attachment(heads: torch.Tensor, relations: torch.Tensor, data: Treebank,
               rows: torch.Tensor | None = None) -> tuple[float, float]:
    """(UAS, LAS) in percent over the words (of the sentences ``rows``)."""
    words = data.heads >= 0
    if rows is not None:
        words = words & rows[:, None]
    right = (heads == data.heads) & words
    return (100 * float(right.sum() / words.sum()),
            100 * float((right & (relations == data.relations)).sum() / words.sum()))


def crossing(heads: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """(B,) bool: the trees with crossing arcs."""
    out = []
    for h, L in zip(heads.tolist(), lengths.tolist(), strict=True):
        spans = [(min(h[m], m), max(h[m], m)) for m in range(1, L + 1)]
        out.append(any(a[0] < b[0] < a[1] < b[1] for a in spans for b in spans))
    return torch.tensor(out)


def draw(model: BiaffineParser, data: Treebank, path: str) -> None:
    """The first test sentence: gold and predicted arcs, and the arc marginals."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sentence = data.batch(torch.tensor([0]))
    with torch.no_grad():
        arcs = model.arcs(model.encode(sentence.words, sentence.lengths))
        marginals = st.dependency_marginals(arcs, sentence.lengths, projective=False)[0]
        predicted = st.dependency_viterbi(arcs, sentence.lengths, projective=False)[1][0]
    L = int(sentence.lengths[0])
    fig, (top, heat) = plt.subplots(1, 2, figsize=(11, 4))
    for heads, sign, color, name in ((sentence.heads[0], 1, "tab:blue", "gold"),
                                     (predicted, -1, "tab:orange", "predicted")):
        for m in range(1, L + 1):
            h = int(heads[m])
            x = torch.linspace(0, 1, 30)
            top.plot(h + (m - h) * x, sign * (abs(m - h) / 2) * torch.sin(torch.pi * x), color=color,
                     label=name if m == 1 else None)
    top.set_xticks(range(L + 1), ["ROOT"] + [str(int(w)) for w in sentence.words[0, :L]], rotation=90)
    top.set_yticks([])
    top.set_title("arcs: gold above, predicted below")
    top.legend(loc="upper right")
    heat.imshow(marginals[:L + 1, 1:L + 1], cmap="viridis", vmin=0, vmax=1)
    heat.set_xticks(range(L), [str(m) for m in range(1, L + 1)])
    heat.set_xlabel("word")
    heat.set_ylabel("head (0 = root)")
    heat.set_title("arc marginals (non-projective CRF)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    print(f"figure: {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small data and few epochs (a smoke run)")
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--out", default=None, help="save a figure (needs matplotlib)")
    args = parser.parse_args()
    torch.set_num_threads(2)
    n_train, n_test, epochs = (150, 60, 2) if args.quick else (1200, 300, args.epochs)

    print("1. projective trees")
    train_set, test_set = synthetic_treebank(n_train, seed=1), synthetic_treebank(n_test, seed=2)
    print(f"{'loss':<24} {'UAS':>6} {'LAS':>6} {'train s':>8}")
    for kind, name in (("crf", "CRF (Eisner)"), ("slack", "slack-rescaled hinge")):
        model, seconds = train(kind, train_set, epochs)
        uas, las = attachment(*parse(model, test_set, projective=True), test_set)
        print(f"{name:<24} {uas:6.1f} {las:6.1f} {seconds:8.1f}")

    print("2. non-projective trees (extraposition)")
    train_set = synthetic_treebank(n_train, extraposition=0.8, seed=3)
    test_set = synthetic_treebank(n_test, extraposition=0.8, seed=4)
    rows = crossing(test_set.heads, test_set.lengths)
    print(f"{int(rows.sum())} of {len(test_set)} test trees have crossing arcs")
    print(f"{'model':<24} {'UAS':>6} {'LAS':>6} {'UAS np':>7} {'train s':>8}")
    for kind, projective, name in (("crf", True, "projective CRF"),
                                   ("crf-nonprojective", False, "non-projective CRF")):
        model, seconds = train(kind, train_set, epochs)
        heads, relations = parse(model, test_set, projective=projective)
        uas, las = attachment(heads, relations, test_set)
        print(f"{name:<24} {uas:6.1f} {las:6.1f} {attachment(heads, relations, test_set, rows)[0]:7.1f} "
              f"{seconds:8.1f}")
    if args.out:
        draw(model, test_set.batch(rows.nonzero().flatten()[:1]), args.out)


if __name__ == "__main__":
    main()
