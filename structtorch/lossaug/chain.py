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

On the "triton" backend every loss of this module (the Hamming count, position weights, costs,
pair costs, partial targets; any h, both rescalings, linear and order-l chains) runs whole in
Triton kernels (``_triton.py``): the search, the scores of both labelings, the tie rule and the
value, then the indicators in the backward, with no value read on the host (a table sized by
weights or costs needs ``max_count`` for that) and a number of device ops that does not grow
with T.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from .. import _backend
from .._checks import (
    LengthsLike,
    cast_checked,
    check_int,
    check_label_tensor,
    check_label_values,
    check_labels,
    check_lengths,
    check_target_score,
    guard_overflow,
)
from .._deprecated import deprecated_alias
from .._library import transformed
from .._precision import mixed_precision
from ..chain import _ops as _chain_ops
from ..chain.layout import Chain
from ..chain.linear import allowed_labels, consistent_chain
from ..chain.masking import masked_chain
from ..chain.window import _check_scores, masked_windows
from ._ops import FOLDS, FUSED, fused_search, fused_window_search, solve
from .spec import ALGORITHMS, RESCALINGS, HLike, LossSpec, h_table, resolve_loss
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
    pair_cost: Tensor | None = None,
    mask: Tensor | None = None,
    ignore_index: int | None = None,
    max_count: int | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Most violating labeling of a linear chain under a Hamming-based or decomposable loss.

    Parameters
    ----------
    unary, transitions, start, end, lengths, mask
        Chain potentials as for :func:`structtorch.viterbi`: (B, T, N), (N, N) or (B, T-1, N, N),
        (N,) or (B, N), (B,) or any (B, T) bool mask (``target``, ``weights``, a per-position
        ``cost`` and ``pair_cost`` are read at the mask's positions, as the unary scores and the
        transitions are).
    target : Tensor (B, T) int64, or (B, T, N) bool
        The true labels y, in [0, N) inside each length (ignored beyond); or partial targets, a
        set of allowed labels per position (B, T, N) bool or ``ignore_index`` at unlabeled
        positions: the target is then the best labeling consistent with them and the loss counts
        the positions whose label is outside its set (``weights``, ``cost`` and ``pair_cost``
        do not apply).
    ignore_index : int, optional
        The label of unlabeled positions in an integer ``target`` (e.g. -100); None: none.
    h : None, callable or Tensor
        The loss as a function of the Hamming count: None is the identity; a callable is applied
        elementwise to the float tensor of counts 0..K; a tensor (T+1,) or (B, T+1) holds h(0..T)
        ((K+1,) with K the largest weighted count when ``weights`` are given).
    rescaling : {"margin", "slack"}
    weights : Tensor (B, T), optional
        Position weights of the Hamming loss. Non-negative integers work with any h and both
        rescalings (the count dimension then runs to the largest weighted count); so do
        non-negative real weights that are integers after a common scale (e.g. 0.5 and 1.5: the
        table counts in halves, h sees the real count); other real weights need margin rescaling
        with h=None.
    cost : Tensor (N, N) or (B, T, N), optional
        A loss decomposing over positions, ``cost[y_t, y'_t]`` or ``cost[b, t, y'_t]``; replaces
        weights. Margin rescaling with h=None takes any real costs (folded into the unary scores);
        slack rescaling and any h take non-negative costs (integer or floating) that are integers
        after a common scale (the loss value, the sum of the costs, is the table's extra
        dimension; h applies to it).
    pair_cost : Tensor (B, T-1, N, N), optional
        Costs of label pairs, ``pair_cost[b, t, i, j]`` for y'_t = i and y'_{t+1} = j (a loss of
        order 2, e.g. on transitions), added to ``cost``'s (or alone); replaces weights. The same
        rules as for ``cost`` (folded into the transitions for margin rescaling with h=None).
    algorithm : {"auto", "hamming", "viterbi"}
        "auto" folds margin losses that decompose over positions (affine h, real weights, cost,
        pair_cost with h=None) into the scores and runs Viterbi; otherwise it runs the count
        table. The others force one path (for testing that they agree).
    max_count : int, optional
        The size of the count table for ``weights``, ``cost`` and ``pair_cost`` that need one
        (slack rescaling, a custom h): an upper bound on every row's largest count, in the loss's
        units. None reads the bound (and a common scale of real values) off the values, a host
        sync on a GPU; given, nothing is read back (a CUDA graph or a tight training loop keeps
        running ahead) and the values must be non-negative integers no row of which sums beyond
        it (a value check, see :func:`structtorch.set_validation`). Ignored where the loss folds
        into the scores; the unweighted count needs no bound (T).

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
        weights), or the sum of the costs of y' (with ``cost`` / ``pair_cost``): the argument of h.

    Examples
    --------
    >>> import torch, structtorch as st
    >>> unary = torch.tensor([[[2., 0.], [0., 3.], [2., 0.]]])
    >>> transitions = torch.tensor([[0., -1.], [-1., 0.]])
    >>> target = torch.tensor([[0, 0, 0]])  # scores 4; [0, 1, 0] scores 5 and differs in 1 position
    >>> value, labeling, count = st.loss_augmented(unary, transitions, target)
    >>> value, labeling, count  # max_y s(y) + Hamming(y, target) - s(target)
    (tensor([2.]), tensor([[0, 1, 0]]), tensor([1]))
    >>> st.loss_augmented(unary, transitions, target, rescaling="slack")[0]  # H (1 + s(y) - s(target))
    tensor([2.])
    """
    max_count = _checked_max_count(max_count)
    chain, moved = masked_chain(unary, transitions, start, end, lengths, mask)
    target, weights = moved.take_positions(target), moved.take_positions(weights)
    allowed = allowed_labels(target, chain, ignore_index, "target")
    if allowed is not None:
        no_costs(weights, cost, pair_cost)
        value, path, count = partial_loss_augmented_chain(chain, allowed, h=h, rescaling=rescaling,
                                                          algorithm=algorithm)
        return value, moved.put(path, -1), count
    if isinstance(cost, Tensor) and cost.dim() == 3:  # (B, T, N); an (N, N) cost is shared
        cost = moved.take_positions(cost)
    pair_cost = moved.take_transitions(pair_cost) if isinstance(pair_cost, Tensor) else pair_cost
    value, path, count = loss_augmented_chain(chain, target, h=h, rescaling=rescaling, weights=weights,
                                              cost=cost, algorithm=algorithm, pair_cost=pair_cost,
                                              max_count=max_count)
    return value, moved.put(path, -1), count


def loss_augmented_chain(chain: Chain, target: Tensor, *, h: HLike = None, rescaling: str = "margin",
                         weights: Tensor | None = None, cost: Tensor | None = None,
                         algorithm: str = "auto", pair_cost: Tensor | None = None,
                         max_count: int | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`loss_augmented` on an already validated :class:`Chain` (the target and the
    loss arguments are checked here)."""
    max_count = _checked_max_count(max_count)
    backend = _fusing_backend(chain, h, rescaling, algorithm)
    if backend is not None:
        target = _checked_target(target, chain.unary, chain.lengths)
        if weights is None and cost is None and pair_cost is None:
            return _fused(chain, target, rescaling, algorithm, h, backend)
        spec = resolve_loss(h, rescaling, weights, cost, target, chain.mask(), chain.unary, algorithm,
                            pair_cost, max_count)
        return _fused_spec(lambda *loss: fused_search(chain, target, *loss, backend=backend), spec, target,
                           chain.shape[2], chain.unary.dtype)
    mask = chain.mask()
    target = check_labels(target, mask, chain.shape[2], name="target")
    spec = resolve_loss(h, rescaling, weights, cost, target, mask, chain.unary, algorithm, pair_cost,
                        max_count)
    return solve(_ChainStructure(chain, target), spec, target, chain.shape[2], algorithm, chain.unary.dtype)


