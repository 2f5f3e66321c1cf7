"""Exact sampling of trees: dependency trees (projective or not) by sequential conditioning, one
word at a time (its head drawn from the arc marginals given the heads drawn so far, which are then
fixed: T + 1 marginal computations, O(T^4) for projective trees), and labeled constituency trees top
down (each span's split drawn from the inside chart, its label from the softmax of its scores: as
many rounds as the trees are deep)."""

from __future__ import annotations

import torch
from torch import Tensor

from .._checks import LengthsLike, check_generator, check_int
from .._expectations import logz_and_grads
from .._numerics import NEG_INF, accumulate, safe_logsumexp
from .._precision import mixed_precision
from . import _ops, _torch
from .layout import checked_arcs, checked_spans

__all__ = ["dependency_sample", "cky_sample"]


def _draw(weights: Tensor, generator: torch.Generator | None) -> Tensor:
    """One index per row of nonnegative ``weights`` (R, K), drawn with probability proportional to
    them (by the inverse of the cumulative sum; a positive weight always: u in (0, 1])."""
    cdf = weights.cumsum(1)
    u = 1.0 - torch.rand(weights.shape[0], generator=generator, dtype=cdf.dtype, device=cdf.device)
    return (cdf < (u * cdf[:, -1])[:, None]).sum(1).clamp(max=weights.shape[1] - 1)


def sample_heads(arcs: Tensor, lengths: Tensor, n: int, projective: bool, single_root: bool,
                 generator: torch.Generator | None) -> Tensor:
    """(n, B, T + 1) heads drawn from the trees of checked, detached arcs (accumulation dtype)."""
    B, T1, _ = arcs.shape
    arcs = arcs.repeat(n, 1, 1)
    L = lengths.repeat(n)

    def logz(a: Tensor) -> Tensor:
        return _ops.log_partition(a, L, projective, single_root)

    feasible = logz(arcs) > NEG_INF
    heads = torch.full((n * B, T1), -1, dtype=torch.long, device=arcs.device)
    h = torch.arange(T1, device=arcs.device)
    for m in range(1, T1):
        active = (m <= L) & feasible
        marginal = logz_and_grads(logz, [arcs])[1][0][:, :, m]  # p(head of m = h | heads so far)
        drawn = torch.where(active, _draw(marginal.clamp(min=0), generator), -1)
        heads[:, m] = drawn
        arcs[:, :, m] = torch.where(active[:, None] & (h != drawn[:, None]), NEG_INF, arcs[:, :, m])
    return heads.view(n, B, T1)


@mixed_precision
def dependency_sample(arc_scores: Tensor, n: int, lengths: LengthsLike = None, *, projective: bool = True,
                      single_root: bool = False, generator: torch.Generator | None = None) -> Tensor:
    """``n`` dependency trees per sentence drawn exactly from p(tree) = exp(score - logZ).

    Parameters
    ----------
    arc_scores, lengths, projective, single_root
        As for :func:`structtorch.dependency_log_partition`.
    n : int
        Trees per sentence, >= 1.
    generator : torch.Generator, optional

    Returns
    -------
    Tensor (n, B, T + 1) int64
        Heads; -1 at the root, beyond each length and on sentences without a tree.
    """
    scores, lengths, projective, single = checked_arcs(arc_scores, lengths, projective, single_root)
    n = check_int("n", n, 1)
    check_generator(generator)
    with torch.no_grad():
        return sample_heads(accumulate(scores.detach()), lengths, n, projective, single, generator)


def sample_spans(scores: Tensor, lengths: Tensor, n: int, generator: torch.Generator | None) -> Tensor:
    """(n, B, T, T, N) labeled trees drawn from checked, detached span scores (accumulation dtype)."""
    B, T, _, N = scores.shape
    out = scores.new_zeros(n * B, T, T, N)
    if T == 0:
        return out.view(n, B, T, T, N)
    tiled = scores.repeat(n, 1, 1, 1)
    L = lengths.repeat(n)
    reduced = safe_logsumexp(tiled, 3)  # (nB, T, T) each span's labels summed
    chart = _torch.cky_chart(reduced, _torch.LOG)  # (nB, start, width)
    rows = torch.nonzero((L > 0) & (chart[torch.arange(n * B), 0, (L - 1).clamp(min=0)] > NEG_INF)).squeeze(1)
    i, j = torch.zeros_like(rows), L[rows] - 1  # the spans to expand, one per tree to begin with
    k = torch.arange(T, device=scores.device)
    while rows.numel():
        label = _draw(torch.softmax(tiled[rows, i, j], 1).nan_to_num(0.0), generator)
        out[rows, i, j, label] = 1.0
        inner = j > i
        rows, i, j = rows[inner], i[inner], j[inner]
        # split after i + s, s = 0..j-i-1: inside [i, i + s] + inside [i + s + 1, j]
        left = chart[rows[:, None], i[:, None], k[None, :].expand(len(rows), T)]
        right_width = (j - i - 1)[:, None] - k[None, :]
        right = chart[rows[:, None], (i[:, None] + k + 1).clamp(max=T - 1), right_width.clamp(min=0)]
        logits = torch.where(right_width >= 0, left + right, NEG_INF)
        split = i + _draw(torch.softmax(logits, 1), generator)
        rows, i, j = torch.cat([rows, rows]), torch.cat([i, split + 1]), torch.cat([split, j])
    return out.view(n, B, T, T, N)


@mixed_precision
def cky_sample(span_scores: Tensor, n: int, lengths: LengthsLike = None, *,
               generator: torch.Generator | None = None) -> Tensor:
    """``n`` labeled binary trees per sentence drawn exactly from p(tree) = exp(score - logZ).

    Parameters
    ----------
    span_scores, lengths
        As for :func:`structtorch.cky_log_partition`.
    n : int
        Trees per sentence, >= 1.
    generator : torch.Generator, optional

    Returns
    -------
    Tensor (n, B, T, T, N)
        1 at each drawn tree's labeled spans, in the dtype of ``span_scores``; all 0 without words or
        a tree.
    """
    scores, lengths = checked_spans(span_scores, lengths)
    n = check_int("n", n, 1)
    check_generator(generator)
    with torch.no_grad():
        return sample_spans(accumulate(scores.detach()), lengths, n, generator).to(scores.dtype)
