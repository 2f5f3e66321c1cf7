"""Semi-Markov (segment) dynamic programs: Viterbi and log-partition over segmentations (the model
is described in :mod:`structtorch.semimarkov.layout`).

On CPU tensors they run the compiled kernels (``csrc/semimarkov.cpp``, glue in ``_cpu.py``), on
CUDA tensors the Triton kernels (``_triton.py``, segment PLiFs included in both DPs); on the
"torch" backend, and for the compiled log-partition with ``segment_plif``, the PyTorch reference
(``_torch.py``);
:mod:`structtorch._backend` decides. Time O(B T S N + B T N^2); memory O(B T N) unless
``segment_scores`` (B, T, max_len, N) is given.
"""

from __future__ import annotations

from torch import Tensor

from .. import _expectations
from .._checks import LengthsLike, cast_checked, forbidden_pattern
from .._numerics import NEG_INF, accumulate
from .._precision import mixed_precision
from . import _ops, _torch
from ._torch import POTENTIALS, guard
from .layout import SemiMarkov, check_segmentation, masked_semimarkov
from .layout import semimarkov_score as _score
from .plif import SegmentPLiF

__all__ = ["semimarkov_viterbi", "semimarkov_log_partition", "semimarkov_score"]


@mixed_precision
def semimarkov_viterbi(
    content: Tensor,
    transitions: Tensor,
    *,
    max_len: int,
    length_scores: Tensor | None = None,
    boundary: Tensor | None = None,
    segment_scores: Tensor | None = None,
    start: Tensor | None = None,
    end: Tensor | None = None,
    lengths: LengthsLike = None,
    segment_plif: SegmentPLiF | None = None,
    mask: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Highest-scoring segmentation of each sequence.

    Parameters
    ----------
    content : Tensor (B, T, N)
        Per-position label scores, summed over each segment.
    transitions : Tensor (N, N) or (B, T-1, N, N)
        ``transitions[m, n]`` scores a segment of label m followed by one of label n; per row and
        position, ``transitions[b, s - 1, m, n]`` scores it for a segment of label n starting at s
        ((T-1, N, N) and (1, T-1, N, N) broadcast over the batch; computed by the PyTorch
        recursions).
    max_len : int
        S, the longest segment.
    length_scores : Tensor (S, N) or (B, S, N), optional
        ``length_scores[d-1, n]`` scores a segment of length d and label n.
    boundary : Tensor (B, T, N), optional
        ``boundary[b, e-1, n]`` scores a segment of label n ending at e.
    segment_scores : Tensor (B, T, S, N), optional
        ``segment_scores[b, e-1, d-1, n]``: any further score of the segment [e-d, e).
    start, end : Tensor (N,) or (B, N), optional
        Scores of the first and last segment's label.
    lengths : Tensor (B,), optional
    mask : Tensor (B, T) bool, optional
        Instead of ``lengths``: each row's positions, any pattern (as for
        :func:`structtorch.viterbi`): per-position inputs are read there and per-position results
        (labels -1 and starts False elsewhere) written there. The other semi-Markov functions take
        it the same way.
    segment_plif : SegmentPLiF, optional
        Adds ``PLiF_n(mean(tracks[b, s:e, n]))`` to each segment [s, e) of label n (see
        :meth:`structtorch.PLiF.over_segments`); compiled on CPU, O(T S N) time, O(T N) memory.

    Returns
    -------
    score : Tensor (B,)
        0 for empty rows, -inf where no segmentation is feasible; its gradient w.r.t. every input
        is the indicator of the returned segmentation.
    labels : Tensor (B, T) int64
        The label of each position, -1 beyond the length and on infeasible rows.
    starts : Tensor (B, T) bool
        True where a segment begins.

    Examples
    --------
    >>> import torch, structtorch as st
    >>> content = torch.tensor([[[1., 0.], [1., 0.], [0., 1.]]])  # (B, T, N)
    >>> length_scores = torch.tensor([[0., 0.], [1., 1.]])  # a segment of length 2 scores 1
    >>> st.semimarkov_viterbi(content, torch.zeros(2, 2), max_len=2, length_scores=length_scores)
    (tensor([4.]), tensor([[0, 0, 1]]), tensor([[ True, False,  True]]))
    """
    sm, moved = masked_semimarkov(content, transitions, max_len, length_scores, boundary, segment_scores,
                                  start, end, lengths, segment_plif, mask)
    best, labels, starts = viterbi_semimarkov(sm)
    return best, moved.put(labels, -1), moved.put(starts, False)


def viterbi_semimarkov(sm: SemiMarkov) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`semimarkov_viterbi` of a validated :class:`SemiMarkov`."""
    best, labels, starts = _ops.viterbi(sm)
    return guard(sm, best.to(sm.content.dtype), "the Viterbi score"), labels, starts


