"""The loss of loss-augmented inference in canonical form (:class:`LossSpec`) and the checks of
its arguments (``h``, ``rescaling``, ``weights``, ``cost``, ``algorithm``): the type-and-checks
room of :mod:`structtorch.lossaug`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

import torch
from torch import Tensor

from .._checks import _fmt, check_finite, on_host

HLike = Callable[[Tensor], Tensor] | Tensor | None
RESCALINGS = ("margin", "slack")
ALGORITHMS = ("auto", "hamming", "viterbi")
MAX_COUNTS = 1_000_000  # largest Hamming-table count dimension accepted
MAX_SCALE = 1_000_000  # largest common denominator of real weights or costs turned into integers


@dataclass
class LossSpec:
    """The loss in canonical form: Delta(y, y') = h(count(y, y')) with

        count = sum_t unit_t(y'_t) + sum_t pair_t(y'_t, y'_{t+1}),

    unit the weighted Hamming indicator ``weights[t] * (y'_t != y_t)`` or a per-label ``cost``.

    weights : (B, T) int64 (integer mode) or float (real weights, margin with h=None only), 0
        beyond each length.
    htab : (B, K + 1) float64 table of h over counts 0..K (integer mode: the count is the
        table's extra dimension), else None (the loss is the count itself, folded into the scores).
    cost : (B, T, N) per-position label costs replacing the Hamming indicators, float64 (folded)
        or int64 (integer mode), 0 beyond each length; else None.
    pair : (B, T - 1, N, N) costs of label pairs (t, t + 1), float64 (folded) or int64 (integer
        mode), 0 where t + 1 is beyond the length; else None. Chains only.
    affine : (intercept (B,), slope (B,)) when the loss folds into unary scores, else None.
    affine_from_htab : whether ``affine`` is still to be read off ``htab`` (margin rescaling with
        a custom h on the host): a data-dependent test, done by :meth:`resolved` where the search
        runs. On a GPU (no host reads) a custom h takes the table, exact for any h.
    nonnegative : whether h is known to be non-negative (h = identity), so that slack rescaling
        needs no minimum table.
    scale : integer counts are the loss's counts times ``scale`` (real weights or costs that are
        integers after a common scale): the table runs over integers, h sees count / scale.
    kind : the loss of segmentations (``_torch.SEGMENT_LOSSES``): "hamming" counts positions (as
        for chains); the others count segments or boundaries (the structure counts them, see
        ``_torch.SegmentCounts``), always through the table.
    """

    rescaling: str
    weights: Tensor
    htab: Tensor | None
    cost: Tensor | None
    affine: tuple[Tensor, Tensor] | None
    affine_from_htab: bool = False
    nonnegative: bool = False
    pair: Tensor | None = None
    scale: float = 1.0
    kind: str = "hamming"

    def resolved(self) -> LossSpec:
        """The spec with ``affine`` decided."""
        if not self.affine_from_htab:
            return self
        return dataclasses.replace(self, affine=_affine(self.htab), affine_from_htab=False)

    @property
    def K(self) -> int:
        return self.htab.shape[1] - 1

    @property
    def hamming(self) -> bool:
        """Whether the loss counts (weighted) positions whose label differs (no cost, no pair)."""
        return self.cost is None and self.pair is None and self.kind == "hamming"

    def units(self, target: Tensor, N: int) -> Tensor:
        """(B, T, N) what label j at position t adds to the count."""
        if self.cost is not None:
            return self.cost
        if self.pair is not None:  # pair costs alone
            return target.new_zeros(*target.shape, N, dtype=self.pair.dtype)
        wrong = torch.arange(N, device=target.device) != target.unsqueeze(2)
        return self.weights.unsqueeze(2) * wrong

    def raw_count(self, path: Tensor, target: Tensor) -> Tensor:
        """(B,) the count of ``path`` (-1 beyond the lengths) in the table's units (integers in
        integer mode)."""
        inside = path >= 0
        if self.hamming:
            return (self.weights * (path != target) * inside).sum(1)
        labels = path.clamp(min=0)
        total = 0
        if self.cost is not None:
            picked = self.cost.gather(2, labels.unsqueeze(2)).squeeze(2)
            total = torch.where(inside, picked, 0).sum(1)
        if self.pair is not None and path.shape[1] > 1:
            N = self.pair.shape[-1]
            index = (labels[:, :-1] * N + labels[:, 1:]).unsqueeze(2)
            picked = self.pair.flatten(2).gather(2, index).squeeze(2)
            total = total + torch.where(inside[:, 1:], picked, 0).sum(1)
        if isinstance(total, int):
            total = path.new_zeros(path.shape[0], dtype=self.units_dtype)
        return total

    @property
    def units_dtype(self) -> torch.dtype:
        return next(x.dtype for x in (self.cost, self.pair, self.weights) if x is not None)

    def count(self, path: Tensor, target: Tensor) -> Tensor:
        """(B,) the loss's count of ``path`` (paths are -1 beyond lengths): the weighted Hamming
        distance (int64 for integer weights), or the sum of the costs (float64)."""
        raw = self.raw_count(path, target)
        if self.hamming and self.scale == 1.0:
            return raw  # int64 for integer weights
        return raw.double() / self.scale  # costs are real

    def loss(self, path: Tensor, target: Tensor, dtype: torch.dtype) -> Tensor:
        """(B,) Delta(y, path), a constant w.r.t. the potentials."""
        return self.loss_of(self.raw_count(path, target), dtype)

    def loss_of(self, raw: Tensor, dtype: torch.dtype) -> Tensor:
        """(B,) Delta for counts ``raw`` (B,) in the table's units."""
        if self.htab is None:  # real weights or costs, identity h
            return raw.to(dtype)
        return self.htab.gather(1, raw.long().unsqueeze(1)).squeeze(1).to(dtype)

    def label_loss(self, target: Tensor, N: int) -> Tensor:
        """(B, T, N) per-position loss of each label, for folding into the unary scores (the
        pair costs fold into the transitions)."""
        if not self.hamming:
            return self.units(target, N).double()
        return self.affine[1].view(-1, 1, 1) * self.weights.double().unsqueeze(2) * (
            torch.arange(N, device=target.device) != target.unsqueeze(2))


def _weights(weights: Tensor | None, mask: Tensor, ref: Tensor) -> tuple[Tensor, bool]:
    """(B, T) weights, 0 beyond each length, and whether they are non-negative integers.

    Integer weights come back as int64 whenever their row sums fit int64 (so counts stay exact
    integers); larger ones stay float64 so that no cast or sum can wrap around.
    """
    B, T = mask.shape
    if weights is None:
        return mask.long(), True
    if not isinstance(weights, Tensor):
        raise TypeError(f"weights must be a torch.Tensor of shape (B, T) = ({B}, {T})")
    if weights.shape != (B, T):
        raise ValueError(f"weights must have shape (B, T) = ({B}, {T}), got {_fmt(weights.shape)}")
    if weights.device != ref.device:
        raise ValueError(f"weights is on {weights.device} but unary is on {ref.device}; use one device")
    if weights.dtype == torch.bool or weights.dtype.is_complex:
        raise TypeError(f"weights must be an integer or floating tensor, got {weights.dtype}")
    if weights.dtype.is_floating_point:
        check_finite("weights", weights)
    w = torch.where(mask, weights, torch.zeros((), dtype=weights.dtype, device=weights.device))
    integral = bool((w == w.round()).all()) and bool((w >= 0).all())
    # row sums in float64 never wrap (rounded, but far from the int64 limit when they pass)
    fits = B == 0 or float(w.double().abs().sum(1).max()) < 2.0**62
    return (w.long() if integral and fits else w.double()), integral


def common_scale(values: Tensor) -> int | None:
    """The smallest integer s <= MAX_SCALE that makes every entry of ``values`` an integer
    (exactly, in their own dtype), or None. Reads the distinct values on the host."""
    scale = 1
    for v in torch.unique(values.detach()).tolist():
        f = Fraction(v).limit_denominator(MAX_SCALE)
        exact = torch.tensor(f.numerator / f.denominator, dtype=values.dtype)
        if exact != torch.tensor(v, dtype=values.dtype):
            return None
        scale = math.lcm(scale, f.denominator)
        if scale > MAX_SCALE:
            return None
    return scale


def integer_counts(values: Tensor, name: str) -> tuple[Tensor, int]:
    """(values * scale as int64, scale) for non-negative ``values`` that are integers after a
    common scale (:func:`common_scale`); a ValueError naming ``name`` otherwise."""
    if not values.dtype.is_floating_point:
        values = values.double()
    scale = common_scale(values) if bool((values >= 0).all()) else None
    if scale is None:
        raise ValueError(
            f"{name} must be non-negative integers, or integers after a common scale (a denominator of at "
            f"most {MAX_SCALE}), for slack rescaling, a custom h or algorithm='hamming' (real {name} work "
            "with rescaling='margin' and h=None)")
    return (values.double() * scale).round().long(), scale


def h_table(h: HLike, K: int, B: int, ref: Tensor, what: str, scale: float = 1.0) -> Tensor:
    """(B, K + 1) float64 table of h over the counts 0..K (in units of 1/``scale``), on ``ref``'s
    device, checked finite; a (K + 1,) table comes back expanded (row stride 0). ``what`` names
    the table's length in the messages ("T+1" or "K+1")."""
    counts = torch.arange(K + 1, dtype=torch.float64, device=ref.device)
    counts = counts if scale == 1.0 else counts / scale
    if isinstance(h, Tensor) and scale != 1.0:
        raise ValueError(f"h as a tensor indexes integer counts; the loss counts in units of 1/{scale:g} "
                         "here (real weights or costs), so pass h as a callable")
    if h is None:
        table = counts
    elif callable(h) and not isinstance(h, Tensor):
        try:
            table = h(counts)
            if not isinstance(table, Tensor):
                table = torch.as_tensor(table, dtype=torch.float64, device=ref.device)
        except (TypeError, ValueError, RuntimeError) as exc:
            raise TypeError(
                f"h must map a float64 tensor of counts 0..{K} elementwise to a tensor: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        if table.shape not in ((K + 1,), (B, K + 1)):
            raise ValueError(
                f"h must return a tensor of shape ({what},) = ({K + 1},) or (B, {what}) = "
                f"({B}, {K + 1}) for counts 0..{K}, got {_fmt(table.shape)}"
            )
    elif isinstance(h, Tensor):
        if not h.dtype.is_floating_point:
            raise TypeError(f"h must be a floating tensor, got {h.dtype}")
        if h.shape not in ((K + 1,), (B, K + 1)):
            raise ValueError(
                f"h must have shape ({what},) = ({K + 1},) or (B, {what}) = ({B}, {K + 1}), "
                f"got {_fmt(h.shape)}"
            )
        table = h.to(ref.device)
    else:
        raise TypeError(f"h must be None, a callable or a tensor, got {type(h).__name__}")
    table = table.detach().double()
    table = table if table.stride(-1) == 1 else table.contiguous()
    check_finite("h", table)  # (K+1,) or (B, K+1): the message indexes h as the caller gave it
    return table.expand(B, K + 1)


def _affine(htab: Tensor) -> tuple[Tensor, Tensor] | None:
    """(intercept, slope) per row when h is affine in the count, else None."""
    if htab.shape[1] < 2 or htab.shape[0] == 0:
        return htab[:, 0], torch.zeros_like(htab[:, 0])
    d = htab.diff(dim=1)
    scale = 1.0 + float(htab.abs().max())
    if bool(((d - d[:, :1]).abs() <= 1e-12 * scale).all()):
        return htab[:, 0], d[:, 0]
    return None


def _cost(cost: Tensor, target: Tensor, mask: Tensor, ref: Tensor) -> Tensor:
    """(B, T, N) float64 per-label costs, 0 beyond each length."""
    B, T = mask.shape
    N = ref.shape[-1]
    if not isinstance(cost, Tensor) or not cost.dtype.is_floating_point:
        raise TypeError("cost must be a floating tensor of shape (N, N) or (B, T, N)")
    check_finite("cost", cost)
    if cost.shape == (N, N):
        per_label = cost.to(ref.device)[target]
    elif cost.shape == (B, T, N):
        per_label = cost.to(ref.device)
    else:
        raise ValueError(
            f"cost must have shape (N, N) = ({N}, {N}) or (B, T, N) = ({B}, {T}, {N}), got {_fmt(cost.shape)}"
        )
    return torch.where(mask.unsqueeze(2), per_label.detach().double(), 0.0)


def _pair_cost(pair_cost: Tensor, mask: Tensor, ref: Tensor) -> Tensor:
    """(B, T - 1, N, N) float64 costs of label pairs, 0 where t + 1 is beyond the length."""
    B, T = mask.shape
    N = ref.shape[-1]
    shape = (B, max(T - 1, 0), N, N)
    if not isinstance(pair_cost, Tensor) or not pair_cost.dtype.is_floating_point:
        raise TypeError(f"pair_cost must be a floating tensor of shape (B, T-1, N, N) = {shape}")
    if pair_cost.shape != shape:
        raise ValueError(f"pair_cost must have shape (B, T-1, N, N) = {shape}, got {_fmt(pair_cost.shape)}")
    check_finite("pair_cost", pair_cost)
    return torch.where(mask[:, 1:, None, None], pair_cost.detach().to(ref.device).double(), 0.0)


def _cost_spec(h: HLike, rescaling: str, weights: Tensor | None, cost: Tensor | None,
               pair_cost: Tensor | None, target: Tensor, mask: Tensor, ref: Tensor,
               algorithm: str) -> LossSpec:
    """The spec of a loss given by per-label costs and/or costs of label pairs: folded into the
    scores for margin rescaling with h=None, else counted in the table (non-negative integers
    after a common scale)."""
    if weights is not None:
        raise ValueError("cost and pair_cost replace weights: pass weights=None")
    B, T = mask.shape
    unit = None if cost is None else _cost(cost, target, mask, ref)
    pair = None if pair_cost is None else _pair_cost(pair_cost, mask, ref)
    if rescaling == "margin" and h is None and algorithm != "hamming":
        return LossSpec(rescaling, mask.long(), None, unit, None, pair=pair)
    if algorithm == "viterbi":
        raise ValueError("algorithm='viterbi' needs margin rescaling with h=None")
    parts = torch.cat([x.reshape(-1) for x in (unit, pair) if x is not None])
    scaled, scale = integer_counts(parts, "cost" if pair is None else "pair_cost" if unit is None
                                   else "cost and pair_cost")
    n_unit = 0 if unit is None else unit.numel()
    unit = None if unit is None else scaled[:n_unit].view(unit.shape)
    pair = None if pair is None else scaled[n_unit:].view(pair.shape)
    top = 0
    if unit is not None:
        top = unit.amax(2).sum(1)
    if pair is not None:
        top = top + pair.flatten(2).amax(2).sum(1)
    K = int(top.max()) if B else 0
    if K + 1 > MAX_COUNTS:
        raise ValueError(f"the costs sum to K = {K} in some row (in units of 1/{scale}): the table would "
                         f"need K+1 counts (at most {MAX_COUNTS}); use smaller integer costs")
    htab = h_table(h, K, B, ref, "K+1", scale)
    # always the table (a cost is folded only with h=None, above): exact for any h
    return LossSpec(rescaling, mask.long(), htab, unit, None, nonnegative=h is None, pair=pair,
                    scale=float(scale))


def resolve_loss(h: HLike, rescaling: str, weights: Tensor | None, cost: Tensor | None,
                 target: Tensor, mask: Tensor, ref: Tensor, algorithm: str = "auto",
                 pair_cost: Tensor | None = None) -> LossSpec:
    """Validate the loss arguments and bring them into a :class:`LossSpec`."""
    if rescaling not in RESCALINGS:
        raise ValueError(f"rescaling must be 'margin' or 'slack', got {rescaling!r}")
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {ALGORITHMS}, got {algorithm!r}")
    B, T = mask.shape
    if cost is not None or pair_cost is not None:
        return _cost_spec(h, rescaling, weights, cost, pair_cost, target, mask, ref, algorithm)
    w, integral = _weights(weights, mask, ref)

    def identity_fold() -> tuple[Tensor, Tensor]:  # h = identity: intercept 0, slope 1
        ones = torch.ones(B, dtype=torch.float64, device=ref.device)
        return ones.new_zeros(()).expand(B), ones

    if rescaling == "margin" and h is None and algorithm != "hamming" and weights is not None:
        return LossSpec(rescaling, w, None, None, identity_fold())  # no count table needed
    scale = 1
    if not integral:
        w, scale = integer_counts(w, "weights")
    K = T if weights is None else (float(w.double().sum(1).max()) if B else 0)
    if K + 1 > MAX_COUNTS:
        raise ValueError(
            f"weights sum to K = {K:.6g} in some row{'' if scale == 1 else f' (in units of 1/{scale})'}: the "
            f"Hamming table would need K+1 counts (at most {MAX_COUNTS}); use smaller integer weights"
        )
    K = int(K)
    htab = h_table(h, K, B, ref, "T+1" if weights is None else "K+1", scale)
    if h is None:  # the identity: affine and non-negative, known without reading the table
        fold = identity_fold() if rescaling == "margin" else None
        if fold is not None and scale != 1:
            fold = (fold[0], fold[1] / scale)
        return LossSpec(rescaling, w, htab, None, fold, nonnegative=True, scale=float(scale))
    # a custom h: whether it is affine is read off the table where that reads no device value
    return LossSpec(rescaling, w, htab, None, None, affine_from_htab=rescaling == "margin" and on_host(htab),
                    scale=float(scale))


def resolve_segment_loss(kind: str, h: HLike, rescaling: str, weights: Tensor | None, K: int, B: int,
                         ref: Tensor, algorithm: str) -> LossSpec:
    """The :class:`LossSpec` of a segmentation loss other than "hamming" (see
    ``_torch.SEGMENT_LOSSES``): counted in the table up to ``K`` (the structure's bound); for
    "zero_one", h sees the count capped at 1."""
    if rescaling not in RESCALINGS:
        raise ValueError(f"rescaling must be 'margin' or 'slack', got {rescaling!r}")
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {ALGORITHMS}, got {algorithm!r}")
    if weights is not None:
        raise ValueError(f"weights weight positions: they apply to loss='hamming', not loss={kind!r}")
    if algorithm == "viterbi":
        raise ValueError(f"algorithm='viterbi' needs a loss that folds into the scores; loss={kind!r} runs "
                         "the table")
    htab = h_table(h, K, B, ref, "K+1")
    if kind == "zero_one":
        htab = htab[:, :2].gather(1, torch.arange(K + 1, device=htab.device).clamp(max=1).expand(B, K + 1))
    return LossSpec(rescaling, ref.new_zeros(B, 0, dtype=torch.long), htab, None, None,
                    nonnegative=h is None, kind=kind)