def _checked_max_count(max_count: object) -> int | None:
    """``max_count`` checked on every path, also where it is ignored (a loss folded into the scores,
    partial targets, the segment losses): None or an int >= 0."""
    return None if max_count is None else check_int("max_count", max_count, 0)


def no_costs(weights: object, cost: object, pair_cost: object) -> None:
    """A ValueError naming the loss arguments given with partial targets (which define the loss)."""
    named = (("weights", weights), ("cost", cost), ("pair_cost", pair_cost))
    given = [name for name, x in named if x is not None]
    if given:
        raise ValueError(f"partial targets define the loss (the positions whose label is outside the allowed "
                         f"set): {', '.join(given)} do not apply to them")


def partial_loss_augmented_chain(chain: Chain, allowed: Tensor, *, h: HLike = None, rescaling: str = "margin",
                                 algorithm: str = "auto") -> tuple[Tensor, Tensor, Tensor]:
    """:func:`loss_augmented_chain` for partial targets, ``allowed`` (B, T, N) bool (see
    :func:`structtorch.chain.linear.allowed_labels`): the target is the best labeling consistent
    with the sets (its score, whose gradient is that labeling's indicator, a subgradient of the
    max over them) and the loss counts the positions whose label is outside its set (a 0/1 cost,
    so any h and both rescalings)."""
    with torch.no_grad():
        score, best = _chain_ops.viterbi(consistent_chain(chain.map(torch.Tensor.detach), allowed))
    check_target_score(score, "target allows no labeling in row {}: no labeling is consistent with its "
                              "allowed labels and the potentials' finite entries")
    # a 0/1 cost: every count is at most T, so the table's size is known without reading it
    return loss_augmented_chain(chain, best.clamp(min=0), h=h, rescaling=rescaling, cost=(~allowed).long(),
                                algorithm=algorithm, max_count=chain.shape[1])


