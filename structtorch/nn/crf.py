"""Linear-chain conditional random field layer with learnable transition, start and end scores."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .._checks import LengthsLike, cast_checked, check_float
from .._numerics import accumulate
from .._precision import mixed_precision
from ..chain import log_partition, marginals, path_score, viterbi

__all__ = ["LinearChainCRF"]


class LinearChainCRF(nn.Module):
    """Linear-chain CRF over ``num_labels`` labels on top of any (B, T, N) emission scores.

    Parameters
    ----------
    num_labels : int
        N, the number of labels.
    init_scale : float
        Transition, start and end scores start uniform in [-init_scale, init_scale].

    Attributes
    ----------
    transitions : nn.Parameter (N, N)
        ``transitions[i, j]`` scores label i followed by label j.
    start, end : nn.Parameter (N,)
        Scores of the first and the last label.

    The unary scores must have the module's dtype and device (use ``.to()`` on the module).
    """

    def __init__(self, num_labels: int, *, init_scale: float = 0.1) -> None:
        super().__init__()
        if isinstance(num_labels, bool) or not isinstance(num_labels, int) or num_labels < 1:
            raise ValueError(f"num_labels must be a positive int, got {num_labels!r}")
        self.num_labels = num_labels
        self.transitions = nn.Parameter(torch.empty(num_labels, num_labels))
        self.start = nn.Parameter(torch.empty(num_labels))
        self.end = nn.Parameter(torch.empty(num_labels))
        self.init_scale = init_scale
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for p in (self.transitions, self.start, self.end):
            nn.init.uniform_(p, -self.init_scale, self.init_scale)

    def extra_repr(self) -> str:
        return f"num_labels={self.num_labels}"

    def _potentials(self, unary: Tensor) -> dict:
        if isinstance(unary, Tensor) and unary.dim() == 3 and unary.shape[2] != self.num_labels:
            raise ValueError(
                f"unary must have shape (B, T, num_labels) = (B, T, {self.num_labels}), "
                f"got {tuple(unary.shape)}"
            )
        return {"start": self.start, "end": self.end}

    def forward(self, unary: Tensor, labels: Tensor, lengths: LengthsLike = None) -> Tensor:
        """Negative log-likelihood -log p(labels | unary) per sequence.

        Parameters
        ----------
        unary : Tensor (B, T, N)
        labels : Tensor (B, T) integer, in [0, N) within each length
        lengths : Tensor (B,), optional

        Returns
        -------
        Tensor (B,)
            In the dtype of ``unary`` (promoted with the parameters' dtype when one of them is
            float16/bfloat16, as under autocast: see :mod:`structtorch._precision`); on CPU the
            difference logZ - score is taken in float64, so a small NLL keeps its digits when both
            terms are large.
        """
        self._potentials(unary)
        return _negative_log_likelihood(unary, self.transitions, self.start, self.end, labels, lengths)

    def decode(self, unary: Tensor, lengths: LengthsLike = None) -> tuple[Tensor, Tensor]:
        """Best labeling: ``(score (B,), path (B, T))`` as returned by :func:`structtorch.viterbi`."""
        return viterbi(unary, self.transitions, lengths=lengths, **self._potentials(unary))

    def marginals(self, unary: Tensor, lengths: LengthsLike = None) -> Tensor:
        """Node marginals (B, T, N), 0 beyond each length."""
        return marginals(unary, self.transitions, lengths=lengths, **self._potentials(unary))


@mixed_precision
def _negative_log_likelihood(unary: Tensor, transitions: Tensor, start: Tensor, end: Tensor, labels: Tensor,
                             lengths: LengthsLike) -> Tensor:
    """(B,) logZ - score(labels), both in the accumulation precision, cast once."""
    if isinstance(unary, Tensor) and unary.is_floating_point():  # one dtype, before promoting
        check_float("transitions", transitions, unary)
    u, a, s, e = (accumulate(x) for x in (unary, transitions, start, end))
    logz = log_partition(u, a, start=s, end=e, lengths=lengths)
    gold = path_score(u, a, labels, start=s, end=e, lengths=lengths)
    # +inf stays (a labeling with probability 0); a finite NLL beyond the dtype's range raises
    return cast_checked(logz - gold, unary.dtype, "the negative log-likelihood", "unary")
