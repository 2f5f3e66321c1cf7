"""Structured hinge losses (margin and slack rescaling) on loss-augmented Viterbi."""

from __future__ import annotations

from torch import Tensor, nn

from .._checks import LengthsLike
from .._numerics import reduce_batch
from .._precision import mixed_precision
from ..lossaug.hamming import RESCALINGS, HLike, loss_augmented_viterbi
from ..lossaug.semimarkov import semimarkov_loss_augmented
from ..semimarkov.plif import SegmentPLiF

__all__ = ["StructuredHingeLoss", "structured_hinge"]

REDUCTIONS = ("mean", "sum", "none")


@mixed_precision
def structured_hinge(
    unary: Tensor,
    transitions: Tensor,
    target: Tensor,
    *,
    rescaling: str = "margin",
    h: HLike = None,
    reduction: str = "mean",
    start: Tensor | None = None,
    end: Tensor | None = None,
    lengths: LengthsLike = None,
    weights: Tensor | None = None,
    cost: Tensor | None = None,
    max_len: int | None = None,
    target_starts: Tensor | None = None,
    length_scores: Tensor | None = None,
    boundary: Tensor | None = None,
    segment_scores: Tensor | None = None,
    segment_plif: SegmentPLiF | None = None,
    edges: Tensor | None = None,
    connected: list[int] | None = None,
    connected_soft: dict | None = None,
) -> Tensor:
    """max(0, value) of :func:`structtorch.loss_augmented_viterbi`, reduced over the batch.

    With ``max_len`` (and ``target_starts``) the model is semi-Markov: ``unary`` is the content
    (B, T, N) and the value comes from :func:`structtorch.semimarkov_loss_augmented` with
    ``length_scores``, ``boundary``, ``segment_scores`` and ``segment_plif``.

    With ``edges`` (E, 2) the model is a graph: ``unary`` (B, V, L), ``transitions`` the pairwise
    scores (E, L, L) or (B, E, L, L), ``weights`` the region areas, and the value comes from
    loss-augmented inference over the LP relaxation (:func:`structtorch.lp.relaxed_hinge`, margin
    rescaling with the area-weighted Hamming loss; ``connected``/``connected_soft`` add
    connectivity).

    Margin rescaling: max(0, max_y' [s(y') + Delta(y, y')] - s(y)); slack rescaling:
    max(0, max_y' Delta(y, y') (1 + s(y') - s(y))), with Delta = h(weighted Hamming) or a cost.
    The gradient is the exact subgradient (zero where the hinge is inactive).

    Returns a scalar for reduction "mean"/"sum", else a (B,) tensor.
    """
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
    if edges is not None:
        chain_only = {"start": start, "end": end, "cost": cost, "max_len": max_len,
                      "target_starts": target_starts, "length_scores": length_scores, "boundary": boundary,
                      "segment_scores": segment_scores, "segment_plif": segment_plif}
        given = [k for k, v in chain_only.items() if v is not None]
        if given:
            raise ValueError(f"graph models (edges=...) do not take {', '.join(given)}")
        return _graph_hinge(unary, transitions, target, edges, rescaling, h, reduction, lengths, weights,
                            connected, connected_soft)
    if connected is not None or connected_soft is not None:
        raise ValueError("connected and connected_soft need edges (a graph model)")
    semimarkov_only = {"target_starts": target_starts, "length_scores": length_scores, "boundary": boundary,
                       "segment_scores": segment_scores, "segment_plif": segment_plif}
    given = [k for k, v in semimarkov_only.items() if v is not None]
    if max_len is None and given:
        raise ValueError(f"{', '.join(given)} need max_len (a semi-Markov model); got max_len=None")
    if max_len is not None:
        if cost is not None:
            raise ValueError("cost is not supported for semi-Markov models (use h and weights)")
        value = semimarkov_loss_augmented(
            unary, transitions, target, target_starts, max_len=max_len, h=h, rescaling=rescaling,
            length_scores=length_scores, boundary=boundary, segment_scores=segment_scores, start=start,
            end=end, lengths=lengths, weights=weights, segment_plif=segment_plif,
        )[0]
    else:
        value = loss_augmented_viterbi(
            unary, transitions, target, h=h, rescaling=rescaling, start=start, end=end,
            lengths=lengths, weights=weights, cost=cost,
        )[0]
    return reduce_batch(value.clamp(min=0), reduction)


def _graph_hinge(unary, pairwise, target, edges, rescaling, h, reduction, lengths, weights, connected,
                 connected_soft) -> Tensor:
    from ..lp import RelaxedHingeLoss

    if rescaling != "margin" or h is not None:
        raise ValueError("graph models (edges=...) support margin rescaling with the area-weighted Hamming "
                         "loss only: rescaling='margin', h=None")
    loss = RelaxedHingeLoss(edges, connected=connected, connected_soft=connected_soft, reduction=reduction)
    return loss(unary, pairwise, target, lengths=lengths, weights=weights)


class StructuredHingeLoss(nn.Module):
    """Structured SVM hinge loss as a module; see :func:`structured_hinge`.

    Parameters
    ----------
    rescaling : {"margin", "slack"}
    h : None, callable or Tensor
        The loss as a function of the Hamming count (None: the count itself).
    reduction : {"mean", "sum", "none"}
    """

    def __init__(self, rescaling: str = "margin", h: HLike = None, reduction: str = "mean") -> None:
        super().__init__()
        if rescaling not in RESCALINGS:
            raise ValueError(f"rescaling must be 'margin' or 'slack', got {rescaling!r}")
        if reduction not in REDUCTIONS:
            raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
        if not (h is None or callable(h) or isinstance(h, Tensor)):
            raise TypeError(f"h must be None, a callable or a tensor, got {type(h).__name__}")
        self.rescaling, self.h, self.reduction = rescaling, h, reduction

    def extra_repr(self) -> str:
        return f"rescaling={self.rescaling!r}, reduction={self.reduction!r}"

    def forward(
        self,
        unary: Tensor,
        transitions: Tensor,
        target: Tensor,
        *,
        start: Tensor | None = None,
        end: Tensor | None = None,
        lengths: LengthsLike = None,
        weights: Tensor | None = None,
        cost: Tensor | None = None,
        **semimarkov,
    ) -> Tensor:
        """Hinge per sequence, reduced. Shapes as for :func:`structtorch.loss_augmented_viterbi`;
        semi-Markov models pass ``max_len``, ``target_starts`` and their segment scores, graph models
        ``edges`` (and ``connected``/``connected_soft``) (see
        :func:`structured_hinge`)."""
        return structured_hinge(
            unary, transitions, target, rescaling=self.rescaling, h=self.h, reduction=self.reduction,
            start=start, end=end, lengths=lengths, weights=weights, cost=cost, **semimarkov,
        )
