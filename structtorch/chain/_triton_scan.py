"""Linear-chain dynamic programs parallel in time: chunked Triton kernels for long sequences in
small batches ("triton" backend, issue 23 item 5).

The serial kernels of :mod:`structtorch.chain._triton` run one program per sequence over all T
steps: at (B, T, N) = (1, 100000, 8) that is 100,000 dependent steps on one SM. Here time is cut
into C = ceil(T / S) chunks of S positions, and the recursion

    alpha_0 = start + unary_0,    alpha_t = alpha_{t-1} (x) K_t,    K_t[i, j] = A_t[i, j] + unary_t[j]

((x) the log-sum-exp or max-plus vector-matrix product) runs in three launches:

1. grid (B, C): each chunk c multiplies its transfer matrices into one N x N block
   ``P_c = K_{cS+1} (x) ... (x) K_{(c+1)S}`` (S - 1 matrix products, O(S N^3) work, depth S),
   only for chunks followed by another chunk inside the sequence (so every factor lies inside the
   length: no identity padding is needed);
2. grid (B,): the boundary vectors ``alpha_{(c+1)S} = alpha_{cS} (x) P_c``, a sequential pass of
   C vector-matrix products (O(C N^2), depth C);
3. grid (B, C): each chunk runs the ordinary recursion from its boundary vector over its S
   positions (depth S), with the step of the serial kernels (:func:`transition_step`); the chunk
   holding the last position closes with the end scores (logZ or the best score).

Depth O(S + C) = O(sqrt(T)) with S ~ sqrt(T), instead of T. The log-partition writes alpha
(B, T, N) exactly as the serial forward does (rows past each length unused: the boundary vectors
are written into their rows of alpha by phase 2), so the serial backward consumes it unchanged.
Viterbi recomputes alpha per chunk in a (B, C, 2, N) ring with backpointers (B, T, N) (each chunk
also computes the backpointers of the next chunk's first position, which need its own last
alpha), composes per chunk the map "label at its last position -> label at its first position"
(B, C, N), then 4. one program per sequence walks the C maps to the label at each chunk's end and
5. grid (B, C) backtraces each chunk and writes -1 beyond the length and on infeasible rows.
The backward runs beta the same way: phase 1 again (the products are recomputed, so that the
saved state stays alpha alone, as for the serial kernels), the boundary betas by a sequential pass
(the last, partial chunk step by step, then C matrix-vector products), and one program per chunk
computing beta, node and edge marginals over its positions as the serial backward does.
The CRF loss (``nll_forward`` / ``nll_backward``, GOLD) adds the labeling's score: each chunk of
phase 1 sums its positions' part (vectorized over positions), the last chunk of phase 3 adds them
up; its backward subtracts the labeling's indicators per chunk, as the serial one does.

Launches: log-partition 3, backward 3 (+ a sum for shared transitions), Viterbi 5, the CRF loss
3 + 3, node marginals 6; no host synchronization, sizes from shapes only. The host functions keep
the contracts of their namesakes in :mod:`structtorch.chain._triton` (plus a ``chunk`` keyword
forcing the chunk length), so either module can serve a call; :func:`use_scan` proposes which.

Memory: O(B T N) (alpha or backpointers, as the serial kernels) + O(B C N^2) (the blocks, two
buffers per chunk for the products' ping-pong; per-chunk edge sums in the backward of shared
transitions) + O(B C N) (boundary vectors, rings, maps). Work: O(B T N^3) for the products against
O(B T N^2) serially, which is why :func:`use_scan` keeps this for small batches and moderate N.

Results differ from the serial kernels only by floating rounding (the products associate the sums
differently); Viterbi's ties are broken by the first maximal index at every step as everywhere
(exact ties, e.g. integer-valued scores, give the serial kernels' path), but where two paths'
scores tie only up to rounding, the different association may pick the other one. Every kernel
accumulates in float64, tiles labels (any N compiles) and uses 64-bit offsets. No GPU has run
these kernels yet: they are tested in Triton's interpreter and compiled ahead of time for sm_90
(no register spills at N = 8, 32, 64)."""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl
from torch import Tensor

from .._triton_common import (
    NEG,
    POS,
    block,
    candidates,
    close,
    finish,
    launch,
    lse_finish,
    lse_update,
    per_triton,
    transition_step,
    transitions_at,
)
from .._triton_common import load_tile as _tile
from . import _torch
from ._triton import BACKWARD_TILE, _backward_step, _beta_candidates, _fill_zero, _label, _normalize_node
from .layout import Chain

PRODUCT_TILE = 32
"""The products' largest label tile: a float64 (max, scaled sum) pair per entry of a tile."""

BETA_TILE = 32
"""The boundary betas' largest label tile: its (row-reduced) float64 tiles spill registers on sm_90
at 64 x 64 (compiled ahead of time as ``tests/compile_kernels.py`` does)."""

