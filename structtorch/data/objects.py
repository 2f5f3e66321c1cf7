"""Synthetic object segmentation: one connected object on a cluttered background.

A stand-in for the class-vs-background VOC experiments of Nowozin (2009, §6.5.2): images are
H x W grids of "superpixels" (a 4-neighbourhood graph) with F-dimensional appearance features.
Each class has its own object shape (an elongated bar, a round blob or a ring) and appearance.
The object is one connected region whose features are noisy, with patches where the object looks
like the background. The background holds clutter: small patches that look like the object. A
per-node classifier labels clutter as foreground and breaks the object into pieces; the prior
"one connected object" fixes both.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .._checks import check_int, check_number

__all__ = ["ObjectData", "synthetic_objects", "OBJECT_CLASSES"]

OBJECT_CLASSES = ("bar", "blob", "ring")


@dataclass
class ObjectData:
    """Images of one class.

    Attributes
    ----------
    x : Tensor (n, V, F) float64 node features (the last feature is a constant 1)
    labels : Tensor (n, V) int64, 1 on the object
    edges : Tensor (E, 2) int64 grid edges shared by all images
    shape : (H, W)
    """

    x: Tensor
    labels: Tensor
    edges: Tensor
    shape: tuple[int, int]

    def __len__(self) -> int:
        return self.x.shape[0]


def _object_mask(cls: str, H: int, W: int, g: torch.Generator) -> Tensor:
    r = torch.arange(H, dtype=torch.float64).view(H, 1)
    c = torch.arange(W, dtype=torch.float64).view(1, W)
    cy = H / 2 + (torch.rand(1, generator=g).item() - 0.5) * H / 3
    cx = W / 2 + (torch.rand(1, generator=g).item() - 0.5) * W / 3
    if cls == "bar":
        angle = torch.rand(1, generator=g).item() * 3.1416
        along = (r - cy) * torch.tensor(angle).cos() + (c - cx) * torch.tensor(angle).sin()
        across = -(r - cy) * torch.tensor(angle).sin() + (c - cx) * torch.tensor(angle).cos()
        return (along.abs() <= 0.35 * H) & (across.abs() <= 1.5)
    radius = (r - cy) ** 2 + (c - cx) ** 2
    big = (0.22 * H) ** 2
    if cls == "blob":
        return radius <= big
    return (radius <= big) & (radius >= (0.11 * H) ** 2)  # ring


def synthetic_objects(n: int, cls: str = "bar", *, H: int = 16, W: int = 16, num_features: int = 6,
                      noise: float = 1.0, clutter: int = 4, seed: int = 0) -> ObjectData:
    """Sample ``n`` images of class ``cls`` (one of OBJECT_CLASSES).

    Features: object nodes ~ N(m_obj, noise^2), background nodes ~ N(m_bg, noise^2), with
    ``clutter`` 2x2 background patches drawn like the object and one 2x2 object patch drawn like
    the background, per image.
    """
    if cls not in OBJECT_CLASSES:
        raise ValueError(f"cls must be one of {OBJECT_CLASSES}, got {cls!r}")
    check_int("n", n, 1)
    check_int("H", H, 2)
    check_int("W", W, 2)
    check_int("num_features", num_features, 2)
    check_int("clutter", clutter, 0)
    check_int("seed", seed)
    check_number("noise", noise, low=0.0)
    g = torch.Generator().manual_seed(seed * 7919 + OBJECT_CLASSES.index(cls))
    means = torch.Generator().manual_seed(OBJECT_CLASSES.index(cls))
    m_obj = torch.randn(num_features - 1, generator=means, dtype=torch.float64) * 0.6
    m_bg = -m_obj
    V = H * W
    xs, ys = [], []
    for _ in range(n):
        mask = _object_mask(cls, H, W, g)
        looks = mask.clone()
        for _ in range(clutter):  # object-like clutter in the background
            r0, c0 = (int(torch.randint(0, s - 1, (1,), generator=g)) for s in (H, W))
            patch = torch.zeros(H, W, dtype=torch.bool)
            patch[r0:r0 + 2, c0:c0 + 2] = True
            looks |= patch & ~mask
        inside = mask.nonzero()
        if len(inside):
            r0, c0 = inside[int(torch.randint(0, len(inside), (1,), generator=g))].tolist()
            looks[r0:r0 + 2, c0:c0 + 2] &= ~mask[r0:r0 + 2, c0:c0 + 2]  # background-like hole
        mean = torch.where(looks.reshape(V, 1), m_obj, m_bg)
        feat = mean + noise * torch.randn(V, num_features - 1, generator=g, dtype=torch.float64)
        xs.append(torch.cat([feat, torch.ones(V, 1, dtype=torch.float64)], 1))
        ys.append(mask.reshape(V).long())
    from ..lp.graph import grid_edges  # the LP stack loads on first use

    return ObjectData(torch.stack(xs), torch.stack(ys), grid_edges(H, W), (H, W))