@mixed_precision
def semimarkov_log_partition(
    content: Tensor,
    transitions: Tensor,
    *,
    max_len: int,
    length_scores: Tensor | None = None,
    boundary: Tensor | None = None,
    segment_scores: Tensor | None = None,
    start: Tensor | None = None,
    end: Tensor | None = None,
    lengths: LengthsLike = None,
    segment_plif: SegmentPLiF | None = None,
    mask: Tensor | None = None,
) -> Tensor:
    """Log of the sum over all segmentations of exp(score), (B,); arguments as for
    :func:`semimarkov_viterbi`. 0 for empty rows, -inf for infeasible ones. Its gradients are the
    segment marginals: on CPU a compiled forward and a hand-written backward (O(T S N) time, O(T N)
    memory per sequence); elsewhere, and with ``segment_plif``, autograd through the PyTorch
    recursion."""
    sm = masked_semimarkov(content, transitions, max_len, length_scores, boundary, segment_scores, start, end,
                           lengths, segment_plif, mask)[0]
    return log_partition_semimarkov(sm)


def log_partition_semimarkov(sm: SemiMarkov, *, accumulated: bool = False) -> Tensor:
    """:func:`semimarkov_log_partition` of a validated :class:`SemiMarkov`; with ``accumulated`` in
    float64 (the kernels' precision), not cast back."""
    if sm.shape[1] == 0:
        zeros = sm.content.sum(dim=(1, 2))  # zeros, connected to the graph (as the chain's)
        return accumulate(zeros) if accumulated else zeros
    logz = _ops.log_partition(sm)
    return guard(sm, logz if accumulated else logz.to(sm.content.dtype), "the log-partition")


def log_prob_semimarkov(sm: SemiMarkov, labels: Tensor, starts: Tensor, logz: Tensor) -> Tensor:
    """(B,) log-probability score - logZ of checked segmentations (see :func:`check_segmentation`)
    of a validated :class:`SemiMarkov`, in float64 and cast once; ``logz`` is
    :func:`log_partition_semimarkov` with ``accumulated``."""
    return _expectations.log_prob(_ops.score(sm, labels, starts), logz, sm.content.dtype, POTENTIALS)


def semimarkov_parts(sm: SemiMarkov, segments: bool) -> list[Tensor]:
    """The potentials of semi-Markov potentials as their expectations take them, in the
    accumulation dtype: [content, length_scores, boundary, transitions per row (B, N, N), start,
    end] and, with ``segments`` or given segment scores, segment_scores (zeros when not given)."""
    B, T, S, N = sm.shape
    trans = sm.transitions if sm.per_position else sm.transitions.expand(B, N, N)
    parts = [sm.content, sm.length_scores, sm.boundary, trans, sm.start, sm.end]
    if sm.segment_scores is not None:
        parts.append(sm.segment_scores)
    elif segments:
        parts.append(sm.content.new_zeros(B, T, S, N))
    return [accumulate(x) for x in parts]


def expectations_semimarkov(sm: SemiMarkov, segments: bool) -> tuple[Tensor, list[Tensor], list[Tensor]]:
    """(logZ (B,), marginals, potentials) of a validated :class:`SemiMarkov` in float64 through the
    reference recursion: the potentials are [content, length_scores, boundary, transitions per row
    (B, N, N), start, end] and, with ``segments`` or given segment scores, segment_scores (zeros
    when not given) last; the marginals are their gradients d logZ / d potential."""
    parts = semimarkov_parts(sm, segments)

    def logz(content, length, boundary, trans, start, end, segment=None):
        model = SemiMarkov(content, trans, length, boundary, segment, start, end, sm.lengths.clone())
        return _torch.log_partition(model)

    value, grads = _expectations.logz_and_grads(logz, parts)
    return value, grads, parts


@mixed_precision
def semimarkov_score(
    content: Tensor,
    transitions: Tensor,
    labels: Tensor,
    starts: Tensor,
    *,
    max_len: int,
    length_scores: Tensor | None = None,
    boundary: Tensor | None = None,
    segment_scores: Tensor | None = None,
    start: Tensor | None = None,
    end: Tensor | None = None,
    lengths: LengthsLike = None,
    segment_plif: SegmentPLiF | None = None,
    mask: Tensor | None = None,
) -> Tensor:
    """Score of given segmentations (B,), differentiable w.r.t. every potential.

    Potentials as for :func:`semimarkov_viterbi`. ``labels`` (B, T) integer gives each position's
    label and ``starts`` (B, T) bool marks where segments begin (position 0 always does); both are
    validated (labels in [0, N), constant inside a segment, segments no longer than ``max_len``;
    entries beyond each length are ignored). -inf when the segmentation uses a forbidden entry.
    """
    sm, moved = masked_semimarkov(content, transitions, max_len, length_scores, boundary, segment_scores,
                                  start, end, lengths, segment_plif, mask)
    labels, starts = moved.take_positions(labels), moved.take_positions(starts)
    return score_semimarkov(sm, *check_segmentation(labels, starts, sm))


def score_semimarkov(sm: SemiMarkov, labels: Tensor, starts: Tensor) -> Tensor:
    """:func:`semimarkov_score` of checked segmentations (see :func:`check_segmentation`) of a
    validated :class:`SemiMarkov`."""
    score = _ops.score(sm, labels, starts)

    def feasible() -> Tensor:  # the segmentation uses no -inf entry
        return _score(sm.map(forbidden_pattern), labels, starts) > NEG_INF

    guard(sm, score, "the segmentation score", feasible)
    return cast_checked(score, sm.content.dtype, "the segmentation score", POTENTIALS)
