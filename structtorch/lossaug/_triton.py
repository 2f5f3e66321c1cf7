"""Loss-augmented inference for linear chains (and order-l chains) as Triton kernels ("triton"
backend).

The Hamming-count table (Bauer et al. 2014, Algorithm 1): one program per sequence runs the table
L_t[j][k] (the best prefix score ending in label j at t with weighted Hamming count k) over time, in
(count x label) tiles with a loop over the previous label, in float64, with uint8/int16
backpointers; a second launch backtracks the chosen count of every row (:func:`chain_tables`).
Ties as in the compiled kernel: the first maximal previous label, then the first maximal last
label.

The whole search without the host (:func:`fold_search`, :func:`table_search`) for a loss counted
by "units" (:func:`_unit`: the Hamming count, position weights, or per-label costs) plus optional
costs of label pairs (:func:`_pair_unit`), h the identity or a table: one launch runs Viterbi on
the scores with the loss folded in (margin rescaling), or the table and then a second one picks
the best count (first maximal), backtracks it and settles the result; every row then scores and
counts the target and the found labeling, keeps the target where it attains the maximum (a zero
subgradient) and writes the value, the labeling (-1 beyond each length), the count and the
value's slope in the found labeling's score. :func:`indicator_backward` turns that slope into the
gradients (the indicators of the found labeling minus the target's) in one launch.
:func:`window_fold_search`, :func:`window_table_search` and :func:`window_indicator_backward` do
the same on order-l chains (over the N^l states of the last l labels, as
``chain.window._window_path``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from .._numerics import NEG_INF
from .._triton_common import (
    NEG,
    argmax_update,
    block,
    close,
    launch,
    per_triton,
    reciprocal,
    transition_step,
    transitions_at,
)
from ..chain._triton import _gold_score
from ..chain.layout import Chain
from ..semimarkov._triton import (
    _clear_segmentation,
    _inputs,
    _max_length,
    _plif_args,
    segmentation_score,
)
from ..semimarkov.layout import SemiMarkov
from ._torch import Tables
from .spec import weights_as_costs

TABLE_WARPS = 8
"""Warps of the window and semi-Markov tables: with 4 the (64 counts x 32 states) tiles put 80 B on
the stack on sm_90 (255 registers)."""

TABLE_COUNTS = 64
"""Counts per tile of the semi-Markov table, whatever K: with 16 or 32 (and 2, 4 or 8 warps) some
variants with segment PLiFs put 8-40 B on the stack on sm_90; 64 at 8 warps is clean in all."""

TABLE_LABELS = per_triton(32, {(3, 6): 16})
"""The most labels per tile of the semi-Markov table: with Triton 3.6, 32-label tiles with segment
PLiFs take all 255 registers and put 16-40 B on the stack at 8 warps (and at 4 and 16); 16-label
tiles are clean at 8 (but see :data:`TABLE_WARPS_SEGMENTS`)."""

TABLE_WARPS_SEGMENTS = per_triton(TABLE_WARPS, {(3, 6): 4})
"""Warps of the semi-Markov table of the segment loss without segment scores: with Triton 3.6 its
16-label tiles put 16-40 B on the stack at 8 warps (128 registers), nothing at 4."""

FOLD_WARPS = per_triton(4, {(3, 9): 8})
"""Warps of the fold (margin rescaling) in tiles of 32 labels: with Triton 3.9 at 4 its float64
variant with per-position transitions puts 32 B on the stack on sm_90, at 8 nothing; 3.6 and 3.8 are
clean at Triton's 4 (at 8 they put 8-16 B on the stack)."""

FOLD_WARPS_WIDE = 8
"""Warps of the fold with costs (weights come as costs) in tiles of 64 labels: at 4 they put 8-40 B
on the stack on sm_90 (168 registers); at 8 nothing (about 100). The Hamming count keeps
:data:`FOLD_WARPS`."""

CHOOSE_WARPS = per_triton(4, {(3, 6): 8})
"""Warps of the table's choice: with Triton 3.6 at 4 its variants with costs and pair costs in tiles
of 64 put 16 B on the stack on sm_90."""

MIN_TABLE_CHOOSE_WARPS = per_triton(8, {(3, 9): 2})
"""Warps of the semi-Markov choice with a min table (slack rescaling, a custom h): with Triton 3.8
at 4 (and 2) its float variants of the boundary loss put 8 B on the stack on sm_90 (40 registers),
at 8 nothing; with 3.9 at 8 (and 4) they do, at 2 nothing."""

SEGMENT_KINDS = {"hamming": 0, "segment": 1, "boundary": 2}
"""The losses the semi-Markov table kernel counts (``KIND``), see :func:`_segment_count`."""


@triton.jit
def _unit(units, target, b, T, N, t, j, mj, UNITS: tl.constexpr):
    """What label j (a scalar or a block, ``mj`` its mask) at position t of row b adds to the count:
    1 where j != target[b, t] (UNITS 0, the Hamming count), the position weight units[b, t] there
    (UNITS 1, ``units`` (B, T)), or the cost units[b, t, j] (UNITS 2, ``units`` (B, T, N))."""
    if UNITS == 2:  # one return: the compiler types every return of the function alike
        unit = tl.load(units + (b * T + t) * N + j, mask=mj, other=0)
    else:
        unit = tl.where(j != tl.load(target + b * T + t), 1, 0)
        if UNITS == 1:
            unit = unit * tl.load(units + b * T + t)
    return unit


@triton.jit
def _pair_unit(pair, b, T, N, t, i, j, mask):
    """The cost pair[b, t - 1, i, j] of labels i at t - 1 and j at t (``pair`` (B, T - 1, N, N))."""
    return tl.load(pair + ((b * (T - 1) + t - 1) * N + i) * N + j, mask=mask, other=0)


@triton.jit
def _signed(x, sign):
    """``sign * x`` (sign +-1) with -inf kept: what the min table reads."""
    return tl.where(x > NEG, x * sign, x)


@triton.jit
def _table_program(ring, bp, best, last, ring_size, bp_size, K1):
    """This program's row b (64-bit: B T N may pass 2^31), the sign of the scores it reads (-1 in
    the second column of programs, the min table) and its halves of the buffers (``ring_size`` and
    ``bp_size`` entries per row, K1 of ``best`` and ``last``)."""
    b = tl.program_id(0).to(tl.int64)
    side = tl.program_id(1).to(tl.int64)
    B = tl.num_programs(0).to(tl.int64)
    sign = 1.0 - 2.0 * side.to(tl.float64)
    rows = side * B
    return b, sign, ring + rows * ring_size, bp + rows * bp_size, best + rows * K1, last + rows * K1


@triton.jit
def _close_table(final, end, best, last, K1, N, label_stride, count_stride, sign, rk, rn,
                 BLOCK_K: tl.constexpr, BLOCK_N: tl.constexpr):
    """best[k] = max_n final[n, k] + end[n] (signed) and last[k] its first maximal label, for the
    table ``final`` of the last position (entry (n, k) at n * label_stride + k * count_stride)."""
    for k0 in range(0, K1, BLOCK_K):
        k = k0 + rk
        mk = k < K1
        top = tl.full([BLOCK_K], NEG, tl.float64)
        label = tl.zeros([BLOCK_K], tl.int32)
        for n0 in range(0, N, BLOCK_N):
            n = n0 + rn
            mn = n < N
            at = n[None, :] * label_stride + k[:, None] * count_stride
            v = tl.load(final + at, mask=mk[:, None] & mn[None, :], other=NEG)
            v += _signed(tl.load(end + n, mask=mn, other=NEG).to(tl.float64), sign)[None, :]
            top, label = argmax_update(top, label, v, n0, 1)
        tl.store(best + k, top, mask=mk)
        tl.store(last + k, label.to(tl.int64), mask=mk)


@triton.jit
def _table_kernel(unary, trans, start, end, lengths, target, units, pair, ring, bp, best, last, T, N, K1,
                  SHARED: tl.constexpr, UNITS: tl.constexpr, PAIR: tl.constexpr, BLOCK_K: tl.constexpr,
                  BLOCK_J: tl.constexpr):
    """The table of the count :func:`_unit` (plus the pair costs ``pair`` when PAIR), see
    :func:`_table`."""
    _table(unary, trans, start, end, lengths, target, units, pair, ring, bp, best, last, T, N, K1, SHARED,
           BLOCK_K, BLOCK_J, UNITS, PAIR)


