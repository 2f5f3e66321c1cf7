"""The Hamming-dimension dynamic programs (Bauer et al. 2014, Algorithm 1) behind
:mod:`structtorch.lossaug`, as the PyTorch reference: over order-l windows (linear chains too) and
over segment ends (``semimarkov_tables``).

A table run returns, for every (weighted) Hamming count k, the best score of a labeling whose
distance to the target is exactly k, and can backtrack the labeling for any chosen k. This is the
batched PyTorch loop over order-l window scores (any device; linear chains are converted to order-1
windows); ``_cpu.py`` runs linear chains in the compiled kernel (``csrc/hamming.cpp``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from .._numerics import NEG_INF, small_index_dtype
from ..chain.layout import Chain
from ..chain.window import _newest_first
from ..semimarkov._torch import segment_terms
from ..semimarkov.layout import SemiMarkov


@dataclass
class Tables:
    """best[b, k]: best score with count exactly k (-inf if none); backtrack(k) -> (B, T) paths."""

    best: Tensor  # (B, K + 1) float64
    backtrack: Callable[[Tensor], Tensor]


def negate_scores(x: Tensor) -> Tensor:
    """-x with forbidden (-inf) entries kept forbidden: max over -x gives -min over x."""
    return torch.where(x == NEG_INF, x, -x)


def chain_to_windows(chain: Chain) -> Tensor:
    """Order-1 window scores (B, T, N, N): g_t(i, j) = A_t[i, j] + u_t[j], with start folded into
    t = 0 (previous label 0) and end into each row's last position."""
    u, lengths = chain.unary, chain.lengths
    B, T, N = u.shape
    g = u.unsqueeze(2).expand(B, T, N, N).clone()
    if T == 0:
        return g
    if T > 1:
        g[:, 1:] += chain.transitions  # (N, N) broadcasts; (B, T-1, N, N) aligns
    g[:, 0, 0] += chain.start
    rows = torch.nonzero(lengths > 0).squeeze(1)
    g[rows, lengths[rows] - 1] += chain.end[rows].unsqueeze(1)
    return g


