"""Loss-augmented Viterbi with a Hamming-loss dimension, exact for margin and slack rescaling.

For a target y and a loss Delta(y, y') = h(H(y, y')), with H the (weighted) Hamming distance over
positions inside each length, this finds the most violating labeling

- margin rescaling: value = max_y' [ s(y') + h(H(y, y')) ] - s(y)
- slack rescaling:  value = max_y' h(H(y, y')) * (1 + s(y') - s(y))

exactly for every h (negative, non-monotone, nonlinear) through the table L[t, k, j] of Bauer et
al. (2014, Algorithm 1): the best prefix score ending in label j at t with Hamming count k. Margin
rescaling with an affine h (and any loss that decomposes over positions) folds the loss into the
unary scores and runs plain Viterbi in O(T N^2) instead.

The returned ``value`` is recomputed from the potentials along the returned path, so its
gradient is the exact subgradient: indicator(y') - indicator(y) for margin rescaling, scaled by
h(H(y, y')) for slack rescaling.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .._checks import LengthsLike, check_labels, check_lengths
from .._deprecated import deprecated_alias
from .._precision import mixed_precision
from ..chain.layout import Chain, check_chain
from ..chain.window import _check_scores
from ._ops import solve
from .spec import HLike, resolve_loss
from .structures import _ChainStructure, _WindowStructure

__all__ = ["loss_augmented", "window_loss_augmented", "loss_augmented_chain", "loss_augmented_viterbi",
           "loss_augmented_viterbi_window"]


@mixed_precision
def loss_augmented(
    unary: Tensor,
    transitions: Tensor,
    target: Tensor,
    *,
    h: HLike = None,
    rescaling: str = "margin",
    start: Tensor | None = None,
    end: Tensor | None = None,
    lengths: LengthsLike = None,
    weights: Tensor | None = None,
    cost: Tensor | None = None,
    algorithm: str = "auto",
) -> tuple[Tensor, Tensor, Tensor]:
    """Most violating labeling of a linear chain under a Hamming-based loss.

    Parameters
    ----------
    unary, transitions, start, end, lengths
        Chain potentials as for :func:`structtorch.viterbi`: (B, T, N), (N, N) or (B, T-1, N, N),
        (N,) or (B, N), (B,).
    target : Tensor (B, T) int64
        The true labels y, in [0, N) inside each length (ignored beyond).
    h : None, callable or Tensor
        The loss as a function of the Hamming count: None is the identity; a callable is applied
        elementwise to the float tensor of counts 0..K; a tensor (T+1,) or (B, T+1) holds h(0..T)
        ((K+1,) with K the largest weighted count when ``weights`` are given).
    rescaling : {"margin", "slack"}
    weights : Tensor (B, T), optional
        Position weights of the Hamming loss. Non-negative integers work with any h and both
        rescalings (the count dimension then runs to the largest weighted count); real weights
        need margin rescaling with h=None.
    cost : Tensor (N, N) or (B, T, N), optional
        Margin rescaling only: a loss decomposing over positions, ``cost[y_t, y'_t]`` or
        ``cost[b, t, y'_t]``; replaces h and weights.
    algorithm : {"auto", "hamming", "viterbi"}
        "auto" folds margin losses that decompose over positions (affine h, real weights, cost)
        into the unary scores and runs Viterbi; otherwise it runs the Hamming table. The others
        force one path (for testing that they agree).

    Returns
    -------
    value : Tensor (B,)
        max over y' of s(y') + h(H) - s(y) (margin) or h(H) * (1 + s(y') - s(y)) (slack); its
        gradient is the subgradient described in the module docstring.
    path : Tensor (B, T) int64
        The maximizer y', -1 beyond each length. Ties: the target itself whenever it attains the
        maximum (so the subgradient is zero); otherwise, through the table, the smallest count k
        and then as :func:`structtorch.viterbi`; through the fold, as :func:`structtorch.viterbi`
        on the loss-augmented scores.
    count : Tensor (B,)
        The Hamming count H(y, y'), weighted when ``weights`` are given (int64 for integer
        weights).
    """
    chain = check_chain(unary, transitions, start, end, lengths)
    return loss_augmented_chain(chain, target, h=h, rescaling=rescaling, weights=weights, cost=cost,
                                algorithm=algorithm)


def loss_augmented_chain(chain: Chain, target: Tensor, *, h: HLike = None, rescaling: str = "margin",
                         weights: Tensor | None = None, cost: Tensor | None = None,
                         algorithm: str = "auto") -> tuple[Tensor, Tensor, Tensor]:
    """:func:`loss_augmented` on an already validated :class:`Chain` (the target and the
    loss arguments are checked here)."""
    mask = chain.mask()
    target = check_labels(target, mask, chain.shape[2], name="target")
    spec = resolve_loss(h, rescaling, weights, cost, target, mask, chain.unary, algorithm)
    return solve(_ChainStructure(chain, target), spec, target, chain.shape[2], algorithm, chain.unary.dtype)


@mixed_precision
def window_loss_augmented(
    scores: Tensor,
    target: Tensor,
    *,
    h: HLike = None,
    rescaling: str = "margin",
    lengths: LengthsLike = None,
    weights: Tensor | None = None,
    cost: Tensor | None = None,
    algorithm: str = "auto",
) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`loss_augmented` for chains of order l.

    ``scores`` (B, T) + (N,) * (l + 1) as for :func:`structtorch.window_viterbi`; the other
    arguments and the returns as for :func:`loss_augmented`. O(T^2 N^(l+1)) for the table.
    """
    scores, order, N = _check_scores(scores)
    B, T = scores.shape[:2]
    lengths = check_lengths(lengths, B, T, scores.device)
    mask = torch.arange(T, device=scores.device) < lengths[:, None]
    target = check_labels(target, mask, N, name="target")
    spec = resolve_loss(h, rescaling, weights, cost, target, mask, scores.new_zeros(B, T, N), algorithm)
    model = _WindowStructure(scores, order, N, lengths, target)
    return solve(model, spec, target, N, algorithm, scores.dtype)


loss_augmented_viterbi = deprecated_alias(loss_augmented, "loss_augmented_viterbi", "loss_augmented")
loss_augmented_viterbi_window = deprecated_alias(window_loss_augmented, "loss_augmented_viterbi_window",
                                                 "window_loss_augmented")
