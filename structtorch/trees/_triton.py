"""Tree dynamic programs as fused Triton kernels ("triton" backend).

One launch per pass, one program per sentence, in float64 whatever the input dtype. Each program
widens its spans one width at a time; the spans of a width are computed in (BLOCK_S x BLOCK_R)
tiles, BLOCK_S spans at once with their splits along the tile's second axis, from charts (B, ., T,
T) in global memory indexed [s][t] (span [s, t]); a barrier separates a width's phases.

- Eisner's DP (:func:`log_partition_forward`, :func:`viterbi`): the forward fills the complete and
  incomplete charts and their inner sums (the log-sum-exp, or the max with ``VITERBI``); the
  backward (the outside pass) spreads each item's gradient over its splits in proportion to their
  share (log) or onto the first maximal split (max), down to the arcs: the arc marginals, or the
  best tree's arc indicator, from which the heads are read (:func:`viterbi`).
- CKY (:func:`cky_log_partition_forward`, :func:`cky_brackets`) the same way over bracketings of
  span values (the labels summed or maximized before the kernel); its backward adds the left and
  the right parts of the splits in two phases (a tile's rows write into other rows' right parts).

Every chart and gradient a kernel reads is written by it first (no host fill), so a call is one or
two launches and a few other device ops whatever T. Chu-Liu-Edmonds runs on the host (the compiled
kernel on a CPU copy; a host sync), the matrix-tree theorem and the count tables of slack
rescaling run the PyTorch references.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from .._extension import chain_ops
from .._triton_common import NEG, launch
from . import _torch


@triton.jit
def _reduce(v, VITERBI: tl.constexpr):
    """The max (VITERBI) or log-sum-exp of each row of the tile ``v``; -inf for rows of -inf."""
    m = tl.max(v, 1)
    if VITERBI:
        return m
    safe = tl.where(m == NEG, 0.0, m)
    total = tl.sum(tl.exp(v - safe[:, None]), 1)
    return tl.where(total > 0, tl.log(tl.where(total > 0, total, 1.0)) + safe, NEG)


@triton.jit
def _shares(v, parent, VITERBI: tl.constexpr, BLOCK_R: tl.constexpr):
    """Each term's share of its row's parent value: exp(v - parent), or 1 at the row's first maximal
    term (VITERBI); 0 for -inf terms and parents."""
    ok = (v > NEG) & (parent[:, None] > NEG)
    if VITERBI:
        first = tl.argmax(tl.where(ok, v, NEG), 1)
        hit = tl.arange(0, BLOCK_R)[None, :] == first[:, None]
        return tl.where(ok & hit, 1.0, 0.0).to(tl.float64)
    return tl.where(ok, tl.exp(tl.where(ok, v, 0.0) - tl.where(ok, parent[:, None], 0.0)), 0.0)


@triton.jit
def _fill(ptr, value, T1, rows, BLOCK_S: tl.constexpr, BLOCK_R: tl.constexpr):
    """``rows`` x T1 entries of a row-major chart of row stride T1 set to ``value``."""
    s = tl.arange(0, BLOCK_S)[:, None]
    r = tl.arange(0, BLOCK_R)[None, :]
    for s0 in range(0, rows, BLOCK_S):
        for r0 in range(0, T1, BLOCK_R):
            tl.store(ptr + (s0 + s) * T1 + r0 + r, tl.zeros([BLOCK_S, BLOCK_R], tl.float64) + value,
                     mask=(s0 + s < rows) & (r0 + r < T1))


@triton.jit
def _rows(s0, n, w, k, BLOCK_S: tl.constexpr):
    """The tile of spans [s, t = s + w], s = s0..s0 + BLOCK_S - 1 below n: (s, rows (s < n), t,
    the mask of their first w splits along k)."""
    s = s0 + tl.arange(0, BLOCK_S)
    rows = s < n
    return s, rows, s + w, rows[:, None] & (k < w)


@triton.jit
def _splits(left, right, s, t, k, m, T):
    """The tile of split terms left[s][s + k] + right[s + k + 1][t] of the spans [s, t] (charts of
    row stride T): the left part's start and the right part's end are the span's."""
    return (tl.load(left + s[:, None] * T + s[:, None] + k, mask=m, other=NEG)
            + tl.load(right + (s[:, None] + k + 1) * T + t[:, None], mask=m, other=NEG))


