"""The synthetic gene-finding data of Bauer et al. (2014), section IV.A."""

from __future__ import annotations

import torch

from .._checks import check_int, check_number
from .tagging import SequenceData

START, NEGATIVE, POSITIVE, END = 0, 1, 2, 3
LABEL_NAMES = ("start", "-1", "+1", "end")


def bauer_synthetic(n: int, sigma: float, *, T: int = 100, r: int = 4, seed: int = 0) -> SequenceData:
    """Sample ``n`` sequences of the paper's synthetic experiment.

    Each label sequence starts as all -1; then 0 to 4 positive (+1) blocks are placed, their
    number, position and length (10 to 40) drawn uniformly (blocks may overlap). The first site is
    the start state and the last the end state. Observations are the +-1 signal plus Gaussian
    noise of standard deviation ``sigma`` in ``r`` rows.

    Returns
    -------
    SequenceData
        ``x`` (n, T, r) float32 signals, ``labels`` (n, T) int64 in {0: start, 1: -1, 2: +1,
        3: end}, ``lengths`` (n,) all T.
    """
    check_int("n", n, 0)
    check_int("T", T, 3)  # start, body, end
    check_int("r", r, 1)
    check_int("seed", seed)
    check_number("sigma", sigma, low=0.0)
    g = torch.Generator().manual_seed(seed)
    signal = -torch.ones(n, T)
    blocks = torch.randint(0, 5, (n,), generator=g)
    for i in range(n):  # at most 4 blocks per sequence: generation, not a hot path
        for _ in range(int(blocks[i])):
            length = int(torch.randint(10, 41, (1,), generator=g))
            begin = int(torch.randint(0, max(T - length, 0) + 1, (1,), generator=g))
            signal[i, begin : begin + length] = 1.0
    labels = torch.where(signal > 0, POSITIVE, NEGATIVE)
    labels[:, 0], labels[:, -1] = START, END
    x = signal.unsqueeze(2) + sigma * torch.randn(n, T, r, generator=g)
    return SequenceData(x, labels.long(), torch.full((n,), T, dtype=torch.long))


def bauer_features(x: torch.Tensor, binning) -> torch.Tensor:
    """The joint feature map's phi(x_t) for this data: histogram features of the r signals
    (``binning``, a fitted :class:`structtorch.HistogramBinning`) plus two indicators of the first
    and the last site, where the start and end states live. Returns (n, T, r * bins + 2)."""
    n, T, _ = x.shape
    site = torch.zeros(n, T, 2, dtype=x.dtype)
    site[:, 0, 0] = 1.0
    site[:, -1, 1] = 1.0
    return torch.cat([binning(x), site], dim=2)
