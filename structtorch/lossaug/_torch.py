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
import torch.nn.functional as F
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


def window_tables(flat: Tensor, units: Tensor, pair: Tensor | None, lengths: Tensor, K: int,
                  order: int) -> Tables:
    """PyTorch tables over window scores flat (B, T, N^order, N) = g_t[(y_{t-l}..y_{t-1}), y_t],
    for integer counts: label j at t adds ``units[b, t, j]`` (B, T, N) and, with ``pair``
    (B, T-1, N, N), the pair (y_{t-1}, y_t) adds ``pair[b, t - 1, y_{t-1}, y_t]``."""
    B, T, S, N = flat.shape
    R, K1, dev = S // N, K + 1, flat.device
    flat = flat.double()
    kidx = torch.arange(K1, device=dev)
    labels = torch.arange(N, device=dev)
    newest = torch.arange(S, device=dev) % N  # the label at t - 1 of each state

    def shift(t: int) -> Tensor:  # (B, S, N): count added by label j at step t after state s
        step = units[:, t].unsqueeze(1).expand(B, S, N)
        if pair is not None and t > 0:
            step = step + pair[:, t - 1].index_select(1, newest)
        return step

    if T == 0:  # every row is empty: one labeling, count 0, score 0
        best = torch.where(kidx == 0, 0.0, NEG_INF).double().expand(B, K1).clone()
        return Tables(best, lambda k: torch.empty(B, 0, dtype=torch.long, device=dev))
    table = flat.new_full((B, K1, S), NEG_INF, dtype=torch.float64)
    s0 = shift(0)[:, 0]
    table.view(B, K1 * S).scatter_(1, (s0.clamp(max=K) * S + labels).long(), flat[:, 0, 0])
    table[:, :, :N][(s0 > K).unsqueeze(1).expand(B, K1, N)] = NEG_INF
    # reach[t]: the largest count any row can have at step t; only counts up to it are computed
    top = units.amax(2) + (0 if pair is None else F.pad(pair.flatten(2).amax(2), (1, 0)))
    reach = top.cumsum(1).amax(0).clamp(max=K).tolist() if B else [0] * T
    bps = []
    for t in range(1, T):
        kp, k1 = reach[t - 1] + 1, reach[t] + 1
        src = kidx[:k1].view(1, k1, 1, 1) - shift(t).unsqueeze(1)  # (B, k1, S, N): count before
        ok = (src >= 0) & (src < kp)
        prev = table[:, :kp].unsqueeze(3).expand(B, kp, S, N).gather(1, src.clamp(0, kp - 1))
        cand = (torch.where(ok, prev, NEG_INF) + flat[:, t].unsqueeze(1)).view(B, k1, N, R, N)
        arg = cand.argmax(2)  # first maximal oldest label
        new = cand.gather(2, arg.unsqueeze(2)).squeeze(2).reshape(B, k1, S)
        bps.append(arg.reshape(B, k1, S).to(small_index_dtype(N)))
        active = (t < lengths)[:, None, None]
        table[:, :k1] = torch.where(active, new, table[:, :k1])
    order_idx = _newest_first(order, N, dev)
    ranked = table[:, :, order_idx]
    pick = ranked.argmax(2)
    best = ranked.gather(2, pick.unsqueeze(2)).squeeze(2)
    final_state = order_idx[pick]
    empty = lengths == 0
    best[empty] = torch.where(kidx == 0, 0.0, NEG_INF).to(best.dtype)
    rows = torch.arange(B, device=dev)

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
                oldest = bps[t - 1][rows, cur_k, cur].long()
                before = oldest * R + cur // N  # the state at t - 1
                step = shift(t)[rows, before, label]
                cur = torch.where(inside, before, cur)
                cur_k = torch.where(inside, cur_k - step, cur_k)
        return torch.where((k < 0)[:, None], -1, path)  # no nonzero (a host sync)

    return Tables(best, backtrack)