@triton.jit
def _eisner_forward_kernel(arcs, lengths, charts, value, T1, SINGLE: tl.constexpr, VITERBI: tl.constexpr,
                           BLOCK_S: tl.constexpr, BLOCK_R: tl.constexpr):
    b = tl.program_id(0)
    L = tl.load(lengths + b)
    A = arcs + b * T1 * T1
    c0 = charts + b * 5 * T1 * T1
    c1, i0, i1, jj = c0 + T1 * T1, c0 + 2 * T1 * T1, c0 + 3 * T1 * T1, c0 + 4 * T1 * T1
    _fill(c0, NEG, T1, 5 * T1, BLOCK_S, BLOCK_R)
    tl.debug_barrier()
    d = tl.arange(0, BLOCK_R)
    for d0 in range(0, T1, BLOCK_R):
        on = (d0 + d <= L)
        tl.store(c1 + (d0 + d) * (T1 + 1), tl.zeros([BLOCK_R], tl.float64), mask=on)
        tl.store(c0 + (d0 + d) * (T1 + 1), tl.zeros([BLOCK_R], tl.float64), mask=on & (d0 + d >= 1))
    tl.debug_barrier()
    k = tl.arange(0, BLOCK_R)[None, :]
    for w in range(1, L + 1):
        n = L - w + 1  # spans [s, s + w], s = 0..L-w
        for s0 in range(0, n, BLOCK_S):
            s, rows, t, m = _rows(s0, n, w, k, BLOCK_S)
            # split r = s + k: complete [s, r] headed at s + complete [r + 1, t] headed at t
            j = _reduce(_splits(c1, c0, s, t, k, m, T1), VITERBI)
            tl.store(jj + s * T1 + t, j, mask=rows)
            tl.store(i1 + s * T1 + t, j + tl.load(A + s * T1 + t, mask=rows, other=0.0), mask=rows)
            tl.store(i0 + s * T1 + t, j + tl.load(A + t * T1 + s, mask=rows, other=0.0), mask=rows & (s > 0))
        tl.debug_barrier()
        for s0 in range(0, n, BLOCK_S):
            s, rows, t, m = _rows(s0, n, w, k, BLOCK_S)
            # headed at t: complete [s, r] headed at t... r = s + k: c0[s][r] + i0[r][t]
            v = (tl.load(c0 + s[:, None] * T1 + s[:, None] + k, mask=m, other=NEG)
                 + tl.load(i0 + (s[:, None] + k) * T1 + t[:, None], mask=m, other=NEG))
            tl.store(c0 + s * T1 + t, _reduce(v, VITERBI), mask=rows & (s > 0))
            # headed at s: r = s + 1 + k: i1[s][r] + c1[r][t]
            v = (tl.load(i1 + s[:, None] * T1 + s[:, None] + 1 + k, mask=m, other=NEG)
                 + tl.load(c1 + (s[:, None] + 1 + k) * T1 + t[:, None], mask=m, other=NEG))
            tl.store(c1 + s * T1 + t, _reduce(v, VITERBI), mask=rows)
        tl.debug_barrier()
    if SINGLE:  # the root's one child r = 1 + d: arcs[0][r] + c0[1][r] + c1[r][L]
        r = 1 + tl.arange(0, BLOCK_R)
        on = r <= L
        cand = (tl.load(A + r, mask=on, other=NEG) + tl.load(c0 + T1 + r, mask=on, other=NEG)
                + tl.load(c1 + r * T1 + L, mask=on, other=NEG))
        total = tl.max(cand, 0)
        if not VITERBI:
            safe = tl.where(total == NEG, 0.0, total)
            mass = tl.sum(tl.exp(cand - safe), 0)
            total = tl.where(mass > 0, tl.log(tl.where(mass > 0, mass, 1.0)) + safe, NEG)
    else:
        total = tl.load(c1 + L)
    tl.store(value + b, tl.where(L > 0, total, 0.0))