BACKWARD_WARPS = per_triton(4, {(3, 6): 2, (3, 9): 2})
"""Warps of the chunked backward on float32 inputs: with Triton 3.9 at 4 (and 8) some variants put
8 B on the stack on sm_90, at 2 none; with 3.6 at 4 two variants put 8 B there, at 2 none; 3.8 is
clean at Triton's 4."""

BACKWARD_WARPS_FLOAT64 = per_triton(4, {(3, 9): 2})
"""The same on float64 inputs: Triton 3.6 is clean at 4 (at 2 two variants put 24-40 B on the
stack), 3.9 at 2, 3.8 at 4."""

MIN_CHUNK = 16
"""The shortest chunk :func:`chunk_length` proposes."""


# ---- phase 1: the chunks' products ---------------------------------------------------------


@triton.jit
def _lse_pair(m, s, cand):
    """Elementwise online log-sum-exp: fold the tile ``cand`` into the running (max, scaled sum)
    tiles with one exponential per entry."""
    new = tl.maximum(m, cand)
    low = tl.minimum(m, cand)
    e = tl.exp(low - tl.where(new == NEG, 0.0, new))
    return new, tl.where(cand > m, s * e + 1.0, s + e)


@triton.jit
def _multiply(src, A, dst, add, N, r, BLOCK: tl.constexpr, VITERBI: tl.constexpr):
    """dst[i, j] = (max or log-sum-exp over k of src[i, k] + A[k, j]) + add[j], (N, N) float64
    matrices (``A`` and ``add`` in the input dtype), tile by tile, as rank-one updates over k."""
    for i0 in range(0, N, BLOCK):
        i = i0 + r
        mi = i < N
        for j0 in range(0, N, BLOCK):
            j = j0 + r
            mj = j < N
            m = tl.full([BLOCK, BLOCK], NEG, tl.float64)
            s = tl.zeros([BLOCK, BLOCK], tl.float64)
            for k in range(0, N):
                a = tl.load(src + i * N + k, mask=mi, other=NEG)
                w = tl.load(A + k * N + j, mask=mj, other=NEG).to(tl.float64)
                cand = a[:, None] + w[None, :]
                if VITERBI:
                    m = tl.maximum(m, cand)
                else:
                    m, s = _lse_pair(m, s, cand)
            if not VITERBI:
                m = lse_finish(m, s)
            m += tl.load(add + j, mask=mj, other=NEG).to(tl.float64)[None, :]
            tl.store(dst + i[:, None] * N + j[None, :], m, mask=mi[:, None] & mj[None, :])


@triton.jit
def _transfer(A, add, dst, N, r, BLOCK: tl.constexpr):
    """dst[i, j] = A[i, j] + add[j] in float64: the transfer matrix K of one position."""
    for i0 in range(0, N, BLOCK):
        i = i0 + r
        mi = i < N
        for j0 in range(0, N, BLOCK):
            j = j0 + r
            mj = j < N
            u = tl.load(add + j, mask=mj, other=NEG).to(tl.float64)
            tl.store(dst + i[:, None] * N + j[None, :], _tile(A, i, mi, j, mj, N) + u[None, :],
                     mask=mi[:, None] & mj[None, :])


@triton.jit
def _clamp(y, N):
    """Labels clamped into [0, N) (never a read out of bounds, even unvalidated)."""
    return tl.minimum(tl.maximum(y, 0), N - 1).to(tl.int64)


@triton.jit
def _gold_part(unary, trans, start, labels, b, lo, hi, T, N, r, SHARED: tl.constexpr, BLOCK: tl.constexpr):
    """The score of ``labels[b]`` over positions [lo, hi) (float64): unary scores, the transitions
    into each position and the start score at position 0; vectorized over positions."""
    total = tl.zeros([BLOCK], tl.float64)
    for t0 in range(lo, hi, BLOCK):
        t = t0 + r
        mt = t < hi
        inner = mt & (t > 0)
        y = _clamp(tl.load(labels + b * T + t, mask=mt, other=0), N)
        y_prev = _clamp(tl.load(labels + b * T + t - 1, mask=inner, other=0), N)
        if SHARED:
            edge = y_prev * N + y
        else:
            edge = (b * (T - 1) + t - 1) * N * N + y_prev * N + y
        v = tl.load(unary + (b * T + t) * N + y, mask=mt, other=0.0).to(tl.float64)
        v += tl.load(trans + edge, mask=inner, other=0.0).to(tl.float64)
        v += tl.load(start + b * N + y, mask=mt & (t == 0), other=0.0).to(tl.float64)
        total += tl.where(mt, v, 0.0)
    return tl.sum(total, axis=0)


