"""Cutting-plane training of structural SVMs to a certificate (``fit(solver="cutting_plane")``).

The primal, in :func:`structtorch.train.fit`'s scaled convention (lambda = l2 = 1 / (n C)):

    min_w  lambda/2 ||w||^2 + 1/n sum_i H_i(w),

H_i the structured hinge of sequence i (:class:`structtorch.StructuredHingeLoss`: margin or slack
rescaling, any ``h``, any loss its oracle takes; chains, segmentations, graphs). For potentials
linear in w, H_i is a maximum of affine functions of w (one per structure), so its value and
gradient at any w give a plane under it, ``H_i(w') >= c - <w', a>`` with ``a = -grad H_i(w)`` and
``c = H_i(w) + <w, a>``: the loss-augmented oracle's answer, with the joint feature map read off
autograd (no model writes a psi). Two variants:

- ``"n_slack"`` (Tsochantaridis, Joachims, Hofmann and Altun 2005): a working set of planes per
  sequence, slack xi_i >= each of sequence i's planes;
- ``"one_slack"`` (Joachims, Finley and Yu 2009): one slack for the mean of the hinges, one plane
  per iteration from one pass over the data (the gradient of the mean hinge).

Each iteration solves the dual QP over the working set (:class:`WorkingSet`, in
:mod:`structtorch.learn.solvers.working_set`: DAQP's active-set method on the dual or the primal;
Clarabel's interior-point method where DAQP fails or is slower; over a large working set, by
shrinking to the planes likely active), takes w from it (the primal's solution, or
A^T alpha / lambda) and runs the oracle over the training data at w: that gives the true primal
of w and the new planes. The model keeps the iterate of lowest primal so far. The dual value of the
working set's QP is a lower bound on the optimum, so ``gap = best primal - dual`` certifies the
model's weights; training stops once ``gap <= tol``. Planes whose dual variable stays 0 for
``inactive`` iterations leave the working set.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch
from torch import Tensor, nn

from ..._checks import check_int, check_number
from ...losses import StructuredHingeLoss
from ...sequence_data import SequenceData
from ..task import Task
from ._linear import GapSolver, ParameterVector, check_linear
from .base import FitOptions
from .working_set import WorkingSet

__all__ = ["CuttingPlane", "CuttingPlaneSolver", "WorkingSet"]

VARIANTS = ("one_slack", "n_slack")


def _hinge(loss: object) -> StructuredHingeLoss:
    if not isinstance(loss, StructuredHingeLoss):
        raise TypeError(f"solver='cutting_plane' trains a structural SVM: loss must be a StructuredHingeLoss "
                        f"(margin or slack rescaling), got {type(loss).__name__}")
    if loss.reduction != "mean":
        raise ValueError(f"solver='cutting_plane' needs the loss's reduction 'mean', got {loss.reduction!r}")
    return loss


class CuttingPlane:
    """The state of the cutting-plane method on one training set (``fit(solver="cutting_plane")``).

    Parameters
    ----------
    model : nn.Module
        Potentials linear in its parameters, in any of :func:`structtorch.train.fit`'s model/loss
        protocols with a :class:`structtorch.StructuredHingeLoss` (chain potentials, or a
        structure such as a :class:`structtorch.ChainDistribution` or
        :class:`structtorch.SemiMarkovDistribution`). Its parameters start at w = 0 and hold the
        best iterate so far (the lowest primal, which is recorded) after every iteration.
    data : SequenceData
        The n training sequences.
    loss : StructuredHingeLoss
        Reduction "mean"; any rescaling, ``h`` and loss its oracle takes.
    lam : float
        lambda > 0, the weight of lambda/2 ||w||^2.
    variant : {"one_slack", "n_slack"}
    tol : float
        Stop when primal - dual <= tol (absolute, in the scaled objective).
    inactive : int
        Iterations a plane may stay unused (alpha = 0) before it leaves the working set.
    batch_size : int, optional
        Sequences per oracle call (default 256; n_slack: each sequence's plane from one backward
        pass vectorized over the batch, whose cost grows with the batch squared: default 32 for
        chain potentials, 1 for structures).
    margin : float
        n_slack adds a sequence's plane only if it is violated by more than this (relative to
        tol; default: tol).
    """

    def __init__(self, model: nn.Module, data: SequenceData, loss: StructuredHingeLoss, lam: float, *,
                 variant: str = "one_slack", tol: float = 1e-3, inactive: int = 10,
                 batch_size: int | None = None,
                 margin: float | None = None, seed: int = 0) -> None:
        if variant not in VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
        if lam <= 0:
            raise ValueError("solver='cutting_plane' needs a regularizer: C > 0 or l2 > 0")
        self.task = Task(model, _hinge(loss))
        self.data, self.lam, self.variant = data, float(lam), variant
        self.tol = check_number("tol", tol, low=0.0)
        self.inactive = check_int("inactive", inactive, 1)
        batch_size = self._batch_size(variant) if batch_size is None else batch_size
        self.batch_size = check_int("batch_size", batch_size, 1)
        self.margin = self.tol if margin is None else check_number("margin", margin, low=0.0)
        self.vector = ParameterVector(self.task.parameters)
        first = data.batch(torch.arange(min(len(data), 4)))
        kwargs = {"lengths": first.lengths} if self.task.takes_lengths else {}
        check_linear(model, first.x, seed, solver="cutting_plane", kwargs=kwargs, affine=True)
        n = len(data)
        self.set = WorkingSet(self.vector.d, self.lam, 1.0 if variant == "one_slack" else 1.0 / n)
        self.oracle_calls = 0
        self.w = torch.zeros(self.vector.d, dtype=torch.float64, device=self.vector.device)
        self.vector.load(self.w)
        self.slacks = np.zeros(n)  # n_slack: each sequence's slack under the working set at w
        self.best = (float("inf"), self.w)  # the lowest primal so far and its weights

    def _batch_size(self, variant: str) -> int:
        """The default batch: 256 for one_slack; for n_slack, whose batched backward costs B^2, 32
        for chain potentials and 1 for structures (a segmentation's vectorized backward was 10x
        slower than one sequence at a time)."""
        if variant == "one_slack":
            return 256
        return 1 if self.task.returns_structure(self.data.batch(torch.arange(min(len(self.data), 1)))) else 32

    def _planes(self, idx: Tensor) -> tuple[Tensor, Tensor]:
        """At the loaded w, the hinges' sum over ``data[idx]`` and its gradient (d,), float64."""
        batch = self.data.batch(idx)
        with torch.enable_grad():
            total = self.task.batch_loss(batch) * len(idx)
            grad = self.vector.grad(total)
        self.oracle_calls += len(idx)
        return total.detach().double(), grad

    def _sequence_planes(self, idx: Tensor) -> tuple[Tensor, Tensor]:
        """At the loaded w, each hinge of ``data[idx]`` (B,) and its gradient (B, d), float64, from one
        batched oracle call."""
        with torch.enable_grad():
            values = self.task.sequence_losses(self.data.batch(idx))
            grads = self.vector.jacobian(values)
        self.oracle_calls += len(idx)
        return values.detach().double().cpu(), grads

    def _sparse(self, grads: list[Tensor]) -> sp.csr_array:
        return sp.csr_array(torch.stack([-g for g in grads]).cpu().numpy())

    def _oracle(self) -> tuple[float, list[int], np.ndarray, sp.csr_array]:
        """The mean hinge at the loaded w and the planes to add (owners, c, rows a)."""
        w = self.w
        n = len(self.data)
        if self.variant == "one_slack":
            total, grad = torch.zeros((), dtype=torch.float64), torch.zeros_like(w)
            for idx in torch.arange(n).split(self.batch_size):
                value, g = self._planes(idx)
                total, grad = total + value.cpu(), grad + g
            a = -grad / n
            mean = float(total) / n
            return mean, [0], np.array([mean + float(w @ a)]), sp.csr_array(a.cpu().numpy()[None])
        owners, consts, rows, hinges = [], [], [], np.zeros(n)
        for idx in torch.arange(n).split(self.batch_size):
            values, grads = self._sequence_planes(idx)
            for i, value, g in zip(idx.tolist(), values.tolist(), grads, strict=True):
                hinges[i] = value
                if value > self.slacks[i] + self.margin:
                    owners.append(i)
                    consts.append(value - float(w @ g))
                    rows.append(g)
        planes = self._sparse(rows) if rows else sp.csr_array((0, self.vector.d))
        return float(hinges.mean()), owners, np.asarray(consts), planes

    def _slacks(self) -> np.ndarray:
        """Each sequence's slack max(0, max over its planes of c - <w, a>) at the current w."""
        n = len(self.data)
        if not len(self.set):
            return np.zeros(n)
        w = self.w.cpu().numpy()
        values = self.set.c - self.set.rows @ w
        slack = np.zeros(n)
        np.maximum.at(slack, np.asarray(self.set.owners), values)
        return slack

    def iterate(self) -> dict[str, float]:
        """Solve the dual over the working set, load its w and run the oracle there; the model then
        holds the best weights so far (the lowest primal). Returns their record: ``objective``
        (their primal), ``dual`` (the working set's, a lower bound on the optimum), ``gap``,
        ``constraints``, ``oracle_calls``, ``qp_time``."""
        dual = self.set.solve()
        self.vector.load(torch.as_tensor(self.set.weights(), dtype=torch.float64).to(self.vector.device))
        self.w = self.vector.current()  # as loaded (e.g. rounded to float32): the weights certified
        if self.variant == "n_slack":
            self.slacks = self._slacks()
        hinge, owners, c, rows = self._oracle()
        primal = 0.5 * self.lam * float(self.w @ self.w) + hinge
        if primal < self.best[0]:
            self.best = (primal, self.w)
        else:  # the primal is not monotone: keep the best weights
            self.vector.load(self.best[1])
        self.set.add(owners, c, rows)
        self.set.prune(self.inactive)
        return {"objective": self.best[0], "dual": dual, "gap": self.best[0] - dual,
                "constraints": float(len(self.set)), "oracle_calls": float(self.oracle_calls),
                "qp_time": self.set.qp_time}


class CuttingPlaneSolver(GapSolver):
    """``solver="cutting_plane"`` of :func:`structtorch.train.fit`: one epoch is one iteration
    of :class:`CuttingPlane` (a dual QP and one oracle pass); training stops once the duality gap
    is at most ``tol``.

    ``options.solver_options`` are the keyword options of :class:`CuttingPlane` (``variant``,
    ``tol``, ``inactive``, ``batch_size``, ``margin``). Records ``objective`` (the primal of the
    loaded weights), ``dual``, ``gap``, ``constraints`` (working-set size), ``oracle_calls``
    (cumulative, in sequences), ``qp_time`` and ``time`` (cumulative seconds).
    """

    records = {"objective": "min", "dual": "max", "gap": "min", "constraints": "min", "oracle_calls": "min",
               "qp_time": "max", "time": "max"}

    def __init__(self, model: nn.Module, data: SequenceData, loss: object, options: FitOptions) -> None:
        super().__init__("cutting_plane", model, options, "it solves a QP")
        self.state = CuttingPlane(model, data, loss, options.lam, seed=options.seed,
                                  **dict(options.solver_options))
        self.task = self.state.task
        self.step, self.tol = self.state.iterate, self.state.tol
