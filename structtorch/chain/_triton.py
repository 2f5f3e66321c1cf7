"""Linear-chain dynamic programs as fused Triton kernels ("triton" backend).

One launch per call (sampling: two), one program per sequence: the program runs the whole recursion over time
for its row, tiled over labels (``BLOCK`` x ``BLOCK`` tiles of the transition matrix, so any N
compiles), in float64 whatever the input dtype, as the compiled CPU kernels do:

- one forward kernel for both semirings (``VITERBI``, as in ``semimarkov/_triton.py``): Viterbi
  runs max-plus with backpointers (int16 when N <= 32767) and the backtrace; the log-partition
  runs the same recursion by online log-sum-exp per tile, storing alpha;
- the backward: beta by the same recursion run backwards, node marginals, and edge marginals
  (per position, or summed over time per sequence for shared transitions);
- k-best: the k-list Viterbi of ``_torch.kbest`` (the K best scores per label, each with the code
  ``label * K + rank`` of its predecessor), the final list and the backtrace of its K paths;
- sampling: after the log-partition's forward, one program per sample and sequence draws the
  labels backwards by the exponential race of ``_torch.sample`` on noise drawn by the caller;
- order-l windows: Viterbi over the N^l states of ``_torch.window_dp`` (window scores read in
  place, order 0 as order 1 with a zero stride over the previous label).

Few long sequences (B too small to fill a GPU, T long) take the parallel-in-time kernels of
:mod:`structtorch.chain._triton_scan` instead (chosen by ``_ops.kernels_for``), for Viterbi, the
log-partition, its backward, the CRF loss and marginals (the same contracts).

The tile loop and the reductions come from :mod:`structtorch._triton_common`.

On CUDA tensors they compile for the GPU; with ``TRITON_INTERPRET=1`` set before Triton is imported
they run in Triton's interpreter on CPU tensors (slow: for tests). Ties are broken as on every other
backend: the first maximal index at every step.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from .._triton_common import (
    NEG,
    POS,
    argmax_update,
    block,
    close,
    launch,
    lse_finish,
    lse_update,
    per_triton,
    transition_step,
    transitions_at,
)
from .._triton_common import load_tile as _tile
from . import _torch
from .layout import Chain

BACKWARD_TILE = 16
"""The backward's largest label tile: it holds two float64 tiles (scores and edge marginals), which
spill registers on sm_90 at 32 x 32 and 64 x 64 (``tests/compile_kernels.py`` reads the cubins)."""

KBEST_TILE = 16
"""The k-best kernel's largest label tile: it holds a float64 tile of candidates and an int32 tile
of their codes, which spill registers on sm_90 at 32 x 32 (``tests/compile_kernels.py``)."""

KBEST_WARPS = per_triton(4, {(3, 9): 2})
"""Warps of the k-best kernel: with 4, Triton 3.9 puts 8 B on the stack on sm_90 (56 registers),
with 2 nothing; 3.6 and 3.8 are clean at Triton's 4."""

MARGINALS_BACKWARD_WARPS = per_triton(4, {(3, 6): 2, (3, 9): 8})
"""Warps of the marginals' backward: with Triton 3.9 at 4 (and 2) its float64 shared variant puts
8 B on the stack on sm_90, at 8 nothing; with 3.6 at 4 (and 8) some variants put 8 B there, at 2
none; 3.8 is clean at Triton's 4."""

FORWARD_WARPS = 2
"""Warps of the forward kernel at the 16-label tile (N <= 16; larger tiles take Triton's 4): a
16 x 16 tile is 4 entries per thread. With 4, Triton 3.6 (not 3.8) puts 16 B of its float64
log-partition on the stack on sm_90 (``tests/compile_kernels.py``)."""

BACKWARD_WARPS = 8
"""Warps of the backward kernel: with 4, Triton 3.6 puts 8-16 B of the CRF-loss variant on the
stack on sm_90, with 8 neither 3.6 nor 3.8 does."""

WINDOW_WARPS = 8
"""Warps of the window kernel at its largest (64 x 64) tiles: with 4, Triton 3.6 puts 800 B on the
stack on sm_90 (255 registers), with 8 nothing; smaller tiles take Triton's 4."""

NO_CODE = tl.constexpr(2**31 - 1)  # above every candidate's code i * k + rank


@triton.jit
def _init_alpha(out, unary, start, b, T, N, rj, BLOCK: tl.constexpr):
    """out[j] = start[b, j] + unary[b, 0, j] in float64."""
    for j0 in range(0, N, BLOCK):
        j = j0 + rj
        mj = j < N
        s = tl.load(start + b * N + j, mask=mj, other=NEG).to(tl.float64)
        u = tl.load(unary + b * T * N + j, mask=mj, other=NEG).to(tl.float64)
        tl.store(out + j, s + u, mask=mj)


@triton.jit
def _label(labels, b, T, N, t):
    """labels[b, t] clamped into [0, N) (never a read out of bounds, even unvalidated)."""
    return tl.minimum(tl.maximum(tl.load(labels + b * T + t), 0), N - 1).to(tl.int64)


@triton.jit
def _gold_score(unary, trans, start, end, labels, b, L, T, N, SHARED: tl.constexpr):
    """The score of the labeling ``labels[b, :L]`` in float64 (0 when L = 0)."""
    score = tl.full([], 0.0, tl.float64)
    if L > 0:
        y = _label(labels, b, T, N, 0)
        score = tl.load(start + b * N + y).to(tl.float64) + tl.load(unary + b * T * N + y).to(tl.float64)
        for t in range(1, L):
            z = _label(labels, b, T, N, t)
            A = transitions_at(trans, b, T, N, t, SHARED)
            u = tl.load(unary + (b * T + t) * N + z).to(tl.float64)
            score += tl.load(A + y * N + z).to(tl.float64) + u
            y = z
        score += tl.load(end + b * N + y).to(tl.float64)
    return score


