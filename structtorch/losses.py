"""Structured losses, between the structures and the modules: the structured hinge (margin and
slack rescaling on loss-augmented inference) and the CRF negative log-likelihood of chain
potentials.

Layering: this module imports the structures (``chain``, ``semimarkov``, ``lossaug``,
``distributions``; ``lp`` on first use by a graph model); ``structtorch.nn`` may import it, and
the learning layer (:mod:`structtorch.learn`) sits on top of both.
"""

from __future__ import annotations

import inspect
from typing import Any, Protocol

from torch import Tensor, nn

from ._checks import LengthsLike, warn_infinite_loss
from ._library import NotScriptable
from ._numerics import reduce_batch
from ._precision import mixed_precision
from .chain.linear import chain_loss
from .chain.masking import masked_chain
from .distributions import ChainDistribution, SemiMarkovDistribution
from .lossaug.spec import RESCALINGS, HLike
from .semimarkov.plif import SegmentPLiF

__all__ = ["StructuredHingeLoss", "structured_hinge", "chain_nll", "Structure", "structure_of"]


class Structure(Protocol):
    """What :func:`structured_hinge` needs from a structure: loss-augmented inference for a target,
    whose first output is the loss-augmented value (B,) (its gradient: the hinge's subgradient)."""

    def loss_augmented(self, target: Any, *, h: HLike = None, rescaling: str = "margin",
                       weights: Tensor | None = None, cost: Tensor | None = None) -> tuple[Tensor, ...]: ...


REDUCTIONS = ("mean", "sum", "none")


@mixed_precision
def structured_hinge(
    unary: Tensor | Structure,
    transitions: Tensor | None = None,
    target: Tensor | None = None,
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
    pair_cost: Tensor | None = None,
    loss: str | None = None,
    ignore_index: int | None = None,
    mask: Tensor | None = None,
) -> Tensor:
    """max(0, loss-augmented value) of a structure for a target, reduced over the batch.

    Two forms:

    * ``structured_hinge(structure, target, rescaling=..., h=..., weights=..., cost=...)`` with a
      structure: a :class:`structtorch.ChainDistribution` (target (B, T)),
      :class:`structtorch.SemiMarkovDistribution` (target ``(labels, starts)``),
      :class:`structtorch.lp.GraphStructure` (target (B, V)), or any object with
      ``loss_augmented(target, h=, rescaling=, weights=, cost=) -> (value (B,), ...)``;
    * the keyword form, which builds that structure from potentials: ``structured_hinge(unary,
      transitions, target, start=, end=, lengths=)`` for a linear chain; with ``max_len`` (and
      ``target_starts``, ``length_scores``, ``boundary``, ``segment_scores``, ``segment_plif``) a
      semi-Markov model, ``unary`` being its content; with ``edges`` (E, 2) a graph over the LP
      relaxation, ``unary`` (B, V, L), ``transitions`` the pairwise scores (E, L, L) or
      (B, E, L, L), ``weights`` the region areas and ``connected``/``connected_soft`` its
      connectivity constraints. Chains and semi-Markov models take ``mask`` (B, T) instead of
      ``lengths`` (any pattern; targets, weights and costs are read at its positions).

    Margin rescaling: max(0, max_y' [s(y') + Delta(y, y')] - s(y)); slack rescaling:
    max(0, max_y' Delta(y, y') (1 + s(y') - s(y))), with Delta = h(weighted Hamming) or h of a
    sum of costs (``cost`` per position, ``pair_cost`` (B, T-1, N, N) per pair of neighbouring
    labels: chains); semi-Markov models also take ``loss`` ("hamming", "segment", "boundary",
    "zero_one", see :func:`structtorch.semimarkov_loss_augmented`). Chains take partial targets:
    a (B, T, N) bool tensor of the labels allowed at each position, or ``ignore_index`` at
    unlabeled positions; s(y) is then the best consistent labeling's score and Delta counts the
    positions whose label is outside the allowed set. ``pair_cost``, ``loss`` and
    ``ignore_index`` reach the structure's ``loss_augmented`` only when given. The gradient is the
    exact subgradient (zero where the hinge is inactive).

    Returns a scalar for reduction "mean"/"sum", else a (B,) tensor.

    Examples
    --------
    >>> import torch, structtorch as st
    >>> unary = torch.tensor([[[2., 0.], [0., 3.], [2., 0.]]])
    >>> transitions = torch.tensor([[0., -1.], [-1., 0.]])
    >>> target = torch.tensor([[0, 1, 0]])  # the best labeling, by a margin of 1 over every other
    >>> st.structured_hinge(unary, transitions, target)
    tensor(0.)
    >>> st.structured_hinge(unary, transitions, target, rescaling="slack")
    tensor(0.)
    """
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
    keywords = {"start": start, "end": end, "lengths": lengths, "max_len": max_len,
                "target_starts": target_starts, "length_scores": length_scores, "boundary": boundary,
                "segment_scores": segment_scores,
                "segment_plif": segment_plif, "edges": edges, "connected": connected,
                "connected_soft": connected_soft, "mask": mask}
    if hasattr(unary, "loss_augmented"):  # structured_hinge(structure, target)
        if target is not None:
            raise TypeError("structured_hinge(structure, target, ...) takes the target second, not a third "
                            "positional argument")
        given = [k for k, v in keywords.items() if v is not None]
        if given:
            raise ValueError(f"{', '.join(given)} belong to the structure, not to "
                             "structured_hinge(structure, target)")
        structure, target = unary, transitions
    else:
        structure, target = structure_of(unary, transitions, target, **keywords)
    extra = _extra_loss_arguments(structure, pair_cost=pair_cost, loss=loss, ignore_index=ignore_index)
    value = structure.loss_augmented(target, h=h, rescaling=rescaling, weights=weights, cost=cost, **extra)[0]
    return reduce_batch(value.clamp(min=0), reduction)