def _fusing_backend(chain: Chain, h: HLike, rescaling: str, algorithm: str) -> str | None:
    """The chain's backend where it runs the whole search, on a non-empty batch of non-empty
    chains, else None (:func:`solve` runs): a backend in :data:`FUSED` for any loss
    (``algorithm="viterbi"`` with slack rescaling or a custom h, which needs h known to be affine,
    takes :func:`solve` and its message), one in :data:`FOLDS` where the loss folds into the scores
    (margin rescaling, h the identity, not ``algorithm="hamming"``)."""
    B, T, _ = chain.shape
    if B == 0 or T == 0 or not _fusable(h, rescaling, algorithm) or transformed():  # torch.func: solve
        return None
    backend = _chain_ops.backend_of(chain)
    folds = h is None and rescaling == "margin" and algorithm != "hamming"
    return backend if backend in FUSED or (backend in FOLDS and folds) else None


def _fusable(h: HLike, rescaling: str, algorithm: str) -> bool:
    """Whether the fused searches take these loss arguments: valid names, and no
    ``algorithm="viterbi"`` where the loss does not fold (slack rescaling, or a custom h, which the
    device cannot know to be affine): those take :func:`solve` and its message."""
    valid = rescaling in RESCALINGS and algorithm in ALGORITHMS
    return valid and (algorithm != "viterbi" or (h is None and rescaling == "margin"))


