"""KTH-like synthetic activity clips as itemset sequences (Nowozin 2009, ch. 4).

Each clip is a cloud of spatio-temporal interest points ``(t, word)``; the words of B overlapping
temporal bins form a sequence of B itemsets (Fig. 27), the input of subsequence mining. Six classes
come in two groups of three (as {box, clap, wave} and {jog, run, walk} on KTH) whose classes share
motion words. Two settings:

``"order"``
    Within a group the three classes use the same three phases of words, in different temporal
    orders: their bags of words have the same distribution, so only temporal order separates them
    (a histogram classifier confuses them; subsequence patterns do not).
``"identity"``
    Each class has phases of its own words: word identity suffices (as the thesis found on KTH,
    where a chi^2-SVM on binarized histograms matched subsequence boosting).

:func:`action_sequences` draws one clip per instance (classification); :func:`action_streams`
concatenates the binned clips of random action sequences into long streams labeled per bin
(temporal action segmentation, for chain models over window features).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from .._checks import check_int, check_number

__all__ = ["ActionData", "ActionStreams", "action_sequences", "action_streams", "ACTION_CLASSES",
           "temporal_bins"]

ACTION_CLASSES = ("boxing", "handclapping", "handwaving", "jogging", "running", "walking")
SETTINGS = ("order", "identity")
_ORDERS = ((0, 1, 2), (1, 2, 0), (2, 0, 1))  # the phase orders of a group's three classes


@dataclass
class ActionData:
    """Clips as itemset sequences.

    Attributes
    ----------
    sequences : list of n tuples of B frozensets of int
        The codewords of each temporal bin.
    labels : Tensor (n,) int64
        Class index into ``ACTION_CLASSES``.
    histograms : Tensor (n, vocab) float32
        Word counts of each clip (bag of words, for histogram baselines).
    train, val, test : Tensor int64
        Indices of the three splits.
    phases : list of 6 tuples of 3 frozensets
        Each class's word pools in temporal order (the generator's ground truth).
    """

    sequences: list[tuple[frozenset[int], ...]]
    labels: Tensor
    histograms: Tensor
    train: Tensor
    val: Tensor
    test: Tensor
    phases: list[tuple[frozenset[int], ...]]

    def __len__(self) -> int:
        return len(self.sequences)


@dataclass
class ActionStreams:
    """Streams of consecutive clips as itemset sequences, labeled per temporal bin.

    Attributes
    ----------
    sequences : list of n tuples of frozensets of int
        Stream i is the concatenation of its clips' bins: ``lengths[i]`` itemsets.
    labels : Tensor (n, T) int64
        The action (index into ``ACTION_CLASSES``) of each bin; 0 beyond each length (the padding of
        :class:`structtorch.data.SequenceData`). T is the longest stream.
    lengths : Tensor (n,) int64
    train, val, test : Tensor int64
        Indices of the three splits (sorted, disjoint, covering all n streams).
    actions : list of n lists of int
        Each stream's clip actions in order; consecutive ones differ, so the maximal label runs of
        a stream are exactly its clips.
    boundaries : list of n lists of int
        The first bin of each clip (``boundaries[i][0] = 0``).
    phases : list of 6 tuples of 3 frozensets
        Each class's word pools in temporal order (the generator's ground truth).
    """

    sequences: list[tuple[frozenset[int], ...]]
    labels: Tensor
    lengths: Tensor
    train: Tensor
    val: Tensor
    test: Tensor
    actions: list[list[int]]
    boundaries: list[list[int]]
    phases: list[tuple[frozenset[int], ...]]

    def __len__(self) -> int:
        return len(self.sequences)


def temporal_bins(times: np.ndarray, words: np.ndarray, B: int, tau: float) -> tuple[frozenset[int], ...]:
    """B overlapping bins of equal length over [first, last] time (Fig. 27): length
    (last - first) (1 + tau) / B, starts evenly spaced from the first time to last - length; a word
    falls into every bin whose interval holds its time.

    Parameters
    ----------
    times, words : ndarray (P,)
        Times and codewords of the interest points.
    B : int
        Number of bins.
    tau : float in [0, 1)
        Overlap.

    Returns
    -------
    tuple of B frozensets
    """
    if len(times) == 0:
        return tuple(frozenset() for _ in range(B))
    start, end = float(times.min()), float(times.max())
    span = end - start
    length = span * (1 + tau) / B
    lows = np.linspace(start, end - length, B) if B > 1 else np.array([start])
    inside = (times[None, :] >= lows[:, None] - 1e-12) & (times[None, :] <= lows[:, None] + length + 1e-12)
    return tuple(frozenset(int(w) for w in words[row]) for row in inside)


def _pools(rng: np.random.Generator, vocab: int, setting: str,
           pool_size: int) -> list[tuple[frozenset[int], ...]]:
    """Each class's three phase pools of words."""
    words = rng.permutation(vocab)
    taken = 0

    def take(k: int) -> frozenset[int]:
        nonlocal taken
        pool = frozenset(int(w) for w in words[taken:taken + k])
        taken += k
        return pool

    phases = []
    for _group in range(2):
        if setting == "order":
            shared = [take(pool_size) for _ in range(3)]
            phases += [tuple(shared[i] for i in order) for order in _ORDERS]
        else:
            phases += [tuple(take(pool_size) for _ in range(3)) for _ in range(3)]
    return phases


