"""Constituency trees: binary bracketings of the words 0..L-1 of each sentence whose 2L - 1 spans
[i, j] (inclusive; the L single words included) each carry one of N labels, scored by span scores
(B, T, T, N) (``span_scores[b, i, j, n]``; entries below the diagonal and beyond each length are
never read; -inf forbids a labeled span). CKY in any semiring (``_torch.py``): the best tree, the
log-partition and the span marginals (its gradient), and loss-augmented inference for margin and
slack rescaling."""

from __future__ import annotations

import torch
from torch import Tensor

from .._checks import LengthsLike, check_float, check_target_score
from .._expectations import logz_and_grads
from .._numerics import accumulate, safe_logsumexp
from .._precision import mixed_precision
from . import _ops, _torch
from .layout import checked_spans, checked_tree_spans, inside_spans, span_score

__all__ = ["cky_viterbi", "cky_log_partition", "cky_marginals", "cky_loss_augmented"]


def log_partition_fn(lengths: Tensor):
    """logZ of span scores (B, T, T, N): the labels summed (autograd), the bracketings by the
    operator."""
    return lambda scores: _ops.cky_log_partition(safe_logsumexp(scores, 3), lengths)


def _best(scores: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
    """(best score (B,) float64, the best tree's labeled spans (B, T, T, N) 0/1) of detached scores:
    each span's best label (the first on ties), the bracketing by the operator."""
    top, label = scores.max(3)
    best, chosen = _ops.cky_brackets(top, lengths)
    onehot = label.unsqueeze(3) == torch.arange(scores.shape[3], device=label.device)  # no host sync
    return best, chosen.unsqueeze(3) * onehot.to(chosen.dtype)


@mixed_precision
def cky_log_partition(span_scores: Tensor, lengths: LengthsLike = None) -> Tensor:
    """Log of the sum of exp(score) over the labeled binary trees of each sentence (CKY, O(T^3 + T^2 N)).

    Parameters
    ----------
    span_scores : Tensor (B, T, T, N)
        ``span_scores[b, i, j, n]`` scores the span of words i..j (inclusive) with label n; only
        i <= j < L is read. -inf forbids a labeled span.
    lengths : Tensor (B,), optional
        Words per sentence, in [0, T]; None means T.

    Returns
    -------
    Tensor (B,)
        In the dtype of ``span_scores`` (accumulated in float64 on CPU); 0 without words, -inf where
        no tree avoids the forbidden spans. Differentiable: the gradient is :func:`cky_marginals`.
    """
    scores, lengths = checked_spans(span_scores, lengths)
    return log_partition_fn(lengths)(accumulate(scores)).to(scores.dtype)


@mixed_precision
def cky_marginals(span_scores: Tensor, lengths: LengthsLike = None) -> Tensor:
    """Span marginals (B, T, T, N): ``marginals[b, i, j, n]`` = p(the tree has span [i, j] labeled n),
    0 below the diagonal, beyond each length and on sentences without a tree; the gradient of
    :func:`cky_log_partition` (arguments as there), itself differentiable."""
    scores, lengths = checked_spans(span_scores, lengths)
    grads = logz_and_grads(log_partition_fn(lengths), [accumulate(scores)])[1]
    return grads[0].to(scores.dtype)


@mixed_precision
def cky_viterbi(span_scores: Tensor, lengths: LengthsLike = None) -> tuple[Tensor, Tensor]:
    """The best labeled binary tree of each sentence (CKY). Arguments as for :func:`cky_log_partition`.

    Returns
    -------
    score : Tensor (B,)
        The best tree's score (0 without words, -inf where no tree avoids the forbidden spans);
        differentiable, its gradient the tree's spans.
    spans : Tensor (B, T, T, N)
        1 at the tree's labeled spans [i, j, label] (2L - 1 of them), else 0, in the dtype of
        ``span_scores``; all 0 without words or a tree.
    """
    scores, lengths = checked_spans(span_scores, lengths)
    best, spans = _best(accumulate(scores.detach()), lengths)
    spans = spans.to(scores.dtype)
    total = span_score(accumulate(scores), spans, lengths)
    return torch.where(best > float("-inf"), total, best).to(scores.dtype), spans


def hamming_costs(gold: Tensor, lengths: Tensor) -> Tensor:
    """(B, T, T, N) int64: 1 for every labeled span inside the lengths but the gold ones."""
    return ((gold == 0) & inside_spans(lengths, gold.shape[1])).long()


@mixed_precision
def cky_loss_augmented(span_scores: Tensor, spans: Tensor, lengths: LengthsLike = None, *,
                       rescaling: str = "margin",
                       cost: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """The most violating labeled tree for the gold ``spans`` (B, T, T, N) 0/1.

    Delta(y) = the number of labeled spans of y that are not gold ones (with ``cost``, the sum of
    ``cost[b, i, j, n]`` over y's labeled spans). Margin rescaling maximizes score(y) + Delta(y)
    (exact: Delta folds into the span scores); slack rescaling maximizes
    Delta(y) * (1 + score(y) - score(spans)), exact through CKY over a Hamming-count dimension
    (Bauer et al. 2014). Where the gold tree attains the maximum it is returned itself.

    Returns
    -------
    value : Tensor (B,)
        The maximum; differentiable.
    spans : Tensor (B, T, T, N)
        The violating tree's labeled spans, 0/1 in the scores' dtype.
    loss : Tensor (B,)
        Its Delta (int64 for the Hamming loss, the scores' dtype with ``cost``).
    """
    if rescaling not in ("margin", "slack"):
        raise ValueError(f"rescaling must be 'margin' or 'slack', got {rescaling!r}")
    scores, lengths = checked_spans(span_scores, lengths)
    gold = checked_tree_spans(spans, tuple(scores.shape)).to(scores.dtype)
    gold = torch.where(inside_spans(lengths, scores.shape[1]), gold, 0.0)
    full = accumulate(scores)
    if cost is not None:
        if rescaling == "slack":
            raise NotImplementedError("rescaling='slack' takes the Hamming loss (cost=None) only")
        delta = accumulate(check_float("cost", cost, scores, "span_scores").detach())
    else:
        delta = hamming_costs(gold, lengths).to(full.dtype)
    delta = torch.where(inside_spans(lengths, scores.shape[1]), delta, 0.0)
    target = span_score(full, gold, lengths)
    check_target_score(target.detach(),
                       "spans has score -inf in row {}: the gold tree uses a forbidden (-inf) span")
    with torch.no_grad():
        plain = full.detach()
        if rescaling == "margin":
            found = _best(plain + delta, lengths)[1]
        else:
            found = _ops.cky_count_search(plain, delta.long(), lengths,
                                          lambda table: _torch.slack_choice(table, target.detach())[1])
    value, found, loss = _torch.keep_or_replace(lambda y: span_score(full, y, lengths),
                                                lambda y: span_score(delta, y, lengths), gold, found, target,
                                                rescaling, found.sum((1, 2, 3)) == 0)
    loss = loss.long() if cost is None else loss.to(scores.dtype)
    return value.to(scores.dtype), found.to(scores.dtype), loss
