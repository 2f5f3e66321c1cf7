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
A^T alpha / lambda), moves from the best iterate so far towards it (``step``, an in-out cut point)
and runs the oracle over the training data there: that gives the true primal of the point and the
new planes. The model keeps the iterate of lowest primal so far. The dual value of the
working set's QP is a lower bound on the optimum, so ``gap = best primal - dual`` certifies the
model's weights; training stops once ``gap <= tol``. Planes whose dual variable stays 0 for
``inactive`` iterations leave the working set.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch
from torch import Tensor, nn

from ..._checks import check_int, check_number
from ...losses import StructuredHingeLoss
from ...sequence_data import SequenceData
from ..task import Task
from ._group import Group
from ._linear import GapSolver, ParameterVector, check_linear
from .base import FitOptions, solver_kwargs
from .working_set import WorkingSet

__all__ = ["CuttingPlane", "CuttingPlaneSolver", "WorkingSet"]

VARIANTS = ("one_slack", "n_slack")
ONE_SLACK_POSITIONS = 2**20
"""Positions (sequences x their padded length) per oracle call of one_slack on chain potentials,
by default."""
ONE_SLACK_STEP = 0.15
"""one_slack's default ``step`` (see :class:`CuttingPlane`)."""
CALL_POSITIONS = 2000
"""What one more oracle call of one_slack costs beyond its positions, in positions, plus one per
``CALL_WEIGHTS`` weights (its backward writes a dense gradient of every weight): on the
CoNLL-2000-sized chunking data (2.5 M weights, lengths 1-47, 420,000 padded positions in one call)
one call took 0.195 s, two calls of the sentences sorted by length (273,000 positions) 0.121 s,
four 0.137 s, eight 0.179 s."""
CALL_WEIGHTS = 100


