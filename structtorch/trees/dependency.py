"""Dependency trees over the words of each sentence: arc scores (B, T + 1, T + 1) with the root at
position 0, ``arc_scores[b, h, m]`` scoring the arc from head h to modifier m (words 1..T; the
diagonal and column 0 are never read). Projective trees by Eisner's algorithm, non-projective ones
by the matrix-tree theorem (log-partition, marginals) and Chu-Liu-Edmonds (the best tree); the
PyTorch references are in ``_torch.py``, differentiable (the arc marginals are the gradient of the
log-partition)."""

from __future__ import annotations

import torch
from torch import Tensor

from .._checks import LengthsLike, check_float, check_int, check_target_score
from .._expectations import logz_and_grads
from .._numerics import NEG_INF, accumulate
from .._precision import mixed_precision
from . import _ops, _torch
from .layout import PROJECTIVE_ONLY, checked_arcs, checked_heads, consistent, tree_score, words

__all__ = ["dependency_viterbi", "dependency_log_partition", "dependency_marginals",
           "dependency_loss_augmented", "dependency_kbest"]


def log_partition_fn(projective: bool, single_root: bool, lengths: Tensor):
    return lambda arcs: _ops.log_partition(arcs, lengths, projective, single_root)


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
        Projective trees (Eisner's algorithm, O(T^3)) or every tree (the matrix-tree theorem: a
        log-determinant, stable in float32 on long sentences).
    single_root : bool
        Trees whose root has exactly one child.

    Returns
    -------
    Tensor (B,)
        In the dtype of ``arc_scores`` (accumulated in float64 on CPU); 0 for sentences without
        words, -inf where no tree avoids the forbidden arcs. Differentiable: the gradient is
        :func:`dependency_marginals`.
    """
    scores, lengths, projective, single = checked_arcs(arc_scores, lengths, projective, single_root)
    return log_partition_fn(projective, single, lengths)(accumulate(scores)).to(scores.dtype)


@mixed_precision
def dependency_marginals(arc_scores: Tensor, lengths: LengthsLike = None, *, projective: bool = True,
                         single_root: bool = False) -> Tensor:
    """Arc marginals (B, T + 1, T + 1): ``marginals[b, h, m]`` = p(head of m is h), 0 for the root's
    column, the diagonal, words beyond each length and sentences without a tree; the gradient of
    :func:`dependency_log_partition` (arguments as there), itself differentiable."""
    scores, lengths, projective, single = checked_arcs(arc_scores, lengths, projective, single_root)
    grads = logz_and_grads(log_partition_fn(projective, single, lengths), [accumulate(scores)])[1]
    return grads[0].to(scores.dtype)


@mixed_precision
def dependency_viterbi(arc_scores: Tensor, lengths: LengthsLike = None, *, projective: bool = True,
                       single_root: bool = False) -> tuple[Tensor, Tensor]:
    """The best dependency tree of each sentence (Eisner's algorithm, or Chu-Liu-Edmonds with
    ``projective=False``: a compiled CPU kernel, run on a CPU copy of GPU tensors, a host sync).

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
    scores, lengths, projective, single = checked_arcs(arc_scores, lengths, projective, single_root)
    heads = _ops.best_heads(accumulate(scores.detach()), lengths, projective, single)
    found = (heads >= 0).any(1) | (lengths == 0)
    total = tree_score(accumulate(scores), heads)
    return torch.where(found, total, NEG_INF).to(scores.dtype), heads


@mixed_precision
def dependency_kbest(arc_scores: Tensor, k: int, lengths: LengthsLike = None, *, projective: bool = True,
                     single_root: bool = False) -> tuple[Tensor, Tensor]:
    """The k best projective dependency trees of each sentence (Eisner's DP in the k-max semiring,
    O(T^3 k^2); the PyTorch reference on every backend).

    Parameters
    ----------
    arc_scores, lengths, single_root
        As for :func:`dependency_log_partition`.
    k : int
        Trees per sentence, >= 1.
    projective : bool
        True; k-best non-projective trees (Camerini et al.'s algorithm) are not built: a
        NotImplementedError.

    Returns
    -------
    scores : Tensor (B, k)
        Descending, distinct trees; -inf where a sentence has fewer than k trees. Differentiable
        (each score's gradient is its tree's arc indicator).
    heads : Tensor (B, k, T + 1) int64
        -1 at the root, beyond each length and in the missing entries.
    """
    scores, lengths, projective, single = checked_arcs(arc_scores, lengths, projective, single_root)
    k = check_int("k", k, 1)
    if not projective:
        raise NotImplementedError("dependency_kbest takes projective trees only (k-best non-projective "
                                  "trees, Camerini et al.'s algorithm, are not built); the best one is "
                                  "dependency_viterbi(..., projective=False)")
    table, heads = _torch.kbest(accumulate(scores.detach()), lengths, k, single)
    B, T1 = scores.shape[:2]
    flat = heads.reshape(B * k, T1)
    total = tree_score(accumulate(scores).repeat_interleave(k, 0), flat).view(B, k)
    return torch.where(table > NEG_INF, total, NEG_INF).to(scores.dtype), heads


