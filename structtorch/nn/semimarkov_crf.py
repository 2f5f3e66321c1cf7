"""Semi-Markov conditional random field layer with learnable transition, length, start and end scores."""

from __future__ import annotations

import warnings

import torch
from torch import Tensor, nn

from .._checks import LengthsLike, caller_stacklevel, check_int, check_number
from .._library import NotScriptable
from ..chain.masking import Compaction, compaction
from ..distributions import SemiMarkovDistribution
from ..semimarkov.segments import semimarkov_viterbi
from .crf import REDUCTIONS, _reduce

__all__ = ["SemiMarkovCRF"]


class SemiMarkovCRF(NotScriptable, nn.Module):
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

    Examples
    --------
    >>> import torch, structtorch as st
    >>> crf = st.SemiMarkovCRF(2, max_len=2)
    >>> with torch.no_grad():  # fixed parameters for the example: length-2 segments score 1
    ...     _ = [p.zero_() for p in crf.parameters()]
    ...     _ = crf.length_scores[1].fill_(1.0)
    >>> content = torch.tensor([[[1., 0.], [1., 0.], [0., 1.]]])
    >>> score, labels, starts = crf.decode(content)
    >>> score.item(), labels.tolist(), starts.tolist()
    (4.0, [[0, 0, 1]], [[True, False, True]])
    >>> nll = crf(content, labels, starts, reduction="mean")  # -log p(segmentation)
    >>> round(nll.item(), 3)
    1.253
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

    def forward(self, content: Tensor, labels: Tensor, starts: Tensor, mask: Tensor | None = None, *,
                lengths: LengthsLike = None, reduction: str = "none") -> Tensor:
        """Negative log-likelihood -log p(labels, starts | content): a loss (>= 0).

        The arguments are those of :meth:`structtorch.LinearChainCRF.forward` (``mask`` or
        keyword ``lengths``, ``reduction``), with the segmentation given as ``labels`` and
        ``starts``. The former call ``forward(content, labels, starts, lengths)`` (lengths as the
        fourth positional argument) still works, with a ``DeprecationWarning``: pass
        ``lengths=lengths``.

        Parameters
        ----------
        content : Tensor (B, T, N)
        labels : Tensor (B, T) integer
            In [0, N) within each sequence, constant inside each segment (anything outside).
        starts : Tensor (B, T) bool
            True where a segment begins (each sequence's first position always begins one);
            segments are at most ``max_len`` long.
        mask : Tensor (B, T) bool (or uint8), optional
            True on each sequence's positions, any pattern: the segmentation runs over them in
            order (padding on either side, or interleaved; an all-False row is an empty
            sequence). ``labels`` and ``starts`` are read at these positions.
        lengths : Tensor (B,), optional
            Instead of ``mask``: left-aligned sequences of these lengths. Neither: all T.
        reduction : {"none", "sum", "mean", "token_mean"}
            Per sequence (B,), summed, averaged over sequences, or summed and divided by the
            number of positions.

        Returns
        -------
        Tensor (B,) or scalar
            logZ - score(labels, starts), taken in float64 on CPU and cast once to the content's
            dtype (promoted with the parameters' as under autocast); +inf for a segmentation that
            uses a -inf content score.
        """
        mask, lengths = _deprecated_lengths("forward", mask, lengths)
        return self._nll(content, labels, starts, mask, lengths, reduction)

    def log_likelihood(self, content: Tensor, labels: Tensor, starts: Tensor, mask: Tensor | None = None, *,
                       lengths: LengthsLike = None, reduction: str = "none") -> Tensor:
        """log p(labels, starts | content) (<= 0): minus :meth:`forward`, arguments as there (the
        fourth positional argument as ``lengths`` is deprecated likewise)."""
        mask, lengths = _deprecated_lengths("log_likelihood", mask, lengths)
        return -self._nll(content, labels, starts, mask, lengths, reduction)

    def _nll(self, content: Tensor, labels: Tensor, starts: Tensor, mask: Tensor | None, lengths: LengthsLike,
             reduction: str) -> Tensor:
        """The negative log-likelihood per sequence, reduced (warning where the reduction is +inf)."""
        if reduction not in REDUCTIONS:
            raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
        moved = self._moved(content, mask, lengths)
        if moved is not None:
            content, lengths = moved.take(content), moved.lengths
            labels, starts = moved.take_positions(labels), moved.take_positions(starts)
        dist = self.distribution(content, lengths)
        return _reduce(-dist.log_prob((labels, starts)), reduction, lambda: dist.lengths.sum())

    def _moved(self, content: object, mask: Tensor | None, lengths: LengthsLike) -> Compaction | None:
        """The :class:`structtorch.chain.masking.Compaction` of ``mask`` (checked), or None."""
        if mask is None:
            return None
        if lengths is not None:
            raise ValueError("give mask or lengths, not both")
        self._check(content)
        if not isinstance(content, Tensor) or content.dim() != 3:
            got = tuple(content.shape) if isinstance(content, Tensor) else type(content).__name__
            raise ValueError(f"content must have shape (B, T, num_labels) = (B, T, {self.num_labels}), "
                             f"got {got}")
        return compaction(mask, content.shape[0], content.shape[1], content.device)

    def decode(self, content: Tensor, mask: Tensor | None = None, *,
               lengths: LengthsLike = None) -> tuple[Tensor, Tensor, Tensor]:
        """Best segmentation: ``(score (B,), labels (B, T), starts (B, T))`` as returned by
        :func:`structtorch.semimarkov_viterbi` (labels -1 and starts False outside each
        sequence), over ``mask``'s positions (results at those positions) or the first
        ``lengths`` of each row, as :meth:`forward`. ``decode(content, lengths)`` (lengths
        positional) is deprecated: pass ``lengths=lengths``."""
        mask, lengths = _deprecated_lengths("decode", mask, lengths)
        moved = self._moved(content, mask, lengths)
        if moved is not None:
            content, lengths = moved.take(content), moved.lengths
        self._check(content)
        score, labels, starts = semimarkov_viterbi(content, self.transitions, max_len=self.max_len,
                                                   length_scores=self.length_scores, start=self.start,
                                                   end=self.end, lengths=lengths)
        if moved is not None:
            labels, starts = moved.put(labels, -1), moved.put(starts, False)
        return score, labels, starts


def _deprecated_lengths(method: str, mask: object, lengths: LengthsLike) -> tuple[Tensor | None, LengthsLike]:
    """``(mask, lengths)``, with lengths given where the mask goes (the former positional form: a
    (B,) tensor or a list of ints) moved to ``lengths`` after a ``DeprecationWarning``."""
    nested = isinstance(mask, (list, tuple)) and any(isinstance(row, (list, tuple, Tensor)) for row in mask)
    if nested or not (isinstance(mask, (list, tuple)) or (isinstance(mask, Tensor) and mask.dim() == 1)):
        return mask, lengths  # a mask (a nested list is one, refused as such: masks are tensors)
    if lengths is not None:
        raise TypeError(f"SemiMarkovCRF.{method} got lengths twice: as its mask argument and as lengths=")
    if not torch.compiler.is_compiling():  # dynamo cannot trace warnings.warn
        warnings.warn(f"SemiMarkovCRF.{method} with lengths as a positional argument is deprecated (that "
                      "place is the mask's, as in LinearChainCRF); pass lengths=lengths", DeprecationWarning,
                      stacklevel=caller_stacklevel())
    return None, mask

