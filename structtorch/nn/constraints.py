"""Transition constraints of chunk tagging schemes (BIO, IOB1, BIOES/BIOUL, BILOU).

A tag is ``"O"`` or a prefix letter, a separator ``-`` and a chunk type (``"B-NP"``, ``"I-PER"``).
:func:`allowed_transitions` lists which tag may follow which, and which may start or end a
sentence; :class:`structtorch.LinearChainCRF` (``constraints=``) turns the forbidden ones into -inf
scores, so that training and decoding see valid sequences only.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = ["allowed_transitions", "SCHEMES"]

# scheme -> (begin, inside, last, single) prefix letters; None where the scheme has no such tag
SCHEMES: dict[str, tuple[str, str, str | None, str | None]] = {
    "BIO": ("B", "I", None, None),
    "IOB2": ("B", "I", None, None),
    "IOB1": ("B", "I", None, None),
    "BIOES": ("B", "I", "E", "S"),
    "BIOUL": ("B", "I", "L", "U"),
    "BILOU": ("B", "I", "L", "U"),
}


def _parse(tag: object, scheme: str) -> tuple[str, str]:
    """(role, type): role in {"O", "begin", "inside", "last", "single"}."""
    if not isinstance(tag, str):
        raise TypeError(f"labels must be strings such as 'O' or 'B-NP', got {type(tag).__name__}")
    if tag == "O":
        return "O", ""
    prefix, sep, kind = tag.partition("-")
    roles = dict(zip(SCHEMES[scheme], ("begin", "inside", "last", "single"), strict=True))
    if not sep or not kind or prefix not in roles or prefix is None:
        letters = "/".join(p for p in SCHEMES[scheme] if p)
        raise ValueError(f"label {tag!r} is not 'O' or <{letters}>-<type> for the {scheme} scheme")
    return roles[prefix], kind


def _may_follow(prev: tuple[str, str], cur: tuple[str, str], scheme: str) -> bool:
    """Whether tag ``cur`` may follow tag ``prev``."""
    (pr, pk), (cr, ck) = prev, cur
    open_chunk = pr in ("begin", "inside")  # a chunk that has not ended yet
    if SCHEMES[scheme][2] is not None:  # BIOES / BILOU: chunks end explicitly
        if open_chunk:
            return cr in ("inside", "last") and ck == pk
        return cr in ("O", "begin", "single")
    if scheme == "IOB1":  # I opens a chunk; B only separates two adjacent chunks of one type
        return cr != "begin" or (pr in ("begin", "inside") and pk == ck)
    return cr != "inside" or (open_chunk and pk == ck)  # BIO: I continues a chunk of its type


def allowed_transitions(scheme: str, labels: Sequence[str]) -> tuple[Tensor, Tensor, Tensor]:
    """Which tags may follow which under a chunk tagging scheme.

    Parameters
    ----------
    scheme : {"BIO", "IOB2", "IOB1", "BIOES", "BIOUL", "BILOU"}
        "BIO" (= "IOB2"): B-X opens a chunk, I-X continues a chunk of type X. "IOB1": I-X opens a
        chunk too; B-X appears only between two adjacent chunks of type X. "BIOES" (= "BIOUL" =
        "BILOU", with L for E and U for S): every chunk ends with E-X or is a single S-X.
    labels : sequence of N str
        The tag of each label index, e.g. ``["O", "B-NP", "I-NP"]``.

    Returns
    -------
    allowed : Tensor (N, N) bool
        ``allowed[i, j]``: tag j may follow tag i.
    allowed_start : Tensor (N,) bool
        Tags that may begin a sentence.
    allowed_end : Tensor (N,) bool
        Tags that may end one.

    Examples
    --------
    >>> allowed, first, last = allowed_transitions("BIO", ["O", "B-NP", "I-NP"])
    >>> allowed[0, 2].item(), first.tolist()
    (False, [True, True, False])
    """
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {tuple(SCHEMES)}, got {scheme!r}")
    if isinstance(labels, str) or not isinstance(labels, Sequence) or len(labels) == 0:
        raise TypeError("labels must be a non-empty sequence of tag strings, e.g. ['O', 'B-NP', 'I-NP']")
    if len(set(labels)) != len(labels):
        raise ValueError("labels must not repeat a tag")
    tags = [_parse(tag, scheme) for tag in labels]
    allowed = torch.tensor([[_may_follow(p, c, scheme) for c in tags] for p in tags], dtype=torch.bool)
    outside = ("O", "")
    start = torch.tensor([_may_follow(outside, t, scheme) for t in tags], dtype=torch.bool)
    end = torch.tensor([_may_follow(t, outside, scheme) for t in tags], dtype=torch.bool)
    return allowed, start, end
