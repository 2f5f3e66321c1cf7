"""Block-coordinate Frank-Wolfe (BCFW) for margin-rescaled structural SVMs with linear potentials.

Lacoste-Julien, Jaggi, Schmidt and Pletscher (2013), "Block-Coordinate Frank-Wolfe Optimization for
Structural SVMs", Algorithm 3 (with the optional weighted averaging of their Algorithm 4). The
primal is

    min_w  lambda/2 ||w||^2 + 1/n sum_i H_i(w),   H_i(w) = max_y L_i(y) - <w, psi_i(y)>,

with ``psi_i(y) = Psi(x_i, y_i) - Psi(x_i, y)`` and ``L_i(y) = h(Hamming(y_i, y))``: the mean
margin-rescaled hinge of :class:`structtorch.StructuredHingeLoss` plus the penalty of
:func:`structtorch.train.fit` with ``l2 = lambda`` (or ``C``: lambda = 1 / (n C)). Each block
step calls the loss-augmented oracle (:func:`structtorch.loss_augmented`) on one
sequence and moves that sequence's dual block towards the corner it returns, with the
closed-form optimal step (line search) or ``2n / (k + 2n)``. No learning rate. After every pass
the duality gap ``primal(w) - dual(alpha)`` (an upper bound on the suboptimality) is computed
with one batched oracle call over the data; it is the stopping criterion.

A model whose ``forward(x, lengths)`` returns a structure (a :class:`structtorch.DependencyDistribution`
over arc scores linear in w, with the words' heads as the data's labels; a segmentation) is solved
the same way through the structure's ``loss_augmented`` and ``score``.

The potentials must be linear in the parameters, ``score(x, y) = <w, Psi(x, y)>``
(:class:`structtorch.LinearChainPotentials`, :class:`structtorch.nn.sparse.SparseFeaturePotentials`;
checked numerically at the start). Psi differences are the gradients of path-score differences
with respect to the parameters (autograd), so any such model works. The solver keeps each training
sequence's block w_i as a sparse vector on the support of its Psi differences (for sparse
indicator features: that sequence's features), so memory is the total support rather than n d.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from ..._checks import check_bool, check_int, check_number
from ...chain import path_score
from ...lossaug import loss_augmented
from ...losses import StructuredHingeLoss
from ...sequence_data import SequenceData
from ..task import Task
from ._linear import GapSolver, ParameterVector, check_linear, regularizer_is_l2
from .base import FitOptions, solver_kwargs

__all__ = ["BCFW", "BCFWSolver", "check_linear", "regularizer_is_l2"]


def _hinge(loss: object) -> StructuredHingeLoss:
    if loss is None:
        return StructuredHingeLoss("margin")
    if not isinstance(loss, StructuredHingeLoss):
        raise TypeError(f"solver='bcfw' needs loss=None or a StructuredHingeLoss with margin rescaling, got "
                        f"{type(loss).__name__}")
    if loss.rescaling != "margin":
        raise ValueError(f"solver='bcfw' solves margin-rescaled SVMs; the loss has "
                         f"rescaling={loss.rescaling!r}")
    if loss.reduction != "mean":
        raise ValueError(f"solver='bcfw' needs the loss's reduction 'mean', got {loss.reduction!r}")
    if type(loss).forward is not StructuredHingeLoss.forward:
        raise TypeError(f"solver='bcfw' calls the loss-augmented oracle with the loss's h and the data's "
                        f"costs, not the loss's forward, which {type(loss).__name__} overrides: pass "
                        "per-example costs as SequenceData(cost=...), or train this loss with "
                        "solver='cutting_plane' (or 'subgradient'), which call it")
    if loss.loss not in (None, "hamming") or loss.ignore_index is not None:
        raise ValueError("solver='bcfw' trains fully labeled chains under the Hamming loss or the data's "
                         f"costs; the loss has loss={loss.loss!r}, ignore_index={loss.ignore_index!r}: use "
                         "solver='cutting_plane'")
    return loss


def _outputs(model: nn.Module, x: Tensor) -> dict[str, Tensor]:
    out = model(x)
    if not isinstance(out, (tuple, list)) or len(out) not in (2, 4):
        raise TypeError("the model must return (unary, transitions) or (unary, transitions, start, end)")
    return dict(zip(("unary", "transitions", "start", "end"), out, strict=False))


def _sparse_zero(d: int, device: torch.device) -> Tensor:
    """A zero (d,) float64 vector in sparse COO form."""
    return torch.sparse_coo_tensor(torch.zeros(1, 0, dtype=torch.long, device=device),
                                   torch.zeros(0, dtype=torch.float64, device=device), (d,),
                                   check_invariants=False).coalesce()


def _dot(sparse: Tensor, dense: Tensor) -> float:
    """<sparse, dense> for a coalesced sparse (d,) vector."""
    return float(sparse.values() @ dense[sparse.indices()[0]])


class BCFW:
    """The state of block-coordinate Frank-Wolfe on one training set (used by ``fit(solver="bcfw")``).

    Parameters
    ----------
    model : nn.Module
        x -> (unary (B, T, N), transitions (N, N)[, start, end]), linear in its parameters. Its
        parameters are set to w = 0 (the dual's starting corner) and hold the output iterate
        (averaged when ``averaging``) after every pass.
    data : SequenceData
        The n training sequences.
    loss : StructuredHingeLoss or None
        Margin rescaling with reduction "mean" and any ``h`` of the Hamming count (or of the sum
        of the data's costs, ``SequenceData.cost``) with h(0) = 0; None: the Hamming loss. Its
        ``forward`` is not called (the oracle is): a subclass that overrides it is refused.
    lam : float
        lambda > 0, the weight of lambda/2 ||w||^2.
    seed : int
        Seeds the order of the blocks (a fresh random permutation every pass).
    tol : float
        Duality-gap tolerance read by :meth:`BCFWSolver.converged` (0: run all epochs).
    rtol : float
        Relative tolerance: also stop once the gap is at most ``rtol`` times the primal.
    averaging : bool
        Report the weighted average w_bar(k+1) = k/(k+2) w_bar(k) + 2/(k+2) w(k+1) (Algorithm 4).
    line_search : bool
        The optimal step per block (else 2n / (k + 2n)).
    batch_size : int
        Sequences per oracle call of the duality-gap computation.
    """

    def __init__(self, model: nn.Module, data: SequenceData, loss: StructuredHingeLoss | None, lam: float, *,
                 seed: int = 0, tol: float = 0.0, rtol: float = 0.0, averaging: bool = True,
                 line_search: bool = True,
                 batch_size: int = 256) -> None:
        self.loss = _hinge(loss)
        if lam <= 0:
            raise ValueError("solver='bcfw' needs a regularizer: C > 0 or l2 > 0")
        self.tol = check_number("tol", tol, low=0.0)
        self.rtol = check_number("rtol", rtol, low=0.0)
        self.batch_size = check_int("batch_size", batch_size, 1)
        self.model, self.data, self.lam = model, data, float(lam)
        self.averaging = check_bool("averaging", averaging)
        self.line_search = check_bool("line_search", line_search)
        self.vector = ParameterVector(list(model.parameters()))
        self.params = self.vector.params
        first = data.batch(torch.arange(min(len(data), 4)))
        self.structure = Task(model, self.loss).returns_structure(first)
        kwargs = {"lengths": first.lengths} if self.structure else {}
        check_linear(model, first.x, seed, kwargs=kwargs, affine=self.structure)
        n, d, dev = len(data), self.vector.d, self.vector.device
        self.n, self.d = n, d
        self.w = torch.zeros(d, dtype=torch.float64, device=dev)
        # the blocks w_i as sparse vectors: a block only ever holds psi_i's support (the features of
        # sequence i), so memory is O(sum of supports) rather than O(n d)
        self.w_blocks = [_sparse_zero(d, dev) for _ in range(n)]
        self.ell, self.ell_blocks = 0.0, torch.zeros(n, dtype=torch.float64)
        # the weighted average of Algorithm 4, w_avg = w - drift / T(k - 1) with T(j) = (j + 1)(j + 2) / 2
        # (see :attr:`w_avg`): each step updates it on the step's support only
        self.drift, self.ell_avg = torch.zeros_like(self.w), 0.0
        self.k = 0
        self.gen = torch.Generator().manual_seed(seed)
        self._load(self.w)

    def _load(self, w: Tensor) -> None:
        self.vector.load(w)

    def _oracle(self, batch: SequenceData, psi: bool = True) -> tuple[Tensor, Tensor, Tensor | None]:
        """At the loaded parameters: (H_i (B,), L_i(y*) (B,), sum_i psi_i(y*) (d,), a sparse vector;
        None without ``psi``) in float64."""
        if self.structure:
            return self._structure_oracle(batch, psi)
        with torch.set_grad_enabled(psi):
            pot = _outputs(self.model, batch.x)
        unary, trans = pot.pop("unary"), pot.pop("transitions")
        kw = {**pot, "lengths": batch.lengths}
        with torch.no_grad():
            value, path, _ = loss_augmented(
                unary.detach(), trans.detach(), batch.labels, h=self.loss.h, rescaling="margin",
                **{k: v.detach() for k, v in pot.items()}, lengths=batch.lengths, cost=batch.cost)
        # <w, psi_i(y*)> = s(y_i) - s(y*); its gradient is psi_i(y*)
        worst = path.clamp(min=0)
        with torch.set_grad_enabled(psi):
            diff = path_score(unary, trans, batch.labels, **kw) - path_score(unary, trans, worst, **kw)
        value = value.detach().double()
        return value, value + diff.detach().double(), self.vector.sparse_grad(diff.sum()) if psi else None

    def _structure_oracle(self, batch: SequenceData, psi: bool) -> tuple[Tensor, Tensor, Tensor | None]:
        """:meth:`_oracle` for a model that returns a structure (``model(x, lengths=)``: trees,
        segmentations): its ``loss_augmented`` (the hinge's form, s(y*) + L - s(y)) and ``score``."""
        with torch.set_grad_enabled(psi):
            out = self.model(batch.x, lengths=batch.lengths)
        target = batch.labels if batch.starts is None else (batch.labels, batch.starts)
        with torch.no_grad():
            found = out.loss_augmented(target, h=self.loss.h, rescaling="margin", cost=batch.cost)
        worst = found[1] if len(found) == 3 else tuple(found[1:-1])  # segmentations: (labels, starts)
        with torch.set_grad_enabled(psi):
            diff = out.score(target) - out.score(worst)  # <w, psi_i(y*)>; its gradient is psi_i(y*)
        value = found[0].detach().double()
        return value, value + diff.detach().double(), self.vector.sparse_grad(diff.sum()) if psi else None

    def _step(self, i: int) -> None:
        _, delta, psi = self._oracle(self.data.batch(torch.tensor([i])))
        n, lam = self.n, self.lam
        w_s = torch.sparse_coo_tensor(psi.indices(), psi.values() / (lam * n), psi.shape,
                                      check_invariants=False).coalesce()
        ell_s = float(delta[0]) / n
        w_i, ell_i = self.w_blocks[i], float(self.ell_blocks[i])
        dw = (w_i - w_s).coalesce()  # sparse: the union of the two supports
        if self.line_search:
            denom = lam * float(dw.values() @ dw.values())
            num = lam * _dot(dw, self.w) - ell_i + ell_s
            gamma = min(max(num / denom, 0.0), 1.0) if denom > 0 else (1.0 if num > 0 else 0.0)
        else:
            gamma = 2.0 * n / (self.k + 2.0 * n)
        new_w_i = (w_i - gamma * dw).coalesce()  # (1 - gamma) w_i + gamma w_s
        new_ell_i = (1 - gamma) * ell_i + gamma * ell_s
        support = dw.indices()[0]
        self.w.index_add_(0, support, dw.values(), alpha=-gamma)  # w += new_w_i - w_i
        self.ell += new_ell_i - ell_i
        self.w_blocks[i] = new_w_i
        self.ell_blocks[i] = new_ell_i
        if self.averaging:  # w_avg = (1 - rho) w_avg + rho w, rho = 2 / (k + 2), through the drift
            self.drift.index_add_(0, support, dw.values(), alpha=-gamma * self.k * (self.k + 1) / 2)
            rho = 2.0 / (self.k + 2.0)
            self.ell_avg = (1 - rho) * self.ell_avg + rho * self.ell
        self.k += 1
        self.vector.load_at(support, self.w)  # the parameters equal w elsewhere already

    @property
    def w_avg(self) -> Tensor:
        """The averaged iterate of Algorithm 4 after k steps. Its recurrence w_avg = (1 - rho_j)
        w_avg + rho_j w_j, rho_j = 2 / (j + 2), sums to sum_j (j + 1) w_j / T(k - 1), which is
        w_k - drift / T(k - 1) with drift = sum_j T(j - 1) (w_j - w_{j-1}): updated on each step's
        support, not over all d weights."""
        if self.k == 0:
            return self.w.clone()
        return self.w - self.drift / (self.k * (self.k + 1) / 2)

    def output(self) -> tuple[Tensor, float]:
        """The reported iterate (w (d,), the dual's linear term ell): averaged or the last."""
        return (self.w_avg, self.ell_avg) if self.averaging else (self.w, self.ell)

    def gap(self) -> dict[str, float]:
        """Primal, dual and duality gap at the output iterate, loaded into the model."""
        w, ell = self.output()
        self._load(w)
        hinge = 0.0
        for idx in torch.arange(self.n).split(self.batch_size):
            value, _, _ = self._oracle(self.data.batch(idx), psi=False)
            hinge += float(value.sum())
        sq = float(w @ w)
        primal = 0.5 * self.lam * sq + hinge / self.n
        dual = -0.5 * self.lam * sq + ell
        return {"objective": primal, "dual": dual, "gap": primal - dual}

    def state_dict(self) -> dict[str, Any]:
        """Every quantity of the algorithm (the blocks as one index, value and size list)."""
        blocks = [b.coalesce() for b in self.w_blocks]
        return {"w": self.w, "blocks_index": torch.cat([b.indices()[0] for b in blocks]),
                "blocks_values": torch.cat([b.values() for b in blocks]),
                "blocks_size": torch.tensor([b.values().numel() for b in blocks], dtype=torch.long),
                "ell": self.ell, "ell_blocks": self.ell_blocks, "drift": self.drift, "ell_avg": self.ell_avg,
                "k": self.k, "generator": self.gen.get_state()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        dev = self.vector.device
        sizes = state["blocks_size"].tolist()
        if len(sizes) != self.n or state["w"].shape != (self.d,):
            raise ValueError(f"BCFW state of {len(sizes)} blocks of dimension {tuple(state['w'].shape)}, "
                             f"expected {self.n} of ({self.d},)")
        index, values = state["blocks_index"].split(sizes), state["blocks_values"].split(sizes)
        self.w_blocks = [torch.sparse_coo_tensor(i[None].to(dev), v.to(dev), (self.d,),
                                                 check_invariants=False).coalesce()
                         for i, v in zip(index, values, strict=True)]
        self.w, self.drift = state["w"].to(dev), state["drift"].to(dev)
        self.ell, self.ell_avg, self.k = float(state["ell"]), float(state["ell_avg"]), int(state["k"])
        self.ell_blocks = state["ell_blocks"].clone()
        self.gen.set_state(state["generator"])

    def run_pass(self) -> dict[str, float]:
        """n block steps in a random order, then :meth:`gap` (the model keeps the output iterate)."""
        self._load(self.w)
        for i in torch.randperm(self.n, generator=self.gen).tolist():
            self._step(i)
        return self.gap()


class BCFWSolver(GapSolver):
    """``solver="bcfw"`` of :func:`structtorch.train.fit`: one epoch is one :meth:`BCFW.run_pass`;
    training stops once the duality gap is at most ``tol`` (``history.converged``).

    ``options.solver_options`` are the keyword options of :class:`BCFW` (``tol``, ``averaging``,
    ``line_search``, ``batch_size``). Records ``objective`` (the primal), ``dual``, ``gap`` and
    ``time`` (cumulative seconds of the passes and their gap computations).
    """

    records = {"objective": "min", "dual": "max", "gap": "min", "time": "max"}

    def __init__(self, model: nn.Module, data: SequenceData, loss: StructuredHingeLoss | None,
                 options: FitOptions) -> None:
        super().__init__("bcfw", model, options, "it computes its own steps")
        kwargs = solver_kwargs(options, BCFW, "bcfw", ("seed",))
        self.state = BCFW(model, data, loss, options.lam, seed=options.seed, **kwargs)
        self.task = Task(model, self.state.loss)
        self.step = self.state.run_pass
