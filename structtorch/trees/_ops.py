"""The dependency-tree kernels as PyTorch operators, as ``chain/_ops.py`` does for chains: one
schema per algorithm (``structtorch::dependency_log_partition`` and its backward,
``structtorch::dependency_heads``), one implementation per backend named by the caller, fake
implementations for ``torch.compile`` and ``torch.export``, and :class:`LogPartition`, an autograd
Function with ``setup_context`` and a ``reference`` (double backward and ``torch.func`` transforms
differentiate the PyTorch references), for Eisner's DP and the matrix-tree theorem alike; and the
same for CKY over bracketings (``structtorch::cky_log_partition``, ``structtorch::cky_brackets``)."""

from __future__ import annotations

import torch
from torch import Tensor

from .. import _backend
from .._library import apply, operator, save_for_backward
from .._numerics import grads_through
from . import _torch

KERNELS = ("compiled", "triton")
"""The backends with tree kernels (elsewhere the PyTorch references run)."""


def backend_of(arcs: Tensor) -> str:
    """:func:`structtorch._backend.backend_for` with the trees' veto: "torch" for sentences of no
    position (T + 1 = 0 or T = 0, nothing for a kernel to do)."""
    backend = _backend.backend_for(arcs)
    return backend if backend in KERNELS and arcs.shape[1] > 0 else "torch"


def _module(backend: str):
    return _backend.kernel_module(backend, __package__)


def _reference(arcs: Tensor, lengths: Tensor, projective: bool, single_root: bool) -> Tensor:
    """The PyTorch log-partition: Eisner's DP, or the matrix-tree theorem."""
    if projective:
        return _torch.log_partition(arcs, lengths, single_root)
    return _torch.matrix_tree(arcs, lengths, single_root)


def _forward_fake(arcs, lengths, projective, single_root, backend):
    B, T1, _ = arcs.shape
    if backend == "torch":
        state = []
    elif projective:  # the charts
        state = [arcs.new_empty((B, 5, T1, T1), dtype=torch.float64)]
    elif backend == "compiled":  # the weights and the inverse Laplacians (triton: the reference's none)
        state = [arcs.new_empty((B, T1, T1), dtype=torch.float64),
                 arcs.new_empty((B, T1 - 1, T1 - 1), dtype=torch.float64)]
    else:
        state = []
    return arcs.new_empty(B, dtype=torch.float64), state


@operator("dependency_log_partition", _forward_fake)
def forward_op(arcs: Tensor, lengths: Tensor, projective: bool, single_root: bool,
               backend: str) -> tuple[Tensor, list[Tensor]]:
    """logZ (B,) float64 of the (projective) trees and the backend's saved state."""
    if backend == "torch":
        return _reference(arcs, lengths, projective, single_root).double(), []
    module = _module(backend)
    if projective:
        return module.log_partition_forward(arcs, lengths, single_root)
    return module.matrix_tree_forward(arcs, lengths, single_root)


@operator("dependency_log_partition_backward", lambda grad, arcs, *rest: torch.empty_like(arcs))
def backward_op(grad: Tensor, arcs: Tensor, lengths: Tensor, projective: bool, single_root: bool,
                logz: Tensor, state: list[Tensor], backend: str) -> Tensor:
    """grad (B,) times the arc marginals (B, T + 1, T + 1)."""
    if backend == "torch":
        return _torch.grad_of(lambda a: _reference(a, lengths, projective, single_root), arcs, grad)
    module = _module(backend)
    backward = module.log_partition_backward if projective else module.matrix_tree_backward
    return backward(arcs, lengths, single_root, logz, state, grad)


def _heads_fake(arcs, *rest):
    return arcs.new_empty(arcs.shape[:2], dtype=torch.long)


@operator("dependency_heads", _heads_fake)
def heads_op(arcs: Tensor, lengths: Tensor, projective: bool, single_root: bool, backend: str) -> Tensor:
    """Heads (B, T + 1) of the best trees (Eisner's or Chu-Liu-Edmonds'); -1 at the root, beyond
    each length and on rows without a tree."""
    module = _module(backend) or _torch
    if projective:
        return module.viterbi(arcs, lengths, single_root)[1]
    return module.mst(arcs, lengths, single_root)