@dataclass
class SegmentCountTerms:
    """What a segment adds to the count of a semi-Markov table, as tensors a kernel reads: a
    segment [s, e) of label n adds

        prefix[b, e, n] - prefix[b, s, n] + first[b, s, n] + (match if target_end[b, s] == e
                                                                and target_label[b, s] == n)

    (integers; see :func:`unit_terms` and :class:`SegmentCounts`). Calling it on segment starts
    and ends ``s``, ``e`` ((B, D) and (B, D) or (B, 1)) gives (B, D, N) int64."""

    prefix: Tensor  # (B, T + 1, N) int64
    first: Tensor  # (B, T + 1, N) int64
    target_end: Tensor  # (B, T + 1) int64, -1 where no target segment starts
    target_label: Tensor  # (B, T + 1) int64
    match: int = 0

    def __call__(self, s: Tensor, e: Tensor) -> Tensor:
        rows = torch.arange(s.shape[0], device=s.device)[:, None]
        count = self.prefix[rows, e] - self.prefix[rows, s] + self.first[rows, s]
        if self.match:
            N = self.prefix.shape[2]
            same = (self.target_end[rows, s] == e).unsqueeze(2) & (
                self.target_label[rows, s].unsqueeze(2) == torch.arange(N, device=s.device))
            count = count + self.match * same.long()
        return count


def unit_terms(units: Tensor) -> SegmentCountTerms:
    """The :class:`SegmentCountTerms` of a position loss: a segment adds the units (B, T, N) of its
    positions (integer-valued; see :func:`semimarkov_tables`)."""
    B, T, N = units.shape
    prefix = F.pad(units.long().cumsum(1), (0, 0, 1, 0))  # (B, T+1, N)
    none = torch.full((B, T + 1), -1, dtype=torch.long, device=units.device)
    return SegmentCountTerms(prefix, torch.zeros_like(prefix), none, none)


def semimarkov_tables(sm: SemiMarkov, terms: SegmentCountTerms, offset: Tensor, K: int) -> Tables:
    """Tables over segment ends for integer counts: the count starts at ``offset`` (B,) and a
    segment [s, e) of label n adds ``terms(s, e)[b, d, n]`` (s, e (B, D) positions; see
    :func:`unit_terms` and :class:`SegmentCounts`). Counts stay in [0, K] along every prefix."""
    B, T, S, N = sm.shape
    dev, K1 = sm.content.device, K + 1
    forbidden = sm.forbidden_counts()
    kidx = torch.arange(K1, device=dev)
    rows = torch.arange(B, device=dev)
    alpha = torch.full((B, T + 1, K1, N), NEG_INF, dtype=torch.float64, device=dev)
    inc = torch.full((B, T + 1, K1, N), NEG_INF, dtype=torch.float64, device=dev)
    inc[rows, 0, offset.clamp(0, K)] = sm.start.double()
    bp_d = torch.zeros(B, T + 1, K1, N, dtype=torch.long, device=dev)
    bp_m = torch.zeros_like(bp_d)
    for e in range(1, T + 1):
        D = min(S, e)
        s = torch.arange(e - 1, e - D - 1, -1, device=dev).expand(B, D)  # starts for d = 1..D
        count = terms(s, torch.full_like(s, e))  # (B, D, N)
        src = kidx.view(1, 1, K1, 1) - count.unsqueeze(2)  # (B, D, K1, N)
        prev = inc[:, s[0]].gather(2, src.clamp(0, K))
        cand = torch.where((src >= 0) & (src <= K), prev, NEG_INF)
        cand = cand + segment_terms(sm, forbidden, e).unsqueeze(2)
        d = cand.argmax(1)
        alpha[:, e] = cand.gather(1, d.unsqueeze(1)).squeeze(1)
        bp_d[:, e] = d + 1
        step = alpha[:, e].unsqueeze(3) + sm.into(e).double().unsqueeze(1)  # (B, K1, m, n)
        m = step.argmax(2)
        inc[:, e] = step.gather(2, m.unsqueeze(2)).squeeze(2)
        bp_m[:, e] = m
    lengths = sm.lengths
    final = alpha[rows, lengths] + sm.end.double().unsqueeze(1)  # (B, K1, N)
    last = final.argmax(2)
    best = final.gather(2, last.unsqueeze(2)).squeeze(2)
    empty = torch.where(kidx == offset.clamp(0, K)[:, None], 0.0, NEG_INF).to(best.dtype)
    best = torch.where((lengths == 0)[:, None], empty, best)

    def backtrack(k: Tensor) -> Tensor:  # -1 rows for unreached counts
        k = torch.where(best.gather(1, k.clamp(min=0).unsqueeze(1)).squeeze(1) > NEG_INF, k, -1)
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
            added = terms(s.clamp(min=0)[:, None], e[:, None])[rows, 0, label]
            kk = torch.where(active, kk - added, kk)
            label = torch.where(active, bp_m[rows, s, kk, label], label)
            e = torch.where(active, s, e)
            active = active & (e > 0)
        t = torch.arange(T, device=dev)
        filled = torch.where(starts, t, 0).cummax(1).values if T else t.expand(B, 0)
        inside = (t < lengths[:, None]) & (k >= 0)[:, None]
        return torch.where(inside, seg_label.gather(1, filled) + N * starts.long(), -1)

    return Tables(best, backtrack)


