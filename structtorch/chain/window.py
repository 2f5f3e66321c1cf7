"""Viterbi for chains of order l: scores of windows of l + 1 consecutive labels.

A joint feature map that is additively decomposable of order l (Definition 1 of Bauer et al.,
2014) scores a labeling as sum_t g_t(y_{t-l}, ..., y_t). The dynamic program runs over states
(y_{t-l+1}, ..., y_t), N^l of them, in O(T N^(l+1)) time: one Triton kernel on the triton backend,
the PyTorch loop of ``_torch.window_viterbi`` on the others (accumulating in float64 on CPU). The
score is the DP's own sum, differentiable (the indicator of the path's windows).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .._checks import (
    LengthsLike,
    _fmt,
    cast_checked,
    check_float,
    check_labels,
    check_lengths,
    forbidden_pattern,
    guard_overflow,
)
from .._deprecated import deprecated_alias
from .._expectations import logz_and_grads
from .._numerics import NEG_INF, accumulate
from .._precision import mixed_precision
from . import _ops, _torch
from ._torch import _newest_first, window_indices  # noqa: F401 - _newest_first: lossaug's import
from .masking import Compaction, compaction

_window_indices = window_indices  # the names lossaug imports

__all__ = ["window_viterbi", "window_score", "window_log_partition", "window_marginals", "viterbi_window"]


def _check_scores(scores: object) -> tuple[Tensor, int, int]:
    if not isinstance(scores, Tensor):
        raise TypeError("scores must be a torch.Tensor of shape (B, T) + (N,) * (l + 1)")
    if scores.dim() < 3:
        raise ValueError(f"scores must have shape (B, T) + (N,) * (l + 1), got {_fmt(scores.shape)}")
    N = scores.shape[2]
    if N < 1 or any(s != N for s in scores.shape[2:]):
        raise ValueError(
            "scores must have shape (B, T) + (N,) * (l + 1) with N >= 1 on every label axis, "
            f"got {_fmt(scores.shape)}"
        )
    return check_float("scores", scores), scores.dim() - 3, N


def masked_windows(scores: object, lengths: LengthsLike,
                   mask: Tensor | None) -> tuple[object, LengthsLike, Compaction | None]:
    """Window scores over ``mask``'s positions (given instead of ``lengths``: compacted to the
    left, so that a window holds consecutive positions of the mask) with their lengths, and the
    :class:`~structtorch.chain.masking.Compaction` that moves per-position results back (None
    without a mask, or where the scores are not (B, T, ...) tensors: their checks then speak)."""
    if mask is None or not (isinstance(scores, Tensor) and scores.dim() >= 3):
        return scores, lengths, None
    if lengths is not None:
        raise ValueError("give mask or lengths, not both")
    moved = compaction(mask, scores.shape[0], scores.shape[1], scores.device)
    return moved.take(scores), moved.lengths, moved


def _window_path(flat: Tensor, lengths: Tensor, order: int, N: int) -> Tensor:
    """Best path (B, T) for flat scores (B, T, N^l, N) = g_t[(y_{t-l}..y_{t-1}), y_t], l = order >= 1
    (see :func:`structtorch.chain._torch.window_dp`)."""
    return _torch.window_dp(flat, lengths, order)[1]


@mixed_precision
def window_viterbi(scores: Tensor, *, lengths: LengthsLike = None,
                   mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Highest-scoring labeling of a chain of order l.

    Parameters
    ----------
    scores : Tensor (B, T) + (N,) * (l + 1)
        ``scores[b, t, j_0, ..., j_l]`` = g_t(y_{t-l} = j_0, ..., y_t = j_l). Label axes that fall
        before the start of the sequence (t - l + k < 0) are ignored: index 0 of them is used.
        -inf entries are forbidden windows.
    lengths : Tensor (B,), optional
        Integer lengths in [0, T]; None means all T.
    mask : Tensor (B, T) bool, optional
        Instead of ``lengths``: each row's positions, any pattern (as for
        :func:`structtorch.viterbi`); a window holds consecutive positions of the mask, and the
        path comes back at them (-1 elsewhere). The other window functions take it alike.

    Returns
    -------
    score : Tensor (B,)
        Best score (0 for zero-length rows, -inf where no labeling is feasible); its gradient
        w.r.t. ``scores`` is the indicator of the windows of the returned path.
    path : Tensor (B, T) int64
        Best labeling, -1 beyond each length and on infeasible rows. Ties go to the first maximal
        index of every backpointer, as in :func:`structtorch.viterbi`.
    """
    if mask is not None:
        scores, lengths, moved = masked_windows(scores, lengths, mask)
        best, path = window_viterbi(scores, lengths=lengths)
        return best, path if moved is None else moved.put(path, -1)
    scores = _check_scores(scores)[0]
    B, T = scores.shape[:2]
    lengths = check_lengths(lengths, B, T, scores.device)
    if T == 0:
        empty = torch.empty(B, 0, dtype=torch.long, device=scores.device)
        return _window_score(scores, empty, lengths), empty
    best, path = _ops.window_viterbi(scores.contiguous(), lengths)

    def feasible() -> Tensor:
        return _torch.window_viterbi(forbidden_pattern(scores), lengths)[0] > NEG_INF

    total = guard_overflow(best, (scores,), T, feasible, "the Viterbi score", "scores")
    return cast_checked(total, scores.dtype, "the Viterbi score", "scores"), path


