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

from .._checks import _fmt, check_finite, check_int, check_that, on_host

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
        return weights_as_costs(self.weights, target, N)

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


def weights_as_costs(units: Tensor | None, target: Tensor, N: int) -> Tensor | None:
    """Position weights ``units`` (B, T) as the per-label costs (B, T, N) they charge against
    ``target`` (B, T) (weight where the label differs from the target's, else 0); None and costs
    (B, T, N) as they are."""
    if units is None or units.dim() != 2:
        return units
    return units.unsqueeze(2) * (torch.arange(N, device=units.device) != target.unsqueeze(2))


def _weights(weights: Tensor | None, mask: Tensor, ref: Tensor) -> Tensor:
    """(B, T) position weights in their own dtype, 0 beyond each length (``mask``); shape, dtype and
    device checked, floating ones finite (a value check). None: the unweighted count (``mask``
    as int64)."""
    B, T = mask.shape
    if weights is None:
        return mask.long()
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
    return torch.where(mask, weights, torch.zeros((), dtype=weights.dtype, device=weights.device))


def _folded_weights(w: Tensor) -> Tensor:
    """Weights folded into the scores (margin rescaling, h = identity): int64 where they are
    non-negative integers whose row sums fit int64 (the count comes back int64), else float64. On
    the host that is read off the values; elsewhere (nothing read back) off the dtype."""
    if not on_host(w):
        return w if not w.dtype.is_floating_point else w.double()
    integral = bool((w == w.round()).all()) and bool((w >= 0).all())
    # row sums in float64 never wrap (rounded, but far from the int64 limit when they pass)
    fits = w.shape[0] == 0 or float(w.double().abs().sum(1).max()) < 2.0**62
    return w.long() if integral and fits else w.double()


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


def integer_counts(values: Tensor, name: str, max_count: int | None = None) -> tuple[Tensor, int]:
    """(values * scale as int64, scale) for non-negative ``values`` that are integers after a
    common scale (:func:`common_scale`, read on the host); a ValueError naming ``name`` otherwise.
    With ``max_count`` (the table sized by the caller) nothing is read: the values must be
    non-negative integers (scale 1), a value check (see :func:`~structtorch.set_validation`)."""
    if max_count is not None:
        floating = values.dtype.is_floating_point
        check_that(lambda: (values >= 0) & (values == values.round() if floating else True),
                   f"{name} must be non-negative integers with max_count (a common scale needs "
                   "max_count=None, which reads the values on the host)")
        return values.long(), 1
    values = values.double()  # the scale of the values in float64 (a float32 one may be spurious)
    scale = common_scale(values) if bool((values >= 0).all()) else None
    if scale is None:
        raise ValueError(
            f"{name} must be non-negative integers, or integers after a common scale (a denominator of at "
            f"most {MAX_SCALE}), for slack rescaling, a custom h or algorithm='hamming' (real {name} work "
            "with rescaling='margin' and h=None)")
    return (values * scale).round().long(), scale


def table_bound(top: Callable[[], Tensor], max_count: int | None, what: str, units: str) -> int:
    """K, the count dimension of the table: the largest row count ``top()`` (B,), read on the
    host, or ``max_count`` when given (then ``top()`` is only computed by the value check that
    none exceeds it). ``what`` names the counted loss ("weights", "the costs") and ``units`` its
    units in the messages ("" or " (in units of 1/s)")."""
    if max_count is not None:
        if max_count + 1 > MAX_COUNTS:
            raise ValueError(f"max_count must be below {MAX_COUNTS} (the table holds max_count + 1 counts), "
                             f"got {max_count}")
        check_that(lambda: top() <= max_count,
                   f"{what} sum beyond max_count = {max_count} in some row{units}")
        return max_count
    rows = top()
    K = float(rows.max()) if rows.numel() else 0
    K = int(K) if K < 2.0**62 else K
    if K + 1 > MAX_COUNTS:
        raise ValueError(f"{what} sum to K = {K} in some row{units}: the Hamming table would need K+1 counts "
                         f"(at most {MAX_COUNTS}); use smaller integers")
    return K


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


def _as_costs(x: Tensor, name: str, shape: str) -> Tensor:
    """``x`` detached, int64 or float64 (checked finite): costs keep integers integral."""
    if not isinstance(x, Tensor) or x.dtype == torch.bool or x.dtype.is_complex:
        raise TypeError(f"{name} must be a real (integer or floating) tensor of shape {shape}")
    if x.dtype.is_floating_point:
        check_finite(name, x)
        return x.detach().double()
    return x.detach().long()


def _cost(cost: Tensor, target: Tensor, mask: Tensor, ref: Tensor) -> Tensor:
    """(B, T, N) int64 or float64 per-label costs, 0 beyond each length."""
    B, T = mask.shape
    N = ref.shape[-1]
    cost = _as_costs(cost, "cost", "(N, N) or (B, T, N)")
    if cost.shape == (N, N):
        per_label = cost.to(ref.device)[target]
    elif cost.shape == (B, T, N):
        per_label = cost.to(ref.device)
    else:
        raise ValueError(
            f"cost must have shape (N, N) = ({N}, {N}) or (B, T, N) = ({B}, {T}, {N}), got {_fmt(cost.shape)}"
        )
    return torch.where(mask.unsqueeze(2), per_label, 0)