def _clip(rng: np.random.Generator, pools: tuple[frozenset[int], ...], vocab: int, points: int,
          signal: float) -> tuple[np.ndarray, np.ndarray]:
    """One clip's interest points: sorted times (P,) float64 and codewords (P,) int64.

    Poisson(``points``) points (at least one) at uniform times over a duration uniform in [60, 120];
    a point in phase k (the k-th third of the clip) is, with probability ``signal``, a word of
    ``pools[k]``, else a uniformly random word of the vocabulary.
    """
    P = max(int(rng.poisson(points)), 1)
    duration = rng.uniform(60, 120)
    times = np.sort(rng.uniform(0, duration, P))
    phase = np.minimum((times / duration * 3).astype(int), 2)
    arrays = [np.array(sorted(p)) for p in pools]
    words = rng.integers(0, vocab, P)
    is_signal = rng.random(P) < signal
    for k in range(3):
        sel = is_signal & (phase == k)
        words[sel] = rng.choice(arrays[k], int(sel.sum()))
    return times, words


def action_sequences(n: int = 599, *, setting: str = "order", B: int = 12, tau: float = 0.5, vocab: int = 768,
                     points: int = 60, pool_size: int = 12, signal: float = 0.6,
                     splits: tuple[int, int, int] = (191, 192, 216), seed: int = 0) -> ActionData:
    """KTH-like synthetic clips: interest points in three temporal phases per class, binned into
    itemset sequences.

    A clip of class c lasts a random duration; its points (Poisson(``points``) of them) have uniform
    times; a point in phase k (the k-th third of the clip) carries, with probability ``signal``, a
    word of the class's k-th pool, else a uniformly random word of the vocabulary (noise).

    Parameters
    ----------
    n : int
        Number of clips (599 as on KTH); classes are balanced up to one.
    setting : {"order", "identity"}
        See the module docstring.
    B, tau : int, float
        Temporal bins and their overlap (Fig. 27).
    vocab : int
        Codebook size (768 as the thesis's best).
    points, pool_size, signal : int, int, float
        Mean points per clip, words per phase pool, probability that a point is signal.
    splits : (int, int, int)
        Train, validation and test sizes, summing to n (KTH: 191 / 192 / 216).
    seed : int

    Returns
    -------
    ActionData
    """
    n = check_int("n", n, 1)
    B = check_int("B", B, 1)
    vocab = check_int("vocab", vocab, 1)
    points = check_int("points", points, 1)
    pool_size = check_int("pool_size", pool_size, 1)
    tau = check_number("tau", tau, low=0.0, high=1.0)
    if tau >= 1.0:
        raise ValueError(f"tau must lie in [0, 1), got {tau}")
    signal = check_number("signal", signal, low=0.0, high=1.0)
    if setting not in SETTINGS:
        raise ValueError(f"setting must be one of {SETTINGS}, got {setting!r}")
    if 6 * pool_size * (1 if setting == "order" else 3) > vocab:
        raise ValueError(f"vocab = {vocab} is too small for the pools: need at least "
                         f"{6 * pool_size * (1 if setting == 'order' else 3)} words")
    if len(splits) != 3 or sum(splits) != n or min(splits) < 0:
        raise ValueError(f"splits must be three non-negative sizes summing to n = {n}, got {splits}")
    rng = np.random.default_rng(seed)
    phases = _pools(rng, vocab, setting, pool_size)
    labels = rng.permutation(np.arange(n) % 6)
    sequences, histograms = [], np.zeros((n, vocab), dtype=np.float32)
    for i, c in enumerate(labels):
        times, words = _clip(rng, phases[c], vocab, points, signal)
        sequences.append(temporal_bins(times, words, B, tau))
        np.add.at(histograms[i], words, 1.0)
    order = rng.permutation(n)
    a, b, _ = splits
    return ActionData(sequences, torch.as_tensor(labels, dtype=torch.long), torch.from_numpy(histograms),
                      torch.as_tensor(np.sort(order[:a])), torch.as_tensor(np.sort(order[a:a + b])),
                      torch.as_tensor(np.sort(order[a + b:])), phases)


def _check_range(name: str, value: object) -> tuple[int, int]:
    """An int ``k`` (read as ``(k, k)``) or a pair ``(low, high)`` of ints, ``1 <= low <= high``."""
    pair = (value, value) if isinstance(value, int) and not isinstance(value, bool) else value
    if not isinstance(pair, (tuple, list)) or len(pair) != 2:
        raise TypeError(f"{name} must be an int or a pair (low, high) of ints, got {value!r}")
    low, high = (check_int(name, v, 1) for v in pair)
    if low > high:
        raise ValueError(f"{name} must have low <= high, got {value!r}")
    return low, high


