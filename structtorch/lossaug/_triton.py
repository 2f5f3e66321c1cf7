"""The Hamming-count table (Bauer et al. 2014, Algorithm 1) for linear chains as Triton kernels
("triton" backend).

One program per sequence runs the table L_t[j][k] (the best prefix score ending in label j at t with
weighted Hamming count k) over time, in (count x label) tiles with a loop over the previous label,
in float64, with uint8/int16 backpointers; a second launch backtracks the chosen count of every
row. Ties as in the compiled kernel: the first maximal previous label, then the first maximal last
label.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from .._numerics import NEG_INF
from .._triton_common import NEG, argmax_update, block, launch, transitions_at
from ..chain.layout import Chain
from ._torch import Tables


@triton.jit
def _table_kernel(unary, trans, start, end, lengths, target, weights, ring, bp, best, last, T, N, K1,
                  SHARED: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_J: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)  # 64-bit offsets: B T N may pass 2^31
    L = tl.minimum(tl.load(lengths + b), T)  # never past the buffers, even unvalidated
    rk = tl.arange(0, BLOCK_K)
    rj = tl.arange(0, BLOCK_J)
    buf = ring + b * 2 * N * K1
    if L > 0:
        w0 = tl.load(weights + b * T)
        y0 = tl.load(target + b * T)
        for j0 in range(0, N, BLOCK_J):
            j = j0 + rj
            mj = j < N
            shift = tl.where(j != y0, w0, 0)
            first = tl.load(start + b * N + j, mask=mj, other=NEG).to(tl.float64)
            first += tl.load(unary + b * T * N + j, mask=mj, other=NEG).to(tl.float64)
            for k0 in range(0, K1, BLOCK_K):
                k = k0 + rk
                tile = (k[:, None] < K1) & mj[None, :]
                value = tl.where(k[:, None] == shift[None, :], first[None, :], NEG)
                tl.store(buf + j[None, :] * K1 + k[:, None], value, mask=tile)
        tl.debug_barrier()
        for t in range(1, L):
            wt = tl.load(weights + b * T + t)
            yt = tl.load(target + b * T + t)
            src = buf + ((t - 1) % 2) * N * K1
            dst = buf + (t % 2) * N * K1
            A = transitions_at(trans, b, T, N, t, SHARED)
            for j0 in range(0, N, BLOCK_J):
                j = j0 + rj
                mj = j < N
                shift = tl.where(j != yt, wt, 0)
                u = tl.load(unary + (b * T + t) * N + j, mask=mj, other=NEG).to(tl.float64)
                for k0 in range(0, K1, BLOCK_K):
                    k = k0 + rk
                    tile = (k[:, None] < K1) & mj[None, :]
                    ks = k[:, None] - shift[None, :]
                    reach = tile & (ks >= 0)
                    top = tl.full([BLOCK_K, BLOCK_J], NEG, tl.float64)
                    arg = tl.zeros([BLOCK_K, BLOCK_J], tl.int32)
                    for i in range(0, N):
                        a = tl.load(src + i * K1 + ks, mask=reach, other=NEG)
                        w = tl.load(A + i * N + j, mask=mj, other=NEG).to(tl.float64)
                        cand = a + w[None, :]
                        better = cand > top  # strict: the first maximal previous label wins ties
                        top = tl.where(better, cand, top)
                        arg = tl.where(better, i, arg)
                    tl.store(dst + j[None, :] * K1 + k[:, None], top + u[None, :], mask=tile)
                    tl.store(bp + ((b * T + t) * N + j[None, :]) * K1 + k[:, None],
                             arg.to(bp.dtype.element_ty), mask=tile)
            tl.debug_barrier()
        final = buf + ((L - 1) % 2) * N * K1
        for k0 in range(0, K1, BLOCK_K):
            k = k0 + rk
            mk = k < K1
            top = tl.full([BLOCK_K], NEG, tl.float64)
            label = tl.zeros([BLOCK_K], tl.int32)
            for j0 in range(0, N, BLOCK_J):
                j = j0 + rj
                mj = j < N
                v = tl.load(final + j[None, :] * K1 + k[:, None], mask=mk[:, None] & mj[None, :], other=NEG)
                v += tl.load(end + b * N + j, mask=mj, other=NEG).to(tl.float64)[None, :]
                top, label = argmax_update(top, label, v, j0, 1)
            tl.store(best + b * K1 + k, top, mask=mk)
            tl.store(last + b * K1 + k, label.to(tl.int64), mask=mk)


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
           chain.lengths, target, weights, ring, bp, best, last, T, N, K1, SHARED=chain.shared,
           BLOCK_K=block(K1), BLOCK_J=block(N, 32))
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
