"""Handwritten "words": sequences of digit images whose labels follow a bigram Markov chain.

The character images are scikit-learn's bundled 8x8 handwritten digits (``sklearn.datasets.
load_digits``: 1,797 images, no download), so scikit-learn must be installed (the ``examples``
extra). The digits are split once, independently of ``seed``, into a train and a test half per class;
words drawn with ``split="train"`` and ``split="test"`` never share an image. A word's first label is
uniform over the 10 digits and every next label is drawn from a row of a (10, 10) transition
matrix:

- ``"informative"``: strongly peaked rows. Digit i is followed by (3i + 1) mod 10 with probability
  0.71, by (7i + 4) mod 10 with probability 0.21 (never the same digit) and by each of the 8
  other digits with probability 0.01, so the label model tells much about a character beyond its
  image (a conditional entropy of about 0.94 nats per digit against log 10 = 2.30).
- ``"uniform"``: every row uniform; the labels are independent and only the images inform.
- any (10, 10) row-stochastic matrix, e.g. a mixture of the two.

Each drawn character gets fresh Gaussian pixel noise at the native 8x8 resolution (so ``noise`` sets
the difficulty whatever the output ``size``), and is then upscaled by bilinear interpolation.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import torch
from torch import Tensor

from .._checks import check_int, check_number

__all__ = ["DigitSequences", "digit_sequences", "digit_transitions"]

NUM_DIGITS = 10
SPLITS = ("train", "test", "all")
_SPLIT_SEED = 2005  # fixed: the train/test halves do not depend on the caller's seed


@dataclass
class DigitSequences:
    """Padded batch of handwritten digit words.

    Attributes
    ----------
    images : Tensor (B, T, 1, H, W) float32
        Character images (ink about 1, paper about 0, plus noise); 0 beyond each length.
    labels : Tensor (B, T) int64
        Digits in [0, 10); 0 beyond each length.
    lengths : Tensor (B,) int64
    transitions : Tensor (10, 10) float32
        The label model: ``transitions[i, j]`` = P(next digit j | digit i); rows sum to 1.
        The first digit of a word is uniform.
    image_ids : Tensor (B, T) int64
        Index of each character's image in ``sklearn.datasets.load_digits()``; -1 beyond each
        length.
    """

    images: Tensor
    labels: Tensor
    lengths: Tensor
    transitions: Tensor
    image_ids: Tensor

    def __len__(self) -> int:
        return self.images.shape[0]

    @property
    def mask(self) -> Tensor:
        """(B, T) bool, True at the characters inside each word."""
        return torch.arange(self.labels.shape[1], device=self.lengths.device) < self.lengths[:, None]

    def batch(self, index: Tensor) -> DigitSequences:
        """The sub-batch of words ``index`` (the transition matrix is shared)."""
        return DigitSequences(self.images[index], self.labels[index], self.lengths[index],
                              self.transitions, self.image_ids[index])

    def to(self, device: torch.device | str) -> DigitSequences:
        """The same words with every tensor on ``device``."""
        return DigitSequences(self.images.to(device), self.labels.to(device), self.lengths.to(device),
                              self.transitions.to(device), self.image_ids.to(device))

    def flat(self) -> Tensor:
        """Images as feature vectors: (B, T, H * W)."""
        B, T = self.labels.shape
        return self.images.reshape(B, T, -1)


def digit_transitions(kind: str = "informative") -> Tensor:
    """The named bigram label models of :func:`digit_sequences`.

    Parameters
    ----------
    kind : {"informative", "uniform"}

    Returns
    -------
    Tensor (10, 10) float32
        Row-stochastic: ``[i, j]`` = P(next digit j | digit i).
    """
    if kind == "uniform":
        return torch.full((NUM_DIGITS, NUM_DIGITS), 1.0 / NUM_DIGITS)
    if kind != "informative":
        raise ValueError(f"transitions must be 'informative', 'uniform' or a (10, 10) tensor, got {kind!r}")
    digits = torch.arange(NUM_DIGITS)
    matrix = torch.full((NUM_DIGITS, NUM_DIGITS), 0.01)
    matrix[digits, (3 * digits + 1) % NUM_DIGITS] += 0.7  # a permutation, no fixed point
    matrix[digits, (7 * digits + 4) % NUM_DIGITS] += 0.2  # another permutation, never the first
    return matrix


def _check_transitions(transitions: str | Tensor) -> Tensor:
    if isinstance(transitions, str):
        return digit_transitions(transitions)
    if not isinstance(transitions, Tensor):
        try:
            transitions = torch.as_tensor(transitions)
        except (TypeError, ValueError, RuntimeError) as err:
            raise TypeError("transitions must be 'informative', 'uniform' or a (10, 10) tensor, "
                            f"got {type(transitions).__name__}") from err
    if tuple(transitions.shape) != (NUM_DIGITS, NUM_DIGITS):
        raise ValueError(f"transitions must have shape (10, 10), got {tuple(transitions.shape)}")
    if not transitions.is_floating_point():
        raise TypeError(f"transitions must be a floating-point tensor, got {transitions.dtype}")
    matrix = transitions.detach().to("cpu", torch.float64)
    if not torch.isfinite(matrix).all() or (matrix < 0).any():
        raise ValueError("transitions must be finite and nonnegative (probabilities)")
    rows = matrix.sum(1)
    bad = (rows - 1).abs() > 1e-4
    if bad.any():
        i = int(bad.nonzero()[0, 0])
        raise ValueError(f"every row of transitions must sum to 1 (P(next | current)); row {i} sums "
                         f"to {float(rows[i]):.6g}")
    return (matrix / rows[:, None]).float()


@lru_cache(maxsize=1)
def _digits() -> tuple[Tensor, Tensor, Tensor]:
    """(images (1797, 8, 8) in [0, 1], targets (1797,), test mask (1797,)) of load_digits."""
    try:
        from sklearn.datasets import load_digits
    except ImportError as err:
        raise ImportError(
            "structtorch.data.digit_sequences needs scikit-learn for its bundled 8x8 digits: "
            "pip install scikit-learn (or pip install structtorch[examples])"
        ) from err
    bunch = load_digits()
    images = torch.as_tensor(bunch.images, dtype=torch.float32) / 16.0
    targets = torch.as_tensor(bunch.target, dtype=torch.int64)
    g = torch.Generator().manual_seed(_SPLIT_SEED)
    test = torch.zeros(len(targets), dtype=torch.bool)
    for c in range(NUM_DIGITS):
        members = (targets == c).nonzero().flatten()
        members = members[torch.randperm(len(members), generator=g)]
        test[members[len(members) // 2:]] = True  # the larger half (odd counts) goes to test
    return images, targets, test


def digit_sequences(
    n: int,
    *,
    min_length: int = 3,
    max_length: int = 8,
    transitions: str | Tensor = "informative",
    size: int = 8,
    noise: float = 0.0,
    split: str = "train",
    seed: int = 0,
) -> DigitSequences:
    """Sample ``n`` words of handwritten digits with labels from a bigram Markov chain.

    Parameters
    ----------
    n : int
        B, the number of words.
    min_length, max_length : int
        Word lengths are uniform in [min_length, max_length]; T = the longest drawn length.
    transitions : {"informative", "uniform"} or Tensor (10, 10)
        The label model (see the module docstring and :func:`digit_transitions`); a tensor must be
        nonnegative with rows summing to 1 (row i: the distribution of the digit after i).
    size : int
        H = W, the side of the returned images; 8 keeps the native images, larger sizes upscale
        them by bilinear interpolation (e.g. 16 or 32 for a CNN).
    noise : float
        Standard deviation of the Gaussian pixel noise added to every character at 8x8 (the ink
        spans [0, 1]); fresh for every drawn character. 0 keeps the clean images.
    split : {"train", "test", "all"}
        Which fixed half of the 1,797 digit images the characters are drawn from ("all": both).
        Each class is split in two halves independently of ``seed``: train and test words never
        share an image.
    seed : int
        Seeds lengths, labels, image choices and noise; the same arguments give the same words.

    Returns
    -------
    DigitSequences
        ``images`` (B, T, 1, size, size) float32, ``labels`` (B, T) int64, ``lengths`` (B,) int64,
        ``transitions`` (10, 10) float32 and ``image_ids`` (B, T) int64; images 0, labels 0 and ids
        -1 beyond each length.

    Raises
    ------
    ImportError
        When scikit-learn is not installed.

    Examples
    --------
    >>> train = digit_sequences(500, size=16, noise=0.5, seed=1)                 # doctest: +SKIP
    >>> test = digit_sequences(200, size=16, noise=0.5, split="test", seed=2)    # doctest: +SKIP
    >>> train.images.shape, train.labels.shape                                   # doctest: +SKIP
    (torch.Size([500, 8, 1, 16, 16]), torch.Size([500, 8]))
    """
    check_int("n", n, 1)
    check_int("seed", seed)
    if not 1 <= check_int("min_length", min_length) <= check_int("max_length", max_length):
        raise ValueError(f"need 1 <= min_length <= max_length, got {min_length}, {max_length}")
    check_int("size", size, 1)
    check_number("noise", noise, low=0.0)
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    matrix = _check_transitions(transitions)
    images, targets, test = _digits()

    # the pool of usable image ids per class, padded: pool[c, :counts[c]]
    usable = torch.ones_like(test) if split == "all" else (test if split == "test" else ~test)
    members = [((targets == c) & usable).nonzero().flatten() for c in range(NUM_DIGITS)]
    counts = torch.tensor([len(m) for m in members])
    pool = torch.zeros(NUM_DIGITS, int(counts.max()), dtype=torch.int64)
    for c, m in enumerate(members):
        pool[c, :len(m)] = m

    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(min_length, max_length + 1, (n,), generator=g)
    T = int(lengths.max())
    labels = torch.empty(n, T, dtype=torch.int64)
    labels[:, 0] = torch.randint(0, NUM_DIGITS, (n,), generator=g)
    for t in range(1, T):
        labels[:, t] = torch.multinomial(matrix[labels[:, t - 1]], 1, generator=g)[:, 0]
    inside = torch.arange(T) < lengths[:, None]
    labels = torch.where(inside, labels, 0)

    choice = (torch.rand(n, T, generator=g) * counts[labels]).long().clamp(max=counts[labels] - 1)
    ids = pool[labels, choice]
    chars = images[ids] + noise * torch.randn(n, T, 8, 8, generator=g)  # (B, T, 8, 8)
    if size != 8:
        chars = torch.nn.functional.interpolate(chars.reshape(n * T, 1, 8, 8), size=(size, size),
                                                mode="bilinear", align_corners=False)
        chars = chars.reshape(n, T, size, size)
    chars = torch.where(inside[..., None, None], chars, 0.0).unsqueeze(2).contiguous()
    return DigitSequences(chars, labels, lengths, matrix, torch.where(inside, ids, -1))
