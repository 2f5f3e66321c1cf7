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

The fused searches of the Hamming loss, weights and costs with any h on linear and order-l chains
(``structtorch::chain_hamming_search``, ``structtorch::window_hamming_search`` and their backwards,
on the "triton" backend, see :func:`fused_search`) read no value on the host: the kernels return
the value too, and :class:`FusedSearch` and :class:`FusedWindowSearch` make it differentiable (the
gradient: the indicators of the found labeling minus the target's, scaled).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

import torch
from torch import Tensor

from .._backend import kernel_module
from .._checks import cast_checked, guard_overflow
from .._library import OPERATORS, apply, operator
from ..chain._torch import indicator_grads
from ..chain.layout import Chain
from ..chain.window import _window_indices
from ..semimarkov.layout import SemiMarkov
from ..semimarkov.plif import SegmentPLiF
from .spec import LossSpec
from .structures import _ChainStructure, _SemiMarkovStructure, _Structure, _value, _WindowStructure, search

Opt = Tensor | None


def _fake(first, *rest):
    return first.new_empty(first.shape[:2], dtype=torch.long)


def _loss(gold: Tensor, weights: Tensor, htab: Opt, cost: Opt, pair: Opt, intercept: Opt, slope: Opt,
          affine_from_htab: bool, nonnegative: bool, scale: float, kind: str, rescaling: str,
          algorithm: str) -> tuple[LossSpec, Tensor, str]:
    """The operators' trailing arguments: the target's detached score (B,), the fields of a
    :class:`LossSpec` and the algorithm's name."""
    affine = None if intercept is None else (intercept, slope)
    spec = LossSpec(rescaling, weights, htab, cost, affine, affine_from_htab, nonnegative, pair, scale, kind)
    return spec, gold, algorithm


def _loss_arguments(spec: LossSpec, gold: Tensor, algorithm: str) -> tuple:
    """The arguments of :func:`_loss` for ``spec``."""
    intercept, slope = spec.affine if spec.affine is not None else (None, None)
    flags = (spec.affine_from_htab, spec.nonnegative, spec.scale, spec.kind)
    return (gold, spec.weights, spec.htab, spec.cost, spec.pair, intercept, slope, *flags, spec.rescaling,
            algorithm)


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
    op = OPERATORS[model.operator]
    args = (x.detach() if isinstance(x, Tensor) else x for x in model.arguments())
    return op(*args, target, *_loss_arguments(spec, gold, algorithm))


def solve(model: _Structure, spec: LossSpec, target: Tensor, N: int, algorithm: str,
           dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor]:
    """(value, structure, count) of the most violating structure; ``target`` holds the labels. The
    structure comes from the model's operator; the value is recomputed along it from the
    potentials, so that its gradient is the exact subgradient."""
    if algorithm == "hamming" and spec.htab is None:
        raise ValueError("algorithm='hamming' needs non-negative integer weights or costs")
    gold = model.score(model.truth)
    struct = most_violating(model, spec, target, algorithm, gold.detach())
    names = "the potentials or the loss"
    value = _value(model, spec, target, struct, gold)
    guard_overflow(value, (), 0, lambda: None, "the loss-augmented value", names)  # +inf, NaN
    value = cast_checked(value, dtype, "the loss-augmented value", names)
    return value, struct, model.count(spec, struct, target)


FUSED = ("triton",)
"""The backends whose lossaug module runs the whole chain search (``fold_search``, ``table_search``,
``indicator_backward``); a name, not a module lookup, so that ``torch.compile`` traces the choice."""

FOLDS = ("compiled",)
"""The backends whose lossaug module runs the search of a loss that folds into the scores alone
(``fold_search``: margin rescaling, h the identity); their backward is PyTorch's."""


def _search_fake(unary, transitions, start, end, lengths, target, rescaling, table, htab=None, units=None,
                 pair=None, low=True, backend="triton"):
    B, T = unary.shape[:2]
    value, scale, gold = (unary.new_empty(B, dtype=torch.float64) for _ in range(3))
    real = any(x is not None and x.is_floating_point() for x in (units, pair))
    count = unary.new_empty(B, dtype=torch.float64 if real else torch.long)
    return value, unary.new_empty(B, T, dtype=torch.long), count, scale, gold


def _search_backward_fake(grad, path, target, lengths, scale, N, shared):
    B, T = path.shape
    trans = (N, N) if shared else (B, max(T - 1, 0), N, N)
    return (path.new_empty(B, T, N, dtype=torch.float64), path.new_empty(trans, dtype=torch.float64),
            path.new_empty(B, N, dtype=torch.float64), path.new_empty(B, N, dtype=torch.float64))


@operator("chain_hamming_search", _search_fake)
def chain_hamming_search(unary: Tensor, transitions: Tensor, start: Tensor, end: Tensor, lengths: Tensor,
                         target: Tensor, rescaling: str, table: bool, htab: Tensor | None = None,
                         units: Tensor | None = None, pair: Tensor | None = None, low: bool = True,
                         backend: str = "triton") -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """(value, path, count, scale, gold) of the loss Delta = h(count) with h the identity or the
    table ``htab`` (B, K + 1) float64, on ``backend`` (one of :data:`FUSED`, see
    ``lossaug/_triton.py``, or of :data:`FOLDS`, the folded search alone): the
    count is the Hamming count, weighted by ``units`` (B, T), or the sum of the per-label costs
    ``units`` (B, T, N), plus the pair costs ``pair`` (B, T - 1, N, N) when given. Through the table
    when ``table`` (slack rescaling and a custom h need it; integer units, the min table unless
    ``low`` is False), else by the folded Viterbi (margin with h the identity only)."""
    chain = Chain(unary, transitions, start, end, lengths)
    module = kernel_module(backend, __package__)
    if table or htab is not None:
        return module.table_search(chain, target, rescaling == "margin", htab, units, pair, low)
    return module.fold_search(chain, target, units, pair)


@operator("chain_hamming_search_backward", _search_backward_fake)
def chain_hamming_search_backward(grad: Tensor, path: Tensor, target: Tensor, lengths: Tensor, scale: Tensor,
                                  N: int, shared: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """float64 gradients of unary, transitions ((N, N) when ``shared``), start and end of
    ``grad * scale * (s(path) - s(target))``."""
    module = kernel_module("triton", __package__)
    return module.indicator_backward(path, target, lengths, grad, scale, N, shared)


class FusedSearch(torch.autograd.Function):
    """(value (B,) float64, path, count, scale, gold) of :func:`chain_hamming_search`; the value's
    gradient is ``scale`` times the indicators of the path minus those of the target (zero where the
    target was kept)."""

    @staticmethod
    def forward(unary, transitions, start, end, lengths, target, rescaling, table, htab, units, pair, low,
                backend):
        return chain_hamming_search(unary, transitions, start, end, lengths, target, rescaling, table, htab,
                                    units, pair, low, backend)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output[1], inputs[5], inputs[4], output[3])
        ctx.dtypes = tuple(x.dtype for x in inputs[:4])
        ctx.N, ctx.shared, ctx.backend = inputs[0].shape[2], inputs[1].dim() == 2, inputs[12]
        ctx.mark_non_differentiable(*output[1:])
        ctx.set_materialize_grads(False)

    @staticmethod
    def backward(ctx, grad, *_):
        needs = ctx.needs_input_grad[:4]
        if grad is None:
            return (None,) * 13
        path, target, lengths, scale = ctx.saved_tensors
        if torch.is_grad_enabled() or ctx.backend not in FUSED:  # double backward: differentiable in grad
            g = grad * scale
            inside = torch.arange(path.shape[1], device=path.device) < lengths[:, None]
            found = indicator_grads(path, lengths, g, ctx.N, ctx.shared)
            gold = indicator_grads(torch.where(inside, target, -1), lengths, g, ctx.N, ctx.shared)
            grads = tuple(a - b for a, b in zip(found, gold, strict=True))
        else:
            grads = chain_hamming_search_backward(grad, path, target, lengths, scale, ctx.N, ctx.shared)
        pairs = zip(grads, ctx.dtypes, needs, strict=True)
        return (*(g.to(d) if need else None for g, d, need in pairs), *(None,) * 9)


def fused_search(chain: Chain, target: Tensor, rescaling: str, table: bool, htab: Tensor | None = None,
                 units: Tensor | None = None, pair: Tensor | None = None, low: bool = True,
                 backend: str = "triton") -> tuple[Tensor, ...]:
    """(value (B,) float64, differentiable; path (B, T); count (B,); gold (B,) float64) of the loss
    of :func:`chain_hamming_search` (by default the unweighted Hamming count) with h the identity
    or the table ``htab`` (B, K + 1) float64, on ``backend``, in :data:`FUSED` or, for the folded
    search, :data:`FOLDS` (T > 0, B > 0); ``target`` (B, T) int64, read inside each length."""
    c = chain
    value, path, count, _, gold = apply(FusedSearch, c.unary, c.transitions, c.start, c.end, c.lengths,
                                        target, rescaling, table, htab, units, pair, low, backend)
    return value, path, count, gold


def _window_search_fake(scores, lengths, target, rescaling="margin", table=False, htab=None, units=None,
                        pair=None, low=True):
    return _search_fake(scores, None, None, None, lengths, target, rescaling, table, htab, units, pair, low)


@operator("window_hamming_search", _window_search_fake)
def window_hamming_search(scores: Tensor, lengths: Tensor, target: Tensor, rescaling: str = "margin",
                          table: bool = False, htab: Tensor | None = None, units: Tensor | None = None,
                          pair: Tensor | None = None,
                          low: bool = True) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """(value, path, count, scale, gold) of the loss of :func:`chain_hamming_search` on an order-l
    chain (``scores`` (B, T) + (N,) * (l + 1); pair costs for l >= 1), on the "triton" backend:
    through the table when ``table`` or a table ``htab`` of h is given, else by the folded Viterbi."""
    module = kernel_module("triton", __package__)
    order = scores.dim() - 3
    if table or htab is not None:
        return module.window_table_search(scores, order, lengths, target, rescaling == "margin", htab, units,
                                          pair, low)
    return module.window_fold_search(scores, order, lengths, target, units, pair)


def _window_backward_fake(grad, path, target, lengths, scale, shape):
    return path.new_empty(shape, dtype=torch.float64)


@operator("window_hamming_search_backward", _window_backward_fake)
def window_hamming_search_backward(grad: Tensor, path: Tensor, target: Tensor, lengths: Tensor, scale: Tensor,
                                   shape: list[int]) -> Tensor:
    """The float64 gradient of ``grad * scale * (s(path) - s(target))`` w.r.t. the window scores
    of shape ``shape``."""
    module = kernel_module("triton", __package__)
    return module.window_indicator_backward(path, target, lengths, grad, scale, tuple(shape))


def _window_indicators(path: Tensor, lengths: Tensor, g: Tensor, shape: tuple[int, ...]) -> Tensor:
    """g (B,) times the window indicators of ``path`` (B, T) inside each length, as a tensor of
    ``shape`` (differentiable in g)."""
    B, T, N = shape[:3]
    order = len(shape) - 3
    inside = torch.arange(T, device=path.device) < lengths[:, None]
    weight = torch.where(inside, g[:, None], 0.0)
    index = _window_indices(path, order, N)
    return g.new_zeros(B, T, N ** (order + 1)).scatter(2, index[..., None], weight[..., None]).view(shape)


class FusedWindowSearch(torch.autograd.Function):
    """(value (B,) float64, path, count, scale, gold) of :func:`window_hamming_search`; the value's
    gradient is ``scale`` times the window indicators of the path minus the target's."""

    @staticmethod
    def forward(scores, lengths, target, rescaling, table, htab, units, pair, low):
        return window_hamming_search(scores, lengths, target, rescaling, table, htab, units, pair, low)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output[1], inputs[2], inputs[1], output[3])
        ctx.shape, ctx.dtype = list(inputs[0].shape), inputs[0].dtype
        ctx.mark_non_differentiable(*output[1:])
        ctx.set_materialize_grads(False)

    @staticmethod
    def backward(ctx, grad, *_):
        if grad is None or not ctx.needs_input_grad[0]:
            return (None,) * 9
        path, target, lengths, scale = ctx.saved_tensors
        if torch.is_grad_enabled():  # double backward: differentiable in grad
            g, shape = grad * scale, tuple(ctx.shape)
            found, gold = (_window_indicators(x, lengths, g, shape) for x in (path, target))
            result = found - gold
        else:
            result = window_hamming_search_backward(grad, path, target, lengths, scale, ctx.shape)
        return result.to(ctx.dtype), *(None,) * 8


def fused_window_search(scores: Tensor, lengths: Tensor, target: Tensor, rescaling: str = "margin",
                        table: bool = False, htab: Tensor | None = None, units: Tensor | None = None,
                        pair: Tensor | None = None, low: bool = True) -> tuple[Tensor, ...]:
    """:func:`fused_search` for an order-l chain."""
    value, path, count, _, gold = apply(FusedWindowSearch, scores, lengths, target, rescaling, table, htab,
                                        units, pair, low)
    return value, path, count, gold
