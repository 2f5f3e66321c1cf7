"""The hidden semi-Markov SVM of Rätsch & Sonnenburg (2007): PLiF-transformed sensors on segments.

Segments carry labels (for gene structure: intergenic, four exon types, intron) and follow an
allowed-transition grammar. Their scores come from precomputed sensor tracks, so any model,
neural or not, can produce them:

* signal detectors at segment ends: a segment of label n ending at e scores
  ``PLiF^sig_n(signals[b, e-1, signal_of[n]])``; a -inf signal forbids a segment end there;
* content sensors over whole segments (eq. 7): ``PLiF^con_n(mean(contents[b, s:e, content_of[n]]))``;
* segment lengths per label, i.e. per transition type of the grammar (eq. 8): ``PLiF^len_n(e - s)``;
* a learnable bias per allowed transition;
* optionally (``content_sums``) a learnable weight on the content track summed over the segment.

The score is linear in the PLiF ordinates and the transition biases, <w, Psi(x, y)>, with Psi
built from hat functions of the sensor values (:meth:`HiddenSemiMarkovSVM.feature_map`). Decoding
and loss-augmented decoding run the semi-Markov DPs with the segment means accumulated inside the
DP (memory O(B T N)); training rescores the chosen segmentation with autograd (Danskin).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from .._checks import LengthsLike, _fmt, check_finite, check_float, check_lengths
from .._library import NotScriptable
from .._numerics import NEG_INF
from .._precision import mixed_precision
from ..lossaug.semimarkov import check_target
from ..lossaug.spec import HLike
from ..losses import structured_hinge
from ..semimarkov.layout import check_semimarkov, segment_layout, semimarkov_score
from ..semimarkov.plif import SegmentPLiF, plif_basis
from ..semimarkov.segments import semimarkov_viterbi
from .features import PLiF

__all__ = ["HiddenSemiMarkovSVM"]


def _label_map(of: Sequence[int] | None, N: int, name: str) -> list[int]:
    of = [-1] * N if of is None else [int(k) for k in of]
    if len(of) != N:
        raise ValueError(f"{name} must give one index per label (N = {N}), got {len(of)}")
    if any(k < -1 for k in of):
        raise ValueError(f"{name} entries must be track indices >= 0 or -1 (none), got {of}")
    return of


def _mask(labels: Sequence[int] | None, N: int, name: str) -> Tensor:
    mask = torch.zeros(N, dtype=torch.bool)
    if labels is None:
        return ~mask
    if len(labels) == 0:
        raise ValueError(f"{name} must hold at least one label (None allows all)")
    for n in labels:
        if not 0 <= int(n) < N:
            raise ValueError(f"{name} must hold labels in [0, {N}), got {n}")
        mask[int(n)] = True
    return mask


class HiddenSemiMarkovSVM(NotScriptable, nn.Module):
    """Hidden semi-Markov SVM with PLiF transforms of signal, content and length features.

    Parameters
    ----------
    allowed : Tensor (N, N) bool
        ``allowed[m, n]``: a segment of label m may be followed by one of label n.
    max_len : int
        S, the longest segment.
    signal_of : sequence of N ints, optional
        For each label, the signal track (index into ``signals``'s last dimension) scored at the
        end of its segments, or -1 for none.
    content_of : sequence of N ints, optional
        For each label, the content track whose segment mean is scored, or -1 for none.
    start_labels, end_labels : sequence of ints, optional
        Labels the first / last segment may take (default: any).
    num_points : int
        P, support points per PLiF (the paper uses 30).
    signal_range, content_range : (float, float)
        Support intervals of the sensor PLiFs (the paper: (-5, 5)).
    length_range : (float, float), optional
        Support interval of the length PLiFs (default (1, max_len)).
    monotone : {"increasing", None}
        Constraint on the sensor PLiFs (the paper constrains them to be increasing).
    content_sums : bool
        Also score ``a_n * sum(contents[b, s:e, content_of[n]])`` with a learnable weight per
        label: the per-position evidence of an HMM-like content model, which grows with the
        segment length where the PLiF of the mean does not (an extension of the paper's model).

    Shapes: ``signals`` (B, T, Ks) and ``contents`` (B, T, Kc) float; labels (B, T) int64;
    starts (B, T) bool; lengths (B,).
    """

    allowed: Tensor
    start_mask: Tensor
    end_mask: Tensor

    def __init__(
        self,
        allowed: Tensor,
        max_len: int,
        *,
        signal_of: Sequence[int] | None = None,
        content_of: Sequence[int] | None = None,
        start_labels: Sequence[int] | None = None,
        end_labels: Sequence[int] | None = None,
        num_points: int = 30,
        signal_range: tuple[float, float] = (-5.0, 5.0),
        content_range: tuple[float, float] = (-5.0, 5.0),
        length_range: tuple[float, float] | None = None,
        monotone: str | None = "increasing",
        content_sums: bool = False,
    ) -> None:
        super().__init__()
        if not isinstance(allowed, Tensor) or allowed.dtype != torch.bool or allowed.dim() != 2 or (
                allowed.shape[0] != allowed.shape[1]):
            raise TypeError("allowed must be a bool tensor of shape (N, N)")
        if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 1:
            raise ValueError(f"max_len must be an int >= 1, got {max_len!r}")
        N = allowed.shape[0]
        self.max_len, self.num_labels = max_len, N
        self.signal_of = _label_map(signal_of, N, "signal_of")
        self.content_of = _label_map(content_of, N, "content_of")
        self.register_buffer("allowed", allowed.clone())
        self.register_buffer("start_mask", _mask(start_labels, N, "start_labels"))
        self.register_buffer("end_mask", _mask(end_labels, N, "end_labels"))
        self.transition_bias = nn.Parameter(torch.zeros(N, N))
        self.signal_labels = [n for n in range(N) if self.signal_of[n] >= 0]
        self.content_labels = [n for n in range(N) if self.content_of[n] >= 0]
        self.signal_plif = PLiF(num_points, *signal_range, num_functions=len(self.signal_labels),
                                monotone=monotone) if self.signal_labels else None
        self.content_plif = PLiF(num_points, *content_range, num_functions=len(self.content_labels),
                                 monotone=monotone) if self.content_labels else None
        low, high = length_range if length_range is not None else (1.0, float(max(max_len, 2)))
        self.length_plif = PLiF(num_points, low, high, num_functions=N)
        self.content_weight = nn.Parameter(torch.zeros(len(self.content_labels))) if (
            content_sums and self.content_labels) else None

    def extra_repr(self) -> str:
        return f"num_labels={self.num_labels}, max_len={self.max_len}"

    # ----------------------------------------------------------------------------------------
    def _check(self, signals: Tensor | None, contents: Tensor | None, lengths: LengthsLike):
        def track(name, x, used):
            K = max(used, default=-1) + 1
            if x is None:
                if K:
                    raise ValueError(f"{name} is needed: labels use {name} track {K - 1}")
                return None
            x = check_float(name, x)
            if x.dim() != 3 or x.shape[2] < K:
                raise ValueError(f"{name} must have shape (B, T, K) with K >= {K}, got {_fmt(x.shape)}")
            return x

        signals = track("signals", signals, self.signal_of)
        contents = track("contents", contents, self.content_of)
        if signals is not None and contents is not None:
            check_float("contents", contents, signals, "signals")
        ref = signals if signals is not None else contents
        if ref is None:
            raise ValueError("need signals or contents of shape (B, T, K) to know B and T")
        if signals is not None and contents is not None and signals.shape[:2] != contents.shape[:2]:
            raise ValueError(f"signals and contents must share (B, T), got {_fmt(signals.shape)} and "
                             f"{_fmt(contents.shape)}")
        if contents is not None:
            check_finite("contents", contents)
        B, T = ref.shape[:2]
        return signals, contents, ref, check_lengths(lengths, B, T, ref.device)

    @mixed_precision
    def forward(self, signals: Tensor | None, contents: Tensor | None, lengths: LengthsLike = None) -> dict:
        """Semi-Markov potentials as keyword arguments of :func:`structtorch.semimarkov_viterbi`
        (and of the log-partition, loss-augmented and hinge functions): ``content`` (B, T, N)
        zeros, ``transitions`` (N, N) (-inf where the grammar forbids), ``max_len``,
        ``length_scores`` (S, N), ``boundary`` (B, T, N), ``start``/``end`` (N,),
        ``segment_plif`` and ``lengths``."""
        signals, contents, ref, lengths = self._check(signals, contents, lengths)
        B, T = ref.shape[:2]
        N, dtype = self.num_labels, ref.dtype
        neg = ref.new_full((), NEG_INF)
        boundary = ref.new_zeros(B, T, N)
        if self.signal_plif is not None:
            values = signals[:, :, [self.signal_of[n] for n in self.signal_labels]]
            scored = self.signal_plif(values).to(dtype)
            boundary[:, :, self.signal_labels] = torch.where(values == NEG_INF, neg, scored)
        plif = None
        if self.content_plif is not None:
            ordinates = ref.new_zeros(N, self.content_plif.support.numel())
            ordinates[self.content_labels] = self.content_plif.ordinates.to(dtype)
            index = [max(k, 0) for k in self.content_of]
            tracks = contents[:, :, index] * torch.tensor(
                [k >= 0 for k in self.content_of], dtype=dtype, device=ref.device)
            plif = SegmentPLiF(tracks, ordinates, self.content_plif.low, self.content_plif.high)
        content = ref.new_zeros(B, T, N)
        if self.content_weight is not None:
            used = contents[:, :, [self.content_of[n] for n in self.content_labels]]
            content[:, :, self.content_labels] = used * self.content_weight.to(dtype)
        d = torch.arange(1, self.max_len + 1, dtype=dtype, device=ref.device)
        length_scores = self.length_plif(d.unsqueeze(1).expand(-1, N)).to(dtype)
        zero = ref.new_zeros(N)
        return {
            "content": content,
            "transitions": torch.where(self.allowed, self.transition_bias.to(dtype), neg),
            "max_len": self.max_len,
            "length_scores": length_scores,
            "boundary": boundary,
            "start": torch.where(self.start_mask, zero, neg),
            "end": torch.where(self.end_mask, zero, neg),
            "segment_plif": plif,
            "lengths": lengths,
        }

    @mixed_precision
    def decode(self, signals: Tensor | None, contents: Tensor | None,
               lengths: LengthsLike = None) -> tuple[Tensor, Tensor, Tensor]:
        """(score (B,), labels (B, T), starts (B, T)) of the best segmentation."""
        return semimarkov_viterbi(**self(signals, contents, lengths))

    @mixed_precision
    def score(self, signals: Tensor | None, contents: Tensor | None, labels: Tensor, starts: Tensor,
              lengths: LengthsLike = None) -> Tensor:
        """(B,) score of the given segmentations, checked like a hinge target: labels in range,
        segments no longer than max_len, and feasible (grammar, start/end labels, no -inf signal
        at a segment end), else a ValueError."""
        sm = check_semimarkov(segment_scores=None, **self(signals, contents, lengths))
        labels, starts = check_target(labels, starts, sm)
        score = semimarkov_score(sm, labels, starts).to(sm.content.dtype)
        if bool((score == NEG_INF).any()):
            b = int((score == NEG_INF).nonzero()[0])
            raise ValueError(f"the segmentation of row {b} is infeasible: a transition the grammar forbids, "
                             "a start/end label not allowed, or a -inf signal at a segment end")
        return score

    @mixed_precision
    def loss(self, signals: Tensor | None, contents: Tensor | None, target_labels: Tensor,
             target_starts: Tensor, lengths: LengthsLike = None, *, rescaling: str = "margin",
             h: HLike = None, weights: Tensor | None = None, reduction: str = "mean") -> Tensor:
        """Structured hinge loss (see :func:`structtorch.structured_hinge`) of the target
        segmentations under the (``weights``-weighted) position Hamming loss. Margin rescaling
        with h=None costs one Viterbi pass; slack rescaling, or another h, runs the Hamming-count
        table (O(T^2 S N) time per sequence: only for short sequences)."""
        pot = self(signals, contents, lengths)
        return structured_hinge(pot.pop("content"), pot.pop("transitions"), target_labels,
                                target_starts=target_starts, rescaling=rescaling, h=h, weights=weights,
                                reduction=reduction, **pot)

    def smoothness(self) -> Tensor:
        """The paper's smoothness regularizer summed over all PLiFs."""
        plifs = [p for p in (self.signal_plif, self.content_plif, self.length_plif) if p is not None]
        return sum(p.smoothness() for p in plifs)

    # ----------------------------------------------------------------------------------------
    def weights(self) -> Tensor:
        """w (D,): the transition biases of allowed transitions, the ordinates of the signal,
        content and length PLiFs, then the content-sum weights, so that
        score = <w, feature_map(...)>."""
        parts = [self.transition_bias[self.allowed]]
        parts += [p.ordinates.reshape(-1) for p in (self.signal_plif, self.content_plif, self.length_plif)
                  if p is not None]
        if self.content_weight is not None:
            parts.append(self.content_weight)
        return torch.cat(parts)

    @mixed_precision
    def feature_map(self, signals: Tensor | None, contents: Tensor | None, labels: Tensor, starts: Tensor,
                    lengths: LengthsLike = None) -> Tensor:
        """Psi(x, y) (B, D) of eqs. 7 and 8, built segment by segment from hat functions, in the
        dtype of :meth:`weights`; the segmentation is validated as by :meth:`score`."""
        with torch.no_grad():
            self.score(signals, contents, labels, starts, lengths)
        signals, contents, ref, lengths = self._check(signals, contents, lengths)
        B, T = ref.shape[:2]
        N, S = self.num_labels, self.max_len
        lay = segment_layout(labels, starts, lengths)
        t, inside, lab, starts, ends = lay.t, lay.inside, lay.labels, lay.starts, lay.ends
        d = lay.length.to(ref.dtype)
        onehot = nn.functional.one_hot(lab, N).to(ref.dtype) * ends.unsqueeze(2).to(ref.dtype)  # (B, T, N)
        prev = torch.cat([lab[:, :1], lab[:, :-1]], 1)
        moves = starts & (t > 0)
        trans = torch.zeros(B, N * N, dtype=ref.dtype, device=ref.device)
        trans.scatter_add_(1, prev * N + lab, moves.to(ref.dtype))
        parts = [trans.view(B, N, N)[:, self.allowed]]

        def plif_features(plif: PLiF, x: Tensor, used: list[int]) -> Tensor:  # x (B, T, N)
            phi = plif_basis(x, plif.support.numel(), plif.low, plif.high)
            return torch.einsum("btn,btnp->bnp", onehot[:, :, used], phi[:, :, used]).reshape(B, -1)

        if self.signal_plif is not None:
            values = signals[:, :, [max(k, 0) for k in self.signal_of]]
            parts.append(plif_features(self.signal_plif, values, self.signal_labels))
        if self.content_plif is not None:
            means = lay.means(contents[:, :, [max(k, 0) for k in self.content_of]])
            parts.append(plif_features(self.content_plif, means, self.content_labels))
        parts.append(plif_features(self.length_plif, d.unsqueeze(2).expand(B, T, N).clamp(max=S),
                                   list(range(N))))
        if self.content_weight is not None:
            per_label = nn.functional.one_hot(lab, N).to(ref.dtype) * inside.unsqueeze(2).to(ref.dtype)
            values = contents[:, :, [self.content_of[n] for n in self.content_labels]]
            parts.append((per_label[:, :, self.content_labels] * values).sum(1))
        return torch.cat(parts, 1).to(self.transition_bias.dtype)
