"""Chunk tagging schemes: one table and one tag parser, shared by the transition constraints
(:func:`structtorch.allowed_transitions`) and the chunk metric (:func:`structtorch.chunk_f1`), and
the tag <-> label-id mapping (:func:`encode_tags`, :func:`decode_tags`, :func:`to_bio`) that turns
tagged text into :class:`structtorch.data.SequenceData` labels and Viterbi paths back into tags.

A tag is ``"O"`` or a prefix letter, a separator ``-`` and a chunk type (``"B-NP"``, ``"I-PER"``).
Each scheme maps its prefix letters to the four roles of conlleval: ``B`` (a chunk begins), ``I``
(inside a chunk), ``E`` (a chunk's last tag) and ``S`` (a single-tag chunk).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = ["SCHEMES", "check_scheme", "parse_tag", "to_bio", "encode_tags", "decode_tags"]

_BIO = {"B": "B", "I": "I"}
_BIOES = {"B": "B", "I": "I", "E": "E", "S": "S"}
_BILOU = {"B": "B", "I": "I", "L": "E", "U": "S"}

# scheme -> {prefix letter in the tag names: its role}
SCHEMES: dict[str, dict[str, str]] = {
    "BIO": _BIO,
    "IOB2": _BIO,
    "IOB1": _BIO,
    "BIOES": _BIOES,
    "IOBES": _BIOES,
    "BIOUL": _BILOU,
    "BILOU": _BILOU,
}


def check_scheme(scheme: object) -> dict[str, str]:
    """The prefix -> role table of ``scheme``, or a ValueError listing the schemes."""
    if not isinstance(scheme, str) or scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {tuple(SCHEMES)}, got {scheme!r}")
    return SCHEMES[scheme]


def parse_tag(tag: object, scheme: str, name: str = "tag") -> tuple[str, str]:
    """``(role, type)`` of one tag: role ``"O"`` (type ``""``) or one of ``"B"``, ``"I"``, ``"E"``,
    ``"S"``. ``name`` says where the tag came from in the errors (e.g. ``"gold[0][3]"``)."""
    if not isinstance(tag, str):
        raise TypeError(f"{name} must be a tag string such as 'O' or 'B-NP', got {type(tag).__name__} "
                        f"{tag!r}")
    if tag == "O":
        return "O", ""
    prefixes = check_scheme(scheme)
    prefix, sep, kind = tag.partition("-")
    if not sep or not kind or prefix not in prefixes:
        raise ValueError(f"{name} {tag!r} is not 'O' or <{'/'.join(prefixes)}>-<type> for the {scheme} "
                         "scheme")
    return prefixes[prefix], kind


def to_bio(tags: Sequence[str]) -> list[str]:
    """Tags in BIO (IOB2): every chunk starts with ``B-``. An ``I-X`` that starts a chunk (after
    ``O``, at the start, or after a tag of another type) becomes ``B-X``, as IOB1 data needs."""
    out, prev = [], "O"
    for tag in tags:
        if tag.startswith("I-") and (prev == "O" or prev[2:] != tag[2:]):
            tag = "B-" + tag[2:]
        out.append(tag)
        prev = tag
    return out


def encode_tags(tags: Sequence[Sequence[str]], labels: Sequence[str] | None = None
                ) -> tuple[Tensor, Tensor, list[str]]:
    """Tag-name sequences -> padded label ids.

    Parameters
    ----------
    tags : sequence of B sequences of str
        E.g. ``[["B-NP", "I-NP", "O"], ...]``.
    labels : sequence of str, optional
        The tag name of each label id. Default: ``"O"`` first, then for each chunk type in sorted
        order its ``B-`` and ``I-`` tags (and any other tag seen, sorted).

    Returns
    -------
    ids : Tensor (B, T) int64
        0 beyond each length, T the longest length.
    lengths : Tensor (B,) int64
    labels : list of str
        The tag name of each id.

    Raises
    ------
    ValueError
        A tag not in ``labels``.
    """
    if labels is None:
        seen = {t for seq in tags for t in seq}
        kinds = sorted({t[2:] for t in seen if t[:2] in ("B-", "I-")})
        labels = ["O"] + [f"{p}-{k}" for k in kinds for p in ("B", "I")]
        labels += sorted(seen - set(labels))
    labels = list(labels)
    index = {t: i for i, t in enumerate(labels)}
    lengths = torch.tensor([len(seq) for seq in tags], dtype=torch.long)
    ids = torch.zeros(len(tags), int(lengths.max()) if len(tags) else 0, dtype=torch.long)
    for b, seq in enumerate(tags):
        try:
            ids[b, : len(seq)] = torch.tensor([index[t] for t in seq], dtype=torch.long)
        except KeyError as exc:
            raise ValueError(f"sequence {b} holds tag {exc.args[0]!r}, not in labels {labels}") from None
    return ids, lengths, labels


def decode_tags(ids: Tensor, lengths: Tensor, labels: Sequence[str]) -> list[list[str]]:
    """Label ids (B, T) (anything beyond ``lengths`` (B,), e.g. Viterbi's -1) -> tag names."""
    if ids.dim() != 2 or lengths.shape != ids.shape[:1]:
        raise ValueError(f"ids must have shape (B, T) and lengths (B,), got {tuple(ids.shape)} and "
                         f"{tuple(lengths.shape)}")
    return [[labels[i] for i in row[:n]] for row, n in zip(ids.tolist(), lengths.tolist(), strict=True)]
