"""The generic search of loss-augmented inference and the structures it runs on.

A structure (a linear chain, an order-l window chain, a segmentation) adapts itself to one search
(:func:`search`): its score, its per-position labels, the folded Viterbi for losses that decompose
over positions, and the Hamming-count tables of Bauer et al. (2014, Algorithm 1) for any other
loss. Segmentations travel as one (B, T) tensor: label + N * (1 where a segment starts), -1 beyond
each length. The search reads values (checks, the table's feasible counts), so it runs inside one
operator per structure (:mod:`structtorch.lossaug._ops`).
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import Tensor

from .._backend import kernel_module
from .._checks import check_target_score, on_host
from .._numerics import NEG_INF, accumulate
from ..chain import _ops as _chain_ops
from ..chain.layout import labeling_score
from ..chain.window import _window_path, _window_score
from ..semimarkov import _ops as _semimarkov_ops
from ..semimarkov.layout import SemiMarkov, semimarkov_score
from ..semimarkov.plif import SegmentPLiF
from ..semimarkov.segments import viterbi_semimarkov
from ._torch import (
    SegmentCounts,
    Tables,
    chain_to_windows,
    negate_scores,
    semimarkov_tables,
    unit_terms,
    window_tables,
)
from .spec import LossSpec

FOLD_ELEMENTS = 1 << 24
"""About the most entries of the (rows, T, S, N) segment bonus that the folded segment loss builds at
once (whole batch rows; 128 MiB in float64)."""


def encode(labels: Tensor, starts: Tensor, N: int) -> Tensor:
    """A segmentation (labels, starts) (B, T) as one (B, T) tensor: label + N * start, -1 outside."""
    return torch.where(labels >= 0, labels + N * starts.long(), -1)


def decode(struct: Tensor, N: int) -> tuple[Tensor, Tensor]:
    """The inverse of :func:`encode`: (labels (B, T), -1 outside; starts (B, T) bool)."""
    inside = struct >= 0
    return torch.where(inside, struct % N, -1), inside & (struct >= N)


class _Structure(Protocol):
    """What the solver needs from a model. A structure is a (B, T) int64 tensor, -1 beyond each
    length (a label sequence for chains; segmentations encode label + N * is_start). The search
    runs inside the operator ``structtorch::<operator>`` (see ``_ops.py``), which rebuilds the model
    from ``arguments()`` (and the target)."""

    truth: Tensor  # the target's structure
    operator: str

    def arguments(self) -> tuple: ...

    def labels(self, struct: Tensor) -> Tensor: ...

    def score(self, struct: Tensor) -> Tensor: ...

    def count(self, spec: LossSpec, struct: Tensor, target: Tensor) -> Tensor: ...

    def delta(self, spec: LossSpec, struct: Tensor, target: Tensor, dtype: torch.dtype) -> Tensor: ...

    def fold_path(self, label_loss: Tensor, pair: Tensor | None) -> Tensor: ...

    def tables(self, spec: LossSpec, target: Tensor, negate: bool) -> Tables: ...


class _LabelStructure:
    """Structures that are label sequences (chains and order-l windows): the loss counts labels."""

    truth: Tensor

    def labels(self, struct: Tensor) -> Tensor:
        return struct

    def count(self, spec: LossSpec, struct: Tensor, target: Tensor) -> Tensor:
        """(B,) the loss's count of ``struct`` (returned to the caller)."""
        return spec.count(self.labels(struct), target)

    def delta(self, spec: LossSpec, struct: Tensor, target: Tensor, dtype: torch.dtype) -> Tensor:
        """(B,) Delta(target, struct), a constant w.r.t. the potentials."""
        return spec.loss(self.labels(struct), target, dtype)


