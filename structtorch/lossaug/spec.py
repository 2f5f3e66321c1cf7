"""The loss of loss-augmented inference in canonical form (:class:`LossSpec`) and the checks of
its arguments (``h``, ``rescaling``, ``weights``, ``cost``, ``algorithm``): the type-and-checks
room of :mod:`structtorch.lossaug`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from .._checks import _fmt, check_finite, on_host

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
        a custom h on the host): a data-dependent test, done by :meth:`resolved` where the search
        runs. On a GPU (no host reads) a custom h takes the table, exact for any h.
    nonnegative : whether h is known to be non-negative (h = identity), so that slack rescaling
        needs no minimum table.
    """

    rescaling: str
    weights: Tensor
    htab: Tensor | None
    cost: Tensor | None
    affine: tuple[Tensor, Tensor] | None
    affine_from_htab: bool = False
    nonnegative: bool = False

    def resolved(self) -> LossSpec:
        """The spec with ``affine`` decided."""
        if not self.affine_from_htab:
            return self
        return LossSpec(self.rescaling, self.weights, self.htab, self.cost, _affine(self.htab),
                        nonnegative=self.nonnegative)

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
    table = table.detach().double()
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

    def identity_fold() -> tuple[Tensor, Tensor]:  # h = identity: intercept 0, slope 1
        ones = torch.ones(B, dtype=torch.float64, device=ref.device)
        return ones.new_zeros(()).expand(B), ones

    if rescaling == "margin" and h is None and algorithm != "hamming" and weights is not None:
        return LossSpec(rescaling, w, None, None, identity_fold())  # no count table needed
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
    if h is None:  # the identity: affine and non-negative, known without reading the table
        return LossSpec(rescaling, w, htab, None, identity_fold() if rescaling == "margin" else None,
                        nonnegative=True)
    # a custom h: whether it is affine is read off the table where that reads no device value
    return LossSpec(rescaling, w, htab, None, None, affine_from_htab=rescaling == "margin" and on_host(htab))
