"""Loss-augmented inference for semi-Markov models: position, segment, boundary and 0/1 losses.

Margin rescaling with an affine h folds the position loss into the content scores (O(T S N)), and
with h the identity the boundary loss into the boundary scores and the segment loss into the segment
scores; any other h,
and slack rescaling, run the Hamming-count table over segment ends,

    alpha[e, k, n] = max_d  segment(e - d, e, n) + inc[e - d, k - c(e - d, e, n), n],

where c(s, e, n) counts the positions of [s, e) whose target label is not n. That costs
O(T S K N + T K N^2) time and O(T K N) memory with K = T (the PyTorch loop here runs on any device).
The segment-level losses (``loss=``) run the same table with another c(s, e, n), which may be
negative, from an offset (``_torch.SegmentCounts``): "segment" counts the segments (start, end,
label) in the symmetric difference of the two segmentations (offset: the target's segments; a
segment adds 1, or -1 when it is one of the target's), "boundary" the positions where "a segment
starts here" differs, "zero_one" whether they differ at all (the segment count capped at 1), with
K = T plus the target's segments.
Segmentations travel through the generic search (:mod:`structtorch.lossaug.structures`) encoded
as one (B, T) tensor: label + N * (1 where a segment starts), -1 beyond each length.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor

from .._backend import kernel_module
from .._checks import LengthsLike, cast_checked, guard_overflow
from .._precision import mixed_precision
from ..semimarkov import _ops as _semimarkov_ops
from ..semimarkov.layout import SemiMarkov, check_segmentation, masked_semimarkov
from ..semimarkov.plif import SegmentPLiF
from ._ops import FUSED, solve
from ._torch import SEGMENT_LOSSES
from .chain import _checked_max_count, _checked_value, _fusable
from .spec import HLike, h_table, resolve_loss, resolve_segment_loss
from .structures import _SemiMarkovStructure, decode

__all__ = ["semimarkov_loss_augmented", "loss_augmented_semimarkov"]


def check_target(labels: Tensor, starts: object, sm: SemiMarkov) -> tuple[Tensor, Tensor]:
    """Validate a target segmentation (see :func:`structtorch.semimarkov.layout.check_segmentation`)."""
    return check_segmentation(labels, starts, sm, ("target_labels", "target_starts", "target"))


@mixed_precision
def semimarkov_loss_augmented(
    content: Tensor,
    transitions: Tensor,
    target_labels: Tensor,
    target_starts: Tensor,
    *,
    max_len: int,
    h: HLike = None,
    rescaling: str = "margin",
    length_scores: Tensor | None = None,
    boundary: Tensor | None = None,
    segment_scores: Tensor | None = None,
    start: Tensor | None = None,
    end: Tensor | None = None,
    lengths: LengthsLike = None,
    weights: Tensor | None = None,
    algorithm: str = "auto",
    segment_plif: SegmentPLiF | None = None,
    loss: str = "hamming",
    max_count: int | None = None,
    mask: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Most violating segmentation under a position or segment-level loss.

    Arguments as for :func:`structtorch.semimarkov_viterbi` (``segment_plif`` included), plus the
    target segmentation (``target_labels`` (B, T) int64 and ``target_starts`` (B, T) bool) and
    ``h``, ``rescaling``, ``weights``, ``max_count`` and ``algorithm`` as for
    :func:`structtorch.loss_augmented`; Delta = h(H) with H, by ``loss``:

    - "hamming": the positions inside the length whose label differs from the target's
      (weighted by ``weights``);
    - "segment": the segments, (start, end, label) triples, in the symmetric difference of the
      target's and the found segmentation's;
    - "boundary": the positions where "a segment starts here" differs;
    - "zero_one": 1 where the segmentations differ, else 0.

    Any h, both rescalings (``weights`` apply to "hamming" only). Margin rescaling with h the
    identity folds "boundary" and "segment" into the potentials (one Viterbi, O(T S N)); the other
    segment-level cases run the count table, O(T S K N) with K = T + the target's segments.

    Returns
    -------
    value : Tensor (B,)
        margin: max s(z) + h(H) - s(target); slack: max h(H) (1 + s(z) - s(target)); its
        gradient is the exact subgradient.
    labels : Tensor (B, T) int64 and starts : Tensor (B, T) bool
        The maximizing segmentation (-1 / False beyond each length).
    count : Tensor (B,)
        H of the found segmentation (the Hamming count weighted by ``weights``, or the segment,
        boundary or 0/1 count).

    Examples
    --------
    >>> import torch, structtorch as st
    >>> content = torch.tensor([[[1., 0.], [1., 0.], [0., 1.]]])
    >>> length_scores = torch.tensor([[0., 0.], [1., 1.]])
    >>> labels, starts = torch.tensor([[0, 0, 1]]), torch.tensor([[True, False, True]])
    >>> value, _, _, count = st.semimarkov_loss_augmented(
    ...     content, torch.zeros(2, 2), labels, starts, max_len=2, length_scores=length_scores,
    ...     loss="segment")
    >>> value, count  # [0, 0, 0] in unit segments: its score 2 + 5 differing segments - the target's 4
    (tensor([3.]), tensor([5]))
    """
    sm, moved = masked_semimarkov(content, transitions, max_len, length_scores, boundary, segment_scores,
                                  start, end, lengths, segment_plif, mask)
    target_labels, target_starts, weights = (moved.take_positions(x)
                                             for x in (target_labels, target_starts, weights))
    value, labels, starts, count = loss_augmented_semimarkov(
        sm, target_labels, target_starts, h=h, rescaling=rescaling, weights=weights, algorithm=algorithm,
        loss=loss, max_count=max_count)
    return value, moved.put(labels, -1), moved.put(starts, False), count


