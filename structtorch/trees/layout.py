"""The types and checks of the tree structures: arc scores (B, T + 1, T + 1) with the root at
position 0 and heads (B, T + 1) for dependency trees, span scores (B, T, T, N) and labeled spans
(B, T, T, N) 0/1 for constituency trees; the checks of every public function (through
:mod:`structtorch._checks`, obeying :func:`structtorch.set_validation`) and the scores of given
trees (differentiable)."""

from __future__ import annotations

import torch
from torch import Tensor

from .._checks import (
    LengthsLike,
    _fmt,
    check_bool,
    check_float,
    check_in_range,
    check_lengths,
    check_that,
    validation_enabled,
)

PROJECTIVE_ONLY = "rescaling='slack' needs projective=True (a count dimension in Eisner's DP); for " \
                  "non-projective trees use rescaling='margin' (exact through Chu-Liu-Edmonds)"


def checked_arcs(arc_scores: object, lengths: LengthsLike, projective: object,
                 single_root: object) -> tuple[Tensor, Tensor, bool, bool]:
    """(arc scores, lengths (B,), projective, single_root), checked: a float (B, T + 1, T + 1)
    tensor without NaN or +inf, lengths in [0, T]."""
    scores = check_float("arc_scores", arc_scores)
    if scores.dim() != 3 or scores.shape[1] != scores.shape[2] or scores.shape[1] < 1:
        raise ValueError(f"arc_scores must have shape (B, T + 1, T + 1) (the root at position 0), got "
                         f"{_fmt(scores.shape)}")
    B, T1, _ = scores.shape
    lengths = check_lengths(lengths, B, T1 - 1, scores.device, "arc_scores")
    return scores, lengths, check_bool("projective", projective), check_bool("single_root", single_root)


def checked_spans(span_scores: object, lengths: LengthsLike) -> tuple[Tensor, Tensor]:
    """(span scores (B, T, T, N), lengths (B,)), checked: float without NaN or +inf, N >= 1."""
    scores = check_float("span_scores", span_scores)
    if scores.dim() != 4 or scores.shape[1] != scores.shape[2] or scores.shape[3] < 1:
        raise ValueError(f"span_scores must have shape (B, T, T, N) with N >= 1 labels, got "
                         f"{_fmt(scores.shape)}")
    return scores, check_lengths(lengths, scores.shape[0], scores.shape[1], scores.device, "span_scores")


def words(lengths: Tensor, T1: int) -> Tensor:
    """(B, T + 1) bool: the words 1..L of each row."""
    m = torch.arange(T1, device=lengths.device)
    return (m >= 1) & (m <= lengths[:, None])


def checked_heads(heads: object, lengths: Tensor, shape: tuple[int, int], name: str = "heads",
                  ignore_index: int | None = None) -> tuple[Tensor, Tensor]:
    """(gold heads (B, T + 1) int64 with 0 where not given, annotated (B, T + 1) bool): the words
    1..L whose head is not ``ignore_index`` must hold a head in [0, T] other than themselves
    (anything at the root and beyond the lengths)."""
    if not isinstance(heads, Tensor) or heads.dtype.is_floating_point or heads.dtype == torch.bool:
        raise TypeError(f"{name} must be an integer tensor of shape (B, T + 1) = {_fmt(shape)}")
    if tuple(heads.shape) != shape:
        raise ValueError(f"{name} must have shape (B, T + 1) = {_fmt(shape)}, got {_fmt(heads.shape)}")
    heads = heads.to(lengths.device).long()
    inside = words(lengths, shape[1])
    annotated = inside if ignore_index is None else inside & (heads != ignore_index)
    if validation_enabled():
        m = torch.arange(shape[1], device=heads.device)
        probe = torch.where(heads == m, -1, heads)  # a word that heads itself is out of range
        if ignore_index is not None:
            probe = torch.where(annotated, probe, 0)
        unlabeled = "" if ignore_index is None else f" (or ignore_index = {ignore_index})"
        message = f"{name} must hold a head in [0, T] other than the word itself{unlabeled} for every word " \
                  "1..L"
        check_in_range(probe[:, 1:], lengths, 0, shape[1] - 1, message)
    return torch.where(annotated, heads, 0), annotated


def consistent(scores: Tensor, gold: Tensor, annotated: Tensor) -> Tensor:
    """``scores`` (B, T + 1, T + 1) with every arc into an annotated word forbidden (-inf) but its
    gold one: the trees left are those that agree with a partial annotation."""
    h = torch.arange(scores.shape[1], device=scores.device)
    return scores.masked_fill(annotated[:, None, :] & (h[None, :, None] != gold[:, None, :]), float("-inf"))


def checked_tree_spans(spans: object, shape: tuple[int, ...], name: str = "spans") -> Tensor:
    """Gold labeled spans (B, T, T, N) as a 0/1 tensor of the scores' dtype (any 0/1 dtype)."""
    if not isinstance(spans, Tensor):
        raise TypeError(f"{name} must be a 0/1 tensor of shape (B, T, T, N) = {_fmt(shape)}")
    if tuple(spans.shape) != shape:
        raise ValueError(f"{name} must have shape (B, T, T, N) = {_fmt(shape)}, got {_fmt(spans.shape)}")
    check_that(lambda: (spans == 0) | (spans == 1), f"{name} must hold 0 or 1 (a labeled span of the tree)")
    return spans


def tree_score(scores: Tensor, heads: Tensor) -> Tensor:
    """(B,) the sum of ``scores`` (B, T + 1, T + 1) over the arcs heads[m] -> m of each row (heads
    -1 skipped); differentiable."""
    picked = scores.gather(1, heads.clamp(min=0).unsqueeze(1)).squeeze(1)
    return torch.where(heads >= 0, picked, 0.0).sum(1)


def inside_spans(lengths: Tensor, T: int) -> Tensor:
    """(B, T, T, 1) bool: the spans [i, j], i <= j < L, of each row."""
    i = torch.arange(T, device=lengths.device)
    upper = i[:, None] <= i[None, :]
    return (upper & (i[None, :] < lengths[:, None, None]))[..., None]


def span_score(scores: Tensor, spans: Tensor, lengths: Tensor) -> Tensor:
    """(B,) the sum of ``scores`` (B, T, T, N) over the labeled spans ``spans`` (0/1) inside each
    length (-inf scores of absent spans skipped); differentiable."""
    chosen = (spans != 0) & inside_spans(lengths, scores.shape[1])
    return torch.where(chosen, scores, 0.0).sum((1, 2, 3))
