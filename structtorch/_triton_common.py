"""What the Triton kernels of every structure share ("triton" backend, see :mod:`structtorch._backend`).

Every kernel runs one program per sequence and tiles labels in ``BLOCK`` x ``BLOCK`` tiles (so any
N compiles), in float64 whatever the input dtype. The dynamic programs reduce over labels either by
max-plus with the first maximal index (Viterbi) or by an online log-sum-exp; ``VITERBI`` (a
``tl.constexpr``) picks one, so each structure writes one kernel for both:

- :func:`fold` and :func:`finish`: the running (max, argmax) or (max, scaled sum) of a tile of
  candidates, and its value; :func:`argmax_update` and :func:`lse_update` do each reduction,
  :func:`lse_finish` and :func:`lse_total` finish a log-sum-exp;
- :func:`transition_step`: one step of the forward recursion over an (N, N) transition matrix,
  ``dst[j] = max or log-sum-exp over i of src[i] + A[i, j]`` (plus ``add[j]``), tile by tile, with
  the argmax i (Viterbi);
- :func:`close`: the last reduction ``over j of last[j] + end[j]`` (Viterbi: max and argmax);
- :func:`transitions_at`, :func:`load_tile`, :func:`candidates`: the (N, N) transition block of
  one step (shared or per position), a float64 tile of it, and a tile of candidates;
- on the host: :func:`block` (a tile size), :func:`launch` (a launch, labelled
  ``structtorch::triton::<name>`` in :mod:`torch.profiler` traces while a profiler runs) and
  :func:`per_triton` (a launch setting that differs between Triton releases).

Ties are broken as on every other backend: the first maximal index.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .profiling import TRITON_PREFIX

NEG = tl.constexpr(float("-inf"))  # in kernels; NEG_INF on the host
POS = tl.constexpr(float("inf"))


TRITON = tuple(int(v) for v in triton.__version__.split(".")[:2])
"""The running Triton's (major, minor) release."""


def per_triton(default: int, releases: dict[tuple[int, int], int]) -> int:
    """A launch setting (warps, a tile) for the running Triton: ``releases[(major, minor)]``, else
    ``default``. Each release's compiler allocates registers its own way: the ahead-of-time compile
    for sm_90 (``tests/compile_kernels.py``, ``make tritons``) finds where a kernel puts registers on
    the stack, and the settings here keep every kernel off it on Triton 3.6, 3.8 and 3.9."""
    return releases.get(TRITON, default)


def block(n: int, most: int = 64) -> int:
    """The tile size along a dimension of size ``n``: a power of two in [16, most]."""
    return max(16, min(most, triton.next_power_of_2(n)))


def launch(name: str, kernel, grid: tuple, *args, **meta) -> None:
    """``kernel[grid](*args, **meta)``; under a running profiler inside a record_function range
    named ``structtorch::triton::<name>`` (the kernels' launches are counted by these ranges)."""
    if torch.autograd._profiler_enabled():
        with torch.autograd.profiler.record_function(TRITON_PREFIX + name):
            kernel[grid](*args, **meta)
    else:
        kernel[grid](*args, **meta)


@triton.jit
def reciprocal(d):
    """1 / d in float64 for positive integers d (a scalar or a block), without a division: sm_90
    runs a float64 division's slow path as a subroutine call, and the caller saves its live
    registers on the stack around it. A fast float32 estimate, refined by two Newton steps (each
    squares the relative error: 1e-7, 1e-14, then the float64 rounding)."""
    x = tl.full([], 0.0, tl.float64) + d  # d may be a loop's Python int in the interpreter
    r = tl.fdiv((x * 0.0 + 1.0).to(tl.float32), x.to(tl.float32)).to(tl.float64)
    r = r * (2.0 - x * r)
    return r * (2.0 - x * r)


@triton.jit
def transitions_at(trans, b, T, N, t, SHARED: tl.constexpr):
    """The (N, N) transitions from step t - 1 to step t of sequence b: ``trans`` itself when
    SHARED, else its block (b, t - 1) of (B, T - 1, N, N)."""
    if SHARED:
        return trans
    return trans + (b * (T - 1) + t - 1) * N * N


@triton.jit
def load_tile(A, i, mi, j, mj, N):
    """(BLOCK, BLOCK) float64 tile A[i, j] of an (N, N) matrix, -inf outside the masks."""
    return tl.load(A + i[:, None] * N + j[None, :], mask=mi[:, None] & mj[None, :], other=NEG).to(tl.float64)