@triton.jit
def _forward_kernel(unary, trans, start, end, lengths, alpha, bp, path, out, labels, nll, T, N, ROWS,
                    VITERBI: tl.constexpr, GOLD: tl.constexpr, SHARED: tl.constexpr, BLOCK: tl.constexpr):
    """alpha by max-plus (VITERBI) or log-sum-exp over time, step t in row t % ROWS of the
    sequence's (ROWS, N) slice of ``alpha`` (Viterbi keeps a ring of 2, the log-partition all T).
    ``out[b]``: the best score or logZ (0 on empty rows). Viterbi stores backpointers into ``bp``
    (B, T, N), backtraces feasible rows into ``path`` (B, T) and writes -1 everywhere else. With
    GOLD, ``nll[b]`` = logZ - score(labels[b]), +inf on rows without a feasible labeling."""
    b = tl.program_id(0).to(tl.int64)  # 64-bit offsets: B T N may pass 2^31
    L = tl.minimum(tl.load(lengths + b), T)  # never past the buffers, even unvalidated
    r = tl.arange(0, BLOCK)
    al = alpha + b * ROWS * N
    result = tl.full([], 0.0, tl.float64)
    if L > 0:
        _init_alpha(al, unary, start, b, T, N, r, BLOCK)
        tl.debug_barrier()
        for t in range(1, L):
            A = transitions_at(trans, b, T, N, t, SHARED)
            at = (b * T + t) * N
            transition_step(al + ((t - 1) % ROWS) * N, A, al + (t % ROWS) * N, bp + at, unary + at, N, r,
                            BLOCK, VITERBI, True)
            tl.debug_barrier()
        result, label = close(al + ((L - 1) % ROWS) * N, end + b * N, N, r, BLOCK, VITERBI)
        if VITERBI:
            if result > NEG:
                for s in range(0, L - 1):
                    t = L - 1 - s
                    tl.store(path + b * T + t, label.to(tl.int64))
                    label = tl.load(bp + (b * T + t) * N + label).to(tl.int32)
                tl.store(path + b * T, label.to(tl.int64))
    if VITERBI:  # -1 beyond the length, and everywhere on infeasible rows
        first = tl.where(result > NEG, L, 0)
        for t0 in range(0, T, BLOCK):
            t = t0 + r
            tl.store(path + b * T + t, tl.full([BLOCK], -1, tl.int64), mask=(t < T) & (t >= first))
    if GOLD:
        gold = _gold_score(unary, trans, start, end, labels, b, L, T, N, SHARED)
        tl.store(nll + b, tl.where(result == NEG, POS, result - tl.where(result == NEG, 0.0, gold)))
    tl.store(out + b, result)


@triton.jit
def _fill_zero(ptr, lo, hi, r, BLOCK: tl.constexpr):
    """ptr[lo:hi] = 0."""
    for k0 in range(lo, hi, BLOCK):
        k = k0 + r
        tl.store(ptr + k, tl.zeros([BLOCK], tl.float64), mask=k < hi)


@triton.jit
def _zero_gradients(g_unary, g_trans, g_start, g_end, b, L, live, T, N, r, BLOCK: tl.constexpr,
                    SHARED: tl.constexpr, EDGES: tl.constexpr):
    """Zeros where sequence b's gradients get no value: g_unary from position L on (from 0 when
    not ``live``), g_trans (with EDGES: all of a shared (N, N) block, which is accumulated into,
    else from step L - 1 on), g_start and g_end when not ``live``; then a barrier."""
    first = tl.where(live, L, 0)
    _fill_zero(g_unary + b * T * N, first * N, T * N, r, BLOCK)
    if EDGES:
        if SHARED:
            _fill_zero(g_trans + b * N * N, 0, N * N, r, BLOCK)
        else:
            steps = tl.maximum(T - 1, 0)
            _fill_zero(g_trans + b * steps * N * N, tl.maximum(first - 1, 0) * N * N, steps * N * N, r, BLOCK)
    if not live:
        _fill_zero(g_start + b * N, 0, N, r, BLOCK)
        _fill_zero(g_end + b * N, 0, N, r, BLOCK)
    tl.debug_barrier()


@triton.jit
def _beta_candidates(add, A, nxt, i, mi, j, mj, N):
    """The (BLOCK, BLOCK) tile A[i, j] + add[j] + nxt[j] in float64 (``add`` the unary row of
    t + 1, ``nxt`` beta[t + 1]): what beta[t][i] sums over j."""
    u = tl.load(add + j, mask=mj, other=NEG).to(tl.float64)
    return _tile(A, i, mi, j, mj, N) + (u + tl.load(nxt + j, mask=mj, other=NEG))[None, :]


@triton.jit
def _store_node(row, first, last, is_first, is_last, j, mj, v):
    """row[j] = v, and first[j] / last[j] = v at the first / last position (start and end
    gradients)."""
    tl.store(row + j, v, mask=mj)
    if is_first:
        tl.store(first + j, v, mask=mj)
    if is_last:
        tl.store(last + j, v, mask=mj)


@triton.jit
def _normalize_node(row, total, g, first, last, is_first, is_last, y, N, r, BLOCK: tl.constexpr,
                    GOLD: tl.constexpr):
    """Rescale the node marginals ``row`` (N,) so that they sum to g exactly (0 where they sum to
    0), minus g at the gold label ``y`` with GOLD; copy them into ``first`` / ``last`` (the start
    and end gradients) at the first / last position."""
    scale = tl.where(total != 0.0, g / tl.where(total != 0.0, total, 1.0), 0.0)
    for j0 in range(0, N, BLOCK):
        j = j0 + r
        mj = j < N
        v = tl.load(row + j, mask=mj, other=0.0) * scale
        if GOLD:
            v -= tl.where(j == y, g, 0.0)
        _store_node(row, first, last, is_first, is_last, j, mj, v)


