"""Labelings from (possibly fractional) LP solutions."""

from __future__ import annotations

import torch
from torch import Tensor

from .._checks import check_values
from ._options import check_real_tensor

__all__ = ["round_labels", "fractional", "fractional_nodes", "FRACTIONAL_TOL"]

FRACTIONAL_TOL = 1e-6


def fractional(x: Tensor) -> Tensor:
    """Entries strictly inside (0, 1), beyond FRACTIONAL_TOL."""
    return (x > FRACTIONAL_TOL) & (x < 1 - FRACTIONAL_TOL)


def fractional_nodes(mu: Tensor) -> Tensor:
    """(B,) fraction of the V nodes of mu (B, V, L) with a fractional variable (0 when V = 0), in
    mu's dtype (float64 for integer mu)."""
    dtype = mu.dtype if mu.dtype.is_floating_point else torch.float64
    return fractional(mu).any(2).to(dtype).sum(1) / max(mu.shape[1], 1)


def round_labels(mu: Tensor) -> tuple[Tensor, Tensor]:
    """Round node variables to labels.

    Parameters
    ----------
    mu : Tensor (V, L) or (B, V, L)
        Node variables of an LP solution (rows sum to one).

    Returns
    -------
    labels : Tensor (B, V) int64
        ``argmax_s mu_i(s)`` (ties: the smallest label, so a node at 1/2 foreground, 1/2
        background rounds to label 0, the thesis's "round down" for binary problems).
    fractional : Tensor (B,)
        Fraction of nodes with a variable strictly between 0 and 1 (beyond 1e-6); 0 when V = 0.
    """
    check_real_tensor("mu", mu)
    if mu.dim() not in (2, 3):
        raise ValueError(f"mu must have shape (V, L) or (B, V, L), got {tuple(mu.shape)}")
    if mu.shape[-1] == 0:
        raise ValueError(f"mu must have at least one label (L >= 1), got shape {tuple(mu.shape)}")
    mu = mu.unsqueeze(0) if mu.dim() == 2 else mu
    check_values("mu", mu, posinf=True)
    return mu.argmax(2), fractional_nodes(mu)
