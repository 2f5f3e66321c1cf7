"""Linear-chain dynamic programs as fused Triton kernels ("triton" backend).

One launch per call, one program per sequence: the program runs the whole recursion over time
for its row, tiled over labels (``BLOCK`` x ``BLOCK`` tiles of the transition matrix, so any N
compiles), in float64 whatever the input dtype, as the compiled CPU kernels do:

- one forward kernel for both semirings (``VITERBI``, as in ``semimarkov/_triton.py``): Viterbi
  runs max-plus with backpointers (int16 when N <= 32767) and the backtrace; the log-partition
  runs the same recursion by online log-sum-exp per tile, storing alpha;
- the backward: beta by the same recursion run backwards, node marginals, and edge marginals
  (per position, or summed over time per sequence for shared transitions).

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

from .._numerics import NEG_INF
from .._triton_common import (
    NEG,
    block,
    close,
    launch,
    lse_finish,
    lse_update,
    transition_step,
    transitions_at,
)
from .._triton_common import load_tile as _tile
from . import _torch
from .layout import Chain


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
def _forward_kernel(unary, trans, start, end, lengths, alpha, bp, path, out, T, N, ROWS,
                    VITERBI: tl.constexpr, SHARED: tl.constexpr, BLOCK: tl.constexpr):
    """alpha by max-plus (VITERBI) or log-sum-exp over time, step t in row t % ROWS of the
    sequence's (ROWS, N) slice of ``alpha`` (Viterbi keeps a ring of 2, the log-partition all T).
    ``out[b]``: the best score or logZ (0 on empty rows). Viterbi stores backpointers into ``bp``
    (B, T, N) and backtraces feasible rows into ``path`` (B, T)."""
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
    tl.store(out + b, result)


@triton.jit
def _backward_kernel(unary, trans, end, lengths, alpha, logz, ring, g_unary, g_trans, grad, T, N,
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
            A = transitions_at(trans, b, T, N, t + 1, SHARED)
            if SHARED:
                G = g_trans + b * N * N  # this sequence's edge marginals, summed over time
            else:
                G = transitions_at(g_trans, b, T, N, t + 1, SHARED)
            for i0 in range(0, N, BLOCK):
                i = i0 + r
                mi = i < N
                a = tl.load(al + t * N + i, mask=mi, other=NEG)
                m = tl.full([BLOCK], NEG, tl.float64)
                acc = tl.zeros([BLOCK], tl.float64)
                for j0 in range(0, N, BLOCK):
                    j = j0 + r
                    mj = j < N
                    u = tl.load(unary + (b * T + t + 1) * N + j, mask=mj, other=NEG).to(tl.float64)
                    v = _tile(A, i, mi, j, mj, N) + (u + tl.load(nxt + j, mask=mj, other=NEG))[None, :]
                    m, acc = lse_update(m, acc, v, 1)
                    if EDGES:
                        tile = mi[:, None] & mj[None, :]
                        edge = g * tl.exp(a[:, None] + v - lz)
                        if SHARED:
                            edge += tl.load(G + i[:, None] * N + j[None, :], mask=tile, other=0.0)
                        tl.store(G + i[:, None] * N + j[None, :], edge, mask=tile)
                beta = lse_finish(m, acc)
                tl.store(dst + i, beta, mask=mi)
                tl.store(g_unary + (b * T + t) * N + i, g * tl.exp(a + beta - lz), mask=mi)
            tl.debug_barrier()


def _launch(name: str, kernel, chain: Chain, *args, **meta) -> None:
    """One launch of ``kernel``, one program per sequence, on ``chain``'s tensors and ``args``."""
    B, T, N = chain.shape
    launch(name, kernel, (B,), chain.unary, chain.transitions, *args, T, N, SHARED=chain.shared,
           BLOCK=block(N), **meta)


@torch.no_grad()
def viterbi_path(chain: Chain) -> Tensor:
    """(B, T) best labeling (-1 beyond each length and on infeasible rows)."""
    B, T, N = chain.shape
    dev = chain.unary.device
    ring = torch.empty(B, 2, N, dtype=torch.float64, device=dev)
    bp = torch.empty(B, T, N, dtype=torch.int16 if N <= 32767 else torch.int32, device=dev)
    path = torch.full((B, T), -1, dtype=torch.long, device=dev)
    best = torch.empty(B, dtype=torch.float64, device=dev)
    _launch("chain_viterbi", _forward_kernel, chain, chain.start, chain.end, chain.lengths, ring, bp, path,
            best, ROWS=2, VITERBI=True)
    return path


def _forward(chain: Chain) -> tuple[Tensor, Tensor]:
    """logZ (B,) and alpha (B, T, N), both float64."""
    B, T, N = chain.shape
    dev = chain.unary.device
    alpha = torch.full((B, T, N), NEG_INF, dtype=torch.float64, device=dev)
    logz = torch.empty(B, dtype=torch.float64, device=dev)
    unused = torch.empty(1, dtype=torch.long, device=dev)  # no backpointers nor path
    _launch("chain_log_partition", _forward_kernel, chain, chain.start, chain.end, chain.lengths, alpha,
            unused, unused, logz, ROWS=T, VITERBI=False)
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
    _launch("chain_backward", _backward_kernel, chain, chain.end, chain.lengths, alpha, logz, ring, g_unary,
            g_trans, g, EDGES=edges)
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