@triton.jit
def _backward_step(unary, A, G, nxt, dst, al, g_unary, labels, y_next, b, t, T, N, g, lz, gs, ge, r,
                   BLOCK: tl.constexpr, SHARED: tl.constexpr, EDGES: tl.constexpr, GOLD: tl.constexpr):
    """One step of the backward at position t < L - 1: beta[t] into ``dst`` from beta[t + 1] in
    ``nxt``; the node marginals of t (renormalized) into g_unary and, with EDGES, the edge
    marginals (t, t + 1) into ``G`` (added to it when SHARED), scaled by g; with GOLD minus the
    indicators of the labels (``y_next`` the label at t + 1). Returns the label at t."""
    total = tl.zeros([BLOCK], tl.float64)
    y = _label(labels, b, T, N, t) if GOLD else 0
    for i0 in range(0, N, BLOCK):
        i = i0 + r
        mi = i < N
        a = tl.load(al + t * N + i, mask=mi, other=NEG)
        m = tl.full([BLOCK], NEG, tl.float64)
        acc = tl.zeros([BLOCK], tl.float64)
        for j0 in range(0, N, BLOCK):
            j = j0 + r
            mj = j < N
            v = _beta_candidates(unary + (b * T + t + 1) * N, A, nxt, i, mi, j, mj, N)
            m, acc = lse_update(m, acc, v, 1)
            if EDGES:
                tile = mi[:, None] & mj[None, :]
                edge = g * tl.exp(a[:, None] + v - lz)
                if GOLD:
                    edge -= tl.where((i == y)[:, None] & (j == y_next)[None, :], g, 0.0)
                if SHARED:
                    edge += tl.load(G + i[:, None] * N + j[None, :], mask=tile, other=0.0)
                tl.store(G + i[:, None] * N + j[None, :], edge, mask=tile)
        beta = lse_finish(m, acc)
        tl.store(dst + i, beta, mask=mi)
        node = tl.where(mi, g * tl.exp(a + beta - lz), 0.0)
        total += node
        tl.store(g_unary + (b * T + t) * N + i, node, mask=mi)
    tl.debug_barrier()
    row = g_unary + (b * T + t) * N
    _normalize_node(row, tl.sum(total, axis=0), g, gs, ge, t == 0, False, y, N, r, BLOCK, GOLD)
    tl.debug_barrier()
    return y


@triton.jit
def _backward_kernel(unary, trans, end, lengths, alpha, logz, ring, g_unary, g_trans, g_start, g_end, grad,
                     grad_stride, labels, T, N, SHARED: tl.constexpr, EDGES: tl.constexpr, GOLD: tl.constexpr,
                     BLOCK: tl.constexpr):
    """beta by the backward recursion; node marginals into g_unary (B, T, N), renormalized per
    position, and the first and last ones into g_start and g_end (B, N); edge marginals into g_trans
    ((B, N, N) summed over time when SHARED, else (B, T-1, N, N)); all scaled by grad[b]. With
    GOLD, minus the indicators of the labeling ``labels[b]`` (the gradient of logZ - score). Every
    entry of the outputs is written (zeros beyond the length and on rows without mass)."""
    b = tl.program_id(0).to(tl.int64)  # 64-bit offsets: B T N may pass 2^31
    L = tl.minimum(tl.load(lengths + b), T)  # never past the buffers, even unvalidated
    lz = tl.load(logz + b)
    g = tl.load(grad + b * grad_stride)  # the upstream gradient may be expanded (stride 0)
    r = tl.arange(0, BLOCK)
    al = alpha + b * T * N
    buf = ring + b * 2 * N
    live = (L > 0) & (lz > NEG) & (g != 0.0)
    _zero_gradients(g_unary, g_trans, g_start, g_end, b, L, live, T, N, r, BLOCK, SHARED, EDGES)
    gs, ge = g_start + b * N, g_end + b * N
    if live:
        top = buf + ((L - 1) % 2) * N
        total = tl.zeros([BLOCK], tl.float64)
        for j0 in range(0, N, BLOCK):
            j = j0 + r
            mj = j < N
            beta = tl.load(end + b * N + j, mask=mj, other=NEG).to(tl.float64)
            tl.store(top + j, beta, mask=mj)
            a = tl.load(al + (L - 1) * N + j, mask=mj, other=NEG)
            node = tl.where(mj, g * tl.exp(a + beta - lz), 0.0)
            total += node
            tl.store(g_unary + (b * T + L - 1) * N + j, node, mask=mj)
        tl.debug_barrier()
        row = g_unary + (b * T + L - 1) * N
        y_next = _label(labels, b, T, N, L - 1) if GOLD else 0
        _normalize_node(row, tl.sum(total, axis=0), g, gs, ge, L == 1, True, y_next, N, r, BLOCK, GOLD)
        tl.debug_barrier()
        for s in range(0, L - 1):
            t = L - 2 - s
            nxt = buf + ((t + 1) % 2) * N
            dst = buf + (t % 2) * N
            A = transitions_at(trans, b, T, N, t + 1, SHARED)
            if SHARED:
                G = g_trans + b * N * N  # this sequence's edge marginals, summed over time
            else:
                G = transitions_at(g_trans, b, T, N, t + 1, SHARED)
            y_next = _backward_step(unary, A, G, nxt, dst, al, g_unary, labels, y_next, b, t, T, N, g, lz, gs,
                                    ge, r, BLOCK, SHARED, EDGES, GOLD)


@triton.jit
def _tangent_forward(unary, A, al, dal, grad, b, t, T, N, r, BLOCK: tl.constexpr):
    """dalpha[t][j] = grad[t][j] + sum over i of p(y_{t-1} = i | y_t = j, prefix) dalpha[t-1][i]
    (the forward tangent of alpha in the direction ``grad``; 0 where alpha[t][j] is -inf)."""
    for j0 in range(0, N, BLOCK):
        j = j0 + r
        mj = j < N
        at = tl.load(al + t * N + j, mask=mj, other=NEG)
        u = tl.load(unary + (b * T + t) * N + j, mask=mj, other=NEG).to(tl.float64)
        base = u - tl.where(at == NEG, POS, at)  # -inf where the state is unreachable: no weight
        acc = tl.zeros([BLOCK], tl.float64)
        for i0 in range(0, N, BLOCK):
            i = i0 + r
            mi = i < N
            prev = tl.load(al + (t - 1) * N + i, mask=mi, other=NEG)
            w = tl.exp(prev[:, None] + _tile(A, i, mi, j, mj, N) + base[None, :])
            acc += tl.sum(w * tl.load(dal + (t - 1) * N + i, mask=mi, other=0.0)[:, None], axis=0)
        g = tl.load(grad + (b * T + t) * N + j, mask=mj, other=0.0)
        tl.store(dal + t * N + j, tl.where(at == NEG, 0.0, g + acc), mask=mj)