def _fused(chain: Chain, target: Tensor, rescaling: str, algorithm: str, h: HLike,
           backend: str) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`loss_augmented_chain` by the backend's kernels: nothing read on the host, a constant
    number of device ops (the table for slack rescaling, a custom h or ``algorithm="hamming"``,
    else the folded Viterbi); ``target`` checked by :func:`_checked_target`."""
    B, T, _ = chain.shape
    htab = None if h is None else h_table(h, T, B, chain.unary, "T+1")
    table = rescaling == "slack" or algorithm == "hamming"
    value, path, count, gold = fused_search(chain, target, rescaling, table, htab, backend=backend)
    return _checked_value(value, gold, chain.unary.dtype), path, count


def _fused_spec(search: Callable[..., tuple[Tensor, ...]], spec: LossSpec, target: Tensor, N: int,
                dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor]:
    """The search of position weights or costs by the backend's kernels, ``search(rescaling, table,
    htab, units, pair, low)`` (:func:`fused_search` or :func:`fused_window_search` on the
    structure; see :func:`~structtorch.lossaug.spec.resolve_loss`, which reads nothing back where the
    loss folds or the table's size is known): the folded Viterbi where the spec has no table of h,
    else the table (integer units; the min table only where h may be negative)."""
    units = spec.weights if spec.hamming else spec.units(target, N)
    table = spec.htab is not None
    low = not spec.nonnegative
    value, path, count, gold = search(spec.rescaling, table, spec.htab, units, spec.pair, low)
    if not spec.hamming or spec.scale != 1:  # as LossSpec.count: real costs, or counts in units of 1/scale
        count = count.double() if spec.scale == 1 else count / spec.scale
    return _checked_value(value, gold, dtype), path, count


def _checked_target(target: object, ref: Tensor, lengths: Tensor) -> Tensor:
    """``target`` as a (B, T) int64 tensor, its labels checked in [0, N) inside each length (a
    counted check: nothing read on the host); ``ref`` (B, T, N, ...) gives the shape and device."""
    target = check_label_tensor(target, tuple(ref.shape[:2]), ref.device, "target")
    check_label_values(target, lengths, ref.shape[2], "target")  # the kernels clamp what they read
    return target


def _checked_value(value: Tensor, gold: Tensor, dtype: torch.dtype) -> Tensor:
    """The kernels' value (B,) float64 cast to ``dtype``, after the checks of :func:`solve` (a target
    score of -inf, an overflow) on the target's score ``gold`` (B,) and on the value."""
    check_target_score(gold)
    names = "the potentials or the loss"
    guard_overflow(value, (), 0, lambda: None, "the loss-augmented value", names)  # +inf, NaN
    return cast_checked(value, dtype, "the loss-augmented value", names)


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
    pair_cost: Tensor | None = None,
    max_count: int | None = None,
    mask: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`loss_augmented` for chains of order l.

    ``scores`` (B, T) + (N,) * (l + 1) as for :func:`structtorch.window_viterbi` (``mask`` too);
    the other arguments and the returns as for :func:`loss_augmented` (``pair_cost`` needs
    l >= 1). O(T^2 N^(l+1)) for the table.
    """
    if mask is not None:
        scores, lengths, moved = masked_windows(scores, lengths, mask)
        if moved is not None:
            target, weights, cost = (moved.take_positions(x) for x in (target, weights, cost))
            pair_cost = moved.take_transitions(pair_cost) if isinstance(pair_cost, Tensor) else pair_cost
        value, path, count = window_loss_augmented(
            scores, target, h=h, rescaling=rescaling, lengths=lengths, weights=weights, cost=cost,
            algorithm=algorithm, pair_cost=pair_cost, max_count=max_count)
        return value, path if moved is None else moved.put(path, -1), count
    scores, order, N = _check_scores(scores)
    B, T = scores.shape[:2]
    lengths = check_lengths(lengths, B, T, scores.device)
    if pair_cost is not None and order == 0:
        raise ValueError("pair_cost needs windows of order l >= 1 (order-0 scores do not see the previous "
                         "label)")
    ref = scores.new_empty(1, 1, 1).expand(B, T, N)  # the shape and device of unary scores
    if B > 0 and T > 0 and _fusable(h, rescaling, algorithm) and _backend.backend_for(scores) in FUSED:
        target = _checked_target(target, scores, lengths)
        if weights is None and cost is None and pair_cost is None:
            return _fused_window(scores, lengths, target, rescaling, algorithm, h)
        mask = torch.arange(T, device=scores.device) < lengths[:, None]
        spec = resolve_loss(h, rescaling, weights, cost, target, mask, ref, algorithm, pair_cost, max_count)
        return _fused_spec(lambda *loss: fused_window_search(scores, lengths, target, *loss), spec, target, N,
                           scores.dtype)
    mask = torch.arange(T, device=scores.device) < lengths[:, None]
    target = check_labels(target, mask, N, name="target")
    spec = resolve_loss(h, rescaling, weights, cost, target, mask, ref, algorithm, pair_cost, max_count)
    model = _WindowStructure(scores, order, N, lengths, target)
    return solve(model, spec, target, N, algorithm, scores.dtype)


def _fused_window(scores: Tensor, lengths: Tensor, target: Tensor, rescaling: str, algorithm: str,
                  h: HLike) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`window_loss_augmented` by the backend's kernels (the unweighted Hamming loss, any h,
    both rescalings): nothing read on the host, a constant number of device ops."""
    B, T = scores.shape[:2]
    htab = None if h is None else h_table(h, T, B, scores, "T+1")
    table = rescaling == "slack" or algorithm == "hamming"
    value, path, count, gold = fused_window_search(scores, lengths, target, rescaling, table, htab)
    return _checked_value(value, gold, scores.dtype), path, count


loss_augmented_viterbi = deprecated_alias(loss_augmented, "loss_augmented_viterbi", "loss_augmented")
loss_augmented_viterbi_window = deprecated_alias(window_loss_augmented, "loss_augmented_viterbi_window",
                                                 "window_loss_augmented")
