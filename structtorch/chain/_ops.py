"""The chain kernels as PyTorch operators: one schema per dynamic program, one implementation per
backend (``compiled`` | ``triton`` | ``torch``, named by the caller, see :mod:`structtorch._backend`).

``structtorch::chain_viterbi``, ``structtorch::chain_log_partition`` and its backward are
``torch.library`` custom operators with fake (meta) implementations, so ``torch.compile`` traces
through them without graph breaks. :class:`LogPartition` makes the log-partition differentiable:
an autograd Function with ``setup_context`` and a ``vmap`` rule (the vmapped dimension is folded
into the batch), so ``torch.func.grad``/``vmap`` work too. Under ``torch.func`` transforms and
double backward its backward differentiates the PyTorch recursion.

The forward operator returns logZ in float64 and the backend's saved factors (a list whose shapes
each backend module states in ``log_partition_state``); the backward reuses them.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .. import _backend
from .._library import apply, operator, save_for_backward, transformed
from .._numerics import accumulate, grads_through
from . import _torch
from .layout import Chain


def backend_of(chain: Chain) -> str:
    """:func:`structtorch._backend.backend_for` with the chain's vetoes: "torch" for empty chains,
    and for N beyond the compiled kernels' int16 backpointers."""
    _, T, N = chain.shape
    if T == 0:
        return "torch"
    name = _backend.backend_for(chain.unary)
    return "torch" if name == "compiled" and N > 32767 else name


def kernel_module(backend: str):
    """The chain's kernel module for ``backend`` (``_cpu`` or ``_triton``; None for "torch"), see
    :func:`structtorch._backend.kernel_module`."""
    return _backend.kernel_module(backend, __package__)


def kernels_for(chain: Chain, backend: str):
    """The module whose Viterbi, log-partition (and backward), CRF loss and marginals run ``chain``
    on a kernel ``backend``: :func:`kernel_module`, except few long sequences on "triton", which
    take the parallel-in-time kernels (:mod:`structtorch.chain._triton_scan`, the same contracts;
    its ``use_scan`` decides from the shape alone)."""
    module = kernel_module(backend)
    if backend == "triton" and min(chain.shape[:2]) > 0:
        from . import _triton_scan

        if _triton_scan.use_scan(*chain.shape):
            return _triton_scan
    return module


def _viterbi_fake(unary, transitions, start, end, lengths, backend):
    B, T = unary.shape[:2]
    return unary.new_empty(B, dtype=torch.float64), unary.new_empty(B, T, dtype=torch.long)


def _log_partition_forward_fake(unary, transitions, start, end, lengths, backend):
    B, T, N = unary.shape
    module = kernel_module(backend)
    shapes = [] if module is None else module.log_partition_state(B, T, N)
    return unary.new_empty(B, dtype=torch.float64), [unary.new_empty(s, dtype=torch.float64) for s in shapes]


def _log_partition_backward_fake(grad, unary, transitions, start, end, lengths, logz, state, backend):
    return tuple(torch.empty_like(x) for x in (unary, transitions, start, end))


def _nll_forward_fake(unary, transitions, start, end, lengths, labels, backend):
    B = unary.shape[0]
    logz, state = _log_partition_forward_fake(unary, transitions, start, end, lengths, backend)
    return unary.new_empty(B, dtype=torch.float64), logz, state


def _nll_backward_fake(grad, unary, transitions, start, end, lengths, labels, logz, state, backend):
    return tuple(torch.empty_like(x) for x in (unary, transitions, start, end))


def _kbest_fake(unary, transitions, start, end, lengths, k, backend):
    B, T = unary.shape[:2]
    return unary.new_empty(B, k, dtype=torch.float64), unary.new_empty(B, k, T, dtype=torch.long)


def _sample_fake(unary, transitions, start, end, lengths, noise, backend):
    n, B, T = noise.shape[:3]
    return unary.new_empty(n, B, T, dtype=torch.long)


def _window_viterbi_fake(scores, lengths, backend):
    B, T = scores.shape[:2]
    return scores.new_empty(B, dtype=torch.float64), scores.new_empty(B, T, dtype=torch.long)


def _marginals_fake(unary, transitions, start, end, lengths, backend):
    return torch.empty_like(unary)