@triton.jit
def _spread(g_parent, parent, a_ptr, b_ptr, ga_ptr, gb_ptr, m, VITERBI: tl.constexpr, BLOCK_R: tl.constexpr):
    """Add g_parent times each split's share to the gradients of its two parts (tiles of pointers)."""
    a = tl.load(a_ptr, mask=m, other=NEG)
    bb = tl.load(b_ptr, mask=m, other=NEG)
    p = g_parent[:, None] * _shares(a + bb, parent, VITERBI, BLOCK_R)
    p = tl.where(m, p, 0.0)
    tl.store(ga_ptr, tl.load(ga_ptr, mask=m, other=0.0) + p, mask=m)
    tl.store(gb_ptr, tl.load(gb_ptr, mask=m, other=0.0) + p, mask=m)


@triton.jit
def _eisner_backward_kernel(arcs, lengths, charts, value, grad, out, gcharts, T1, SINGLE: tl.constexpr,
                            VITERBI: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_R: tl.constexpr):
    b = tl.program_id(0)
    L = tl.load(lengths + b)
    A = arcs + b * T1 * T1
    G = out + b * T1 * T1
    c0 = charts + b * 5 * T1 * T1
    c1, i0, i1, jj = c0 + T1 * T1, c0 + 2 * T1 * T1, c0 + 3 * T1 * T1, c0 + 4 * T1 * T1
    g0 = gcharts + b * 4 * T1 * T1  # d value / d c0, c1, i0, i1
    g1, h0, h1 = g0 + T1 * T1, g0 + 2 * T1 * T1, g0 + 3 * T1 * T1
    _fill(g0, 0.0, T1, 4 * T1, BLOCK_S, BLOCK_R)
    _fill(G, 0.0, T1, T1, BLOCK_S, BLOCK_R)
    tl.debug_barrier()
    z = tl.load(value + b)
    g = tl.load(grad + b)
    live = (L > 0) & (z > NEG) & (g != 0.0)
    top = tl.where(live, L, 0)
    if SINGLE:
        r = 1 + tl.arange(0, BLOCK_R)
        on = (r <= top)[None, :]
        cand = (tl.load(A + r, mask=r <= top, other=NEG) + tl.load(c0 + T1 + r, mask=r <= top, other=NEG)
                + tl.load(c1 + r * T1 + top, mask=r <= top, other=NEG))[None, :]
        p = tl.where(on, g * _shares(cand, tl.zeros([1], tl.float64) + z, VITERBI, BLOCK_R), 0.0)
        tl.store(G + r[None, :], p, mask=on)
        tl.store(g0 + T1 + r[None, :], p, mask=on)
        tl.store(g1 + r[None, :] * T1 + top, p, mask=on)
    else:
        tl.store(g1 + top, g, mask=live)
    tl.debug_barrier()
    k = tl.arange(0, BLOCK_R)[None, :]
    for step in range(0, top):
        w = top - step
        n = top - w + 1
        for s0 in range(0, n, BLOCK_S):
            s, rows, t, m = _rows(s0, n, w, k, BLOCK_S)
            row = s[:, None] * T1 + s[:, None] + k  # [s][s + k]
            col = (s[:, None] + k) * T1 + t[:, None]  # [s + k][t]
            # c1[s][t]: i1[s][r] + c1[r][t], r = s + 1 + k
            x = tl.load(g1 + s * T1 + t, mask=rows, other=0.0)
            parent = tl.load(c1 + s * T1 + t, mask=rows, other=NEG)
            _spread(x, parent, i1 + row + 1, c1 + col + T1, h1 + row + 1, g1 + col + T1, m, VITERBI, BLOCK_R)
            # c0[s][t]: c0[s][r] + i0[r][t], r = s + k (s > 0)
            x = tl.load(g0 + s * T1 + t, mask=rows & (s > 0), other=0.0)
            parent = tl.load(c0 + s * T1 + t, mask=rows & (s > 0), other=NEG)
            _spread(x, parent, c0 + row, i0 + col, g0 + row, h0 + col, m & (s[:, None] > 0), VITERBI, BLOCK_R)
        tl.debug_barrier()
        for s0 in range(0, n, BLOCK_S):
            s, rows, t, m = _rows(s0, n, w, k, BLOCK_S)
            x0 = tl.load(h0 + s * T1 + t, mask=rows & (s > 0), other=0.0)
            x1 = tl.load(h1 + s * T1 + t, mask=rows, other=0.0)
            tl.store(G + t * T1 + s, x0, mask=rows & (s > 0))  # i0[s][t] = j + arcs[t][s]
            # i1[s][t] = j + arcs[s][t] (added: the single root's arcs 0 -> t are there already)
            tl.store(G + s * T1 + t, tl.load(G + s * T1 + t, mask=rows, other=0.0) + x1, mask=rows)
            # j[s][t]: c1[s][r] + c0[r + 1][t], r = s + k
            row = s[:, None] * T1 + s[:, None] + k
            col = (s[:, None] + k + 1) * T1 + t[:, None]
            parent = tl.load(jj + s * T1 + t, mask=rows, other=NEG)
            _spread(x0 + x1, parent, c1 + row, c0 + col, g1 + row, g0 + col, m, VITERBI, BLOCK_R)
        tl.debug_barrier()