def window_tables(
    flat: Tensor, target: Tensor, weights: Tensor, lengths: Tensor, K: int, order: int
) -> Tables:
    """PyTorch tables over window scores flat (B, T, N^order, N) = g_t[(y_{t-l}..y_{t-1}), y_t]."""
    B, T, S, N = flat.shape
    R, K1, dev = S // N, K + 1, flat.device
    flat = flat.double()
    kidx = torch.arange(K1, device=dev)
    labels = torch.arange(N, device=dev)

    def shift(t: int) -> Tensor:  # (B, N): count added by label j at step t
        return weights[:, t, None] * (labels != target[:, t, None])

    if T == 0:  # every row is empty: one labeling, count 0, score 0
        best = torch.where(kidx == 0, 0.0, NEG_INF).double().expand(B, K1).clone()
        return Tables(best, lambda k: torch.empty(B, 0, dtype=torch.long, device=dev))
    table = flat.new_full((B, K1, S), NEG_INF, dtype=torch.float64)
    s0 = shift(0)
    table.view(B, K1 * S).scatter_(1, (s0.clamp(max=K) * S + labels).long(), flat[:, 0, 0])
    table[:, :, :N][(s0 > K).unsqueeze(1).expand(B, K1, N)] = NEG_INF
    # reach[t]: the largest count any row can have at step t; only counts up to it are computed
    reach = weights.cumsum(1).amax(0).clamp(max=K).tolist() if B else [0] * T
    bps = []
    for t in range(1, T):
        kp, k1 = reach[t - 1] + 1, reach[t] + 1
        cand = (table[:, :kp].unsqueeze(3) + flat[:, t].unsqueeze(1)).view(B, kp, N, R, N)
        arg = cand.argmax(2)  # first maximal oldest label
        best = cand.gather(2, arg.unsqueeze(2)).squeeze(2)  # (B, kp, R, N)
        src = kidx[:k1].view(1, k1, 1, 1) - shift(t).view(B, 1, 1, N)
        ok = ((src >= 0) & (src < kp)).expand(B, k1, R, N)
        src = src.clamp(0, kp - 1).expand(B, k1, R, N)
        new = torch.where(ok, best.gather(1, src), NEG_INF).reshape(B, k1, S)
        bps.append(torch.where(ok, arg.gather(1, src), 0).reshape(B, k1, S).to(small_index_dtype(N)))
        active = (t < lengths)[:, None, None]
        table[:, :k1] = torch.where(active, new, table[:, :k1])
    order_idx = _newest_first(order, N, dev)
    ranked = table[:, :, order_idx]
    pick = ranked.argmax(2)
    best = ranked.gather(2, pick.unsqueeze(2)).squeeze(2)
    final_state = order_idx[pick]
    empty = lengths == 0
    best[empty] = torch.where(kidx == 0, 0.0, NEG_INF).to(best.dtype)

    def backtrack(k: Tensor) -> Tensor:
        path = torch.full((B, T), -1, dtype=torch.long, device=dev)
        kk = k.clamp(min=0)
        state = final_state.gather(1, kk.unsqueeze(1)).squeeze(1)
        cur, cur_k = state, kk
        for t in range(T - 1, -1, -1):
            at_end = lengths - 1 == t
            cur, cur_k = torch.where(at_end, state, cur), torch.where(at_end, kk, cur_k)
            inside = t < lengths
            label = cur % N
            path[:, t] = torch.where(inside, label, -1)
            if t > 0:
                oldest = bps[t - 1][torch.arange(B, device=dev), cur_k, cur].long()
                step = weights[:, t] * (label != target[:, t])
                cur = torch.where(inside, oldest * R + cur // N, cur)
                cur_k = torch.where(inside, cur_k - step, cur_k)
        return torch.where((k < 0)[:, None], -1, path)  # no nonzero (a host sync)

    return Tables(best, backtrack)


def semimarkov_tables(sm: SemiMarkov, target: Tensor, weights: Tensor, K: int) -> Tables:
    B, T, S, N = sm.shape
    dev, K1 = sm.content.device, K + 1
    F = sm.forbidden_counts()
    wrong = weights.unsqueeze(2) * (torch.arange(N, device=dev) != target.unsqueeze(2))
    mis = torch.cat([wrong.new_zeros(B, 1, N), wrong.cumsum(1)], 1)  # (B, T+1, N)
    kidx = torch.arange(K1, device=dev)
    alpha = torch.full((B, T + 1, K1, N), NEG_INF, dtype=torch.float64, device=dev)
    inc = torch.full((B, T + 1, K1, N), NEG_INF, dtype=torch.float64, device=dev)
    inc[:, 0, 0] = sm.start.double()
    bp_d = torch.zeros(B, T + 1, K1, N, dtype=torch.long, device=dev)
    bp_m = torch.zeros_like(bp_d)
    trans = sm.transitions.double()
    for e in range(1, T + 1):
        D = min(S, e)
        s = torch.arange(e - 1, e - D - 1, -1, device=dev)  # starts for d = 1..D
        count = mis[:, e].unsqueeze(1) - mis[:, s]  # (B, D, N)
        src = kidx.view(1, 1, K1, 1) - count.unsqueeze(2)  # (B, D, K1, N)
        prev = inc[:, s].gather(2, src.clamp(min=0))
        cand = torch.where(src >= 0, prev, NEG_INF) + segment_terms(sm, F, e).unsqueeze(2)
        d = cand.argmax(1)
        alpha[:, e] = cand.gather(1, d.unsqueeze(1)).squeeze(1)
        bp_d[:, e] = d + 1
        step = alpha[:, e].unsqueeze(3) + trans  # (B, K1, m, n)
        m = step.argmax(2)
        inc[:, e] = step.gather(2, m.unsqueeze(2)).squeeze(2)
        bp_m[:, e] = m
    lengths = sm.lengths
    final = alpha[torch.arange(B, device=dev), lengths] + sm.end.double().unsqueeze(1)  # (B, K1, N)
    last = final.argmax(2)
    best = final.gather(2, last.unsqueeze(2)).squeeze(2)
    best[lengths == 0] = torch.where(kidx == 0, 0.0, NEG_INF).to(best.dtype)

    def backtrack(k: Tensor) -> Tensor:
        rows = torch.arange(B, device=dev)
        kk = k.clamp(min=0)
        label = last[rows, kk]
        e = lengths.clone()
        active = (lengths > 0) & (k >= 0)
        starts = torch.zeros(B, T, dtype=torch.bool, device=dev)
        seg_label = torch.zeros(B, T, dtype=torch.long, device=dev)
        while bool(active.any()):
            s = e - bp_d[rows, e, kk, label]
            starts[rows[active], s[active]] = True
            seg_label[rows[active], s[active]] = label[active]
            kk = torch.where(active, kk - (mis[rows, e, label] - mis[rows, s, label]), kk)
            label = torch.where(active, bp_m[rows, s, kk, label], label)
            e = torch.where(active, s, e)
            active = active & (e > 0)
        t = torch.arange(T, device=dev)
        filled = torch.where(starts, t, 0).cummax(1).values if T else t.expand(B, 0)
        inside = (t < lengths[:, None]) & (k >= 0)[:, None]
        return torch.where(inside, seg_label.gather(1, filled) + N * starts.long(), -1)

    return Tables(best, backtrack)