def _marginals_backward_fake(grad, unary, transitions, start, end, lengths, backend):
    return tuple(torch.empty_like(x) for x in (unary, transitions, start, end))


@operator("chain_viterbi", _viterbi_fake)
def viterbi_forward(unary: Tensor, transitions: Tensor, start: Tensor, end: Tensor, lengths: Tensor,
                    backend: str) -> tuple[Tensor, Tensor]:
    """The best score (B,) float64 (0 on empty rows, -inf on infeasible ones) and the best
    labeling (B, T) int64, -1 beyond each length and on infeasible rows."""
    chain = Chain(unary, transitions, start, end, lengths)
    if backend == "torch":
        score, path = _torch.viterbi(chain.map(accumulate))
        return score.double(), path
    return kernels_for(chain, backend).viterbi(chain)


@operator("chain_kbest", _kbest_fake)
def kbest_forward(unary: Tensor, transitions: Tensor, start: Tensor, end: Tensor, lengths: Tensor, k: int,
                  backend: str) -> tuple[Tensor, Tensor]:
    """The k best scores (B, k) float64, descending (0 then -inf on empty rows, -inf in missing
    entries) and labelings (B, k, T) int64 (-1 beyond each length and in missing entries); ties
    as :func:`structtorch.chain._torch.kbest` breaks them."""
    chain = Chain(unary, transitions, start, end, lengths)
    if backend == "torch":
        scores, paths = _torch.kbest(chain.map(accumulate), k)
        return scores.double(), paths
    return kernel_module(backend).kbest(chain, k)


@operator("chain_sample", _sample_fake)
def sample_forward(unary: Tensor, transitions: Tensor, start: Tensor, end: Tensor, lengths: Tensor,
                   noise: Tensor, backend: str) -> Tensor:
    """(n, B, T) int64 labelings drawn by forward filtering, backward sampling with ``noise``
    (n, B, T, N) float64, the logarithms of Exp(1) draws (see :func:`structtorch.chain._torch.sample`):
    -1 beyond each length and on infeasible rows."""
    chain = Chain(unary, transitions, start, end, lengths)
    if backend == "torch":
        return _torch.sample(chain.map(accumulate), noise)
    return kernel_module(backend).sample(chain, noise)


@operator("chain_window_viterbi", _window_viterbi_fake)
def window_viterbi_forward(scores: Tensor, lengths: Tensor, backend: str) -> tuple[Tensor, Tensor]:
    """The best score (B,) float64 (0 on empty rows, -inf on infeasible ones) and labeling (B, T)
    int64 (-1 beyond each length and on infeasible rows) of window scores (B, T) + (N,) * (l + 1),
    T >= 1 (see :func:`structtorch.chain._torch.window_viterbi`)."""
    if backend == "torch":
        best, path = _torch.window_viterbi(accumulate(scores), lengths)
        return best.double(), path
    return kernel_module(backend).window_viterbi(scores, lengths)


@operator("chain_log_partition", _log_partition_forward_fake)
def log_partition_forward(unary: Tensor, transitions: Tensor, start: Tensor, end: Tensor, lengths: Tensor,
                          backend: str) -> tuple[Tensor, list[Tensor]]:
    """logZ (B,) float64 and the backend's saved factors."""
    chain = Chain(unary, transitions, start, end, lengths)
    if backend == "torch":
        return _torch.log_partition(chain.map(accumulate)).double(), []
    logz, state = kernels_for(chain, backend).log_partition_forward(chain)
    return logz, list(state)