class _ChainStructure(_LabelStructure):
    operator = "chain_loss_augmented"

    def __init__(self, chain, target: Tensor):
        self.chain, self.truth = chain, torch.where(chain.mask(), target, -1)

    def arguments(self) -> tuple:
        c = self.chain
        return c.unary, c.transitions, c.start, c.end, c.lengths

    def score(self, path: Tensor) -> Tensor:
        return labeling_score(self.chain, path.clamp(min=0))

    def fold_path(self, label_loss: Tensor, pair: Tensor | None) -> Tensor:
        c = self.chain.map(accumulate)  # the loss is added in double on CPU
        trans = c.transitions.detach()
        if pair is not None:  # costs of label pairs: per-position transitions
            trans = trans + pair.to(trans.dtype)
        shifted = type(c)(c.unary.detach() + label_loss.to(c.unary.dtype), trans, c.start.detach(),
                          c.end.detach(), c.lengths)
        return _chain_ops.viterbi(shifted)[1]

    def tables(self, spec: LossSpec, target: Tensor, negate: bool) -> Tables:
        c = self.chain
        parts = [accumulate(x.detach()) for x in (c.unary, c.transitions, c.start, c.end)]
        if negate:
            parts = [negate_scores(x) for x in parts]
        chain = type(c)(*parts, c.lengths)
        module = kernel_module(_chain_ops.backend_of(chain), __package__)
        if module is not None and spec.hamming:  # the table's kernel on the chosen backend
            return module.chain_tables(chain, target, spec.weights, spec.K)
        N = c.shape[2]
        return window_tables(chain_to_windows(chain), spec.units(target, N), spec.pair, c.lengths, spec.K, 1)


class _WindowStructure(_LabelStructure):
    operator = "window_loss_augmented"

    def __init__(self, scores: Tensor, order: int, N: int, lengths: Tensor, target: Tensor):
        self.scores, self.order, self.N, self.lengths = scores, order, N, lengths
        inside = torch.arange(target.shape[1], device=target.device) < lengths[:, None]
        self.truth = torch.where(inside, target, -1)

    def arguments(self) -> tuple:
        return self.scores, self.lengths

    def flat(self, scores: Tensor) -> Tensor:
        B, T = scores.shape[:2]
        if self.order == 0:
            return scores.unsqueeze(2).expand(B, T, self.N, self.N)
        return scores.reshape(B, T, self.N**self.order, self.N)

    def score(self, path: Tensor) -> Tensor:
        return _window_score(self.scores, path, self.lengths, exact=True)

    def fold_path(self, label_loss: Tensor, pair: Tensor | None) -> Tensor:
        shape = label_loss.shape[:2] + (1,) * self.order + (self.N,)
        scores = accumulate(self.scores.detach())
        shifted = scores + label_loss.to(scores.dtype).view(shape)
        if pair is not None:
            shifted = shifted + self.pair_scores(pair).to(scores.dtype)
        return _window_path(self.flat(shifted), self.lengths, max(self.order, 1), self.N)

    def pair_scores(self, pair: Tensor) -> Tensor:
        """Pair costs (B, T-1, N, N) as window scores (B, T) + (N,) * (l + 1): on the two newest
        labels of each window from t = 1 on (order 0 has no pairs: refused by the caller)."""
        B, T = self.scores.shape[:2]
        out = pair.new_zeros(B, T, *(1,) * (self.order - 1), self.N, self.N)
        out[:, 1:] = pair.view(B, T - 1, *(1,) * (self.order - 1), self.N, self.N)
        return out

    def tables(self, spec: LossSpec, target: Tensor, negate: bool) -> Tables:
        scores = self.scores.detach()
        scores = negate_scores(scores) if negate else scores
        return window_tables(self.flat(scores), spec.units(target, self.N), spec.pair, self.lengths, spec.K,
                             max(self.order, 1))


def _table_path(model: _Structure, spec: LossSpec, target: Tensor, gold: Tensor) -> Tensor:
    """The maximizing labeling through the Hamming tables (max table, and min table where a
    slack-rescaled h is negative)."""
    htab = spec.htab
    top = model.tables(spec, target, negate=False)
    feasible = top.best > NEG_INF
    if spec.rescaling == "margin":
        cand = torch.where(feasible, top.best + htab, NEG_INF)
        return top.backtrack(cand.argmax(1))
    g = gold.detach().double().unsqueeze(1)
    cand = torch.where(feasible, htab * (1 + top.best - g), NEG_INF)
    low = None
    if not spec.nonnegative and (not on_host(htab) or bool((feasible & (htab < 0)).any())):
        low = model.tables(spec, target, negate=True)
        low_value = torch.where(low.best > NEG_INF, htab * (1 - low.best - g), NEG_INF)
        cand = torch.where(htab < 0, low_value, cand)
    k = cand.argmax(1)
    path = top.backtrack(k)
    if low is not None:
        use_low = htab.gather(1, k.unsqueeze(1)).squeeze(1) < 0
        path = torch.where(use_low.unsqueeze(1), low.backtrack(k), path)
    return path