def hamming_costs(gold: Tensor, T1: int) -> Tensor:
    """(B, T + 1, T + 1) int64: 1 for every arc h -> m but the gold one (heads (B, T + 1))."""
    wrong = torch.ones(gold.shape[0], T1, T1, dtype=torch.long, device=gold.device)
    return wrong.scatter_(1, gold.unsqueeze(1), 0)


@mixed_precision
def dependency_loss_augmented(arc_scores: Tensor, heads: Tensor, lengths: LengthsLike = None, *,
                              rescaling: str = "margin", projective: bool = True,
                              single_root: bool = False, cost: Tensor | None = None,
                              ignore_index: int | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """The most violating dependency tree for the gold ``heads`` (B, T + 1).

    Delta(y) = the number of words whose head in y differs from ``heads`` (with ``cost``, the sum of
    ``cost[b, h, m]`` over the arcs of y). Margin rescaling maximizes score(y) + Delta(y) (exact:
    Delta folds into the arc scores, for projective and non-projective trees); slack rescaling
    maximizes Delta(y) * (1 + score(y) - score(heads)) (exact for projective trees: Eisner's DP
    over a Hamming-count dimension, Bauer et al. 2014; refused for non-projective trees, naming
    the alternatives). Where the gold tree attains the maximum it is returned itself.

    Partial annotation: with ``ignore_index``, words whose head is ``ignore_index`` are unannotated;
    Delta counts the annotated words only, and the gold tree is the best tree that agrees with the
    annotated heads (its score is score(heads) above; a ValueError names the rows where none does).

    Parameters
    ----------
    arc_scores, lengths, projective, single_root
        As for :func:`dependency_log_partition`.
    heads : Tensor (B, T + 1) int
        The gold head of each word 1..L (entries at the root and beyond the lengths are ignored).
    rescaling : {"margin", "slack"}
    cost : Tensor (B, T + 1, T + 1), optional
        Per-arc costs for margin rescaling (finite); default the Hamming loss of the heads.
    ignore_index : int, optional
        The head value of unannotated words (e.g. -100); None: every word is annotated.

    Returns
    -------
    value : Tensor (B,)
        The maximum; differentiable (for slack rescaling its gradient is Delta times the difference
        of the two trees' arc indicators).
    heads : Tensor (B, T + 1) int64
        The violating tree (-1 at the root and beyond each length).
    loss : Tensor (B,)
        Its Delta (int64 for the Hamming loss, the scores' dtype with ``cost``).
    """
    value, found, loss, _ = loss_augmented(arc_scores, heads, lengths, rescaling, projective, single_root,
                                           cost, ignore_index)
    return value, found, loss


def gold_tree(scores: Tensor, gold: Tensor, annotated: Tensor, lengths: Tensor, projective: bool,
              single: bool, partial: bool) -> Tensor:
    """The gold heads (B, T + 1), -1 outside the words: as given, or with a partial annotation the
    best tree that agrees with it (detached, accumulated ``scores``)."""
    inside = words(lengths, scores.shape[1])
    if not partial:
        return torch.where(inside, gold, -1)
    return _ops.best_heads(consistent(scores, gold, annotated), lengths, projective, single)


def loss_augmented(arc_scores: Tensor, heads: Tensor, lengths: LengthsLike, rescaling: str, projective: bool,
                   single_root: bool, cost: Tensor | None,
                   ignore_index: int | None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """:func:`dependency_loss_augmented` and the gold tree's score (B,) (differentiable)."""
    if rescaling not in ("margin", "slack"):
        raise ValueError(f"rescaling must be 'margin' or 'slack', got {rescaling!r}")
    scores, lengths, projective, single = checked_arcs(arc_scores, lengths, projective, single_root)
    T1 = scores.shape[1]
    gold, annotated = checked_heads(heads, lengths, (scores.shape[0], T1), ignore_index=ignore_index)
    if cost is not None:
        if rescaling == "slack":
            raise NotImplementedError("rescaling='slack' takes the Hamming loss (cost=None) only")
        delta = accumulate(check_float("cost", cost, scores, "arc_scores").detach())
    else:
        delta = (hamming_costs(gold, T1) * annotated[:, None, :]).to(accumulate(scores).dtype)
    if rescaling == "slack" and not projective:
        raise NotImplementedError(PROJECTIVE_ONLY)
    full = accumulate(scores)
    plain = full.detach()
    with torch.no_grad():
        gold_heads = gold_tree(plain, gold, annotated, lengths, projective, single, ignore_index is not None)
    target = tree_score(full, gold_heads)
    target = torch.where((gold_heads >= 0).any(1) | (lengths == 0), target, float("-inf"))
    check_target_score(target.detach(), "heads has score -inf in row {}: the gold tree uses a forbidden "
                       "(-inf) arc, or no tree agrees with its annotated heads")
    with torch.no_grad():
        if rescaling == "margin":
            found = _ops.best_heads(plain + delta, lengths, projective, single)
        else:
            found = _ops.count_search(plain, delta.long(), lengths, single,
                                      lambda table: _torch.slack_choice(table, target.detach())[1])
    value, found, loss = _torch.keep_or_replace(lambda h: tree_score(full, h), lambda h: tree_score(delta, h),
                                                gold_heads, found, target, rescaling, ~(found >= 0).any(1))
    loss = loss.long() if cost is None else loss.to(scores.dtype)
    return value.to(scores.dtype), found, loss, target.to(scores.dtype)
