"""What the solvers for models linear in their parameters share (BCFW, cutting planes).

A model is linear when its potentials are ``<w, Psi(x, .)>`` in its trained parameters ``w``
(:class:`structtorch.LinearChainPotentials`, :class:`structtorch.nn.sparse.SparseFeaturePotentials`,
:class:`structtorch.HiddenSemiMarkovSVM` with fixed PLiF grids, ...). Such solvers see the
parameters as one float64 vector (:class:`ParameterVector`) and never need a hand-written joint
feature map: the gradient of a score (or of a hinge, a maximum of affine functions) with respect
to the parameters is Psi, exactly.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor, nn
from torch.func import functional_call

from .base import FitOptions

__all__ = ["GapSolver", "ParameterVector", "check_linear", "regularizer_is_l2", "tensors_of"]


def tensors_of(out: object, depth: int = 3) -> list[Tensor]:
    """The floating-point tensors a model output holds: itself, the items of a tuple or list, the
    fields of a dataclass or the attributes of an object (a structure such as
    :class:`structtorch.ChainDistribution`), ``depth`` levels deep."""
    if isinstance(out, Tensor):
        return [out] if out.is_floating_point() else []
    if depth == 0 or out is None or isinstance(out, (str, bytes, int, float, bool)):
        return []
    if isinstance(out, Mapping):
        items: Sequence[Any] = list(out.values())
    elif isinstance(out, (tuple, list)):
        items = out
    elif dataclasses.is_dataclass(out):
        items = [getattr(out, f.name) for f in dataclasses.fields(out)]
    else:
        items = list(getattr(out, "__dict__", {}).values())
    return [t for item in items for t in tensors_of(item, depth - 1)]


def check_linear(model: nn.Module, x: Tensor, seed: int = 0, *, solver: str = "bcfw",
                 kwargs: Mapping[str, Any] | None = None, affine: bool = False) -> None:
    """Raise ValueError unless the model's outputs on ``x`` (``model(x, **kwargs)``) are linear in
    its trained parameters, checked at two random points ``a``, ``b``: f(a + 2b) = f(a) + 2 f(b);
    with ``affine``, affine in them (outputs that do not depend on the parameters, such as features
    a structure carries, are allowed): f(a + 2b) = f(a) + 2 f(b) - 2 f(0)."""
    named = {k: p for k, p in model.named_parameters() if p.requires_grad}
    g = torch.Generator().manual_seed(seed)

    def rand() -> dict[str, Tensor]:
        return {k: torch.randn(p.shape, generator=g, dtype=p.dtype).to(p.device) for k, p in named.items()}

    a, b = rand(), rand()
    points = [a, b, {k: a[k] + 2 * b[k] for k in named}]
    points += [{k: torch.zeros_like(v) for k, v in a.items()}] if affine else []
    kwargs = dict(kwargs or {})
    with torch.no_grad():
        outputs = [tensors_of(functional_call(model, q, (x,), kwargs)) for q in points]
    for out in outputs:
        for t in out:
            if (torch.isnan(t) | torch.isposinf(t)).any():
                raise ValueError(f"solver={solver!r}: the model's outputs hold NaN or +inf at random "
                                 "parameters (such features, or a model that makes them); potentials must "
                                 "be finite or -inf")
    for oa, ob, oab, *zero in zip(*outputs, strict=True):
        fixed = [torch.isinf(t) for t in (oa, ob, *zero)]  # -inf entries (forbidden transitions) stay -inf
        infinite = torch.stack(fixed).any(0)
        want = torch.where(infinite, 0.0, oa + 2 * ob - (2 * zero[0] if zero else 0))
        scale = float(want.abs().max()) if want.numel() else 0.0
        same_inf = all(torch.equal(torch.isinf(oab), f) for f in fixed)
        close = torch.allclose(torch.where(infinite, 0.0, oab), want, rtol=1e-4, atol=1e-4 * max(scale, 1.0))
        if not (same_inf and close):
            raise ValueError(f"solver={solver!r} needs potentials linear in the parameters (score = "
                             f"<w, Psi(x, y)>{' + const' if affine else ''}, as LinearChainPotentials and "
                             f"SparseFeaturePotentials); {type(model).__name__} is not (use the subgradient "
                             "solver)")


@torch.no_grad()
def regularizer_is_l2(model: nn.Module) -> bool:
    """Whether the model's ``regularizer()`` (if any) is the squared norm of its parameters, checked at
    a random point of parameter space (the parameters are restored)."""
    own = getattr(model, "regularizer", None)
    if not callable(own):
        return True
    params = [p for p in model.parameters() if p.requires_grad]
    saved = [p.detach().clone() for p in params]
    try:
        gen = torch.Generator().manual_seed(0)
        for p in params:
            p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype).to(p.device))
        reg, norm = float(own()), float(sum(p.pow(2).sum() for p in params))
    finally:
        for p, s in zip(params, saved, strict=True):
            p.copy_(s)
    return abs(reg - norm) <= 1e-6 * max(1.0, norm)


def _flat_entries(g: Tensor) -> tuple[Tensor, Tensor]:
    """The nonzero entries of a gradient as (flat positions, values): a dense gradient scanned
    once, a sparse COO one (e.g. ``nn.EmbeddingBag(sparse=True)``'s rows) read off its indices
    without densifying it."""
    if not g.is_sparse:
        flat = g.reshape(-1)
        mine = flat.nonzero().squeeze(1)
        return mine, flat[mine]
    g = g.coalesce()
    sparse_dims, shape = g.sparse_dim(), g.shape
    strides = torch.tensor([math.prod(shape[i + 1:]) for i in range(sparse_dims)], device=g.device)
    base = (g.indices() * strides[:, None]).sum(0)  # each stored block's first flat position
    block = math.prod(shape[sparse_dims:])
    positions = (base[:, None] + torch.arange(block, device=g.device)).reshape(-1)
    vals = g.values().reshape(-1)
    keep = vals != 0
    return positions[keep], vals[keep]


class ParameterVector:
    """The trained parameters of some modules as one float64 vector w (d,).

    Parameters
    ----------
    params : list of nn.Parameter
        The parameters (those requiring grad), in order.
    """

    def __init__(self, params: Sequence[nn.Parameter]) -> None:
        self.params = [p for p in params if p.requires_grad]
        if not self.params:
            raise ValueError("the model has no trainable parameters")
        self.d = sum(p.numel() for p in self.params)
        self.device = self.params[0].device

    @torch.no_grad()
    def load(self, w: Tensor) -> None:
        """Set the parameters to ``w`` (d,)."""
        offset = 0
        for p in self.params:
            p.copy_(w[offset: offset + p.numel()].view_as(p))
            offset += p.numel()

    @torch.no_grad()
    def load_at(self, index: Tensor, w: Tensor) -> None:
        """Set the parameters' entries at the flat positions ``index`` to those of ``w`` (d,), the
        others untouched (a sparse step: O(len(index)), not O(d))."""
        offset = 0
        for p in self.params:
            n = p.numel()
            mine = index[(index >= offset) & (index < offset + n)]
            if p.is_contiguous():
                p.view(-1).index_copy_(0, mine - offset, w[mine].to(p.dtype))
            else:
                p.copy_(w[offset: offset + n].view_as(p))
            offset += n

    @torch.no_grad()
    def current(self) -> Tensor:
        """The parameters as they are, as one float64 vector (d,) (after :meth:`load`, ``w``
        rounded to the parameters' dtype)."""
        return torch.cat([p.reshape(-1) for p in self.params]).double()

    def flat(self, grads: Sequence[Tensor | None]) -> Tensor:
        """Gradients (one per parameter, None for none, sparse or dense) as one dense float64 (d,)."""
        return torch.cat([(torch.zeros_like(p) if g is None else g.to_dense()).reshape(-1)
                          for g, p in zip(grads, self.params, strict=True)]).double()

    def sparse_grad(self, value: Tensor) -> Tensor:
        """:meth:`grad` as a coalesced sparse COO vector (d,), each parameter's gradient made sparse
        on its own (no dense (d,) concatenation)."""
        grads = torch.autograd.grad(value, self.params, allow_unused=True) if value.requires_grad else \
            [None] * len(self.params)
        index, values, offset = [], [], 0
        for g, p in zip(grads, self.params, strict=True):
            if g is not None:
                mine, vals = _flat_entries(g)
                index.append(mine + offset)
                values.append(vals.double())
            offset += p.numel()
        index = torch.cat(index) if index else torch.zeros(0, dtype=torch.long, device=self.device)
        values = torch.cat(values) if values else torch.zeros(0, dtype=torch.float64, device=self.device)
        return torch.sparse_coo_tensor(index[None], values, (self.d,), check_invariants=False).coalesce()

    def grad(self, value: Tensor) -> Tensor:
        """The gradient (d,) float64 of the scalar ``value`` with respect to the parameters."""
        if not value.requires_grad:
            return torch.zeros(self.d, dtype=torch.float64, device=self.device)
        return self.flat(torch.autograd.grad(value, self.params, allow_unused=True))

    def jacobian(self, values: Tensor) -> Tensor:
        """The gradients (B, d) float64 of each of ``values`` (B,) with respect to the parameters:
        one backward pass vectorized over the B rows (``is_grads_batched``), or B passes where an
        operation has no batching rule (sparse gradients, for one)."""
        B = values.shape[0]
        if not values.requires_grad or B == 0:
            return torch.zeros(B, self.d, dtype=torch.float64, device=self.device)
        if B == 1:
            return self.grad_retained(values[0])[None]
        try:
            eye = torch.eye(B, dtype=values.dtype, device=values.device)
            grads = torch.autograd.grad(values, self.params, grad_outputs=eye, allow_unused=True,
                                        is_grads_batched=True, retain_graph=True)
        except RuntimeError:
            return torch.stack([self.grad_retained(values[i]) for i in range(B)])
        flat = [torch.zeros(B, p.numel(), dtype=p.dtype, device=p.device) if g is None
                else g.to_dense().reshape(B, -1) for g, p in zip(grads, self.params, strict=True)]
        return torch.cat(flat, 1).double()

    def grad_retained(self, value: Tensor) -> Tensor:
        """:meth:`grad` keeping the graph (for several values of one forward pass)."""
        return self.flat(torch.autograd.grad(value, self.params, allow_unused=True, retain_graph=True))


class GapSolver:
    """The part of an exact solver of linear models that :func:`structtorch.train.fit` sees: the
    checks of ``fit``'s options, one ``step()`` per epoch timed cumulatively into the record's
    ``time``, and convergence once the record's duality ``gap`` is at most ``tol``.

    Subclasses set ``step`` (a callable returning the epoch's record), ``task`` and ``state`` (the
    algorithm: its ``tol`` and ``rtol``, and ``state_dict()`` and ``load_state_dict()`` for
    checkpoints).
    """

    step: Callable[[], dict[str, float]]
    state: Any

    def __init__(self, name: str, model: nn.Module, options: FitOptions, why: str, *,
                 distributed: bool = False) -> None:
        given = [k for k in ("optimizer", "scheduler") if getattr(options, k) is not None]
        if given:
            raise ValueError(f"solver={name!r} takes no {' or '.join(given)} ({why})")
        if options.distributed and not distributed:
            raise ValueError(f"solver={name!r} runs in one process; under torch.distributed use "
                             "solver='cutting_plane' (its oracle calls shared by the processes) or "
                             "solver='subgradient'")
        if not regularizer_is_l2(model):
            raise ValueError(f"solver={name!r} needs the squared-norm regularizer; this model's "
                             "regularizer() is not the squared norm of its parameters (use the subgradient "
                             "solver)")
        self.elapsed = 0.0

    def epoch(self) -> dict[str, float]:
        began = time.perf_counter()
        record = self.step()
        self.elapsed += time.perf_counter() - began
        record["time"] = self.elapsed
        return record

    def converged(self, record: Mapping[str, float]) -> bool:
        return record["gap"] <= max(self.state.tol, self.state.rtol * abs(record["objective"]))

    def state_dict(self) -> dict[str, Any]:
        """The algorithm's state (``self.state.state_dict()``) and the time."""
        return {"algorithm": self.state.state_dict(), "elapsed": self.elapsed}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.state.load_state_dict(state["algorithm"])
        self.elapsed = float(state["elapsed"])