def _extra_loss_arguments(structure: object, **given: object) -> dict[str, object]:
    """The loss arguments beyond (h, rescaling, weights, cost) that were given, checked to be taken
    by the structure's ``loss_augmented`` (a ValueError naming them otherwise)."""
    given = {k: v for k, v in given.items() if v is not None}
    if not given:  # the common case, and what torch.compile traces without inspecting signatures
        return given
    taken = inspect.signature(structure.loss_augmented).parameters
    refused = [k for k in given if k not in taken]
    if refused:
        raise ValueError(f"{', '.join(refused)} is not a loss argument of {type(structure).__name__} "
                         f"(its loss_augmented takes {', '.join(k for k in taken if k != 'target')})")
    return given


def structure_of(unary: Tensor, transitions: Tensor, target: object, *, start=None, end=None, lengths=None,
                 max_len=None, target_starts=None, length_scores=None, boundary=None, segment_scores=None,
                 segment_plif=None, edges=None, connected=None,
                 connected_soft=None, mask=None) -> tuple[Structure, object]:
    """(structure, target) of the keyword form of :func:`structured_hinge`: which model the keywords
    describe (a graph with ``edges``, a semi-Markov model with ``max_len``, else a chain)."""
    semimarkov = {"target_starts": target_starts, "length_scores": length_scores, "boundary": boundary,
                  "segment_scores": segment_scores, "segment_plif": segment_plif}
    if edges is not None:
        named = {"start": start, "end": end, "max_len": max_len, "mask": mask, **semimarkov}
        given = [k for k, v in named.items() if v is not None]
        if given:
            raise ValueError(f"graph models (edges=...) do not take {', '.join(given)}")
        from .lp import GraphStructure  # structtorch.lp loads on first use
        from .lp.learning import _check_no_lengths

        _check_no_lengths(lengths, unary.shape[-2])
        graph = GraphStructure(unary, transitions, edges, connected=connected, connected_soft=connected_soft)
        return graph, target
    if connected is not None or connected_soft is not None:
        raise ValueError("connected and connected_soft need edges (a graph model)")
    if max_len is None:
        given = [k for k, v in semimarkov.items() if v is not None]
        if given:
            raise ValueError(f"{', '.join(given)} need max_len (a semi-Markov model); got max_len=None")
        return ChainDistribution(unary, transitions, start=start, end=end, lengths=lengths, mask=mask), target
    structure = SemiMarkovDistribution(unary, transitions, max_len=max_len, length_scores=length_scores,
                                       boundary=boundary, segment_scores=segment_scores, start=start, end=end,
                                       lengths=lengths, segment_plif=segment_plif, mask=mask)
    return structure, (target, target_starts)


