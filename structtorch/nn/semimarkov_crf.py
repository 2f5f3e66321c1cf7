"""Semi-Markov conditional random field layer with learnable transition, length, start and end scores."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .._checks import LengthsLike, check_int, check_number
from ..distributions import SemiMarkovDistribution
from ..semimarkov.segments import semimarkov_viterbi

__all__ = ["SemiMarkovCRF"]


class SemiMarkovCRF(nn.Module):
    """Semi-Markov CRF over ``num_labels`` segment labels on top of any (B, T, N) content scores.

    A segmentation of [0, L) into labeled segments [s, e) (1 <= e - s <= ``max_len``) scores the sum
    of ``content[b, t, n]`` over each segment's positions, plus ``length_scores[e - s - 1, n]`` per
    segment, ``transitions[m, n]`` between consecutive segments, ``start`` and ``end`` for the first
    and last segment's label (see :class:`structtorch.SemiMarkovDistribution`).

    Parameters
    ----------
    num_labels : int
        N, the number of segment labels.
    max_len : int
        S, the longest segment.
    init_scale : float
        All parameters start uniform in [-init_scale, init_scale].

    Attributes
    ----------
    transitions : nn.Parameter (N, N)
        ``transitions[m, n]`` scores a segment of label m followed by one of label n.
    length_scores : nn.Parameter (S, N)
        ``length_scores[d-1, n]`` scores a segment of length d and label n.
    start, end : nn.Parameter (N,)
        Scores of the first and the last segment's label.

    The content scores must have the module's dtype and device (use ``.to()`` on the module), or be
    float16/bfloat16 beside float32 parameters (as under autocast).
    """

    def __init__(self, num_labels: int, max_len: int, *, init_scale: float = 0.1) -> None:
        super().__init__()
        self.num_labels = check_int("num_labels", num_labels, 1)
        self.max_len = check_int("max_len", max_len, 1)
        self.init_scale = check_number("init_scale", init_scale, low=0.0)
        N, S = self.num_labels, self.max_len
        self.transitions = nn.Parameter(torch.empty(N, N))
        self.length_scores = nn.Parameter(torch.empty(S, N))
        self.start = nn.Parameter(torch.empty(N))
        self.end = nn.Parameter(torch.empty(N))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for p in (self.transitions, self.length_scores, self.start, self.end):
            nn.init.uniform_(p, -self.init_scale, self.init_scale)

    def extra_repr(self) -> str:
        return f"num_labels={self.num_labels}, max_len={self.max_len}"

    def _check(self, content: Tensor) -> None:
        if isinstance(content, Tensor) and content.dim() == 3 and content.shape[2] != self.num_labels:
            raise ValueError(f"content must have shape (B, T, num_labels) = (B, T, {self.num_labels}), "
                             f"got {tuple(content.shape)}")

    def distribution(self, content: Tensor, lengths: LengthsLike = None) -> SemiMarkovDistribution:
        """The :class:`structtorch.SemiMarkovDistribution` over segmentations of ``content`` (B, T, N)
        with this layer's parameters; ``lengths`` (B,) optional (None: all T)."""
        self._check(content)
        return SemiMarkovDistribution(content, self.transitions, max_len=self.max_len,
                                      length_scores=self.length_scores, start=self.start, end=self.end,
                                      lengths=lengths)

    def forward(self, content: Tensor, labels: Tensor, starts: Tensor, lengths: LengthsLike = None) -> Tensor:
        """Negative log-likelihood -log p(labels, starts | content) per sequence.

        Parameters
        ----------
        content : Tensor (B, T, N)
        labels : Tensor (B, T) integer
            In [0, N) within each length, constant inside each segment.
        starts : Tensor (B, T) bool
            True where a segment begins (position 0 always begins one); segments are at most
            ``max_len`` long.
        lengths : Tensor (B,), optional

        Returns
        -------
        Tensor (B,)
            logZ - score(labels, starts), taken in float64 on CPU and cast once to the content's dtype
            (promoted with the parameters' as under autocast); +inf for a segmentation that uses a
            -inf content score.
        """
        return -self.log_likelihood(content, labels, starts, lengths)

    def log_likelihood(self, content: Tensor, labels: Tensor, starts: Tensor,
                       lengths: LengthsLike = None) -> Tensor:
        """log p(labels, starts | content), (B,): the negative of :meth:`forward`; arguments as there."""
        return self.distribution(content, lengths).log_prob((labels, starts))

    def decode(self, content: Tensor, lengths: LengthsLike = None) -> tuple[Tensor, Tensor, Tensor]:
        """Best segmentation: ``(score (B,), labels (B, T), starts (B, T))`` as returned by
        :func:`structtorch.semimarkov_viterbi`."""
        self._check(content)
        return semimarkov_viterbi(content, self.transitions, max_len=self.max_len,
                                  length_scores=self.length_scores, start=self.start, end=self.end,
                                  lengths=lengths)