@mixed_precision
def window_score(scores: Tensor, path: Tensor, lengths: LengthsLike = None, *,
                 mask: Tensor | None = None) -> Tensor:
    """Differentiable score of labelings under window scores.

    Parameters
    ----------
    scores : Tensor (B, T) + (N,) * (l + 1)
        As for :func:`window_viterbi`.
    path : Tensor (B, T) integer
        Labels in [0, N) within each length (anything beyond it), or a row of -1 (no labeling).
    lengths : Tensor (B,), optional

    Returns
    -------
    Tensor (B,)
        In the dtype of ``scores`` (summed in float64 on CPU); -inf for rows whose path is -1, 0 for
        zero-length rows. A sum beyond the dtype's range raises a ValueError.
    """
    if mask is not None:
        scores, lengths, moved = masked_windows(scores, lengths, mask)
        return window_score(scores, path if moved is None else moved.take_positions(path), lengths)
    scores, _, N = _check_scores(scores)
    B, T = scores.shape[:2]
    lengths = check_lengths(lengths, B, T, scores.device)
    inside = torch.arange(T, device=scores.device) < lengths[:, None]
    if not isinstance(path, Tensor):
        raise TypeError(f"path must be an integer tensor of shape (B, T) = ({B}, {T})")
    none = (path == -1).all(1, keepdim=True) if path.shape == (B, T) else None
    labels = check_labels(torch.where(none, 0, path) if none is not None else path, inside, N, name="path")
    labels = torch.where(none, -1, labels)

    def feasible() -> Tensor:
        return _window_score(forbidden_pattern(scores), labels, lengths, exact=True) > NEG_INF

    total = _window_score(scores, labels, lengths, exact=True)
    feasible_rows = ~none.squeeze(1)
    total = torch.where(feasible_rows | (lengths == 0), total, NEG_INF)
    guard_overflow(total, (scores,), T, feasible, "the window score", "scores")
    return cast_checked(total, scores.dtype, "the window score", "scores")