@operator("chain_log_partition_backward", _log_partition_backward_fake)
def log_partition_backward(grad: Tensor, unary: Tensor, transitions: Tensor, start: Tensor, end: Tensor,
                           lengths: Tensor, logz: Tensor, state: list[Tensor],
                           backend: str) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Gradients of logZ (upstream ``grad`` (B,)) w.r.t. unary, transitions, start and end."""
    chain = Chain(unary, transitions, start, end, lengths)
    if backend == "torch":
        inputs = tuple(x.detach().requires_grad_() for x in (unary, transitions, start, end))
        with torch.enable_grad():
            ref = _torch.log_partition(Chain(*inputs, lengths).map(accumulate))
            grads = torch.autograd.grad(ref, inputs, grad.to(ref.dtype), allow_unused=True)
        pairs = zip(grads, inputs, strict=True)
        return tuple(torch.zeros_like(x) if g is None else g.to(x.dtype) for g, x in pairs)
    return kernels_for(chain, backend).log_partition_backward(chain, logz, state, grad.double())


@operator("chain_nll", _nll_forward_fake)
def nll_forward(unary: Tensor, transitions: Tensor, start: Tensor, end: Tensor, lengths: Tensor,
                labels: Tensor, backend: str) -> tuple[Tensor, Tensor, list[Tensor]]:
    """logZ - score(labels) (B,) float64 (+inf on infeasible rows), logZ and the saved factors, from
    a backend that fuses the CRF loss (its module has ``nll_forward``)."""
    chain = Chain(unary, transitions, start, end, lengths)
    loss, logz, state = kernels_for(chain, backend).nll_forward(chain, labels)
    return loss, logz, list(state)


@operator("chain_nll_backward", _nll_backward_fake)
def nll_backward(grad: Tensor, unary: Tensor, transitions: Tensor, start: Tensor, end: Tensor,
                 lengths: Tensor, labels: Tensor, logz: Tensor, state: list[Tensor],
                 backend: str) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Gradients of logZ - score(labels) (upstream ``grad`` (B,)) w.r.t. unary, transitions, start
    and end: the marginals minus the labeling's indicators."""
    chain = Chain(unary, transitions, start, end, lengths)
    return kernels_for(chain, backend).nll_backward(chain, labels, logz, state, grad.double())


@operator("chain_marginals", _marginals_fake)
def marginals_forward(unary: Tensor, transitions: Tensor, start: Tensor, end: Tensor, lengths: Tensor,
                      backend: str) -> Tensor:
    """(B, T, N) node marginals (input dtype) from a kernel backend's ``node_marginals``."""
    chain = Chain(unary, transitions, start, end, lengths)
    marg = kernels_for(chain, backend).node_marginals(chain)
    return marg.to(unary.dtype)


MARGINALS_BACKWARD = ("triton",)
"""The backends with a kernel for the backward of the marginals (elsewhere the PyTorch recursion
is differentiated); a name, not a module lookup, so that ``torch.compile`` traces the choice."""


