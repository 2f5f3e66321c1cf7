"""Semi-Markov dynamic programs as fused Triton kernels ("triton" backend).

One launch per call, one program per sequence, running over segment ends e in order. At each end
the candidate segments [e - d, e) are scored in (BLOCK_D x BLOCK_N) tiles of (length, label): their
content sums (and the track sums of segment-mean PLiFs) accumulate backwards from e by a cumulative
sum inside each tile plus a carry between tiles, never as differences of prefix sums. Forbidden
(-inf) content caps the lengths through ``forb`` (the last forbidden position before each end), as
in the compiled CPU kernels; everything accumulates in float64.

- one forward kernel for both semirings (``VITERBI``): alpha/inc by max-plus with int32 argmax
  tables (first maximal length, then label) and the backtrace into labels and segment starts, or
  by online log-sum-exp for the log-partition;
- the backward: delta/gamma by the reverse recursion; every segment's marginal
  exp(inc[s] + score + gamma[e] - logZ) spread onto content (a difference array, summed on the
  host), lengths, boundaries, segment scores, transitions, start and end.

The label-to-label step, the reductions and the tile helpers come from
:mod:`structtorch._triton_common`.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from .._numerics import NEG_INF
from .._triton_common import NEG, block, close, finish, fold, launch, lse_finish, lse_update, transition_step
from .._triton_common import load_tile as _tile
from ._cpu import last_forbidden
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
                  HAS_SEGMENT: tl.constexpr, HAS_PLIF: tl.constexpr):
    """Scores (without the incoming term) of segments [e - d, e) for d = d0 + 1 + rd and labels n,
    -inf beyond ``dmax`` (BLOCK_N,); returns (scores, valid, new carry, new track carry)."""
    d = d0 + 1 + rd
    valid = (d[:, None] <= dmax[None, :]) & mn[None, :]
    pos = e - d
    c = tl.load(content + (b * T + pos[:, None]) * N + n[None, :], mask=valid, other=0.0).to(tl.float64)
    v = tl.cumsum(c, axis=0) + carry[None, :]
    carry += tl.sum(c, axis=0)
    v += tl.load(length + (b * S + d[:, None] - 1) * N + n[None, :], mask=valid, other=0.0).to(tl.float64)
    v += tl.load(boundary + (b * T + e - 1) * N + n, mask=mn, other=0.0).to(tl.float64)[None, :]
    if HAS_SEGMENT:
        v += tl.load(segment + ((b * T + e - 1) * S + d[:, None] - 1) * N + n[None, :], mask=valid,
                     other=0.0).to(tl.float64)
    if HAS_PLIF:
        x = tl.load(tracks + (b * T + pos[:, None]) * N + n[None, :], mask=valid, other=0.0).to(tl.float64)
        mean = (tl.cumsum(x, axis=0) + tcarry[None, :]) / d[:, None].to(tl.float64)
        tcarry += tl.sum(x, axis=0)
        v += _plif_value(mean, n, valid, plif, P, low, high, scale)
    return tl.where(valid, v, NEG), valid, carry, tcarry


@triton.jit
def _max_length(b, e, n, mn, forb, boundary, T, S, N):
    """The longest allowed segment ending at e per label: 0 where the boundary score is -inf."""
    fb = tl.load(forb + (b * (T + 1) + e) * N + n, mask=mn, other=0)
    bnd = tl.load(boundary + (b * T + e - 1) * N + n, mask=mn, other=NEG)
    return tl.where(bnd == NEG, 0, tl.minimum(S, e - (fb + 1)))


@triton.jit
def _forward_kernel(content, forb, length, boundary, segment, trans, start, end, lengths, tracks, plif,
                    alpha, inc, arg_d, arg_m, out, labels, starts, T, S, N, P, low: tl.float64,
                    high: tl.float64, scale: tl.float64, VITERBI: tl.constexpr, HAS_SEGMENT: tl.constexpr,
                    HAS_PLIF: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)  # 64-bit offsets: B T N may pass 2^31
    L = tl.minimum(tl.load(lengths + b), T)  # never past the buffers, even unvalidated
    rn = tl.arange(0, BLOCK_N)
    rd = tl.arange(0, BLOCK_D)
    al = alpha + b * (T + 1) * N
    ic = inc + b * (T + 1) * N
    result = tl.full([], 0.0, tl.float64)
    if L > 0:
        for n0 in range(0, N, BLOCK_N):
            n = n0 + rn
            tl.store(ic + n, tl.load(start + b * N + n, mask=n < N, other=NEG).to(tl.float64), mask=n < N)
        tl.debug_barrier()
        for e in range(1, L + 1):
            for n0 in range(0, N, BLOCK_N):
                n = n0 + rn
                mn = n < N
                dmax = _max_length(b, e, n, mn, forb, boundary, T, S, N)
                carry = tl.zeros([BLOCK_N], tl.float64)
                tcarry = tl.zeros([BLOCK_N], tl.float64)
                best = tl.full([BLOCK_N], NEG, tl.float64)
                acc = tl.zeros([BLOCK_N], tl.float64)
                arg = tl.zeros([BLOCK_N], tl.int32)
                for d0 in range(0, tl.max(dmax, axis=0), BLOCK_D):
                    v, valid, carry, tcarry = _segment_tile(
                        b, e, d0, n, mn, dmax, carry, tcarry, content, length, boundary, segment, tracks,
                        plif, T, S, N, P, low, high, scale, rd, HAS_SEGMENT, HAS_PLIF)
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
        if VITERBI:
            if result > NEG:
                stop = L
                while stop > 0:
                    d = tl.load(arg_d + (b * (T + 1) + stop) * N + label).to(tl.int64)
                    first = stop - d
                    for k in range(first, stop):
                        tl.store(labels + b * T + k, label.to(tl.int64))
                    tl.store(starts + b * T + first, 1)
                    label = tl.load(arg_m + (b * (T + 1) + first) * N + label)
                    stop = first
    tl.store(out + b, result)


@triton.jit
def _add(ptr, value, mask):
    """*ptr += value where mask (one program: no two lanes share an address)."""
    tl.store(ptr, tl.load(ptr, mask=mask, other=0.0) + value, mask=mask)


@triton.jit
def _backward_kernel(grad, logz, alpha, inc, content, forb, length, boundary, segment, trans, start, end,
                     lengths, tracks, plif, gamma, delta, diff, g_length, g_boundary, g_segment, g_trans,
                     g_start, g_end, t_diff, g_plif, T, S, N, P, low: tl.float64, high: tl.float64,
                     scale: tl.float64, HAS_SEGMENT: tl.constexpr,
                     HAS_PLIF: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)  # 64-bit offsets: B T N may pass 2^31
    L = tl.minimum(tl.load(lengths + b), T)  # never past the buffers, even unvalidated
    lz = tl.load(logz + b)
    g = tl.load(grad + b)
    rn = tl.arange(0, BLOCK_N)
    rd = tl.arange(0, BLOCK_D)
    row = b * (T + 1) * N
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
                    inside = (d[:, None] <= S) & (e[:, None] <= L) & mn[None, :]
                    fb = tl.load(forb + (b * (T + 1) + e[:, None]) * N + n[None, :], mask=inside, other=0)
                    valid = inside & (fb < s)
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
                    _add(diff + row + e[:, None] * N + n[None, :], -mu, valid)
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
                        _add(t_diff + row + e[:, None] * N + n[None, :], -c, valid)
                tl.store(delta + row + s * N + n, lse_finish(top, acc), mask=mn)
                _add(diff + row + s * N + n, leaving, mn)
                if HAS_PLIF:
                    _add(t_diff + row + s * N + n, t_leaving, mn)
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


def _meta(sm: SemiMarkov) -> dict:
    _, _, S, N = sm.shape
    return dict(HAS_SEGMENT=sm.segment_scores is not None, HAS_PLIF=sm.segment_plif is not None,
                BLOCK_D=block(S), BLOCK_N=block(N, 32))


def _inputs(sm: SemiMarkov) -> tuple[Tensor, ...]:
    """content, forb, length, boundary, segment (or empty), transitions, start, end: contiguous."""
    segment = sm.content.new_empty(0) if sm.segment_scores is None else sm.segment_scores
    parts = (sm.content, last_forbidden(sm.content), sm.length_scores, sm.boundary, segment, sm.transitions,
             sm.start, sm.end)
    return tuple(x.detach().contiguous() for x in parts)


def _plif_args(sm: SemiMarkov) -> tuple:
    plif = sm.segment_plif
    if plif is None:
        empty = sm.content.new_empty(0)
        return empty, empty, 2, 0.0, 1.0, 1.0
    P = plif.ordinates.shape[1]
    return (plif.tracks.detach().contiguous(), plif.ordinates.detach().contiguous(), P, plif.low, plif.high,
            (P - 1) / (plif.high - plif.low))


def _forward(sm: SemiMarkov, viterbi: bool):
    B, T, S, N = sm.shape
    dev = sm.content.device
    f64 = dict(dtype=torch.float64, device=dev)
    alpha = torch.full((B, T + 1, N), NEG_INF, **f64)
    inc = torch.full((B, T + 1, N), NEG_INF, **f64)
    arg = torch.zeros((B, T + 1, N) if viterbi else (1,), dtype=torch.int32, device=dev)
    arg_m = torch.zeros_like(arg)
    out = torch.empty(B, **f64)
    labels = torch.full((B, T), -1, dtype=torch.long, device=dev)
    starts = torch.zeros(B, T, dtype=torch.int8, device=dev)
    tracks, ordinates, P, low, high, scale = _plif_args(sm)
    name = "semimarkov_viterbi" if viterbi else "semimarkov_log_partition"
    launch(name, _forward_kernel, (B,), *_inputs(sm), sm.lengths, tracks, ordinates, alpha, inc, arg, arg_m,
           out, labels, starts, T, S, N, P, low, high, scale, VITERBI=viterbi, **_meta(sm))
    return out, alpha, inc, labels, starts.bool()


@torch.no_grad()
def viterbi_segmentation(sm: SemiMarkov) -> tuple[Tensor, Tensor, Tensor]:
    """(best (B,) float64, labels (B, T), starts (B, T)) as the compiled kernel returns them."""
    best, _, _, labels, starts = _forward(sm, viterbi=True)
    feasible = (best > NEG_INF).unsqueeze(1)
    return best, torch.where(feasible, labels, -1), starts & feasible


def _backward(sm: SemiMarkov, logz: Tensor, alpha: Tensor, inc: Tensor, g: Tensor) -> list[Tensor]:
    B, T, S, N = sm.shape
    f64 = dict(dtype=torch.float64, device=sm.content.device)
    gamma = torch.full((B, T + 1, N), NEG_INF, **f64)
    delta = torch.full((B, T + 1, N), NEG_INF, **f64)
    diff = torch.zeros(B, T + 1, N, **f64)
    g_length, g_boundary = torch.zeros(B, S, N, **f64), torch.zeros(B, T, N, **f64)
    has_segment = sm.segment_scores is not None
    g_segment = torch.zeros((B, T, S, N) if has_segment else (1,), **f64)
    g_trans, g_start, g_end = torch.zeros(B, N, N, **f64), torch.zeros(B, N, **f64), torch.zeros(B, N, **f64)
    tracks, ordinates, P, low, high, scale = _plif_args(sm)
    has_plif = sm.segment_plif is not None
    t_diff = torch.zeros((B, T + 1, N) if has_plif else (1,), **f64)
    g_plif = torch.zeros((B, N, P) if has_plif else (1,), **f64)
    launch("semimarkov_backward", _backward_kernel, (B,), g, logz, alpha, inc, *_inputs(sm), sm.lengths,
           tracks, ordinates, gamma, delta, diff, g_length, g_boundary, g_segment, g_trans, g_start, g_end,
           t_diff, g_plif, T, S, N, P, low, high, scale, **_meta(sm))
    inside = (torch.arange(T, device=diff.device) < sm.lengths[:, None]).unsqueeze(2)
    grads = [torch.where(inside, diff.cumsum(1)[:, :T], 0.0), g_length, g_boundary,
             g_segment if has_segment else g_segment.new_zeros(0), g_trans.sum(0), g_start, g_end]
    if has_plif:
        grads += [torch.where(inside, t_diff.cumsum(1)[:, :T], 0.0), g_plif.sum(0)]
    return grads


def log_partition_forward(sm: SemiMarkov) -> tuple[Tensor, tuple[Tensor, Tensor]]:
    """logZ (B,) float64 (0 on empty rows) and alpha, inc (B, T+1, N) float64 for the backward
    (see ``semimarkov/_ops.py``); segment PLiFs included."""
    logz, alpha, inc, _, _ = _forward(sm, viterbi=False)
    return torch.where(sm.lengths > 0, logz, 0.0), (alpha, inc)


def log_partition_backward(sm: SemiMarkov, logz: Tensor, state, g: Tensor) -> list[Tensor | None]:
    """Gradients w.r.t. content, length, boundary, segment, transitions, start, end and the segment
    PLiF's tracks and ordinates (input dtype; None where absent) for upstream g (B,) float64."""
    grads = _backward(sm, logz, *state, g)
    grads += [None] * (9 - len(grads))  # no PLiF: no track or ordinate gradients
    if sm.segment_scores is None:
        grads[3] = None
    return [None if x is None else x.to(sm.content.dtype) for x in grads]


SEGMENT_PLIF_LOG_PARTITION = True
