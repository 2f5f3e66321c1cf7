"""Dependency trees over the words of each sentence: arc scores (B, T + 1, T + 1) with the root at
position 0, ``arc_scores[b, h, m]`` scoring the arc from head h to modifier m (words 1..T; the
diagonal and column 0 are never read). Projective trees by Eisner's algorithm (the PyTorch
reference in ``_torch.py``, differentiable: the arc marginals are the gradient of the
log-partition); non-projective ones are not built yet and refused by name."""

from __future__ import annotations

import torch
from torch import Tensor

from .._checks import LengthsLike, _fmt, check_bool, check_float, check_lengths
from .._expectations import logz_and_grads
from .._numerics import accumulate
from .._precision import mixed_precision
from . import _torch

__all__ = ["dependency_viterbi", "dependency_log_partition", "dependency_marginals",
           "dependency_loss_augmented"]


def _checked(arc_scores: object, lengths: LengthsLike, projective: object,
             single_root: object) -> tuple[Tensor, Tensor, bool]:
    """(arc scores, lengths (B,), single_root), checked: a float (B, T + 1, T + 1) tensor without
    NaN or +inf, lengths in [0, T], projective trees only (for now)."""
    scores = check_float("arc_scores", arc_scores)
    if scores.dim() != 3 or scores.shape[1] != scores.shape[2] or scores.shape[1] < 1:
        raise ValueError(f"arc_scores must have shape (B, T + 1, T + 1) (the root at position 0), got "
                         f"{_fmt(scores.shape)}")
    if not check_bool("projective", projective):
        raise NotImplementedError("projective=False (non-projective trees: the matrix-tree theorem and "
                                  "Chu-Liu-Edmonds) is not built yet; projective=True runs Eisner's "
                                  "algorithm")
    B, T1, _ = scores.shape
    return scores, check_lengths(lengths, B, T1 - 1, scores.device, "arc_scores"), check_bool(
        "single_root", single_root)


@mixed_precision
def dependency_log_partition(arc_scores: Tensor, lengths: LengthsLike = None, *, projective: bool = True,
                             single_root: bool = False) -> Tensor:
    """Log of the sum of exp(score) over the dependency trees of each sentence.

    Parameters
    ----------
    arc_scores : Tensor (B, T + 1, T + 1)
        ``arc_scores[b, h, m]`` scores the arc from head h to word m (position 0 is the root, words
        are 1..T; the diagonal and column 0 are ignored). -inf arcs are forbidden.
    lengths : Tensor (B,), optional
        Words per sentence, in [0, T]; None means T.
    projective : bool
        Projective trees (Eisner's algorithm); False is not built yet (a NotImplementedError).
    single_root : bool
        Trees whose root has exactly one child.

    Returns
    -------
    Tensor (B,)
        In the dtype of ``arc_scores`` (accumulated in float64 on CPU); 0 for sentences without
        words, -inf where no tree avoids the forbidden arcs. Differentiable: the gradient is
        :func:`dependency_marginals`.
    """
    scores, lengths, single = _checked(arc_scores, lengths, projective, single_root)
    return _torch.log_partition(accumulate(scores), lengths, single).to(scores.dtype)


@mixed_precision
def dependency_marginals(arc_scores: Tensor, lengths: LengthsLike = None, *, projective: bool = True,
                         single_root: bool = False) -> Tensor:
    """Arc marginals (B, T + 1, T + 1): ``marginals[b, h, m]`` = p(head of m is h), 0 for the root's
    column, the diagonal, words beyond each length and sentences without a tree; the gradient of
    :func:`dependency_log_partition` (arguments as there), itself differentiable."""
    scores, lengths, single = _checked(arc_scores, lengths, projective, single_root)
    grads = logz_and_grads(lambda arcs: _torch.log_partition(arcs, lengths, single), [accumulate(scores)])[1]
    return grads[0].to(scores.dtype)


