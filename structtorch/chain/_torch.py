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


@torch.no_grad()
def kbest(chain: Chain, k: int) -> tuple[Tensor, Tensor]:
    """The k best distinct labelings by a k-list Viterbi: the reference of every backend's kernel.

    ``top[b, j, r]``, the r-th best score of the labelings of [0, t] ending in j, is the r-th
    of the candidates ``top[b, i, r'] + A[i, j]`` in the order (score descending, then code
    ``i * k + r'`` ascending); the final list ranks ``top[b, j, r] + end[b, j]`` by code
    ``j * k + r`` the same way (a stable sort, so ties are broken alike on every backend).

    Returns
    -------
    scores : Tensor (B, k)
        The DP's scores, descending: 0 then -inf on zero-length rows, -inf in the missing entries.
    paths : Tensor (B, k, T) int64
        -1 beyond each length and in the missing entries.
    """
    unary, lengths = chain.unary, chain.lengths
    B, T, N = unary.shape
    first = torch.arange(k, device=unary.device) == 0
    paths = torch.full((B, k, T), -1, dtype=torch.long, device=unary.device)
    if T == 0:
        return torch.where(first, 0.0, NEG_INF).to(unary.dtype).expand(B, k), paths
    top = unary.new_full((B, N, k), NEG_INF)
    top[:, :, 0] = chain.start + unary[:, 0]
    bps = []
    for t, block in enumerate(step_blocks(chain), start=1):
        # cand[b, j, i * k + r] = top[b, i, r] + block[b, i, j]
        cand = (top.unsqueeze(2) + block.unsqueeze(-1)).permute(0, 2, 1, 3).reshape(B, N, N * k)
        vals, idx = _best_k(cand, k)
        bps.append(idx)
        top = torch.where((t < lengths)[:, None, None], vals + unary[:, t, :, None], top)
    best, code = _best_k((top + chain.end.unsqueeze(2)).reshape(B, N * k), k)  # code = label * k + rank
    cur = code
    for t in range(T - 1, -1, -1):
        cur = torch.where((lengths - 1 == t)[:, None], code, cur)
        inside = (t < lengths)[:, None]
        paths[:, :, t] = torch.where(inside, cur // k, -1)
        if t > 0:
            prev = bps[t - 1].reshape(B, N * k).gather(1, cur)  # prev = label * k + rank
            cur = torch.where(inside, prev, cur)
    empty = (lengths == 0)[:, None]
    valid = torch.where(empty, first, best > NEG_INF)
    scores = torch.where(empty, torch.where(first, 0.0, NEG_INF).to(best.dtype), best)
    return torch.where(valid, scores, NEG_INF), torch.where(valid[..., None], paths, -1)


def _best_k(x: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """The k largest entries of ``x`` along its last dimension and their indices, the smallest
    index first among equal values (``topk`` leaves the order of ties unspecified)."""
    vals, idx = x.sort(dim=-1, descending=True, stable=True)
    return vals[..., :k], idx[..., :k]


@torch.no_grad()
def sample(chain: Chain, noise: Tensor) -> Tensor:
    """(n, B, T) labelings drawn by forward filtering, backward sampling, with ``noise`` (n, B, T,
    N) float64, the logarithms of i.i.d. Exp(1) draws: the reference of every backend's kernel.

    The label at the last position L - 1 is the argmax over j of ``final[j] - noise[s, b, L-1,
    j]`` with ``final = alpha[L-1] + end`` (the exponential race, i.e. Gumbel-max: a draw from
    softmax(final)); the one at t < L - 1, given the label y after it, the argmax over i of
    ``alpha[t, i] + A[i, y] - noise[s, b, t, i]``; -inf scores never win, ties go to the first
    index. -1 beyond each length and on infeasible rows.
    """
    B, T, N = chain.shape
    n = noise.shape[0]
    blocks = step_blocks(chain)
    # alphas[t][b, j]: log-sum-exp over the labelings of [0, t] ending in j
    alphas = [chain.start + chain.unary[:, 0]]
    for t, block in enumerate(blocks, start=1):
        alphas.append(safe_logsumexp(alphas[-1].unsqueeze(2) + block, dim=1) + chain.unary[:, t])
    lengths = chain.lengths
    last_alpha = torch.stack(alphas, 1).gather(1, (lengths - 1).clamp(min=0).view(B, 1, 1).expand(B, 1, N))
    final = last_alpha.squeeze(1) + chain.end
    feasible = (lengths > 0) & (final > NEG_INF).any(1)
    rows = torch.arange(B, device=noise.device).expand(n, B)
    out = torch.full((n, B, T), -1, dtype=torch.long, device=noise.device)
    nxt = torch.zeros(n, B, dtype=torch.long, device=noise.device)
    for t in range(T - 1, -1, -1):
        cur = _race(final.expand(n, B, N), noise[:, :, t])
        if t < T - 1:
            block = blocks[t]  # scores of y_t -> y_{t+1}: (N, N) or (B, N, N)
            column = block.t()[nxt] if block.dim() == 2 else block.transpose(1, 2)[rows, nxt]
            cur = torch.where(t < lengths - 1, _race(alphas[t].unsqueeze(0) + column, noise[:, :, t]), cur)
        cur = torch.where(t < lengths, cur, -1)
        out[:, :, t] = cur
        nxt = cur.clamp(min=0)
    return torch.where(feasible[None, :, None], out, -1)


def _race(logits: Tensor, noise: Tensor) -> Tensor:
    """argmax over the last dimension of ``logits - noise`` (-inf logits never win, ties go to the
    first index): one draw from softmax(logits) per row for ``noise`` the log of Exp(1) draws."""
    return torch.where(logits == NEG_INF, NEG_INF, logits - noise).argmax(-1)


def window_flat(scores: Tensor) -> Tensor:
    """Window scores (B, T) + (N,) * (l + 1) as (B, T, S, N), S = N^max(l, 1): ``flat[b, t, s, j]``
    scores the labels of state s (y_{t-l}, ..., y_{t-1}, oldest most significant) followed by j
    (order 0 is solved as order 1 with windows that ignore the previous label: a view)."""
    B, T, N = scores.shape[:3]
    order = scores.dim() - 3
    return scores.unsqueeze(2).expand(B, T, N, N) if order == 0 else scores.reshape(B, T, N**order, N)


def window_indices(path: Tensor, order: int, N: int) -> Tensor:
    """(B, T) flat index of (y_{t-l}, ..., y_t) per position, labels before the start read as 0."""
    padded = torch.cat([path.new_zeros(path.shape[0], order), path.clamp(min=0)], dim=1)
    windows = padded.unfold(1, order + 1, 1)  # (B, T, l + 1)
    weights = N ** torch.arange(order, -1, -1, device=path.device)
    return (windows * weights).sum(-1)


def _newest_first(order: int, N: int, device: torch.device) -> Tensor:
    """The N^order state indices (oldest label most significant) in newest-label-first order."""
    idx = torch.arange(N**order, device=device).view((N,) * order)
    return idx.permute(*reversed(range(order))).reshape(-1)


def window_viterbi(scores: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
    """The best score (B,) and labeling (B, T) of window scores (B, T) + (N,) * (l + 1), T >= 1,
    by the DP over the states of :func:`window_flat`: the reference of every backend's kernel
    (see :func:`window_dp`)."""
    return window_dp(window_flat(scores), lengths, max(scores.dim() - 3, 1))


@torch.no_grad()
def window_dp(flat: Tensor, lengths: Tensor, order: int) -> tuple[Tensor, Tensor]:
    """The best score (B,) and labeling (B, T) of flat window scores (B, T, N^order, N) (see
    :func:`window_flat`), order >= 1.

    The state of position t holds (y_{t-l+1}, ..., y_t); each backpointer is the first maximal
    oldest label, and the last state the first maximal one in newest-label-first order (so ties
    follow :func:`viterbi`'s rule). The score is the DP's own sum: 0 on empty rows, -inf on
    infeasible ones, whose paths are -1 (as beyond each length).
    """
    B, T, S, N = flat.shape
    path = torch.full((B, T), -1, dtype=torch.long, device=flat.device)
    if T == 0:
        return flat.new_zeros(B), path
    alpha = flat.new_full((B, S), NEG_INF)  # state = (y_{t-l+1}, ..., y_t), oldest most significant
    alpha[:, :N] = flat[:, 0, 0]
    bps = []
    for t in range(1, T):
        cand = (alpha.unsqueeze(2) + flat[:, t]).view(B, N, S // N, N)  # (B, y_{t-l}, rest, y_t)
        bp = cand.argmax(1)
        new = cand.gather(1, bp.unsqueeze(1)).squeeze(1).reshape(B, S)
        bps.append(bp.reshape(B, S).to(small_index_dtype(N)))
        alpha = torch.where((t < lengths)[:, None], new, alpha)
    newest_first = _newest_first(order, N, flat.device)
    final = newest_first[alpha[:, newest_first].argmax(1)]
    best = alpha.gather(1, final.unsqueeze(1)).squeeze(1)
    cur = final
    for t in range(T - 1, -1, -1):
        cur = torch.where(lengths - 1 == t, final, cur)
        inside = t < lengths
        path[:, t] = torch.where(inside, cur % N, -1)
        if t > 0:
            oldest = bps[t - 1].gather(1, cur.unsqueeze(1)).squeeze(1).long()
            cur = torch.where(inside, oldest * (S // N) + cur // N, cur)
    best = torch.where(lengths > 0, best, 0.0)
    return best, torch.where((best > NEG_INF)[:, None], path, -1)  # no nonzero (a host sync)


def window_log_forward(flat: Tensor, lengths: Tensor) -> Tensor:
    """(B,) log-partition of flat window scores (B, T, N^order, N) (see :func:`window_flat`), T >= 1:
    :func:`window_dp`'s recursion in the log semiring, differentiable by autograd (any order, and
    by every ``torch.func`` transform); 0 on empty rows, -inf on infeasible ones."""
    B, T, S, N = flat.shape
    alpha = torch.cat([flat[:, 0, 0], flat.new_full((B, S - N), NEG_INF)], 1)  # labels before 0 read as 0
    for t in range(1, T):
        cand = (alpha.unsqueeze(2) + flat[:, t]).view(B, N, S // N, N)  # (B, y_{t-l}, rest, y_t)
        moved = safe_logsumexp(cand, 1).reshape(B, S)
        alpha = torch.where((t < lengths)[:, None], moved, alpha)
    return torch.where(lengths > 0, safe_logsumexp(alpha, 1), 0.0)


def window_indicator_grads(path: Tensor, lengths: Tensor, grad: Tensor, shape: torch.Size) -> Tensor:
    """The gradient of the window scores (``shape`` (B, T) + (N,) * (l + 1)) of labelings ``path``
    (B, T) (-1 outside: beyond each length and on infeasible rows), scaled by ``grad`` (B,): the
    indicators of their windows, in ``grad``'s dtype."""
    B, T, N = shape[:3]
    inside = path >= 0
    weight = torch.where(inside, grad[:, None], 0.0)
    index = window_indices(path, len(shape) - 3, N)
    g = grad.new_zeros(B, T, N ** (len(shape) - 2))
    return g.scatter_(2, index[..., None], weight[..., None]).view(shape)


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