def action_streams(n: int = 120, *, setting: str = "order", clips: int | tuple[int, int] = (3, 6),
                   bins_per_clip: int | tuple[int, int] = 6, tau: float = 0.5, vocab: int = 768,
                   points: int = 60, pool_size: int = 12, signal: float = 0.3,
                   splits: tuple[int, int, int] | None = None, seed: int = 0) -> ActionStreams:
    """Streams of KTH-like clips for temporal action segmentation, labeled per temporal bin.

    Each stream is a random sequence of actions (the first uniform over the six classes, each next
    one uniform over the five others, so no two consecutive clips share an action). Each clip is
    drawn as in :func:`action_sequences` (same class pools, same point process) and binned on its
    own into its bins (:func:`temporal_bins`, overlap ``tau`` within a clip, none across clips);
    the stream is the concatenation of its clips' bins, and each bin is labeled with its clip's
    action. In the ``"order"`` setting the classes of a group share their words and differ only by
    the temporal order of their phases, so per-bin bags of words (even summed over a window, or
    scored by a chain over bins) cannot tell them apart; temporal order inside a window can.

    Parameters
    ----------
    n : int
        Number of streams.
    setting : {"order", "identity"}
        See the module docstring.
    clips : int or (int, int)
        Clips per stream, uniform in ``[low, high]`` (an int: exactly that many).
    bins_per_clip : int or (int, int)
        Temporal bins of each clip, uniform in ``[low, high]`` per clip (an int: fixed), so a
        segment lasts that many positions.
    tau : float in [0, 1)
        Overlap of the bins within a clip (Fig. 27).
    vocab, points, pool_size, signal
        As for :func:`action_sequences` (per clip). The default ``signal = 0.3`` leaves most of a
        bin's words noise.
    splits : (int, int, int), optional
        Train, validation and test sizes summing to n; default ``(n // 2, n // 4, rest)``.
    seed : int

    Returns
    -------
    ActionStreams
        ``sequences`` (n streams of ``lengths[i]`` itemsets), ``labels`` (n, T) with 0 padding,
        ``lengths`` (n,), the splits, and per stream its ``actions`` and clip ``boundaries``.

    Examples
    --------
    >>> s = action_streams(8, clips=(2, 3), bins_per_clip=4, splits=(4, 2, 2))
    >>> s.labels.shape == (8, int(s.lengths.max())), len(s.sequences[0]) == int(s.lengths[0])
    (True, True)
    """
    n = check_int("n", n, 1)
    clip_low, clip_high = _check_range("clips", clips)
    bin_low, bin_high = _check_range("bins_per_clip", bins_per_clip)
    vocab = check_int("vocab", vocab, 1)
    points = check_int("points", points, 1)
    pool_size = check_int("pool_size", pool_size, 1)
    tau = check_number("tau", tau, low=0.0, high=1.0)
    if tau >= 1.0:
        raise ValueError(f"tau must lie in [0, 1), got {tau}")
    signal = check_number("signal", signal, low=0.0, high=1.0)
    seed = check_int("seed", seed)
    if setting not in SETTINGS:
        raise ValueError(f"setting must be one of {SETTINGS}, got {setting!r}")
    need = 6 * pool_size * (1 if setting == "order" else 3)
    if need > vocab:
        raise ValueError(f"vocab = {vocab} is too small for the pools: need at least {need} words")
    if splits is None:
        splits = (n // 2, n // 4, n - n // 2 - n // 4)
    if not isinstance(splits, (tuple, list)) or len(splits) != 3 or sum(splits) != n or min(splits) < 0:
        raise ValueError(f"splits must be three non-negative sizes summing to n = {n}, got {splits}")
    rng = np.random.default_rng(seed)
    phases = _pools(rng, vocab, setting, pool_size)
    K = len(ACTION_CLASSES)
    sequences, actions, boundaries, rows = [], [], [], []
    for _ in range(n):
        count = int(rng.integers(clip_low, clip_high + 1))
        acts = [int(rng.integers(K))]
        for _ in range(count - 1):
            acts.append((acts[-1] + int(rng.integers(1, K))) % K)  # any other action, uniformly
        stream: list[frozenset[int]] = []
        row, starts = [], []
        for c in acts:
            bins = int(rng.integers(bin_low, bin_high + 1))
            times, words = _clip(rng, phases[c], vocab, points, signal)
            starts.append(len(stream))
            stream.extend(temporal_bins(times, words, bins, tau))
            row += [c] * bins
        sequences.append(tuple(stream))
        actions.append(acts)
        boundaries.append(starts)
        rows.append(row)
    lengths = torch.as_tensor([len(r) for r in rows], dtype=torch.long)
    labels = torch.zeros(n, int(lengths.max()), dtype=torch.long)
    for i, r in enumerate(rows):
        labels[i, :len(r)] = torch.as_tensor(r, dtype=torch.long)
    order = rng.permutation(n)
    a, b, _ = splits
    return ActionStreams(sequences, labels, lengths, torch.as_tensor(np.sort(order[:a])),
                         torch.as_tensor(np.sort(order[a:a + b])), torch.as_tensor(np.sort(order[a + b:])),
                         actions, boundaries, phases)