@operator("chain_marginals_backward", _marginals_backward_fake)
def marginals_backward(grad: Tensor, unary: Tensor, transitions: Tensor, start: Tensor, end: Tensor,
                       lengths: Tensor, backend: str) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Gradients of the node marginals (upstream ``grad`` (B, T, N)) w.r.t. unary, transitions,
    start and end: the Hessian of logZ times ``grad``, by the backend's kernel (see
    :data:`MARGINALS_BACKWARD`) or through the PyTorch recursion in the accumulation precision."""
    if backend in MARGINALS_BACKWARD:
        return kernel_module(backend).marginals_backward(Chain(unary, transitions, start, end, lengths), grad)
    inputs = tuple(x.detach().requires_grad_() for x in (unary, transitions, start, end))
    with torch.enable_grad():
        marg = _torch.marginals_through(Chain(*inputs, lengths))
        grads = torch.autograd.grad(marg, inputs, grad.to(marg.dtype), allow_unused=True)
    pairs = zip(grads, inputs, strict=True)
    return tuple(torch.zeros_like(x) if g is None else g.to(x.dtype) for g, x in pairs)


def _lead(x: Tensor, dim: int | None, V: int) -> Tensor:
    """``x`` with its vmapped dimension first (expanded to V when it has none)."""
    return x.movedim(dim, 0) if dim is not None else x.unsqueeze(0).expand(V, *x.shape)


def fold_vmapped(V: int, in_dims, unary, transitions, start, end, lengths) -> Chain:
    """One chain of batch V * B from vmapped chain arguments: a vmapped (N, N) transition matrix
    becomes per-position blocks, an unvmapped one stays shared."""
    u = _lead(unary, in_dims[0], V)
    _, B, T, N = u.shape
    if transitions.dim() - (in_dims[1] is not None) == 2:  # shared (N, N) in each call
        if in_dims[1] is None:
            t = transitions
        else:
            t = _lead(transitions, in_dims[1], V)[:, None, None].expand(V, B, max(T - 1, 0), N, N)
            t = t.reshape(V * B, max(T - 1, 0), N, N)
    else:
        t = _lead(transitions, in_dims[1], V).reshape(V * B, max(T - 1, 0), N, N)
    rest = (_lead(x, d, V).reshape(V * B, *x.shape[(d is not None) + 1:]).contiguous()
            for x, d in zip((start, end, lengths), in_dims[2:], strict=True))
    return Chain(u.reshape(V * B, T, N), t.contiguous(), *rest)


class LogPartition(torch.autograd.Function):
    """Differentiable chain log-partition (float64 (B,)) on the operators above."""

    setup_context = staticmethod(save_for_backward)

    @staticmethod
    def forward(unary, transitions, start, end, lengths, backend):
        logz, state = log_partition_forward(unary, transitions, start, end, lengths, backend)
        return logz, *state

    @staticmethod
    def backward(ctx, grad, *_):
        if grad is None:
            return (None,) * 6
        unary, transitions, start, end, lengths, logz, *state = ctx.saved_tensors
        if torch.is_grad_enabled():  # double backward, torch.func: differentiate the recursion
            chain = Chain(unary, transitions, start, end, lengths)
            return (*_torch.double_backward(chain, ctx.needs_input_grad[:4], grad), None, None)
        args = (unary, transitions, start, end, lengths, logz, state, *ctx.options)
        grads = log_partition_backward(grad, *args)
        return (*(g if need else None for g, need in zip(grads, ctx.needs_input_grad, strict=False)),
                None, None)

    @staticmethod
    def reference(unary, transitions, start, end, lengths, backend):
        """(logZ,) by the PyTorch recursion: the path under ``torch.func`` transforms."""
        chain = Chain(unary, transitions, start, end, lengths).map(accumulate)
        return (_torch.log_partition(chain).double(),)

    @staticmethod
    def vmap(info, in_dims, unary, transitions, start, end, lengths, backend):
        chain = fold_vmapped(info.batch_size, in_dims[:5], unary, transitions, start, end, lengths)
        args = (chain.unary, chain.transitions, chain.start, chain.end, chain.lengths)
        logz, *state = apply(LogPartition, *args, backend_of(chain))
        V = info.batch_size
        return (logz.view(V, -1), *(s.view(V, -1, *s.shape[1:]) for s in state)), (0,) * (1 + len(state))


class NegativeLogLikelihood(torch.autograd.Function):
    """logZ - score(labels) (float64 (B,)) on a backend that fuses it; outputs (nll, logZ, *state)."""

    setup_context = staticmethod(save_for_backward)

    @staticmethod
    def forward(unary, transitions, start, end, lengths, labels, backend):
        nll, logz, state = nll_forward(unary, transitions, start, end, lengths, labels, backend)
        return nll, logz, *state

    @staticmethod
    def backward(ctx, grad, *_):
        if grad is None:
            return (None,) * 7
        unary, transitions, start, end, lengths, labels, _nll, logz, *state = ctx.saved_tensors
        needs = ctx.needs_input_grad[:4]
        if torch.is_grad_enabled():  # double backward, torch.func: differentiate the recursion
            grads = nll_double_backward(Chain(unary, transitions, start, end, lengths), labels, needs, grad)
        else:
            args = (unary, transitions, start, end, lengths, labels, logz, state, *ctx.options)
            grads = nll_backward(grad, *args)
        return (*(g if need else None for g, need in zip(grads, needs, strict=True)), None, None, None)

    @staticmethod
    def vmap(info, in_dims, unary, transitions, start, end, lengths, labels, backend):
        V = info.batch_size
        chain = fold_vmapped(V, in_dims[:5], unary, transitions, start, end, lengths)
        labels = _lead(labels, in_dims[5], V).reshape(chain.shape[0], -1)
        loss, logz, *state = nll(chain, labels, backend)
        outs = (loss.view(V, -1), logz.view(V, -1), *(s.view(V, -1, *s.shape[1:]) for s in state))
        return outs, (0,) * len(outs)


def nll_double_backward(chain: Chain, labels: Tensor, needs: tuple[bool, ...],
                        grad: Tensor) -> tuple[Tensor | None, ...]:
    """Gradients of logZ - score(labels) (upstream ``grad`` (B,)) w.r.t. unary, transitions, start
    and end with ``create_graph`` (those ``needs`` marks, else None), through the PyTorch recursion:
    the double-backward path of the fused CRF loss."""
    logz_grads = _torch.double_backward(chain, needs, grad)
    lengths = chain.lengths
    inside = torch.arange(labels.shape[1], device=labels.device) < lengths[:, None]
    path = torch.where(inside, labels, -1)
    gold = _torch.indicator_grads(path, lengths, grad, chain.shape[2], chain.shared)
    pairs = zip(logz_grads, gold, strict=True)
    return tuple(None if a is None else a - b.to(a.dtype) for a, b in pairs)


FUSED_NLL = ("triton", "compiled")
"""The backends whose module fuses the CRF loss (``nll_forward``, ``nll_backward``); a name, not a
module lookup, so that ``torch.compile`` traces the choice."""


def fuses_nll(chain: Chain) -> bool:
    """Whether the chain's backend computes the CRF loss logZ - score in one fused operator (not
    under a ``torch.func`` transform: there logZ and the score are taken apart, by PyTorch)."""
    return backend_of(chain) in FUSED_NLL and not transformed()


def nll(chain: Chain, labels: Tensor, backend: str | None = None) -> tuple[Tensor, ...]:
    """(logZ - score(labels) (B,) float64, differentiable; logZ; saved factors) of a canonical chain
    on a backend that fuses it (:func:`fuses_nll`); ``labels`` (B, T) int64, any value beyond each
    length."""
    return apply(NegativeLogLikelihood, chain.unary, chain.transitions, chain.start, chain.end, chain.lengths,
                                       labels, backend or backend_of(chain))


class Marginals(torch.autograd.Function):
    """Node marginals (B, T, N) of a kernel backend, differentiable: the backward is an operator
    (so that ``torch.compile`` traces it whole), the Hessian-vector product of the backend's kernel
    or the PyTorch recursion differentiated in the accumulation precision; with ``create_graph``,
    as for double backward, the recursion itself."""

    @staticmethod
    def forward(unary, transitions, start, end, lengths, backend):
        return marginals_forward(unary, transitions, start, end, lengths, backend)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs[:5])
        ctx.backend = inputs[5]

    @staticmethod
    def backward(ctx, grad):
        unary, transitions, start, end, lengths = ctx.saved_tensors
        needs = ctx.needs_input_grad[:4]
        if torch.is_grad_enabled():  # double backward: keep the graph to the inputs
            marg = _torch.marginals_through(Chain(unary, transitions, start, end, lengths))
            grads = grads_through(marg, (unary, transitions, start, end), needs, grad.to(marg.dtype))
        else:
            grads = marginals_backward(grad, unary, transitions, start, end, lengths, ctx.backend)
        return (*(g if need else None for g, need in zip(grads, needs, strict=True)), None, None)


def marginals(chain: Chain) -> Tensor:
    """(B, T, N) node marginals of a canonical chain on a kernel backend (``backend_of(chain)`` is
    not "torch"), differentiable."""
    return apply(Marginals, chain.unary, chain.transitions, chain.start, chain.end, chain.lengths,
                           backend_of(chain))


def log_partition(chain: Chain) -> Tensor:
    """(B,) float64 log-partition of a canonical chain, differentiable."""
    return apply(LogPartition, chain.unary, chain.transitions, chain.start, chain.end, chain.lengths,
                              backend_of(chain))[0]


class Viterbi(torch.autograd.Function):
    """The best score (float64 (B,), from the kernel) and labeling of a chain; the score's gradient
    is the indicator of the labeling (:func:`structtorch.chain._torch.indicator_grads`)."""

    @staticmethod
    def forward(unary, transitions, start, end, lengths, backend):
        return viterbi_forward(unary, transitions, start, end, lengths, backend)

    @staticmethod
    def setup_context(ctx, inputs, output):
        unary, transitions = inputs[:2]
        ctx.save_for_backward(output[1], inputs[4])
        ctx.shapes = unary.shape[2], transitions.dim() == 2, tuple(x.dtype for x in inputs[:4])
        ctx.mark_non_differentiable(output[1])

    @staticmethod
    def backward(ctx, grad, _):
        path, lengths = ctx.saved_tensors
        N, shared, dtypes = ctx.shapes
        grads = _torch.indicator_grads(path, lengths, grad, N, shared)
        needs = ctx.needs_input_grad[:4]
        pairs = zip(grads, dtypes, needs, strict=True)
        return (*(g.to(d) if need else None for g, d, need in pairs), None, None)

    @staticmethod
    def vmap(info, in_dims, unary, transitions, start, end, lengths, backend):
        V = info.batch_size
        chain = fold_vmapped(V, in_dims[:5], unary, transitions, start, end, lengths)
        score, path = viterbi(chain)
        return (score.view(V, -1), path.view(V, -1, chain.shape[1])), (0, 0)


def viterbi(chain: Chain) -> tuple[Tensor, Tensor]:
    """The best score (B,) float64, differentiable, and labeling (B, T) of a canonical chain (see
    :func:`viterbi_forward`)."""
    return apply(Viterbi, chain.unary, chain.transitions, chain.start, chain.end, chain.lengths,
                         backend_of(chain))


class KBest(torch.autograd.Function):
    """The k best scores (float64 (B, k), from the kernel) and labelings of a chain; each score's
    gradient is the indicator of its labeling."""

    @staticmethod
    def forward(unary, transitions, start, end, lengths, k, backend):
        return kbest_forward(unary, transitions, start, end, lengths, k, backend)

    setup_context = staticmethod(Viterbi.setup_context)  # saves the paths and lengths alike

    @staticmethod
    def backward(ctx, grad, _):
        paths, lengths = ctx.saved_tensors
        N, shared, dtypes = ctx.shapes
        B, k, T = paths.shape
        flat = _torch.indicator_grads(paths.reshape(B * k, T), lengths.repeat_interleave(k),
                                      grad.reshape(B * k), N, shared)
        grads = (g if shared and i == 1 else g.view(B, k, *g.shape[1:]).sum(1) for i, g in enumerate(flat))
        needs = ctx.needs_input_grad[:4]
        pairs = zip(grads, dtypes, needs, strict=True)
        return (*(g.to(d) if need else None for g, d, need in pairs), None, None, None)

    @staticmethod
    def vmap(info, in_dims, unary, transitions, start, end, lengths, k, backend):
        V = info.batch_size
        chain = fold_vmapped(V, in_dims[:5], unary, transitions, start, end, lengths)
        scores, paths = kbest(chain, k)
        return (scores.view(V, -1, k), paths.view(V, -1, k, chain.shape[1])), (0, 0)


def kbest(chain: Chain, k: int) -> tuple[Tensor, Tensor]:
    """The k best scores (B, k) float64, differentiable, and labelings (B, k, T) of a canonical
    chain (see :func:`kbest_forward`)."""
    return apply(KBest, chain.unary, chain.transitions, chain.start, chain.end, chain.lengths, k,
                       backend_of(chain))


def sample(chain: Chain, noise: Tensor) -> Tensor:
    """(n, B, T) labelings of a canonical chain drawn with ``noise`` (n, B, T, N) float64, the
    logarithms of Exp(1) draws (see :func:`sample_forward`); not differentiable."""
    return sample_forward(chain.unary, chain.transitions, chain.start, chain.end, chain.lengths, noise,
                          backend_of(chain))


class WindowViterbi(torch.autograd.Function):
    """The best score (float64 (B,), from the kernel) and labeling of window scores; the score's
    gradient is the indicator of the labeling's windows."""

    @staticmethod
    def forward(scores, lengths, backend):
        return window_viterbi_forward(scores, lengths, backend)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output[1], inputs[1])
        ctx.shape, ctx.dtype = inputs[0].shape, inputs[0].dtype
        ctx.mark_non_differentiable(output[1])

    @staticmethod
    def backward(ctx, grad, _):
        path, lengths = ctx.saved_tensors
        return _torch.window_indicator_grads(path, lengths, grad, ctx.shape).to(ctx.dtype), None, None

    @staticmethod
    def vmap(info, in_dims, scores, lengths, backend):
        V = info.batch_size
        scores, lengths = _lead(scores, in_dims[0], V), _lead(lengths, in_dims[1], V)
        best, path = window_viterbi(scores.reshape(-1, *scores.shape[2:]), lengths.reshape(-1))
        return (best.view(V, -1), path.view(V, -1, path.shape[1])), (0, 0)


def window_viterbi(scores: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
    """The best score (B,) float64, differentiable, and labeling (B, T) of window scores (B, T) +
    (N,) * (l + 1) with T >= 1 (see :func:`window_viterbi_forward`)."""
    return apply(WindowViterbi, scores, lengths, _backend.backend_for(scores))
