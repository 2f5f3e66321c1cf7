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
        (Dependency trees: each word's head, 0 for the root; constituency trees: their labeled
        spans (B, T, T, N) 0/1, for a model that returns a :class:`structtorch.TreeDistribution`.)
    lengths : Tensor (B,) int64
    starts : Tensor (B, T) bool, optional
        For segmentations: True where a segment begins (``labels`` then holds each position's
        segment label). :func:`structtorch.train.fit` passes ``(labels, starts)`` as the target of a
        model that returns a segmentation structure (a :class:`structtorch.SemiMarkovDistribution`).
    cost : Tensor (B, T, N) float, optional
        Per-example costs of the structured hinge: ``cost[b, t, j]`` is what predicting label j at
        position t of sequence b costs (0 at its gold label, as a rule); the loss of a labeling is
        their sum over its positions, in place of the Hamming count (the loss's ``h`` applies to
        that sum). Every solver of :func:`structtorch.train.fit` passes it to the loss as
        ``cost=`` (see :class:`structtorch.StructuredHingeLoss`).
    """

    x: Tensor
    labels: Tensor
    lengths: Tensor
    starts: Tensor | None = None
    cost: Tensor | None = None

    def __len__(self) -> int:
        return self.x.shape[0]

    def batch(self, index: Tensor) -> SequenceData:
        """The sub-batch of rows ``index``."""
        def rows(x: Tensor | None) -> Tensor | None:
            return None if x is None else x[index]

        return SequenceData(self.x[index], self.labels[index], self.lengths[index], rows(self.starts),
                            rows(self.cost))

    def map_x(self, fn) -> SequenceData:
        """The same sequences with features ``fn(x)``."""
        return SequenceData(fn(self.x), self.labels, self.lengths, self.starts, self.cost)
