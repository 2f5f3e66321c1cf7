"""Small-call lanes of the chain: the common case of :func:`structtorch.viterbi` and of
:class:`structtorch.LinearChainCRF`'s loss and decoding in one call of the compiled kernels.

A sentence at a time (a tagging service, a BCFW block step) makes calls whose kernel takes a few
microseconds; the general path's Python (argument checks as PyTorch operators, the backend lookup,
the autograd Function, result guards) took ten times that. A lane takes a call whose arguments are
plain eager CPU tensors of one float dtype in the shapes the kernels take, on the "compiled"
backend, with lengths or a mask whose rows are prefixes: it checks here that they are plain tensors
and leaves the rest to one C++ call (``csrc/quick.cpp``): their shapes, dtypes and devices (it
declines any other), start, end and lengths made canonical, the value
checks (while :func:`structtorch.set_validation` is on), the kernel and the cast of the result,
and the result's autograd node in C++ (``csrc/quick_grad.cpp``), so that neither the forward nor
the backward of a sentence runs Python beyond the metadata checks.
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


def _plain(unary: object, *others: object) -> bool:
    """Whether a lane may take the call: ``unary`` a plain tensor (no subclass), the others too or
    None, on the "compiled" backend, eager and outside autocast. The shapes, dtypes and devices are checked by
    the C++ call (``lane_shapes`` in ``csrc/quick.cpp``), which declines the others: attribute reads
    cost more in Python (more still on a Parameter, a subclass) than the whole check in C++."""
    if type(unary) not in PLAIN or intercepted():  # first: torch.compile must not trace the rest
        return False
    for x in others:
        if x is not None and type(x) not in PLAIN:
            return False
    return (not torch.is_autocast_enabled("cpu") and fast_ops() is not None
            and _backend.backend_for(unary) == "compiled")


def viterbi(unary: Tensor, transitions: Tensor, start: Tensor | None = None, end: Tensor | None = None,
            lengths: Tensor | None = None, mask: Tensor | None = None) -> tuple[Tensor, Tensor] | None:
    """(score (B,), path (B, T)) as :func:`structtorch.viterbi` returns them (the score's gradient
    the indicator of the path, a C++ autograd node), or None: take the general path (the arguments
    are not the lane's, a check failed or a score is not finite)."""
    if not _plain(unary, transitions, start, end, lengths, mask):
        return None
    with call_threads():
        score, path, status = fast_ops().quick_viterbi_autograd(unary, transitions, start, end, lengths, mask,
                                                                validation_enabled())
    return (score, path) if status == 0 else None


def nll(unary: Tensor, transitions: Tensor, start: Tensor | None, end: Tensor | None, lengths: Tensor | None,
        mask: Tensor | None, labels: object) -> Tensor | None:
    """The CRF loss logZ - score(labels) (B,) as :class:`structtorch.LinearChainCRF` computes it
    (differentiable through a C++ autograd node, double backward included), or None: take the
    general path."""
    if not (_plain(unary, transitions, start, end, lengths, mask, labels) and labels is not None):
        return None
    with call_threads():
        loss, status = fast_ops().quick_nll_autograd(unary, transitions, start, end, lengths, mask, labels,
                                                     validation_enabled())
    return loss if status == 0 else None


def _viterbi_grads(grad: Tensor, path: Tensor, transitions: Tensor, start_dims: int,
                   end_dims: int) -> tuple[Tensor, ...]:
    """The Viterbi lane's gradients with ``create_graph`` (called by its C++ node,
    ``csrc/quick_grad.cpp``): the indicators of ``path`` scaled by ``grad``, as PyTorch operators;
    start and end (B, N), or (N,) with ``*_dims`` 1 (summed over the batch)."""
    N, shared = transitions.shape[-1], transitions.dim() == 2
    grads = _torch.indicator_grads(path, (path >= 0).sum(1), grad, N, shared)  # finite: no infeasible row
    unary, trans, first, last = (g.to(transitions.dtype) for g in grads)
    ends = ((first, start_dims), (last, end_dims))
    return (unary, trans, *(None if d == 0 else g.sum(0) if d == 1 else g for g, d in ends))


def _nll_double_backward(unary, transitions, start, end, state, needs, grad):
    """The CRF-loss lane's gradients with ``create_graph`` (called by its C++ node,
    ``csrc/quick_grad.cpp``), through the PyTorch recursion
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
