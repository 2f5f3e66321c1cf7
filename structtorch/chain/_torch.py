"""Pure-PyTorch chain dynamic programs ("torch" backend): the reference, the path on CUDA and
without a compiler, and the differentiable recursion behind double backward.

Batched over sequences and labels, looping in Python over time only. ``log_partition`` here is
plain autograd (so it supports double backward); the compiled CPU kernels in ``csrc/chain.cpp``
compute the same quantities with a hand-written backward.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from .._checks import forbidden_pattern, guard_overflow
from .._numerics import NEG_INF, accumulate, backtrack, grads_through, safe_logsumexp, small_index_dtype
from .layout import Chain


def guard(chain: Chain, result: Tensor, what: str, feasible: Callable[[], Tensor] | None = None) -> Tensor:
    """``result`` (B,) of a chain DP, or a ValueError where it overflowed (see
    :func:`structtorch._checks.guard_overflow`); ``feasible`` defaults to Viterbi on the -inf
    pattern (some labeling avoids every -inf entry)."""
    parts = (chain.unary, chain.transitions, chain.start, chain.end)
    if feasible is None:
        def feasible() -> Tensor:
            return viterbi(chain.map(forbidden_pattern))[0] > NEG_INF

    T = chain.unary.shape[1]
    return guard_overflow(result, parts, 2 * T + 2, feasible, what, chain.potentials)


def step_blocks(chain: Chain) -> list[Tensor]:
    """Transition blocks for steps 1..T-1, each broadcastable to (B, N, N)."""
    T = chain.unary.shape[1]
    if chain.shared:
        return [chain.transitions] * max(T - 1, 0)
    return list(chain.transitions.unbind(1))


def log_partition(chain: Chain) -> Tensor:
    """(B,) log-partition by the forward recursion, differentiable by autograd (any order)."""
    unary, lengths = chain.unary, chain.lengths
    units = unary.unbind(1)
    if not units:
        return unary.sum(dim=(1, 2))  # zeros, connected to the graph
    alpha = chain.start + units[0]
    for t, block in enumerate(step_blocks(chain), start=1):
        new = safe_logsumexp(alpha.unsqueeze(2) + block, dim=1) + units[t]
        alpha = torch.where((t < lengths)[:, None], new, alpha)
    logz = safe_logsumexp(alpha + chain.end, dim=1)
    return torch.where(lengths > 0, logz, torch.zeros_like(logz))


@torch.no_grad()
def viterbi(chain: Chain) -> tuple[Tensor, Tensor]:
    """Max-plus forward, first maximal index on ties. Returns (best (B,), path (B, T))."""
    unary, lengths = chain.unary, chain.lengths
    B, T, N = unary.shape
    if T == 0:
        return unary.new_zeros(B), torch.empty(B, 0, dtype=torch.long, device=unary.device)
    bp_dtype = small_index_dtype(N)
    alpha = chain.start + unary[:, 0]
    bps = []
    for t, block in enumerate(step_blocks(chain), start=1):
        cand = alpha.unsqueeze(2) + block
        bp = cand.argmax(1)
        new = cand.gather(1, bp.unsqueeze(1)).squeeze(1) + unary[:, t]
        bps.append(bp.to(bp_dtype))
        alpha = torch.where((t < lengths)[:, None], new, alpha)
    final = alpha + chain.end
    last = final.argmax(1)
    best = final.gather(1, last.unsqueeze(1)).squeeze(1)
    path = backtrack(bps, last, lengths, T)
    best = torch.where(lengths > 0, best, torch.zeros_like(best))
    path = torch.where((best == NEG_INF)[:, None], -1, path)  # no nonzero (a host sync)
    return best, path


def indicator_grads(path: Tensor, lengths: Tensor, grad: Tensor, N: int,
                    shared: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The gradients of the scores of labelings ``path`` (B, T) (-1 outside: beyond each length and
    on infeasible rows), scaled by ``grad`` (B,): the indicators of the labels (B, T, N), of the
    label pairs (N, N) when ``shared`` else (B, T-1, N, N), of the first and the last label (B, N),
    in ``grad``'s dtype."""
    B, T = path.shape
    inside = path >= 0
    label = path.clamp(min=0)
    weight = torch.where(inside, grad[:, None], 0.0)
    g_unary = grad.new_zeros(B, T, N).scatter_(2, label[..., None], weight[..., None])
    pairs = label[:, :-1] * N + label[:, 1:]
    steps = weight[:, 1:]  # a step is inside when its second label is
    if shared:
        g_trans = grad.new_zeros(N * N).index_add_(0, pairs.flatten(), steps.flatten()).view(N, N)
    else:
        g_trans = grad.new_zeros(B, max(T - 1, 0), N * N).scatter_(2, pairs[..., None], steps[..., None])
        g_trans = g_trans.view(B, max(T - 1, 0), N, N)
    g_start = g_unary[:, 0] if T else grad.new_zeros(B, N)
    last = (lengths - 1).clamp(min=0).view(B, 1, 1).expand(B, 1, N)
    g_end = g_unary.gather(1, last).squeeze(1) if T else grad.new_zeros(B, N)
    return g_unary, g_trans, g_start, g_end


def double_backward(chain: Chain, needs: tuple[bool, ...], grad: Tensor) -> tuple[Tensor | None, ...]:
    """Gradients of logZ (upstream ``grad``) w.r.t. unary, transitions, start and end with
    ``create_graph``, through this recursion in the accumulation precision: the double-backward
    path of every kernel backend's log-partition."""
    ref = log_partition(chain.map(accumulate))
    inputs = (chain.unary, chain.transitions, chain.start, chain.end)
    return grads_through(ref, inputs, needs, grad.to(ref.dtype))


def marginals_through(chain: Chain, create_graph: bool = True) -> Tensor:
    """(B, T, N) node marginals d logZ / d unary from the PyTorch recursion in the accumulation
    precision (float64 on CPU), differentiable w.r.t. the potentials when ``create_graph``."""
    ref = chain.map(accumulate)
    if not ref.unary.requires_grad:  # unary must be a graph input
        ref.unary = ref.unary.detach().requires_grad_()
    logz = guard(chain, log_partition(ref), "the log-partition")
    return torch.autograd.grad(logz.sum(), ref.unary, create_graph=create_graph)[0]
