"""The PyTorch reference of the projective dependency dynamic program (Eisner, 1996): complete
and incomplete spans over positions 0..T (the root at 0), widened one width at a time, in any
semiring given as a reduction over the split points (``max`` or ``safe_logsumexp``). Every
backend's kernel is tested against it; it is differentiable by autograd (the heads of the best
tree are the gradient of its score, the arc marginals that of the log-partition)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from .._numerics import NEG_INF, safe_logsumexp

Reduce = Callable[[Tensor, int], Tensor]


def best(x: Tensor, dim: int) -> Tensor:
    """max over ``dim`` whose gradient goes to the first maximal entry (a subgradient)."""
    return x.max(dim).values


def eisner(arcs: Tensor, lengths: Tensor, reduce: Reduce, single_root: bool = False) -> Tensor:
    """(B,) value of the projective trees of each row in the semiring of ``reduce``: arcs (B, T+1,
    T+1) float, ``arcs[b, h, m]`` the arc h -> m (position 0 the root), ``lengths`` (B,) words per
    row. 0 for rows without words."""
    B, T1, _ = arcs.shape
    dev = arcs.device
    # complete[d][b, s] and incomplete[d][b, s]: the span [s, s + width], direction d (0: head at
    # the right end, 1: head at the left end), for the widths computed so far (lists by width)
    zero = arcs.new_zeros(B, T1)
    complete = {0: [zero], 1: [zero]}
    incomplete = {0: [arcs.new_full((B, T1), NEG_INF)], 1: [arcs.new_full((B, T1), NEG_INF)]}
    for w in range(1, T1):
        n = T1 - w  # spans [s, s + w], s = 0..n-1
        s = torch.arange(n, device=dev)
        # split r = s + k, k = 0..w-1: complete right-headed [s, r] + complete left-headed [r+1, t]
        left = torch.stack([complete[1][k][:, s] for k in range(w)], 2)  # [s, s+k], head s
        right = torch.stack([complete[0][w - 1 - k][:, s + k + 1] for k in range(w)], 2)  # [s+k+1, t], head t
        joined = reduce(left + right, 2)  # (B, n)
        t = s + w
        incomplete[0].append(joined + arcs[:, t, s])  # t -> s
        incomplete[1].append(joined + arcs[:, s, t])  # s -> t
        # complete left-headed (head t): complete[0][s, r] + incomplete[0][r, t], r = s..t-1
        c0 = torch.stack([complete[0][k][:, s] + incomplete[0][w - k][:, s + k] for k in range(w)], 2)
        # complete right-headed (head s): incomplete[1][s, r] + complete[1][r, t], r = s+1..t
        c1 = torch.stack([incomplete[1][k][:, s] + complete[1][w - k][:, s + k] for k in range(1, w + 1)], 2)
        complete[0].append(reduce(c0, 2))
        complete[1].append(reduce(c1, 2))
    right = _padded(complete[1])  # (B, width, start): spans headed at their left end
    if not single_root:
        value = right[torch.arange(B, device=dev), lengths, 0]  # [0, L] headed by the root
    else:  # the root's one child r heads words 1..r-1 leftwards and r+1..L rightwards
        value = _single_root(arcs, _padded(complete[0]), right, lengths, reduce)
    return torch.where(lengths > 0, value, torch.zeros_like(value))


def _padded(by_width: list[Tensor]) -> Tensor:
    B, T1 = by_width[0].shape
    out = by_width[0].new_full((B, len(by_width), T1), NEG_INF)
    for w, x in enumerate(by_width):
        out[:, w, : x.shape[1]] = x
    return out


def _single_root(arcs: Tensor, left: Tensor, right: Tensor, lengths: Tensor, reduce: Reduce) -> Tensor:
    """(B,) value with exactly one child of the root: over r in 1..L, arcs[0, r] + the complete
    span [1, r] headed by r + the complete span [r, L] headed by r (``left``, ``right``: the
    complete spans headed at their right and left ends, (B, width, start))."""
    B, T1, _ = arcs.shape
    r = torch.arange(1, T1, device=arcs.device)  # (T,)
    rows = torch.arange(B, device=arcs.device)[:, None]
    L = lengths[:, None]
    left_part = left[rows, (r - 1).expand(B, -1), torch.ones_like(r).expand(B, -1)]  # [1, r], head r
    right_part = right[rows, (L - r).clamp(min=0), r.expand(B, -1)]  # [r, L], head r
    cand = arcs[:, 0, 1:] + left_part + right_part
    cand = torch.where(r[None] <= L, cand, NEG_INF)
    return reduce(cand, 1)


def log_partition(arcs: Tensor, lengths: Tensor, single_root: bool = False) -> Tensor:
    return eisner(arcs, lengths, safe_logsumexp, single_root)


def viterbi(arcs: Tensor, lengths: Tensor, single_root: bool = False) -> tuple[Tensor, Tensor]:
    """(best score (B,), heads (B, T + 1)): the heads from the gradient of the best score (-1 at
    the root, beyond each length and on infeasible rows)."""
    B, T1, _ = arcs.shape
    with torch.enable_grad():
        leaf = arcs.detach().requires_grad_()
        score = eisner(leaf, lengths, best, single_root)
        finite = score > NEG_INF
        (grad,) = torch.autograd.grad(torch.where(finite, score, 0.0).sum(), leaf, allow_unused=True)
    grad = torch.zeros_like(arcs) if grad is None else grad
    heads = grad.argmax(1)  # (B, T + 1): the head of each modifier
    m = torch.arange(T1, device=arcs.device)
    inside = (m >= 1) & (m <= lengths[:, None]) & finite[:, None]
    return score.detach(), torch.where(inside, heads, -1)
