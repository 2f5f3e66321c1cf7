"""Joint feature maps as layers: the HM-SVM linear model and histogram binning of signals."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .._checks import LengthsLike, check_int, check_lengths
from ..semimarkov.plif import SegmentPLiF, check_support, plif_basis, plif_interpolate

__all__ = ["LinearChainPotentials", "HistogramBinning", "PLiF", "plif_interpolate", "plif_basis",
           "SegmentPLiF"]


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

    Examples
    --------
    >>> import torch, structtorch as st
    >>> model = st.LinearChainPotentials(in_features=3, num_labels=2)
    >>> unary, transitions = model(torch.randn(4, 5, 3))  # x (B, T, F)
    >>> unary.shape, transitions.shape
    (torch.Size([4, 5, 2]), torch.Size([2, 2]))
    >>> loss = st.StructuredHingeLoss()(unary, transitions, torch.zeros(4, 5, dtype=torch.long))
    """

    def __init__(self, in_features: int, num_labels: int, *, bias: bool = True) -> None:
        super().__init__()
        check_int("in_features", in_features, 1)
        check_int("num_labels", num_labels, 1)
        self.emission = nn.Linear(in_features, num_labels, bias=bias)
        self.transitions = nn.Parameter(torch.zeros(num_labels, num_labels))
        nn.init.zeros_(self.emission.weight)
        if bias:
            nn.init.zeros_(self.emission.bias)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """x (B, T, F) -> (unary (B, T, N), transitions (N, N))."""
        if not isinstance(x, Tensor):
            raise TypeError(f"x must be a torch.Tensor of shape (B, T, F), got {type(x).__name__}")
        if x.dim() != 3 or x.shape[2] != self.emission.in_features:
            raise ValueError(
                f"x must have shape (B, T, F) = (B, T, {self.emission.in_features}), got {tuple(x.shape)}"
            )
        if x.dtype != self.emission.weight.dtype:
            raise TypeError(
                f"x has dtype {x.dtype} but the model's parameters are {self.emission.weight.dtype}: "
                f"convert one of them (e.g. model.to({x.dtype}) or x.to({self.emission.weight.dtype}))")
        return self.emission(x), self.transitions


class HistogramBinning(nn.Module):
    """One-hot histogram features of continuous signals (the paper uses 10 bins).

    ``fit`` places ``num_bins - 1`` edges per feature at the quantiles of the training signals;
    ``forward`` maps x (B, T, F) to (B, T, F * num_bins) indicators of the bin of each feature.
    """

    edges: Tensor

    def __init__(self, num_features: int, num_bins: int = 10) -> None:
        super().__init__()
        check_int("num_features", num_features, 1)
        self.num_bins = check_int("num_bins", num_bins, 2)
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


class PLiF(nn.Module):
    """Piecewise-linear functions with fixed, evenly spaced support points (Rätsch & Sonnenburg).

    ``num_functions`` independent functions share the support points
    ``low = x_1 < ... < x_P = high``; their ordinates are learnable. Inputs are linearly
    interpolated and clamped to [low, high] outside (-inf and +inf included; NaN is refused while
    value checks are on, see :class:`structtorch.set_validation`). ``monotone="increasing"`` (or
    ``"decreasing"``) is enforced by the parametrization: the ordinates are a free first value
    plus cumulative softplus steps.

    Parameters
    ----------
    num_points : int
        P >= 2 support points.
    low, high : float
        The support interval, low < high.
    num_functions : int
        K functions evaluated side by side.
    monotone : {None, "increasing", "decreasing"}

    Shapes: ``forward(x)`` maps x (..., K) (or (...) when K = 1) to the same shape.
    """

    def __init__(self, num_points: int, low: float, high: float, *, num_functions: int = 1,
                 monotone: str | None = None) -> None:
        super().__init__()
        if isinstance(num_points, bool) or not isinstance(num_points, int) or num_points < 2:
            raise ValueError(f"num_points must be an int >= 2, got {num_points!r}")
        low, high = check_support(num_points, low, high)
        if isinstance(num_functions, bool) or not isinstance(num_functions, int) or num_functions < 1:
            raise ValueError(f"num_functions must be an int >= 1, got {num_functions!r}")
        if monotone not in (None, "increasing", "decreasing"):
            raise ValueError(f"monotone must be None, 'increasing' or 'decreasing', got {monotone!r}")
        self.low, self.high, self.monotone = float(low), float(high), monotone
        self.num_functions = num_functions
        self.register_buffer("support", torch.linspace(self.low, self.high, num_points))
        self.raw = nn.Parameter(torch.zeros(num_functions, num_points))
        if monotone is not None:  # start nearly flat: softplus(-6) ~ 0.0025 per step
            self.raw.data[:, 1:] = -6.0

    def extra_repr(self) -> str:
        return (f"num_points={self.support.numel()}, low={self.low}, high={self.high}, "
                f"num_functions={self.num_functions}, monotone={self.monotone!r}")

    @property
    def ordinates(self) -> Tensor:
        """(K, P) function values at the support points."""
        if self.monotone is None:
            return self.raw
        steps = nn.functional.softplus(self.raw[:, 1:])
        sign = 1.0 if self.monotone == "increasing" else -1.0
        return torch.cat([self.raw[:, :1], self.raw[:, :1] + sign * steps.cumsum(1)], 1)

    def forward(self, x: Tensor) -> Tensor:
        K, P = self.raw.shape
        if not isinstance(x, Tensor):
            raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
        squeeze = K == 1 and (x.dim() == 0 or x.shape[-1] != 1)
        if squeeze:
            x = x.unsqueeze(-1)
        if x.shape[-1] != K:
            raise ValueError(f"x must have shape (..., num_functions) = (..., {K}), got {tuple(x.shape)}")
        out = plif_interpolate(x, self.ordinates, self.low, self.high)
        return out.squeeze(-1) if squeeze else out

    def over_segments(self, tracks: Tensor) -> SegmentPLiF:
        """Segment-mean features for the semi-Markov layers: a segment [s, e) of label n scores
        ``PLiF_n(mean(tracks[b, s:e, n]))``. tracks (B, T, N) with N = num_functions."""
        return SegmentPLiF(tracks, self.ordinates, self.low, self.high)

    def smoothness(self) -> Tensor:
        """The paper's regularizer summed over the functions: ``sum_i |w_i - w_{i+1}| + |w_P - w_1|``.

        (Reconstructed from the garbled formula of section 4.3: the differences between
        neighbouring ordinates plus the boundary term between the last and the first.)"""
        y = self.ordinates
        return y.diff(dim=1).abs().sum() + (y[:, -1] - y[:, 0]).abs().sum()