def _pair_cost(pair_cost: Tensor, mask: Tensor, ref: Tensor) -> Tensor:
    """(B, T - 1, N, N) int64 or float64 costs of label pairs, 0 where t + 1 is beyond the length."""
    B, T = mask.shape
    N = ref.shape[-1]
    shape = (B, max(T - 1, 0), N, N)
    pair_cost = _as_costs(pair_cost, "pair_cost", f"(B, T-1, N, N) = {shape}")
    if pair_cost.shape != shape:
        raise ValueError(f"pair_cost must have shape (B, T-1, N, N) = {shape}, got {_fmt(pair_cost.shape)}")
    return torch.where(mask[:, 1:, None, None], pair_cost.to(ref.device), 0)


def _cost_spec(h: HLike, rescaling: str, weights: Tensor | None, cost: Tensor | None,
               pair_cost: Tensor | None, target: Tensor, mask: Tensor, ref: Tensor,
               algorithm: str, max_count: int | None) -> LossSpec:
    """The spec of a loss given by per-label costs and/or costs of label pairs: folded into the
    scores for margin rescaling with h=None, else counted in the table (non-negative integers
    after a common scale, or integers up to ``max_count``)."""
    if weights is not None:
        raise ValueError("cost and pair_cost replace weights: pass weights=None")
    B, T = mask.shape
    unit = None if cost is None else _cost(cost, target, mask, ref)
    pair = None if pair_cost is None else _pair_cost(pair_cost, mask, ref)
    if rescaling == "margin" and h is None and algorithm != "hamming":
        unit, pair = (None if x is None else x.double() for x in (unit, pair))
        return LossSpec(rescaling, mask.long(), None, unit, None, pair=pair)
    if algorithm == "viterbi":
        raise ValueError("algorithm='viterbi' needs margin rescaling with h=None")
    name = "cost" if pair is None else "pair_cost" if unit is None else "cost and pair_cost"
    raw = (unit, pair)  # the bound from the values as given: a cast of huge ones to int64 would wrap
    if max_count is None:
        parts = torch.cat([x.reshape(-1) for x in (unit, pair) if x is not None])
        scaled, scale = integer_counts(parts, name)
        n_unit = 0 if unit is None else unit.numel()
        unit = None if unit is None else scaled[:n_unit].view(unit.shape)
        pair = None if pair is None else scaled[n_unit:].view(pair.shape)
    else:
        unit, pair = (None if x is None else integer_counts(x, name, max_count)[0] for x in (unit, pair))
        scale = 1

    def top() -> Tensor:  # float64 sums of the scaled integers never wrap
        rows = 0 if raw[0] is None else (raw[0].amax(2).double() * scale).round().sum(1)
        return rows if raw[1] is None else rows + (raw[1].flatten(2).amax(2).double() * scale).round().sum(1)

    K = table_bound(top, max_count, "the costs", "" if scale == 1 else f" (in units of 1/{scale})")
    htab = h_table(h, K, B, ref, "K+1", scale)
    # always the table (a cost is folded only with h=None, above): exact for any h
    return LossSpec(rescaling, mask.long(), htab, unit, None, nonnegative=h is None, pair=pair,
                    scale=float(scale))


def resolve_loss(h: HLike, rescaling: str, weights: Tensor | None, cost: Tensor | None,
                 target: Tensor, mask: Tensor, ref: Tensor, algorithm: str = "auto",
                 pair_cost: Tensor | None = None, max_count: int | None = None) -> LossSpec:
    """Validate the loss arguments and bring them into a :class:`LossSpec`. Reads nothing on the
    host where the loss folds into the scores, or where the table's size is known (unweighted, or
    ``max_count``); otherwise the weights' or costs' values size the table."""
    if rescaling not in RESCALINGS:
        raise ValueError(f"rescaling must be 'margin' or 'slack', got {rescaling!r}")
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {ALGORITHMS}, got {algorithm!r}")
    if max_count is not None:
        max_count = check_int("max_count", max_count, 0)
    B, T = mask.shape
    if cost is not None or pair_cost is not None:
        return _cost_spec(h, rescaling, weights, cost, pair_cost, target, mask, ref, algorithm, max_count)
    w = _weights(weights, mask, ref)

    def identity_fold() -> tuple[Tensor, Tensor]:  # h = identity: intercept 0, slope 1
        ones = torch.ones(B, dtype=torch.float64, device=ref.device)
        return ones.new_zeros(()).expand(B), ones

    if rescaling == "margin" and h is None and algorithm != "hamming" and weights is not None:
        return LossSpec(rescaling, _folded_weights(w), None, None, identity_fold())  # no count table needed
    scale, K = 1, T
    if weights is not None:
        raw = w  # the bound from the values as given: a cast of huge ones to int64 would wrap
        w, scale = integer_counts(w, "weights", max_count)
        K = table_bound(lambda: (raw.double() * scale).round().sum(1), max_count, "weights",
                        "" if scale == 1 else f" (in units of 1/{scale})")
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