@mixed_precision
def dependency_viterbi(arc_scores: Tensor, lengths: LengthsLike = None, *, projective: bool = True,
                       single_root: bool = False) -> tuple[Tensor, Tensor]:
    """The best dependency tree of each sentence.

    Arguments as for :func:`dependency_log_partition`.

    Returns
    -------
    score : Tensor (B,)
        The best tree's score (0 without words, -inf where no tree avoids the forbidden arcs);
        differentiable, its gradient the indicator of the tree's arcs.
    heads : Tensor (B, T + 1) int64
        The head of each word; -1 at the root (position 0), beyond each length and on rows without
        a tree.
    """
    scores, lengths, single = _checked(arc_scores, lengths, projective, single_root)
    best, heads = _torch.viterbi(accumulate(scores.detach()), lengths, single)
    picked = accumulate(scores).gather(1, heads.clamp(min=0).unsqueeze(1)).squeeze(1)  # (B, T + 1)
    total = torch.where(heads >= 0, picked, 0.0).sum(1)  # the tree's arcs, differentiable
    return torch.where(best > float("-inf"), total, best).to(scores.dtype), heads


def _checked_heads(heads: object, lengths: Tensor, shape: tuple[int, int]) -> Tensor:
    """Gold heads (B, T + 1) int64: in [0, T] for words 1..L (anything at the root and beyond)."""
    if not isinstance(heads, Tensor) or heads.dtype.is_floating_point or heads.dtype == torch.bool:
        raise TypeError(f"heads must be an integer tensor of shape (B, T + 1) = {_fmt(shape)}")
    if tuple(heads.shape) != shape:
        raise ValueError(f"heads must have shape (B, T + 1) = {_fmt(shape)}, got {_fmt(heads.shape)}")
    m = torch.arange(shape[1], device=heads.device)
    words = (m >= 1) & (m <= lengths[:, None].to(heads.device))
    if bool(((heads < 0) | (heads >= shape[1]) | (heads == m))[words].any()):
        raise ValueError("heads must hold a head in [0, T] other than the word itself for every word 1..L")
    return torch.where(words, heads, 0).long()


@mixed_precision
def dependency_loss_augmented(arc_scores: Tensor, heads: Tensor, lengths: LengthsLike = None, *,
                              rescaling: str = "margin", projective: bool = True,
                              single_root: bool = False) -> tuple[Tensor, Tensor, Tensor]:
    """The most violating dependency tree for the gold ``heads`` (B, T + 1).

    Margin rescaling: the maximum over trees y of score(y) + Delta(y), Delta the number of words
    whose head differs from ``heads`` (exact: Delta folds into the arc scores). Slack rescaling
    (a count dimension in the DP) is being built and refused by name.

    Returns
    -------
    value : Tensor (B,)
        The maximum; differentiable (the gradient of the best tree's score).
    heads : Tensor (B, T + 1) int64
        The violating tree (-1 at the root and beyond each length).
    loss : Tensor (B,) int64
        Its Delta.
    """
    if rescaling not in ("margin", "slack"):
        raise ValueError(f"rescaling must be 'margin' or 'slack', got {rescaling!r}")
    if rescaling == "slack":
        raise NotImplementedError("slack rescaling for dependency trees (a Hamming dimension in Eisner's DP) "
                                  "is not built yet: use rescaling='margin'")
    scores, lengths, single = _checked(arc_scores, lengths, projective, single_root)
    gold = _checked_heads(heads, lengths, tuple(scores.shape[:2]))
    wrong = torch.ones_like(scores, dtype=torch.bool).scatter_(1, gold.unsqueeze(1), False)
    augmented = scores + wrong.to(scores.dtype)
    value, found = dependency_viterbi(augmented, lengths, single_root=single)
    m = torch.arange(scores.shape[1], device=scores.device)
    words = (m >= 1) & (m <= lengths[:, None])
    loss = ((found != gold) & words & (found >= 0)).sum(1)
    return value, found, loss
