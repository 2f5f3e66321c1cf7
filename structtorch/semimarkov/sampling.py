"""Sampling segmentations from p(z) proportional to exp(score(z)): forward filtering, backward
sampling over segment ends, every sample and row at once."""

from __future__ import annotations

import torch
from torch import Tensor

from .._checks import LengthsLike, check_generator, check_int
from .._numerics import NEG_INF, inverse_cdf, safe_logsumexp
from .._precision import mixed_precision
from . import _ops
from ._torch import detached64, fill_labels, mark_segments, terms_with_incoming
from .layout import SemiMarkov, masked_semimarkov

__all__ = ["semimarkov_sample"]


@mixed_precision
def semimarkov_sample(
    content: Tensor,
    transitions: Tensor,
    n: int,
    *,
    max_len: int,
    length_scores: Tensor | None = None,
    boundary: Tensor | None = None,
    segment_scores: Tensor | None = None,
    start: Tensor | None = None,
    end: Tensor | None = None,
    lengths: LengthsLike = None,
    generator: torch.Generator | None = None,
    mask: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Draw ``n`` independent segmentations per sequence from p(z) = exp(score(z)) / Z.

    Potentials, ``lengths`` or ``mask`` as for :func:`structtorch.semimarkov_viterbi` (without
    segment PLiFs).

    Parameters
    ----------
    n : int
        Number of samples, >= 1.
    generator : torch.Generator, optional
        Source of randomness, on the potentials' device.

    Returns
    -------
    labels : Tensor (n, B, T) int64
        -1 beyond each length and on infeasible rows.
    starts : Tensor (n, B, T) bool
        True where a segment begins.

    Notes
    -----
    The last segment's label is drawn from the forward scores at the length, then its length;
    then the label of the segment before, and so on, each by the inverse CDF of one uniform (2 T + 1
    uniforms per sample and row, drawn at once from ``generator``; every backend maps them to the
    same segmentations, up to rounding at the boundaries between them). On the Triton backend
    one program per sample and row walks back segment by segment; elsewhere one step of a loop
    over segment ends handles every sample and row at once. O(T (B S N + B N^2 + n B (S + N))) time
    beyond the forward pass.
    """
    sm, moved = masked_semimarkov(content, transitions, max_len, length_scores, boundary, segment_scores,
                                  start, end, lengths, mask=mask)
    labels, starts = sample_semimarkov(sm, check_int("n", n, 1), check_generator(generator))
    return (moved.put(labels.movedim(0, 2), -1).movedim(2, 0),
            moved.put(starts.movedim(0, 2), False).movedim(2, 0))


@torch.no_grad()
def sample_semimarkov(sm: SemiMarkov, n: int, generator: torch.Generator | None) -> tuple[Tensor, Tensor]:
    """(labels, starts), each (n, B, T), drawn from the segmentation distribution of canonical
    potentials (see :func:`semimarkov_sample`): the backend's sampler where it has one (the
    Triton kernels), else the loop below."""
    if _ops.has_kernel(sm, "sample") and sm.shape[0] and n:
        return _ops.sample(sm, n, generator)
    sm = detached64(sm)
    B, T, S, N = sm.shape
    dev = sm.content.device
    labels = torch.full((n, B, T), -1, dtype=torch.long, device=dev)
    starts = torch.zeros((n, B, T), dtype=torch.bool, device=dev)
    if T == 0 or B == 0:
        return labels, starts
    uniforms = torch.rand(n, B, 2 * T + 1, generator=generator, dtype=torch.float64, device=dev)
    F = sm.forbidden_counts()
    alpha = [sm.start.new_full((B, N), NEG_INF)]  # alpha[e][b, n]: segmentations of [0, e) ending in n
    incoming = [sm.start]  # incoming[s][b, n]: a segment of label n starting at s
    for e in range(1, T + 1):
        alpha.append(safe_logsumexp(terms_with_incoming(sm, F, e, incoming), 1))
        incoming.append(safe_logsumexp(alpha[e].unsqueeze(2) + sm.into(e), 1))
    alphas = torch.stack(alpha, 1)  # (B, T+1, N)
    lengths = sm.lengths
    final = alphas.gather(1, lengths.view(B, 1, 1).expand(B, 1, N)).squeeze(1) + sm.end
    feasible = (lengths > 0) & (final > NEG_INF).any(1)
    rows = torch.arange(B, device=dev).expand(n, B)

    def draw(logits: Tensor, k: Tensor) -> Tensor:  # (n, B, K) with uniform number k (n, B)
        return inverse_cdf(logits, uniforms.gather(2, k.unsqueeze(2)).squeeze(2))

    k = torch.zeros(n, B, dtype=torch.long, device=dev)  # uniform 0, then two per segment
    label = draw(final.expand(n, B, N), k)  # (n, B): the label of the segment ending at e
    e_cur = lengths.expand(n, B).clone()
    active = feasible.expand(n, B).clone()
    seg_label = torch.full((n, B, T), -1, dtype=torch.long, device=dev)
    into = torch.stack([sm.into(max(j, 1)).expand(B, N, N) for j in range(T)], 1)  # (B, T, m, n): into j
    for e in range(T, 0, -1):
        here = active & (e_cur == e)
        terms = terms_with_incoming(sm, F, e, incoming)  # (B, D, N)
        d = draw(terms.transpose(1, 2)[rows, label], k + 1) + 1  # (n, B) in [1, D]
        s = e - d
        mark_segments(starts, seg_label, here, s, label)
        step = into[rows, s.clamp(min=0)].gather(3, label[..., None, None].expand(n, B, N, 1)).squeeze(3)
        before = alphas[rows, s.clamp(min=0)] + step  # (n, B, N): label m of the segment before
        label = torch.where(here & (s > 0), draw(before, k + 2), label)
        k = torch.where(here, k + 2, k)
        e_cur = torch.where(here, s, e_cur)
        active = active & ~(here & (s == 0))
    inside = torch.arange(T, device=dev) < lengths[:, None]
    return fill_labels(starts, seg_label, inside & feasible[:, None]), starts & feasible[:, None]
