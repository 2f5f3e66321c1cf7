"""Loss-augmented Viterbi with a Hamming-loss dimension, exact for margin and slack rescaling.

For a target y and a loss Delta(y, y') = h(H(y, y')), with H the (weighted) Hamming distance over
positions inside each length, this finds the most violating labeling

- margin rescaling: value = max_y' [ s(y') + h(H(y, y')) ] - s(y)
- slack rescaling:  value = max_y' h(H(y, y')) * (1 + s(y') - s(y))

exactly for every h (negative, non-monotone, nonlinear) through the table L[t, k, j] of Bauer et
al. (2014, Algorithm 1): the best prefix score ending in label j at t with Hamming count k. Margin
rescaling with an affine h (and any loss that decomposes over positions) folds the loss into the
unary scores and runs plain Viterbi in O(T N^2) instead.

The returned ``value`` is recomputed from the potentials along the returned path, so its
gradient is the exact subgradient: indicator(y') - indicator(y) for margin rescaling, scaled by
h(H(y, y')) for slack rescaling.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from .._backend import kernels
from .._checks import (
    Chain,
    LengthsLike,
    _fmt,
    cast_checked,
    check_chain,
    check_finite,
    check_labels,
    check_lengths,
    check_target_score,
    guard_overflow,
)
from .._numerics import NEG_INF, accumulate
from .._precision import mixed_precision
from ..chain import linear as _chain
from ..chain._torch import accumulating
from ..chain.window import _check_scores, _window_path, _window_score
from ._torch import Tables, chain_to_windows, negate_scores, window_tables

__all__ = ["loss_augmented_viterbi", "loss_augmented_viterbi_window"]

HLike = Callable[[Tensor], Tensor] | Tensor | None
RESCALINGS = ("margin", "slack")
ALGORITHMS = ("auto", "hamming", "viterbi")
MAX_COUNTS = 1_000_000  # largest Hamming-table count dimension accepted


@dataclass
class LossSpec:
    """The loss in canonical form.

    weights : (B, T) int64 (integer mode) or float (real weights, margin with h=None only), 0
        beyond each length.
    htab : (B, K + 1) float64 table of h over counts 0..K (integer mode), else None.
    cost : (B, T, N) per-position label costs (a decomposable margin loss), else None.
    affine : (intercept (B,), slope (B,)) when the loss folds into unary scores, else None.
    affine_from_htab : whether ``affine`` is still to be read off ``htab`` (margin rescaling with
        a table): a data-dependent test, done by :meth:`resolved` where the search runs.
    """

    rescaling: str
    weights: Tensor
    htab: Tensor | None
    cost: Tensor | None
    affine: tuple[Tensor, Tensor] | None
    affine_from_htab: bool = False

    def resolved(self) -> LossSpec:
        """The spec with ``affine`` decided."""
        if not self.affine_from_htab:
            return self
        return LossSpec(self.rescaling, self.weights, self.htab, self.cost, _affine(self.htab))

    @property
    def K(self) -> int:
        return self.htab.shape[1] - 1

    def count(self, path: Tensor, target: Tensor) -> Tensor:
        """(B,) weighted Hamming distance of ``path`` to ``target`` (paths are -1 beyond lengths)."""
        return (self.weights * (path != target) * (path >= 0)).sum(1)

    def loss(self, path: Tensor, target: Tensor, dtype: torch.dtype) -> Tensor:
        """(B,) Delta(y, path), a constant w.r.t. the potentials."""
        if self.cost is not None:
            picked = self.cost.gather(2, path.clamp(min=0).unsqueeze(2)).squeeze(2)
            return torch.where(path >= 0, picked, 0.0).sum(1).to(dtype)
        H = self.count(path, target)
        if self.htab is None:  # real weights, identity h
            return H.to(dtype)
        return self.htab.gather(1, H.long().unsqueeze(1)).squeeze(1).to(dtype)

    def label_loss(self, target: Tensor, N: int) -> Tensor:
        """(B, T, N) per-position loss of each label, for folding into the unary scores."""
        if self.cost is not None:
            return self.cost
        wrong = torch.arange(N, device=target.device) != target.unsqueeze(2)
        return self.affine[1].view(-1, 1, 1) * self.weights.double().unsqueeze(2) * wrong


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


def _h_table(h: HLike, K: int, B: int, ref: Tensor, what: str) -> Tensor:
    counts = torch.arange(K + 1, dtype=torch.float64, device=ref.device)
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
    table = table.detach().double().expand(B, K + 1)
    check_finite("h", table[0] if table.shape[0] and table.stride(0) == 0 else table)  # h[count]
    return table


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


def resolve_loss(h: HLike, rescaling: str, weights: Tensor | None, cost: Tensor | None,
                 target: Tensor, mask: Tensor, ref: Tensor, algorithm: str = "auto") -> LossSpec:
    """Validate the loss arguments and bring them into a :class:`LossSpec`."""
    if rescaling not in RESCALINGS:
        raise ValueError(f"rescaling must be 'margin' or 'slack', got {rescaling!r}")
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {ALGORITHMS}, got {algorithm!r}")
    B, T = mask.shape
    if cost is not None:
        if rescaling != "margin" or h is not None or weights is not None:
            raise ValueError("cost needs rescaling='margin', h=None and weights=None")
        return LossSpec(rescaling, mask.long(), None, _cost(cost, target, mask, ref), None)
    w, integral = _weights(weights, mask, ref)
    identity_fold = (torch.zeros(B, dtype=torch.float64, device=ref.device),
                     torch.ones(B, dtype=torch.float64, device=ref.device))
    if rescaling == "margin" and h is None and algorithm != "hamming" and weights is not None:
        return LossSpec(rescaling, w, None, None, identity_fold)  # no count table needed
    if not integral:
        raise ValueError(
            "weights must be non-negative integers for slack rescaling, a custom h or "
            "algorithm='hamming' (real weights work with rescaling='margin' and h=None)"
        )
    K = T if weights is None else (float(w.double().sum(1).max()) if B else 0)
    if K + 1 > MAX_COUNTS:
        raise ValueError(
            f"weights sum to K = {K:.6g} in some row: the Hamming table would need K+1 counts "
            f"(at most {MAX_COUNTS}); use smaller integer weights"
        )
    K = int(K)
    htab = _h_table(h, K, B, ref, "T+1" if weights is None else "K+1")
    return LossSpec(rescaling, w, htab, None, None, affine_from_htab=rescaling == "margin")


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

    def fold_path(self, label_loss: Tensor) -> Tensor: ...

    def tables(self, target: Tensor, weights: Tensor, K: int, negate: bool) -> Tables: ...


class _LabelStructure:
    """Structures that are label sequences (chains and order-l windows)."""

    truth: Tensor

    def labels(self, struct: Tensor) -> Tensor:
        return struct


class _ChainStructure(_LabelStructure):
    operator = "chain_loss_augmented"

    def __init__(self, chain, target: Tensor):
        self.chain, self.truth = chain, torch.where(chain.mask(), target, -1)

    def arguments(self) -> tuple:
        c = self.chain
        return c.unary, c.transitions, c.start, c.end, c.lengths

    def score(self, path: Tensor) -> Tensor:
        return _chain._path_score(self.chain, path.clamp(min=0))

    def fold_path(self, label_loss: Tensor) -> Tensor:
        c = accumulating(self.chain)  # the loss is added in double on CPU
        shifted = type(c)(c.unary.detach() + label_loss.to(c.unary.dtype), c.transitions.detach(),
                          c.start.detach(), c.end.detach(), c.lengths)
        return _chain._viterbi_path(shifted)

    def tables(self, target: Tensor, weights: Tensor, K: int, negate: bool) -> Tables:
        c = self.chain
        parts = [accumulate(x.detach()) for x in (c.unary, c.transitions, c.start, c.end)]
        if negate:
            parts = [negate_scores(x) for x in parts]
        chain = type(c)(*parts, c.lengths)
        if _chain._kernels(chain) is not None:  # the table's kernel on the chosen backend
            return kernels(chain.unary, __package__).chain_tables(chain, target, weights, K)
        return window_tables(chain_to_windows(chain), target, weights, c.lengths, K, 1)


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

    def fold_path(self, label_loss: Tensor) -> Tensor:
        shape = label_loss.shape[:2] + (1,) * self.order + (self.N,)
        scores = accumulate(self.scores.detach())
        shifted = scores + label_loss.to(scores.dtype).view(shape)
        return _window_path(self.flat(shifted), self.lengths, max(self.order, 1), self.N)

    def tables(self, target: Tensor, weights: Tensor, K: int, negate: bool) -> Tables:
        scores = self.scores.detach()
        scores = negate_scores(scores) if negate else scores
        return window_tables(self.flat(scores), target, weights, self.lengths, K, max(self.order, 1))


def _table_path(model: _Structure, spec: LossSpec, target: Tensor, gold: Tensor) -> Tensor:
    """The maximizing labeling through the Hamming tables (max table, and min table where a
    slack-rescaled h is negative)."""
    htab, K = spec.htab, spec.K
    top = model.tables(target, spec.weights, K, negate=False)
    feasible = top.best > NEG_INF
    if spec.rescaling == "margin":
        cand = torch.where(feasible, top.best + htab, NEG_INF)
        return top.backtrack(cand.argmax(1))
    g = gold.detach().double().unsqueeze(1)
    cand = torch.where(feasible, htab * (1 + top.best - g), NEG_INF)
    low = None
    if bool((feasible & (htab < 0)).any()):
        low = model.tables(target, spec.weights, K, negate=True)
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
    foldable = spec.rescaling == "margin" and (spec.cost is not None or spec.affine is not None)
    if algorithm == "viterbi" and not foldable:
        raise ValueError("algorithm='viterbi' needs margin rescaling with an affine h or a cost")
    with torch.no_grad():
        if foldable and algorithm != "hamming":
            struct = model.fold_path(spec.label_loss(target, N))
        else:
            struct = _table_path(model, spec, target, gold)
        # ties: prefer the target itself (a zero subgradient) whenever it attains the maximum
        values = (_value(model, spec, target, x, gold) for x in (model.truth, struct))
        keep_target = next(values) >= next(values)
    return torch.where(keep_target.unsqueeze(1), model.truth, struct)


def _value(model: _Structure, spec: LossSpec, target: Tensor, struct: Tensor, gold: Tensor) -> Tensor:
    """(B,) the loss-augmented value of ``struct``, in the accumulation precision."""
    found = model.score(struct)  # rounded to the input dtype once, by the caller
    delta = spec.loss(model.labels(struct), target, found.dtype)
    return found + delta - gold if spec.rescaling == "margin" else delta * (1 + found - gold)


def _solve(model: _Structure, spec: LossSpec, target: Tensor, N: int, algorithm: str,
           dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor]:
    """(value, structure, count) of the most violating structure; ``target`` holds the labels."""
    if algorithm == "hamming" and spec.htab is None:
        raise ValueError("algorithm='hamming' needs non-negative integer weights and no cost")
    from . import _ops  # the search as one operator per structure

    gold = model.score(model.truth)
    struct = _ops.most_violating(model, spec, target, algorithm, gold.detach())
    names = "the potentials or the loss"
    value = _value(model, spec, target, struct, gold)
    guard_overflow(value, (), 0, lambda: None, "the loss-augmented value", names)  # +inf, NaN
    value = cast_checked(value, dtype, "the loss-augmented value", names)
    return value, struct, spec.count(model.labels(struct), target)


@mixed_precision
def loss_augmented_viterbi(
    unary: Tensor,
    transitions: Tensor,
    target: Tensor,
    *,
    h: HLike = None,
    rescaling: str = "margin",
    start: Tensor | None = None,
    end: Tensor | None = None,
    lengths: LengthsLike = None,
    weights: Tensor | None = None,
    cost: Tensor | None = None,
    algorithm: str = "auto",
) -> tuple[Tensor, Tensor, Tensor]:
    """Most violating labeling of a linear chain under a Hamming-based loss.

    Parameters
    ----------
    unary, transitions, start, end, lengths
        Chain potentials as for :func:`structtorch.viterbi`: (B, T, N), (N, N) or (B, T-1, N, N),
        (N,) or (B, N), (B,).
    target : Tensor (B, T) int64
        The true labels y, in [0, N) inside each length (ignored beyond).
    h : None, callable or Tensor
        The loss as a function of the Hamming count: None is the identity; a callable is applied
        elementwise to the float tensor of counts 0..K; a tensor (T+1,) or (B, T+1) holds h(0..T)
        ((K+1,) with K the largest weighted count when ``weights`` are given).
    rescaling : {"margin", "slack"}
    weights : Tensor (B, T), optional
        Position weights of the Hamming loss. Non-negative integers work with any h and both
        rescalings (the count dimension then runs to the largest weighted count); real weights
        need margin rescaling with h=None.
    cost : Tensor (N, N) or (B, T, N), optional
        Margin rescaling only: a loss decomposing over positions, ``cost[y_t, y'_t]`` or
        ``cost[b, t, y'_t]``; replaces h and weights.
    algorithm : {"auto", "hamming", "viterbi"}
        "auto" folds margin losses that decompose over positions (affine h, real weights, cost)
        into the unary scores and runs Viterbi; otherwise it runs the Hamming table. The others
        force one path (for testing that they agree).

    Returns
    -------
    value : Tensor (B,)
        max over y' of s(y') + h(H) - s(y) (margin) or h(H) * (1 + s(y') - s(y)) (slack); its
        gradient is the subgradient described in the module docstring.
    path : Tensor (B, T) int64
        The maximizer y', -1 beyond each length. Ties: the target itself whenever it attains the
        maximum (so the subgradient is zero); otherwise, through the table, the smallest count k
        and then as :func:`structtorch.viterbi`; through the fold, as :func:`structtorch.viterbi`
        on the loss-augmented scores.
    hamming : Tensor (B,)
        H(y, y'), weighted when ``weights`` are given (int64 for integer weights).
    """
    chain = check_chain(unary, transitions, start, end, lengths)
    return chain_loss_augmented(chain, target, h=h, rescaling=rescaling, weights=weights, cost=cost,
                                algorithm=algorithm)


def chain_loss_augmented(chain: Chain, target: Tensor, *, h: HLike = None, rescaling: str = "margin",
                         weights: Tensor | None = None, cost: Tensor | None = None,
                         algorithm: str = "auto") -> tuple[Tensor, Tensor, Tensor]:
    """:func:`loss_augmented_viterbi` on an already validated :class:`Chain` (the target and the
    loss arguments are checked here)."""
    mask = chain.mask()
    target = check_labels(target, mask, chain.shape[2], name="target")
    spec = resolve_loss(h, rescaling, weights, cost, target, mask, chain.unary, algorithm)
    return _solve(_ChainStructure(chain, target), spec, target, chain.shape[2], algorithm, chain.unary.dtype)


@mixed_precision
def loss_augmented_viterbi_window(
    scores: Tensor,
    target: Tensor,
    *,
    h: HLike = None,
    rescaling: str = "margin",
    lengths: LengthsLike = None,
    weights: Tensor | None = None,
    cost: Tensor | None = None,
    algorithm: str = "auto",
) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`loss_augmented_viterbi` for chains of order l.

    ``scores`` (B, T) + (N,) * (l + 1) as for :func:`structtorch.viterbi_window`; the other
    arguments and the returns as for :func:`loss_augmented_viterbi`. O(T^2 N^(l+1)) for the table.
    """
    scores, order, N = _check_scores(scores)
    B, T = scores.shape[:2]
    lengths = check_lengths(lengths, B, T, scores.device)
    mask = torch.arange(T, device=scores.device) < lengths[:, None]
    target = check_labels(target, mask, N, name="target")
    spec = resolve_loss(h, rescaling, weights, cost, target, mask, scores.new_zeros(B, T, N), algorithm)
    model = _WindowStructure(scores, order, N, lengths, target)
    return _solve(model, spec, target, N, algorithm, scores.dtype)