@triton.jit
def _table(unary, trans, start, end, lengths, target, units, pair, ring, bp, best, last, T, N, K1,
           SHARED: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_J: tl.constexpr, UNITS: tl.constexpr,
           PAIR: tl.constexpr):
    """One program's table: best[b, k] and the last label last[b, k] for every count k, the
    backpointers in ``bp`` (B, T, N, K1); label j at t adds :func:`_unit` to the count, and with
    PAIR the step i -> j into t adds pair[b, t - 1, i, j]. A second column of programs
    (``program_id(1)`` = 1) runs the min table: the same on
    the negated scores (-inf kept), into the second halves of ``ring``, ``bp``, ``best`` and
    ``last`` (each (2, B, ...) then)."""
    b, sign, ring, bp, best, last = _table_program(ring, bp, best, last, 2 * N * K1, T * N * K1, K1)
    L = tl.minimum(tl.load(lengths + b), T)  # never past the buffers, even unvalidated
    rk = tl.arange(0, BLOCK_K)
    rj = tl.arange(0, BLOCK_J)
    buf = ring + b * 2 * N * K1
    if L > 0:
        for j0 in range(0, N, BLOCK_J):
            j = j0 + rj
            mj = j < N
            shift = _unit(units, target, b, T, N, 0, j, mj, UNITS)
            first = _signed(tl.load(start + b * N + j, mask=mj, other=NEG).to(tl.float64), sign)
            first += _signed(tl.load(unary + b * T * N + j, mask=mj, other=NEG).to(tl.float64), sign)
            for k0 in range(0, K1, BLOCK_K):
                k = k0 + rk
                tile = (k[:, None] < K1) & mj[None, :]
                value = tl.where(k[:, None] == shift[None, :], first[None, :], NEG)
                tl.store(buf + j[None, :] * K1 + k[:, None], value, mask=tile)
        tl.debug_barrier()
        for t in range(1, L):
            src = buf + ((t - 1) % 2) * N * K1
            dst = buf + (t % 2) * N * K1
            A = transitions_at(trans, b, T, N, t, SHARED)
            for j0 in range(0, N, BLOCK_J):
                j = j0 + rj
                mj = j < N
                shift = _unit(units, target, b, T, N, t, j, mj, UNITS)
                u = _signed(tl.load(unary + (b * T + t) * N + j, mask=mj, other=NEG).to(tl.float64), sign)
                for k0 in range(0, K1, BLOCK_K):
                    k = k0 + rk
                    tile = (k[:, None] < K1) & mj[None, :]
                    ks = k[:, None] - shift[None, :]
                    reach = tile & (ks >= 0)
                    top = tl.full([BLOCK_K, BLOCK_J], NEG, tl.float64)
                    arg = tl.zeros([BLOCK_K, BLOCK_J], tl.int32)
                    for i in range(0, N):
                        if PAIR:  # the step's own cost moves the count it comes from
                            ki = ks - _pair_unit(pair, b, T, N, t, i, j, mj)[None, :]
                            a = tl.load(src + i * K1 + ki, mask=tile & (ki >= 0), other=NEG)
                        else:
                            a = tl.load(src + i * K1 + ks, mask=reach, other=NEG)
                        w = _signed(tl.load(A + i * N + j, mask=mj, other=NEG).to(tl.float64), sign)
                        cand = a + w[None, :]
                        better = cand > top  # strict: the first maximal previous label wins ties
                        top = tl.where(better, cand, top)
                        arg = tl.where(better, i, arg)
                    tl.store(dst + j[None, :] * K1 + k[:, None], top + u[None, :], mask=tile)
                    tl.store(bp + ((b * T + t) * N + j[None, :]) * K1 + k[:, None],
                             arg.to(bp.dtype.element_ty), mask=tile)
            tl.debug_barrier()
        _close_table(buf + ((L - 1) % 2) * N * K1, end + b * N, best + b * K1, last + b * K1, K1, N, K1, 1,
                     sign, rk, rj, BLOCK_K, BLOCK_J)


@triton.jit
def _backtrack_kernel(bp, lengths, target, weights, chosen, last, path, broken, T, N, K1):
    b = tl.program_id(0).to(tl.int64)  # 64-bit offsets: B T N may pass 2^31
    L = tl.minimum(tl.load(lengths + b), T)  # never past the buffers, even unvalidated
    k = tl.load(chosen + b)
    if (L > 0) & (k >= 0):
        j = tl.load(last + b * K1 + k).to(tl.int32)
        ok = k >= 0
        for s in range(0, L - 1):
            t = L - 1 - s
            tl.store(path + b * T + t, j.to(tl.int64))
            i = tl.load(bp + ((b * T + t) * N + j) * K1 + tl.maximum(k, 0)).to(tl.int32)
            k = k - tl.where(j != tl.load(target + b * T + t), tl.load(weights + b * T + t), 0)
            ok = ok & (k >= 0)  # an infeasible count: the row is dropped below
            j = i
        tl.store(path + b * T, j.to(tl.int64))
        tl.store(broken + b, (~ok).to(tl.int8))


def chain_tables(chain: Chain, target: Tensor, weights: Tensor, K: int) -> Tables:
    """Triton tables for a linear chain; weights (B, T) int64 summing to at most K per row."""
    B, T, N = chain.shape
    K1, dev = K + 1, chain.unary.device
    ring = torch.empty(B, 2, N, K1, dtype=torch.float64, device=dev)
    bp = torch.empty(B, T, N, K1, dtype=torch.uint8 if N <= 256 else torch.int16, device=dev)
    best = torch.full((B, K1), NEG_INF, dtype=torch.float64, device=dev)
    last = torch.zeros(B, K1, dtype=torch.long, device=dev)
    target, weights = target.contiguous(), weights.contiguous()
    launch("hamming_table", _table_kernel, (B,), chain.unary, chain.transitions, chain.start, chain.end,
           chain.lengths, target, weights, weights, ring, bp, best, last, T, N, K1, SHARED=chain.shared,
           UNITS=1, PAIR=False, BLOCK_K=block(K1), BLOCK_J=block(N, 32))
    empty = (chain.lengths == 0).unsqueeze(1)
    count_zero = torch.arange(K1, device=dev) == 0
    best = torch.where(empty, torch.where(count_zero, 0.0, NEG_INF), best)

    def backtrack(k: Tensor) -> Tensor:
        path = torch.full((B, T), -1, dtype=torch.long, device=dev)
        broken = torch.zeros(B, dtype=torch.int8, device=dev)
        launch("hamming_backtrack", _backtrack_kernel, (B,), bp, chain.lengths, target, weights,
               k.contiguous(), last, path, broken, T, N, K1)
        return torch.where((broken.bool() | (k < 0)).unsqueeze(1), -1, path)

    return Tables(best, backtrack)


@triton.jit
def _loss_count(path, target, units, pair, b, L, T, N, r, UNITS: tl.constexpr, PAIR: tl.constexpr,
                BLOCK: tl.constexpr):
    """The count of ``path[b, :L]`` in float64 (exact for integer units): :func:`_unit` summed over
    the positions, plus the pair costs of its steps when PAIR (labels clamped into [0, N))."""
    count = tl.full([], 0.0, tl.float64)
    for t0 in range(0, L, BLOCK):
        t = t0 + r
        m = t < L
        p = tl.minimum(tl.maximum(tl.load(path + b * T + t, mask=m, other=0), 0), N - 1)
        if UNITS == 2:
            c = tl.load(units + (b * T + t) * N + p, mask=m, other=0)
        else:
            y = tl.load(target + b * T + t, mask=m, other=0)
            c = tl.where(p != y, 1, 0)
            if UNITS == 1:
                c = c * tl.load(units + b * T + t, mask=m, other=0)
        count += tl.sum(tl.where(m, c, 0).to(tl.float64), axis=0)
        if PAIR:
            step = m & (t > 0)
            q = tl.minimum(tl.maximum(tl.load(path + b * T + t - 1, mask=step, other=0), 0), N - 1)
            count += tl.sum(_pair_unit(pair, b, T, N, t, q, p, step).to(tl.float64), axis=0)
    return count


@triton.jit
def _h(hrow, count, CUSTOM: tl.constexpr):
    """h(count) in float64: ``hrow[count]`` (the row's table of h, ``count`` integral) when CUSTOM,
    else the count."""
    if CUSTOM:
        return tl.load(hrow + count.to(tl.int64))
    return count.to(tl.float64)


@triton.jit
def _settle(target, path, value, count, scale, gold_out, b, L, T, gold, found, found_ok, H, H0, hrow,
            MARGIN: tl.constexpr, CUSTOM: tl.constexpr, BLOCK: tl.constexpr):
    """With the found labeling in ``path[b, :L]`` (when ``found_ok``), its score ``found`` and count
    H, and the target's score ``gold`` and count H0 (0 for the Hamming count; costs may charge the
    target's own labels): the two values, Delta = h(H) (see :func:`_h`; margin: s(y') + Delta - s(y);
    slack: Delta (1 + s(y') - s(y))); keeps the target where it attains the maximum; writes the
    value, the labeling (-1 beyond L), its count, the slope of the value in s(y') (0 for the
    target) and the target's score."""
    r = tl.arange(0, BLOCK)
    delta = _h(hrow, H, CUSTOM)
    h0 = _h(hrow, H0, CUSTOM)
    if MARGIN:
        v_found = found + delta - gold
        v_truth = gold + h0 - gold
        slope = tl.full([], 1.0, tl.float64)
    else:
        v_found = delta * (1.0 + found - gold)
        v_truth = h0 * (1.0 + gold - gold)
        slope = delta
    v_found = tl.where(found_ok, v_found, NEG)
    keep = v_truth >= v_found  # ties: the target itself (a zero subgradient)
    tl.debug_barrier()
    for t0 in range(0, T, BLOCK):
        t = t0 + r
        mt = t < T
        inside = t < L
        p = tl.load(path + b * T + t, mask=mt & inside, other=-1)
        y = tl.load(target + b * T + t, mask=mt & inside, other=-1)
        p = tl.where(keep, y, tl.where(found_ok, p, -1))
        tl.store(path + b * T + t, tl.where(inside, p, -1), mask=mt)
    tl.store(value + b, tl.where(keep, v_truth, v_found))
    tl.store(count + b, tl.where(keep | (~found_ok), H0, H))
    tl.store(scale + b, tl.where(keep, 0.0, slope))
    tl.store(gold_out + b, gold)


