"""Pitch-accent-like chains: binary labels with strong dependencies and token features near a
low-dimensional manifold (for semi-supervised learning, Altun, McAllester & Belkin 2005).

The pitch accent task of the paper labels each word of an utterance accented or not from 31
acoustic and lexical features; labels depend strongly on their neighbours. Here every token has a
latent point ``u`` uniform in the unit square, lifted to D dimensions by a fixed smooth random map
(a curved 2-D sheet: random orthonormal combinations of ``sin(u F)`` and ``cos(u F)``), and pushed
off the sheet by ``+-offset`` along a smoothly varying unit normal field, the sign given by its label
(a fraction ``ambiguity`` of the tokens lies on a third sheet, ``2 offset`` away along a second
normal field: their observation says nothing of their label, and they do not bridge the two
labels' sheets).
The two labels thus lie on two parallel, wrinkled sheets: close in Euclidean distance (a kernel
classifier needs many labels to follow the wrinkles) but each sheet connected along itself, so a
kNN graph over many unlabeled tokens links tokens of one label. Labels follow a two-state Markov
chain with informative transitions (``stay``), so a chain model beats per-token classification.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .._checks import check_int, check_number
from .tagging import SequenceData

__all__ = ["pitch_accent_like", "PITCH_FEATURES"]

PITCH_FEATURES = 31


def pitch_accent_like(n: int, *, min_length: int = 8, max_length: int = 16,
                      stay: tuple[float, float] = (0.2, 0.3), offset: float = 0.3, wrinkle: float = 4.0,
                      ambiguity: float = 0.3, noise: float = 0.02, dim: int = PITCH_FEATURES, seed: int = 0,
                      embedding_seed: int = 1234) -> SequenceData:
    """Sample ``n`` binary label chains with manifold token features.

    Parameters
    ----------
    n : int
        Number of sequences.
    min_length, max_length : int
        Lengths are uniform in [min_length, max_length].
    stay : (float, float)
        ``P(y_t+1 = s | y_t = s)`` for s = 0, 1 (the default alternates: accents rarely follow
        accents, and unaccented words come in short runs).
    offset : float > 0
        Distance of each label's sheet from the middle one (the sheet itself has diameter about 1).
    wrinkle : float > 0
        Frequency scale of the sheet and of its normal field: larger is harder for a kernel
        classifier with few labels.
    ambiguity : float in [0, 1]
        Fraction of tokens placed on the third sheet (ambiguous observations, as words
        whose accent is not heard): the best per-token accuracy is about ``1 - ambiguity / 2``,
        and the label context recovers much of the rest.
    noise : float >= 0
        Isotropic feature noise.
    dim : int >= 17
        D, the feature dimension (31 as in the paper).
    seed : int
        Seed of the sequences.
    embedding_seed : int
        Seed of the fixed sheet and normal field: keep it to draw train and test sets of one task.

    Returns
    -------
    SequenceData
        ``x`` (n, T, D) float32 (0 beyond each length), ``labels`` (n, T) int64 in {0, 1},
        ``lengths`` (n,).
    """
    n = check_int("n", n, 1)
    min_length = check_int("min_length", min_length, 1)
    max_length = check_int("max_length", max_length, min_length)
    dim = check_int("dim", dim, 17)
    offset = check_number("offset", offset, low=0.0, open_low=True)
    wrinkle = check_number("wrinkle", wrinkle, low=0.0, open_low=True)
    noise = check_number("noise", noise, low=0.0)
    ambiguity = check_number("ambiguity", ambiguity, low=0.0, high=1.0)
    if len(stay) != 2:
        raise ValueError(f"stay must be two probabilities (label 0, label 1), got {stay!r}")
    p_stay = torch.tensor([check_number(f"stay[{s}]", p, low=0.0, high=1.0) for s, p in enumerate(stay)])
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(min_length, max_length + 1, (n,), generator=g)
    T = int(lengths.max())
    labels = torch.zeros(n, T, dtype=torch.long)
    labels[:, 0] = (torch.rand(n, generator=g) < 0.5).long()
    for t in range(1, T):
        prev = labels[:, t - 1]
        labels[:, t] = torch.where(torch.rand(n, generator=g) < p_stay[prev], prev, 1 - prev)
    e = torch.Generator().manual_seed(embedding_seed)
    F_sheet = torch.randn(2, 8, generator=e, dtype=torch.float64) * wrinkle
    F_normal = torch.randn(2, 8, generator=e, dtype=torch.float64) * wrinkle
    A_sheet = torch.linalg.qr(torch.randn(dim, 16, generator=e, dtype=torch.float64))[0].T  # (16, D)
    A_normal = torch.randn(16, dim, generator=e, dtype=torch.float64) / 4
    A_aside = torch.randn(16, dim, generator=e, dtype=torch.float64) / 4

    def waves(u: Tensor, F: Tensor) -> Tensor:
        return torch.cat([torch.sin(u @ F), torch.cos(u @ F)], -1)

    u = torch.rand(n, T, 2, generator=g, dtype=torch.float64)
    normal = waves(u, F_normal) @ A_normal
    normal = normal / normal.norm(dim=-1, keepdim=True)
    aside = waves(u, F_normal) @ A_aside  # a second unit field, orthogonal to the first
    aside = aside - (aside * normal).sum(-1, keepdim=True) * normal
    aside = aside / aside.norm(dim=-1, keepdim=True)
    ambiguous = (torch.rand(n, T, generator=g) < ambiguity)[..., None]
    sign = torch.where(ambiguous, 0.0, (2 * labels - 1).to(torch.float64)[..., None])
    x = waves(u, F_sheet) @ A_sheet + offset * (sign * normal + 2.0 * ambiguous * aside)
    x = x + noise * torch.randn(n, T, dim, generator=g, dtype=torch.float64)
    inside = torch.arange(T) < lengths[:, None]
    x = torch.where(inside[..., None], x, torch.zeros((), dtype=x.dtype))
    labels = torch.where(inside, labels, torch.zeros((), dtype=torch.long))
    return SequenceData(x.float(), labels, lengths)
