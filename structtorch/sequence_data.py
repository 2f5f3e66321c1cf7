"""Labeled sequences in padded form: :class:`SequenceData`, the type that
:func:`structtorch.train.fit` trains on and every sequence generator of :mod:`structtorch.data`
returns. It lives in the library proper so that training does not load the generators."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

__all__ = ["SequenceData"]


@dataclass
class SequenceData:
    """Padded batch of labeled sequences.

    Attributes
    ----------
    x : Tensor (B, T, F) float32 features, 0 beyond each length
    labels : Tensor (B, T) int64 labels, 0 beyond each length
    lengths : Tensor (B,) int64
    starts : Tensor (B, T) bool, optional
        For segmentations: True where a segment begins (``labels`` then holds each position's
        segment label). :func:`structtorch.train.fit` passes ``(labels, starts)`` as the target of a
        model that returns a segmentation structure (a :class:`structtorch.SemiMarkovDistribution`).
    """

    x: Tensor
    labels: Tensor
    lengths: Tensor
    starts: Tensor | None = None

    def __len__(self) -> int:
        return self.x.shape[0]

    def batch(self, index: Tensor) -> SequenceData:
        """The sub-batch of rows ``index``."""
        starts = None if self.starts is None else self.starts[index]
        return SequenceData(self.x[index], self.labels[index], self.lengths[index], starts)

    def map_x(self, fn) -> SequenceData:
        """The same sequences with features ``fn(x)``."""
        return SequenceData(fn(self.x), self.labels, self.lengths, self.starts)