TILE = 512
"""Entries of a (BLOCK_S, BLOCK_R) tile: the splits of a width along the second axis (BLOCK_R >=
T + 1), as many spans as fit along the first (at most 8)."""


def _blocks(T1: int) -> tuple[int, int]:
    """(BLOCK_S, BLOCK_R) for sentences of T1 - 1 words."""
    R = max(16, triton.next_power_of_2(T1))
    return max(1, min(8, TILE // R)), R


def warps(T1: int) -> int:
    """Warps of every tree kernel for sentences of T1 - 1 words: the settings that keep every variant
    off the stack on sm_90 with Triton 3.6, 3.8 and 3.9 (``tests/compile_kernels.py``)."""
    return 16 if _blocks(T1)[1] >= 256 else 8


def _eisner(arcs: Tensor, lengths: Tensor, single_root: bool, viterbi: bool) -> tuple[Tensor, Tensor]:
    B, T1, _ = arcs.shape
    arcs = arcs.double().contiguous()
    charts = arcs.new_empty(B, 5, T1, T1)
    value = arcs.new_empty(B)
    S, R = _blocks(T1)
    launch("eisner_forward", _eisner_forward_kernel, (B,), arcs, lengths.contiguous(), charts, value, T1,
           SINGLE=single_root, VITERBI=viterbi, BLOCK_S=S, BLOCK_R=R, num_warps=warps(T1))
    return value, charts


def _eisner_backward(arcs: Tensor, lengths: Tensor, single_root: bool, value: Tensor, charts: Tensor,
                     grad: Tensor, viterbi: bool) -> Tensor:
    B, T1, _ = arcs.shape
    out = arcs.new_empty(B, T1, T1, dtype=torch.float64)
    gcharts = arcs.new_empty(B, 4, T1, T1, dtype=torch.float64)
    S, R = _blocks(T1)
    launch("eisner_backward", _eisner_backward_kernel, (B,), arcs.double().contiguous(), lengths.contiguous(),
           charts, value, grad.double().contiguous(), out, gcharts, T1, SINGLE=single_root, VITERBI=viterbi,
           BLOCK_S=S, BLOCK_R=R, num_warps=warps(T1))
    return out


def log_partition_forward(arcs: Tensor, lengths: Tensor, single_root: bool) -> tuple[Tensor, list[Tensor]]:
    """logZ (B,) float64 of the projective trees and the saved charts [(B, 5, T + 1, T + 1)]."""
    logz, charts = _eisner(arcs, lengths, single_root, False)
    return logz, [charts]


def log_partition_backward(arcs: Tensor, lengths: Tensor, single_root: bool, logz: Tensor,
                           state: list[Tensor], grad: Tensor) -> Tensor:
    """grad (B,) times the arc marginals, (B, T + 1, T + 1) in the dtype of ``arcs``."""
    return _eisner_backward(arcs, lengths, single_root, logz, state[0], grad, False).to(arcs.dtype)


def viterbi(arcs: Tensor, lengths: Tensor, single_root: bool) -> tuple[Tensor, Tensor]:
    """(best score (B,) float64, heads (B, T + 1)): the max-plus forward, then its backward (the
    best tree's arc indicator), whose column maxima are the heads."""
    best, charts = _eisner(arcs, lengths, single_root, True)
    indicator = _eisner_backward(arcs, lengths, single_root, best, charts, torch.ones_like(best), True)
    return best, _torch.heads_of(indicator, lengths, best > float("-inf"))


def mst(arcs: Tensor, lengths: Tensor, single_root: bool) -> Tensor:
    """Chu-Liu-Edmonds on the host: the compiled kernel on a CPU copy, else the reference."""
    if chain_ops() is not None:
        from . import _cpu

        return _cpu.mst(arcs, lengths, single_root)
    return _torch.mst(arcs, lengths, single_root)


def matrix_tree_forward(arcs: Tensor, lengths: Tensor, single_root: bool) -> tuple[Tensor, list[Tensor]]:
    """The matrix-tree theorem by the PyTorch reference (a log-determinant on the device)."""
    return _torch.matrix_tree(arcs, lengths, single_root).double(), []


def matrix_tree_backward(arcs: Tensor, lengths: Tensor, single_root: bool, logz: Tensor, state: list[Tensor],
                         grad: Tensor) -> Tensor:
    return _torch.grad_of(lambda a: _torch.matrix_tree(a, lengths, single_root), arcs, grad)


count_table = _torch.count_table


def count_heads(arcs: Tensor, cost: Tensor, lengths: Tensor, single_root: bool, k: Tensor) -> Tensor:
    return _torch.count_viterbi(arcs, cost, lengths, k, single_root)[1]


@triton.jit
def _cky_forward_kernel(spans, lengths, charts, value, T, VITERBI: tl.constexpr, BLOCK_S: tl.constexpr,
                        BLOCK_R: tl.constexpr):
    b = tl.program_id(0)
    L = tl.load(lengths + b)
    X = spans + b * T * T
    inside = charts + b * 2 * T * T
    inner = inside + T * T
    _fill(inside, NEG, T, 2 * T, BLOCK_S, BLOCK_R)
    tl.debug_barrier()
    d = tl.arange(0, BLOCK_R)
    for d0 in range(0, T, BLOCK_R):
        on = d0 + d < L
        tl.store(inside + (d0 + d) * (T + 1), tl.load(X + (d0 + d) * (T + 1), mask=on, other=NEG), mask=on)
        tl.store(inner + (d0 + d) * (T + 1), tl.zeros([BLOCK_R], tl.float64), mask=on)
    tl.debug_barrier()
    k = tl.arange(0, BLOCK_R)[None, :]
    for w in range(1, L):
        n = L - w  # spans [s, s + w], s = 0..L-w-1, split after s + k
        for s0 in range(0, n, BLOCK_S):
            s, rows, t, m = _rows(s0, n, w, k, BLOCK_S)
            part = _reduce(_splits(inside, inside, s, t, k, m, T), VITERBI)
            tl.store(inner + s * T + t, part, mask=rows)
            tl.store(inside + s * T + t, part + tl.load(X + s * T + t, mask=rows, other=0.0), mask=rows)
        tl.debug_barrier()
    last = tl.maximum(L - 1, 0)
    tl.store(value + b, tl.where(L > 0, tl.load(inside + last), 0.0))


@triton.jit
def _cky_backward_kernel(lengths, charts, value, grad, out, T, VITERBI: tl.constexpr, BLOCK_S: tl.constexpr,
                         BLOCK_R: tl.constexpr):
    b = tl.program_id(0)
    L = tl.load(lengths + b)
    inside = charts + b * 2 * T * T
    inner = inside + T * T
    G = out + b * T * T
    _fill(G, 0.0, T, T, BLOCK_S, BLOCK_R)
    tl.debug_barrier()
    z = tl.load(value + b)
    g = tl.load(grad + b)
    live = (L > 0) & (z > NEG) & (g != 0.0)
    top = tl.where(live, L, 0)
    tl.store(G + tl.maximum(top - 1, 0), g, mask=live)
    tl.debug_barrier()
    k = tl.arange(0, BLOCK_R)[None, :]
    for step in range(0, tl.maximum(top - 1, 0)):
        w = top - 1 - step
        n = top - w
        for half in tl.static_range(2):  # left parts, then right parts (rows write other rows' right parts)
            for s0 in range(0, n, BLOCK_S):
                s, rows, t, m = _rows(s0, n, w, k, BLOCK_S)
                left = s[:, None] * T + s[:, None] + k
                right = (s[:, None] + k + 1) * T + t[:, None]
                v = tl.load(inside + left, mask=m, other=NEG) + tl.load(inside + right, mask=m, other=NEG)
                x = tl.load(G + s * T + t, mask=rows, other=0.0)
                parent = tl.load(inner + s * T + t, mask=rows, other=NEG)
                p = tl.where(m, x[:, None] * _shares(v, parent, VITERBI, BLOCK_R), 0.0)
                if half == 0:
                    tl.store(G + left, tl.load(G + left, mask=m, other=0.0) + p, mask=m)
                else:
                    tl.store(G + right, tl.load(G + right, mask=m, other=0.0) + p, mask=m)
            tl.debug_barrier()


def _cky(spans: Tensor, lengths: Tensor, viterbi: bool) -> tuple[Tensor, Tensor]:
    B, T, _ = spans.shape
    spans = spans.double().contiguous()
    charts = spans.new_empty(B, 2, T, T)
    value = spans.new_empty(B)
    S, R = _blocks(T)
    launch("cky_forward", _cky_forward_kernel, (B,), spans, lengths.contiguous(), charts, value, T,
           VITERBI=viterbi, BLOCK_S=S, BLOCK_R=R, num_warps=warps(T))
    return value, charts


def _cky_backward(spans: Tensor, lengths: Tensor, value: Tensor, charts: Tensor, grad: Tensor,
                  viterbi: bool) -> Tensor:
    B, T, _ = spans.shape
    out = spans.new_empty(B, T, T, dtype=torch.float64)
    S, R = _blocks(T)
    launch("cky_backward", _cky_backward_kernel, (B,), lengths.contiguous(), charts, value,
           grad.double().contiguous(), out, T, VITERBI=viterbi, BLOCK_S=S, BLOCK_R=R, num_warps=warps(T))
    return out


def cky_log_partition_forward(spans: Tensor, lengths: Tensor) -> tuple[Tensor, list[Tensor]]:
    """logZ (B,) float64 of the bracketings of span values (B, T, T) and the saved charts."""
    logz, charts = _cky(spans, lengths, False)
    return logz, [charts]


def cky_log_partition_backward(spans: Tensor, lengths: Tensor, logz: Tensor, state: list[Tensor],
                               grad: Tensor) -> Tensor:
    """grad (B,) times the bracket marginals, (B, T, T) in the dtype of ``spans``."""
    return _cky_backward(spans, lengths, logz, state[0], grad, False).to(spans.dtype)


def cky_brackets(spans: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
    """(best score (B,) float64, the best bracketing's spans (B, T, T) 0/1 float64)."""
    best, charts = _cky(spans, lengths, True)
    return best, _cky_backward(spans, lengths, best, charts, torch.ones_like(best), True)


cky_count_table = _torch.cky_count_table


def cky_count_spans(spans: Tensor, cost: Tensor, lengths: Tensor, k: Tensor) -> Tensor:
    return _torch.cky_count_viterbi(spans, cost, lengths, k)[1]