@triton.jit
def _settle_chain(unary, trans, start, end, target, units, pair, path, value, count, scale, gold_out, b, L, T,
                  N, found_ok, hrow, MARGIN: tl.constexpr, CUSTOM: tl.constexpr, SHARED: tl.constexpr,
                  UNITS: tl.constexpr, PAIR: tl.constexpr, BLOCK: tl.constexpr):
    """:func:`_settle` with the chain's scores of the target and of the found labeling, and the
    latter's count (:func:`_loss_count`)."""
    tl.debug_barrier()  # the backtrack's scalar stores, read back below
    gold = _gold_score(unary, trans, start, end, target, b, L, T, N, SHARED)
    found = _gold_score(unary, trans, start, end, path, b, L, T, N, SHARED)
    _settle_counts(target, units, pair, path, value, count, scale, gold_out, b, L, T, N, gold, found,
                   found_ok, hrow, MARGIN, CUSTOM, UNITS, PAIR, BLOCK)


@triton.jit
def _settle_counts(target, units, pair, path, value, count, scale, gold_out, b, L, T, N, gold, found,
                   found_ok, hrow, MARGIN: tl.constexpr, CUSTOM: tl.constexpr, UNITS: tl.constexpr,
                   PAIR: tl.constexpr, BLOCK: tl.constexpr):
    """:func:`_settle` with the counts of the found labeling and of the target
    (:func:`_loss_count`)."""
    r = tl.arange(0, BLOCK)
    H = _loss_count(path, target, units, pair, b, L, T, N, r, UNITS, PAIR, BLOCK)
    H0 = H * 0
    if UNITS == 2 or PAIR:  # costs may charge the target's own labels
        H0 = _loss_count(target, target, units, pair, b, L, T, N, r, UNITS, PAIR, BLOCK)
    _settle(target, path, value, count, scale, gold_out, b, L, T, gold, found, found_ok, H, H0, hrow, MARGIN,
            CUSTOM, BLOCK)


@triton.jit
def _loss_row(add, unary, target, units, b, T, N, t, r, UNITS: tl.constexpr, BLOCK: tl.constexpr):
    """add[j] = unary[b, t, j] + :func:`_unit` in float64: step t's scores with the loss folded in."""
    for j0 in range(0, N, BLOCK):
        j = j0 + r
        mj = j < N
        u = tl.load(unary + (b * T + t) * N + j, mask=mj, other=NEG).to(tl.float64)
        tl.store(add + j, u + _unit(units, target, b, T, N, t, j, mj, UNITS).to(tl.float64), mask=mj)


@triton.jit
def _fold_kernel(unary, trans, start, end, lengths, target, units, pair, steps, ring, bp, value, path, count,
                 scale, gold, T, N, SHARED: tl.constexpr, UNITS: tl.constexpr, PAIR: tl.constexpr,
                 BLOCK: tl.constexpr):
    """Margin rescaling with h the identity: Viterbi on unary + :func:`_unit` (ties: the first
    maximal previous label, then the first maximal last label), then :func:`_settle`. With PAIR the
    steps run on ``steps`` (B, T - 1, N, N), the transitions plus the pair costs ``pair`` (else on
    the transitions). ``ring`` (B, 3, N): two rows of prefix scores and the current step's
    scores."""
    b = tl.program_id(0).to(tl.int64)  # 64-bit offsets: B T N may pass 2^31
    L = tl.minimum(tl.load(lengths + b), T)  # never past the buffers, even unvalidated
    r = tl.arange(0, BLOCK)
    al = ring + b * 3 * N
    add = al + 2 * N
    best = tl.full([], 0.0, tl.float64)
    if L > 0:
        _loss_row(add, unary, target, units, b, T, N, 0, r, UNITS, BLOCK)
        tl.debug_barrier()
        for j0 in range(0, N, BLOCK):
            j = j0 + r
            mj = j < N
            first = tl.load(start + b * N + j, mask=mj, other=NEG).to(tl.float64)
            tl.store(al + j, first + tl.load(add + j, mask=mj, other=NEG), mask=mj)
        tl.debug_barrier()
        for t in range(1, L):
            _loss_row(add, unary, target, units, b, T, N, t, r, UNITS, BLOCK)
            tl.debug_barrier()
            if PAIR:
                A = transitions_at(steps, b, T, N, t, False)
            else:
                A = transitions_at(trans, b, T, N, t, SHARED)
            at = (b * T + t) * N
            src, dst = al + ((t - 1) % 2) * N, al + (t % 2) * N
            transition_step(src, A, dst, bp + at, add, N, r, BLOCK, True, True)
            tl.debug_barrier()
        best, label = close(al + ((L - 1) % 2) * N, end + b * N, N, r, BLOCK, True)
        if best > NEG:
            for s in range(0, L - 1):
                t = L - 1 - s
                tl.store(path + b * T + t, label.to(tl.int64))
                label = tl.load(bp + (b * T + t) * N + label).to(tl.int32)
            tl.store(path + b * T, label.to(tl.int64))
    _settle_chain(unary, trans, start, end, target, units, pair, path, value, count, scale, gold, b, L, T, N,
                  best > NEG, target, True, False, SHARED, UNITS, PAIR, BLOCK)


@triton.jit
def _pick_count(best, b, B, K1, hrow, g, MARGIN: tl.constexpr, CUSTOM: tl.constexpr, LOW: tl.constexpr,
                BLOCK_K: tl.constexpr):
    """(value, first maximizing count k) of best[b, k] + h(k) (margin) or h(k) (1 + best[b, k] - g)
    (slack) over the feasible counts (``best`` (B, K1), -inf where infeasible; h: :func:`_h`); with
    LOW, where h(k) < 0, h(k) (1 - low[b, k] - g) from the min table (``best``'s second half)."""
    rk = tl.arange(0, BLOCK_K)
    top = tl.full([], NEG, tl.float64)
    k = tl.full([], 0, tl.int32)
    for k0 in range(0, K1, BLOCK_K):
        kk = k0 + rk
        mk = kk < K1
        score = tl.load(best + b * K1 + kk, mask=mk, other=NEG)
        if CUSTOM:
            h = tl.load(hrow + kk, mask=mk, other=0.0)
        else:
            h = kk.to(tl.float64)
        feasible = score > NEG
        score = tl.where(feasible, score, 0.0)  # no inf * 0 below
        if MARGIN:
            cand = score + h
        else:
            cand = h * (1.0 + score - g)
        cand = tl.where(feasible, cand, NEG)
        if LOW:
            low = tl.load(best + (B + b) * K1 + kk, mask=mk, other=NEG)
            reach = low > NEG
            low_value = h * (1.0 - tl.where(reach, low, 0.0) - g)
            cand = tl.where(h < 0, tl.where(reach, low_value, NEG), cand)
        top, k = argmax_update(top, k, cand, k0, 0)
    return top, k


@triton.jit
def _side(hrow, k, CUSTOM: tl.constexpr, LOW: tl.constexpr):
    """Which table count k was picked from: 1 (the min table) where LOW and h(k) < 0, else 0."""
    side = tl.full([], 0, tl.int64)
    if LOW:
        side = tl.where(_h(hrow, k, CUSTOM) < 0, 1, 0).to(tl.int64)
    return side


@triton.jit
def _choose_kernel(unary, trans, start, end, lengths, target, units, pair, bp, best, last, htab, h_stride,
                   value, path, count, scale, gold, T, N, K1, MARGIN: tl.constexpr, CUSTOM: tl.constexpr,
                   LOW: tl.constexpr, SHARED: tl.constexpr, UNITS: tl.constexpr, PAIR: tl.constexpr,
                   BLOCK_K: tl.constexpr, BLOCK: tl.constexpr):
    """After :func:`_table_kernel`: the first count k maximizing best[k] + h(k) (margin)
    or h(k) (1 + best[k] - s(y)) (slack) over the feasible ones (h: :func:`_h`; with LOW, where
    h(k) < 0, h(k) (1 - low[k] - s(y)) from the min table, the tables' second half), its labeling
    backtracked through the table it came from, then :func:`_settle`."""
    b = tl.program_id(0).to(tl.int64)  # 64-bit offsets: B T N may pass 2^31
    B = tl.num_programs(0).to(tl.int64)
    L = tl.minimum(tl.load(lengths + b), T)  # never past the buffers, even unvalidated
    hrow = htab + b * h_stride
    found_ok = L >= 0
    if L > 0:
        g = _gold_score(unary, trans, start, end, target, b, L, T, N, SHARED)
        top, k = _pick_count(best, b, B, K1, hrow, g, MARGIN, CUSTOM, LOW, BLOCK_K)
        found_ok = top > NEG
        if found_ok:
            kb = k.to(tl.int64)
            side = _side(hrow, kb, CUSTOM, LOW)
            j = tl.load(last + (side * B + b) * K1 + kb).to(tl.int32)
            for s in range(0, L - 1):
                t = L - 1 - s
                tl.store(path + b * T + t, j.to(tl.int64))
                i = tl.load(bp + (((side * B + b) * T + t) * N + j) * K1 + tl.maximum(kb, 0)).to(tl.int32)
                kb = kb - _unit(units, target, b, T, N, t, j, j < N, UNITS)
                if PAIR:
                    kb = kb - _pair_unit(pair, b, T, N, t, i, j, True)
                j = i
            tl.store(path + b * T, j.to(tl.int64))
    _settle_chain(unary, trans, start, end, target, units, pair, path, value, count, scale, gold, b, L, T, N,
                  found_ok, hrow, MARGIN, CUSTOM, SHARED, UNITS, PAIR, BLOCK)