@triton.jit
def _hvp_node(row, al, dal, beta, dbeta, lz, dlz, t, first, last, is_first, is_last, N, r,
              BLOCK: tl.constexpr):
    """row[i] = mu[t][i] (dalpha[t][i] + dbeta[t][i] - dlogZ), the derivative of the node marginal;
    copied into ``first`` / ``last`` (the start and end gradients) at the first / last position."""
    for i0 in range(0, N, BLOCK):
        i = i0 + r
        mi = i < N
        a = tl.load(al + t * N + i, mask=mi, other=NEG)
        mu = tl.exp(a + tl.load(beta + i, mask=mi, other=NEG) - lz)
        v = tl.where(mu > 0.0, mu * (tl.load(dal + t * N + i, mask=mi, other=0.0)
                                     + tl.load(dbeta + i, mask=mi, other=0.0) - dlz), 0.0)
        _store_node(row, first, last, is_first, is_last, i, mi, v)


@triton.jit
def _hvp_backward_step(unary, A, G, al, dal, grad, nxt, dnxt, dst, ddst, b, t, T, N, lz, dlz, r,
                       BLOCK: tl.constexpr, SHARED: tl.constexpr):
    """beta[t] and its tangent dbeta[t] (into ``dst``, ``ddst``) from those of t + 1 (``nxt``,
    ``dnxt``) by an online softmax-weighted mean over j; the derivative of the edge marginals
    (t, t + 1) into ``G`` (added to it when SHARED)."""
    for i0 in range(0, N, BLOCK):
        i = i0 + r
        mi = i < N
        a = tl.load(al + t * N + i, mask=mi, other=NEG)
        da = tl.load(dal + t * N + i, mask=mi, other=0.0)
        m = tl.full([BLOCK], NEG, tl.float64)
        s = tl.zeros([BLOCK], tl.float64)
        ws = tl.zeros([BLOCK], tl.float64)
        for j0 in range(0, N, BLOCK):
            j = j0 + r
            mj = j < N
            v = _beta_candidates(unary + (b * T + t + 1) * N, A, nxt, i, mi, j, mj, N)
            w = tl.load(grad + (b * T + t + 1) * N + j, mask=mj, other=0.0)
            w += tl.load(dnxt + j, mask=mj, other=0.0)
            new = tl.maximum(m, tl.max(v, axis=1))
            safe = tl.where(new == NEG, 0.0, new)
            p = tl.exp(v - safe[:, None])
            scale = tl.exp(m - safe)
            m, s, ws = new, s * scale + tl.sum(p, axis=1), ws * scale + tl.sum(p * w[None, :], axis=1)
            tile = mi[:, None] & mj[None, :]
            edge = tl.exp(a[:, None] + v - lz)
            edge = tl.where(edge > 0.0, edge * (da[:, None] + w[None, :] - dlz), 0.0)
            if SHARED:
                edge += tl.load(G + i[:, None] * N + j[None, :], mask=tile, other=0.0)
            tl.store(G + i[:, None] * N + j[None, :], edge, mask=tile)
        tl.store(dst + i, lse_finish(m, s), mask=mi)
        tl.store(ddst + i, tl.where(s > 0.0, ws / tl.where(s > 0.0, s, 1.0), 0.0), mask=mi)


@triton.jit
def _hvp_kernel(unary, trans, end, lengths, alpha, logz, grad, dalpha, ring, g_unary, g_trans, g_start, g_end,
                T, N, SHARED: tl.constexpr, BLOCK: tl.constexpr):
    """The backward of the node marginals: for the upstream ``grad`` (B, T, N) float64, the Hessian
    of logZ times it (the derivative of the marginals in the direction ``grad`` of the unary
    potentials), by forward-mode tangents of alpha (``dalpha`` (B, T, N)) and beta (``ring`` (B, 4,
    N): beta and its tangent, two rows each). Outputs as for ``_backward_kernel`` (every entry
    written; zeros beyond the length and on rows without mass)."""
    b = tl.program_id(0).to(tl.int64)
    L = tl.minimum(tl.load(lengths + b), T)
    lz = tl.load(logz + b)
    r = tl.arange(0, BLOCK)
    al = alpha + b * T * N
    dal = dalpha + b * T * N
    buf = ring + b * 4 * N
    live = (L > 0) & (lz > NEG)
    _zero_gradients(g_unary, g_trans, g_start, g_end, b, L, live, T, N, r, BLOCK, SHARED, True)
    gs, ge = g_start + b * N, g_end + b * N
    if live:
        for j0 in range(0, N, BLOCK):  # dalpha[0] = grad[0] where alpha[0] is finite
            j = j0 + r
            mj = j < N
            g = tl.load(grad + b * T * N + j, mask=mj, other=0.0)
            tl.store(dal + j, tl.where(tl.load(al + j, mask=mj, other=NEG) == NEG, 0.0, g), mask=mj)
        tl.debug_barrier()
        for t in range(1, L):
            A = transitions_at(trans, b, T, N, t, SHARED)
            _tangent_forward(unary, A, al, dal, grad, b, t, T, N, r, BLOCK)
            tl.debug_barrier()
        top, dtop = buf + ((L - 1) % 2) * 2 * N, buf + ((L - 1) % 2) * 2 * N + N
        dlz = tl.full([], 0.0, tl.float64)
        for j0 in range(0, N, BLOCK):  # beta[L - 1] = end, its tangent 0; dlogZ = E[sum of grad]
            j = j0 + r
            mj = j < N
            e = tl.load(end + b * N + j, mask=mj, other=NEG).to(tl.float64)
            tl.store(top + j, e, mask=mj)
            tl.store(dtop + j, tl.zeros([BLOCK], tl.float64), mask=mj)
            mu = tl.exp(tl.load(al + (L - 1) * N + j, mask=mj, other=NEG) + e - lz)
            da = tl.load(dal + (L - 1) * N + j, mask=mj, other=0.0)
            dlz += tl.sum(tl.where(mu > 0.0, mu * da, 0.0), axis=0)
        tl.debug_barrier()
        _hvp_node(g_unary + (b * T + L - 1) * N, al, dal, top, dtop, lz, dlz, L - 1, gs, ge, L == 1, True, N,
                  r, BLOCK)
        tl.debug_barrier()
        for s in range(0, L - 1):
            t = L - 2 - s
            nxt, dst = buf + ((t + 1) % 2) * 2 * N, buf + (t % 2) * 2 * N
            if SHARED:
                G = g_trans + b * N * N
            else:
                G = transitions_at(g_trans, b, T, N, t + 1, SHARED)
            _hvp_backward_step(unary, transitions_at(trans, b, T, N, t + 1, SHARED), G, al, dal, grad, nxt,
                               nxt + N, dst, dst + N, b, t, T, N, lz, dlz, r, BLOCK, SHARED)
            tl.debug_barrier()
            _hvp_node(g_unary + (b * T + t) * N, al, dal, dst, dst + N, lz, dlz, t, gs, ge, t == 0, False, N,
                      r, BLOCK)
            tl.debug_barrier()


