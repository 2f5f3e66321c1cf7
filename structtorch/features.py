"""Joint feature maps as layers: the HM-SVM linear model and histogram binning of signals."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ._checks import LengthsLike, check_lengths

__all__ = ["LinearChainPotentials", "HistogramBinning"]


class LinearChainPotentials(nn.Module):
    """The hidden Markov SVM joint feature map (Bauer et al. 2014, eq. 1) as a linear model.

    Psi(x, y) = (sum_t phi(x_t) (x) e(y_t), sum_t e(y_{t-1}) (x) e(y_t)), so <w, Psi(x, y)> is a
    chain score with unary[b, t, j] = <w_j, x[b, t]> and a learnable (N, N) transition matrix.

    Parameters
    ----------
    in_features : int
        F, the size of phi(x_t).
    num_labels : int
        N.
    bias : bool
        Add a per-label bias to the unary scores (a constant feature).
    """

    def __init__(self, in_features: int, num_labels: int, *, bias: bool = True) -> None:
        super().__init__()
        self.emission = nn.Linear(in_features, num_labels, bias=bias)
        self.transitions = nn.Parameter(torch.zeros(num_labels, num_labels))
        nn.init.zeros_(self.emission.weight)
        if bias:
            nn.init.zeros_(self.emission.bias)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """x (B, T, F) -> (unary (B, T, N), transitions (N, N))."""
        if x.dim() != 3 or x.shape[2] != self.emission.in_features:
            raise ValueError(
                f"x must have shape (B, T, F) = (B, T, {self.emission.in_features}), got {tuple(x.shape)}"
            )
        return self.emission(x), self.transitions


class HistogramBinning(nn.Module):
    """One-hot histogram features of continuous signals (the paper uses 10 bins).

    ``fit`` places ``num_bins - 1`` edges per feature at the quantiles of the training signals;
    ``forward`` maps x (B, T, F) to (B, T, F * num_bins) indicators of the bin of each feature.
    """

    edges: Tensor

    def __init__(self, num_features: int, num_bins: int = 10) -> None:
        super().__init__()
        if num_bins < 2:
            raise ValueError(f"num_bins must be >= 2, got {num_bins}")
        self.num_bins = num_bins
        self.register_buffer("edges", torch.zeros(num_features, num_bins - 1))

    def fit(self, x: Tensor, lengths: LengthsLike = None) -> HistogramBinning:
        """Set the edges from x (B, T, F) at positions inside ``lengths``; returns self."""
        F = self.edges.shape[0]
        if x.dim() != 3 or x.shape[2] != F:
            raise ValueError(f"x must have shape (B, T, F) = (B, T, {F}), got {tuple(x.shape)}")
        B, T, _ = x.shape
        inside = torch.arange(T, device=x.device) < check_lengths(lengths, B, T, x.device)[:, None]
        values = x[inside].double()  # (n, F)
        if values.shape[0] == 0:
            raise ValueError("fit needs at least one position inside the lengths")
        q = torch.linspace(0, 1, self.num_bins + 1, dtype=torch.float64, device=x.device)[1:-1]
        self.edges = torch.quantile(values, q, dim=0).T.contiguous().to(self.edges)
        return self

    def forward(self, x: Tensor) -> Tensor:
        F = self.edges.shape[0]
        if x.dim() != 3 or x.shape[2] != F:
            raise ValueError(f"x must have shape (B, T, F) = (B, T, {F}), got {tuple(x.shape)}")
        bins = (x.unsqueeze(-1) > self.edges.to(x.dtype)).sum(-1)  # edges below each value
        onehot = nn.functional.one_hot(bins, self.num_bins).to(x.dtype)
        return onehot.reshape(*x.shape[:2], F * self.num_bins)
