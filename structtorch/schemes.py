"""Chunk tagging schemes: one table and one tag parser, shared by the transition constraints
(:func:`structtorch.allowed_transitions`) and the chunk metric (:func:`structtorch.chunk_f1`).

A tag is ``"O"`` or a prefix letter, a separator ``-`` and a chunk type (``"B-NP"``, ``"I-PER"``).
Each scheme maps its prefix letters to the four roles of conlleval: ``B`` (a chunk begins), ``I``
(inside a chunk), ``E`` (a chunk's last tag) and ``S`` (a single-tag chunk).
"""

from __future__ import annotations

__all__ = ["SCHEMES", "check_scheme", "parse_tag"]

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
