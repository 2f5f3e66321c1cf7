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

from .._triton_common import (
    NEG,
    POS,
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

BACKWARD_TILE = 16
"""The backward's largest label tile: it holds two float64 tiles (scores and edge marginals), which
spill registers on sm_90 at 32 x 32 and 64 x 64 (``tests/compile_kernels.py`` reads the cubins)."""


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
        tl.store(row + j, v, mask=mj)
        if is_first:
            tl.store(first + j, v, mask=mj)
        if is_last:
            tl.store(last + j, v, mask=mj)


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
    first = tl.where(live, L, 0)  # positions from here on get zeros
    _fill_zero(g_unary + b * T * N, first * N, T * N, r, BLOCK)
    if EDGES:
        if SHARED:
            _fill_zero(g_trans + b * N * N, 0, N * N, r, BLOCK)
        else:
            steps = tl.maximum(T - 1, 0)
            _fill_zero(g_trans + b * steps * N * N, tl.maximum(first - 1, 0) * N * N, steps * N * N, r, BLOCK)
    gs, ge = g_start + b * N, g_end + b * N
    if not live:
        _fill_zero(gs, 0, N, r, BLOCK)
        _fill_zero(ge, 0, N, r, BLOCK)
    tl.debug_barrier()
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
                    u = tl.load(unary + (b * T + t + 1) * N + j, mask=mj, other=NEG).to(tl.float64)
                    v = _tile(A, i, mi, j, mj, N) + (u + tl.load(nxt + j, mask=mj, other=NEG))[None, :]
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
            y_next = y


def _launch(name: str, kernel, chain: Chain, *args, tile: int = 64, **meta) -> None:
    """One launch of ``kernel``, one program per sequence, on ``chain``'s tensors and ``args``,
    with label tiles of at most ``tile``."""
    B, T, N = chain.shape
    launch(name, kernel, (B,), chain.unary, chain.transitions, *args, T, N, SHARED=chain.shared,
           BLOCK=block(N, tile), **meta)


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
            best, path, best, ROWS=2, VITERBI=True, GOLD=False)
    return best, path


def _forward(chain: Chain, labels: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor | None]:
    """logZ (B,), alpha (B, T, N) and, given ``labels`` (B, T), logZ - score(labels) (B,), all
    float64, in one launch."""
    B, T, N = chain.shape
    dev = chain.unary.device
    alpha = torch.empty(B, T, N, dtype=torch.float64, device=dev)  # rows past each length unused
    logz, nll = torch.empty(2, B, dtype=torch.float64, device=dev)
    unused = torch.empty(1, dtype=torch.long, device=dev)  # no backpointers nor path
    gold = labels is not None
    _launch("chain_log_partition", _forward_kernel, chain, chain.start, chain.end, chain.lengths, alpha,
            unused, unused, logz, labels if gold else unused, nll, ROWS=T, VITERBI=False, GOLD=gold)
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
    g_start, g_end = torch.empty(2, B, N, dtype=torch.float64, device=dev)
    ring = torch.empty(B, 2, N, dtype=torch.float64, device=dev)
    gold = labels is not None
    outputs = (g_unary, g_trans, g_start, g_end)
    _launch("chain_backward", _backward_kernel, chain, chain.end, chain.lengths, alpha, logz, ring, *outputs,
            g, g.stride(0), labels if gold else chain.lengths, tile=BACKWARD_TILE, EDGES=edges, GOLD=gold)
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