@triton.jit
def _product_kernel(unary, trans, start, lengths, labels, prod, partial, T, N, C, S, SHARED: tl.constexpr,
                    VITERBI: tl.constexpr, GOLD: tl.constexpr, BLOCK: tl.constexpr):
    """Program (b, c): ``prod[b, c, (S - 1) % 2]`` (N, N) = K_{cS+1} (x) ... (x) K_{(c+1)S} of
    sequence b, when chunk c + 1 starts inside the sequence ((c + 1) S < length); ``prod`` is
    (B, C, 2, N, N) float64, the two slots the ping-pong of the products. With GOLD,
    ``partial[b, c]`` (float64) = the score of ``labels[b]`` over the chunk's positions inside the
    sequence (but the end score)."""
    b = tl.program_id(0).to(tl.int64)  # 64-bit offsets: B T N may pass 2^31
    c = tl.program_id(1).to(tl.int64)
    L = tl.minimum(tl.load(lengths + b), T)  # never past the buffers, even unvalidated
    r = tl.arange(0, BLOCK)
    lo = c * S
    P = prod + (b * C + c) * 2 * N * N
    if lo + S < L:
        A = transitions_at(trans, b, T, N, lo + 1, SHARED)
        _transfer(A, unary + (b * T + lo + 1) * N, P, N, r, BLOCK)
        tl.debug_barrier()
        for k in range(1, S):
            t = lo + 1 + k
            A = transitions_at(trans, b, T, N, t, SHARED)
            _multiply(P + ((k - 1) % 2) * N * N, A, P + (k % 2) * N * N, unary + (b * T + t) * N, N, r, BLOCK,
                      VITERBI)
            tl.debug_barrier()
    if GOLD:
        if lo < L:
            hi = tl.minimum(lo + S, L)
            part = _gold_part(unary, trans, start, labels, b, lo, hi, T, N, r, SHARED, BLOCK)
            tl.store(partial + b * C + c, part)


# ---- phase 2: the boundary vectors -----------------------------------------------------------


@triton.jit
def _vecmat(src, M, dst, N, r, BLOCK: tl.constexpr, VITERBI: tl.constexpr):
    """dst[j] = max or log-sum-exp over i of src[i] + M[i, j] (float64 vectors), tile by tile."""
    for j0 in range(0, N, BLOCK):
        j = j0 + r
        mj = j < N
        m = tl.full([BLOCK], NEG, tl.float64)
        s = tl.zeros([BLOCK], tl.float64)
        for i0 in range(0, N, BLOCK):
            cand = candidates(src, M, i0, j, mj, r, N)
            if VITERBI:
                m = tl.maximum(m, tl.max(cand, axis=0))
            else:
                m, s = lse_update(m, s, cand, 0)
        tl.store(dst + j, finish(m, s, VITERBI), mask=mj)


@triton.jit
def _boundary(vec, b, c, T, N, C, S, VITERBI: tl.constexpr):
    """Where chunk c's first alpha lives: its row c S of alpha (B, T, N) for the log-partition,
    slot 0 of its ring (B, C, 2, N) for Viterbi."""
    if VITERBI:
        return vec + (b * C + c) * 2 * N
    return vec + (b * T + c * S) * N


@triton.jit
def _boundary_kernel(unary, start, lengths, prod, vec, T, N, C, S, VITERBI: tl.constexpr,
                     BLOCK: tl.constexpr):
    """Program b: alpha at each chunk's first position c S < length, from alpha_0 = start +
    unary_0 by the products of phase 1, into ``vec`` (see :func:`_boundary`)."""
    b = tl.program_id(0).to(tl.int64)  # 64-bit offsets: B T N may pass 2^31
    L = tl.minimum(tl.load(lengths + b), T)
    r = tl.arange(0, BLOCK)
    if L > 0:
        first = _boundary(vec, b, 0, T, N, C, S, VITERBI)
        for j0 in range(0, N, BLOCK):
            j = j0 + r
            mj = j < N
            s = tl.load(start + b * N + j, mask=mj, other=NEG).to(tl.float64)
            u = tl.load(unary + b * T * N + j, mask=mj, other=NEG).to(tl.float64)
            tl.store(first + j, s + u, mask=mj)
        tl.debug_barrier()
        chunks = (L + S - 1) // S
        for c in range(0, chunks - 1):
            M = prod + ((b * C + c) * 2 + (S - 1) % 2) * N * N
            src = _boundary(vec, b, c, T, N, C, S, VITERBI)
            _vecmat(src, M, _boundary(vec, b, c + 1, T, N, C, S, VITERBI), N, r, BLOCK, VITERBI)
            tl.debug_barrier()


# ---- phase 3: inside each chunk ----------------------------------------------------------------


@triton.jit
def _gold_total(end, labels, partial, b, L, T, N, C, S, r, BLOCK: tl.constexpr):
    """The score of ``labels[b]`` (length L > 0): the chunks' partial scores and the end score."""
    chunks = (L + S - 1) // S
    total = tl.zeros([BLOCK], tl.float64)
    for c0 in range(0, chunks, BLOCK):
        k = c0 + r
        total += tl.load(partial + b * C + k, mask=k < chunks, other=0.0)
    y = _clamp(tl.load(labels + b * T + L - 1), N)
    return tl.sum(total, axis=0) + tl.load(end + b * N + y).to(tl.float64)


