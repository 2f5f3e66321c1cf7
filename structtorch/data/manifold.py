"""Pitch-accent-like chains: binary labels with strong dependencies and token features near a
low-dimensional manifold (for semi-supervised learning, Altun, McAllester & Belkin 2005).

The pitch accent task of the paper labels each word of an utterance accented or not from 31
acoustic and lexical features; labels depend strongly on their neighbours. Here each label owns
one arc of a pair of interleaved half-circles ("two moons") in a latent plane; a token's latent
point is drawn along its label's arc, and a fixed random smooth map lifts the plane to 31
dimensions (a random linear map of ``[z, sin(w z), cos(w z)]`` features plus isotropic noise).
Close to the arcs the two labels' tokens are near each other in Euclidean distance yet far along
the manifold, so a kernel classifier trained on a few labeled tokens errs where a graph over many
unlabeled tokens follows the arcs. Labels follow a two-state Markov chain whose transitions are
informative (``stay``), so a chain model also beats per-token classification.
"""

from __future__ import annotations

import math

import torch

from .._checks import check_int, check_number
from .tagging import SequenceData

__all__ = ["pitch_accent_like", "PITCH_FEATURES"]

PITCH_FEATURES = 31


def pitch_accent_like(n: int, *, min_length: int = 8, max_length: int = 16,
                      stay: tuple[float, float] = (0.2, 0.3), noise: float = 0.25,
                      dim: int = PITCH_FEATURES, seed: int = 0, embedding_seed: int = 1234) -> SequenceData:
    """Sample ``n`` binary label chains with manifold token features.

    Parameters
    ----------
    n : int
        Number of sequences.
    min_length, max_length : int
        Lengths are uniform in [min_length, max_length].
    stay : (float, float)
        ``P(y_t+1 = s | y_t = s)`` for s = 0, 1 (the default alternates: accents rarely follow
        accents, as in speech, and unaccented words come in short runs).
    noise : float >= 0
        Standard deviation of the latent noise around the arcs (in units of the arcs' radius).
    dim : int >= 4
        D, the feature dimension (31 as in the paper).
    seed : int
        Seed of the sequences.
    embedding_seed : int
        Seed of the fixed map from the latent plane to D dimensions: keep it to draw train and test
        sets of one task.

    Returns
    -------
    SequenceData
        ``x`` (n, T, D) float32 (0 beyond each length), ``labels`` (n, T) int64 in {0, 1},
        ``lengths`` (n,).
    """
    n = check_int("n", n, 1)
    min_length = check_int("min_length", min_length, 1)
    max_length = check_int("max_length", max_length, min_length)
    dim = check_int("dim", dim, 4)
    noise = check_number("noise", noise, low=0.0)
    if len(stay) != 2:
        raise ValueError(f"stay must be two probabilities (label 0, label 1), got {stay!r}")
    p_stay = [check_number(f"stay[{s}]", p, low=0.0, high=1.0) for s, p in enumerate(stay)]
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(min_length, max_length + 1, (n,), generator=g)
    T = int(lengths.max())
    labels = torch.zeros(n, T, dtype=torch.long)
    labels[:, 0] = (torch.rand(n, generator=g) < 0.5).long()
    for t in range(1, T):
        prev = labels[:, t - 1]
        stay_here = torch.rand(n, generator=g) < torch.tensor(p_stay)[prev]
        labels[:, t] = torch.where(stay_here, prev, 1 - prev)
    # latent two moons: label 0 on the upper arc, label 1 on the lower arc shifted right
    angle = torch.rand(n, T, generator=g) * math.pi
    upper = torch.stack([torch.cos(angle), torch.sin(angle)], -1)
    lower = torch.stack([1.0 - torch.cos(angle), 0.5 - torch.sin(angle)], -1)
    z = torch.where(labels[..., None] == 0, upper, lower) + noise * torch.randn(n, T, 2, generator=g)
    e = torch.Generator().manual_seed(embedding_seed)
    freq = 1.0 + torch.rand(2, generator=e)
    lifted = torch.cat([z, torch.sin(freq * z), torch.cos(freq * z)], -1)  # (n, T, 6)
    A = torch.linalg.qr(torch.randn(dim, 6, generator=e))[0].T  # (6, D) orthonormal rows
    x = lifted @ A + 0.05 * torch.randn(n, T, dim, generator=g)
    inside = torch.arange(T) < lengths[:, None]
    x = torch.where(inside[..., None], x, torch.zeros(()))
    labels = torch.where(inside, labels, torch.zeros((), dtype=torch.long))
    return SequenceData(x.float(), labels, lengths)
