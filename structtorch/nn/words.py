"""Words and sub-tokens: the first-sub-token mask of a tokenized batch, and word-level tags or
predictions moved between words and sub-token positions.

A WordPiece/BPE tokenizer splits words into pieces and adds special tokens (``[CLS]``, ``<s>``);
a fast Hugging Face tokenizer's ``encoding.word_ids()`` lists, per sub-token, the index of its
word (None for special tokens, the same index again on a word's continuation pieces). The usual
convention tags each word at its first piece: :func:`word_mask` builds that (B, T) mask, which
:class:`structtorch.LinearChainCRF` and the chain functions take as it is (the chain runs over
the words in order). Tags elsewhere may be anything (-100, the Hugging Face ignore index).

Other poolings of the pieces than the first one (their mean or max) are a scatter over
``word_ids``: ``torch.zeros(B, W, H).index_reduce_(...)`` or ``scatter_reduce`` of the hidden
states by word index, then a chain over the (B, W) words with ``lengths`` = words per row.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import numpy
import torch
from torch import Tensor

from .._checks import _fmt, check_int, on_host, validation_enabled
from ..chain.masking import compaction

__all__ = ["word_mask", "tokens_to_words", "words_to_tokens"]

WordIds = Sequence[Sequence[int | None]] | Tensor


def word_mask(word_ids: WordIds, *, length: int | None = None,
              device: torch.device | str | None = None) -> Tensor:
    """The (B, T) bool mask of each word's first sub-token.

    Parameters
    ----------
    word_ids : list of B lists, or Tensor (B, T) integer
        Per row, each sub-token's word index: a tokenizer's ``encoding.word_ids()`` (None for
        special tokens and padding; the indices may be Python or numpy ints, and a negative one
        is an error), or a tensor (or numpy integer array) with a negative value there. A token
        starts a word when its index differs from the previous token's.
    length : int, optional
        T, a non-negative int (default: the longest row); shorter rows are padded with False.
    device : optional
        Where the mask goes (default: the tensor's device, else CPU).

    Returns
    -------
    Tensor (B, T) bool

    Examples
    --------
    >>> word_mask([[None, 0, 0, 1, 2, 2, None]]).int()
    tensor([[0, 1, 0, 1, 1, 0, 0]], dtype=torch.int32)
    """
    ids = _as_tensor(word_ids, length, device)
    previous = torch.cat([ids.new_full((ids.shape[0], 1), -1), ids[:, :-1]], 1)
    return (ids >= 0) & (ids != previous)


def _as_tensor(word_ids: WordIds, length: int | None, device) -> Tensor:
    if length is not None:
        check_int("length", length, 0)
    if _is_integer_array(word_ids):
        word_ids = torch.as_tensor(word_ids)
    if isinstance(word_ids, Tensor):
        if word_ids.dim() != 2 or word_ids.is_floating_point() or word_ids.dtype == torch.bool:
            raise TypeError(f"word_ids must be an integer tensor of shape (B, T) (or lists of word ids), got "
                            f"{word_ids.dtype} {_fmt(word_ids.shape)}")
        ids = word_ids.long().to(device) if device is not None else word_ids.long()
        if length is not None and length != ids.shape[1]:
            raise ValueError(f"length = {length} differs from word_ids' T = {ids.shape[1]}")
        return ids
    if isinstance(word_ids, (str, bytes)) or not isinstance(word_ids, Sequence):
        raise TypeError(f"word_ids must be a list of per-row lists of word indices (None for special tokens) "
                        f"or an integer tensor (B, T), got {type(word_ids).__name__}")
    rows = [list(row) for row in word_ids]
    T = max((len(r) for r in rows), default=0) if length is None else length
    out = torch.full((len(rows), T), -1, dtype=torch.long)
    check = validation_enabled()
    for b, row in enumerate(rows):
        if len(row) > T:
            raise ValueError(f"word_ids row {b} has {len(row)} tokens, more than length = {T}")
        for t, w in enumerate(row):
            if w is not None and (isinstance(w, (bool, numpy.bool_)) or not isinstance(w, numbers.Integral)):
                raise TypeError(f"word_ids row {b} must hold non-negative ints or None (special tokens), "
                                f"got {type(w).__name__} {w!r} at position {t}")
            if check and w is not None and w < 0:
                raise ValueError(f"word_ids row {b} must hold non-negative ints or None (special tokens), "
                                 f"got {w} at position {t}")
        values = [-1 if w is None else int(w) for w in row]
        out[b, :len(values)] = torch.tensor(values, dtype=torch.long)
    return out.to(device) if device is not None else out


def _is_integer_array(x: object) -> bool:
    """A numpy integer array, taken as a tensor (negative values then mark special tokens)."""
    return isinstance(x, numpy.ndarray) and x.dtype.kind in "iu"


def _check_fill(fill: object, x: Tensor) -> None:
    """``fill`` a real number (or bool), whole where ``x`` holds integers (it would be truncated)."""
    if not isinstance(fill, numbers.Real):
        raise TypeError(f"fill must be a number, got {type(fill).__name__}")
    integers = not (x.is_floating_point() or x.dtype == torch.bool)
    if integers and not (math.isfinite(fill) and float(fill).is_integer()):
        raise ValueError(f"fill = {fill} would be truncated in the {x.dtype} values; pass a whole number "
                         "or floating-point values")


def tokens_to_words(x: Tensor, mask: Tensor, *, fill: float | int = -1,
                    num_words: int | None = None) -> Tensor:
    """Per-sub-token values (B, T, ...) at the mask's positions, moved to the words (B, W, ...).

    E.g. the word-level tags of ``LinearChainCRF.decode(emissions, word_mask(ids))[1]``.

    Parameters
    ----------
    x : Tensor (B, T, ...)
    mask : Tensor (B, T) bool
        The first-sub-token mask (:func:`word_mask`), or any mask.
    fill : number
        The value beyond each row's words.
    num_words : int, optional
        W (default: the most words in a row, read on the host).

    Examples
    --------
    >>> import torch, structtorch as st
    >>> mask = st.word_mask([[None, 0, 0, 1, None]])  # first sub-token of each word
    >>> st.tokens_to_words(torch.tensor([[7, 8, 9, 10, 11]]), mask)
    tensor([[ 8, 10]])
    """
    if not isinstance(x, Tensor) or x.dim() < 2:
        raise TypeError("x must be a tensor of shape (B, T, ...)")
    _check_fill(fill, x)
    if num_words is not None:
        check_int("num_words", num_words, 0)
    moved = compaction(mask, x.shape[0], x.shape[1], x.device)
    if num_words is None and torch.compiler.is_compiling():  # a size read from the data, bounded
        num_words = moved.lengths.max().item() if x.shape[0] else 0
        torch._check(num_words <= x.shape[1])
    elif num_words is None:
        num_words = int(moved.lengths.max()) if len(moved.lengths) else 0
    if not torch.compiler.is_compiling() and num_words > x.shape[1]:
        raise ValueError(f"num_words = {num_words} exceeds the T = {x.shape[1]} sub-tokens")
    return moved.blank(moved.take(x)[:, :num_words], fill)


def words_to_tokens(words: Tensor, mask: Tensor, *, fill: float | int = -100) -> Tensor:
    """Word-level values (B, W, ...) placed at the mask's positions (B, T, ...), ``fill`` elsewhere.

    E.g. word-level gold tags as sub-token targets for :class:`structtorch.LinearChainCRF` (fill
    -100, the Hugging Face ignore index). Row b's first ``mask[b].sum()`` words are used; a row
    with more masked positions than W words is an error (checked on CPU).
    """
    if not isinstance(words, Tensor) or words.dim() < 2:
        raise TypeError("words must be a tensor of shape (B, W, ...)")
    _check_fill(fill, words)
    B, W = words.shape[:2]
    T = mask.shape[-1] if isinstance(mask, Tensor) and mask.dim() else 0
    moved = compaction(mask, B, T, words.device)
    if on_host(mask) and validation_enabled() and B and int(moved.lengths.max()) > W:
        b = int(moved.lengths.argmax())
        raise ValueError(f"mask row {b} has {int(moved.lengths[b])} positions but words has W = {W}")
    if W >= T:
        words = words[:, :T]
    else:
        words = torch.cat([words, words.new_full((B, T - W, *words.shape[2:]), fill)], 1)
    return moved.put(words, fill) if moved.index is not None else moved.blank(words, fill)
