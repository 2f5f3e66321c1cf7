"""Stage 1 of the gene-structure setup: signal detectors and content sensors, and Table 1 metrics.

Rätsch & Sonnenburg (2007) train SVM splice-site detectors on windows around GT/AG and spectrum-
kernel content sensors on exon and intron sequences (split 1), then feed their outputs to the HSM
SVM (splits 2-4). Here the detectors are logistic regressions on one-hot windows around every
candidate site (ATG, GT, AG and stop codons), and the content sensors logistic regressions on the
k-mer frequencies of a segment, so that a sensor's output on any segment is the mean of
per-position contributions (the tracks that :class:`structtorch.SegmentPLiF` averages).

Track convention (matching :class:`structtorch.HiddenSemiMarkovSVM`): ``signals[b, t, k]`` scores
a segment *ending after position t* of a label that uses signal k, -inf where the consensus is
absent:

* start: the gene starts at t+1 (ATG at t+1..t+3); ends an intergenic segment. The sequence end
  is always a valid end of the last intergenic segment (value 0 at L-1).
* donor: the intron starts at t+1 (GT at t+1, t+2); ends a first or internal exon.
* acceptor: the intron ends at t (AG at t-1, t); ends an intron.
* stop: a stop codon at t-2..t; ends a single or last exon.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .genes import (
    EXON_FIRST,
    EXON_INTERNAL,
    EXON_LAST,
    EXON_SINGLE,
    EXONS,
    INTERGENIC,
    INTRON,
    NUCLEOTIDES,
    START_CODON,
    STOP_CODONS,
    GeneData,
)

__all__ = ["SIGNALS", "CONTENTS", "GeneSensors", "candidate_sites", "true_sites", "gene_metrics",
           "segments_of"]

SIGNALS = ("start", "donor", "acceptor", "stop")
CONTENTS = ("exon", "intron", "intergenic")
# for each signal: (consensus words, offset of the word's first base from the track position t)
_CONSENSUS = {"start": ((START_CODON,), 1), "donor": (("GT",), 1), "acceptor": (("AG",), -1),
              "stop": (STOP_CODONS, -2)}
# for each signal: the labels whose segments end there
SIGNAL_LABELS = {"start": (INTERGENIC,), "donor": (EXON_FIRST, EXON_INTERNAL), "acceptor": (INTRON,),
                 "stop": (EXON_SINGLE, EXON_LAST)}
CONTENT_LABELS = {"exon": EXONS, "intron": (INTRON,), "intergenic": (INTERGENIC,)}


def _inside(data: GeneData) -> Tensor:
    return torch.arange(data.dna.shape[1]) < data.lengths[:, None]


def candidate_sites(data: GeneData, signal: str) -> Tensor:
    """(n, T) bool: track positions t where the consensus of ``signal`` is present."""
    words, offset = _CONSENSUS[signal]
    n, T = data.dna.shape
    inside = _inside(data)
    found = torch.zeros(n, T, dtype=torch.bool)
    for word in words:
        hit = inside.clone()
        for j, base in enumerate(word):
            pos = torch.arange(T) + offset + j
            ok = (pos >= 0) & (pos < T)
            shifted = torch.zeros(n, T, dtype=torch.bool)
            shifted[:, ok] = (data.dna[:, pos[ok]] == NUCLEOTIDES.index(base)) & inside[:, pos[ok]]
            hit &= shifted
        found |= hit
    return found


def true_sites(data: GeneData, signal: str) -> Tensor:
    """(n, T) bool: positions t after which a segment of a label using ``signal`` ends, excluding
    the sequence end."""
    inside = _inside(data)
    nxt = torch.cat([data.starts[:, 1:], torch.zeros_like(data.starts[:, :1])], 1)
    ends = inside & nxt
    labels = torch.tensor(SIGNAL_LABELS[signal])
    return ends & torch.isin(data.labels, labels)


def segments_of(labels: Tensor, starts: Tensor, length: int) -> list[tuple[int, int, int]]:
    """[(s, e, label)] of one row's segmentation."""
    pos = starts[:length].nonzero().squeeze(1).tolist()
    if not pos or pos[0] != 0:
        pos = [0, *pos]
    bounds = [*pos, length]
    return [(s, e, int(labels[s])) for s, e in zip(bounds[:-1], bounds[1:], strict=True) if e > s]


def gene_metrics(labels: Tensor, starts: Tensor, data: GeneData) -> dict[str, float]:
    """The metrics of Table 1 for predicted segmentations (labels (n, T), starts (n, T)).

    gene error: fraction of sequences with any exon wrong (missing, extra or with a wrong
    boundary); exon Sn/Sp: exact exons found / true exons, / predicted exons; nucleotide Sn/Sp:
    exonic positions predicted exonic / true exonic positions, / predicted exonic positions.
    """
    exon_labels = torch.tensor(EXONS)
    wrong_genes = found = n_true = n_pred = 0
    for i in range(len(data)):
        L = int(data.lengths[i])
        truth = {(s, e) for s, e, k in segments_of(data.labels[i], data.starts[i], L) if k in EXONS}
        pred = {(s, e) for s, e, k in segments_of(labels[i], starts[i], L) if k in EXONS}
        wrong_genes += truth != pred
        found, n_true, n_pred = found + len(truth & pred), n_true + len(truth), n_pred + len(pred)
    inside = _inside(data)
    true_exonic = torch.isin(data.labels, exon_labels) & inside
    pred_exonic = torch.isin(labels, exon_labels) & inside
    both = int((true_exonic & pred_exonic).sum())
    return {
        "gene error": wrong_genes / max(len(data), 1),
        "exon Sn": found / max(n_true, 1),
        "exon Sp": found / max(n_pred, 1),
        "nucleotide Sn": both / max(int(true_exonic.sum()), 1),
        "nucleotide Sp": both / max(int(pred_exonic.sum()), 1),
    }


