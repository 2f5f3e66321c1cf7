"""Piecewise-linear functions (PLiFs) as tensors: evaluation, hat-function features and the
segment-mean PLiF features the semi-Markov dynamic programs accumulate (Rätsch & Sonnenburg, 2007,
eqs. 7-8). The learnable module is :class:`structtorch.PLiF`."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from .._checks import check_device, check_finite, check_float, check_int

_SUPPORT_MAX = torch.finfo(torch.float32).max / 4  # |low|, |high|: x - low never overflows float32
_SPACING_MIN = torch.finfo(torch.float32).tiny  # a normal float32: 1 / spacing stays finite


def check_support(num_points: int, low: float, high: float) -> tuple[float, float]:
    """Validate a PLiF support of ``num_points`` evenly spaced points in [low, high].

    Needs finite low < high with |low|, |high| <= 8.5e37 and a spacing (high - low) / (P - 1) of at
    least 1.2e-38 (a normal float32), so interpolation indices are never NaN or infinite in float32
    or float64. Returns (low, high) as floats.
    """
    try:
        low, high = float(low), float(high)
    except (TypeError, ValueError):
        raise TypeError(f"low and high must be real numbers, got low={low!r}, high={high!r}") from None
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise ValueError(f"need finite low < high, got low={low}, high={high}")
    if max(abs(low), abs(high)) > _SUPPORT_MAX:
        raise ValueError(f"low and high must lie within +-{_SUPPORT_MAX:.3g}, got low={low}, high={high}")
    if (high - low) / (num_points - 1) < _SPACING_MIN:
        raise ValueError(
            f"the support [low, high] = [{low}, {high}] is too narrow for {num_points} points: the spacing "
            f"(high - low) / (num_points - 1) must be at least {_SPACING_MIN:.3g}")
    return low, high


def _plif_position(x: Tensor, P: int, low: float, high: float) -> tuple[Tensor, Tensor]:
    """Left support index (int64) and fraction toward the next one, for x clamped to [low, high]."""
    low, high = check_support(P, low, high)
    pos = (x.clamp(low, high) - low) * ((P - 1) / (high - low))
    left = pos.nan_to_num(0.0).floor().clamp(max=P - 2).long()  # NaN (unchecked) reads index 0
    return left, pos - left


def plif_interpolate(x: Tensor, ordinates: Tensor, low: float, high: float) -> Tensor:
    """Evaluate K piecewise-linear functions side by side.

    Parameters
    ----------
    x : Tensor (..., K)
        Inputs; function k reads ``x[..., k]``. Values outside [low, high], -inf and +inf
        included, are clamped; NaN is refused.
    ordinates : Tensor (K, P)
        Function values at P >= 2 evenly spaced support points ``low = x_1 < ... < x_P = high``.
    low, high : float

    Returns
    -------
    Tensor (..., K), differentiable w.r.t. ``ordinates`` (and ``x`` inside the support).
    """
    x = check_float("x", x, posinf=True)
    ordinates = check_float("ordinates", ordinates)
    if ordinates.dim() != 2 or ordinates.shape[1] < 2:
        raise ValueError(f"ordinates must be a (K, P) tensor with P >= 2, got shape {tuple(ordinates.shape)}")
    check_finite("ordinates", ordinates)
    K, P = ordinates.shape
    if x.dim() < 1 or x.shape[-1] != K:
        raise ValueError(f"x must have shape (..., K) = (..., {K}) for ordinates (K, P) = ({K}, {P}), "
                         f"got {tuple(x.shape)}")
    check_device("x", x, ordinates, "ordinates")
    left, frac = _plif_position(x, P, low, high)
    idx = left + torch.arange(K, device=x.device) * P
    flat = ordinates.reshape(-1)
    y0, y1 = flat[idx], flat[idx + 1]
    return y0 + frac.to(ordinates.dtype) * (y1 - y0)


def plif_basis(x: Tensor, num_points: int, low: float, high: float) -> Tensor:
    """Hat-function features phi (..., P) of x (...), so that a PLiF with ordinates w (P,) takes the
    value ``phi @ w`` at x: the joint feature map of a PLiF is linear in its ordinates."""
    x = check_float("x", x, posinf=True)
    check_int("num_points", num_points, 2)
    left, frac = _plif_position(x, num_points, low, high)
    phi = x.new_zeros(*x.shape, num_points)
    phi.scatter_(-1, left.unsqueeze(-1), (1 - frac).unsqueeze(-1))
    return phi.scatter_add_(-1, (left + 1).unsqueeze(-1), frac.unsqueeze(-1))


@dataclass
class SegmentPLiF:
    """Segment-level PLiF features for the semi-Markov layers (Rätsch & Sonnenburg, eq. 7).

    A segment [s, e) of label n scores ``PLiF_n(mean(tracks[b, s:e, n]))``: a content sensor whose
    output on a segment is the mean of per-position contributions (a linear model on the segment's
    k-mer frequencies is one), transformed by a learned piecewise-linear function. The means
    accumulate as segments grow inside the DP, so nothing of size (B, T, S, N) is materialized.

    Attributes
    ----------
    tracks : Tensor (B, T, N)
        Per-position sensor contributions, finite, for each label.
    ordinates : Tensor (N, P)
        PLiF values at P >= 2 evenly spaced support points in [low, high].
    low, high : float
    """

    tracks: Tensor
    ordinates: Tensor
    low: float
    high: float

    def segment_value(self, means: Tensor) -> Tensor:
        """PLiF_n of segment means (..., N) -> (..., N)."""
        return plif_interpolate(means, self.ordinates, self.low, self.high)
