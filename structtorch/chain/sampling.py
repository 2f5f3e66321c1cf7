"""Sampling labelings of linear chains from p(y) proportional to exp(score(y)): forward filtering,
backward sampling. One draw of Exp(1) noise per call (and its logarithm), then the backend's
sampler: one Triton kernel after the log-partition's forward on the triton backend, the PyTorch
loop over positions of ``_torch.py`` on the others; with the same noise they draw the same labels."""

from __future__ import annotations

import torch
from torch import Tensor

from .._checks import LengthsLike, check_generator, check_int
from .._precision import mixed_precision
from . import _ops
from .layout import Chain
from .masking import masked_chain

__all__ = ["sample"]


@mixed_precision
def sample(unary: Tensor, transitions: Tensor, n: int, *, start: Tensor | None = None,
           end: Tensor | None = None, lengths: LengthsLike = None,
           generator: torch.Generator | None = None, mask: Tensor | None = None) -> Tensor:
    """Draw ``n`` independent labelings per chain from p(y) = exp(score(y)) / Z.

    Parameters
    ----------
    unary, transitions, start, end, lengths, mask
        Chain potentials as for :func:`structtorch.viterbi`.
    n : int
        Number of samples, >= 1.
    generator : torch.Generator, optional
        Source of randomness, on the potentials' device.

    Returns
    -------
    Tensor (n, B, T) int64
        Labels, -1 beyond each length (outside the mask) and on infeasible rows. Not
        differentiable.

    Notes
    -----
    The forward pass stores the (B, T, N) forward scores; the backward pass draws each label by
    the exponential race (Gumbel-max) on (n, B, T, N) Exp(1) noise drawn from ``generator`` in one
    call: O(T (B N^2 + n B N)) time, O(n B T N) memory for the noise. For the same generator state
    every backend draws the same labels (up to the last bit of the forward scores, which may differ
    between backends).
    """
    chain, moved = masked_chain(unary, transitions, start, end, lengths, mask)
    draws = sample_chain(chain, check_int("n", n, 1), check_generator(generator))  # (n, B, T)
    return moved.put(draws.permute(1, 2, 0), -1).permute(2, 0, 1)


@torch.no_grad()
def sample_chain(chain: Chain, n: int, generator: torch.Generator | None) -> Tensor:
    """(n, B, T) labelings drawn from a canonical chain's distribution (see :func:`sample`)."""
    B, T, N = chain.shape
    dev = chain.unary.device
    if T == 0 or B == 0:
        return torch.full((n, B, T), -1, dtype=torch.long, device=dev)
    noise = torch.empty(n, B, T, N, dtype=torch.float64, device=dev).exponential_(generator=generator).log_()
    return _ops.sample(chain.map(torch.Tensor.detach), noise)