@triton.jit
def _inside_kernel(unary, trans, end, lengths, vec, bp, maps, last, out, labels, partial, nll, T, N, C, S,
                   SHARED: tl.constexpr, VITERBI: tl.constexpr, GOLD: tl.constexpr, BLOCK: tl.constexpr):
    """Program (b, c): the forward recursion over chunk c's positions [cS, min(cS + S, length))
    from its boundary vector (see :func:`_boundary`): the log-partition into its rows of alpha,
    Viterbi into its ring with backpointers ``bp`` (B, T, N) (also those of the next chunk's first
    position) and the map ``maps[b, c, j]`` (int32): the label at cS of the best path ending in
    label j at the chunk's last position. The chunk holding the last position stores ``out[b]``
    (logZ or the best score; 0 on empty rows) and, for Viterbi, the best final label ``last[b]``;
    with GOLD, ``nll[b]`` = logZ - score(labels[b]) from phase 1's ``partial`` (B, C), +inf on rows
    without a feasible labeling."""
    b = tl.program_id(0).to(tl.int64)  # 64-bit offsets: B T N may pass 2^31
    c = tl.program_id(1).to(tl.int64)
    L = tl.minimum(tl.load(lengths + b), T)
    r = tl.arange(0, BLOCK)
    lo = c * S
    if lo < L:
        hi = tl.minimum(lo + S, L)
        stop = hi
        if VITERBI:
            stop = tl.minimum(hi + 1, L)  # the backpointers of the next chunk's first position
        base = _boundary(vec, b, c, T, N, C, S, VITERBI)
        for t in range(lo + 1, stop):
            at = (b * T + t) * N
            if VITERBI:
                src = base + ((t - 1 - lo) % 2) * N
                dst = base + ((t - lo) % 2) * N
            else:
                src = vec + at - N
                dst = vec + at
            A = transitions_at(trans, b, T, N, t, SHARED)
            transition_step(src, A, dst, bp + at, unary + at, N, r, BLOCK, VITERBI, True)
            tl.debug_barrier()
        if hi == L:
            final = vec + (b * T + L - 1) * N
            if VITERBI:
                final = base + ((L - 1 - lo) % 2) * N
            result, label = close(final, end + b * N, N, r, BLOCK, VITERBI)
            tl.store(out + b, result)
            if VITERBI:
                tl.store(last + b, label)
            if GOLD:
                gold = _gold_total(end, labels, partial, b, L, T, N, C, S, r, BLOCK)
                tl.store(nll + b, tl.where(result == NEG, POS, result - tl.where(result == NEG, 0.0, gold)))
        if VITERBI:
            for j0 in range(0, N, BLOCK):
                j = j0 + r
                mj = j < N
                y = j
                for s in range(0, hi - 1 - lo):
                    t = hi - 1 - s
                    y = tl.load(bp + (b * T + t) * N + y, mask=mj, other=0).to(tl.int32)
                tl.store(maps + (b * C + c) * N + j, y, mask=mj)
    elif c == 0:
        tl.store(out + b, tl.zeros([], tl.float64))  # an empty row
        if GOLD:
            tl.store(nll + b, tl.zeros([], tl.float64))


# ---- Viterbi's backtrace -------------------------------------------------------------------------


@triton.jit
def _ends_kernel(lengths, bp, maps, last, out, ends, T, N, C, S):
    """Program b: ``ends[b, c]`` (int32), the best path's label at the last position of each chunk
    c inside a feasible sequence, by walking the chunks' maps from the last one."""
    b = tl.program_id(0).to(tl.int64)  # 64-bit offsets: B T N may pass 2^31
    L = tl.minimum(tl.load(lengths + b), T)
    if (L > 0) & (tl.load(out + b) > NEG):
        y = tl.load(last + b)
        chunks = (L + S - 1) // S
        for s in range(0, chunks - 1):
            c = chunks - 1 - s
            tl.store(ends + b * C + c, y)
            head = tl.load(maps + (b * C + c) * N + y)  # the label at c S
            y = tl.load(bp + (b * T + c * S) * N + head).to(tl.int32)
        tl.store(ends + b * C, y)


@triton.jit
def _walk_kernel(lengths, bp, ends, out, path, T, N, C, S, BLOCK: tl.constexpr):
    """Program (b, c): the best path over chunk c's positions from its last label ``ends[b, c]``;
    -1 in ``path`` (B, T) int64 beyond the length and on infeasible rows."""
    b = tl.program_id(0).to(tl.int64)  # 64-bit offsets: B T N may pass 2^31
    c = tl.program_id(1).to(tl.int64)
    L = tl.minimum(tl.load(lengths + b), T)
    r = tl.arange(0, BLOCK)
    lo = c * S
    first = tl.where((L > 0) & (tl.load(out + b) > NEG), L, 0)  # -1 from here on
    if lo < first:
        hi = tl.minimum(lo + S, L)
        y = tl.load(ends + b * C + c)
        for s in range(0, hi - lo):
            t = hi - 1 - s
            tl.store(path + b * T + t, y.to(tl.int64))
            y = tl.load(bp + (b * T + t) * N + y, mask=t > lo, other=0).to(tl.int32)
    for t0 in range(0, S, BLOCK):
        t = lo + t0 + r
        tl.store(path + b * T + t, tl.full([BLOCK], -1, tl.int64), mask=(t < lo + S) & (t < T) & (t >= first))