def _through(reference: Tensor, x: Tensor, grad: Tensor) -> Tensor:
    """The gradient of ``reference`` w.r.t. ``x`` with a graph (double backward); zeros where the
    reference does not depend on ``x`` (sentences without words)."""
    if not reference.requires_grad:
        return torch.zeros_like(x)
    return grads_through(reference, (x,), (True,), grad)[0]


class LogPartition(torch.autograd.Function):
    """Differentiable log-partition (float64 (B,)) of the dependency trees on the operators above;
    its gradient is the arc marginals (the compiled kernels' outside pass, or the inverse
    Laplacian's formula of the matrix-tree theorem)."""

    setup_context = staticmethod(save_for_backward)

    @staticmethod
    def reference(arcs, lengths, projective, single_root, backend):
        """(logZ,) by the PyTorch references: the path under ``torch.func`` transforms."""
        return (_reference(arcs, lengths, projective, single_root).double(),)

    @staticmethod
    def forward(arcs, lengths, projective, single_root, backend):
        logz, state = forward_op(arcs, lengths, projective, single_root, backend)
        return logz, *state

    @staticmethod
    def backward(ctx, grad, *_):
        if grad is None:
            return None, None, None, None, None
        arcs, lengths, logz, *state = ctx.saved_tensors
        projective, single_root, backend = ctx.options
        if torch.is_grad_enabled():  # double backward: differentiate the reference
            reference = _reference(arcs, lengths, projective, single_root).double()
            out = _through(reference, arcs, grad)
        else:
            out = backward_op(grad, arcs, lengths, projective, single_root, logz, state, backend)
        return out, None, None, None, None


def log_partition(arcs: Tensor, lengths: Tensor, projective: bool, single_root: bool) -> Tensor:
    """(B,) float64 log-partition of the (projective) dependency trees, differentiable."""
    return apply(LogPartition, arcs, lengths, projective, single_root, backend_of(arcs))[0]


def best_heads(arcs: Tensor, lengths: Tensor, projective: bool, single_root: bool) -> Tensor:
    """Heads (B, T + 1) of the best trees of ``arcs`` (no graph)."""
    return heads_op(arcs.detach(), lengths, projective, single_root, backend_of(arcs))


def _cky_forward_fake(spans, lengths, backend):
    B, T, _ = spans.shape
    state = [] if backend == "torch" else [spans.new_empty((B, 2, T, T), dtype=torch.float64)]
    return spans.new_empty(B, dtype=torch.float64), state


@operator("cky_log_partition", _cky_forward_fake)
def cky_forward_op(spans: Tensor, lengths: Tensor, backend: str) -> tuple[Tensor, list[Tensor]]:
    """logZ (B,) float64 of the bracketings of span values (B, T, T) and the backend's state."""
    if backend == "torch":
        return _torch.cky_log_partition(spans, lengths).double(), []
    return _module(backend).cky_log_partition_forward(spans, lengths)


@operator("cky_log_partition_backward", lambda grad, spans, *rest: torch.empty_like(spans))
def cky_backward_op(grad: Tensor, spans: Tensor, lengths: Tensor, logz: Tensor, state: list[Tensor],
                    backend: str) -> Tensor:
    """grad (B,) times the bracket marginals (B, T, T)."""
    if backend == "torch":
        return _torch.grad_of(lambda s: _torch.cky_log_partition(s, lengths), spans, grad)
    return _module(backend).cky_log_partition_backward(spans, lengths, logz, state, grad)


def _brackets_fake(spans, lengths, backend):
    return spans.new_empty(spans.shape[0], dtype=torch.float64), torch.empty_like(spans)


@operator("cky_brackets", _brackets_fake)
def cky_brackets_op(spans: Tensor, lengths: Tensor, backend: str) -> tuple[Tensor, Tensor]:
    """(best score (B,) float64, the best bracketing's spans (B, T, T) 0/1)."""
    best, chosen = (_module(backend) or _torch).cky_brackets(spans, lengths)
    return best.double(), chosen.to(spans.dtype)


