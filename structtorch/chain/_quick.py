"""Small-call lanes of the chain: the common case of :func:`structtorch.viterbi` and of
:class:`structtorch.LinearChainCRF`'s loss and decoding in one call of the compiled kernels.

A sentence at a time (a tagging service, a BCFW block step) makes calls whose kernel takes a few
microseconds; the general path's Python (argument checks as PyTorch operators, the backend lookup,
the autograd Function, result guards) took ten times that. A lane takes a call whose arguments are
plain eager CPU tensors of one float dtype in the shapes the kernels take, on the "compiled"
backend, with lengths or a mask whose rows are prefixes: it checks their metadata here and leaves
the rest to one C++ call (``csrc/quick.cpp``): start, end and lengths made canonical, the value
checks (while :func:`structtorch.set_validation` is on), the kernel and the cast of the result.
Anything else, and any call whose value checks fail or whose result is not finite (an infeasible
row, an overflow) or whose mask has gaps, returns None and takes the general path, which raises
the usual error or returns the exact result: a lane never answers differently from the general
path.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .. import _backend
from .._checks import validation_enabled
from .._extension import fast_ops
from .._library import PLAIN, intercepted
from .._threads import call_threads
from . import _ops, _torch
from .layout import Chain

__all__ = ["viterbi", "nll"]

_FLOATS = (torch.float32, torch.float64)


def _canonical_shapes(unary: object, transitions: object, start: object, end: object,
                      lengths: object, mask: object) -> bool:
    """Whether the arguments are what the lanes take: plain CPU tensors of one float dtype, unary
    (B, T, N) with T >= 1 and N <= 32767, transitions (N, N) or (B, T-1, N, N), start and end None,
    (N,) or (B, N), lengths None or (B,) integers, or instead a (B, T) bool or uint8 mask (whose
    rows the kernel accepts when they are prefixes); eager, on the "compiled" backend, no
    autocast."""
    if torch.compiler.is_compiling() or not isinstance(unary, Tensor) or unary.dim() != 3 or (
            unary.dtype not in _FLOATS):
        return False
    B, T, N = unary.shape
    if T < 1 or not 1 <= N <= 32767 or unary.device.type != "cpu" or fast_ops() is None:
        return False
    dtype = unary.dtype
    if not (isinstance(transitions, Tensor) and transitions.dtype == dtype
            and transitions.shape in ((N, N), (B, T - 1, N, N))):
        return False
    for x in (start, end):
        if x is not None and not (isinstance(x, Tensor) and x.dtype == dtype and x.shape in ((N,), (B, N))):
            return False
    if lengths is not None and not (isinstance(lengths, Tensor) and lengths.shape == (B,)
                                    and not lengths.is_floating_point() and lengths.dtype != torch.bool):
        return False
    if mask is not None and not (lengths is None and isinstance(mask, Tensor) and mask.shape == (B, T)
                                 and mask.dtype in (torch.bool, torch.uint8)):
        return False
    for x in (transitions, start, end, lengths, mask):  # plain CPU tensors (not meta, not subclasses)
        if x is not None and (type(x) not in PLAIN or x.device.type != "cpu"):
            return False
    return (type(unary) in PLAIN and not intercepted() and not torch.is_autocast_enabled("cpu")
            and _backend.backend_for(unary) == "compiled")


def _needs_grad(*tensors: Tensor | None) -> bool:
    return torch.is_grad_enabled() and any(x is not None and x.requires_grad for x in tensors)


def viterbi(unary: Tensor, transitions: Tensor, start: Tensor | None = None, end: Tensor | None = None,
            lengths: Tensor | None = None, mask: Tensor | None = None) -> tuple[Tensor, Tensor] | None:
    """(score (B,), path (B, T)) as :func:`structtorch.viterbi` returns them (the score's gradient
    the indicator of the path), or None: take the general path (the arguments are not the lane's,
    a check failed or a score is not finite)."""
    if not _canonical_shapes(unary, transitions, start, end, lengths, mask):
        return None
    args = (unary, transitions, start, end, lengths, mask, validation_enabled())
    with call_threads():
        if _needs_grad(unary, transitions, start, end):
            score, path, status = _Viterbi.apply(*args)
        else:
            score, path, status = fast_ops().quick_viterbi(*args)
    return (score, path) if status == 0 else None


class _Viterbi(torch.autograd.Function):
    """The lane's Viterbi with the score's gradient, the indicator of the path (the old form: the
    lanes run eagerly only)."""

    @staticmethod
    def forward(ctx, unary, transitions, start, end, *rest):  # rest: lengths, mask, validate
        score, path, status = fast_ops().quick_viterbi(unary, transitions, start, end, *rest)
        if status == 0:
            ctx.save_for_backward(path)
            ctx.mark_non_differentiable(path)
            ctx.shapes = (unary.shape[2], transitions.dim() == 2,
                          ((3, unary.dtype), (transitions.dim(), unary.dtype),
                           None if start is None else (start.dim(), unary.dtype),
                           None if end is None else (end.dim(), unary.dtype)))
        return score, path, status

    @staticmethod
    def backward(ctx, grad, *_):
        (path,) = ctx.saved_tensors
        N, shared, inputs = ctx.shapes
        grads = _torch.indicator_grads(path, (path >= 0).sum(1), grad, N, shared)  # finite: no infeasible row
        out = [None if x is None else (g.sum(0) if i >= 2 and x[0] == 1 else g).to(x[1])  # (N,) start, end
               for i, (g, x) in enumerate(zip(grads, inputs, strict=True))]
        needs = ctx.needs_input_grad[:4]
        return (*(g if need else None for g, need in zip(out, needs, strict=True)), None, None, None)


def nll(unary: Tensor, transitions: Tensor, start: Tensor | None, end: Tensor | None, lengths: Tensor | None,
        mask: Tensor | None, labels: object) -> Tensor | None:
    """The CRF loss logZ - score(labels) (B,) as :class:`structtorch.LinearChainCRF` computes it
    (differentiable, double backward included), or None: take the general path."""
    if not (_canonical_shapes(unary, transitions, start, end, lengths, mask) and isinstance(labels, Tensor)
            and labels.shape == unary.shape[:2] and labels.device.type == "cpu"
            and not labels.is_floating_point() and labels.dtype != torch.bool):
        return None
    with call_threads():
        loss, status = _NegativeLogLikelihood.apply(unary, transitions, start, end, lengths, mask, labels,
                                                    validation_enabled())
    return loss if status == 0 else None


class _NegativeLogLikelihood(torch.autograd.Function):
    """The lane's CRF loss: outputs (loss (B,) in the input dtype, status); eager only (the old
    form, without ``setup_context``: the lanes never run under transforms or compilation)."""

    @staticmethod
    def forward(ctx, unary, transitions, start, end, lengths, mask, labels, validate):
        loss, state, status = fast_ops().quick_nll(unary, transitions, start, end, lengths, mask, labels,
                                                   validate)
        if status == 0:
            ctx.save_for_backward(unary, transitions, start, end, *state)
            ctx.dims = tuple(0 if x is None else x.dim() for x in (start, end))
        return loss, status

    @staticmethod
    def backward(ctx, grad, _):
        unary, transitions, start, end, *state = ctx.saved_tensors
        needs = ctx.needs_input_grad[:4]
        if torch.is_grad_enabled():  # double backward: differentiate the recursion
            grads = _double_backward(unary, transitions, start, end, state, needs, grad)
        else:
            grads = fast_ops().quick_nll_backward(grad, unary, transitions, *ctx.dims, state)
        return (*(g if need else None for g, need in zip(grads, needs, strict=True)), None, None, None, None)


def _double_backward(unary, transitions, start, end, state, needs, grad):
    """The lane's gradients with ``create_graph``, through the PyTorch recursion
    (:func:`structtorch.chain._ops.nll_double_backward`) on the canonical chain, start and end
    summed back to their shapes."""
    B, _, N = unary.shape
    lengths, labels = state[5], state[6]

    def rows(x: Tensor | None) -> Tensor:
        return unary.new_zeros(B, N) if x is None else x.expand(B, N)

    chain = Chain(unary, transitions, rows(start), rows(end), lengths)
    grads = _ops.nll_double_backward(chain, labels, needs, grad)
    ends = zip(grads[2:], (start, end), strict=True)  # None where not needed (None inputs among them)
    return (*grads[:2], *(g if g is None or x.dim() == 2 else g.sum(0) for g, x in ends))