def search(model: _Structure, spec: LossSpec, target: Tensor, N: int, algorithm: str, gold: Tensor) -> Tensor:
    """The most violating structure (B, T) for the target's (detached) score ``gold`` (B,); the
    target itself where it attains the maximum. Reads values (the checks, the table's feasible
    counts): it runs inside the model's operator (``_ops.py``; torch.compile sees its output's
    shape only)."""
    spec = spec.resolved()
    check_target_score(gold)
    folded_costs = not spec.hamming and spec.htab is None  # real costs, h=None
    foldable = spec.rescaling == "margin" and (folded_costs or spec.affine is not None)
    if algorithm == "viterbi" and not foldable:
        raise ValueError("algorithm='viterbi' needs margin rescaling with an affine h or a cost")
    with torch.no_grad():
        if foldable and algorithm != "hamming":
            struct = model.fold_path(spec.label_loss(target, N), spec.pair)
        else:
            struct = _table_path(model, spec, target, gold)
        # ties: prefer the target itself (a zero subgradient) whenever it attains the maximum
        values = (_value(model, spec, target, x, gold) for x in (model.truth, struct))
        keep_target = next(values) >= next(values)
    return torch.where(keep_target.unsqueeze(1), model.truth, struct)


def _value(model: _Structure, spec: LossSpec, target: Tensor, struct: Tensor, gold: Tensor) -> Tensor:
    """(B,) the loss-augmented value of ``struct``, in the accumulation precision."""
    found = model.score(struct)  # rounded to the input dtype once, by the caller
    delta = model.delta(spec, struct, target, found.dtype)
    return found + delta - gold if spec.rescaling == "margin" else delta * (1 + found - gold)


SEMIMARKOV_TABLES = ("compiled",)
"""The backends whose lossaug module has ``semimarkov_tables`` (elsewhere the PyTorch loop runs)."""


