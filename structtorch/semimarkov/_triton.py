"""Semi-Markov dynamic programs as fused Triton kernels ("triton" backend).

One launch per call, one program per sequence, running over segment ends e in order. At each end
the candidate segments [e - d, e) are scored in (BLOCK_D x BLOCK_N) tiles of (length, label): their
content sums (and the track sums of segment-mean PLiFs) accumulate backwards from e by a cumulative
sum inside each tile plus a carry between tiles, never as differences of prefix sums. Forbidden
(-inf) content makes every segment over it -inf through that sum (the compiled CPU kernels cap the
lengths instead); everything accumulates in float64.

- one forward kernel for both semirings (``VITERBI``): alpha/inc by max-plus with int32 argmax
  tables (first maximal length, then label) and the backtrace into labels and segment starts, or
  by online log-sum-exp for the log-partition;
- the backward: delta/gamma by the reverse recursion; every segment's marginal
  exp(inc[s] + score + gamma[e] - logZ) spread onto content (a difference array, summed in the
  kernel's last pass), lengths, boundaries, segment scores, transitions, start and end.

Every output is written by the kernels (labels -1 and starts False beyond each length; a first
launch of the backward zeroes the gradients it accumulates into), so the host allocates without
filling: a call is one or two launches and at most two other device ops, whatever T.

The label-to-label step, the reductions and the tile helpers come from
:mod:`structtorch._triton_common`.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from .._triton_common import (
    NEG,
    close,
    finish,
    fold,
    launch,
    lse_finish,
    lse_total,
    lse_update,
    per_triton,
    reciprocal,
    transition_step,
)
from .._triton_common import load_tile as _tile
from .layout import SemiMarkov


@triton.jit
def _plif_value(x, n, mask, plif, P, low, high, scale):
    """PLiF_n(x) for a tile x (BLOCK_D, BLOCK_N): linear interpolation on P points in [low, high]."""
    pos = (tl.minimum(tl.maximum(x, low), high) - low) * scale
    left = tl.minimum(pos.to(tl.int32), P - 2)
    y0 = tl.load(plif + n[None, :] * P + left, mask=mask, other=0.0).to(tl.float64)
    y1 = tl.load(plif + n[None, :] * P + left + 1, mask=mask, other=0.0).to(tl.float64)
    return y0 + (pos - left) * (y1 - y0)


@triton.jit
def _segment_tile(b, e, d0, n, mn, dmax, carry, tcarry, content, length, boundary, segment, tracks, plif,
                  T, S, N, P, low, high, scale, rd,
                  HAS_SEGMENT: tl.constexpr, HAS_PLIF: tl.constexpr, target=None, LOSS: tl.constexpr = False,
                  weights=None, WEIGHTED: tl.constexpr = False, ROWS: tl.constexpr = False):
    """Scores (without the incoming term) of segments [e - d, e) for d = d0 + 1 + rd and labels n,
    -inf beyond ``dmax`` (BLOCK_N,); returns (scores, valid, new carry, new track carry). With
    LOSS, each position whose label differs from ``target`` (B, T) adds 1 (the Hamming loss), or
    its weight in ``weights`` (B, T) with WEIGHTED. ROWS addresses the segment scores from the row
    of segments ending at e (see :data:`SEGMENT_ROWS`)."""
    d = d0 + 1 + rd
    valid = (d[:, None] <= dmax[None, :]) & mn[None, :]
    pos = e - d
    c = tl.load(content + (b * T + pos[:, None]) * N + n[None, :], mask=valid, other=0.0).to(tl.float64)
    if LOSS:
        inside = d <= tl.max(dmax, axis=0)
        at = b * T + pos
        y = tl.load(target + at, mask=inside, other=0)
        unit = _weight(weights, at, inside, WEIGHTED)
        c += tl.where(valid & (n[None, :] != y[:, None]), unit[:, None], 0.0)
    v = tl.cumsum(c, axis=0) + carry[None, :]
    carry += tl.sum(c, axis=0)
    v += tl.load(length + (b * S + d[:, None] - 1) * N + n[None, :], mask=valid, other=0.0).to(tl.float64)
    v += tl.load(boundary + (b * T + e - 1) * N + n, mask=mn, other=0.0).to(tl.float64)[None, :]
    if HAS_SEGMENT:
        if ROWS:
            row = segment + (b * T + e - 1) * S * N  # the segments ending at e
            at = (d[:, None] - 1).to(tl.int32) * N + n[None, :]
        else:
            row = segment
            at = ((b * T + e - 1) * S + d[:, None] - 1) * N + n[None, :]
        v += tl.load(row + at, mask=valid, other=0.0).to(tl.float64)
    if HAS_PLIF:
        x = tl.load(tracks + (b * T + pos[:, None]) * N + n[None, :], mask=valid, other=0.0).to(tl.float64)
        mean = (tl.cumsum(x, axis=0) + tcarry[None, :]) / d[:, None].to(tl.float64)
        tcarry += tl.sum(x, axis=0)
        v += _plif_value(mean, n, valid, plif, P, low, high, scale)
    return tl.where(valid, v, NEG), valid, carry, tcarry


@triton.jit
def _weight(weights, at, mask, WEIGHTED: tl.constexpr):
    """The Hamming loss's unit at offsets ``at`` of ``weights`` (float64): the weight with
    WEIGHTED, else 1."""
    unit = tl.full(at.shape, 1.0, tl.float64)
    if WEIGHTED:
        unit = tl.load(weights + at, mask=mask, other=0).to(tl.float64)
    return unit


@triton.jit
def _max_length(b, e, n, mn, boundary, T, S, N):
    """The longest segment ending at e per label: 0 where the boundary score is -inf."""
    bnd = tl.load(boundary + (b * T + e - 1) * N + n, mask=mn, other=NEG)
    return tl.where(bnd == NEG, 0, tl.minimum(S, e))


@triton.jit
def _clear_segmentation(labels, starts, T, BLOCK: tl.constexpr):
    """labels[t] = -1 and starts[t] = False for every position t of one sequence."""
    r = tl.arange(0, BLOCK)
    for t0 in range(0, T, BLOCK):
        t = t0 + r
        tl.store(labels + t, tl.full([BLOCK], -1, tl.int64), mask=t < T)
        tl.store(starts + t, tl.zeros([BLOCK], tl.int1), mask=t < T)
    tl.debug_barrier()


@triton.jit
def _forward_kernel(content, length, boundary, segment, trans, start, end, lengths, tracks, plif,
                    alpha, inc, arg_d, arg_m, out, labels, starts, target, target_starts, gold, count,
                    weights, T, S, N, P, low: tl.float64, high: tl.float64, scale: tl.float64,
                    VITERBI: tl.constexpr, HAS_SEGMENT: tl.constexpr, HAS_PLIF: tl.constexpr,
                    LOSS: tl.constexpr, WEIGHTED: tl.constexpr, ROWS: tl.constexpr, BLOCK_D: tl.constexpr,
                    BLOCK_N: tl.constexpr):
    """Viterbi (with LOSS: loss-augmented by the Hamming distance to ``target``, weighted by
    ``weights`` with WEIGHTED, see :func:`_loss_augmented_close`) or the log-partition of one
    sequence per program."""
    b = tl.program_id(0).to(tl.int64)  # 64-bit offsets: B T N may pass 2^31
    L = tl.minimum(tl.load(lengths + b), T)  # never past the buffers, even unvalidated
    rn = tl.arange(0, BLOCK_N)
    rd = tl.arange(0, BLOCK_D)
    al = alpha + b * (T + 1) * N
    ic = inc + b * (T + 1) * N
    result = tl.full([], 0.0, tl.float64)
    if VITERBI:  # no segmentation until the backtrace writes one
        _clear_segmentation(labels + b * T, starts + b * T, T, BLOCK_N)
    if LOSS:
        tl.store(count + b, tl.zeros([], count.dtype.element_ty))
    if L > 0:
        for n0 in range(0, N, BLOCK_N):
            n = n0 + rn
            tl.store(ic + n, tl.load(start + b * N + n, mask=n < N, other=NEG).to(tl.float64), mask=n < N)
        tl.debug_barrier()
        for e in range(1, L + 1):
            for n0 in range(0, N, BLOCK_N):
                n = n0 + rn
                mn = n < N
                dmax = _max_length(b, e, n, mn, boundary, T, S, N)
                carry = tl.zeros([BLOCK_N], tl.float64)
                tcarry = tl.zeros([BLOCK_N], tl.float64)
                best = tl.full([BLOCK_N], NEG, tl.float64)
                acc = tl.zeros([BLOCK_N], tl.float64)
                arg = tl.zeros([BLOCK_N], tl.int32)
                for d0 in range(0, tl.max(dmax, axis=0), BLOCK_D):
                    v, valid, carry, tcarry = _segment_tile(
                        b, e, d0, n, mn, dmax, carry, tcarry, content, length, boundary, segment, tracks,
                        plif, T, S, N, P, low, high, scale, rd, HAS_SEGMENT, HAS_PLIF, target, LOSS, weights,
                        WEIGHTED, ROWS)
                    d = d0 + 1 + rd
                    v += tl.load(ic + (e - d[:, None]) * N + n[None, :], mask=valid, other=NEG)
                    best, acc, arg = fold(best, acc, arg, v, d0 + 1, VITERBI)  # ties: the shortest
                tl.store(al + e * N + n, finish(best, acc, VITERBI), mask=mn)
                if VITERBI:
                    tl.store(arg_d + (b * (T + 1) + e) * N + n, arg, mask=mn)
            tl.debug_barrier()
            if e < L:  # inc[e][n] = max or lse_m alpha[e][m] + trans[m, n]
                at = (b * (T + 1) + e) * N
                transition_step(al + e * N, trans, ic + e * N, arg_m + at, ic, N, rn, BLOCK_N, VITERBI, False)
                tl.debug_barrier()
        result, label = close(al + L * N, end + b * N, N, rn, BLOCK_N, VITERBI)
        if LOSS:
            result = _loss_augmented_close(b, L, T, N, result, label, arg_d, arg_m, labels, starts, target,
                                           target_starts, gold, count, weights, WEIGHTED, BLOCK_N)
        elif VITERBI:
            if result > NEG:
                _backtrace(b, L, T, N, label, arg_d, arg_m, labels, starts, target, weights, False, WEIGHTED)
    tl.store(out + b, result)


@triton.jit
def _backtrace(b, L, T, N, label, arg_d, arg_m, labels, starts, target, weights, COUNT: tl.constexpr,
               WEIGHTED: tl.constexpr):
    """Write the best segmentation of [0, L) ending in ``label`` from the argmax tables; with
    COUNT, return the number of its positions whose label differs from ``target`` (float64; their
    weights' sum with WEIGHTED)."""
    mismatches = tl.zeros([], tl.float64)
    stop = L.to(tl.int32)  # 32-bit positions (64-bit ones spill on sm_90 with WEIGHTED)
    while stop > 0:
        d = tl.load(arg_d + (b * (T + 1) + stop) * N + label)
        first = stop - d
        for k in range(first, stop):
            tl.store(labels + b * T + k, label.to(tl.int64))
            if COUNT:
                unit = tl.full([], 1.0, tl.float64)
                if WEIGHTED:
                    unit = tl.load(weights + b * T + k).to(tl.float64)
                mismatches += tl.where(tl.load(target + b * T + k) != label, unit, 0.0)
        tl.store(starts + b * T + first, 1)
        label = tl.load(arg_m + (b * (T + 1) + first) * N + label)
        stop = first
    return mismatches


@triton.jit
def _loss_augmented_close(b, L, T, N, best, label, arg_d, arg_m, labels, starts, target, target_starts, gold,
                          count, weights, WEIGHTED: tl.constexpr, BLOCK: tl.constexpr):
    """The loss-augmented value best - gold (best: max of score + Hamming distance; gold: the
    target's score) and its segmentation, written with its (weighted) Hamming count in ``count``'s
    dtype; the target itself where it attains the maximum (value <= 0: value 0, count 0, a zero
    subgradient)."""
    value = best - tl.load(gold + b)
    if value > 0:
        tl.store(count + b, _backtrace(b, L, T, N, label, arg_d, arg_m, labels, starts, target, weights, True,
                                       WEIGHTED).to(count.dtype.element_ty))
    else:
        r = tl.arange(0, BLOCK)
        for t0 in range(0, L, BLOCK):
            t = t0 + r
            tl.store(labels + b * T + t, tl.load(target + b * T + t, mask=t < L, other=0), mask=t < L)
            tl.store(starts + b * T + t, tl.load(target_starts + b * T + t, mask=t < L, other=0), mask=t < L)
        tl.store(count + b, tl.zeros([], count.dtype.element_ty))
        value = tl.zeros([], tl.float64)
    return value


@triton.jit
def _zero(ptr, count, BLOCK: tl.constexpr):
    """ptr[0:count] = 0 (float64), in tiles of BLOCK."""
    r = tl.arange(0, BLOCK)
    for i in range(0, count, BLOCK):
        tl.store(ptr + i + r, tl.zeros([BLOCK], tl.float64), mask=i + r < count)


@triton.jit
def _zero_gradients_kernel(g_content, g_length, g_boundary, g_segment, g_trans, g_start, g_end, g_tracks,
                           g_plif, T, S, N, P, HAS_SEGMENT: tl.constexpr, HAS_PLIF: tl.constexpr,
                           BLOCK: tl.constexpr):
    """Row b of every gradient the backward accumulates into, zeroed: one launch for buffers
    allocated apart (an operator's outputs may not be views of one zeroed buffer). In the backward
    kernel itself these loops made the plain variant spill on sm_90."""
    b = tl.program_id(0).to(tl.int64)
    _zero(g_content + b * T * N, T * N, BLOCK)
    _zero(g_length + b * S * N, S * N, BLOCK)
    _zero(g_boundary + b * T * N, T * N, BLOCK)
    _zero(g_trans + b * N * N, N * N, BLOCK)
    _zero(g_start + b * N, N, BLOCK)
    _zero(g_end + b * N, N, BLOCK)
    if HAS_SEGMENT:
        _zero(g_segment + b * T * S * N, T * S * N, BLOCK)
    if HAS_PLIF:
        _zero(g_tracks + b * T * N, T * N, BLOCK)
        _zero(g_plif + b * N * P, N * P, BLOCK)


@triton.jit
def _add(ptr, value, mask):
    """*ptr += value where mask (one program: no two lanes share an address)."""
    tl.store(ptr, tl.load(ptr, mask=mask, other=0.0) + value, mask=mask)


@triton.jit
def _backward_kernel(grad, logz, alpha, inc, content, length, boundary, segment, trans, start, end,
                     lengths, tracks, plif, gamma, delta, g_content, g_length, g_boundary, g_segment, g_trans,
                     g_start, g_end, g_tracks, g_plif, T, S, N, P, low: tl.float64, high: tl.float64,
                     scale: tl.float64, HAS_SEGMENT: tl.constexpr,
                     HAS_PLIF: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)  # 64-bit offsets: B T N may pass 2^31
    L = tl.minimum(tl.load(lengths + b), T)  # never past the buffers, even unvalidated
    lz = tl.load(logz + b)
    g = tl.load(grad + b)
    rn = tl.arange(0, BLOCK_N)
    rd = tl.arange(0, BLOCK_D)
    row = b * (T + 1) * N
    crow = b * T * N
    if (L > 0) & (lz > NEG) & (g != 0.0):
        for n0 in range(0, N, BLOCK_N):
            n = n0 + rn
            mn = n < N
            en = tl.load(end + b * N + n, mask=mn, other=NEG).to(tl.float64)
            tl.store(gamma + row + L * N + n, en, mask=mn)
            last = tl.load(alpha + row + L * N + n, mask=mn, other=NEG)
            tl.store(g_end + b * N + n, g * tl.exp(last + en - lz), mask=mn)
        tl.debug_barrier()
        for k in range(0, L):
            s = L - 1 - k
            for n0 in range(0, N, BLOCK_N):
                n = n0 + rn
                mn = n < N
                into = tl.load(inc + row + s * N + n, mask=mn, other=NEG)
                carry = tl.zeros([BLOCK_N], tl.float64)
                tcarry = tl.zeros([BLOCK_N], tl.float64)
                top = tl.full([BLOCK_N], NEG, tl.float64)
                acc = tl.zeros([BLOCK_N], tl.float64)
                leaving = tl.zeros([BLOCK_N], tl.float64)
                t_leaving = tl.zeros([BLOCK_N], tl.float64)
                for d0 in range(0, tl.minimum(S, L - s), BLOCK_D):
                    d = d0 + 1 + rd
                    e = s + d
                    valid = (d[:, None] <= S) & (e[:, None] <= L) & mn[None, :]
                    within = valid & (e[:, None] < L)  # the difference array's -mu at e, inside
                    at_end = (b * T + e[:, None] - 1) * N + n[None, :]  # (e - 1, n)
                    at_len = (b * S + d[:, None] - 1) * N + n[None, :]  # (d - 1, n)
                    at_seg = ((b * T + e[:, None] - 1) * S + d[:, None] - 1) * N + n[None, :]
                    c = tl.load(content + at_end, mask=valid, other=0.0).to(tl.float64)
                    term = tl.cumsum(c, axis=0) + carry[None, :]
                    carry += tl.sum(c, axis=0)
                    term += tl.load(length + at_len, mask=valid, other=0.0).to(tl.float64)
                    term += tl.load(boundary + at_end, mask=valid, other=0.0).to(tl.float64)
                    if HAS_SEGMENT:
                        term += tl.load(segment + at_seg, mask=valid, other=0.0).to(tl.float64)
                    if HAS_PLIF:  # PLiF_n of the track mean, its slope and its interpolation weights
                        x = tl.load(tracks + at_end, mask=valid, other=0.0).to(tl.float64)
                        mean = (tl.cumsum(x, axis=0) + tcarry[None, :]) / d[:, None].to(tl.float64)
                        tcarry += tl.sum(x, axis=0)
                        pos = (tl.minimum(tl.maximum(mean, low), high) - low) * scale
                        left = tl.minimum(pos.to(tl.int32), P - 2)
                        frac = pos - left
                        y0 = tl.load(plif + n[None, :] * P + left, mask=valid, other=0.0).to(tl.float64)
                        y1 = tl.load(plif + n[None, :] * P + left + 1, mask=valid, other=0.0).to(tl.float64)
                        term += y0 + frac * (y1 - y0)
                    term += tl.load(gamma + row + e[:, None] * N + n[None, :], mask=valid, other=NEG)
                    term = tl.where(valid, term, NEG)
                    top, acc = lse_update(top, acc, term, 0)
                    mu = tl.where(valid, g * tl.exp(into[None, :] + term - lz), 0.0)
                    leaving += tl.sum(mu, axis=0)
                    _add(g_content + crow + e[:, None] * N + n[None, :], -mu, within)
                    _add(g_length + at_len, mu, valid)
                    _add(g_boundary + at_end, mu, valid)
                    if HAS_SEGMENT:
                        tl.store(g_segment + at_seg, mu, mask=valid)
                    if HAS_PLIF:  # lanes may share an ordinate: atomics
                        at_plif = g_plif + (b * N + n[None, :]) * P + left
                        tl.atomic_add(at_plif, mu * (1.0 - frac), mask=valid)
                        tl.atomic_add(at_plif + 1, mu * frac, mask=valid)
                        inside = (mean >= low) & (mean <= high)  # the slope of the clamp, as autograd's
                        c = tl.where(valid & inside, mu * (y1 - y0) * scale / d[:, None].to(tl.float64), 0.0)
                        t_leaving += tl.sum(c, axis=0)
                        _add(g_tracks + crow + e[:, None] * N + n[None, :], -c, within)
                tl.store(delta + row + s * N + n, lse_finish(top, acc), mask=mn)
                _add(g_content + crow + s * N + n, leaving, mn)
                if HAS_PLIF:
                    _add(g_tracks + crow + s * N + n, t_leaving, mn)
            tl.debug_barrier()
            if s > 0:  # gamma[s][m] = lse_n trans[m, n] + delta[s][n]
                for m0 in range(0, N, BLOCK_N):
                    m = m0 + rn
                    mm = m < N
                    top = tl.full([BLOCK_N], NEG, tl.float64)
                    acc = tl.zeros([BLOCK_N], tl.float64)
                    for n0 in range(0, N, BLOCK_N):
                        n = n0 + rn
                        mn = n < N
                        dl = tl.load(delta + row + s * N + n, mask=mn, other=NEG)
                        v = _tile(trans, m, mm, n, mn, N) + dl[None, :]
                        top, acc = lse_update(top, acc, v, 1)
                    tl.store(gamma + row + s * N + m, lse_finish(top, acc), mask=mm)
                tl.debug_barrier()
        for m0 in range(0, N, BLOCK_N):
            m = m0 + rn
            mm = m < N
            for n0 in range(0, N, BLOCK_N):
                n = n0 + rn
                mn = n < N
                w = _tile(trans, m, mm, n, mn, N)
                total = tl.zeros([BLOCK_N, BLOCK_N], tl.float64)
                for s in range(1, L):
                    a = tl.load(alpha + row + s * N + m, mask=mm, other=NEG)
                    dl = tl.load(delta + row + s * N + n, mask=mn, other=NEG)
                    total += g * tl.exp(a[:, None] + w + dl[None, :] - lz)
                tile = mm[:, None] & mn[None, :]
                tl.store(g_trans + (b * N + m[:, None]) * N + n[None, :], total, mask=tile)
        for n0 in range(0, N, BLOCK_N):
            n = n0 + rn
            mn = n < N
            st = tl.load(start + b * N + n, mask=mn, other=NEG).to(tl.float64)
            first = tl.load(delta + row + n, mask=mn, other=NEG)
            tl.store(g_start + b * N + n, g * tl.exp(st + first - lz), mask=mn)
        tl.debug_barrier()
        _prefix_sum(g_content + crow, L, N, rn, BLOCK_N)
        if HAS_PLIF:
            _prefix_sum(g_tracks + crow, L, N, rn, BLOCK_N)


@triton.jit
def _prefix_sum(x, L, N, r, BLOCK: tl.constexpr):
    """x[t] = x[0] + ... + x[t] for t < L over a (L, N) difference array (in place), label tiles
    of BLOCK; positions from L on stay as they are (zero)."""
    for n0 in range(0, N, BLOCK):
        n = n0 + r
        mn = n < N
        run = tl.zeros([BLOCK], tl.float64)
        for t in range(0, L):
            run += tl.load(x + t * N + n, mask=mn, other=0.0)
            tl.store(x + t * N + n, run, mask=mn)


TILE = 16
"""The (length x label) tile of every semi-Markov kernel, whatever S and N: compiled for sm_90,
larger tiles (32 x 16 and up, float64 candidates plus the content and track carries) put
registers on the stack in the forward, backward and k-best kernels (``tests/compile_kernels.py``
reads the cubins)."""

BACKWARD_WARPS = {
    "plain": per_triton(8, {(3, 6): 2, (3, 9): 2}),
    "segment": per_triton(2, {(3, 6): 16, (3, 9): 8}),
    "plif": per_triton(2, {(3, 6): 8, (3, 9): 8}),
}
"""Warps of the backward kernel by variant (:func:`backward_warps`), per Triton release, each
keeping it off the stack on sm_90 (4 is Triton's default). Plain potentials: with 3.8 at 2 the
float64 variant puts 16 B on the stack, at 4 the float32 one 8 B, at 8 none; 3.6 and 3.9 are clean
at 2. Segment scores: with 3.8 at 4 48 B, at 2 none (a 16 x 16 tile is 4 entries per thread); with
3.9 16-24 B at 2, none at 8; with 3.6 8-40 B at 2, 4 and 8, none at 16. A segment PLiF: with 3.6
64 B at 2 (255 registers), none at 8."""

FORWARD_WARPS = per_triton(4, {(3, 6): 8, (3, 9): 2})
"""Warps of the forward kernel: with Triton 3.9 at 4 (and 8) some variants put 8 B on the stack on
sm_90, at 2 none; with 3.6 at 4 three variants put 8-16 B there, at 8 one (8 B, at any warps);
3.8 is clean at Triton's 4."""

FORWARD_WARPS_LOG_PARTITION = per_triton(FORWARD_WARPS, {(3, 6): 4})
"""Warps of the forward kernel's log-partition: with Triton 3.6 at 8 its float32 variant with
segment scores puts 8 B on the stack on sm_90, at 4 nothing (with :data:`SEGMENT_ROWS`)."""

SEGMENT_ROWS = per_triton(False, {(3, 6): True})
"""Whether the forward kernel addresses the segment scores from the row of segments ending at e
(a 64-bit row pointer and 32-bit offsets in it): with Triton 3.6 the one flat 64-bit offset puts
8 B on the stack on sm_90 in the segment-score variants at every warp count, the row form none
(but 8 B in the weighted ones, which keep the flat form); with 3.8 the row form puts 8-16 B there
in 3-4 variants, the flat one none."""

WEIGHTED_WARPS = 2
"""Warps of the forward kernel with position weights (the weighted Hamming loss folded in): at
Triton's 4 with 3.8, or at 8 with 3.6, its variants put 8 B on the stack on sm_90; at 2 none on
3.6, 3.8 or 3.9."""

SAMPLE_WARPS = per_triton(8, {(3, 9): 4})
"""Warps of the sampling kernel: with Triton 3.8, at 4 or 2 its float64 variant without segment
scores puts 16 B on the stack on sm_90 (at 80 registers), at 8 nothing (94 registers); with 3.9 it
is the other way round (24 B at 8 with segment scores, nothing at 4)."""


def forward_warps(viterbi: bool, weighted: bool) -> int:
    """The forward kernel's warps (:data:`FORWARD_WARPS`, :data:`FORWARD_WARPS_LOG_PARTITION`,
    :data:`WEIGHTED_WARPS`)."""
    return WEIGHTED_WARPS if weighted else FORWARD_WARPS if viterbi else FORWARD_WARPS_LOG_PARTITION


def backward_warps(has_segment: bool, has_plif: bool) -> int:
    """The backward kernel's warps for its variant (:data:`BACKWARD_WARPS`)."""
    return BACKWARD_WARPS["plif" if has_plif else "segment" if has_segment else "plain"]


def _meta(sm: SemiMarkov) -> dict:
    return dict(HAS_SEGMENT=sm.segment_scores is not None, HAS_PLIF=sm.segment_plif is not None,
                BLOCK_D=TILE, BLOCK_N=TILE)


def _inputs(sm: SemiMarkov) -> tuple[Tensor, ...]:
    """content, length, boundary, segment (or empty), transitions, start, end: contiguous."""
    segment = sm.content.new_empty(0) if sm.segment_scores is None else sm.segment_scores
    parts = (sm.content, sm.length_scores, sm.boundary, segment, sm.transitions, sm.start, sm.end)
    return tuple(x.detach().contiguous() for x in parts)


def _plif_args(sm: SemiMarkov) -> tuple:
    plif = sm.segment_plif
    if plif is None:
        empty = sm.content.new_empty(0)
        return empty, empty, 2, 0.0, 1.0, 1.0
    P = plif.ordinates.shape[1]
    return (plif.tracks.detach().contiguous(), plif.ordinates.detach().contiguous(), P, plif.low, plif.high,
            (P - 1) / (plif.high - plif.low))


def _forward(sm: SemiMarkov, viterbi: bool, loss: tuple[Tensor, ...] | None = None) -> tuple[Tensor, ...]:
    """best or logZ (B,) float64 (0 on empty rows), alpha and inc (B, T+1, N) float64 and, for
    Viterbi, labels (B, T) int64 and starts (B, T) bool; one launch, nothing filled on the host.
    ``loss`` (Viterbi only): (target labels, target starts, the target's score (B,) float64, the
    count (B,) to write, the weights (B, T) or None), for the (weighted) Hamming-loss-augmented
    Viterbi (best is then the value)."""
    B, T, S, N = sm.shape
    dev = sm.content.device
    f64 = dict(dtype=torch.float64, device=dev)
    alpha, inc = (torch.empty(B, T + 1, N, **f64) for _ in range(2))  # every entry read is written first
    arg, arg_m = torch.empty((2, B, T + 1, N) if viterbi else (2, 1), dtype=torch.int32, device=dev)
    out = torch.empty(B, **f64)
    labels = torch.empty((B, T) if viterbi else (1,), dtype=torch.long, device=dev)
    starts = torch.empty((B, T) if viterbi else (1,), dtype=torch.bool, device=dev)
    tracks, ordinates, P, low, high, scale = _plif_args(sm)
    name = "semimarkov_viterbi" if viterbi else "semimarkov_log_partition"
    target = (labels, starts, out, labels, None) if loss is None else loss  # no loss: pointers never read
    weights = target[4]
    launch(name, _forward_kernel, (B,), *_inputs(sm), sm.lengths, tracks, ordinates, alpha, inc, arg, arg_m,
           out, labels, starts, *target[:4], out if weights is None else weights, T, S, N, P, low, high,
           scale, VITERBI=viterbi, LOSS=loss is not None, WEIGHTED=weights is not None,
           ROWS=SEGMENT_ROWS and weights is None,
           num_warps=forward_warps(viterbi, weights is not None), **_meta(sm))
    return out, alpha, inc, labels, starts


@torch.no_grad()
def viterbi_segmentation(sm: SemiMarkov) -> tuple[Tensor, Tensor, Tensor]:
    """(best (B,) float64, labels (B, T), starts (B, T)) as the compiled kernel returns them (-1
    labels and no starts beyond each length and on infeasible rows)."""
    best, _, _, labels, starts = _forward(sm, viterbi=True)
    return best, labels, starts


def _backward(sm: SemiMarkov, logz: Tensor, alpha: Tensor, inc: Tensor, g: Tensor) -> list[Tensor]:
    B, T, S, N = sm.shape
    f64 = dict(dtype=torch.float64, device=sm.content.device)
    gamma, delta = (torch.empty(B, T + 1, N, **f64) for _ in range(2))  # every entry read is written first
    tracks, ordinates, P, low, high, scale = _plif_args(sm)
    has_segment, has_plif = sm.segment_scores is not None, sm.segment_plif is not None
    shapes = [(B, T, N), (B, S, N), (B, T, N), (B, T, S, N) if has_segment else (1,), (B, N, N), (B, N),
              (B, N), (B, T, N) if has_plif else (1,), (B, N, P) if has_plif else (1,)]
    # apart, not views of one zeroed buffer (an operator's outputs may not alias each other: an
    # error under torch.compile from torch 2.12), and zeroed in one launch
    grads = [torch.empty(shape, **f64) for shape in shapes]
    launch("semimarkov_backward_zero", _zero_gradients_kernel, (B,), *grads, T, S, N, P,
           HAS_SEGMENT=has_segment, HAS_PLIF=has_plif, BLOCK=128)
    launch("semimarkov_backward", _backward_kernel, (B,), g, logz, alpha, inc, *_inputs(sm), sm.lengths,
           tracks, ordinates, gamma, delta, *grads, T, S, N, P, low, high, scale,
           num_warps=backward_warps(has_segment, has_plif), **_meta(sm))
    g_content, g_length, g_boundary, g_segment, g_trans, g_start, g_end, g_tracks, g_plif = grads
    return [g_content, g_length, g_boundary, g_segment if has_segment else None, g_trans.sum(0), g_start,
            g_end, *([g_tracks, g_plif.sum(0)] if has_plif else [None, None])]


def log_partition_forward(sm: SemiMarkov) -> tuple[Tensor, tuple[Tensor, Tensor]]:
    """logZ (B,) float64 (0 on empty rows) and alpha, inc (B, T+1, N) float64 for the backward
    (see ``semimarkov/_ops.py``); segment PLiFs included."""
    logz, alpha, inc, _, _ = _forward(sm, viterbi=False)
    return logz, (alpha, inc)


def log_partition_backward(sm: SemiMarkov, logz: Tensor, state, g: Tensor) -> list[Tensor | None]:
    """Gradients w.r.t. content, length, boundary, segment, transitions, start, end and the segment
    PLiF's tracks and ordinates (input dtype; None where absent) for upstream g (B,) float64."""
    return [None if x is None else x.to(sm.content.dtype) for x in _backward(sm, logz, *state, g)]


@triton.jit
def _inverse_cdf(v, m, mm, total, u, carry, chosen, last):
    """One tile of an inverse-CDF draw: candidates v at indices m (mask mm) with probabilities
    exp(v - total); the first index where the running sum passes u (``chosen``, -1 until then),
    the last index of positive probability (``last``, for a u that rounding leaves unpassed)."""
    p = tl.where(mm & (v > NEG), tl.exp(v - total), 0.0)
    run = carry + tl.cumsum(p, axis=0)
    hit = tl.min(tl.where((run > u) & (p > 0), m, 2147483647), axis=0)
    chosen = tl.where((chosen < 0) & (hit < 2147483647), hit, chosen)
    last = tl.maximum(last, tl.max(tl.where(p > 0, m, -1), axis=0))
    return carry + tl.sum(p, axis=0), chosen, last


@triton.jit
def _draw_label(x, y, stride, N, u, r, BLOCK: tl.constexpr):
    """A label m drawn with probability proportional to exp(x[m] + y[m * stride]) (float64 x) by
    the inverse CDF at u; -1 when every candidate is -inf."""
    top = tl.full([BLOCK], NEG, tl.float64)
    acc = tl.zeros([BLOCK], tl.float64)
    for m0 in range(0, N, BLOCK):
        m = m0 + r
        mm = m < N
        v = tl.load(x + m, mask=mm, other=NEG) + tl.load(y + m * stride, mask=mm, other=NEG).to(tl.float64)
        top, acc = lse_update(top, acc, v[None, :], 0)
    total = lse_total(top, acc)
    carry = tl.zeros([], tl.float64)
    chosen = tl.full([], -1, tl.int32)
    last = tl.full([], -1, tl.int32)
    if total > NEG:
        for m0 in range(0, N, BLOCK):
            m = m0 + r
            mm = m < N
            v = tl.load(x + m, mask=mm, other=NEG) + tl.load(y + m * stride, mask=mm,
                                                             other=NEG).to(tl.float64)
            carry, chosen, last = _inverse_cdf(v, m, mm, total, u, carry, chosen, last)
    return tl.where(chosen < 0, last, chosen)


@triton.jit
def _length_candidates(b, e, d0, label, lanes, dmax, carry, content, length, boundary, segment, ic, T, S, N,
                       rd, HAS_SEGMENT: tl.constexpr):
    """Scores of the segments [e - d, e) of one label for d = d0 + 1 + rd, the incoming term
    included (-inf beyond ``dmax``), and the content carry."""
    one = lanes == 0  # the label in lane 0 of a label tile
    n = label + lanes * 0
    tile, valid, carry, _ = _segment_tile(b, e, d0, n, one, dmax, carry, carry, content, length, boundary,
                                          segment, content, content, T, S, N, 2, 0.0, 1.0, 1.0, rd,
                                          HAS_SEGMENT, False)
    d = d0 + 1 + rd
    v = tl.max(tile, axis=1) + tl.load(ic + (e - d) * N + label, mask=d <= tl.max(dmax, axis=0), other=NEG)
    return v, carry


@triton.jit
def _draw_length(b, e, label, content, length, boundary, segment, ic, T, S, N, u, rd,
                 HAS_SEGMENT: tl.constexpr, BLOCK_D: tl.constexpr):
    """The length d of the segment ending at e with label ``label``, drawn with probability
    proportional to exp(score(e - d, e, label) + inc[e - d, label]) by the inverse CDF at u (the
    label in lane 0 of two: the smallest tile, few registers)."""
    rn = tl.arange(0, 2)
    dmax = _max_length(b, e, label + rn * 0, rn == 0, boundary, T, S, N)
    D = tl.max(dmax, axis=0)
    top = tl.full([BLOCK_D], NEG, tl.float64)
    acc = tl.zeros([BLOCK_D], tl.float64)
    carry = tl.zeros([rn.shape[0]], tl.float64)
    for d0 in range(0, D, BLOCK_D):
        v, carry = _length_candidates(b, e, d0, label, rn, dmax, carry, content, length, boundary, segment,
                                      ic, T, S, N, rd, HAS_SEGMENT)
        top, acc = lse_update(top, acc, v[None, :], 0)
    total = lse_total(top, acc)
    run = tl.zeros([], tl.float64)
    chosen = tl.full([], -1, tl.int32)
    last = tl.full([], -1, tl.int32)
    carry = tl.zeros([rn.shape[0]], tl.float64)
    for d0 in range(0, D, BLOCK_D):
        v, carry = _length_candidates(b, e, d0, label, rn, dmax, carry, content, length, boundary, segment,
                                      ic, T, S, N, rd, HAS_SEGMENT)
        d = (d0 + 1 + rd).to(tl.int32)
        run, chosen, last = _inverse_cdf(v, d, rd < D - d0, total, u, run, chosen, last)
    return tl.where(chosen < 0, last, chosen)


@triton.jit
def _sample_kernel(content, length, boundary, segment, trans, start, end, lengths, alpha, inc, uniforms,
                   labels, starts, B, T, S, N, HAS_SEGMENT: tl.constexpr, BLOCK_D: tl.constexpr,
                   BLOCK_N: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)  # sample * B + row
    b = pid % B
    L = tl.minimum(tl.load(lengths + b), T)
    rn = tl.arange(0, BLOCK_N)
    rd = tl.arange(0, BLOCK_D)
    out = labels + pid * T
    first = starts + pid * T
    _clear_segmentation(out, first, T, BLOCK_N)
    u = uniforms + pid * (2 * T + 1)
    al = alpha + b * (T + 1) * N
    ic = inc + b * (T + 1) * N
    if L > 0:
        label = _draw_label(al + L * N, end + b * N, 1, N, tl.load(u), rn, BLOCK_N)
        e = L
        k = 1
        while (e > 0) & (label >= 0):
            d = _draw_length(b, e, label, content, length, boundary, segment, ic, T, S, N, tl.load(u + k), rd,
                             HAS_SEGMENT, BLOCK_D)
            s = e - d
            for t0 in range(s, e, BLOCK_N):
                t = t0 + rn
                tl.store(out + t, label.to(tl.int64) + t * 0, mask=t < e)
            tl.store(first + s, 1)
            if s > 0:  # the label of the segment before: alpha[s][m] + trans[m, label]
                label = _draw_label(al + s * N, trans + label, N, N, tl.load(u + k + 1), rn, BLOCK_N)
            e = s
            k += 2


@torch.no_grad()
def sample(sm: SemiMarkov, n: int, generator: torch.Generator | None) -> tuple[Tensor, Tensor]:
    """(labels (n, B, T) int64, starts (n, B, T) bool) drawn from the segmentation distribution by
    forward filtering (the log-partition kernel's alpha and inc) and backward sampling (one program
    per sample and row, inverse-CDF draws from uniforms made up front): two launches and one op."""
    B, T, S, N = sm.shape
    dev = sm.content.device
    _, alpha, inc, _, _ = _forward(sm, viterbi=False)
    uniforms = torch.rand(n, B, 2 * T + 1, generator=generator, dtype=torch.float64, device=dev)
    labels = torch.empty(n, B, T, dtype=torch.long, device=dev)
    starts = torch.empty(n, B, T, dtype=torch.bool, device=dev)
    meta = _meta(sm)
    launch("semimarkov_sample", _sample_kernel, (n * B,), *_inputs(sm), sm.lengths, alpha, inc, uniforms,
           labels, starts, B, T, S, N, HAS_SEGMENT=meta["HAS_SEGMENT"], BLOCK_D=meta["BLOCK_D"],
           BLOCK_N=meta["BLOCK_N"], num_warps=SAMPLE_WARPS)
    return labels, starts


@triton.jit
def _ranked_after(v, code, prev_v, prev_code):
    """Whether candidates (v, code) come after (prev_v, prev_code) in the k-best order: higher
    values first, then smaller codes."""
    return (v < prev_v) | ((v == prev_v) & (code > prev_code))


@triton.jit
def _take(best, best_code, v, code, prev_v, prev_code, AXIS: tl.constexpr):
    """Fold a tile of candidates (reduced over AXIS) into the running next entry of a k-best list:
    the best (value, code) among those ranked after (prev_v, prev_code); -inf candidates never
    enter."""
    if AXIS == 0:
        ok = _ranked_after(v, code, prev_v[None, :], prev_code[None, :]) & (v > NEG)
    else:
        ok = _ranked_after(v, code, prev_v[:, None], prev_code[:, None]) & (v > NEG)
    v = tl.where(ok, v, NEG)
    top = tl.max(v, axis=AXIS)
    if AXIS == 0:
        c = tl.min(tl.where(ok & (v == top[None, :]), code, 2147483647), axis=0)
    else:
        c = tl.min(tl.where(ok & (v == top[:, None]), code, 2147483647), axis=1)
    better = (top > best) | ((top == best) & (top > NEG) & (c < best_code))
    return tl.where(better, top, best), tl.where(better, c, best_code)


@triton.jit
def _kbest_kernel(content, length, boundary, segment, trans, start, end, lengths, alpha, alpha_bp, inc,
                  inc_bp, scores, labels, starts, T, S, N, K, HAS_SEGMENT: tl.constexpr,
                  BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr):
    """k-best lists over segment ends: alpha[e, n, :] (code (d - 1) K + rank into inc[e - d, n])
    and inc[e, n, :] (code m K + rank into alpha[e, m]), each entry by one pass over the candidates
    ranked after the previous entry; then the k best (label, rank) at the length and their
    backtraces."""
    b = tl.program_id(0).to(tl.int64)
    L = tl.minimum(tl.load(lengths + b), T)
    rn = tl.arange(0, BLOCK_N)
    rd = tl.arange(0, BLOCK_D)
    row = b * (T + 1) * N * K
    for j in range(0, K):  # no segmentation until a backtrace writes one
        _clear_segmentation(labels + (b * K + j) * T, starts + (b * K + j) * T, T, BLOCK_N)
    for n0 in range(0, N, BLOCK_N):  # inc[0, n] = (start[n], -inf, ...)
        n = n0 + rn
        mn = n < N
        first = tl.load(start + b * N + n, mask=mn, other=NEG).to(tl.float64)
        for r in range(0, K):
            tl.store(inc + row + n * K + r, tl.where(r == 0, first, NEG), mask=mn)
    tl.debug_barrier()
    for e in range(1, L + 1):
        at = row + e * N * K
        for n0 in range(0, N, BLOCK_N):
            n = n0 + rn
            mn = n < N
            dmax = _max_length(b, e, n, mn, boundary, T, S, N)
            prev_v = tl.full([BLOCK_N], float("inf"), tl.float64)
            prev_c = tl.full([BLOCK_N], -1, tl.int32)
            for j in range(0, K):
                best = tl.full([BLOCK_N], NEG, tl.float64)
                best_c = tl.full([BLOCK_N], 2147483647, tl.int32)
                carry = tl.zeros([BLOCK_N], tl.float64)
                for d0 in range(0, tl.max(dmax, axis=0), BLOCK_D):
                    v, valid, carry, _ = _segment_tile(b, e, d0, n, mn, dmax, carry, carry, content, length,
                                                       boundary, segment, content, content, T, S, N, 2, 0.0,
                                                       1.0, 1.0, rd, HAS_SEGMENT, False)
                    d = d0 + 1 + rd
                    for r in range(0, K):
                        at_inc = inc + row + ((e - d[:, None]) * N + n[None, :]) * K + r
                        cand = v + tl.load(at_inc, mask=valid, other=NEG)
                        code = ((d[:, None] - 1) * K + r + n[None, :] * 0).to(tl.int32)
                        best, best_c = _take(best, best_c, cand, code, prev_v, prev_c, 0)
                tl.store(alpha + at + n * K + j, best, mask=mn)
                tl.store(alpha_bp + at + n * K + j, best_c, mask=mn)
                prev_v, prev_c = best, best_c
        tl.debug_barrier()
        if e < L:  # inc[e, n, :]: the k best alpha[e, m, q] + trans[m, n]
            for n0 in range(0, N, BLOCK_N):
                n = n0 + rn
                mn = n < N
                prev_v = tl.full([BLOCK_N], float("inf"), tl.float64)
                prev_c = tl.full([BLOCK_N], -1, tl.int32)
                for j in range(0, K):
                    best = tl.full([BLOCK_N], NEG, tl.float64)
                    best_c = tl.full([BLOCK_N], 2147483647, tl.int32)
                    for m0 in range(0, N, BLOCK_N):
                        m = m0 + rn
                        mm = m < N
                        w = _tile(trans, m, mm, n, mn, N)
                        for q in range(0, K):
                            a = tl.load(alpha + at + m * K + q, mask=mm, other=NEG)
                            code = m[:, None] * K + q + n[None, :] * 0
                            best, best_c = _take(best, best_c, a[:, None] + w, code, prev_v, prev_c, 0)
                    tl.store(inc + at + n * K + j, best, mask=mn)
                    tl.store(inc_bp + at + n * K + j, best_c, mask=mn)
                    prev_v, prev_c = best, best_c
            tl.debug_barrier()
    # the k best (label, rank) at the length; an empty row has one segmentation, of score 0
    prev_v = tl.full([1], float("inf"), tl.float64)
    prev_c = tl.full([1], -1, tl.int32)
    for j in range(0, K):
        top = tl.full([1], NEG, tl.float64)
        top_c = tl.full([1], 2147483647, tl.int32)
        if L > 0:
            for n0 in range(0, N, BLOCK_N):
                n = n0 + rn
                mn = n < N
                en = tl.load(end + b * N + n, mask=mn, other=NEG).to(tl.float64)
                for r in range(0, K):
                    v = tl.load(alpha + row + (L * N + n) * K + r, mask=mn, other=NEG) + en
                    top, top_c = _take(top, top_c, v[:, None], (n * K + r)[:, None], prev_v, prev_c, 0)
        prev_v, prev_c = top, top_c
        best = tl.where(L > 0, tl.max(top, axis=0), tl.where(j == 0, 0.0, NEG))
        best_c = tl.min(top_c, axis=0)
        tl.store(scores + b * K + j, best)
        if (L > 0) & (best > NEG):
            label = best_c // K
            rank = best_c % K
            stop = L
            out = labels + (b * K + j) * T
            while stop > 0:
                code = tl.load(alpha_bp + row + (stop * N + label) * K + rank)
                first = stop - (code // K + 1)
                for t0 in range(first, stop, BLOCK_N):
                    t = t0 + rn
                    tl.store(out + t, label.to(tl.int64) + t * 0, mask=t < stop)
                tl.store(starts + (b * K + j) * T + first, 1)
                if first > 0:
                    back = tl.load(inc_bp + row + (first * N + label) * K + code % K)
                    label = back // K
                    rank = back % K
                stop = first


@torch.no_grad()
def kbest(sm: SemiMarkov, k: int) -> tuple[Tensor, Tensor, Tensor]:
    """The k best segmentations: scores (B, k) float64 (descending, -inf where fewer exist),
    labels (B, k, T) int64 (-1 outside) and starts (B, k, T) bool, in one launch."""
    B, T, S, N = sm.shape
    dev = sm.content.device
    shape = (B, T + 1, N, k)
    alpha, inc = (torch.empty(*shape, dtype=torch.float64, device=dev) for _ in range(2))
    alpha_bp, inc_bp = (torch.empty(*shape, dtype=torch.int32, device=dev) for _ in range(2))
    scores = torch.empty(B, k, dtype=torch.float64, device=dev)
    labels = torch.empty(B, k, T, dtype=torch.long, device=dev)
    starts = torch.empty(B, k, T, dtype=torch.bool, device=dev)
    meta = _meta(sm)
    launch("semimarkov_kbest", _kbest_kernel, (B,), *_inputs(sm), sm.lengths, alpha, alpha_bp, inc, inc_bp,
           scores, labels, starts, T, S, N, k, HAS_SEGMENT=meta["HAS_SEGMENT"], BLOCK_D=meta["BLOCK_D"],
           BLOCK_N=meta["BLOCK_N"])
    return scores, labels, starts


@triton.jit
def segmentation_score(content, length, boundary, segment, trans, start, end, tracks, plif, labels, starts, b,
                       L, T, S, N, P, low, high, scale, HAS_SEGMENT: tl.constexpr, HAS_PLIF: tl.constexpr):
    """The float64 score of row b's segmentation (labels, starts) (B, T), trusted inside the length
    L (0 when L = 0), position by position: content, a transition where a segment starts, and at
    each segment's end its length, boundary, segment score and the PLiF of its track mean (summed
    over the segment as it grows, never a difference of prefix sums); then start and end."""
    total = tl.zeros([], tl.float64)
    if L > 0:
        first = tl.load(labels + b * T)
        prev = first
        begin = tl.zeros([], tl.int64)
        track = tl.zeros([], tl.float64)
        for t in range(0, L):
            y = tl.load(labels + b * T + t)
            new = (t == 0) | (tl.load(starts + b * T + t).to(tl.int32) != 0)
            total += tl.load(trans + prev * N + y, mask=new & (t > 0), other=0.0).to(tl.float64)
            begin = tl.where(new, t, begin)
            total += tl.load(content + (b * T + t) * N + y).to(tl.float64)
            if HAS_PLIF:
                track = tl.where(new, 0.0, track) + tl.load(tracks + (b * T + t) * N + y).to(tl.float64)
            after = tl.load(starts + b * T + t + 1, mask=t + 1 < T, other=1).to(tl.int32)
            closes = (t + 1 >= L) | (after != 0)  # the segment ends at t
            d = t - begin + 1
            total += tl.load(length + (b * S + d - 1) * N + y, mask=closes, other=0.0).to(tl.float64)
            total += tl.load(boundary + (b * T + t) * N + y, mask=closes, other=0.0).to(tl.float64)
            if HAS_SEGMENT:
                at = ((b * T + t) * S + d - 1) * N + y
                total += tl.load(segment + at, mask=closes, other=0.0).to(tl.float64)
            if HAS_PLIF:
                mean = track * reciprocal(d)
                pos = (tl.minimum(tl.maximum(mean, low), high) - low) * scale
                left = tl.minimum(pos.to(tl.int32), P - 2)
                y0 = tl.load(plif + y * P + left, mask=closes, other=0.0).to(tl.float64)
                y1 = tl.load(plif + y * P + left + 1, mask=closes, other=0.0).to(tl.float64)
                total += tl.where(closes, y0 + (pos - left) * (y1 - y0), 0.0)
            prev = y
        total += tl.load(start + b * N + first).to(tl.float64) + tl.load(end + b * N + prev).to(tl.float64)
    return total


@triton.jit
def _score_kernel(content, length, boundary, segment, trans, start, end, lengths, tracks, plif, labels,
                  starts, out, T, S, N, P, low: tl.float64, high: tl.float64, scale: tl.float64,
                  HAS_SEGMENT: tl.constexpr, HAS_PLIF: tl.constexpr):
    """The score of one segmentation per sequence (:func:`segmentation_score`)."""
    b = tl.program_id(0).to(tl.int64)
    L = tl.minimum(tl.load(lengths + b), T)
    tl.store(out + b, segmentation_score(content, length, boundary, segment, trans, start, end, tracks, plif,
                                         labels, starts, b, L, T, S, N, P, low, high, scale, HAS_SEGMENT,
                                         HAS_PLIF))


@torch.no_grad()
def loss_augmented(sm: SemiMarkov, labels: Tensor, starts: Tensor,
                   weights: Tensor | None = None) -> tuple[Tensor, ...]:
    """Margin rescaling with the Hamming loss (h the identity), weighted by ``weights`` (B, T) (0
    beyond each length) if given, against the target segmentation (labels, starts) (B, T): value
    (B,) float64 (max over z of s(z) + H(z) minus the target's score, 0 where the target attains
    it), the maximizing segmentation's labels and starts (the target's where it attains it), its
    count (B,) (int64, float64 for floating weights) and the target's score (B,) float64. Two
    launches: the target's score, then the Viterbi with the loss folded in and the tie rule."""
    gold = score(sm, labels, starts)
    floating = weights is not None and weights.dtype.is_floating_point
    count = torch.empty_like(sm.lengths, dtype=torch.float64 if floating else torch.long)
    loss = (labels.contiguous(), starts.contiguous(), gold, count,
            None if weights is None else weights.contiguous())
    value, _, _, found, found_starts = _forward(sm, True, loss)
    return value, found, found_starts, count, gold


@torch.no_grad()
def score(sm: SemiMarkov, labels: Tensor, starts: Tensor) -> Tensor:
    """(B,) float64 scores of segmentations (labels, starts) (B, T) (trusted inside each length;
    anything beyond), in one launch."""
    B, T, S, N = sm.shape
    out = torch.empty(B, dtype=torch.float64, device=sm.content.device)
    tracks, ordinates, P, low, high, scale = _plif_args(sm)
    meta = _meta(sm)
    launch("semimarkov_score", _score_kernel, (B,), *_inputs(sm), sm.lengths, tracks, ordinates,
           labels.contiguous(), starts.contiguous(), out, T, S, N, P, low, high, scale,
           HAS_SEGMENT=meta["HAS_SEGMENT"], HAS_PLIF=meta["HAS_PLIF"])
    return out
