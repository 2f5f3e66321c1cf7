"""The loss-augmented searches as PyTorch operators, one per structure:
``structtorch::chain_loss_augmented``, ``structtorch::window_loss_augmented`` and
``structtorch::semimarkov_loss_augmented``. Each runs :func:`structtorch.lossaug.hamming.search` whole
(the Hamming table or the folded Viterbi, the checks that read values, the tie rule) and has a fake
implementation, so that ``torch.compile`` traces a structured hinge loss without graph breaks. The
output (the most violating structure) is a (B, T) int64 tensor: the differentiable value is
recomputed from the potentials along it (:func:`solve`).

Every operator takes the structure's tensors (the first one (B, T, N, ...)) and the target, then
the same trailing loss arguments (see :func:`_loss`): one decorator, :func:`loss_operator`, builds
each from a function that rebuilds the structure from its tensors.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

import torch
from torch import Tensor

from .._checks import cast_checked, guard_overflow
from .._library import operator
from ..chain.layout import Chain
from ..semimarkov.layout import SemiMarkov
from ..semimarkov.plif import SegmentPLiF
from .spec import LossSpec
from .structures import _ChainStructure, _SemiMarkovStructure, _Structure, _value, _WindowStructure, search

Opt = Tensor | None


def _fake(first, *rest):
    return first.new_empty(first.shape[:2], dtype=torch.long)


def _loss(gold: Tensor, weights: Tensor, htab: Opt, cost: Opt, intercept: Opt, slope: Opt,
          affine_from_htab: bool, nonnegative: bool, rescaling: str,
          algorithm: str) -> tuple[LossSpec, Tensor, str]:
    """The operators' trailing arguments: the target's detached score (B,), the fields of a
    :class:`LossSpec` and the algorithm's name."""
    affine = None if intercept is None else (intercept, slope)
    return LossSpec(rescaling, weights, htab, cost, affine, affine_from_htab, nonnegative), gold, algorithm


def _loss_arguments(spec: LossSpec, gold: Tensor, algorithm: str) -> tuple:
    """The arguments of :func:`_loss` for ``spec``."""
    intercept, slope = spec.affine if spec.affine is not None else (None, None)
    flags = (spec.affine_from_htab, spec.nonnegative)
    return (gold, spec.weights, spec.htab, spec.cost, intercept, slope, *flags, spec.rescaling, algorithm)


_LOSS_PARAMETERS = tuple(inspect.signature(_loss).parameters.values())


def loss_operator(name: str) -> Callable[[Callable[..., _Structure]], Callable]:
    """Decorator: ``structure(*tensors, target) -> model`` becomes the operator
    ``structtorch::<name>(*tensors, target, *loss arguments) -> Tensor``, the (B, T) int64 most
    violating structure of ``model`` (the schema: the structure's parameters, then :func:`_loss`'s)."""

    def register(structure: Callable[..., _Structure]) -> Callable:
        head = tuple(inspect.signature(structure).parameters.values())

        def run(*args):
            model = structure(*args[:len(head)])
            spec, gold, algorithm = _loss(*args[len(head):])
            return search(model, spec, args[len(head) - 1], args[0].shape[2], algorithm, gold).clone()

        run.__signature__ = inspect.Signature([*head, *_LOSS_PARAMETERS], return_annotation="Tensor")
        return operator(name, _fake)(run)

    return register


@loss_operator("chain_loss_augmented")
def chain_loss_augmented(unary: Tensor, transitions: Tensor, start: Tensor, end: Tensor, lengths: Tensor,
                         target: Tensor) -> _ChainStructure:
    """The most violating labeling of a linear chain."""
    return _ChainStructure(Chain(unary, transitions, start, end, lengths), target)


@loss_operator("window_loss_augmented")
def window_loss_augmented(scores: Tensor, lengths: Tensor, target: Tensor) -> _WindowStructure:
    """The most violating labeling of an order-l chain, ``scores`` (B, T) + (N,) * (l + 1)."""
    return _WindowStructure(scores, scores.dim() - 3, scores.shape[2], lengths, target)


@loss_operator("semimarkov_loss_augmented")
def semimarkov_loss_augmented(content: Tensor, transitions: Tensor, length_scores: Tensor, boundary: Tensor,
                              segment_scores: Opt, start: Tensor, end: Tensor, lengths: Tensor, tracks: Opt,
                              ordinates: Opt, low: float, high: float, target_starts: Tensor,
                              target: Tensor) -> _SemiMarkovStructure:
    """The most violating segmentation (encoded as in :mod:`structtorch.lossaug.semimarkov`); the
    segment PLiF is (tracks, ordinates, low, high) when ``tracks`` is given."""
    plif = None if tracks is None else SegmentPLiF(tracks, ordinates, low, high)
    sm = SemiMarkov(content, transitions, length_scores, boundary, segment_scores, start, end, lengths, plif)
    mask = torch.arange(content.shape[1], device=content.device) < lengths[:, None]
    return _SemiMarkovStructure(sm, target, target_starts, mask)


def most_violating(model: _Structure, spec: LossSpec, target: Tensor, algorithm: str, gold: Tensor) -> Tensor:
    """The (B, T) most violating structure of ``model``, through its operator (``model.operator``
    on ``model.arguments()``, detached)."""
    op = getattr(torch.ops.structtorch, model.operator).default
    args = (x.detach() if isinstance(x, Tensor) else x for x in model.arguments())
    return op(*args, target, *_loss_arguments(spec, gold, algorithm))


def solve(model: _Structure, spec: LossSpec, target: Tensor, N: int, algorithm: str,
           dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor]:
    """(value, structure, count) of the most violating structure; ``target`` holds the labels. The
    structure comes from the model's operator; the value is recomputed along it from the
    potentials, so that its gradient is the exact subgradient."""
    if algorithm == "hamming" and spec.htab is None:
        raise ValueError("algorithm='hamming' needs non-negative integer weights and no cost")
    gold = model.score(model.truth)
    struct = most_violating(model, spec, target, algorithm, gold.detach())
    names = "the potentials or the loss"
    value = _value(model, spec, target, struct, gold)
    guard_overflow(value, (), 0, lambda: None, "the loss-augmented value", names)  # +inf, NaN
    value = cast_checked(value, dtype, "the loss-augmented value", names)
    return value, struct, spec.count(model.labels(struct), target)
