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
    """

    x: Tensor
    labels: Tensor
    lengths: Tensor

    def __len__(self) -> int:
        return self.x.shape[0]

    def batch(self, index: Tensor) -> SequenceData:
        """The sub-batch of rows ``index``."""
        return SequenceData(self.x[index], self.labels[index], self.lengths[index])

    def map_x(self, fn) -> SequenceData:
        """The same sequences with features ``fn(x)``."""
        return SequenceData(fn(self.x), self.labels, self.lengths)