SEGMENT_LOSSES = ("hamming", "segment", "boundary", "zero_one")
"""The losses of segmentations: positions whose label differs (weighted), segments ((start, end,
label) triples) in the symmetric difference of the two segmentations, positions where "a segment
starts here" differs, and 0/1 (whether the segmentations differ: the segment count capped at 1)."""


def next_starts(starts: Tensor, lengths: Tensor) -> Tensor:
    """(B, T) the first segment start after each position, or the length (the segment's end)."""
    B, T = starts.shape
    t = torch.arange(T, device=starts.device)
    idx = torch.where(starts & (t < lengths[:, None]), t, lengths[:, None].expand(B, T))
    later = torch.cat([idx[:, 1:], lengths[:, None]], 1)[:, :T]  # positions after t
    return later.flip(1).cummin(1).values.flip(1)


class SegmentCounts:
    """The count of a segmentation loss (``kind`` in :data:`SEGMENT_LOSSES` but "hamming") against
    a target segmentation, per segment: ``offset`` (B,) + the sum over the segments [s, e) of label
    n of ``terms(s, e)[b, ..., n]``.

    - "boundary": (s is not a target start) + (target starts inside (s, e));
    - "segment" and "zero_one": |target segments| + the sum of (1 - 2 [s, e, n] is a target
      segment) = |target segments| + |segments| - 2 |common segments|.
    """

    def __init__(self, kind: str, labels: Tensor, starts: Tensor, lengths: Tensor, N: int) -> None:
        B, T = labels.shape
        inside = torch.arange(T, device=labels.device) < lengths[:, None]
        self.kind, self.N = kind, N
        self.starts = torch.cat([starts & inside, starts.new_zeros(B, 1)], 1)  # (B, T + 1)
        self.cum = F.pad(self.starts.long().cumsum(1), (1, 0))  # (B, T + 2): starts before each position
        self.ends = F.pad(next_starts(starts, lengths), (0, 1))  # (B, T + 1)
        self.labels = F.pad(labels.clamp(min=0), (0, 1))
        self.offset = self.cum[:, T] if kind != "boundary" else torch.zeros_like(lengths)
        self.terms = self._terms(B, T, N)

    def bound(self, lengths: Tensor) -> int:
        """The largest count of any segmentation (the table's K)."""
        return int((self.offset + lengths).max()) if len(lengths) else 0

    def _terms(self, B: int, T: int, N: int) -> SegmentCountTerms:
        """What each segment adds, as :class:`SegmentCountTerms`. "boundary": (s is not a target
        start) + (target starts inside (s, e)) = 1 - 2 [s is one] + (target starts in [s, e));
        "segment": 1, or -1 for a target segment."""
        starts = self.starts.long()  # (B, T + 1)
        if self.kind == "boundary":
            none = torch.full((B, T + 1), -1, dtype=torch.long, device=starts.device)
            prefix = self.cum[:, :T + 1, None].expand(B, T + 1, N).contiguous()
            return SegmentCountTerms(prefix, (1 - 2 * starts)[:, :, None].expand(B, T + 1, N).contiguous(),
                                     none, none)
        ones = torch.ones(B, T + 1, N, dtype=torch.long, device=starts.device)
        ends = torch.where(self.starts, self.ends, -1)
        return SegmentCountTerms(torch.zeros_like(ones), ones, ends, self.labels, match=-2)

    def count(self, labels: Tensor, starts: Tensor, lengths: Tensor) -> Tensor:
        """(B,) int64 the count of the segmentation (labels, starts) ((B, T), -1 / False outside)."""
        B, T = labels.shape
        inside = torch.arange(T, device=labels.device) < lengths[:, None]
        starts = starts & inside
        if self.kind == "boundary":
            return (starts != self.starts[:, :T]).sum(1)
        ends = next_starts(starts, lengths)
        common = starts & self.starts[:, :T] & (ends == self.ends[:, :T]) & (labels == self.labels[:, :T])
        total = self.offset + starts.sum(1) - 2 * common.sum(1)
        return total.clamp(max=1) if self.kind == "zero_one" else total