# ---- the backward ----------------------------------------------------------------------------------


@triton.jit
def _beta_step(nxt, A, add, dst, N, r, BLOCK: tl.constexpr):
    """dst[i] = log-sum-exp over j of A[i, j] + add[j] + nxt[j] (float64 vectors): one step of
    beta (``A`` an (N, N) matrix of either dtype, ``add`` None-like when the step has no unary)."""
    for i0 in range(0, N, BLOCK):
        i = i0 + r
        mi = i < N
        m = tl.full([BLOCK], NEG, tl.float64)
        acc = tl.zeros([BLOCK], tl.float64)
        for j0 in range(0, N, BLOCK):
            j = j0 + r
            mj = j < N
            m, acc = lse_update(m, acc, _beta_candidates(add, A, nxt, i, mi, j, mj, N), 1)
        tl.store(dst + i, lse_finish(m, acc), mask=mi)


@triton.jit
def _beta_boundary_kernel(unary, trans, end, lengths, prod, bounds, ring, T, N, C, S, SHARED: tl.constexpr,
                          BLOCK: tl.constexpr):
    """Program b: beta at each chunk's first position c S inside the sequence (c >= 1), into
    ``bounds[b, c]`` ((B, C, N) float64): the last chunk step by step from beta_{L-1} = end (in its
    ring (B, C, 2, N)), the others by the products of phase 1 (beta_{cS} = P_c (x) beta_{(c+1)S})."""
    b = tl.program_id(0).to(tl.int64)  # 64-bit offsets: B T N may pass 2^31
    L = tl.minimum(tl.load(lengths + b), T)
    r = tl.arange(0, BLOCK)
    chunks = (L + S - 1) // S
    if chunks > 1:
        lo = (chunks - 1) * S
        work = ring + (b * C + chunks - 1) * 2 * N
        top = work + ((L - 1 - lo) % 2) * N
        for j0 in range(0, N, BLOCK):
            j = j0 + r
            tl.store(top + j, tl.load(end + b * N + j, mask=j < N, other=NEG).to(tl.float64), mask=j < N)
        tl.debug_barrier()
        for s in range(0, L - 1 - lo):
            t = L - 2 - s
            _beta_step(work + ((t + 1 - lo) % 2) * N, transitions_at(trans, b, T, N, t + 1, SHARED),
                       unary + (b * T + t + 1) * N, work + ((t - lo) % 2) * N, N, r, BLOCK)
            tl.debug_barrier()
        for j0 in range(0, N, BLOCK):  # beta_lo: slot 0
            j = j0 + r
            tl.store(bounds + (b * C + chunks - 1) * N + j, tl.load(work + j, mask=j < N), mask=j < N)
        tl.debug_barrier()
        for s in range(0, chunks - 2):
            c = chunks - 2 - s  # chunk c's first beta from chunk c + 1's
            M = prod + ((b * C + c) * 2 + (S - 1) % 2) * N * N
            src = bounds + (b * C + c + 1) * N
            dst = bounds + (b * C + c) * N
            for i0 in range(0, N, BLOCK):
                i = i0 + r
                mi = i < N
                m = tl.full([BLOCK], NEG, tl.float64)
                acc = tl.zeros([BLOCK], tl.float64)
                for j0 in range(0, N, BLOCK):
                    j = j0 + r
                    mj = j < N
                    v = _tile(M, i, mi, j, mj, N) + tl.load(src + j, mask=mj, other=NEG)[None, :]
                    m, acc = lse_update(m, acc, v, 1)
                tl.store(dst + i, lse_finish(m, acc), mask=mi)
            tl.debug_barrier()