class CKYLogPartition(torch.autograd.Function):
    """Differentiable log-partition (float64 (B,)) of the bracketings of span values (B, T, T); its
    gradient is the bracket marginals (the compiled kernels' outside pass)."""

    setup_context = staticmethod(save_for_backward)

    @staticmethod
    def reference(spans, lengths, backend):
        return (_torch.cky_log_partition(spans, lengths).double(),)

    @staticmethod
    def forward(spans, lengths, backend):
        logz, state = cky_forward_op(spans, lengths, backend)
        return logz, *state

    @staticmethod
    def backward(ctx, grad, *_):
        if grad is None:
            return None, None, None
        spans, lengths, logz, *state = ctx.saved_tensors
        (backend,) = ctx.options
        if torch.is_grad_enabled():
            out = _through(_torch.cky_log_partition(spans, lengths).double(), spans, grad)
        else:
            out = cky_backward_op(grad, spans, lengths, logz, state, backend)
        return out, None, None


def cky_log_partition(spans: Tensor, lengths: Tensor) -> Tensor:
    """(B,) float64 log-partition of the bracketings of span values (B, T, T), differentiable."""
    return apply(CKYLogPartition, spans, lengths, backend_of(spans))[0]


def cky_brackets(spans: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
    """(best (B,) float64, spans (B, T, T) 0/1) of the best bracketing (no graph)."""
    return cky_brackets_op(spans.detach(), lengths, backend_of(spans))


def _table_fake(arcs, *rest):
    return torch.empty_like(arcs[:, 0])


@operator("dependency_count_table", _table_fake)
def count_table_op(arcs: Tensor, cost: Tensor, lengths: Tensor, single_root: bool, backend: str) -> Tensor:
    """(B, T + 1) float: the best score of the projective trees whose 0/1 ``cost`` adds up to k."""
    return (_module(backend) or _torch).count_table(arcs, cost, lengths, single_root).to(arcs.dtype)


@operator("dependency_count_heads", _heads_fake)
def count_heads_op(arcs: Tensor, cost: Tensor, lengths: Tensor, single_root: bool, k: Tensor,
                   backend: str) -> Tensor:
    """Heads (B, T + 1) of the best projective tree of cost exactly ``k`` (B,)."""
    if backend == "torch":
        return _torch.count_viterbi(arcs, cost, lengths, k, single_root)[1]
    return _module(backend).count_heads(arcs, cost, lengths, single_root, k)


def count_search(arcs: Tensor, cost: Tensor, lengths: Tensor, single_root: bool, choose) -> Tensor:
    """Heads (B, T + 1) of the best projective tree of the count ``choose(table)`` (B,) picks from
    the count table (no graph)."""
    arcs, backend = arcs.detach(), backend_of(arcs)
    table = count_table_op(arcs, cost, lengths, single_root, backend)
    return count_heads_op(arcs, cost, lengths, single_root, choose(table), backend)


def _cky_table_fake(spans, *rest):
    return spans.new_empty((spans.shape[0], max(2 * spans.shape[1], 1)))


@operator("cky_count_table", _cky_table_fake)
def cky_count_table_op(spans: Tensor, cost: Tensor, lengths: Tensor, backend: str) -> Tensor:
    """(B, 2T) float: the best score of the labeled trees whose 0/1 ``cost`` adds up to k."""
    return (_module(backend) or _torch).cky_count_table(spans, cost, lengths).to(spans.dtype)


@operator("cky_count_spans", lambda spans, *rest: torch.empty_like(spans))
def cky_count_spans_op(spans: Tensor, cost: Tensor, lengths: Tensor, k: Tensor, backend: str) -> Tensor:
    """Labeled spans (B, T, T, N) 0/1 of the best tree of cost exactly ``k`` (B,)."""
    if backend == "torch":
        return _torch.cky_count_viterbi(spans, cost, lengths, k)[1]
    return _module(backend).cky_count_spans(spans, cost, lengths, k).to(spans.dtype)


def cky_count_search(spans: Tensor, cost: Tensor, lengths: Tensor, choose) -> Tensor:
    """Labeled spans (B, T, T, N) of the best tree of the count ``choose(table)`` (B,) picks from
    the count table (no graph)."""
    spans, backend = spans.detach(), backend_of(spans)
    table = cky_count_table_op(spans, cost, lengths, backend)
    return cky_count_spans_op(spans, cost, lengths, choose(table), backend)