class StructuredHingeLoss(NotScriptable, nn.Module):
    """Structured SVM hinge loss as a module; see :func:`structured_hinge`.

    Parameters
    ----------
    rescaling : {"margin", "slack"}
    h : None, callable or Tensor
        The loss as a function of the Hamming count or of the loss's count (None: the count
        itself).
    reduction : {"mean", "sum", "none"}
    loss : str, optional
        The loss of segmentations, passed to the structure's ``loss_augmented``: "hamming" (the
        default), "segment", "boundary" or "zero_one" (see
        :func:`structtorch.semimarkov_loss_augmented`).
    ignore_index : int, optional
        The label of unlabeled positions in chain targets (partial targets, see
        :func:`structured_hinge`), e.g. -100; None: every position is labeled.

    Examples
    --------
    >>> import torch, structtorch as st
    >>> unary = torch.tensor([[[2., 0.], [0., 3.], [2., 0.]]], requires_grad=True)
    >>> transitions = torch.tensor([[0., -1.], [-1., 0.]])
    >>> hinge = st.StructuredHingeLoss("margin")
    >>> loss = hinge(unary, transitions, torch.tensor([[0, 0, 0]]))
    >>> loss.item()
    2.0
    >>> loss.backward()
    >>> unary.grad[0, 1]  # the subgradient: the violator's labels minus the target's
    tensor([-1.,  1.])
    """

    def __init__(self, rescaling: str = "margin", h: HLike = None, reduction: str = "mean",
                 loss: str | None = None, ignore_index: int | None = None) -> None:
        super().__init__()
        if rescaling not in RESCALINGS:
            raise ValueError(f"rescaling must be 'margin' or 'slack', got {rescaling!r}")
        if reduction not in REDUCTIONS:
            raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
        if not (h is None or callable(h) or isinstance(h, Tensor)):
            raise TypeError(f"h must be None, a callable or a tensor, got {type(h).__name__}")
        if loss is not None and not isinstance(loss, str):
            raise TypeError(f"loss must be None or a str, got {type(loss).__name__}")
        if ignore_index is not None and (isinstance(ignore_index, bool) or not isinstance(ignore_index, int)):
            raise TypeError(f"ignore_index must be an int or None, got {ignore_index!r}")
        self.rescaling, self.h, self.reduction, self.loss = rescaling, h, reduction, loss
        self.ignore_index = ignore_index

    def extra_repr(self) -> str:
        extra = "" if self.loss is None else f", loss={self.loss!r}"
        return f"rescaling={self.rescaling!r}, reduction={self.reduction!r}{extra}"

    def forward(
        self,
        unary: Tensor | Structure,
        transitions: Tensor | None = None,
        target: Tensor | None = None,
        *,
        start: Tensor | None = None,
        end: Tensor | None = None,
        lengths: LengthsLike = None,
        weights: Tensor | None = None,
        cost: Tensor | None = None,
        **semimarkov,
    ) -> Tensor:
        """Hinge per sequence, reduced: ``loss(structure, target)`` or the keyword form
        ``loss(unary, transitions, target, ...)``; shapes as for
        :func:`structtorch.loss_augmented`; semi-Markov models pass ``max_len``,
        ``target_starts`` and their segment scores, graph models ``edges`` (and
        ``connected``/``connected_soft``), chains may pass ``pair_cost`` (see
        :func:`structured_hinge`)."""
        return structured_hinge(
            unary, transitions, target, rescaling=self.rescaling, h=self.h, reduction=self.reduction,
            start=start, end=end, lengths=lengths, weights=weights, cost=cost, loss=self.loss,
            ignore_index=self.ignore_index, **semimarkov,
        )


def chain_nll(unary: Tensor, transitions: Tensor, labels: Tensor, *, start: Tensor | None = None,
              end: Tensor | None = None, lengths: LengthsLike = None, reduction: str = "mean",
              mask: Tensor | None = None, ignore_index: int | None = None) -> Tensor:
    """CRF negative log-likelihood ``log Z - score(labels)`` of chain potentials (the loss protocol of
    :func:`structtorch.train.fit`).

    Parameters
    ----------
    unary : Tensor (B, T, N)
    transitions : Tensor (N, N) or (B, T-1, N, N)
    labels : Tensor (B, T) int64, or (B, T, N) bool
        The target labels, or partial targets: a set of allowed labels per position (B, T, N)
        bool, or ``ignore_index`` at unlabeled positions. The loss is then logZ - logZ(consistent),
        -log of the total probability of the labelings consistent with them (the usual NLL when
        every position is labeled).
    start, end : Tensor (N,) or (B, N), optional
    lengths : Tensor (B,), optional
    reduction : {"mean", "sum", "none"}
    mask : Tensor (B, T) bool, optional
        Instead of ``lengths``: any pattern of positions (as for :func:`structtorch.viterbi`);
        ``labels`` are read at them.
    ignore_index : int, optional
        The label value of unlabeled positions inside a sequence (e.g. -100, Hugging Face's);
        None (default): every position inside a sequence carries a label.

    Returns
    -------
    Tensor
        Scalar (mean over the batch, 0 for an empty one, or sum), or (B,) for "none". +inf for a
        row whose target no allowed labeling matches (-inf potentials); a reduced loss of +inf
        comes with a ``RuntimeWarning`` naming those rows, as :meth:`structtorch.LinearChainCRF.forward`'s
        (CPU tensors, value checks on).
    """
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
    nll = _chain_nll(unary, transitions, labels, start, end, lengths, mask, ignore_index)
    return warn_infinite_loss(nll, reduce_batch(nll, reduction), "the negative log-likelihood")


@mixed_precision
def _chain_nll(unary: Tensor, transitions: Tensor, labels: Tensor, start: Tensor | None, end: Tensor | None,
               lengths: LengthsLike, mask: Tensor | None = None, ignore_index: int | None = None) -> Tensor:
    """(B,) logZ - score(labels) (or logZ - logZ(consistent) for partial targets) in the
    accumulation dtype, cast once (see :func:`nll_chain`, :func:`partial_nll_chain`)."""
    chain, moved = masked_chain(unary, transitions, start, end, lengths, mask)
    return chain_loss(chain, moved.take_positions(labels), ignore_index)


