"""Metrics of predicted label sequences: token accuracy and Hamming distance (the metrics of
:func:`structtorch.train.fit`), chunk F1 (conlleval) and segmental F1@k.

:func:`accuracy`, :func:`hamming` and every metric of ``fit(metrics=...)`` take the Viterbi paths
(B, T) (-1 beyond each length), the gold labels (B, T) and the lengths (B,) of a whole data set.

:func:`chunk_f1` gives chunk-level precision, recall and F1 with the semantics of the CoNLL
``conlleval`` script.

A chunk is a maximal run of tags read by conlleval's rules: it starts at a ``B-`` tag, at an
``I-`` tag after ``O`` (or after a tag of another type, or after the end of a chunk), and ends
where the next tag does not continue it. A predicted chunk counts as correct only when its type,
its first and its last position all equal those of a gold chunk. Chunks never cross sequences.

:func:`segment_f1` is the segmental F1@k of temporal action segmentation (Lea et al. 2017): segments
are maximal runs of one label, matched to gold segments of the same label by their overlap (IoU).
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ._checks import check_lengths
from .schemes import check_scheme, parse_tag

__all__ = ["accuracy", "hamming", "sequence_metrics", "chunk_f1", "ChunkScores", "get_chunks", "segment_f1",
           "get_segments"]

Metric = Callable[[Tensor, Tensor, Tensor], Any]  # fn(path, labels, lengths) -> float


# ---------------------------------------------------------------------------------------------
# token accuracy and Hamming distance (the metrics of fit and evaluate)


def _inside(labels: Tensor, lengths: Tensor) -> Tensor:
    return torch.arange(labels.shape[1], device=labels.device) < lengths[:, None]


def _missed_spans(path: Tensor, labels: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
    """(gold labeled spans missed (B,), gold labeled spans (B,)) of constituency trees given as 0/1
    spans (B, T, T, N), inside each length."""
    from .trees.layout import inside_spans

    gold = (labels != 0) & inside_spans(lengths, labels.shape[1])
    return (gold & (path == 0)).flatten(1).sum(1), gold.flatten(1).sum(1)


def accuracy(path: Tensor, labels: Tensor, lengths: Tensor) -> float:
    """Token accuracy of ``path`` (B, T) against ``labels`` (B, T) inside ``lengths`` (B,); for
    constituency trees (0/1 spans (B, T, T, N)) the fraction of gold labeled spans found (trees of
    one length have as many spans: recall = precision)."""
    if labels.dim() == 4:
        missed, gold = _missed_spans(path, labels, lengths)
        return 1.0 - float(missed.sum()) / max(int(gold.sum()), 1)
    inside = _inside(labels, lengths)
    wrong = (path != labels) & inside
    return 1.0 - float(wrong.sum()) / max(int(inside.sum()), 1)


def hamming(path: Tensor, labels: Tensor, lengths: Tensor) -> float:
    """Mean Hamming distance per sequence of ``path`` (B, T) to ``labels`` (B, T) (constituency
    trees: the gold labeled spans missed)."""
    if labels.dim() == 4:
        missed = _missed_spans(path, labels, lengths)[0]
        return float(missed.double().mean()) if len(labels) else 0.0
    wrong = (path != labels) & _inside(labels, lengths)
    return float(wrong.sum(1).double().mean()) if len(labels) else 0.0


BUILTIN_METRICS: dict[str, Metric] = {"accuracy": accuracy, "hamming": hamming}


def sequence_metrics(path: Tensor, labels: Tensor, lengths: Tensor) -> dict[str, float]:
    """Token accuracy and mean Hamming distance per sequence of predicted ``path`` (B, T)."""
    return {name: fn(path, labels, lengths) for name, fn in BUILTIN_METRICS.items()}


def resolve_metrics(metrics: str | Sequence[str] | Mapping[str, Metric]) -> dict[str, Metric]:
    """The ``metrics=`` argument of :func:`structtorch.train.fit` as ``{name: fn}``: names from
    :data:`BUILTIN_METRICS`, or a dict of user functions ``fn(path, labels, lengths)`` (checked)."""
    if isinstance(metrics, Mapping):
        bad = [k for k, fn in metrics.items() if not isinstance(k, str) or not callable(fn)]
        if bad:
            raise TypeError(f"metrics must map names to callables fn(path, labels, lengths) -> float; "
                            f"entry {bad[0]!r} is not")
        return dict(metrics)
    if isinstance(metrics, str):
        metrics = [metrics]
    unknown = sorted(set(metrics) - set(BUILTIN_METRICS))
    if unknown:
        raise ValueError(f"unknown metrics {unknown}; choose from {sorted(BUILTIN_METRICS)} or pass a dict "
                         "{name: fn(path, labels, lengths) -> float}")
    return {m: BUILTIN_METRICS[m] for m in metrics}


# ---------------------------------------------------------------------------------------------
# chunk F1 (conlleval)


@dataclass
class ChunkScores:
    """Chunk precision, recall and F1 (fractions in [0, 1]; 0 where a denominator is 0).

    ``per_type[type]`` holds ``precision``, ``recall``, ``f1`` and ``support`` (the number of gold
    chunks of that type) for every type seen in the gold or the predicted tags. ``float(scores)``
    is the overall F1, so :func:`chunk_f1` can serve as a metric of :func:`structtorch.train.fit`.
    """

    precision: float
    recall: float
    f1: float
    num_pred: int
    num_gold: int
    num_correct: int
    per_type: dict[str, dict[str, float]] = field(default_factory=dict)

    def __float__(self) -> float:
        return self.f1


def _ends(prev: str, tag: str, prev_type: str, kind: str) -> bool:
    """Whether a chunk ending at the previous tag ends before ``tag`` (conlleval's rules)."""
    if prev in ("E", "S"):
        return True
    if prev in ("B", "I") and tag in ("B", "S", "O"):
        return True
    return prev != "O" and prev_type != kind


def _starts(prev: str, tag: str, prev_type: str, kind: str) -> bool:
    """Whether a chunk starts at ``tag`` (conlleval's rules)."""
    if tag in ("B", "S"):
        return True
    if tag in ("I", "E") and prev in ("E", "S", "O"):
        return True
    return tag != "O" and prev_type != kind


def get_chunks(tags: Sequence[str], scheme: str = "BIO", name: str = "tags") -> list[tuple[str, int, int]]:
    """The chunks of one tag sequence as ``(type, first, last)`` (inclusive) positions; ``name``
    names the sequence in errors."""
    check_scheme(scheme)
    if isinstance(tags, str) or not isinstance(tags, Sequence):
        raise TypeError(f"{name} must be a sequence of tag strings, got {type(tags).__name__}")
    chunks = []
    prev, prev_type, begin = "O", "", 0
    for i, tag_name in enumerate([*tags, "O"]):
        tag, kind = parse_tag(tag_name, scheme, f"{name}[{i}]")
        if _ends(prev, tag, prev_type, kind) and prev != "O":
            chunks.append((prev_type, begin, i - 1))
        if _starts(prev, tag, prev_type, kind):
            begin = i
        prev, prev_type = tag, kind
    return chunks


def _names(x: object, lengths: object, labels: Sequence[str] | None, name: str) -> list[list[str]]:
    """``x`` (label ids or tag names, see :func:`chunk_f1`) as lists of tag names, one per sequence."""
    form = (f"{name} must be a (B, T) integer tensor (or numpy array) of label ids or a list of tag-name "
            "sequences such as [['B-NP', 'I-NP', 'O'], ...]")
    if isinstance(x, np.ndarray) and x.dtype.kind in "iu":
        x = torch.from_numpy(x)
    if isinstance(x, Tensor):
        return _id_names(x, lengths, labels, name, form)
    if isinstance(x, (np.ndarray, str)) or not isinstance(x, Sequence):
        of = f" of {x.dtype}" if isinstance(x, np.ndarray) else ""
        raise TypeError(f"{form}, got {type(x).__name__}{of}")
    if lengths is not None:
        raise ValueError(f"lengths applies to label-id tensors; {name} is a list of tag-name sequences")
    if len(x) and isinstance(x[0], str):
        raise TypeError(f"{form}, got a flat list of str: wrap one sentence's tags in a list, [{name}]")
    for b, seq in enumerate(x):
        if isinstance(seq, str) or not isinstance(seq, Sequence):
            raise TypeError(f"{name}[{b}] must be a sequence of tag strings, got {type(seq).__name__}")
        if len(seq) and isinstance(seq[0], numbers.Integral):
            raise TypeError(f"{name}[{b}] holds integers: pass label ids as a (B, T) tensor with labels= "
                            "(the tag name of each id), or tag strings")
    return [list(seq) for seq in x]


def _id_names(x: Tensor, lengths: object, labels: Sequence[str] | None, name: str,
              form: str) -> list[list[str]]:
    """Label-id rows (B, T) as lists of tag names, each cut at its length."""
    if x.dtype.is_floating_point or x.dtype.is_complex or x.dtype == torch.bool:
        raise TypeError(f"{form}, got a tensor of {x.dtype}")
    if x.dim() != 2:
        raise ValueError(f"{name} must have shape (B, T), got {tuple(x.shape)}")
    if labels is None:
        raise ValueError(f"labels (the tag name of each label id) is needed when {name} is a tensor")
    if isinstance(labels, str) or not isinstance(labels, Sequence):
        raise TypeError(f"labels must be a sequence of tag names, got {type(labels).__name__}")
    B, T = x.shape
    lengths = check_lengths(lengths, B, T, x.device, name)
    rows = x.tolist()
    out = []
    for b, n in enumerate(lengths.tolist()):
        if not 0 <= n <= T:  # also with value checks off: the ids are read on the host
            raise ValueError(f"lengths must lie in [0, T] = [0, {T}], got lengths[{b}] = {n}")
        ids = rows[b][:n]
        bad = [i for i in ids if not 0 <= i < len(labels)]
        if bad:
            raise ValueError(f"{name} holds label id {bad[0]} in row {b}, outside [0, {len(labels)})")
        out.append([labels[i] for i in ids])
    return out


def _prf(correct: int, pred: int, gold: int) -> tuple[float, float, float]:
    p = correct / pred if pred else 0.0
    r = correct / gold if gold else 0.0
    return p, r, (2 * p * r / (p + r) if p + r else 0.0)


def chunk_f1(
    pred: Tensor | Sequence[Sequence[str]],
    gold: Tensor | Sequence[Sequence[str]],
    lengths: Tensor | None = None,
    labels: Sequence[str] | None = None,
    *,
    scheme: str = "BIO",
) -> ChunkScores:
    """Chunk precision, recall and F1 of predicted tags against gold tags (conlleval semantics).

    Parameters
    ----------
    pred, gold : Tensor (B, T) integer (or a numpy integer array), or sequences of tag-name sequences
        Label ids (read through ``labels``; positions at or beyond ``lengths`` are ignored, so a
        Viterbi path's -1 padding is fine) or one sequence of tag names such as ``"B-NP"``,
        ``"I-NP"``, ``"O"`` per sentence (a flat list of tags is refused: wrap it, ``[tags]``).
    lengths : Tensor (B,) integer (or a list or numpy array), optional
        With label ids only; None means all T.
    labels : sequence of str, optional
        The tag name of each label id (needed for tensors), e.g. ``["O", "B-NP", "I-NP"]``.
    scheme : {"BIO", "IOB2", "IOB1", "BIOES", "IOBES", "BIOUL", "BILOU"}
        The tag prefixes allowed ("L"/"U" read as "E"/"S"). Chunks are read by conlleval's rules
        whatever the scheme, as seqeval's default mode does: e.g. ``I-X`` after ``O`` starts a chunk.

    Returns
    -------
    ChunkScores
        Overall (micro-averaged) precision, recall and F1, the chunk counts, and per-type scores;
        ``float(result)`` is the F1.

    Examples
    --------
    >>> import structtorch as st
    >>> scores = st.chunk_f1([["B-NP", "I-NP", "O", "B-VP"]], [["B-NP", "I-NP", "O", "B-NP"]])
    >>> scores.precision, scores.recall, float(scores), scores.num_correct
    (0.5, 0.5, 0.5, 1)
    """
    check_scheme(scheme)
    p_names = _names(pred, lengths, labels, "pred")
    g_names = _names(gold, lengths, labels, "gold")
    if len(p_names) != len(g_names):
        raise ValueError(f"pred and gold must hold the same number of sequences, got {len(p_names)} "
                         f"and {len(g_names)}")
    p_chunks, g_chunks = set(), set()
    for i, (p, g) in enumerate(zip(p_names, g_names, strict=True)):
        if len(p) != len(g):
            raise ValueError(f"sequence {i} has {len(p)} predicted and {len(g)} gold tags")
        p_chunks.update((i, *c) for c in get_chunks(p, scheme, f"pred[{i}]"))
        g_chunks.update((i, *c) for c in get_chunks(g, scheme, f"gold[{i}]"))
    correct = p_chunks & g_chunks
    per_type = {}
    for kind in sorted({c[1] for c in p_chunks | g_chunks}):
        counts = [sum(c[1] == kind for c in s) for s in (correct, p_chunks, g_chunks)]
        p, r, f = _prf(*counts)
        per_type[kind] = {"precision": p, "recall": r, "f1": f, "support": counts[2]}
    p, r, f = _prf(len(correct), len(p_chunks), len(g_chunks))
    return ChunkScores(p, r, f, len(p_chunks), len(g_chunks), len(correct), per_type)


# ---------------------------------------------------------------------------------------------
# segmental F1@k (temporal action segmentation)


def get_segments(labels: Sequence[int]) -> list[tuple[int, int, int]]:
    """The maximal runs of one label of a label sequence as ``(label, start, end)``, ``end``
    exclusive, in temporal order."""
    out: list[tuple[int, int, int]] = []
    start = 0
    for i in range(1, len(labels) + 1):
        if i == len(labels) or labels[i] != labels[start]:
            out.append((labels[start], start, i))
            start = i
    return out


def _label_rows(x: Tensor, name: str) -> None:
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a tensor of label ids (B, T), got {type(x).__name__}")
    if x.dim() != 2:
        raise ValueError(f"{name} must have shape (B, T), got {tuple(x.shape)}")
    if x.dtype.is_floating_point or x.dtype.is_complex or x.dtype == torch.bool:
        raise TypeError(f"{name} must hold integer label ids, got {x.dtype}")


def segment_f1(pred: Tensor, gold: Tensor, lengths: Tensor | Sequence[int] | None = None, *,
               overlap: float = 0.5, ignore: int | Sequence[int] | None = None) -> float:
    """Segmental F1@k of predicted against gold label sequences (Lea et al. 2017).

    A segment is a maximal run of one label inside a sequence's length. Predicted segments are
    taken in temporal order; each is compared with the gold segments of its sequence by
    intersection over union (in positions; 0 for another label), and is a true positive when the
    gold segment of largest IoU (the earliest among ties) reaches ``overlap`` and no earlier
    predicted segment has matched it; otherwise it is a false positive. Gold segments left
    unmatched are false negatives. TP, FP and FN are summed over the batch and
    ``F1 = 2 TP / (2 TP + FP + FN)`` (0 when there is no segment at all). This is the matching of
    the reference implementations (Lea et al.'s TCN code, MS-TCN's ``eval.py``) with MS-TCN's
    dataset-level counts; for ``overlap >= 0.5`` a predicted segment can reach that IoU with at
    most one gold segment, so "a TP is a match with an unmatched gold segment" holds exactly.

    Parameters
    ----------
    pred, gold : Tensor (B, T) integer
        Label ids; positions at or beyond ``lengths`` are ignored (a Viterbi path's -1 padding is
        fine).
    lengths : Tensor (B,) or sequence of B ints, optional
        Each sequence's length in [0, T]; None means all T.
    overlap : float in (0, 1]
        The IoU threshold k of F1@k (commonly 0.1, 0.25, 0.5).
    ignore : int or sequence of int, optional
        Labels whose segments are dropped from both sides before matching (a background class).

    Returns
    -------
    float
        F1 in [0, 1].

    Examples
    --------
    >>> gold = torch.tensor([[0, 0, 0, 0, 1, 1, 1, 1]])
    >>> segment_f1(torch.tensor([[0, 0, 0, 1, 1, 1, 1, 1]]), gold)   # IoUs 3/4 and 4/5
    1.0
    >>> segment_f1(torch.tensor([[0, 0, 0, 0, 0, 0, 1, 1]]), gold)   # 0: 4/6; 1: 2/4 (TP at 0.5)
    1.0
    >>> round(segment_f1(torch.tensor([[0, 0, 1, 0, 0, 1, 1, 1]]), gold), 4)  # TP 2, FP 2, FN 0
    0.6667
    """
    _label_rows(pred, "pred")
    _label_rows(gold, "gold")
    if pred.shape != gold.shape:
        raise ValueError(f"pred and gold must have the same shape (B, T), got {tuple(pred.shape)} and "
                         f"{tuple(gold.shape)}")
    B, T = gold.shape
    if isinstance(overlap, bool) or not isinstance(overlap, numbers.Real) or not 0.0 < float(overlap) <= 1.0:
        raise ValueError(f"overlap must be a number in (0, 1], got {overlap!r}")
    if lengths is None:
        sizes = [T] * B
    else:
        if isinstance(lengths, Tensor):
            if lengths.shape != (B,) or lengths.dtype.is_floating_point or lengths.dtype == torch.bool:
                raise ValueError(f"lengths must be an integer tensor of shape (B,) = ({B},), got "
                                 f"{lengths.dtype} {tuple(lengths.shape)}")
            sizes = lengths.tolist()
        else:
            sizes = list(lengths)
            if len(sizes) != B or not all(isinstance(v, numbers.Integral) and not isinstance(v, bool)
                                          for v in sizes):
                raise ValueError(f"lengths must hold B = {B} ints, got {lengths!r}")
        bad = [b for b, v in enumerate(sizes) if not 0 <= v <= T]
        if bad:
            raise ValueError(f"lengths must lie in [0, T] = [0, {T}], got lengths[{bad[0]}] = "
                             f"{sizes[bad[0]]}")
    if ignore is None:
        dropped: set[int] = set()
    elif isinstance(ignore, numbers.Integral) and not isinstance(ignore, bool):
        dropped = {int(ignore)}
    elif isinstance(ignore, Sequence) and all(isinstance(v, numbers.Integral) and not isinstance(v, bool)
                                              for v in ignore):
        dropped = {int(v) for v in ignore}
    else:
        raise TypeError(f"ignore must be None, an int or a sequence of ints, got {ignore!r}")
    k = float(overlap)
    tp = fp = fn = 0
    for p_row, g_row, size in zip(pred.tolist(), gold.tolist(), sizes, strict=True):
        p_segs = [s for s in get_segments(p_row[:size]) if s[0] not in dropped]
        g_segs = [s for s in get_segments(g_row[:size]) if s[0] not in dropped]
        used = [False] * len(g_segs)
        for label, start, end in p_segs:
            best, best_iou = -1, 0.0
            for j, (g_label, g_start, g_end) in enumerate(g_segs):
                if g_label != label:
                    continue
                inter = min(end, g_end) - max(start, g_start)
                if inter <= 0:
                    continue
                iou = inter / (max(end, g_end) - min(start, g_start))
                if iou > best_iou:
                    best, best_iou = j, iou
            if best >= 0 and best_iou >= k and not used[best]:
                used[best] = True
                tp += 1
            else:
                fp += 1
        fn += used.count(False)
    return 2 * tp / (2 * tp + fp + fn) if tp else 0.0