@triton.jit
def _backward_chunk_kernel(unary, trans, end, lengths, alpha, logz, bounds, ring, g_unary, g_trans, g_start,
                           g_end, grad, grad_stride, labels, T, N, C, S, SHARED: tl.constexpr,
                           EDGES: tl.constexpr, GOLD: tl.constexpr, BLOCK: tl.constexpr):
    """Program (b, c): the serial backward's work over chunk c's positions [cS, cS + S): beta from
    the next chunk's first beta (``bounds`` (B, C, N), or the end scores in the last chunk), in
    the chunk's ring (B, C, 2, N); node marginals into g_unary (B, T, N) renormalized per position,
    the first and last into g_start / g_end (B, N), edge marginals (with EDGES) into g_trans
    ((B, C, N, N) per chunk when SHARED, summed on the host; else (B, T-1, N, N)), all scaled by
    grad[b]; with GOLD, minus the indicators of ``labels[b]``. Zeros beyond the length and on rows
    without mass."""
    b = tl.program_id(0).to(tl.int64)  # 64-bit offsets: B T N may pass 2^31
    c = tl.program_id(1).to(tl.int64)
    L = tl.minimum(tl.load(lengths + b), T)
    lz = tl.load(logz + b)
    g = tl.load(grad + b * grad_stride)  # the upstream gradient may be expanded (stride 0)
    r = tl.arange(0, BLOCK)
    al = alpha + b * T * N
    lo = c * S
    hi = tl.minimum(lo + S, T)
    live = (L > 0) & (lz > NEG) & (g != 0.0)
    used = tl.where(live, L, 0)  # positions from here on get zeros
    _fill_zero(g_unary + b * T * N, tl.maximum(tl.minimum(used, hi), lo) * N, hi * N, r, BLOCK)
    steps = tl.maximum(T - 1, 0)
    G = g_trans  # where the edge marginals go (unused without EDGES)
    if EDGES:
        if SHARED:
            G = g_trans + (b * C + c) * N * N  # this chunk's edge marginals, summed over its positions
            _fill_zero(G, 0, N * N, r, BLOCK)
        else:  # the chunk's edges (t, t + 1), t in [lo, min(lo + S, T - 1)); live ones t < L - 1
            top_edge = tl.minimum(lo + S, steps)
            first_edge = tl.maximum(tl.minimum(tl.maximum(used - 1, 0), top_edge), lo)
            _fill_zero(g_trans + b * steps * N * N, first_edge * N * N, top_edge * N * N, r, BLOCK)
    gs, ge = g_start + b * N, g_end + b * N
    if c == 0:
        if not live:
            _fill_zero(gs, 0, N, r, BLOCK)
            _fill_zero(ge, 0, N, r, BLOCK)
    tl.debug_barrier()
    if live & (lo < L):
        work = ring + (b * C + c) * 2 * N
        last = tl.minimum(lo + S, L) - 1  # the chunk's last position in the sequence
        top = work + ((last - lo) % 2) * N  # beta_last
        y_next = _label(labels, b, T, N, tl.minimum(last + 1, L - 1)) if GOLD else 0
        if last == L - 1:
            for j0 in range(0, N, BLOCK):
                j = j0 + r
                tl.store(top + j, tl.load(end + b * N + j, mask=j < N, other=NEG).to(tl.float64), mask=j < N)
            tl.debug_barrier()
            total = tl.zeros([BLOCK], tl.float64)
            for j0 in range(0, N, BLOCK):
                j = j0 + r
                mj = j < N
                node = tl.where(mj, g * tl.exp(tl.load(al + (L - 1) * N + j, mask=mj, other=NEG) +
                                               tl.load(top + j, mask=mj, other=NEG) - lz), 0.0)
                total += node
                tl.store(g_unary + (b * T + L - 1) * N + j, node, mask=mj)
            tl.debug_barrier()
            row = g_unary + (b * T + L - 1) * N
            _normalize_node(row, tl.sum(total, axis=0), g, gs, ge, L == 1, True, y_next, N, r, BLOCK, GOLD)
            tl.debug_barrier()
            stop = last  # positions last - 1 down to lo, each from the one after it
        else:
            stop = last + 1  # positions last down to lo; beta_{last + 1}: the next chunk's first
        for s in range(0, stop - lo):
            t = stop - 1 - s
            if t == lo + S - 1:
                nxt = bounds + (b * C + c + 1) * N
            else:
                nxt = work + ((t + 1 - lo) % 2) * N
            dst = work + ((t - lo) % 2) * N
            A = transitions_at(trans, b, T, N, t + 1, SHARED)
            if EDGES:
                if not SHARED:
                    G = transitions_at(g_trans, b, T, N, t + 1, SHARED)
            y_next = _backward_step(unary, A, G, nxt, dst, al, g_unary, labels, y_next, b, t, T, N, g, lz, gs,
                                    ge, r, BLOCK, SHARED, EDGES, GOLD)


# ---- host ---------------------------------------------------------------------------------------


def chunk_length(T: int, N: int) -> int:
    """The chunk length S for sequences of T positions: about sqrt(T) (depth S for phases 1 and 3,
    C = T / S for phase 2, balanced at S = sqrt(T)), at least :data:`MIN_CHUNK` so that a chunk's
    work amortizes its program. ``N`` is unused for now (a tuning knob: phase 1's steps cost about N
    times those of phases 2 and 3, which would favour S ~ sqrt(T / N); not measured)."""
    return max(MIN_CHUNK, math.isqrt(max(T - 1, 0)) + 1)