@triton.jit
def _lex_max(best, code, v, c):
    """Fold a (BLOCK, BLOCK) tile of candidates ``v`` with codes ``c`` (reduced over axis 0) into
    the running (best, code): the largest score, then the smallest code."""
    m = tl.max(v, axis=0)
    mc = tl.min(tl.where(v == m[None, :], c, NO_CODE), axis=0)
    better = (m > best) | ((m == best) & (mc < code))
    return tl.where(better, m, best), tl.where(better, mc, code)


@triton.jit
def _select(prev, A, a_row, a_col, M, dst, bp, add, N, K, r, BLOCK: tl.constexpr, ADD: tl.constexpr):
    """The K best candidates ``prev[i, q] + A[i * a_row + j * a_col]`` over (i, q) in (N, K) for
    every j < M, tile by tile, in the order (score descending, code i * K + q ascending): their
    scores into dst[j, :] (plus add[j] when ADD) and their codes into bp[j, :]. Round q takes the
    best candidate ranked after round q - 1's; it has rank p <= q in ``prev[i]`` (each list is
    sorted, so the p = 0..q of a pair (i, j) precede its p > q, and q rounds took at most q of them):
    O(N K^2 / 2) candidates per label and step."""
    for j0 in range(0, M, BLOCK):
        j = j0 + r
        mj = j < M
        extra = tl.zeros([BLOCK], tl.float64)
        if ADD:
            extra = tl.load(add + j, mask=mj, other=0.0).to(tl.float64)
        above = tl.full([BLOCK], POS, tl.float64)  # round q - 1's pick
        above_code = tl.full([BLOCK], -1, tl.int32)
        for q in range(0, K):
            best = tl.full([BLOCK], NEG, tl.float64)
            code = tl.full([BLOCK], NO_CODE, tl.int32)
            for i0 in range(0, N, BLOCK):
                i = i0 + r
                mi = i < N
                tile = tl.load(A + i[:, None] * a_row + j[None, :] * a_col, mask=mi[:, None] & mj[None, :],
                               other=NEG).to(tl.float64)
                for p in range(0, q + 1):
                    v = tl.load(prev + i * K + p, mask=mi, other=NEG)[:, None] + tile
                    c = (i * K + p).to(tl.int32)[:, None] + tl.zeros([BLOCK, BLOCK], tl.int32)
                    after = (v < above[None, :]) | ((v == above[None, :]) & (c > above_code[None, :]))
                    ok = mi[:, None] & after
                    best, code = _lex_max(best, code, tl.where(ok, v, NEG), tl.where(ok, c, NO_CODE))
            tl.store(dst + j * K + q, best + extra, mask=mj)
            tl.store(bp + j * K + q, code, mask=mj)
            above, above_code = best, code


@triton.jit
def _kbest_kernel(unary, trans, start, end, lengths, top, bp, scores, codes, path, K, T, N,
                  SHARED: tl.constexpr, BLOCK: tl.constexpr):
    """The k-list Viterbi of ``_torch.kbest``, one program per sequence: ``top`` (B, 2, N, K) a
    ring of the K best scores per label, ``bp`` (B, T, N, K) int32 the code ``label * K + rank``
    of each entry's predecessor; the final list's scores into ``scores`` (B, K) (0 then -inf on
    empty rows, -inf in missing entries) and codes into ``codes`` (B, K); the K paths backtraced
    into ``path`` (B, K, T), -1 beyond the length and in missing entries."""
    b = tl.program_id(0).to(tl.int64)  # 64-bit offsets: B T N K may pass 2^31
    L = tl.minimum(tl.load(lengths + b), T)  # never past the buffers, even unvalidated
    r = tl.arange(0, BLOCK)
    ring = top + b * 2 * N * K
    if L > 0:
        for j0 in range(0, N, BLOCK):
            j = j0 + r
            mj = j < N
            first = (tl.load(start + b * N + j, mask=mj, other=NEG).to(tl.float64)
                     + tl.load(unary + b * T * N + j, mask=mj, other=NEG).to(tl.float64))
            for q in range(0, K):
                tl.store(ring + j * K + q, tl.where(q == 0, first, NEG), mask=mj)
        tl.debug_barrier()
        for t in range(1, L):
            A = transitions_at(trans, b, T, N, t, SHARED)
            at = (b * T + t) * N
            _select(ring + ((t - 1) % 2) * N * K, A, N, 1, N, ring + (t % 2) * N * K, bp + at * K, unary + at,
                    N, K, r, BLOCK, True)
            tl.debug_barrier()
        # the final list: end as an (N, 1) matrix
        last = ring + ((L - 1) % 2) * N * K
        _select(last, end + b * N, 1, 0, 1, scores + b * K, codes + b * K, end, N, K, r, BLOCK, False)
        tl.debug_barrier()
    for q0 in range(0, K, BLOCK):
        q = q0 + r
        mq = q < K
        live = mq & ((q * 0 + L) > 0)  # a block, not a scalar: Triton 3.9's interpreter needs bool blocks
        score = tl.load(scores + b * K + q, mask=live, other=NEG)
        score = tl.where(L > 0, score, tl.where(q == 0, 0.0, NEG))  # an empty row: one empty labeling
        tl.store(scores + b * K + q, score, mask=mq)
        valid = live & (score > NEG)
        code = tl.load(codes + b * K + q, mask=valid, other=0)
        out = path + (b * K + q) * T
        for s in range(0, L):
            t = L - 1 - s
            label = code // K
            tl.store(out + t, label.to(tl.int64), mask=valid)
            step = valid & ((q * 0 + t) > 0)  # a block (see live)
            code = tl.load(bp + ((b * T + t) * N + label) * K + code % K, mask=step, other=0)
        first = tl.where(valid, L, 0)  # -1 from here on
        for t0 in range(0, T, BLOCK):
            t = t0 + r
            tile = mq[:, None] & (t < T)[None, :] & (t[None, :] >= first[:, None])
            tl.store(out[:, None] + t[None, :], tl.full([BLOCK, BLOCK], -1, tl.int64), mask=tile)


