"""Sampling labelings of linear chains from p(y) proportional to exp(score(y)): forward filtering,
backward sampling, every sample and chain at once, looping over positions only."""

from __future__ import annotations

import torch
from torch import Tensor

from .._checks import LengthsLike, check_generator, check_int
from .._numerics import NEG_INF, accumulate, gumbel_argmax, safe_logsumexp
from .._precision import mixed_precision
from . import _torch
from .layout import Chain, check_chain

__all__ = ["sample"]


@mixed_precision
def sample(unary: Tensor, transitions: Tensor, n: int, *, start: Tensor | None = None,
           end: Tensor | None = None, lengths: LengthsLike = None,
           generator: torch.Generator | None = None) -> Tensor:
    """Draw ``n`` independent labelings per chain from p(y) = exp(score(y)) / Z.

    Parameters
    ----------
    unary, transitions, start, end, lengths
        Chain potentials as for :func:`structtorch.viterbi`.
    n : int
        Number of samples, >= 1.
    generator : torch.Generator, optional
        Source of randomness, on the potentials' device.

    Returns
    -------
    Tensor (n, B, T) int64
        Labels, -1 beyond each length and on infeasible rows. Not differentiable.

    Notes
    -----
    The forward pass stores the (B, T, N) forward scores; the backward pass draws every sample and
    chain at once, looping over positions only: O(T (B N^2 + n B N)) time.
    """
    chain = check_chain(unary, transitions, start, end, lengths)
    return sample_chain(chain, check_int("n", n, 1), check_generator(generator))


@torch.no_grad()
def sample_chain(chain: Chain, n: int, generator: torch.Generator | None) -> Tensor:
    """(n, B, T) labelings drawn from a canonical chain's distribution (see :func:`sample`)."""
    ch = chain.map(lambda x: accumulate(x.detach()))
    B, T, N = ch.shape
    out = torch.full((n, B, T), -1, dtype=torch.long, device=ch.unary.device)
    if T == 0 or B == 0:
        return out
    blocks = _torch.step_blocks(ch)
    alphas = [ch.start + ch.unary[:, 0]]  # alphas[t][b, j]: log-sum over labelings of [0, t] ending in j
    for t, block in enumerate(blocks, start=1):
        alphas.append(safe_logsumexp(alphas[-1].unsqueeze(2) + block, dim=1) + ch.unary[:, t])
    alpha = torch.stack(alphas, 1)  # (B, T, N); garbage beyond each length, never read
    lengths = ch.lengths
    last_alpha = alpha.gather(1, (lengths - 1).clamp(min=0).view(B, 1, 1).expand(B, 1, N)).squeeze(1)
    final = last_alpha + ch.end
    feasible = (lengths > 0) & (final > NEG_INF).any(1)
    last = gumbel_argmax(final.expand(n, B, N), generator)  # (n, B): the label at length - 1
    rows = torch.arange(B, device=out.device).expand(n, B)
    nxt = last
    for t in range(T - 1, -1, -1):
        if t < T - 1:
            block = blocks[t]  # scores of y_t -> y_{t+1}: (N, N) or (B, N, N)
            column = block.t()[nxt] if block.dim() == 2 else block.transpose(1, 2)[rows, nxt]
            prev = gumbel_argmax(alpha[:, t].unsqueeze(0) + column, generator)
            cur = torch.where(t == lengths - 1, last, torch.where(t < lengths - 1, prev, -1))
        else:
            cur = torch.where(t == lengths - 1, last, -1)
        out[:, :, t] = cur
        nxt = cur.clamp(min=0)
    return torch.where(feasible[None, :, None], out, -1)