def loss_augmented_semimarkov(sm: SemiMarkov, target_labels: Tensor, target_starts: Tensor, *,
                                h: HLike = None, rescaling: str = "margin", weights: Tensor | None = None,
                                algorithm: str = "auto", loss: str = "hamming",
                                max_count: int | None = None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """:func:`semimarkov_loss_augmented` on already validated :class:`SemiMarkov` potentials (the
    target and the loss arguments are checked here)."""
    if loss not in SEGMENT_LOSSES:
        raise ValueError(f"loss must be one of {SEGMENT_LOSSES}, got {loss!r}")
    max_count = _checked_max_count(max_count)
    labels, starts = check_target(target_labels, target_starts, sm)
    if loss == "hamming" and _fuses(sm, h, rescaling, weights, algorithm):
        return _fused(sm, labels, starts)
    if loss == "hamming" and weights is not None and _weights_fuse(sm, h, rescaling, algorithm):
        return _fused_weights(sm, labels, starts, h, rescaling, weights, algorithm, max_count)
    if _table_fuses(sm, h, rescaling, weights, algorithm, loss):
        return _fused_table(sm, labels, starts, h, rescaling, loss)
    B, T, _, N = sm.shape
    mask = torch.arange(T, device=labels.device) < sm.lengths[:, None]
    model = _SemiMarkovStructure(sm, labels, starts, mask)
    if _folds(h, rescaling, weights, algorithm, loss):
        return _folded(model, loss, sm.content.dtype)
    if loss == "hamming":
        spec = resolve_loss(h, rescaling, weights, None, labels, mask, sm.content, algorithm,
                            max_count=max_count)
    else:
        spec = resolve_segment_loss(loss, h, rescaling, weights, model.bound(loss), B, sm.content, algorithm)
    value, struct, count = solve(model, spec, labels, N, algorithm, sm.content.dtype)
    out_labels, out_starts = decode(struct, N)
    return value, out_labels, out_starts, count


def _folded(model: _SemiMarkovStructure, kind: str,
            dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Margin rescaling of the boundary or segment loss (h the identity) folded into the potentials
    (O(T S N), one Viterbi; :meth:`_SemiMarkovStructure.fold`): the boundary count is (target
    starts - 1) + the sum over found starts s >= 1 of (1 - 2 [s is a target start]), and a start at
    s is the end of a segment at s - 1; the segment count is (target segments) + the sum over
    found segments of (1 - 2 [it is a target segment])."""
    struct = model.fold(kind)
    counts = model.segments(kind)
    found_labels, found_starts = decode(struct, model.N)
    count = counts.count(found_labels, found_starts, model.sm.lengths)
    value = model.score(struct) + count.to(torch.float64) - model.score(model.truth)
    guard_overflow(value, (), 0, lambda: None, "the loss-augmented value", "the potentials")  # +inf, NaN
    value = cast_checked(value, dtype, "the loss-augmented value", "the potentials")
    return value, found_labels, found_starts, count


def _fuses(sm: SemiMarkov, h: HLike, rescaling: str, weights: Tensor | None, algorithm: str) -> bool:
    """Whether the backend's kernels run the whole search (``semimarkov._ops.OPTIONAL``): margin
    rescaling of the unweighted Hamming loss with h the identity, on a non-empty batch of
    non-empty sequences (every other case, and every bad loss argument, takes ``solve``)."""
    B, T, _, _ = sm.shape
    plain = h is None and weights is None and rescaling == "margin" and algorithm in ("auto", "viterbi")
    return plain and B > 0 and T > 0 and _semimarkov_ops.has_kernel(sm, "loss_augmented")


def _fused(sm: SemiMarkov, labels: Tensor, starts: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """:func:`loss_augmented_semimarkov` by the backend's kernels (the target's score, then the
    Viterbi with the Hamming loss folded into the content and the tie rule): nothing read on the
    host, a constant number of device ops."""
    value, found, found_starts, count, gold = _semimarkov_ops.loss_augmented(sm, labels, starts)
    return _checked_value(value, gold, sm.content.dtype), found, found_starts, count


def _weights_fuse(sm: SemiMarkov, h: HLike, rescaling: str, algorithm: str) -> bool:
    """Whether the backend's kernels run the search of the weighted position loss
    (:func:`_fused_weights`): a non-empty batch of non-empty sequences on a backend in ``FUSED``
    and loss arguments :func:`~structtorch.lossaug.chain._fusable` takes."""
    B, T, _, _ = sm.shape
    return B > 0 and T > 0 and _semimarkov_ops.backend_of(sm) in FUSED and _fusable(h, rescaling, algorithm)


def _fused_weights(sm: SemiMarkov, labels: Tensor, starts: Tensor, h: HLike, rescaling: str, weights: Tensor,
                   algorithm: str, max_count: int | None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """:func:`loss_augmented_semimarkov` of the position loss weighted by ``weights`` in the
    backend's kernels: margin rescaling with h=None folds the weights into the Viterbi (real
    weights too); any other loss runs the count table over the integer weights (sized by
    ``max_count`` without a host read, see :func:`~structtorch.lossaug.spec.resolve_loss`)."""
    B, T, _, _ = sm.shape
    mask = torch.arange(T, device=labels.device) < sm.lengths[:, None]
    spec = resolve_loss(h, rescaling, weights, None, labels, mask, sm.content, algorithm, max_count=max_count)
    if spec.htab is None:  # margin rescaling, h the identity: folded
        value, found, found_starts, count, gold = _semimarkov_ops.loss_augmented(sm, labels, starts,
                                                                                  spec.weights)
        return _checked_value(value, gold, sm.content.dtype), found, found_starts, count
    module = kernel_module(FUSED[0], __package__)
    search = functools.partial(module.semimarkov_table_search, kind="hamming", K=spec.K,
                               margin=rescaling == "margin", htab=spec.htab, weights=spec.weights,
                               min_table=not spec.nonnegative)
    value, found, found_starts, count, _, gold = _semimarkov_ops.loss_augmented_table(sm, labels, starts,
                                                                                      search)
    if spec.scale != 1:  # counts in units of 1/scale
        count = count.double() / spec.scale
    return _checked_value(value, gold, sm.content.dtype), found, found_starts, count


def _table_fuses(sm: SemiMarkov, h: HLike, rescaling: str, weights: Tensor | None, algorithm: str,
                 loss: str) -> bool:
    """Whether the backend's kernels run the whole search through the count table
    (:func:`_fused_table`): any h and both rescalings for the unweighted position loss, and for the
    segment losses h None or a callable (a tensor h has the data's bound as its length), on a
    non-empty batch of non-empty sequences on a backend in ``FUSED``. Margin rescaling of the
    boundary and segment losses with h the identity takes the table there too (a constant number
    of device ops; elsewhere it folds into the potentials, :func:`_folded`), unless
    ``algorithm="viterbi"`` asks for the fold."""
    B, T, _, _ = sm.shape
    if weights is not None or B == 0 or T == 0 or _semimarkov_ops.backend_of(sm) not in FUSED:
        return False
    if loss != "hamming" and isinstance(h, Tensor):
        return False
    return _fusable(h, rescaling, algorithm) and algorithm != "viterbi"


def _folds(h: HLike, rescaling: str, weights: Tensor | None, algorithm: str, loss: str) -> bool:
    """Whether the boundary or segment loss folds into the potentials (:func:`_folded`)."""
    plain = h is None and weights is None and rescaling == "margin" and algorithm in ("auto", "viterbi")
    return plain and loss in ("boundary", "segment")


def _fused_table(sm: SemiMarkov, labels: Tensor, starts: Tensor, h: HLike, rescaling: str,
                 loss: str) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """:func:`loss_augmented_semimarkov` through the count table in the backend's kernels (see
    ``lossaug/_triton.py``): nothing read on the host, a constant number of device ops. The table
    runs to a bound known without reading the target: K = T for the position and boundary losses,
    2 T for the segment losses (the target has at most T segments)."""
    B, T, _, _ = sm.shape
    K = T if loss in ("hamming", "boundary") else 2 * T
    htab = None if h is None and loss != "zero_one" else h_table(h, K, B, sm.content,
                                                                 "T+1" if loss == "hamming" else "K+1")
    if loss == "zero_one":  # h of the count capped at 1
        htab = htab[:, (torch.arange(K + 1, device=labels.device) > 0).long()]
    module = kernel_module(FUSED[0], __package__)
    kind = "segment" if loss == "zero_one" else loss
    search = functools.partial(module.semimarkov_table_search, kind=kind, K=K, margin=rescaling == "margin",
                               htab=htab)
    value, found, found_starts, count, _, gold = _semimarkov_ops.loss_augmented_table(sm, labels, starts,
                                                                                      search)
    if loss == "zero_one":
        count = count.clamp(max=1)
    return _checked_value(value, gold, sm.content.dtype), found, found_starts, count