def use_scan(B: int, T: int, N: int) -> bool:
    """Whether to prefer the chunked kernels over the serial ones for chains of shape (B, T, N).

    The serial kernels run B programs of T dependent steps; a GPU holds a few hundred programs at
    once (an H100/H200 has 132 SMs), so with B < 64 most of it idles and the time is T step
    latencies. The chunked kernels run B * C programs of depth about 2 sqrt(T) + C, at N times the
    arithmetic (the products are O(N^3) per position): worth it when T is long (T >= 1024: depth
    ~100 instead of >= 1024) and N moderate (N <= 64; at N = 1024 a product step is 10^9 operations).
    These thresholds are reasoned, not measured: no GPU has run these kernels yet."""
    return B < 64 and T >= 1024 and N <= 64


def _plan(chain: Chain, chunk: int | None) -> tuple[int, int]:
    """(S, C): the chunk length (``chunk`` or :func:`chunk_length`) and the number of chunks."""
    _, T, N = chain.shape
    S = chunk if chunk is not None else chunk_length(T, N)
    return S, max(1, triton.cdiv(T, S))


def _products(chain: Chain, S: int, C: int, viterbi: bool, labels: Tensor | None = None
              ) -> tuple[Tensor, Tensor]:
    """Phase 1: the chunks' products (B, C, 2, N, N) float64 and, given ``labels`` (B, T), the
    chunks' partial scores of the labeling (B, C) float64 (see :func:`_product_kernel`)."""
    B, T, N = chain.shape
    dev = chain.unary.device
    prod = torch.empty(B, C, 2, N, N, dtype=torch.float64, device=dev)
    gold = labels is not None
    partial = torch.empty(B, C, dtype=torch.float64, device=dev) if gold else prod
    launch("chain_scan_products", _product_kernel, (B, C), chain.unary, chain.transitions, chain.start,
           chain.lengths, labels if gold else chain.lengths, prod, partial, T, N, C, S, SHARED=chain.shared,
           VITERBI=viterbi, GOLD=gold, BLOCK=block(N, PRODUCT_TILE))
    return prod, partial


