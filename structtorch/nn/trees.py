"""Tree CRF layers: :class:`DependencyCRF` (projective or not, single root or not) over arc scores
and :class:`TreeCRF` (labeled binary constituency trees) over span scores. Neither has parameters
of its own: the scores come from the user's network (a biaffine arc scorer, a span scorer); the
layers give the CRF loss, the decoder, the log-partition and the marginals."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .._checks import LengthsLike, check_bool, check_int, one_assertion
from .._library import NotScriptable
from .._numerics import accumulate
from ..trees.constituency import cky_log_partition, cky_marginals, cky_viterbi
from ..trees.constituency import log_partition_fn as cky_logz_fn
from ..trees.dependency import (
    dependency_log_partition,
    dependency_marginals,
    dependency_viterbi,
    log_partition_fn,
)
from ..trees.layout import (
    checked_arcs,
    checked_heads,
    checked_spans,
    checked_tree_spans,
    consistent,
    span_score,
    tree_score,
    words,
)
from .crf import REDUCTIONS, _reduce

__all__ = ["DependencyCRF", "TreeCRF"]


def _check_reduction(reduction: object) -> str:
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
    return reduction


class DependencyCRF(NotScriptable, nn.Module):
    """A CRF over the dependency trees of each sentence, on arc scores (B, T + 1, T + 1) with the root
    at position 0 (``arc_scores[b, h, m]`` scores the arc h -> m; see
    :func:`structtorch.dependency_log_partition`).

    Parameters
    ----------
    projective : bool
        Projective trees (Eisner's algorithm) or all trees (the matrix-tree theorem, Chu-Liu-Edmonds).
    single_root : bool
        Trees whose root has exactly one child.

    Examples
    --------
    >>> import torch, structtorch as st
    >>> crf = st.DependencyCRF()
    >>> arcs = torch.zeros(1, 3, 3)
    >>> arcs[0, 0, 2] = arcs[0, 2, 1] = 2.0  # root -> word 2 -> word 1
    >>> crf.decode(arcs)[1]
    tensor([[-1,  2,  0]])
    >>> heads = torch.tensor([[-1, 2, 0]])
    >>> crf(arcs, heads).item() > 0  # the negative log-likelihood of the gold tree
    True
    """

    def __init__(self, projective: bool = True, single_root: bool = False):
        super().__init__()
        self.projective = check_bool("projective", projective)
        self.single_root = check_bool("single_root", single_root)

    def extra_repr(self) -> str:
        return f"projective={self.projective}, single_root={self.single_root}"

    @property
    def _kw(self) -> dict:
        return {"projective": self.projective, "single_root": self.single_root}

    @one_assertion()
    def forward(self, arc_scores: Tensor, heads: Tensor, lengths: LengthsLike = None, *,
                reduction: str = "mean", ignore_index: int | None = None) -> Tensor:
        """Negative log-likelihood -log p(heads | arc_scores) (>= 0).

        Parameters
        ----------
        arc_scores : Tensor (B, T + 1, T + 1)
        heads : Tensor (B, T + 1) integer
            The gold head of each word 1..L (in [0, T]; entries at the root and beyond ignored).
        lengths : Tensor (B,), optional
            Words per sentence; None means T.
        reduction : {"none", "sum", "mean", "token_mean"}
            Per sentence (B,), summed, averaged over sentences, or summed and divided by the words.
        ignore_index : int, optional
            The head value of unannotated words (partial annotation, e.g. -100): the loss is then
            -log of the probability of the trees that agree with the annotated heads, logZ minus
            the log-partition of those trees. None: every word is annotated.

        Returns
        -------
        Tensor (B,) or scalar
            logZ - score(heads); +inf for a gold tree that uses a -inf arc (a warning names the rows
            when reduced). The gold tree need not be projective (its likelihood is then 0 under a
            projective CRF: the loss is logZ minus its score all the same).
        """
        reduction = _check_reduction(reduction)
        scores, checked, _, _ = checked_arcs(arc_scores, lengths, self.projective, self.single_root)
        gold, annotated = checked_heads(heads, checked, tuple(scores.shape[:2]), ignore_index=ignore_index)
        log_partition = log_partition_fn(self.projective, self.single_root, checked)
        full = accumulate(scores)
        if ignore_index is None:
            inside = words(checked, scores.shape[1])
            nll = log_partition(full) - tree_score(full, torch.where(inside, gold, -1))
        else:
            nll = log_partition(full) - log_partition(consistent(full, gold, annotated))
        return _reduce(nll.to(scores.dtype), reduction, lambda: checked.sum())

    def decode(self, arc_scores: Tensor, lengths: LengthsLike = None) -> tuple[Tensor, Tensor]:
        """(score (B,), heads (B, T + 1) int64): the best tree, as :func:`structtorch.dependency_viterbi`."""
        return dependency_viterbi(arc_scores, lengths, **self._kw)

    def log_partition(self, arc_scores: Tensor, lengths: LengthsLike = None) -> Tensor:
        """(B,): :func:`structtorch.dependency_log_partition`."""
        return dependency_log_partition(arc_scores, lengths, **self._kw)

    def marginals(self, arc_scores: Tensor, lengths: LengthsLike = None) -> Tensor:
        """(B, T + 1, T + 1) arc marginals: :func:`structtorch.dependency_marginals`."""
        return dependency_marginals(arc_scores, lengths, **self._kw)


class TreeCRF(NotScriptable, nn.Module):
    """A CRF over labeled binary constituency trees, on span scores (B, T, T, N)
    (``span_scores[b, i, j, n]`` scores words i..j as a constituent labeled n; see
    :func:`structtorch.cky_log_partition`).

    Parameters
    ----------
    num_labels : int
        N, the number of span labels (the last dimension of the scores).

    Examples
    --------
    >>> import torch, structtorch as st
    >>> crf = st.TreeCRF(2)
    >>> scores = torch.zeros(1, 3, 3, 2)
    >>> scores[0, 0, 1, 1] = 3.0  # ((w0 w1) w2) with [0, 1] labeled 1
    >>> score, spans = crf.decode(scores)
    >>> spans[0, 0, 1].tolist(), int(spans.sum())
    ([0.0, 1.0], 5)
    >>> crf(scores, spans).item() > 0
    True
    """

    def __init__(self, num_labels: int):
        super().__init__()
        self.num_labels = check_int("num_labels", num_labels, 1)

    def extra_repr(self) -> str:
        return f"num_labels={self.num_labels}"

    def _checked(self, span_scores: Tensor, lengths: LengthsLike) -> tuple[Tensor, Tensor]:
        scores, checked = checked_spans(span_scores, lengths)
        if scores.shape[3] != self.num_labels:
            raise ValueError(f"span_scores must have num_labels = {self.num_labels} scores in its last "
                             f"dimension, got {scores.shape[3]}")
        return scores, checked

    @one_assertion()
    def forward(self, span_scores: Tensor, spans: Tensor, lengths: LengthsLike = None, *,
                reduction: str = "mean") -> Tensor:
        """Negative log-likelihood -log p(spans | span_scores) (>= 0).

        Parameters
        ----------
        span_scores : Tensor (B, T, T, N)
        spans : Tensor (B, T, T, N) 0/1
            The gold tree's labeled spans (2L - 1 of them inside each length; entries beyond ignored).
        lengths : Tensor (B,), optional
            Words per sentence; None means T.
        reduction : {"none", "sum", "mean", "token_mean"}
            As :meth:`DependencyCRF.forward`.
        """
        reduction = _check_reduction(reduction)
        scores, checked = self._checked(span_scores, lengths)
        gold = checked_tree_spans(spans, tuple(scores.shape))
        full = accumulate(scores)
        nll = cky_logz_fn(checked)(full) - span_score(full, gold, checked)
        return _reduce(nll.to(scores.dtype), reduction, lambda: checked.sum())

    def decode(self, span_scores: Tensor, lengths: LengthsLike = None) -> tuple[Tensor, Tensor]:
        """(score (B,), spans (B, T, T, N) 0/1): the best tree, as :func:`structtorch.cky_viterbi`."""
        return cky_viterbi(*self._checked(span_scores, lengths))

    def log_partition(self, span_scores: Tensor, lengths: LengthsLike = None) -> Tensor:
        """(B,): :func:`structtorch.cky_log_partition`."""
        return cky_log_partition(*self._checked(span_scores, lengths))

    def marginals(self, span_scores: Tensor, lengths: LengthsLike = None) -> Tensor:
        """(B, T, T, N) span marginals: :func:`structtorch.cky_marginals`."""
        return cky_marginals(*self._checked(span_scores, lengths))