@triton.jit
def _race(best, arg, logits, noise, k, mk, k0):
    """Fold ``logits[k] - noise[k]`` (-inf where the logit is) into the running (max, first
    argmax): the exponential race of ``_torch._race``."""
    v = tl.where(logits == NEG, NEG, logits - tl.load(noise + k, mask=mk, other=0.0))
    return argmax_update(best, arg, tl.where(mk, v, NEG), k0, 0)


@triton.jit
def _sample_kernel(trans, end, lengths, alpha, noise, out, B, T, N, SHARED: tl.constexpr,
                   BLOCK: tl.constexpr):
    """Backward sampling of ``_torch.sample``, one program per (sample s, sequence b) (program
    s * B + b): from the forward scores ``alpha`` (B, T, N) float64 and ``noise`` (n, B, T, N)
    (the logarithms of Exp(1) draws), the labels of ``out[s, b]`` (T,), -1 beyond the length and
    on infeasible rows."""
    pid = tl.program_id(0).to(tl.int64)  # 64-bit offsets: n B T N may pass 2^31
    b = pid % B
    L = tl.minimum(tl.load(lengths + b), T)  # never past the buffers, even unvalidated
    r = tl.arange(0, BLOCK)
    al = alpha + b * T * N
    eps = noise + pid * T * N
    row = out + pid * T
    first = tl.zeros([], tl.int64)  # -1 from here on
    if L > 0:
        best = tl.full([], NEG, tl.float64)
        y = tl.zeros([], tl.int32)
        for j0 in range(0, N, BLOCK):
            j = j0 + r
            mj = j < N
            final = tl.load(al + (L - 1) * N + j, mask=mj, other=NEG) + tl.load(end + b * N + j, mask=mj,
                                                                              other=NEG).to(tl.float64)
            best, y = _race(best, y, final, eps + (L - 1) * N, j, mj, j0)
        if best > NEG:  # a feasible row
            first = L
            tl.store(row + L - 1, y.to(tl.int64))
            for s in range(0, L - 1):
                t = L - 2 - s
                A = transitions_at(trans, b, T, N, t + 1, SHARED)
                best = tl.full([], NEG, tl.float64)
                nxt = y
                for i0 in range(0, N, BLOCK):
                    i = i0 + r
                    mi = i < N
                    logits = tl.load(al + t * N + i, mask=mi, other=NEG) + tl.load(A + i * N + nxt, mask=mi,
                                                                                 other=NEG).to(tl.float64)
                    best, y = _race(best, y, logits, eps + t * N, i, mi, i0)
                tl.store(row + t, y.to(tl.int64))
    for t0 in range(0, T, BLOCK):
        t = t0 + r
        tl.store(row + t, tl.full([BLOCK], -1, tl.int64), mask=(t < T) & (t >= first))


@triton.jit
def _reverse_digits(x, N, DIGITS):
    """``x`` with its DIGITS base-N digits in reverse order: a state index (oldest label most
    significant) from its rank in newest-label-first order, and back."""
    y = x * 0
    for _ in range(0, DIGITS):
        y = y * N + x % N
        x = x // N
    return y


