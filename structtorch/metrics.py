"""Chunk-level precision, recall and F1 with the semantics of the CoNLL ``conlleval`` script.

A chunk is a maximal run of tags read by conlleval's rules: it starts at a ``B-`` tag, at an
``I-`` tag after ``O`` (or after a tag of another type, or after the end of a chunk), and ends
where the next tag does not continue it. A predicted chunk counts as correct only when its type,
its first and its last position all equal those of a gold chunk. Chunks never cross sequences.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

__all__ = ["chunk_f1", "ChunkScores", "get_chunks"]

# scheme -> {prefix in the tag names: conlleval's prefix}
SCHEMES: dict[str, dict[str, str]] = {
    "BIO": {"B": "B", "I": "I"},
    "IOB2": {"B": "B", "I": "I"},
    "IOB1": {"B": "B", "I": "I"},
    "BIOES": {"B": "B", "I": "I", "E": "E", "S": "S"},
    "IOBES": {"B": "B", "I": "I", "E": "E", "S": "S"},
    "BIOUL": {"B": "B", "I": "I", "L": "E", "U": "S"},
    "BILOU": {"B": "B", "I": "I", "L": "E", "U": "S"},
}


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


def _split(tag: str, prefixes: dict[str, str], scheme: str) -> tuple[str, str]:
    if tag == "O":
        return "O", ""
    prefix, sep, kind = tag.partition("-")
    if not sep or not kind or prefix not in prefixes:
        raise ValueError(f"tag {tag!r} is not 'O' or '<prefix>-<type>' with a prefix in "
                         f"{sorted(prefixes)} (scheme {scheme!r})")
    return prefixes[prefix], kind


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


def get_chunks(tags: Sequence[str], scheme: str = "BIO") -> list[tuple[str, int, int]]:
    """The chunks of one tag sequence as ``(type, first, last)`` (inclusive) positions."""
    prefixes = _scheme(scheme)
    chunks = []
    prev, prev_type, begin = "O", "", 0
    for i, name in enumerate([*tags, "O"]):
        tag, kind = _split(name, prefixes, scheme)
        if _ends(prev, tag, prev_type, kind) and prev != "O":
            chunks.append((prev_type, begin, i - 1))
        if _starts(prev, tag, prev_type, kind):
            begin = i
        prev, prev_type = tag, kind
    return chunks


def _scheme(scheme: str) -> dict[str, str]:
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {sorted(SCHEMES)}, got {scheme!r}")
    return SCHEMES[scheme]


def _names(x: Tensor | Sequence[Sequence[str]], lengths: Tensor | None, labels: Sequence[str] | None,
           name: str) -> list[list[str]]:
    if not isinstance(x, Tensor):
        if lengths is not None:
            raise ValueError(f"lengths applies to label-id tensors; {name} is a list of tag-name sequences")
        return [list(seq) for seq in x]
    if x.dim() != 2:
        raise ValueError(f"{name} must have shape (B, T), got {tuple(x.shape)}")
    if labels is None:
        raise ValueError(f"labels (the tag name of each label id) is needed when {name} is a tensor")
    B, T = x.shape
    if lengths is None:
        lengths = torch.full((B,), T, dtype=torch.long)
    if not isinstance(lengths, Tensor) or lengths.shape != (B,):
        raise ValueError(f"lengths must be a tensor of shape (B,) = ({B},)")
    rows = x.tolist()
    out = []
    for b, n in enumerate(lengths.tolist()):
        if not 0 <= n <= T:
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
    pred, gold : Tensor (B, T) int64, or sequences of tag-name sequences
        Label ids (read through ``labels``; positions at or beyond ``lengths`` are ignored, so a
        Viterbi path's -1 padding is fine) or tag names such as ``"B-NP"``, ``"I-NP"``, ``"O"``.
    lengths : Tensor (B,), optional
        With tensors only; None means all T.
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
    """
    p_names = _names(pred, lengths, labels, "pred")
    g_names = _names(gold, lengths, labels, "gold")
    if len(p_names) != len(g_names):
        raise ValueError(f"pred and gold must hold the same number of sequences, got {len(p_names)} "
                         f"and {len(g_names)}")
    p_chunks, g_chunks = set(), set()
    for i, (p, g) in enumerate(zip(p_names, g_names, strict=True)):
        if len(p) != len(g):
            raise ValueError(f"sequence {i} has {len(p)} predicted and {len(g)} gold tags")
        p_chunks.update((i, *c) for c in get_chunks(p, scheme))
        g_chunks.update((i, *c) for c in get_chunks(g, scheme))
    correct = p_chunks & g_chunks
    per_type = {}
    for kind in sorted({c[1] for c in p_chunks | g_chunks}):
        counts = [sum(c[1] == kind for c in s) for s in (correct, p_chunks, g_chunks)]
        p, r, f = _prf(*counts)
        per_type[kind] = {"precision": p, "recall": r, "f1": f, "support": counts[2]}
    p, r, f = _prf(len(correct), len(p_chunks), len(g_chunks))
    return ChunkScores(p, r, f, len(p_chunks), len(g_chunks), len(correct), per_type)