def _forward(chain: Chain, vec: Tensor, bp: Tensor, maps: Tensor, last: Tensor, S: int, C: int,
             viterbi: bool, labels: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
    """Phases 1-3 into ``vec`` (alpha or the Viterbi ring), ``bp``, ``maps``, ``last``: logZ or the
    best score (B,) float64 and, given ``labels``, logZ - score(labels) (B,) float64."""
    B, T, N = chain.shape
    prod, partial = _products(chain, S, C, viterbi, labels)
    tile = block(N)
    launch("chain_scan_boundaries", _boundary_kernel, (B,), chain.unary, chain.start, chain.lengths, prod,
           vec, T, N, C, S, VITERBI=viterbi, BLOCK=tile)
    out, nll = (torch.empty(B, dtype=torch.float64, device=chain.unary.device) for _ in range(2))
    gold = labels is not None
    launch("chain_scan_inside", _inside_kernel, (B, C), chain.unary, chain.transitions, chain.end,
           chain.lengths, vec, bp, maps, last, out, labels if gold else chain.lengths, partial, nll, T, N, C,
           S, SHARED=chain.shared, VITERBI=viterbi, GOLD=gold, BLOCK=tile)
    return out, nll if gold else None


def _log_partition(chain: Chain, chunk: int | None, labels: Tensor | None = None
                   ) -> tuple[Tensor, Tensor, Tensor | None]:
    """logZ (B,), alpha (B, T, N) and, given ``labels``, logZ - score(labels) (B,), float64, in
    three launches (the contract of the serial ``_triton._forward``)."""
    B, T, N = chain.shape
    S, C = _plan(chain, chunk)
    alpha = torch.empty(B, T, N, dtype=torch.float64, device=chain.unary.device)  # rows past L unused
    unused = torch.empty(1, dtype=torch.int32, device=chain.unary.device)  # no backpointers nor maps
    logz, nll = _forward(chain, alpha, unused, unused, unused, S, C, False, labels)
    return logz, alpha, nll


def log_partition_state(B: int, T: int, N: int) -> list[tuple[int, ...]]:
    """Shapes of the float64 factors :func:`log_partition_forward` saves: alpha (B, T, N), as the
    serial kernels."""
    return [(B, T, N)]


def log_partition_forward(chain: Chain, chunk: int | None = None) -> tuple[Tensor, tuple[Tensor]]:
    """logZ (B,) float64 (0 on empty rows) and alpha (B, T, N) float64 as the serial forward saves
    it (rows past each length unused), in three launches; ``chunk`` forces the chunk length."""
    logz, alpha, _ = _log_partition(chain, chunk)
    return logz, (alpha,)


def nll_forward(chain: Chain, labels: Tensor, chunk: int | None = None
                ) -> tuple[Tensor, Tensor, tuple[Tensor]]:
    """logZ - score(labels) (B,) float64 (+inf on infeasible rows), logZ and alpha (the CRF loss),
    in three launches."""
    logz, alpha, nll = _log_partition(chain, chunk, labels)
    return nll, logz, (alpha,)


@torch.no_grad()
def viterbi(chain: Chain, chunk: int | None = None) -> tuple[Tensor, Tensor]:
    """The best score (B,) float64 (0 on empty rows, -inf on infeasible ones) and labeling (B, T)
    int64 (-1 beyond each length and on infeasible rows), in five launches; ``chunk`` forces the
    chunk length."""
    B, T, N = chain.shape
    S, C = _plan(chain, chunk)
    dev = chain.unary.device
    ring = torch.empty(B, C, 2, N, dtype=torch.float64, device=dev)
    bp = torch.empty(B, T, N, dtype=torch.int16 if N <= 32767 else torch.int32, device=dev)
    maps = torch.empty(B, C, N, dtype=torch.int32, device=dev)
    ends = torch.empty(B, C, dtype=torch.int32, device=dev)
    last = torch.empty(B, dtype=torch.int32, device=dev)
    best, _ = _forward(chain, ring, bp, maps, last, S, C, True)
    launch("chain_scan_ends", _ends_kernel, (B,), chain.lengths, bp, maps, last, best, ends, T, N, C, S)
    path = torch.empty(B, T, dtype=torch.long, device=dev)
    launch("chain_scan_walk", _walk_kernel, (B, C), chain.lengths, bp, ends, best, path, T, N, C, S,
           BLOCK=block(S, 64))
    return best, path


def _backward(chain: Chain, logz: Tensor, alpha: Tensor, g: Tensor, edges: bool = True,
              labels: Tensor | None = None, chunk: int | None = None):
    """(grad unary, grad transitions or None, grad start, grad end), float64, for upstream g (B,)
    float64, from alpha of either forward (the contract of the serial ``_triton._backward``): the
    products again, the boundary betas, then one program per chunk (three launches, and a sum over
    the batch and chunks for shared transitions)."""
    B, T, N = chain.shape
    S, C = _plan(chain, chunk)
    dev = chain.unary.device
    prod, _ = _products(chain, S, C, False)
    bounds = torch.empty(B, C, N, dtype=torch.float64, device=dev)
    ring = torch.empty(B, C, 2, N, dtype=torch.float64, device=dev)
    launch("chain_scan_beta_boundaries", _beta_boundary_kernel, (B,), chain.unary, chain.transitions,
           chain.end, chain.lengths, prod, bounds, ring, T, N, C, S, SHARED=chain.shared,
           BLOCK=block(N, BETA_TILE))
    g_unary = torch.empty(B, T, N, dtype=torch.float64, device=dev)
    shape = (B, C, N, N) if chain.shared else (B, max(T - 1, 0), N, N)  # shared: per chunk, summed below
    g_trans = torch.empty(shape if edges else (1,), dtype=torch.float64, device=dev)
    g_start, g_end = (torch.empty(B, N, dtype=torch.float64, device=dev) for _ in range(2))
    gold = labels is not None
    launch("chain_scan_backward", _backward_chunk_kernel, (B, C), chain.unary, chain.transitions, chain.end,
           chain.lengths, alpha, logz, bounds, ring, g_unary, g_trans, g_start, g_end, g, g.stride(0),
           labels if gold else chain.lengths, T, N, C, S, SHARED=chain.shared, EDGES=edges, GOLD=gold,
           BLOCK=block(N, BACKWARD_TILE),
           num_warps=BACKWARD_WARPS_FLOAT64 if chain.unary.dtype == torch.float64 else BACKWARD_WARPS)
    if not edges:
        return g_unary, None, g_start, g_end
    return g_unary, g_trans.sum((0, 1)) if chain.shared else g_trans, g_start, g_end


def log_partition_backward(chain: Chain, logz: Tensor, state, g: Tensor, chunk: int | None = None
                           ) -> tuple[Tensor, ...]:
    """Gradients w.r.t. unary, transitions, start and end (input dtype) for upstream g (B,) float64,
    from ``state`` = (alpha,) of either forward."""
    dtype = chain.unary.dtype
    return tuple(x.to(dtype) for x in _backward(chain, logz, state[0], g, chunk=chunk))


def nll_backward(chain: Chain, labels: Tensor, logz: Tensor, state, g: Tensor, chunk: int | None = None
                 ) -> tuple[Tensor, ...]:
    """Gradients of logZ - score(labels) w.r.t. unary, transitions, start and end (input dtype) for
    upstream g (B,) float64: the marginals minus the labeling's indicators."""
    dtype = chain.unary.dtype
    return tuple(x.to(dtype) for x in _backward(chain, logz, state[0], g, labels=labels, chunk=chunk))


@torch.no_grad()
def node_marginals(chain: Chain, chunk: int | None = None) -> Tensor:
    """(B, T, N) node marginals in the input dtype, outside autograd (six launches)."""
    logz, alpha, _ = _log_partition(chain, chunk)
    _torch.guard(chain, logz, "the log-partition")  # float64: the marginals may be representable
    node = _backward(chain, logz, alpha, torch.ones_like(logz), edges=False, chunk=chunk)[0]
    return node.to(chain.unary.dtype)