@triton.jit
def _window_kernel(scores, lengths, ring, bp, path, out, T, N, S, step, s_stride, DIGITS,
                   BLOCK_O: tl.constexpr, BLOCK_S: tl.constexpr):
    """Viterbi over the S = N^l states of ``_torch.window_dp``, one program per sequence: the
    window score of state s followed by label j at position t is ``scores[(b * T + t) * step +
    s * s_stride + j]`` (order 0: s_stride 0). ``ring`` (B, 2, S) float64, ``bp`` (B, T, S) the
    first maximal oldest label; ``out[b]`` the best score (0 on empty rows, -inf on infeasible
    ones), ``path`` (B, T) the labeling, -1 beyond the length and on infeasible rows."""
    b = tl.program_id(0).to(tl.int64)  # 64-bit offsets: B T S N may pass 2^31
    L = tl.minimum(tl.load(lengths + b), T)  # never past the buffers, even unvalidated
    ro = tl.arange(0, BLOCK_O)
    rs = tl.arange(0, BLOCK_S)
    al = ring + b * 2 * S
    R = S // N  # states per oldest label
    result = tl.full([], 0.0, tl.float64)
    if L > 0:
        for s0 in range(0, S, BLOCK_S):  # position 0: labels before the start read as 0
            s = s0 + rs
            g0 = tl.load(scores + b * T * step + s, mask=s < N, other=NEG).to(tl.float64)
            tl.store(al + s, g0, mask=s < S)
        tl.debug_barrier()
        for t in range(1, L):
            src = al + ((t - 1) % 2) * S
            g = scores + (b * T + t) * step
            for s0 in range(0, S, BLOCK_S):  # new state s = rest * N + j
                s = s0 + rs
                ms = s < S
                best = tl.full([BLOCK_S], NEG, tl.float64)
                arg = tl.zeros([BLOCK_S], tl.int32)
                for o0 in range(0, N, BLOCK_O):
                    o = o0 + ro
                    prev = o[:, None] * R + (s // N)[None, :]  # the state (o, rest)
                    m = (o < N)[:, None] & ms[None, :]
                    cand = tl.load(src + prev, mask=m, other=NEG) + tl.load(
                        g + prev.to(tl.int64) * s_stride + (s % N)[None, :], mask=m, other=NEG).to(tl.float64)
                    best, arg = argmax_update(best, arg, cand, o0, 0)
                tl.store(al + (t % 2) * S + s, best, mask=ms)
                tl.store(bp + (b * T + t) * S + s, arg.to(bp.dtype.element_ty), mask=ms)
            tl.debug_barrier()
        top = al + ((L - 1) % 2) * S
        result = tl.full([], NEG, tl.float64)
        rank = tl.zeros([], tl.int32)
        for m0 in range(0, S, BLOCK_S):  # the first maximal state in newest-label-first order
            m = m0 + rs
            v = tl.load(top + _reverse_digits(m, N, DIGITS), mask=m < S, other=NEG)
            result, rank = argmax_update(result, rank, v, m0, 0)
        if result > NEG:
            cur = _reverse_digits(rank, N, DIGITS)
            for u in range(0, L):
                t = L - 1 - u
                tl.store(path + b * T + t, (cur % N).to(tl.int64))
                oldest = tl.load(bp + (b * T + t) * S + cur, mask=t > 0, other=0).to(tl.int32)
                cur = tl.where(t > 0, oldest * R + cur // N, cur)
    first = tl.where(result > NEG, L, 0)  # -1 from here on
    for t0 in range(0, T, BLOCK_S):
        t = t0 + rs
        tl.store(path + b * T + t, tl.full([BLOCK_S], -1, tl.int64), mask=(t < T) & (t >= first))
    tl.store(out + b, result)


def _launch(name: str, kernel, chain: Chain, *args, tile: int = 64, **meta) -> None:
    """One launch of ``kernel``, one program per sequence, on ``chain``'s tensors and ``args``,
    with label tiles of at most ``tile``."""
    B, T, N = chain.shape
    launch(name, kernel, (B,), chain.unary, chain.transitions, *args, T, N, SHARED=chain.shared,
           BLOCK=block(N, tile), **meta)


def _forward_warps(N: int) -> int:
    """Warps of the forward kernel for N labels (see :data:`FORWARD_WARPS`)."""
    return FORWARD_WARPS if block(N) == 16 else 4


@torch.no_grad()
def viterbi(chain: Chain) -> tuple[Tensor, Tensor]:
    """The best score (B,) float64 and labeling (B, T) (-1 beyond each length and on infeasible
    rows), in one launch."""
    B, T, N = chain.shape
    dev = chain.unary.device
    ring = torch.empty(B, 2, N, dtype=torch.float64, device=dev)
    bp = torch.empty(B, T, N, dtype=torch.int16 if N <= 32767 else torch.int32, device=dev)
    path = torch.empty(B, T, dtype=torch.long, device=dev)
    best = torch.empty(B, dtype=torch.float64, device=dev)
    _launch("chain_viterbi", _forward_kernel, chain, chain.start, chain.end, chain.lengths, ring, bp, path,
            best, path, best, ROWS=2, VITERBI=True, GOLD=False, num_warps=_forward_warps(N))
    return best, path


def _forward(chain: Chain, labels: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor | None]:
    """logZ (B,), alpha (B, T, N) and, given ``labels`` (B, T), logZ - score(labels) (B,), all
    float64, in one launch."""
    B, T, N = chain.shape
    dev = chain.unary.device
    alpha = torch.empty(B, T, N, dtype=torch.float64, device=dev)  # rows past each length unused
    logz, nll = (torch.empty(B, dtype=torch.float64, device=dev) for _ in range(2))
    unused = torch.empty(1, dtype=torch.long, device=dev)  # no backpointers nor path
    gold = labels is not None
    _launch("chain_log_partition", _forward_kernel, chain, chain.start, chain.end, chain.lengths, alpha,
            unused, unused, logz, labels if gold else unused, nll, ROWS=T, VITERBI=False, GOLD=gold,
            num_warps=_forward_warps(N))
    return logz, alpha, nll if gold else None


def _backward(chain: Chain, logz: Tensor, alpha: Tensor, g: Tensor, edges: bool = True,
              labels: Tensor | None = None):
    """(grad unary, grad transitions or None, grad start, grad end), float64, for upstream g (B,)
    float64, in one launch (and a sum over the batch for shared transitions); given ``labels``,
    the gradients of logZ - score(labels).

    Node marginals are renormalized per position, so they sum to one exactly (as on CPU): at large
    magnitudes exp(alpha + beta - logZ) carries the cancellation error of its exponent."""
    B, T, N = chain.shape
    dev = chain.unary.device
    g_unary = torch.empty(B, T, N, dtype=torch.float64, device=dev)
    shape = (B, N, N) if chain.shared else (B, max(T - 1, 0), N, N)
    g_trans = torch.empty(shape if edges else (1,), dtype=torch.float64, device=dev)
    g_start, g_end = (torch.empty(B, N, dtype=torch.float64, device=dev) for _ in range(2))
    ring = torch.empty(B, 2, N, dtype=torch.float64, device=dev)
    gold = labels is not None
    outputs = (g_unary, g_trans, g_start, g_end)
    _launch("chain_backward", _backward_kernel, chain, chain.end, chain.lengths, alpha, logz, ring, *outputs,
            g, g.stride(0), labels if gold else chain.lengths, tile=BACKWARD_TILE, EDGES=edges, GOLD=gold,
            num_warps=BACKWARD_WARPS)
    if not edges:
        return g_unary, None, g_start, g_end
    return g_unary, g_trans.sum(0) if chain.shared else g_trans, g_start, g_end


@torch.no_grad()
def node_marginals(chain: Chain) -> Tensor:
    """(B, T, N) node marginals in the input dtype, outside autograd."""
    logz, alpha, _ = _forward(chain)
    _torch.guard(chain, logz, "the log-partition")  # float64: the marginals may be representable
    return _backward(chain, logz, alpha, torch.ones_like(logz), edges=False)[0].to(chain.unary.dtype)


def log_partition_state(B: int, T: int, N: int) -> list[tuple[int, ...]]:
    """Shapes of the float64 factors :func:`log_partition_forward` saves: alpha (B, T, N)."""
    return [(B, T, N)]


def log_partition_forward(chain: Chain) -> tuple[Tensor, tuple[Tensor]]:
    """logZ (B,) float64 and alpha, which the backward reuses (see ``chain/_ops.py``)."""
    logz, alpha, _ = _forward(chain)
    return logz, (alpha,)


def log_partition_backward(chain: Chain, logz: Tensor, state, g: Tensor) -> tuple[Tensor, ...]:
    """Gradients w.r.t. unary, transitions, start and end (input dtype) for upstream g (B,) float64."""
    dtype = chain.unary.dtype
    return tuple(x.to(dtype) for x in _backward(chain, logz, state[0], g))


def nll_forward(chain: Chain, labels: Tensor) -> tuple[Tensor, Tensor, tuple[Tensor]]:
    """logZ - score(labels) (B,) float64 (+inf on infeasible rows), logZ and alpha, which
    :func:`nll_backward` reuses: the CRF loss in one launch."""
    logz, alpha, nll = _forward(chain, labels)
    return nll, logz, (alpha,)


def nll_backward(chain: Chain, labels: Tensor, logz: Tensor, state, g: Tensor) -> tuple[Tensor, ...]:
    """Gradients of logZ - score(labels) w.r.t. unary, transitions, start and end (input dtype) for
    upstream g (B,) float64: the marginals minus the labeling's indicators, in one launch."""
    dtype = chain.unary.dtype
    return tuple(x.to(dtype) for x in _backward(chain, logz, state[0], g, labels=labels))


@torch.no_grad()
def marginals_backward(chain: Chain, grad: Tensor) -> tuple[Tensor, ...]:
    """Gradients of the node marginals w.r.t. unary, transitions, start and end (input dtype) for
    the upstream ``grad`` (B, T, N): the log-partition's forward, then one launch of forward-mode
    tangents (the Hessian of logZ times ``grad``; and a sum over the batch for shared transitions)."""
    B, T, N = chain.shape
    dev = chain.unary.device
    logz, alpha, _ = _forward(chain)
    dalpha = torch.empty(B, T, N, dtype=torch.float64, device=dev)
    g_unary = torch.empty(B, T, N, dtype=torch.float64, device=dev)
    shape = (B, N, N) if chain.shared else (B, max(T - 1, 0), N, N)
    g_trans = torch.empty(shape, dtype=torch.float64, device=dev)
    g_start, g_end = (torch.empty(B, N, dtype=torch.float64, device=dev) for _ in range(2))
    ring = torch.empty(B, 4, N, dtype=torch.float64, device=dev)
    _launch("chain_marginals_backward", _hvp_kernel, chain, chain.end, chain.lengths, alpha, logz,
            grad.to(torch.float64).contiguous(), dalpha, ring, g_unary, g_trans, g_start, g_end,
            tile=BACKWARD_TILE, num_warps=MARGINALS_BACKWARD_WARPS)
    grads = (g_unary, g_trans.sum(0) if chain.shared else g_trans, g_start, g_end)
    return tuple(x.to(chain.unary.dtype) for x in grads)


@torch.no_grad()
def kbest(chain: Chain, k: int) -> tuple[Tensor, Tensor]:
    """The k best scores (B, k) float64 and labelings (B, k, T) (see ``_ops.kbest_forward``), in
    one launch."""
    B, T, N = chain.shape
    dev = chain.unary.device
    top = torch.empty(B, 2, N, k, dtype=torch.float64, device=dev)
    bp = torch.empty(B, T, N, k, dtype=torch.int32, device=dev)
    scores = torch.empty(B, k, dtype=torch.float64, device=dev)
    codes = torch.empty(B, k, dtype=torch.int32, device=dev)
    paths = torch.empty(B, k, T, dtype=torch.long, device=dev)
    _launch("chain_kbest", _kbest_kernel, chain, chain.start, chain.end, chain.lengths, top, bp, scores,
            codes, paths, k, tile=KBEST_TILE, num_warps=KBEST_WARPS)
    return scores, paths


@torch.no_grad()
def sample(chain: Chain, noise: Tensor) -> Tensor:
    """(n, B, T) labelings drawn with ``noise`` (n, B, T, N) float64, the logarithms of Exp(1)
    draws (see ``_ops.sample_forward``): the log-partition's forward, then one program per sample
    and sequence."""
    n, B, T, N = noise.shape
    _, alpha, _ = _forward(chain)
    out = torch.empty(n, B, T, dtype=torch.long, device=noise.device)
    launch("chain_sample", _sample_kernel, (n * B,), chain.transitions, chain.end, chain.lengths, alpha,
           noise, out, B, T, N, SHARED=chain.shared, BLOCK=block(N))
    return out


@torch.no_grad()
def window_viterbi(scores: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
    """The best score (B,) float64 and labeling (B, T) of window scores (B, T) + (N,) * (l + 1),
    contiguous, T >= 1 (see ``_ops.window_viterbi_forward``), in one launch."""
    B, T, N = scores.shape[:3]
    order = scores.dim() - 3
    S = N ** max(order, 1)
    dev = scores.device
    ring = torch.empty(B, 2, S, dtype=torch.float64, device=dev)
    bp = torch.empty(B, T, S, dtype=torch.int16 if N <= 32767 else torch.int32, device=dev)
    path = torch.empty(B, T, dtype=torch.long, device=dev)
    best = torch.empty(B, dtype=torch.float64, device=dev)
    step, s_stride = (N, 0) if order == 0 else (S * N, N)  # order 0: the previous label is ignored
    launch("chain_window_viterbi", _window_kernel, (B,), scores, lengths, ring, bp, path, best, T, N, S, step,
           s_stride, max(order, 1), BLOCK_O=block(N), BLOCK_S=block(S),
           num_warps=WINDOW_WARPS if min(block(N), block(S)) == 64 else 4)
    return best, path