@mixed_precision
def window_log_partition(scores: Tensor, *, lengths: LengthsLike = None,
                         mask: Tensor | None = None) -> Tensor:
    """Log-partition of chains of order l: log of the sum of exp(score) over all labelings.

    The likelihood of a higher-order CRF is ``window_score(scores, y) - window_log_partition(scores)``.

    Parameters
    ----------
    scores : Tensor (B, T) + (N,) * (l + 1)
        As for :func:`window_viterbi` (label axes before the start of the sequence read at index 0;
        -inf entries are forbidden windows).
    lengths : Tensor (B,), optional
        Integer lengths in [0, T]; None means all T.

    Returns
    -------
    Tensor (B,)
        In the dtype of ``scores`` (accumulated in float64 on CPU); 0 for zero-length rows, -inf for
        infeasible ones. Differentiable (the gradient is :func:`window_marginals`), to any order and
        under ``torch.func`` transforms: the PyTorch recursion over the N^l states, O(T N^(l+1)).
    """
    if mask is not None:
        scores, lengths, _ = masked_windows(scores, lengths, mask)
        return window_log_partition(scores, lengths=lengths)
    scores, order, _ = _check_scores(scores)
    B, T = scores.shape[:2]
    lengths = check_lengths(lengths, B, T, scores.device)
    if T == 0:
        return scores.flatten(1).sum(1) * 0
    wide = accumulate(scores)
    logz = _torch.window_log_forward(_torch.window_flat(wide), lengths)

    def feasible() -> Tensor:
        return _torch.window_viterbi(forbidden_pattern(scores), lengths)[0] > NEG_INF

    guard_overflow(logz, (scores,), T, feasible, "the window log-partition", "scores")
    return cast_checked(logz, scores.dtype, "the window log-partition", "scores")


@mixed_precision
def window_marginals(scores: Tensor, *, lengths: LengthsLike = None, mask: Tensor | None = None) -> Tensor:
    """Marginal probabilities of the windows of chains of order l.

    Parameters
    ----------
    scores, lengths
        As for :func:`window_log_partition`.

    Returns
    -------
    Tensor, the shape of ``scores``
        ``marginals[b, t, j_0, ..., j_l]`` = p(y_{t-l} = j_0, ..., y_t = j_l) (axes before the start
        at index 0), 0 beyond each length and on infeasible rows: the gradient of
        :func:`window_log_partition`, itself differentiable.
    """
    if mask is not None:
        scores, lengths, moved = masked_windows(scores, lengths, mask)
        marginals = window_marginals(scores, lengths=lengths)
        return marginals if moved is None else moved.put(marginals, 0)
    scores, _, _ = _check_scores(scores)
    B, T = scores.shape[:2]
    lengths = check_lengths(lengths, B, T, scores.device)
    if T == 0:
        return torch.zeros_like(scores)
    def logz(x: Tensor) -> Tensor:
        return _torch.window_log_forward(_torch.window_flat(x), lengths)

    return logz_and_grads(logz, [accumulate(scores)])[1][0].to(scores.dtype)


def _window_score(scores: Tensor, path: Tensor, lengths: Tensor, *, exact: bool = False) -> Tensor:
    """(B,) differentiable score of ``path`` (B, T) under window ``scores`` in their dtype (summed
    in float64 on CPU; ``exact=True`` returns that sum uncast); -inf for rows whose path is all -1
    (infeasible), 0 for zero-length rows. Inputs are trusted."""
    B, T = scores.shape[:2]
    N, order = scores.shape[2], scores.dim() - 3
    dtype = accumulate(scores.new_zeros(())).dtype if exact else scores.dtype
    if T == 0:
        return scores.flatten(1).sum(1).to(dtype)
    inside = torch.arange(T, device=scores.device) < lengths[:, None]
    picked = scores.reshape(B, T, N ** (order + 1)).gather(2, window_indices(path, order, N).unsqueeze(2))
    total = torch.where(inside, accumulate(picked.squeeze(2)), 0.0).sum(1).to(dtype)
    feasible = (path[:, :1] >= 0).all(1) | (lengths == 0)
    return torch.where(feasible, total, NEG_INF)


viterbi_window = deprecated_alias(window_viterbi, "viterbi_window", "window_viterbi")