@triton.jit
def candidates(src, A, i0, j, mj, r, N):
    """(BLOCK, BLOCK) tile src[i] + A[i, j] for labels i = i0 + r and j, in float64."""
    i = i0 + r
    mi = i < N
    a = tl.load(src + i, mask=mi, other=NEG)
    return a[:, None] + load_tile(A, i, mi, j, mj, N)


@triton.jit
def argmax_update(best, arg, cand, offset, AXIS: tl.constexpr):
    """Fold candidates (a tile, or a vector with AXIS 0), reduced over AXIS with indices from
    ``offset``, into the running (max, first argmax): strict comparison, so earlier indices win
    ties."""
    m = tl.max(cand, axis=AXIS)
    am = (tl.argmax(cand, axis=AXIS) + offset).to(tl.int32)
    better = m > best
    return tl.where(better, m, best), tl.where(better, am, arg)


@triton.jit
def lse_update(m, s, cand, AXIS: tl.constexpr):
    """Online log-sum-exp: fold ``cand`` (reduced over AXIS) into the running (max, scaled sum)."""
    new = tl.maximum(m, tl.max(cand, axis=AXIS))
    safe = tl.where(new == NEG, 0.0, new)
    if AXIS == 0:
        part = tl.sum(tl.exp(cand - safe[None, :]), axis=0)
    else:
        part = tl.sum(tl.exp(cand - safe[:, None]), axis=1)
    return new, s * tl.exp(m - safe) + part


@triton.jit
def lse_finish(m, s):
    """log(s) + m of a running (max, scaled sum); -inf where everything was."""
    return tl.where(m == NEG, NEG, m + tl.log(tl.where(s > 0, s, 1.0)))


@triton.jit
def lse_total(m, s):
    """The log-sum-exp of a vector of running (max, scaled sum) pairs: one scalar."""
    top = tl.max(m, axis=0)
    safe = tl.where(top == NEG, 0.0, top)
    return lse_finish(top, tl.sum(s * tl.exp(m - safe), axis=0))


@triton.jit
def fold(best, acc, arg, cand, offset, VITERBI: tl.constexpr):
    """Fold a tile of candidates (reduced over axis 0, indices from ``offset``) into the running
    max and first argmax (Viterbi) or the running log-sum-exp (max, scaled sum)."""
    if VITERBI:
        best, arg = argmax_update(best, arg, cand, offset, 0)
    else:
        best, acc = lse_update(best, acc, cand, 0)
    return best, acc, arg


@triton.jit
def finish(best, acc, VITERBI: tl.constexpr):
    """The value of a fold: the max (Viterbi) or the log-sum-exp."""
    if not VITERBI:
        best = lse_finish(best, acc)
    return best


@triton.jit
def transition_step(src, A, dst, arg_out, add, N, r, BLOCK: tl.constexpr, VITERBI: tl.constexpr,
                    ADD: tl.constexpr):
    """dst[j] = (max or log-sum-exp over i of src[i] + A[i, j]) + add[j] (when ADD) for every label
    j, tile by tile; Viterbi stores the first maximal i into arg_out[j] (in its element type)."""
    for j0 in range(0, N, BLOCK):
        j = j0 + r
        mj = j < N
        best = tl.full([BLOCK], NEG, tl.float64)
        acc = tl.zeros([BLOCK], tl.float64)
        arg = tl.zeros([BLOCK], tl.int32)
        for i0 in range(0, N, BLOCK):
            best, acc, arg = fold(best, acc, arg, candidates(src, A, i0, j, mj, r, N), i0, VITERBI)
        value = finish(best, acc, VITERBI)
        if ADD:
            value += tl.load(add + j, mask=mj, other=NEG).to(tl.float64)
        tl.store(dst + j, value, mask=mj)
        if VITERBI:
            tl.store(arg_out + j, arg.to(arg_out.dtype.element_ty), mask=mj)


@triton.jit
def close(last, end, N, r, BLOCK: tl.constexpr, VITERBI: tl.constexpr):
    """Over labels j of last[j] + end[j] (float64): (the max, its first argmax) for Viterbi, else
    (the log-sum-exp, 0)."""
    top = tl.full([], NEG, tl.float64)
    label = tl.full([], 0, tl.int32)
    m = tl.full([BLOCK], NEG, tl.float64)
    s = tl.zeros([BLOCK], tl.float64)
    for j0 in range(0, N, BLOCK):
        j = j0 + r
        mj = j < N
        v = tl.load(last + j, mask=mj, other=NEG) + tl.load(end + j, mask=mj, other=NEG).to(tl.float64)
        if VITERBI:
            top, label = argmax_update(top, label, v, j0, 0)
        else:
            m, s = lse_update(m, s, v[None, :], 0)
    if not VITERBI:
        top = lse_total(m, s)
    return top, label