def _outputs(B: int, T: int, dev: torch.device,
             count: torch.dtype = torch.long) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Uninitialized (value, path, count, scale, gold) of a search: the kernels write every entry."""
    value, scale, gold = (torch.empty(B, dtype=torch.float64, device=dev) for _ in range(3))  # no aliases
    path = torch.empty(B, T, dtype=torch.long, device=dev)
    return value, path, torch.empty(B, dtype=count, device=dev), scale, gold


def _loss_args(target: Tensor, units: Tensor | None, pair: Tensor | None) -> tuple[tuple, dict, torch.dtype]:
    """The kernels' loss arguments (units, pair), their modes (UNITS, PAIR, see :func:`_unit`) and
    the count's dtype (float64 for real units, else int64)."""
    mode = 0 if units is None else 1 if units.dim() == 2 else 2
    real = any(x is not None and x.is_floating_point() for x in (units, pair))
    args = tuple(target if x is None else x.contiguous() for x in (units, pair))
    return args, {"UNITS": mode, "PAIR": pair is not None}, torch.float64 if real else torch.long


def fold_search(chain: Chain, target: Tensor, units: Tensor | None = None,
                pair: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Margin rescaling with a loss that folds into the scores, in one launch.

    Parameters
    ----------
    chain : Chain
        Canonical potentials (B, T, N), T > 0.
    target : Tensor (B, T) int64
        The target labels (read inside each length only).
    units : Tensor, optional
        What each label adds to the loss (see :func:`_unit`): None, the Hamming count; (B, T)
        position weights of it; or (B, T, N) per-label costs (0 beyond each length).
    pair : Tensor (B, T - 1, N, N), optional
        Costs of label pairs (0 beyond each length).

    Returns
    -------
    value : Tensor (B,) float64
        max over y' of s(y') + Delta(y, y') - s(y).
    path : Tensor (B, T) int64
        The maximizer (the target where it attains the maximum), -1 beyond each length.
    count : Tensor (B,)
        Delta(y, path): int64, float64 for real units or pair costs.
    scale : Tensor (B,) float64
        d value / d s(path): 1, or 0 where the target was kept.
    gold : Tensor (B,) float64
        s(y).
    """
    B, T, N = chain.shape
    dev = chain.unary.device
    loss, modes, count = _loss_args(target, weights_as_costs(units, target, N), pair)
    out = _outputs(B, T, dev, count)
    steps = target if pair is None else chain.transitions + pair  # (B, T - 1, N, N), float64
    ring = torch.empty(B, 3, N, dtype=torch.float64, device=dev)  # two rows of scores, one of step scores
    # tiles of at least 32 labels: with 16 and shared float64 transitions sm_90 puts 8 B on the stack
    bp = torch.empty(B, T, N, dtype=torch.int16 if N <= 32767 else torch.int32, device=dev)
    launch("lossaug_fold", _fold_kernel, (B,), chain.unary, chain.transitions, chain.start, chain.end,
           chain.lengths, target, *loss, steps, ring, bp, *out, T, N, SHARED=chain.shared, **modes,
           BLOCK=max(32, block(N)), num_warps=FOLD_WARPS_WIDE if units is not None and N > 32 else FOLD_WARPS)
    return out


def table_search(chain: Chain, target: Tensor, margin: bool, htab: Tensor | None = None,
                 units: Tensor | None = None, pair: Tensor | None = None,
                 low: bool = True) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Margin or slack rescaling through the count table: Delta = h(count) with h the identity, or
    the table ``htab`` (B, K + 1) float64 (any row stride, unit stride along the counts); the count
    as for :func:`fold_search` (``units`` and ``pair`` non-negative int64 here), K = T for the
    Hamming count, else ``htab``'s. Slack rescaling with a table also runs the min table (for the
    counts where h < 0) in the same launch, unless ``low`` is False (h known non-negative). Two
    launches; the returns as for :func:`fold_search` (``scale``: 1 (margin) or h(count) (slack), 0
    where the target was kept)."""
    B, T, N = chain.shape
    K1 = T + 1 if htab is None else htab.shape[1]
    dev = chain.unary.device
    loss, modes, count = _loss_args(target, units, pair)
    sides = 2 if htab is not None and not margin and low else 1
    ring = torch.empty(sides, B, 2, N, K1, dtype=torch.float64, device=dev)
    bp = torch.empty(sides, B, T, N, K1, dtype=torch.uint8 if N <= 256 else torch.int16, device=dev)
    best = torch.empty(sides, B, K1, dtype=torch.float64, device=dev)  # written on non-empty rows, read there
    last = torch.empty(sides, B, K1, dtype=torch.long, device=dev)
    launch("hamming_table", _table_kernel, (B, sides), chain.unary, chain.transitions, chain.start, chain.end,
           chain.lengths, target, *loss, ring, bp, best, last, T, N, K1, SHARED=chain.shared, **modes,
           BLOCK_K=block(K1), BLOCK_J=block(N, 32))
    out = _outputs(B, T, dev, count)
    h, h_stride = (target, 0) if htab is None else (htab, htab.stride(0))
    launch("hamming_choose", _choose_kernel, (B,), chain.unary, chain.transitions, chain.start, chain.end,
           chain.lengths, target, *loss, bp, best, last, h, h_stride, *out, T, N, K1, MARGIN=margin,
           CUSTOM=htab is not None, LOW=sides == 2, SHARED=chain.shared, **modes, BLOCK_K=block(K1),
           BLOCK=block(T), num_warps=CHOOSE_WARPS)
    return out


@triton.jit
def _pair_step(path, target, b, T, t, i, j, g, inside):
    """The (i, j) tile of g times the indicator of the step t - 1 -> t of ``path[b]`` minus that of
    ``target[b]`` (0 unless ``inside``)."""
    found = inside & (i == tl.load(path + b * T + t - 1)) & (j == tl.load(path + b * T + t))
    gold = inside & (i == tl.load(target + b * T + t - 1)) & (j == tl.load(target + b * T + t))
    return tl.where(found, g, 0.0) - tl.where(gold, g, 0.0)


@triton.jit
def _indicator_kernel(path, target, lengths, grad, grad_stride, scale, g_unary, g_trans, g_start, g_end, T, N,
                      SHARED: tl.constexpr, BLOCK: tl.constexpr, TILE: tl.constexpr):
    """g = grad[b] * scale[b] times the indicators of ``path[b]`` minus those of ``target[b]``
    inside each length: every entry of the row's gradients is written (0 elsewhere); shared
    transitions get the row's (N, N) sum over time."""
    b = tl.program_id(0).to(tl.int64)  # 64-bit offsets: B T N may pass 2^31
    L = tl.minimum(tl.load(lengths + b), T)  # never past the buffers, even unvalidated
    g = tl.load(grad + b * grad_stride).to(tl.float64) * tl.load(scale + b)
    r = tl.arange(0, BLOCK)
    for t in range(0, T):
        inside = t < L
        p = tl.load(path + b * T + t)
        y = tl.load(target + b * T + t)
        for j0 in range(0, N, BLOCK):
            j = j0 + r
            mj = j < N
            v = tl.where(inside & (j == p), g, 0.0) - tl.where(inside & (j == y), g, 0.0)
            tl.store(g_unary + (b * T + t) * N + j, v, mask=mj)
            if t == 0:
                tl.store(g_start + b * N + j, v, mask=mj)
    last = tl.maximum(L - 1, 0)
    p_end = tl.load(path + b * T + last)
    y_end = tl.load(target + b * T + last)
    for j0 in range(0, N, BLOCK):
        j = j0 + r
        mj = j < N
        v = tl.where((L > 0) & (j == p_end), g, 0.0) - tl.where((L > 0) & (j == y_end), g, 0.0)
        tl.store(g_end + b * N + j, v, mask=mj)
    q = tl.arange(0, TILE)
    for i0 in range(0, N, TILE):
        i = (i0 + q)[:, None]
        for j0 in range(0, N, TILE):
            j = (j0 + q)[None, :]
            tile = (i < N) & (j < N)
            if SHARED:
                acc = tl.zeros([TILE, TILE], tl.float64)
                for step in range(1, L):
                    acc += _pair_step(path, target, b, T, step, i, j, g, step < L)
                tl.store(g_trans + (b * N + i) * N + j, acc, mask=tile)
            else:
                for pos in range(1, T):
                    v = _pair_step(path, target, b, T, pos, i, j, g, pos < L)
                    tl.store(g_trans + ((b * (T - 1) + pos - 1) * N + i) * N + j, v, mask=tile)


def indicator_backward(path: Tensor, target: Tensor, lengths: Tensor, grad: Tensor, scale: Tensor, N: int,
                       shared: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The gradients of ``scale * (s(path) - s(target))`` times ``grad`` (B,), in one launch (and a
    sum over the batch for shared transitions).

    Parameters
    ----------
    path, target : Tensor (B, T) int64
        Labelings, read inside each length (``path`` is -1 beyond it).
    lengths : Tensor (B,) int64
    grad, scale : Tensor (B,)
    N : int
    shared : bool
        Whether the transitions are one (N, N) matrix (else (B, T-1, N, N)).

    Returns
    -------
    tuple of Tensor
        float64 gradients of unary (B, T, N), transitions ((N, N) or (B, T-1, N, N)), start (B, N)
        and end (B, N).
    """
    B, T = path.shape
    dev = path.device
    g_unary = torch.empty(B, T, N, dtype=torch.float64, device=dev)
    g_trans = torch.empty((B, N, N) if shared else (B, max(T - 1, 0), N, N), dtype=torch.float64, device=dev)
    g_start, g_end = (torch.empty(B, N, dtype=torch.float64, device=dev) for _ in range(2))
    launch("lossaug_indicators", _indicator_kernel, (B,), path, target, lengths, grad, grad.stride(0), scale,
           g_unary, g_trans, g_start, g_end, T, N, SHARED=shared, BLOCK=block(N), TILE=block(N, 16))
    return g_unary, g_trans.sum(0) if shared else g_trans, g_start, g_end


@triton.jit
def _window_score(scores, labels, b, L, T, N, S, P):
    """The score of ``labels[b, :L]`` (clamped into [0, N)) under window scores (B, T, P, N) (P = 1:
    order 0), labels before the start read as 0, in float64 (0 when L = 0)."""
    score = tl.full([], 0.0, tl.float64)
    prev = tl.full([], 0, tl.int32)  # (y_{t-l}, ..., y_{t-1}), oldest most significant; < S
    R = S // N  # (S = N^l: the oldest label dropped first, so nothing passes S in 32 bits)
    for t in range(0, L):
        y = tl.minimum(tl.maximum(tl.load(labels + b * T + t), 0), N - 1).to(tl.int32)
        score += tl.load(scores + ((b * T + t) * P + prev % P) * N + y).to(tl.float64)
        prev = (prev % R) * N + y
    return score


@triton.jit
def _newest_first(m, N, ORDER):
    """The state (oldest label most significant) at position ``m`` of the newest-first order."""
    state = m * 0
    for _ in range(0, ORDER):
        state = state * N + m % N
        m = m // N
    return state


@triton.jit
def _window_fold_kernel(scores, lengths, target, units, pair, ring, bp, value, path, count, scale, gold, T, N,
                        S, P, ORDER, UNITS: tl.constexpr, PAIR: tl.constexpr, BLOCK: tl.constexpr):
    """Margin rescaling with h the identity on an order-l chain (``ORDER`` = max(l, 1), S = N^ORDER
    states (y_{t-l+1}, ..., y_t)): Viterbi over the window scores plus :func:`_unit` of y_t (and the
    pair cost of (y_{t-1}, y_t) when PAIR) (ties: the first maximal oldest label, then the first
    maximal state in newest-first order), as ``chain.window._window_path`` on the folded scores,
    then :func:`_settle`."""
    b = tl.program_id(0).to(tl.int64)  # 64-bit offsets: B T N may pass 2^31
    # positions and states in 32 bits (their divisions inline; sm_90 calls a subroutine for 64-bit ones)
    L = tl.minimum(tl.load(lengths + b), T).to(tl.int32)  # never past the buffers, even unvalidated
    r = tl.arange(0, BLOCK)
    al = ring + b * 2 * S
    R = S // N
    top = tl.full([], 0.0, tl.float64)
    if L > 0:
        for s0 in range(0, S, BLOCK):
            s = s0 + r
            first = s < N  # the labels before the start are 0
            g = tl.load(scores + b * T * P * N + s, mask=first, other=NEG).to(tl.float64)
            loss = _unit(units, target, b, T, N, 0, s, first, UNITS).to(tl.float64)
            tl.store(al + s, g + loss, mask=s < S)
        tl.debug_barrier()
        for t in range(1, L):
            src = al + ((t - 1) % 2) * S
            dst = al + (t % 2) * S
            for s0 in range(0, S, BLOCK):
                s = s0 + r  # the new state (rest, j)
                ms = s < S
                rest = s // N
                j = s % N
                loss = _unit(units, target, b, T, N, t, j, ms, UNITS).to(tl.float64)
                best = tl.full([BLOCK], NEG, tl.float64)
                arg = tl.zeros([BLOCK], tl.int32)
                for o in range(0, N):
                    prev = o * R + rest
                    w = tl.load(scores + ((b * T + t) * P + prev % P) * N + j, mask=ms, other=NEG)
                    step = w.to(tl.float64) + loss
                    if PAIR:  # the pair (y_{t-1}, y_t): the previous state's newest label, then j
                        step += _pair_unit(pair, b, T, N, t, prev % N, j, ms).to(tl.float64)
                    cand = tl.load(src + prev, mask=ms, other=NEG) + step
                    better = cand > best  # strict: the first maximal oldest label wins ties
                    best = tl.where(better, cand, best)
                    arg = tl.where(better, o, arg)
                tl.store(dst + s, best, mask=ms)
                tl.store(bp + (b * T + t) * S + s, arg.to(bp.dtype.element_ty), mask=ms)
            tl.debug_barrier()
        fin = al + ((L - 1) % 2) * S
        top = tl.full([], NEG, tl.float64)
        pick = tl.full([], 0, tl.int32)
        for m0 in range(0, S, BLOCK):
            m = m0 + r
            v = tl.load(fin + _newest_first(m, N, ORDER), mask=m < S, other=NEG)
            top, pick = argmax_update(top, pick, v, m0, 0)
        if top > NEG:
            cur = _newest_first(pick, N, ORDER)
            for q in range(0, L - 1):
                t = L - 1 - q
                tl.store(path + b * T + t, cur % N)
                oldest = tl.load(bp + (b * T + t) * S + cur).to(tl.int32)
                cur = oldest * R + cur // N
            tl.store(path + b * T, cur % N)
    tl.debug_barrier()  # the backtrack's scalar stores, read back below
    g_target = _window_score(scores, target, b, L, T, N, S, P)
    found = _window_score(scores, path, b, L, T, N, S, P)
    _settle_counts(target, units, pair, path, value, count, scale, gold, b, L, T, N, g_target, found,
                   top > NEG, target, True, False, UNITS, PAIR, BLOCK)


def window_fold_search(scores: Tensor, order: int, lengths: Tensor, target: Tensor,
                       units: Tensor | None = None,
                       pair: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """:func:`fold_search` for a chain of order l (margin rescaling, h the identity; ``units`` and
    ``pair`` as there, pairs for l >= 1).

    Parameters
    ----------
    scores : Tensor (B, T) + (N,) * (l + 1)
        Window scores (T > 0), as for :func:`structtorch.window_viterbi`.
    order : int
        l.
    lengths : Tensor (B,) int64
    target : Tensor (B, T) int64

    Returns
    -------
    tuple of Tensor
        (value, path, count, scale, gold) as :func:`fold_search` returns them.
    """
    B, T, N = scores.shape[:3]
    dev = scores.device
    states = max(order, 1)
    S = N**states
    loss, modes, count = _loss_args(target, weights_as_costs(units, target, N), pair)
    out = _outputs(B, T, dev, count)
    ring = torch.empty(B, 2, S, dtype=torch.float64, device=dev)
    bp = torch.empty(B, T, S, dtype=torch.int16 if N <= 32767 else torch.int32, device=dev)
    launch("lossaug_window_fold", _window_fold_kernel, (B,), scores.contiguous(), lengths, target, *loss,
           ring, bp, *out, T, N, S, N**order, states, **modes, BLOCK=block(max(S, T)))
    return out


@triton.jit
def _window_table_kernel(scores, lengths, target, units, pair, ring, bp, best, last, T, N, S, P, ORDER, K1,
                         UNITS: tl.constexpr, PAIR: tl.constexpr, BLOCK_K: tl.constexpr,
                         BLOCK_S: tl.constexpr):
    """The count table (:func:`_unit`, and the pair costs when PAIR) of an order-l chain (``ORDER`` =
    max(l, 1), S = N^ORDER states (y_{t-l+1}, ..., y_t), oldest most significant): best[b, k] and
    the last state last[b, k] for every count k, the oldest previous labels in ``bp`` (B, T, S, K1)
    (ties: the first maximal oldest label, then the first maximal state in newest-first order, as
    the folded Viterbi). A second column of programs runs the min table, as :func:`_table`."""
    b, sign, ring, bp, best, last = _table_program(ring, bp, best, last, 2 * S * K1, T * S * K1, K1)
    L = tl.minimum(tl.load(lengths + b), T)  # never past the buffers, even unvalidated
    rk = tl.arange(0, BLOCK_K)
    rs = tl.arange(0, BLOCK_S)
    buf = ring + b * 2 * S * K1
    R = S // N
    if L > 0:
        for s0 in range(0, S, BLOCK_S):
            s = s0 + rs
            ms = s < S
            first = _signed(tl.load(scores + b * T * P * N + s, mask=s < N, other=NEG).to(tl.float64), sign)
            shift = _unit(units, target, b, T, N, 0, s, s < N, UNITS)  # the labels before the start are 0:
            # state s < N is label s
            for k0 in range(0, K1, BLOCK_K):
                k = k0 + rk
                tile = (k[:, None] < K1) & ms[None, :]
                value = tl.where(k[:, None] == shift[None, :], first[None, :], NEG)
                tl.store(buf + s[None, :] * K1 + k[:, None], value, mask=tile)
        tl.debug_barrier()
        for t in range(1, L):
            src = buf + ((t - 1) % 2) * S * K1
            dst = buf + (t % 2) * S * K1
            for s0 in range(0, S, BLOCK_S):
                s = s0 + rs  # the new state (rest, j)
                ms = s < S
                rest = s // N
                j = s % N
                shift = _unit(units, target, b, T, N, t, j, ms, UNITS)
                for k0 in range(0, K1, BLOCK_K):
                    k = k0 + rk
                    tile = (k[:, None] < K1) & ms[None, :]
                    ks = k[:, None] - shift[None, :]
                    reach = tile & (ks >= 0)
                    top = tl.full([BLOCK_K, BLOCK_S], NEG, tl.float64)
                    arg = tl.zeros([BLOCK_K, BLOCK_S], tl.int32)
                    for o in range(0, N):
                        prev = o * R + rest
                        w = tl.load(scores + ((b * T + t) * P + prev % P) * N + j, mask=ms, other=NEG)
                        if PAIR:  # the pair (y_{t-1}, y_t) moves the count it comes from
                            ko = ks - _pair_unit(pair, b, T, N, t, prev % N, j, ms)[None, :]
                            cand = tl.load(src + prev[None, :] * K1 + ko, mask=tile & (ko >= 0), other=NEG)
                        else:
                            cand = tl.load(src + prev[None, :] * K1 + ks, mask=reach, other=NEG)
                        cand += _signed(w.to(tl.float64), sign)[None, :]
                        better = cand > top  # strict: the first maximal oldest label wins ties
                        top = tl.where(better, cand, top)
                        arg = tl.where(better, o, arg)
                    tl.store(dst + s[None, :] * K1 + k[:, None], top, mask=tile)
                    at = ((b * T + t) * S + s[None, :]) * K1 + k[:, None]
                    tl.store(bp + at, arg.to(bp.dtype.element_ty), mask=tile)
            tl.debug_barrier()
        final = buf + ((L - 1) % 2) * S * K1
        for k0 in range(0, K1, BLOCK_K):
            k = k0 + rk
            mk = k < K1
            top = tl.full([BLOCK_K], NEG, tl.float64)
            pick = tl.zeros([BLOCK_K], tl.int32)
            for m0 in range(0, S, BLOCK_S):
                m = m0 + rs
                at = _newest_first(m, N, ORDER)
                tile = mk[:, None] & (m < S)[None, :]
                v = tl.load(final + at[None, :] * K1 + k[:, None], mask=tile, other=NEG)
                top, pick = argmax_update(top, pick, v, m0, 1)
            tl.store(best + b * K1 + k, top, mask=mk)
            tl.store(last + b * K1 + k, _newest_first(pick.to(tl.int64), N, ORDER), mask=mk)


@triton.jit
def _window_choose_kernel(scores, lengths, target, units, pair, bp, best, last, htab, h_stride, value, path,
                          count, scale, gold, T, N, S, P, K1, MARGIN: tl.constexpr, CUSTOM: tl.constexpr,
                          LOW: tl.constexpr, UNITS: tl.constexpr, PAIR: tl.constexpr, BLOCK_K: tl.constexpr,
                          BLOCK: tl.constexpr):
    """After :func:`_window_table_kernel`: the count as :func:`_choose_kernel` picks it, its
    labeling backtracked through the table it came from, then :func:`_settle`."""
    b = tl.program_id(0).to(tl.int64)  # 64-bit offsets: B T N may pass 2^31
    B = tl.num_programs(0).to(tl.int64)
    L = tl.minimum(tl.load(lengths + b), T)  # never past the buffers, even unvalidated
    hrow = htab + b * h_stride
    R = S // N
    g = _window_score(scores, target, b, L, T, N, S, P)
    tl.store(gold + b, g)  # read back after the backtrack: held across it, Triton 3.6 spills it
    found_ok = L >= 0
    if L > 0:
        top, k = _pick_count(best, b, B, K1, hrow, g, MARGIN, CUSTOM, LOW, BLOCK_K)
        found_ok = top > NEG
        if found_ok:
            kb = k.to(tl.int64)
            side = _side(hrow, kb, CUSTOM, LOW)
            # states in 32 bits (their divisions inline; sm_90 calls a subroutine for 64-bit ones)
            cur = tl.load(last + (side * B + b) * K1 + kb).to(tl.int32)
            for q in range(0, L - 1):
                t = L - 1 - q
                j = cur % N
                tl.store(path + b * T + t, j.to(tl.int64))
                oldest = tl.load(bp + (((side * B + b) * T + t) * S + cur) * K1 + kb).to(tl.int32)
                prev = oldest * R + cur // N
                kb = kb - _unit(units, target, b, T, N, t, j, True, UNITS)
                if PAIR:
                    kb = kb - _pair_unit(pair, b, T, N, t, prev % N, j, True)
                cur = prev
            tl.store(path + b * T, (cur % N).to(tl.int64))
    tl.debug_barrier()  # the backtrack's scalar stores, read back below
    g = tl.load(gold + b)
    found = _window_score(scores, path, b, L, T, N, S, P)
    _settle_counts(target, units, pair, path, value, count, scale, gold, b, L, T, N, g, found, found_ok, hrow,
                   MARGIN, CUSTOM, UNITS, PAIR, BLOCK)


def window_table_search(scores: Tensor, order: int, lengths: Tensor, target: Tensor, margin: bool,
                        htab: Tensor | None = None, units: Tensor | None = None, pair: Tensor | None = None,
                        low: bool = True) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """:func:`table_search` for a chain of order l (``scores`` (B, T) + (N,) * (l + 1), T > 0):
    both rescalings, h the identity or the table ``htab`` (B, K + 1), the count and ``low`` as
    there, in two launches."""
    B, T, N = scores.shape[:3]
    dev = scores.device
    states = max(order, 1)
    S = N**states
    K1 = T + 1 if htab is None else htab.shape[1]
    loss, modes, count = _loss_args(target, weights_as_costs(units, target, N), pair)
    sides = 2 if htab is not None and not margin and low else 1
    ring = torch.empty(sides, B, 2, S, K1, dtype=torch.float64, device=dev)
    bp = torch.empty(sides, B, T, S, K1, dtype=torch.uint8 if N <= 256 else torch.int16, device=dev)
    best = torch.empty(sides, B, K1, dtype=torch.float64, device=dev)  # written on non-empty rows, read there
    last = torch.empty(sides, B, K1, dtype=torch.long, device=dev)
    scores = scores.contiguous()
    launch("hamming_window_table", _window_table_kernel, (B, sides), scores, lengths, target, *loss, ring, bp,
           best, last, T, N, S, N**order, states, K1, **modes, BLOCK_K=block(K1), BLOCK_S=block(S, 32),
           num_warps=TABLE_WARPS)
    out = _outputs(B, T, dev, count)
    h, h_stride = (target, 0) if htab is None else (htab, htab.stride(0))
    launch("hamming_window_choose", _window_choose_kernel, (B,), scores, lengths, target, *loss, bp, best,
           last, h, h_stride, *out, T, N, S, N**order, K1, MARGIN=margin, CUSTOM=htab is not None,
           LOW=sides == 2, **modes, BLOCK_K=block(K1), BLOCK=block(T, 32), num_warps=CHOOSE_WARPS)
    return out


@triton.jit
def _window_indicator_kernel(path, target, lengths, grad, grad_stride, scale, g_scores, T, N, S, P,
                             BLOCK: tl.constexpr):
    """g = grad[b] * scale[b] times the indicators of the windows of ``path[b]`` minus those of
    ``target[b]`` inside each length, into every entry of the row's (T, P * N) gradient."""
    b = tl.program_id(0).to(tl.int64)  # 64-bit offsets: B T N may pass 2^31
    L = tl.minimum(tl.load(lengths + b), T)  # never past the buffers, even unvalidated
    g = tl.load(grad + b * grad_stride).to(tl.float64) * tl.load(scale + b)
    r = tl.arange(0, BLOCK)
    W = P * N
    found = tl.full([], 0, tl.int64)
    gold = tl.full([], 0, tl.int64)
    for t in range(0, T):
        inside = t < L
        p = tl.minimum(tl.maximum(tl.load(path + b * T + t), 0), N - 1)
        y = tl.minimum(tl.maximum(tl.load(target + b * T + t), 0), N - 1)
        at_found = (found % P) * N + p
        at_gold = (gold % P) * N + y
        for k0 in range(0, W, BLOCK):
            k = k0 + r
            v = tl.where(inside & (k == at_found), g, 0.0) - tl.where(inside & (k == at_gold), g, 0.0)
            tl.store(g_scores + (b * T + t) * W + k, v, mask=k < W)
        found = (found * N + p) % S
        gold = (gold * N + y) % S


def window_indicator_backward(path: Tensor, target: Tensor, lengths: Tensor, grad: Tensor, scale: Tensor,
                              shape: tuple[int, ...]) -> Tensor:
    """The float64 gradient (``shape``, the window scores' (B, T) + (N,) * (l + 1)) of
    ``grad * scale * (s(path) - s(target))``, ``grad`` and ``scale`` (B,), in one launch."""
    B, T, N = shape[:3]
    order = len(shape) - 3
    g_scores = torch.empty(shape, dtype=torch.float64, device=path.device)
    launch("lossaug_window_indicators", _window_indicator_kernel, (B,), path, target, lengths, grad,
           grad.stride(0), scale, g_scores, T, N, N ** max(order, 1), N**order, BLOCK=block(N ** (order + 1)))
    return g_scores


@triton.jit
def _segment_count(target, starts, b, s, e, L, n, inner, T, KIND: tl.constexpr):
    """What segments [s, e) of labels n (a vector over n, or a scalar) add to the count of the
    segment loss ``KIND`` against the target segmentation (target, starts) (B, T), given
    ``inner``, the target starts inside (s, e) (the position loss, KIND 0, counts its mistakes as
    the segments grow):

    - 1, "segment": 1, or -1 when [s, e) of label n is a target segment;
    - 2, "boundary": (s is not a target start) + the target starts inside (s, e).
    """
    opens = tl.load(starts + b * T + s).to(tl.int64)
    if KIND == 1:
        closes = (e >= L) | (tl.load(starts + b * T + e, mask=e < L, other=0) != 0)
        same = (opens != 0) & (inner == 0) & closes & (tl.load(target + b * T + s) == n)
        count = 1 - 2 * same.to(tl.int64)
    else:
        count = 1 - opens + inner + n * 0
    return count


@triton.jit
def _offset(starts, b, L, T, KIND: tl.constexpr):
    """The count of the empty prefix: the target's segments (its starts inside L) for the segment
    loss (KIND 1), else 0."""
    total = tl.full([], 0, tl.int64)
    if KIND == 1:
        for t in range(0, L):
            total += tl.load(starts + b * T + t).to(tl.int64)
    return total


@triton.jit
def _segment_step(b, e, d, n, ok, carry, tcarry, content, length, segment, tracks, plif, T, S, N, P, low,
                  high, pscale, sign, HAS_SEGMENT: tl.constexpr, HAS_PLIF: tl.constexpr):
    """Segments [e - d, e) of labels n (a vector; ``ok`` masks the lengths allowed), grown by the
    position e - d from the running content and track sums (``carry``, ``tcarry``): (their signed
    scores but the boundary's, carry, tcarry). -inf content stays -inf for every longer segment."""
    s = e - d
    carry += _signed(tl.load(content + (b * T + s) * N + n, mask=ok, other=0.0).to(tl.float64), sign)
    v = carry + _signed(tl.load(length + (b * S + d - 1) * N + n, mask=ok, other=0.0).to(tl.float64), sign)
    if HAS_SEGMENT:
        at = ((b * T + e - 1) * S + d - 1) * N + n
        v += _signed(tl.load(segment + at, mask=ok, other=0.0).to(tl.float64), sign)
    if HAS_PLIF:  # PLiF_n of the track mean, interpolated on P points in [low, high]
        tcarry += tl.load(tracks + (b * T + s) * N + n, mask=ok, other=0.0).to(tl.float64)
        pos = (tl.minimum(tl.maximum(tcarry * reciprocal(d), low), high) - low) * pscale
        left = tl.minimum(pos.to(tl.int32), P - 2)
        y0 = tl.load(plif + n * P + left, mask=ok, other=0.0).to(tl.float64)
        y1 = tl.load(plif + n * P + left + 1, mask=ok, other=0.0).to(tl.float64)
        v += sign * (y0 + (pos - left) * (y1 - y0))
    return v, carry, tcarry


@triton.jit
def _count_transitions(al, ic, bp_m, trans, e, K1, N, sign, rk, rn, BLOCK_K: tl.constexpr,
                       BLOCK_N: tl.constexpr):
    """inc[e][k][n] = max_m alpha[e][k][m] + trans[m, n] (signed; the count is unchanged), with the
    first maximal m in ``bp_m``."""
    for n0 in range(0, N, BLOCK_N):
        n = n0 + rn
        mn = n < N
        for k0 in range(0, K1, BLOCK_K):
            k = k0 + rk
            top = tl.full([BLOCK_K, BLOCK_N], NEG, tl.float64)
            arg = tl.zeros([BLOCK_K, BLOCK_N], tl.int32)
            for m in range(0, N):
                a = tl.load(al + (e * K1 + k) * N + m, mask=k < K1, other=NEG)
                w = _signed(tl.load(trans + m * N + n, mask=mn, other=NEG).to(tl.float64), sign)
                cand = a[:, None] + w[None, :]
                better = cand > top  # strict: the first maximal previous label wins ties
                top = tl.where(better, cand, top)
                arg = tl.where(better, m, arg)
            at = (e * K1 + k[:, None]) * N + n[None, :]
            tile = (k[:, None] < K1) & mn[None, :]
            tl.store(ic + at, top, mask=tile)
            tl.store(bp_m + at, arg.to(bp_m.dtype.element_ty), mask=tile)


@triton.jit
def _unit_weight(weights, at, WEIGHTED: tl.constexpr):
    """What one wrong position adds to the count (int64): its weight at ``at`` with WEIGHTED, else 1."""
    unit = tl.full([], 1, tl.int64)
    if WEIGHTED:
        unit = tl.load(weights + at).to(tl.int64)
    return unit


@triton.jit
def _semimarkov_table_kernel(content, length, boundary, segment, trans, start, end, lengths, tracks, plif,
                             target, target_starts, weights, gold, inc, alpha, bp_d, bp_m, best, last, T, S,
                             N, P, low: tl.float64, high: tl.float64, pscale: tl.float64, K1,
                             KIND: tl.constexpr, WEIGHTED: tl.constexpr, HAS_SEGMENT: tl.constexpr,
                             HAS_PLIF: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_N: tl.constexpr):
    """The count table of a segmentation (the tables of ``lossaug._torch.semimarkov_tables``, one
    program per sequence): alpha[e][k][n], the best prefix of [0, e) whose last segment has label n
    and whose count is k, and inc[e][k][n] = max_m alpha[e][k][m] + trans[m, n]; counts start at
    :func:`_offset` and stay in [0, K1); a segment adds :func:`_segment_count` (KIND 0: its
    positions whose label is not n, each counting its integer weight with WEIGHTED). Ties: the shortest
    segment, then the first previous label, then the first last label. A second column of programs
    runs the min table on the negated scores, as :func:`_table`; the first writes the target's
    score into ``gold``."""
    b = tl.program_id(0).to(tl.int64)  # 64-bit offsets: B T N may pass 2^31
    side = tl.program_id(1).to(tl.int64)
    B = tl.num_programs(0).to(tl.int64)
    sign = 1.0 - 2.0 * side.to(tl.float64)
    plane = (T + 1) * K1 * N
    L = tl.minimum(tl.load(lengths + b), T)  # never past the buffers, even unvalidated
    if side == 0:
        g = segmentation_score(content, length, boundary, segment, trans, start, end, tracks, plif, target,
                               target_starts, b, L, T, S, N, P, low, high, pscale, HAS_SEGMENT, HAS_PLIF)
        tl.store(gold + b, g)
    row = (side * B + b) * plane
    ic, al, bp_d, bp_m = inc + row, alpha + row, bp_d + row, bp_m + row
    best += (side * B + b) * K1
    last += (side * B + b) * K1
    rn = tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    start_count = _offset(target_starts, b, L, T, KIND)
    if L > 0:
        for n0 in range(0, N, BLOCK_N):
            n = n0 + rn
            first_score = _signed(tl.load(start + b * N + n, mask=n < N, other=NEG).to(tl.float64), sign)
            for k0 in range(0, K1, BLOCK_K):
                k = k0 + rk
                tile = (k[:, None] < K1) & (n < N)[None, :]
                value = tl.where(k[:, None] == start_count, first_score[None, :], NEG)
                tl.store(ic + k[:, None] * N + n[None, :], value, mask=tile)
        tl.debug_barrier()
        for e in range(1, L + 1):
            for n0 in range(0, N, BLOCK_N):
                n = n0 + rn
                mn = n < N
                dmax = _max_length(b, e, n, mn, boundary, T, S, N)
                closing = tl.load(boundary + (b * T + e - 1) * N + n, mask=mn, other=0.0).to(tl.float64)
                closing = _signed(closing, sign)
                for k0 in range(0, K1, BLOCK_K):
                    k = k0 + rk
                    tile = (k[:, None] < K1) & mn[None, :]
                    top = tl.full([BLOCK_K, BLOCK_N], NEG, tl.float64)
                    arg = tl.zeros([BLOCK_K, BLOCK_N], tl.int32)
                    carry = tl.zeros([BLOCK_N], tl.float64)
                    tcarry = tl.zeros([BLOCK_N], tl.float64)
                    mistakes = tl.zeros([BLOCK_N], tl.int64)
                    inner = tl.full([], 0, tl.int64)
                    for d in range(1, tl.max(dmax, axis=0) + 1):
                        s = e - d
                        ok = (d <= dmax) & mn
                        v, carry, tcarry = _segment_step(b, e, d, n, ok, carry, tcarry, content, length,
                                                         segment, tracks, plif, T, S, N, P, low, high, pscale,
                                                         sign, HAS_SEGMENT, HAS_PLIF)
                        if KIND == 0:  # one more position, s
                            unit = _unit_weight(weights, b * T + s, WEIGHTED)
                            mistakes += tl.where(tl.load(target + b * T + s) != n, unit, 0)
                            count = mistakes
                        else:
                            if d > 1:  # one more position inside (s, e): s + 1
                                inner += tl.load(target_starts + b * T + s + 1).to(tl.int64)
                            count = _segment_count(target, target_starts, b, s, e, L, n, inner, T, KIND)
                        ks = k[:, None] - count[None, :]
                        reach = tile & ok[None, :] & (ks >= 0) & (ks < K1)
                        cand = tl.load(ic + (s * K1 + ks) * N + n[None, :], mask=reach, other=NEG)
                        cand += (v + closing)[None, :]
                        better = cand > top  # strict: the shortest segment wins ties
                        top = tl.where(better, cand, top)
                        arg = tl.where(better, d, arg).to(tl.int32)
                    at = (e * K1 + k[:, None]) * N + n[None, :]
                    tl.store(al + at, top, mask=tile)
                    tl.store(bp_d + at, arg.to(bp_d.dtype.element_ty), mask=tile)
            tl.debug_barrier()
            if e < L:
                _count_transitions(al, ic, bp_m, trans, e, K1, N, sign, rk, rn, BLOCK_K, BLOCK_N)
                tl.debug_barrier()
        for k0 in range(0, K1, BLOCK_K):  # as _close_table (which sm_90 compiles with a stack here)
            k = k0 + rk
            mk = k < K1
            top = tl.full([BLOCK_K], NEG, tl.float64)
            label = tl.zeros([BLOCK_K], tl.int32)
            for n0 in range(0, N, BLOCK_N):
                n = n0 + rn
                mn = n < N
                tile = mk[:, None] & mn[None, :]
                v = tl.load(al + (L * K1 + k[:, None]) * N + n[None, :], mask=tile, other=NEG)
                v += _signed(tl.load(end + b * N + n, mask=mn, other=NEG).to(tl.float64), sign)[None, :]
                top, label = argmax_update(top, label, v, n0, 1)
            tl.store(best + k, top, mask=mk)
            tl.store(last + k, label.to(tl.int64), mask=mk)


@triton.jit
def _semimarkov_choose_kernel(content, length, boundary, segment, trans, start, end, lengths, tracks, plif,
                              target, target_starts, weights, bp_d, bp_m, best, last, htab, h_stride, value,
                              labels, starts, count, scale, gold, T, S, N, P, low: tl.float64,
                              high: tl.float64, pscale: tl.float64, K1, MARGIN: tl.constexpr,
                              CUSTOM: tl.constexpr, LOW: tl.constexpr, KIND: tl.constexpr,
                              WEIGHTED: tl.constexpr, HAS_SEGMENT: tl.constexpr, HAS_PLIF: tl.constexpr,
                              BLOCK_K: tl.constexpr, BLOCK: tl.constexpr):
    """After :func:`_semimarkov_table_kernel`: the count k as :func:`_choose_kernel` picks it (the
    found segmentation's count is k itself), its segmentation backtracked through the table it came
    from, then the values of both segmentations, the tie rule (the target where it attains the
    maximum) and the outputs as :func:`_settle` writes them (labels -1 and starts False beyond L)."""
    b = tl.program_id(0).to(tl.int64)  # 64-bit offsets: B T N may pass 2^31
    B = tl.num_programs(0).to(tl.int64)
    L = tl.minimum(tl.load(lengths + b), T)  # never past the buffers, even unvalidated
    hrow = htab + b * h_stride
    plane = (T + 1) * K1 * N
    g = tl.load(gold + b)  # the target's score, from the table's launch
    _clear_segmentation(labels + b * T, starts + b * T, T, BLOCK)
    found_ok = L >= 0
    H = tl.full([], 0, tl.int64)
    if L > 0:
        top, k = _pick_count(best, b, B, K1, hrow, g, MARGIN, CUSTOM, LOW, BLOCK_K)
        found_ok = top > NEG
        if found_ok:
            H = k.to(tl.int64)
            kb = H
            rows = (_side(hrow, kb, CUSTOM, LOW) * B + b)
            label = tl.load(last + rows * K1 + kb)
            s = L  # the current segment [s, e), walked back position by position
            e = L
            mistakes = tl.full([], 0, tl.int64)
            inner = tl.full([], 0, tl.int64)
            for q in range(0, L):
                t = L - 1 - q
                if t + 1 == s:  # a segment ends at t + 1
                    e = t + 1
                    s = e - tl.load(bp_d + rows * plane + (e * K1 + kb) * N + label).to(tl.int64)
                    mistakes = mistakes * 0
                    inner = inner * 0
                tl.store(labels + b * T + t, label)
                if KIND == 0:
                    unit = _unit_weight(weights, b * T + t, WEIGHTED)
                    mistakes += tl.where(tl.load(target + b * T + t) != label, unit, 0)
                else:
                    inner += tl.where(t > s, tl.load(target_starts + b * T + t).to(tl.int64), 0)
                if t == s:  # its first position: the count, then the previous segment's label
                    tl.store(starts + b * T + s, 1)
                    if KIND == 0:
                        kb -= mistakes
                    else:
                        kb -= _segment_count(target, target_starts, b, s, e, L, label, inner, T, KIND)
                    at = rows * plane + (s * K1 + tl.maximum(kb, 0)) * N + label
                    label = tl.load(bp_m + at, mask=s > 0, other=0).to(tl.int64)
    tl.debug_barrier()  # the backtrack's scalar stores, read back below
    g = tl.load(gold + b)  # again: held across the backtrack, sm_90 spills it (weighted, Triton 3.8)
    found = segmentation_score(content, length, boundary, segment, trans, start, end, tracks, plif, labels,
                               starts, b, L, T, S, N, P, low, high, pscale, HAS_SEGMENT, HAS_PLIF)
    delta = _h(hrow, H, CUSTOM)
    h0 = _h(hrow, H * 0, CUSTOM)
    if MARGIN:
        v_found = found + delta - g
        slope = tl.full([], 1.0, tl.float64)
    else:
        v_found = delta * (1.0 + found - g)
        slope = delta
    v_found = tl.where(found_ok, v_found, NEG)
    keep = h0 >= v_found  # ties: the target itself (a zero subgradient); its count is 0
    if keep:
        r = tl.arange(0, BLOCK)
        for t0 in range(0, L, BLOCK):
            t = t0 + r
            tl.store(labels + b * T + t, tl.load(target + b * T + t, mask=t < L, other=0), mask=t < L)
            tl.store(starts + b * T + t, tl.load(target_starts + b * T + t, mask=t < L, other=0), mask=t < L)
    tl.store(value + b, tl.where(keep, h0, v_found))
    tl.store(count + b, tl.where(keep, 0, H))
    tl.store(scale + b, tl.where(keep, 0.0, slope))


def table_warps(kind: str, has_segment: bool) -> int:
    """The warps of the semi-Markov table's launch (:data:`TABLE_WARPS`,
    :data:`TABLE_WARPS_SEGMENTS`)."""
    return TABLE_WARPS_SEGMENTS if kind == "segment" and not has_segment else TABLE_WARPS


def _narrow(n: int) -> torch.dtype:
    """The smallest integer dtype holding 0..n: the backpointers'."""
    return torch.uint8 if n <= 255 else torch.int16 if n <= 32767 else torch.int32


def semimarkov_table_search(sm: SemiMarkov, labels: Tensor, starts: Tensor, kind: str, K: int, margin: bool,
                            htab: Tensor | None, weights: Tensor | None = None,
                            min_table: bool = True) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """The whole loss-augmented search of a segmentation through the count table, in two launches.

    Parameters
    ----------
    sm : SemiMarkov
        Canonical potentials (B, T, S, N), T > 0.
    labels, starts : Tensor (B, T)
        The target segmentation (int64, bool), read inside each length.
    kind : str
        The loss counted: "hamming" (weighted by ``weights``), "segment" or "boundary" (see
        ``lossaug._torch.SEGMENT_LOSSES``; "zero_one" is "segment" with h capped at 1 in ``htab``).
    K : int
        A bound on every count (the table's size is K + 1).
    margin : bool
        Margin (else slack) rescaling.
    htab : Tensor (B, K + 1) float64 or None
        h over the counts (unit stride along them), or None for the identity; slack rescaling with a
        table also runs the min table, unless ``min_table`` is False (h known to be non-negative).
    weights : Tensor (B, T) int64, optional
        "hamming" only: the integer weight each wrong position counts (0 beyond each length).

    Returns
    -------
    value, labels, starts, count, scale, gold
        (B,) float64 value, the found segmentation (B, T) (the target's where it attains the
        maximum), its count (B,) int64, the value's slope in its score (B,) float64 (0 where the
        target was kept) and the target's score (B,) float64.
    """
    B, T, S, N = sm.shape
    dev = sm.content.device
    K1 = K + 1
    sides = 2 if htab is not None and not margin and min_table else 1
    inc, alpha = (torch.empty(sides, B, T + 1, K1, N, dtype=torch.float64, device=dev) for _ in range(2))
    bp_d = torch.empty(sides, B, T + 1, K1, N, dtype=_narrow(S), device=dev)
    bp_m = torch.empty(sides, B, T + 1, K1, N, dtype=_narrow(N), device=dev)
    best = torch.empty(sides, B, K1, dtype=torch.float64, device=dev)  # written on non-empty rows, read there
    last = torch.empty(sides, B, K1, dtype=torch.long, device=dev)
    tensors = _inputs(sm)
    tracks, ordinates, P, low, high, pscale = _plif_args(sm)
    labels, starts = labels.contiguous(), starts.contiguous()
    meta = dict(KIND=SEGMENT_KINDS[kind], WEIGHTED=weights is not None,
                HAS_SEGMENT=sm.segment_scores is not None, HAS_PLIF=sm.segment_plif is not None)
    weights = labels if weights is None else weights.contiguous()  # unweighted: never read
    value, scale, gold = (torch.empty(B, dtype=torch.float64, device=dev) for _ in range(3))
    launch("semimarkov_hamming_table", _semimarkov_table_kernel, (B, sides), *tensors, sm.lengths, tracks,
           ordinates, labels, starts, weights, gold, inc, alpha, bp_d, bp_m, best, last, T, S, N, P, low,
           high, pscale, K1, BLOCK_K=TABLE_COUNTS, BLOCK_N=block(N, TABLE_LABELS),
           num_warps=table_warps(kind, sm.segment_scores is not None), **meta)
    found = torch.empty(B, T, dtype=torch.long, device=dev)
    found_starts = torch.empty(B, T, dtype=torch.bool, device=dev)
    count = torch.empty(B, dtype=torch.long, device=dev)
    h, h_stride = (value, 0) if htab is None else (htab, htab.stride(0))
    launch("semimarkov_hamming_choose", _semimarkov_choose_kernel, (B,), *tensors, sm.lengths, tracks,
           ordinates, labels, starts, weights, bp_d, bp_m, best, last, h, h_stride, value, found,
           found_starts, count, scale, gold, T, S, N, P, low, high, pscale, K1, MARGIN=margin,
           CUSTOM=htab is not None, LOW=sides == 2, BLOCK_K=block(K1), BLOCK=block(T),
           num_warps=MIN_TABLE_CHOOSE_WARPS if sides == 2 else 4, **meta)
    return value, found, found_starts, count, scale, gold
