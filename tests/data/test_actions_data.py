"""KTH-like synthetic itemset sequences (structtorch.data.action_sequences)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from structtorch.data.actions import ACTION_CLASSES, action_sequences, temporal_bins


def test_temporal_bins_follow_fig_27():
    times = np.arange(11.0)  # first 0, last 10
    words = np.arange(11)
    bins = temporal_bins(times, words, 2, 0.5)  # length 10 * 1.5 / 2 = 7.5: [0, 7.5] and [2.5, 10]
    assert bins == (frozenset(range(0, 8)), frozenset(range(3, 11)))
    assert temporal_bins(times, words, 5, 0.0) == tuple(frozenset(range(2 * k, 2 * k + 3)) for k in range(5))
    assert temporal_bins(np.zeros(0), np.zeros(0, dtype=int), 3, 0.5) == (frozenset(),) * 3


def test_structure_splits_and_reproducibility():
    data = action_sequences(seed=1)
    assert len(data) == 599 and len(ACTION_CLASSES) == 6
    assert (len(data.train), len(data.val), len(data.test)) == (191, 192, 216)
    every = torch.cat([data.train, data.val, data.test])
    assert torch.equal(every.sort().values, torch.arange(599))
    assert torch.bincount(data.labels).tolist() == [100, 100, 100, 100, 100, 99]
    assert all(len(s) == 12 for s in data.sequences)
    assert all(0 <= w < 768 for s in data.sequences for itemset in s for w in itemset)
    assert data.histograms.shape == (599, 768) and (data.histograms.sum(1) > 0).all()
    overlap = sum(len(s[k] & s[k + 1]) for s in data.sequences for k in range(11))
    assert overlap > 0  # tau = 0.5: neighbouring bins share words
    again = action_sequences(seed=1)
    assert again.sequences == data.sequences and torch.equal(again.labels, data.labels)


def _nearest_centroid_accuracy(data) -> tuple[float, float]:
    """(class accuracy, group accuracy) of a nearest-centroid classifier on L1-normalised
    histograms: train on train + val, evaluate on test."""
    h = data.histograms / data.histograms.sum(1, keepdim=True)
    fit = torch.cat([data.train, data.val])
    centroids = torch.stack([h[fit][data.labels[fit] == c].mean(0) for c in range(6)])
    pred = torch.cdist(h[data.test], centroids).argmin(1)
    truth = data.labels[data.test]
    return (pred == truth).float().mean().item(), (pred // 3 == truth // 3).float().mean().item()


def test_order_setting_defeats_bags_of_words_and_identity_does_not():
    order = action_sequences(setting="order", seed=2)
    for g in range(2):  # a group's classes share their pools, in different orders
        pools = [order.phases[3 * g + i] for i in range(3)]
        assert len({frozenset(p) for p in pools}) == 1 and len({p for p in pools}) == 3
    class_acc, group_acc = _nearest_centroid_accuracy(order)
    assert group_acc > 0.95 and class_acc < 0.55  # within a group, bags of words are near chance (1/3)
    identity = action_sequences(setting="identity", seed=2)
    words = [set().union(*p) for p in identity.phases]
    assert all(not (words[a] & words[b]) for a in range(6) for b in range(a + 1, 6))
    class_acc, _ = _nearest_centroid_accuracy(identity)
    assert class_acc > 0.9


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="setting must be one of"):
        action_sequences(setting="shuffled")
    with pytest.raises(ValueError, match=r"tau must lie in \[0, 1\)"):
        action_sequences(tau=1.0)
    with pytest.raises(ValueError, match="splits must be three non-negative sizes summing to n = 10"):
        action_sequences(10, splits=(5, 5, 5))
    with pytest.raises(ValueError, match="vocab = 20 is too small"):
        action_sequences(12, vocab=20, splits=(4, 4, 4))
    with pytest.raises(TypeError, match="B must be an int"):
        action_sequences(B=2.5)
