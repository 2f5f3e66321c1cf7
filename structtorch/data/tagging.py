"""A synthetic sequence-tagging task whose labels follow a sticky cyclic Markov chain.

Labels stay with probability ``p_stay`` and otherwise move to the next label (mod N); every other
move is impossible. Each position emits a feature vector: the label's mean plus Gaussian noise.
With enough noise a per-position classifier is often wrong, while a chain model that learns the
transition structure recovers most labels.
"""

from __future__ import annotations

import torch

from .._checks import check_int, check_number
from ..sequence_data import SequenceData  # its home; re-exported here, where it was

__all__ = ["SequenceData", "TaggingData", "make_tagging_data"]

TaggingData = SequenceData  # the demo's name for it


def make_tagging_data(
    num_sequences: int,
    *,
    num_labels: int = 5,
    num_features: int = 8,
    min_length: int = 20,
    max_length: int = 60,
    p_stay: float = 0.8,
    noise: float = 1.5,
    seed: int = 0,
) -> SequenceData:
    """Sample ``num_sequences`` sequences with lengths in [min_length, max_length].

    The label means do not depend on ``seed``, so sets drawn with different seeds (train, test)
    come from the same distribution.

    Returns
    -------
    TaggingData
        ``x`` (B, T, num_features), ``labels`` (B, T), ``lengths`` (B,), T = longest length.
    """
    check_int("num_sequences", num_sequences, 1)
    check_int("num_labels", num_labels, 1)
    check_int("num_features", num_features, 1)
    check_int("seed", seed)
    if not 1 <= check_int("min_length", min_length) <= check_int("max_length", max_length):
        raise ValueError(f"need 1 <= min_length <= max_length, got {min_length}, {max_length}")
    check_number("p_stay", p_stay, low=0.0, high=1.0)
    check_number("noise", noise, low=0.0)
    means = torch.randn(num_labels, num_features, generator=torch.Generator().manual_seed(12345))
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(min_length, max_length + 1, (num_sequences,), generator=g)
    T = int(lengths.max())
    moves = (torch.rand(num_sequences, T, generator=g) > p_stay).long()
    moves[:, 0] = torch.randint(0, num_labels, (num_sequences,), generator=g)
    labels = moves.cumsum(1) % num_labels
    inside = torch.arange(T) < lengths[:, None]
    labels = torch.where(inside, labels, 0)
    x = means[labels] + noise * torch.randn(num_sequences, T, num_features, generator=g)
    x = torch.where(inside[..., None], x, 0.0)
    return SequenceData(x, labels, lengths)
