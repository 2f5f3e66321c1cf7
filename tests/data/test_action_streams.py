"""structtorch.data.actions.action_streams (clips concatenated into labeled streams), the unchanged
action_sequences after the clip generator's refactoring, and examples/action_segmentation.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _runner import run_example

from structtorch.data.actions import ACTION_CLASSES, _pools, action_sequences, action_streams, temporal_bins
from structtorch.metrics import get_segments


def original_action_sequences(n, *, setting, B, tau, vocab, points, pool_size, signal, splits, seed):
    """action_sequences as it was before its clip generator moved into ``_clip`` (commit 3c3ab7c),
    without the argument checks."""
    rng = np.random.default_rng(seed)
    phases = _pools(rng, vocab, setting, pool_size)
    labels = rng.permutation(np.arange(n) % 6)
    sequences, histograms = [], np.zeros((n, vocab), dtype=np.float32)
    for i, c in enumerate(labels):
        P = max(int(rng.poisson(points)), 1)
        duration = rng.uniform(60, 120)
        times = np.sort(rng.uniform(0, duration, P))
        phase = np.minimum((times / duration * 3).astype(int), 2)
        pools = [np.array(sorted(p)) for p in phases[c]]
        words = rng.integers(0, vocab, P)
        is_signal = rng.random(P) < signal
        for k in range(3):
            sel = is_signal & (phase == k)
            words[sel] = rng.choice(pools[k], int(sel.sum()))
        sequences.append(temporal_bins(times, words, B, tau))
        np.add.at(histograms[i], words, 1.0)
    order = rng.permutation(n)
    a, b, _ = splits
    return sequences, labels, histograms, np.sort(order[:a]), np.sort(order[a:a + b]), np.sort(order[a + b:]), phases


@pytest.mark.parametrize("setting, seed, kwargs", [
    ("order", 0, {}),
    ("identity", 3, {}),
    ("order", 1, dict(n=60, B=5, tau=0.2, points=30, signal=0.3, splits=(20, 20, 20), vocab=300, pool_size=5)),
    ("identity", 2, dict(n=60, B=1, tau=0.0, points=5, signal=1.0, splits=(30, 0, 30), vocab=300, pool_size=5)),
])
def test_action_sequences_unchanged_by_the_clip_refactoring(setting, seed, kwargs):
    args = dict(n=599, B=12, tau=0.5, vocab=768, points=60, pool_size=12, signal=0.6, splits=(191, 192, 216))
    args.update(kwargs)
    new = action_sequences(setting=setting, seed=seed, **args)
    seqs, labels, hist, tr, va, te, phases = original_action_sequences(setting=setting, seed=seed, **args)
    assert new.sequences == seqs and new.phases == phases
    assert np.array_equal(new.labels.numpy(), labels) and np.array_equal(new.histograms.numpy(), hist)
    for got, want in ((new.train, tr), (new.val, va), (new.test, te)):
        assert np.array_equal(got.numpy(), want)


@pytest.mark.parametrize("setting", ["order", "identity"])
def test_stream_structure(setting):
    s = action_streams(40, setting=setting, clips=(2, 5), bins_per_clip=(3, 7), splits=(20, 10, 10), seed=1)
    assert len(s) == 40 and len(s.sequences) == len(s.actions) == len(s.boundaries) == 40
    T = int(s.lengths.max())
    assert s.labels.shape == (40, T) and s.labels.dtype == torch.long and s.lengths.shape == (40,)
    every = torch.cat([s.train, s.val, s.test])
    assert (len(s.train), len(s.val), len(s.test)) == (20, 10, 10)
    assert torch.equal(every.sort().values, torch.arange(40))
    for i, seq in enumerate(s.sequences):
        n = int(s.lengths[i])
        assert len(seq) == n and all(isinstance(x, frozenset) for x in seq)
        assert all(0 <= w < 768 for x in seq for w in x)
        acts, starts = s.actions[i], s.boundaries[i]
        assert 2 <= len(acts) <= 5 and all(0 <= a < len(ACTION_CLASSES) for a in acts)
        assert all(a != b for a, b in zip(acts, acts[1:], strict=False))  # consecutive actions differ
        ends = [*starts[1:], n]
        assert starts[0] == 0 and all(3 <= e - b <= 7 for b, e in zip(starts, ends, strict=True))
        # the maximal label runs are exactly the clips
        assert get_segments(s.labels[i, :n].tolist()) == list(zip(acts, starts, ends, strict=True))
        assert (s.labels[i, n:] == 0).all()  # padding
    assert len({int(v) for v in s.lengths}) > 1
    again = action_streams(40, setting=setting, clips=(2, 5), bins_per_clip=(3, 7), splits=(20, 10, 10), seed=1)
    assert again.sequences == s.sequences and torch.equal(again.labels, s.labels)
    assert action_streams(40, setting=setting, clips=(2, 5), bins_per_clip=(3, 7), splits=(20, 10, 10),
                          seed=2).sequences != s.sequences


def test_defaults_and_fixed_sizes():
    s = action_streams(12, clips=3, bins_per_clip=4)
    assert (len(s.train), len(s.val), len(s.test)) == (6, 3, 3)
    assert (s.lengths == 12).all() and all(b == [0, 4, 8] for b in s.boundaries)
    d = action_streams()
    assert len(d) == 120 and int(d.lengths.min()) >= 18 and int(d.lengths.max()) <= 36
    assert all(n % 6 == 0 for n in d.lengths.tolist())


def test_clips_use_their_class_pools():
    """In each bin most signal words come from the clip's class pools: with signal 1 every word does."""
    s = action_streams(10, setting="identity", signal=1.0, seed=4)
    for seq, acts, starts in zip(s.sequences, s.actions, s.boundaries, strict=True):
        for a, b in zip(acts, starts, strict=True):
            pools = frozenset().union(*s.phases[a])
            assert all(x <= pools for x in seq[b:b + 6])
    # order: a group's classes share their pools, in different temporal orders
    o = action_streams(4, setting="order", seed=4)
    assert len({frozenset(o.phases[k]) for k in range(3)}) == 1 and len(set(o.phases[:3])) == 3


@pytest.mark.parametrize("kwargs, error", [
    (dict(setting="bag"), ValueError),
    (dict(clips=(3, 2)), ValueError),
    (dict(clips=(0, 2)), ValueError),
    (dict(bins_per_clip="6"), TypeError),
    (dict(splits=(10, 10, 10)), ValueError),
    (dict(tau=1.0), ValueError),
    (dict(vocab=50), ValueError),
    (dict(n=0), ValueError),
])
def test_errors(kwargs, error):
    with pytest.raises(error):
        action_streams(**{"n": 12, **kwargs})


def test_action_segmentation_example_runs():
    stdout = run_example("action_segmentation.py", "--n", "24", "--windows", "60", "--passes", "3",
                         "--nu", "0.05", "0.2")
    for setting in ("order", "identity"):
        assert f"setting '{setting}'" in stdout
    for row in ("chain SVM, bag of words", "chain SVM, mined |", "chain SVM, mined + bag of words",
                "LPBoost per window"):
        assert stdout.count(f"| {row}") == 2
    assert "F1@0.1 | F1@0.25 | F1@0.5" in stdout and "selected on validation windows" in stdout
    assert np.isfinite(float(stdout.rsplit("total ", 1)[1].split()[0]))
