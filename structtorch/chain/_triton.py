"""Linear-chain dynamic programs as fused Triton kernels ("triton" backend).

One launch per call, one program per sequence: the program runs the whole recursion over time
for its row, tiled over labels (``BLOCK`` x ``BLOCK`` tiles of the transition matrix, so any N
compiles), in float64 whatever the input dtype, as the compiled CPU kernels do:

- ``viterbi``: max-plus forward with backpointers (int16 when N <= 32767) and the backtrace;
- ``log_partition``: the forward recursion (online log-sum-exp per tile), storing alpha;
- the backward: beta by the same recursion run backwards, node marginals, and edge marginals
  (per position, or summed over time per sequence for shared transitions).

On CUDA tensors they compile for the GPU; with ``TRITON_INTERPRET=1`` set before Triton is imported
they run in Triton's interpreter on CPU tensors (slow: for tests). Ties are broken as on every other
backend: the first maximal index at every step.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from .._checks import Chain
from .._numerics import NEG_INF
from . import _torch

NEG = tl.constexpr(float("-inf"))  # in kernels; NEG_INF on the host


def _block(N: int) -> int:
    return max(16, min(64, triton.next_power_of_2(N)))


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
def _block_of(trans, b, T, N, t, SHARED: tl.constexpr):
    """The transitions from step t - 1 to step t of sequence b."""
    if SHARED:
        return trans
    return trans + (b * (T - 1) + t - 1) * N * N


@triton.jit
def _candidates(src, A, i0, j, mj, r, N):
    """(BLOCK, BLOCK) tile alpha_{t-1}[i] + A[i, j] for labels i0 + r and j, in float64."""
    i = i0 + r
    mi = i < N
    a = tl.load(src + i, mask=mi, other=NEG)
    w = tl.load(A + i[:, None] * N + j[None, :], mask=mi[:, None] & mj[None, :], other=NEG)
    return a[:, None] + w.to(tl.float64)


@triton.jit
def _viterbi_kernel(unary, trans, start, end, lengths, ring, bp, path, T, N,
                    SHARED: tl.constexpr, BLOCK: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)  # 64-bit offsets: B T N may pass 2^31
    L = tl.minimum(tl.load(lengths + b), T)  # never past the buffers, even unvalidated
    r = tl.arange(0, BLOCK)
    buf = ring + b * 2 * N
    if L > 0:
        _init_alpha(buf, unary, start, b, T, N, r, BLOCK)
        tl.debug_barrier()
        for t in range(1, L):
            src = buf + ((t - 1) % 2) * N
            dst = buf + (t % 2) * N
            A = _block_of(trans, b, T, N, t, SHARED)
            for j0 in range(0, N, BLOCK):
                j = j0 + r
                mj = j < N
                best = tl.full([BLOCK], NEG, tl.float64)
                arg = tl.zeros([BLOCK], tl.int32)
                for i0 in range(0, N, BLOCK):
                    best, arg = _argmax_update(best, arg, _candidates(src, A, i0, j, mj, r, N), i0)
                u = tl.load(unary + (b * T + t) * N + j, mask=mj, other=NEG).to(tl.float64)
                tl.store(dst + j, best + u, mask=mj)
                tl.store(bp + (b * T + t) * N + j, arg.to(bp.dtype.element_ty), mask=mj)
            tl.debug_barrier()
        last = buf + ((L - 1) % 2) * N
        best = tl.full([], NEG, tl.float64)
        label = tl.full([], 0, tl.int32)
        for j0 in range(0, N, BLOCK):
            j = j0 + r
            mj = j < N
            v = tl.load(last + j, mask=mj, other=NEG)
            v += tl.load(end + b * N + j, mask=mj, other=NEG).to(tl.float64)
            best, label = _argmax_update(best, label, v, j0)
        if best > NEG:
            for s in range(0, L - 1):
                t = L - 1 - s
                tl.store(path + b * T + t, label.to(tl.int64))
                label = tl.load(bp + (b * T + t) * N + label).to(tl.int32)
            tl.store(path + b * T, label.to(tl.int64))


@triton.jit
def _argmax_update(best, arg, cand, offset):
    """Fold candidates (a (BLOCK, BLOCK) tile or a (BLOCK,) vector, reduced over axis 0, indices
    from ``offset``) into the running (max, first argmax): strict comparison, so earlier indices
    win ties."""
    m = tl.max(cand, axis=0)
    am = (tl.argmax(cand, axis=0) + offset).to(tl.int32)
    better = m > best
    return tl.where(better, m, best), tl.where(better, am, arg)


@triton.jit
def _lse_update(m, s, cand, AXIS: tl.constexpr):
    """Online log-sum-exp: fold ``cand`` (reduced over AXIS) into the running (max, scaled sum)."""
    new = tl.maximum(m, tl.max(cand, axis=AXIS))
    safe = tl.where(new == NEG, 0.0, new)
    if AXIS == 0:
        part = tl.sum(tl.exp(cand - safe[None, :]), axis=0)
    else:
        part = tl.sum(tl.exp(cand - safe[:, None]), axis=1)
    return new, s * tl.exp(m - safe) + part


@triton.jit
def _lse_finish(m, s):
    return tl.where(m == NEG, NEG, m + tl.log(tl.where(s > 0, s, 1.0)))


@triton.jit
def _logz_kernel(unary, trans, start, end, lengths, alpha, logz, T, N,
                 SHARED: tl.constexpr, BLOCK: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)  # 64-bit offsets: B T N may pass 2^31
    L = tl.minimum(tl.load(lengths + b), T)  # never past the buffers, even unvalidated
    r = tl.arange(0, BLOCK)
    al = alpha + b * T * N
    result = tl.full([], 0.0, tl.float64)
    if L > 0:
        _init_alpha(al, unary, start, b, T, N, r, BLOCK)
        tl.debug_barrier()
        for t in range(1, L):
            src = al + (t - 1) * N
            A = _block_of(trans, b, T, N, t, SHARED)
            for j0 in range(0, N, BLOCK):
                j = j0 + r
                mj = j < N
                m = tl.full([BLOCK], NEG, tl.float64)
                s = tl.zeros([BLOCK], tl.float64)
                for i0 in range(0, N, BLOCK):
                    m, s = _lse_update(m, s, _candidates(src, A, i0, j, mj, r, N), 0)
                u = tl.load(unary + (b * T + t) * N + j, mask=mj, other=NEG).to(tl.float64)
                tl.store(al + t * N + j, _lse_finish(m, s) + u, mask=mj)
            tl.debug_barrier()
        m = tl.full([BLOCK], NEG, tl.float64)
        s = tl.zeros([BLOCK], tl.float64)
        for j0 in range(0, N, BLOCK):
            j = j0 + r
            mj = j < N
            v = tl.load(al + (L - 1) * N + j, mask=mj, other=NEG)
            v = v + tl.load(end + b * N + j, mask=mj, other=NEG).to(tl.float64)
            new = tl.maximum(m, v)
            safe = tl.where(new == NEG, 0.0, new)
            s = s * tl.exp(m - safe) + tl.exp(v - safe)
            m = new
        top = tl.max(m, axis=0)
        safe = tl.where(top == NEG, 0.0, top)
        result = _lse_finish(top, tl.sum(s * tl.exp(m - safe), axis=0))
    tl.store(logz + b, result)


@triton.jit
def _backward_kernel(grad, unary, trans, end, lengths, alpha, logz, ring, g_unary, g_trans, T, N,
                     SHARED: tl.constexpr, EDGES: tl.constexpr, BLOCK: tl.constexpr):
    """beta by the backward recursion; node marginals into g_unary (B, T, N), edge marginals into
    g_trans ((B, N, N) summed over time when SHARED, else (B, T-1, N, N)), all scaled by grad[b]."""
    b = tl.program_id(0).to(tl.int64)  # 64-bit offsets: B T N may pass 2^31
    L = tl.minimum(tl.load(lengths + b), T)  # never past the buffers, even unvalidated
    lz = tl.load(logz + b)
    g = tl.load(grad + b)
    r = tl.arange(0, BLOCK)
    al = alpha + b * T * N
    buf = ring + b * 2 * N
    if (L > 0) & (lz > NEG) & (g != 0.0):
        top = buf + ((L - 1) % 2) * N
        for j0 in range(0, N, BLOCK):
            j = j0 + r
            mj = j < N
            beta = tl.load(end + b * N + j, mask=mj, other=NEG).to(tl.float64)
            tl.store(top + j, beta, mask=mj)
            node = g * tl.exp(tl.load(al + (L - 1) * N + j, mask=mj, other=NEG) + beta - lz)
            tl.store(g_unary + (b * T + L - 1) * N + j, node, mask=mj)
        tl.debug_barrier()
        for s in range(0, L - 1):
            t = L - 2 - s
            nxt = buf + ((t + 1) % 2) * N
            dst = buf + (t % 2) * N
            A = _block_of(trans, b, T, N, t + 1, SHARED)
            if SHARED:
                G = g_trans + b * N * N  # this sequence's edge marginals, summed over time
            else:
                G = _block_of(g_trans, b, T, N, t + 1, SHARED)
            for i0 in range(0, N, BLOCK):
                i = i0 + r
                mi = i < N
                a = tl.load(al + t * N + i, mask=mi, other=NEG)
                m = tl.full([BLOCK], NEG, tl.float64)
                acc = tl.zeros([BLOCK], tl.float64)
                for j0 in range(0, N, BLOCK):
                    j = j0 + r
                    mj = j < N
                    tile = mi[:, None] & mj[None, :]
                    w = tl.load(A + i[:, None] * N + j[None, :], mask=tile, other=NEG).to(tl.float64)
                    u = tl.load(unary + (b * T + t + 1) * N + j, mask=mj, other=NEG).to(tl.float64)
                    v = w + (u + tl.load(nxt + j, mask=mj, other=NEG))[None, :]
                    m, acc = _lse_update(m, acc, v, 1)
                    if EDGES:
                        edge = g * tl.exp(a[:, None] + v - lz)
                        if SHARED:
                            edge += tl.load(G + i[:, None] * N + j[None, :], mask=tile, other=0.0)
                        tl.store(G + i[:, None] * N + j[None, :], edge, mask=tile)
                beta = _lse_finish(m, acc)
                tl.store(dst + i, beta, mask=mi)
                tl.store(g_unary + (b * T + t) * N + i, g * tl.exp(a + beta - lz), mask=mi)
            tl.debug_barrier()


def _launch_args(chain: Chain) -> tuple:
    B, T, N = chain.shape
    return (B,), dict(SHARED=chain.shared, BLOCK=_block(N))


@torch.no_grad()
def viterbi_path(chain: Chain) -> Tensor:
    """(B, T) best labeling (-1 beyond each length and on infeasible rows)."""
    B, T, N = chain.shape
    dev = chain.unary.device
    ring = torch.empty(B, 2, N, dtype=torch.float64, device=dev)
    bp = torch.empty(B, T, N, dtype=torch.int16 if N <= 32767 else torch.int32, device=dev)
    path = torch.full((B, T), -1, dtype=torch.long, device=dev)
    grid, meta = _launch_args(chain)
    _viterbi_kernel[grid](chain.unary, chain.transitions, chain.start, chain.end, chain.lengths, ring, bp,
                          path, T, N, **meta)
    return path


def _forward(chain: Chain) -> tuple[Tensor, Tensor]:
    """logZ (B,) and alpha (B, T, N), both float64."""
    B, T, N = chain.shape
    alpha = torch.full((B, T, N), NEG_INF, dtype=torch.float64, device=chain.unary.device)
    logz = torch.empty(B, dtype=torch.float64, device=chain.unary.device)
    grid, meta = _launch_args(chain)
    _logz_kernel[grid](chain.unary, chain.transitions, chain.start, chain.end, chain.lengths, alpha, logz,
                       T, N, **meta)
    return logz, alpha


def _backward(chain: Chain, logz: Tensor, alpha: Tensor, g: Tensor, edges: bool = True):
    """(grad unary, grad transitions or None, grad end), float64, for upstream g (B,) float64.

    Node marginals are renormalized per position, so they sum to one exactly (as on CPU): at large
    magnitudes exp(alpha + beta - logZ) carries the cancellation error of its exponent."""
    B, T, N = chain.shape
    dev = chain.unary.device
    g_unary = torch.zeros(B, T, N, dtype=torch.float64, device=dev)
    shape = (B, N, N) if chain.shared else (B, max(T - 1, 0), N, N)
    g_trans = torch.zeros(shape if edges else (1,), dtype=torch.float64, device=dev)
    ring = torch.empty(B, 2, N, dtype=torch.float64, device=dev)
    grid, meta = _launch_args(chain)
    _backward_kernel[grid](g, chain.unary, chain.transitions, chain.end, chain.lengths, alpha, logz, ring,
                           g_unary, g_trans, T, N, EDGES=edges, **meta)
    total = g_unary.sum(-1, keepdim=True)  # g * (sum of the marginals, 1 up to rounding)
    g_unary = torch.where(total != 0, g_unary * (g.view(B, 1, 1) / torch.where(total != 0, total, 1.0)), 0.0)
    last = (chain.lengths - 1).clamp(min=0).view(B, 1, 1).expand(B, 1, N)
    g_end = g_unary.gather(1, last).squeeze(1)
    if not edges:
        return g_unary, None, g_end
    return g_unary, g_trans.sum(0) if chain.shared else g_trans, g_end


@torch.no_grad()
def node_marginals(chain: Chain) -> Tensor:
    """(B, T, N) node marginals in the input dtype, outside autograd."""
    logz, alpha = _forward(chain)
    _torch.guard(chain, logz, "the log-partition")  # float64: the marginals may be representable
    return _backward(chain, logz, alpha, torch.ones_like(logz), edges=False)[0].to(chain.unary.dtype)


def log_partition_state(B: int, T: int, N: int) -> list[tuple[int, ...]]:
    """Shapes of the float64 factors :func:`log_partition_forward` saves: alpha (B, T, N)."""
    return [(B, T, N)]


def log_partition_forward(chain: Chain) -> tuple[Tensor, tuple[Tensor]]:
    """logZ (B,) float64 and alpha, which the backward reuses (see ``chain/_ops.py``)."""
    logz, alpha = _forward(chain)
    return logz, (alpha,)


def log_partition_backward(chain: Chain, logz: Tensor, state, g: Tensor) -> tuple[Tensor, ...]:
    """Gradients w.r.t. unary, transitions, start and end (input dtype) for upstream g (B,) float64."""
    g_unary, g_trans, g_end = _backward(chain, logz, state[0], g)
    dtype = chain.unary.dtype
    return g_unary.to(dtype), g_trans.to(dtype), g_unary[:, 0].to(dtype), g_end.to(dtype)