def _logistic(X: Tensor, y: Tensor, l2: float, steps: int = 200) -> tuple[Tensor, Tensor]:
    """L2-regularized logistic regression by L-BFGS; class-balanced; returns (w (F,), b ())."""
    X, y = X.double(), y.double()
    pos = y.mean().clamp(1e-6, 1 - 1e-6)
    weight = torch.where(y > 0, 0.5 / pos, 0.5 / (1 - pos))
    w = torch.zeros(X.shape[1], dtype=torch.float64, requires_grad=True)
    b = torch.zeros((), dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([w, b], max_iter=steps, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        logits = X @ w + b
        per_example = torch.nn.functional.binary_cross_entropy_with_logits(logits, y, reduction="none")
        loss = (weight * per_example).mean()
        loss = loss + 0.5 * l2 * w.pow(2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    return w.detach(), b.detach()


def _windows(data: GeneData, rows: Tensor, cols: Tensor, radius: int) -> Tensor:
    """(M, (2 radius + 1) * 4) one-hot bases around (rows, cols); zeros outside the sequence."""
    offsets = torch.arange(-radius, radius + 1)
    pos = cols[:, None] + offsets
    ok = (pos >= 0) & (pos < data.lengths[rows, None])
    bases = data.dna[rows[:, None], pos.clamp(0, data.dna.shape[1] - 1)]
    onehot = torch.nn.functional.one_hot(bases, 4).double() * ok.unsqueeze(2)
    return onehot.reshape(len(rows), -1)


def _kmers(data: GeneData, k: int) -> Tensor:
    """(n, T) int64 id of the k-mer starting at each position (bases past the end read as A)."""
    n, T = data.dna.shape
    ids = torch.zeros(n, T, dtype=torch.long)
    inside = _inside(data)
    for j in range(k):
        shifted = torch.zeros(n, T, dtype=torch.long)
        shifted[:, : T - j] = torch.where(inside[:, j:], data.dna[:, j:], 0)
        ids = ids * 4 + shifted
    return ids


@dataclass
class GeneSensors:
    """Signal detectors (one per entry of SIGNALS) and content sensors (one per entry of CONTENTS).

    Attributes
    ----------
    detectors : dict signal -> (w, b), logistic regressions on one-hot windows of ``radius``
    content_w : Tensor (3, 4**k) and content_b : Tensor (3,), one-vs-rest logistic regressions on
        segment k-mer frequencies
    """

    detectors: dict[str, tuple[Tensor, Tensor]]
    content_w: Tensor
    content_b: Tensor
    radius: int
    k: int

    @classmethod
    def fit(cls, data: GeneData, *, radius: int = 20, k: int = 3, l2: float = 1e-3,
            pieces_per_segment: int = 4, seed: int = 0) -> GeneSensors:
        """Train on ``data`` (split 1): detectors on true sites vs decoys with the same consensus;
        content sensors on true segments and random sub-segments of them."""
        detectors = {}
        for signal in SIGNALS:
            cand, true = candidate_sites(data, signal), true_sites(data, signal)
            rows, cols = cand.nonzero(as_tuple=True)
            detectors[signal] = _logistic(_windows(data, rows, cols, radius), true[rows, cols].double(), l2)
        g = torch.Generator().manual_seed(seed)
        kmers = _kmers(data, k)
        feats, classes = [], []
        for i in range(len(data)):
            for s, e, label in segments_of(data.labels[i], data.starts[i], int(data.lengths[i])):
                c = next(j for j, name in enumerate(CONTENTS) if label in CONTENT_LABELS[name])
                pieces = [(s, e)]
                for _ in range(pieces_per_segment):
                    d = int(torch.randint(20, e - s + 1, (1,), generator=g)) if e - s > 20 else e - s
                    a = s + int(torch.randint(0, e - s - d + 1, (1,), generator=g))
                    pieces.append((a, a + d))
                for a, b in pieces:
                    feats.append(torch.bincount(kmers[i, a:b], minlength=4**k).double() / (b - a))
                    classes.append(c)
        X, y = torch.stack(feats), torch.tensor(classes)
        fitted = [_logistic(X, (y == c).double(), l2) for c in range(len(CONTENTS))]
        return cls(detectors, torch.stack([w for w, _ in fitted]), torch.stack([b for _, b in fitted]),
                   radius, k)

    @torch.no_grad()
    def tracks(self, data: GeneData) -> tuple[Tensor, Tensor]:
        """(signals (n, T, 4) float64, -inf off the consensus; contents (n, T, 3) float64)."""
        n, T = data.dna.shape
        signals = torch.full((n, T, len(SIGNALS)), float("-inf"), dtype=torch.float64)
        for j, signal in enumerate(SIGNALS):
            rows, cols = candidate_sites(data, signal).nonzero(as_tuple=True)
            w, b = self.detectors[signal]
            signals[rows, cols, j] = _windows(data, rows, cols, self.radius) @ w + b
        last = (data.lengths - 1).clamp(min=0)
        signals[torch.arange(n), last, SIGNALS.index("start")] = 0.0  # the sequence end
        kmers = _kmers(data, self.k)
        contents = self.content_w.T[kmers] + self.content_b  # (n, T, 3)
        return signals, torch.where(_inside(data).unsqueeze(2), contents, 0.0)
