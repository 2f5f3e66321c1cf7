"""Transition constraints of chunk tagging schemes (BIO, IOB1, BIOES/IOBES, BIOUL/BILOU).

A tag is ``"O"`` or a prefix letter, a separator ``-`` and a chunk type (``"B-NP"``, ``"I-PER"``).
:func:`allowed_transitions` lists which tag may follow which, and which may start or end a
sentence; :class:`structtorch.LinearChainCRF` (``constraints=``) turns the forbidden ones into -inf
scores, so that training and decoding see valid sequences only.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import torch
from torch import Tensor

from ..schemes import SCHEMES, check_scheme, parse_tag

__all__ = ["allowed_transitions", "SCHEMES"]


def _may_follow(prev: tuple[str, str], cur: tuple[str, str], scheme: str) -> bool:
    """Whether tag ``cur`` ((role, type), see :func:`structtorch.schemes.parse_tag`) may follow
    tag ``prev``."""
    (pr, pk), (cr, ck) = prev, cur
    open_chunk = pr in ("B", "I")  # a chunk that has not ended yet
    if "E" in SCHEMES[scheme].values():  # BIOES / BILOU: chunks end explicitly
        if open_chunk:
            return cr in ("I", "E") and ck == pk
        return cr in ("O", "B", "S")
    if scheme == "IOB1":  # I opens a chunk; B only separates two adjacent chunks of one type
        return cr != "B" or (open_chunk and pk == ck)
    return cr != "I" or (open_chunk and pk == ck)  # BIO: I continues a chunk of its type


def allowed_transitions(scheme: str, labels: Sequence[str]) -> tuple[Tensor, Tensor, Tensor]:
    """Which tags may follow which under a chunk tagging scheme.

    Parameters
    ----------
    scheme : {"BIO", "IOB2", "IOB1", "BIOES", "IOBES", "BIOUL", "BILOU"}
        "BIO" (= "IOB2"): B-X opens a chunk, I-X continues a chunk of type X. "IOB1": I-X opens a
        chunk too; B-X appears only between two adjacent chunks of type X. "BIOES" (= "IOBES" =
        "BIOUL" = "BILOU", with L for E and U for S): every chunk ends with E-X or is a single S-X.
        The same table as :func:`structtorch.chunk_f1`'s (:mod:`structtorch.schemes`).
    labels : sequence of N str
        The tag of each label index, e.g. ``["O", "B-NP", "I-NP"]``.

    A tag that no valid sequence contains (``"I-Y"`` without ``"B-Y"`` under BIO, ``"B-X"``
    without ``"E-X"`` under BIOES) gets a ``UserWarning`` naming it: it can never be trained on
    or predicted.

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
    check_scheme(scheme)
    if isinstance(labels, str) or not isinstance(labels, Sequence) or len(labels) == 0:
        raise TypeError("labels must be a non-empty sequence of tag strings, e.g. ['O', 'B-NP', 'I-NP']")
    if len(set(labels)) != len(labels):
        raise ValueError("labels must not repeat a tag")
    tags = [parse_tag(tag, scheme, "label") for tag in labels]
    allowed = torch.tensor([[_may_follow(p, c, scheme) for c in tags] for p in tags], dtype=torch.bool)
    outside = ("O", "")
    start = torch.tensor([_may_follow(outside, t, scheme) for t in tags], dtype=torch.bool)
    end = torch.tensor([_may_follow(t, outside, scheme) for t in tags], dtype=torch.bool)
    unused = ~(_closure(start, allowed) & _closure(end, allowed.t()))
    if bool(unused.any()):
        names = ", ".join(repr(labels[i]) for i in unused.nonzero().flatten().tolist())
        warnings.warn(f"allowed_transitions: under {scheme} no valid sequence of these labels contains "
                      f"{names} (e.g. an I-X without its B-X, or a B-X without its E-X): such a tag can "
                      "never be trained on or predicted", UserWarning, stacklevel=2)
    return allowed, start, end


def _closure(first: Tensor, step: Tensor) -> Tensor:
    """The tags reachable from ``first`` (N,) bool through ``step`` (N, N) bool, ``first`` included."""
    reached = first.clone()
    while True:
        grown = reached | (reached.unsqueeze(1) & step).any(0)
        if torch.equal(grown, reached):
            return reached
        reached = grown