class _SemiMarkovStructure(_LabelStructure):
    """Segmentations: the position Hamming loss counts labels (as for chains); the segment losses
    (``spec.kind``, see ``_torch.SegmentCounts``) count segments or boundaries."""

    operator = "semimarkov_loss_augmented"

    def __init__(self, sm: SemiMarkov, labels: Tensor, starts: Tensor, mask: Tensor):
        self.sm, self.N, self.starts = sm, sm.shape[3], starts
        self.truth = torch.where(mask, encode(labels, starts, self.N), -1)
        self._segments: dict[str, SegmentCounts] = {}

    def segments(self, kind: str) -> SegmentCounts:
        """The target's :class:`SegmentCounts` for a segment loss ``kind``."""
        if kind not in self._segments:
            labels, starts = decode(self.truth, self.N)
            self._segments[kind] = SegmentCounts(kind, labels, starts, self.sm.lengths, self.N)
        return self._segments[kind]

    def bound(self, kind: str) -> int:
        """The largest count of the segment loss ``kind`` (the table's K)."""
        return self.segments(kind).bound(self.sm.lengths)

    def _raw(self, spec: LossSpec, struct: Tensor) -> Tensor:
        labels, starts = decode(struct, self.N)
        return self.segments(spec.kind).count(labels, starts, self.sm.lengths)

    def count(self, spec: LossSpec, struct: Tensor, target: Tensor) -> Tensor:
        if spec.kind == "hamming":
            return super().count(spec, struct, target)
        return self._raw(spec, struct)

    def delta(self, spec: LossSpec, struct: Tensor, target: Tensor, dtype: torch.dtype) -> Tensor:
        if spec.kind == "hamming":
            return super().delta(spec, struct, target, dtype)
        return spec.loss_of(self._raw(spec, struct), dtype)

    def arguments(self) -> tuple:
        sm, p = self.sm, self.sm.segment_plif
        plif = (None, None, 0.0, 0.0) if p is None else (p.tracks, p.ordinates, p.low, p.high)
        return (sm.content, sm.transitions, sm.length_scores, sm.boundary, sm.segment_scores, sm.start,
                sm.end, sm.lengths, *plif, self.starts)

    def labels(self, struct: Tensor) -> Tensor:
        return decode(struct, self.N)[0]

    def score(self, struct: Tensor) -> Tensor:
        labels, starts = decode(struct, self.N)
        return semimarkov_score(self.sm, labels, starts)

    def fold_path(self, label_loss: Tensor, pair: Tensor | None) -> Tensor:
        sm = self.sm.detached().map(accumulate)  # the loss is added in double on CPU
        return self._viterbi(sm.replace(content=sm.content + label_loss.to(sm.content.dtype)))

    def fold(self, kind: str) -> Tensor:
        """The best segmentation under margin rescaling (h the identity) of the segment loss
        ``kind``, "boundary" or "segment", folded into the potentials: one Viterbi, O(T S N).

        - "boundary": a bonus of 1 - 2 [t + 1 is a target start] on the boundary score of every
          segment ending at t (t + 1 inside the length);
        - "segment": a bonus of 1 - 2 [(s, e, n) is a target segment] on every segment, through
          ``segment_scores`` (B, T, S, N), built for about ``FOLD_ELEMENTS`` entries (whole rows)
          at a time.
        """
        sm = self.sm.detached().map(accumulate)
        if kind == "boundary":
            starts = self.segments("boundary").starts  # (B, T + 1), False beyond each length
            T = sm.shape[1]
            inside = torch.arange(1, T + 1, device=starts.device) < sm.lengths[:, None]
            bonus = torch.where(inside, 1.0 - 2.0 * starts[:, 1:].to(sm.boundary.dtype), 0.0)
            return self._viterbi(sm.replace(boundary=sm.boundary + bonus.unsqueeze(2)))
        B, T, S, N = sm.shape
        rows = max(1, FOLD_ELEMENTS // max(T * S * N, 1))
        parts = [self._viterbi(self._segment_bonus(sm.rows(chunk), chunk))
                 for chunk in torch.arange(B, device=sm.lengths.device).split(rows)]
        return torch.cat(parts) if parts else self.truth.clone()

    def _segment_bonus(self, sm: SemiMarkov, rows: Tensor) -> SemiMarkov:
        """``sm`` (the batch rows ``rows``) with 1 - 2 [a target segment] added to every segment."""
        B, T, S, N = sm.shape
        counts = self.segments("segment")
        s = torch.arange(T, device=rows.device)
        e = counts.ends[rows, :T]  # (B, T): the end of the target segment starting at s
        found = counts.starts[rows, :T]  # a target segment starts at s (none is longer than S)
        flat = ((torch.arange(B, device=rows.device)[:, None] * T + (e - 1).clamp(min=0)) * S
                + (e - s - 1).clamp(0, S - 1)) * N + counts.labels[rows, :T]
        bonus = torch.ones(B * T * S * N, dtype=sm.content.dtype, device=sm.content.device)
        bonus.index_add_(0, flat.reshape(-1), -2.0 * found.reshape(-1).to(bonus.dtype))  # no host sync
        bonus = bonus.view(B, T, S, N)
        segment = bonus if sm.segment_scores is None else sm.segment_scores + bonus
        return sm.replace(segment_scores=segment)

    def _viterbi(self, sm: SemiMarkov) -> Tensor:
        """The Viterbi segmentation of ``sm`` (validated potentials and finite bonuses), encoded."""
        _, labels, found = viterbi_semimarkov(sm)
        return encode(labels, found, self.N)

    def tables(self, spec: LossSpec, target: Tensor, negate: bool) -> Tables:
        sm = self.sm.detached()
        if negate:
            plif = sm.segment_plif
            if plif is not None:
                plif = SegmentPLiF(plif.tracks, -plif.ordinates, plif.low, plif.high)
            parts = [sm.content, sm.transitions, sm.length_scores, sm.boundary, sm.segment_scores,
                     sm.start, sm.end]
            sm = SemiMarkov(*(None if x is None else negate_scores(x) for x in parts), sm.lengths, plif)
        if spec.kind == "hamming":
            terms, offset = unit_terms(spec.units(target, self.N)), sm.lengths.new_zeros(sm.shape[0])
        else:
            counts = self.segments(spec.kind)
            terms, offset = counts.terms, counts.offset
        backend = _semimarkov_ops.backend_of(sm)
        if backend in SEMIMARKOV_TABLES:
            return kernel_module(backend, __package__).semimarkov_tables(sm, terms, offset, spec.K)
        return semimarkov_tables(sm, terms, offset, spec.K)