def length_chunks(lengths: Tensor, cap: int, overhead: int) -> list[Tensor]:
    """Indices of ``lengths`` (B,) sorted by length and cut into contiguous chunks that minimize the
    padded positions (each chunk's size times its longest length) plus ``overhead`` per chunk
    (:func:`cheapest_cuts`), those over ``cap`` positions split evenly into parts of at most
    ``cap`` (of one sequence where a sequence is longer)."""
    order, cuts = cheapest_cuts(lengths, overhead)
    chunks = []
    for start, stop, longest in cuts:
        most = max(1, cap // longest)  # sequences per part
        chunks.extend(order[start:stop].tensor_split(-(-(stop - start) // most)))
    return chunks


def cheapest_cuts(lengths: Tensor, overhead: int) -> tuple[Tensor, list[tuple[int, int, int]]]:
    """The order sorting ``lengths`` (B,) and the contiguous chunks (start, stop, longest length at
    least 1) of the sorted sequences of least cost, the sum over chunks of size x longest length +
    ``overhead``: a dynamic program over the distinct lengths (a cut between equal lengths never
    helps), quadratic in their number."""
    order = torch.sort(lengths.cpu(), stable=True).indices
    values, counts = torch.unique_consecutive(lengths.cpu()[order], return_counts=True)
    ends = counts.cumsum(0).double()  # sequences up to and including each distinct length
    starts = torch.cat([ends.new_zeros(1), ends[:-1]])
    longest = values.clamp(min=1).double()
    best = torch.zeros(len(ends) + 1, dtype=torch.float64)  # best[j]: the cost of the first j groups
    cut = [0]  # cut[j]: the group where the last chunk of the first j groups starts
    for j in range(1, len(ends) + 1):
        costs = best[:j] + (ends[j - 1] - starts[:j]) * longest[j - 1] + overhead
        i = int(costs.argmin())
        best[j] = costs[i]
        cut.append(i)
    ends_, longest_ = [0, *ends.long().tolist()], longest.long().tolist()
    cuts, j = [], len(ends_) - 1
    while j:
        cuts.append((ends_[cut[j]], ends_[j], longest_[j - 1]))
        j = cut[j]
    return order, cuts[::-1]


def _trimmed(data: SequenceData) -> SequenceData:
    """``data`` without the padding beyond its longest sequence (where its features are time-aligned
    with its labels; constituency trees' spans (B, T, T, N) along both position dimensions)."""
    T = int(data.lengths.max()) if len(data) else 0
    if data.x.dim() < 2 or data.x.shape[1] != data.labels.shape[1] or T >= data.labels.shape[1]:
        return data
    def cut(x: Tensor | None) -> Tensor | None:
        return None if x is None else x[:, :T]

    labels = data.labels[:, :T, :T] if data.labels.dim() == 4 else data.labels[:, :T]
    return SequenceData(data.x[:, :T], labels, data.lengths, cut(data.starts), cut(data.cost))


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
    rtol : float
        Also stop when primal - dual <= rtol * primal (relative; default 0: off).
    inactive : int
        Iterations a plane may stay unused (alpha = 0) before it leaves the working set.
    batch_size : int, optional
        Sequences per oracle call, in order. Default: one_slack on chain potentials sorts the
        sequences by length and calls the oracle on a few chunks of similar lengths (each up to
        ``ONE_SLACK_POSITIONS`` padded positions; :func:`length_chunks`), on structures 256 per
        call; n_slack (each sequence's plane from one backward pass vectorized over the batch,
        whose cost grows with the batch squared) 32 for chain potentials, 1 for structures.
    margin : float
        n_slack adds a sequence's plane only if it is violated by more than this (relative to
        tol; default: tol).
    step : float, optional
        In (0, 1]: the oracle runs at ``best + step * (w_QP - best)``, between the best iterate
        so far and the working set's solution (an in-out, or OCAS, cut point: Ben-Ameur and Neto
        2007, Franc and Sonnenburg 2009), not at ``w_QP`` itself (``step=1``, the classic method).
        Every plane is valid wherever it is taken, so the dual bound and the certificate are
        unchanged; the planes near the best iterate make the model accurate where the optimum is.
        Default 0.15 for one_slack, 1 for n_slack. To a relative gap of 1e-3, one_slack took, at
        steps 1 / 0.5 / 0.3 / 0.15: 755 / 519 / 467 / 438 iterations on 1,000 chunking sentences
        (C = 0.1, margin rescaling; 485 at 0.07), 476 / 398 / 366 at 0.5 / 0.3 / 0.15 on all 8,936,
        2,183 / 434 / 292 at 1 / 0.3 / 0.15 on ``make_tagging_data(256)`` under slack rescaling;
        n_slack took 15 / 18 (margin) and 19 / 24 (slack) at 1 / 0.15 there.
    """

    def __init__(self, model: nn.Module, data: SequenceData, loss: StructuredHingeLoss, lam: float, *,
                 variant: str = "one_slack", tol: float = 1e-3, rtol: float = 0.0, inactive: int = 10,
                 batch_size: int | None = None, margin: float | None = None, step: float | None = None,
                 seed: int = 0, group: Group | None = None) -> None:
        if variant not in VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
        if lam <= 0:
            raise ValueError("solver='cutting_plane' needs a regularizer: C > 0 or l2 > 0")
        self.task = Task(model, _hinge(loss))
        self.data, self.lam, self.variant, self.group = data, float(lam), variant, group or Group()
        self.tol = check_number("tol", tol, low=0.0)
        self.rtol = check_number("rtol", rtol, low=0.0)
        self.inactive = check_int("inactive", inactive, 1)
        if batch_size is not None:
            check_int("batch_size", batch_size, 1)
        step = (ONE_SLACK_STEP if variant == "one_slack" else 1.0) if step is None else step
        self.step = check_number("step", step, low=0.0, high=1.0, open_low=True)
        if margin is not None and variant == "one_slack":
            raise ValueError("margin is an option of variant='n_slack' (the violation a sequence's plane "
                             "needs to enter); one_slack adds its one plane per iteration always")
        self.margin = self.tol if margin is None else check_number("margin", margin, low=0.0)
        self.vector = ParameterVector(self.task.parameters)
        self.structure = self.task.returns_structure(data.batch(torch.arange(min(len(data), 1))))
        self.batch_size = batch_size or (1 if self.structure else 32)  # n_slack's
        if variant == "one_slack":
            self.batches = self._one_slack_batches(batch_size)
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
        self.improved, self.previous_dual = True, -float("inf")  # did the last oracle point lower the primal

    def _planes(self, batches: list[SequenceData]) -> tuple[Tensor, Tensor]:
        """At the loaded w, the hinges' sum over ``batches`` (1,) and its gradient (d,), float64:
        one backward pass through every batch's oracle call (the weights' gradients of the calls
        add up inside it, not as one dense vector each)."""
        with torch.enable_grad():
            total = sum(self.task.batch_loss(batch) * len(batch) for batch in batches)
            if not isinstance(total, Tensor):  # no batch: an empty share
                total = torch.zeros((), dtype=torch.float64, device=self.vector.device)
            grad = self.vector.grad(total)
        return total.detach().double().reshape(1), grad

    def _one_slack_batches(self, batch_size: int | None) -> list[SequenceData]:
        """This process's share of the sequences in the batches of one_slack's oracle calls: with
        ``batch_size``, that many sequences per call, in order; by default, for chain potentials,
        the sequences sorted by length in the chunks of :func:`length_chunks` (each trimmed to its
        longest length: the padding beyond it costs time in every call), for structures 256 per
        call. Contiguous parts of the data are views, not copies."""
        data, mine = self.data, self.group.share(len(self.data))
        if batch_size is not None or self.structure:
            return [self._rows(idx) for idx in mine.split(batch_size or 256)]
        chunks = length_chunks(data.lengths[mine], ONE_SLACK_POSITIONS,
                               CALL_POSITIONS + self.vector.d // CALL_WEIGHTS)
        if len(chunks) <= 1:
            return [self._rows(mine)]
        return [_trimmed(data.batch(mine[idx])) for idx in chunks]

    def _rows(self, idx: Tensor) -> SequenceData:
        """``data[idx]`` for a contiguous range ``idx`` (possibly empty): views of the data."""
        if len(idx) == len(self.data):
            return self.data
        start = int(idx[0]) if len(idx) else 0
        return self.data.batch(slice(start, start + len(idx)))

    def _sequence_planes(self, idx: Tensor) -> tuple[Tensor, Tensor]:
        """At the loaded w, each hinge of ``data[idx]`` (B,) and its gradient (B, d), float64, from one
        batched oracle call."""
        with torch.enable_grad():
            values = self.task.sequence_losses(self.data.batch(idx))
            grads = self.vector.jacobian(values)
        return values.detach().double(), grads

    def _sparse(self, grads: list[Tensor]) -> sp.csr_array:
        if not grads:
            return sp.csr_array((0, self.vector.d))
        return sp.csr_array(torch.stack([-g for g in grads]).cpu().numpy())

    def _oracle(self) -> tuple[float, list[int], np.ndarray, sp.csr_array]:
        """The mean hinge at the loaded w and the planes to add (owners, c, rows a; on rank 0 only,
        under torch.distributed): this process runs the oracle on its share of the sequences."""
        w, n = self.w, len(self.data)
        mine = self.group.share(n)
        self.oracle_calls += n
        if self.variant == "one_slack":
            # chain potentials: one backward through every call; structures: one each (memory)
            groups = ([[b] for b in self.batches] if self.structure else [self.batches]) or [[]]
            value, grad = self._planes(groups[0])
            for group in groups[1:]:
                more = self._planes(group)
                value, grad = value + more[0], grad.add_(more[1])
            mean = float(self.group.sum(value)) / n
            a = self.group.sum(grad).div_(-n)
            return mean, [0], np.array([mean + float(w @ a)]), sp.csr_array(a.cpu().numpy()[None])
        owners, consts, rows = [], [], []
        hinges = torch.zeros(n, dtype=torch.float64, device=w.device)
        for idx in mine.split(self.batch_size):
            values, grads = self._sequence_planes(idx)
            hinges[idx] = values
            for i, value, g in zip(idx.tolist(), values.tolist(), grads, strict=True):
                if value > self.slacks[i] + self.margin:
                    owners.append(i)
                    consts.append(value - float(w @ g))
                    rows.append(g)
        parts = self.group.gather((owners, np.asarray(consts, dtype=np.float64), self._sparse(rows)))
        mean = float(self.group.sum(hinges).mean())
        if not parts:  # not rank 0: the planes went there
            return mean, [], np.zeros(0), self._sparse([])
        return (mean, [i for part in parts for i in part[0]], np.concatenate([part[1] for part in parts]),
                sp.vstack([part[2] for part in parts], format="csr"))

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

    def state_dict(self) -> dict[str, Any]:
        """The working set (:meth:`WorkingSet.state_dict`), the iterate, the best one and the counts."""
        return {"set": self.set.state_dict(), "w": self.w, "best": self.best,
                "slacks": torch.from_numpy(self.slacks.copy()), "oracle_calls": self.oracle_calls,
                "improved": self.improved, "previous_dual": self.previous_dual}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        dev = self.vector.device
        self.set.load_state_dict(state["set"])
        self.w = state["w"].to(dev)
        self.best = (float(state["best"][0]), state["best"][1].to(dev))
        self.slacks = state["slacks"].numpy().copy()
        self.oracle_calls = int(state["oracle_calls"])
        self.improved = bool(state.get("improved", True))
        self.previous_dual = float(state.get("previous_dual", -float("inf")))

    def _oracle_point(self, target: Tensor, stalled: bool) -> Tensor:
        """Load the point where the oracle runs, ``step`` of the way from the best iterate to
        ``target`` (the QP's w; all of it at the first iteration, when ``stalled``, or where the
        step rounds back to the best weights in the parameters' dtype: a plane near the best
        weights that neither lowers the primal nor raises the dual bound, as in float32 near the
        optimum, would come again and again), and return it as loaded (e.g. rounded to float32):
        the weights the primal certifies."""
        if self.step < 1 and self.best[0] < float("inf") and not stalled:
            self.vector.load(torch.lerp(self.best[1], target, self.step))
            point = self.vector.current()
            if not torch.equal(point, self.best[1]):
                return point
        self.vector.load(target)
        return self.vector.current()

    def iterate(self) -> dict[str, float]:
        """Solve the dual over the working set, load its w and run the oracle there; the model then
        holds the best weights so far (the lowest primal). Returns their record: ``objective``
        (their primal), ``dual`` (the working set's, a lower bound on the optimum), ``gap``,
        ``constraints``, ``oracle_calls``, ``qp_time``. Under torch.distributed rank 0 solves the
        QP and sends w, every process runs the oracle on its share, and rank 0 gathers the planes:
        every process returns the same record and holds the same weights."""
        device, leader = self.vector.device, self.group.leader
        head = torch.zeros(1 + self.vector.d, dtype=torch.float64, device=device)  # (dual, w)
        if leader:
            head[0] = self.set.solve()
            head[1:] = torch.as_tensor(self.set.weights(), dtype=torch.float64).to(device)
        dual = float(self.group.broadcast(head)[0])
        stalled = not self.improved and dual <= self.previous_dual  # the last null step raised no bound
        self.w = self._oracle_point(head[1:], stalled)
        self.previous_dual = dual

        if self.variant == "n_slack":
            slacks = torch.from_numpy(self._slacks()) if leader else torch.zeros(len(self.data),
                                                                                  dtype=torch.float64)
            self.slacks = self.group.broadcast(slacks.to(device)).cpu().numpy()
        hinge, owners, c, rows = self._oracle()
        primal = 0.5 * self.lam * float(self.w @ self.w) + hinge
        self.improved = primal < self.best[0]
        if self.improved:
            self.best = (primal, self.w)
        else:  # the primal is not monotone: keep the best weights
            self.vector.load(self.best[1])
        counts = torch.zeros(2, dtype=torch.float64, device=device)  # (constraints, qp_time)
        if leader:
            self.set.add(owners, c, rows)
            self.set.prune(self.inactive)
            counts[0], counts[1] = len(self.set), self.set.qp_time
        constraints, qp_time = self.group.broadcast(counts).tolist()
        return {"objective": self.best[0], "dual": dual, "gap": self.best[0] - dual,
                "constraints": constraints, "oracle_calls": float(self.oracle_calls), "qp_time": qp_time}


class CuttingPlaneSolver(GapSolver):
    """``solver="cutting_plane"`` of :func:`structtorch.train.fit`: one epoch is one iteration
    of :class:`CuttingPlane` (a dual QP and one oracle pass); training stops once the duality gap
    is at most ``tol``.

    ``options.solver_options`` are the keyword options of :class:`CuttingPlane` (``variant``,
    ``tol``, ``rtol``, ``inactive``, ``batch_size``, ``margin``, ``step``). Records ``objective``
    (the primal of the loaded weights), ``dual``, ``gap``, ``constraints`` (working-set size),
    ``oracle_calls`` (cumulative, in sequences), ``qp_time`` and ``time`` (cumulative seconds).
    """

    records = {"objective": "min", "dual": "max", "gap": "min", "constraints": "min", "oracle_calls": "min",
               "qp_time": "max", "time": "max"}

    def __init__(self, model: nn.Module, data: SequenceData, loss: object, options: FitOptions) -> None:
        super().__init__("cutting_plane", model, options, "it solves a QP", distributed=True)
        self.state = CuttingPlane(model, data, loss, options.lam, seed=options.seed,
                                  group=Group(options.rank, options.world),
                                  **solver_kwargs(options, CuttingPlane, "cutting_plane", ("seed", "group")))
        self.task = self.state.task
        self.step = self.state.iterate
