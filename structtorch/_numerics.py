"""Numerics shared by every dynamic program and backend: the -inf constant, the accumulation
precision, a log-sum-exp that survives all -inf rows, a categorical draw by the inverse CDF
(samplers), backtracking, small index dtypes, the double-backward helper of the compiled autograd
Functions, the negative log-likelihood of infeasible rows, the batch reduction of losses, and zero
tensors from one fill."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

NEG_INF = float("-inf")


def accumulate(x: Tensor) -> Tensor:
    """``x`` in the precision the dynamic programs accumulate in: float64 on CPU (as the compiled
    kernels), its own dtype elsewhere. The cast is differentiable; results are cast back."""
    if isinstance(x, Tensor) and x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64):
        return x.double()
    return x  # anything else is left for the validation to judge


def safe_logsumexp(x: Tensor, dim: int) -> Tensor:
    """logsumexp whose value and gradient stay finite-or--inf when every entry is -inf."""
    m = x.detach().amax(dim, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    s = torch.exp(x - m).sum(dim)
    positive = s > 0
    out = torch.log(torch.where(positive, s, torch.ones_like(s))) + m.squeeze(dim)
    return torch.where(positive, out, torch.full_like(out, NEG_INF))


def negative_log_likelihood(logz: Tensor, gold: Tensor) -> Tensor:
    """``logz - gold`` per row, +inf (not NaN) where the row is infeasible (``logz`` = -inf: every
    structure, the target included, has probability 0), with a zero gradient there."""
    # logz - gold is NaN there (-inf - -inf), never taken: the gradient of the branch not taken is 0
    return torch.where(logz == NEG_INF, float("inf"), logz - gold)


def inverse_cdf(logits: Tensor, u: Tensor) -> Tensor:
    """One index per row of ``logits`` (..., K), drawn with probabilities softmax(logits) by the
    inverse CDF at ``u`` (...) in [0, 1): the first index whose running probability passes u (the
    last index of positive probability if rounding leaves u unpassed); 0 on all -inf rows. The
    Triton samplers draw the same way from the same uniforms."""
    top = logits.amax(-1, keepdim=True)
    top = torch.where(top == NEG_INF, 0.0, top)
    p = torch.where(logits == NEG_INF, 0.0, torch.exp(logits - top))
    p = p / p.sum(-1, keepdim=True).clamp(min=torch.finfo(p.dtype).tiny)
    positive = p > 0
    hit = (p.cumsum(-1) > u.unsqueeze(-1)) & positive
    index = torch.arange(logits.shape[-1], device=logits.device)
    last = torch.where(positive, index, 0).amax(-1)
    return torch.where(hit.any(-1), hit.int().argmax(-1), last)


def grads_through(reference: Tensor, inputs: tuple[Tensor, ...], needs: tuple[bool, ...],
                  grad: Tensor) -> tuple[Tensor | None, ...]:
    """Gradients of ``reference`` (a differentiable re-computation) w.r.t. the ``inputs`` that
    ``needs`` marks, with ``create_graph``: the double-backward path of the compiled Functions."""
    wanted = [x for x, need in zip(inputs, needs, strict=True) if need]
    got = iter(torch.autograd.grad(reference, wanted, grad, create_graph=True, allow_unused=True))
    return tuple(next(got) if need else None for need in needs)


def backtrack(bps: list[Tensor], last: Tensor, lengths: Tensor, T: int) -> Tensor:
    """Follow (B, N) backpointers from ``last`` (B,) at position length-1; -1 beyond lengths."""
    path = torch.full((last.shape[0], T), -1, dtype=torch.long, device=last.device)
    cur = last
    for t in range(T - 1, -1, -1):
        cur = torch.where(lengths - 1 == t, last, cur)
        path[:, t] = torch.where(t < lengths, cur, torch.full_like(cur, -1))
        if t > 0:
            prev = bps[t - 1].gather(1, cur.unsqueeze(1)).squeeze(1).long()
            cur = torch.where(t < lengths, prev, cur)
    return path


def small_index_dtype(n: int) -> torch.dtype:
    """The smallest integer dtype holding indices in [0, n)."""
    return torch.uint8 if n <= 256 else torch.int16 if n <= 32768 else torch.int32


def reduce_batch(x: Tensor, reduction: str) -> Tensor:
    """Reduce per-example losses (B,): "mean" (0 for an empty batch, not NaN), "sum" or "none"."""
    if reduction == "mean":
        return x.sum() / max(x.numel(), 1)
    return x.sum() if reduction == "sum" else x


def zeroed(shapes: Sequence[tuple[int, ...]], dtype: torch.dtype, device: torch.device) -> list[Tensor]:
    """Zero tensors of the given shapes, contiguous views of one buffer: one device op for all
    (default potentials, the outputs a kernel accumulates into)."""
    sizes = [math.prod(shape) for shape in shapes]
    flat = torch.zeros(sum(sizes), dtype=dtype, device=device)
    return [part.view(shape) for part, shape in zip(flat.split(sizes), shapes, strict=True)]
