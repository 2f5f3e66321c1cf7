"""Exact MAP labeling under connectivity constraints, by branch and cut (:func:`map_exact`).

The integer program is the local polytope of :mod:`structtorch.lp.relaxation` with integral node
variables (the marginalization rows then make each edge variable the product of its nodes'), plus
the vertex-separator inequalities of the connected labels (Nowozin 2009, eqs. 64-68), which are
too many to write down. They enter on demand:

1. the LP relaxation with connectivity cuts (Algorithm 7, :func:`structtorch.lp.map_lp`): its cuts
   and its optimum, an upper bound; where its solution is integral it is the MAP, and the search
   ends;
2. otherwise HiGHS's branch and cut solves the integer program over the cuts found so far; the
   separation routine checks its
   solution, and the violated cuts join the program for the next solve, until a solution keeps
   every constraint.

Every labeling met on the way is made connected by :func:`structtorch.lp.round_connected` and
scored, so a time or node limit returns the best connected labeling found with the bound of the
last solve (every program holds only valid cuts, so its bound is a bound on the constrained MAP)
and the gap between them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import highspy
import numpy as np
import torch
from scipy.sparse.csgraph import connected_components
from torch import Tensor

from .._checks import check_int
from ._highs import cost_scale
from ._options import check_connected, check_real, check_tol
from ._parallel import check_num_workers, parallel_map
from .graph import adjacency, check_graph_potentials
from .relaxation import _constraints, _Instance, _Options, _Problem, check_cuts
from .rounding import _round_one
from .separation import Separator

__all__ = ["map_exact", "ExactResult"]

MIP_REL_GAP = 1e-9
"""HiGHS's relative MIP gap (its default, 1e-4, would stop short of the optimum)."""


@dataclass
class ExactResult:
    """Solution of :func:`map_exact` for a batch of B instances on one graph.

    Attributes
    ----------
    labels : Tensor (B, V) int64
        The best labeling found that keeps every connectivity constraint (the MAP where
        ``optimal``).
    score : Tensor (B,)
        Its score (dtype and device of ``unary``; not differentiable: use
        :func:`structtorch.lp.labeling_score` for a gradient).
    bound : Tensor (B,)
        An upper bound on the score of every labeling that keeps the constraints.
    gap : Tensor (B,)
        ``bound - score`` (0 up to the solver's tolerance where ``optimal``).
    optimal : Tensor (B,) bool
        The search ended with a certificate: no limit stopped it.
    integral_lp : Tensor (B,) bool
        The LP relaxation with connectivity cuts was already integral (no branching needed).
    cuts : list of B lists of (label, i, j, separator)
        The connectivity cuts of the last program (reusable as ``cuts=`` on the same graph).
    solves : Tensor (B,) int64
        Branch-and-cut solves (0 where the LP was integral).
    timings : list of B dicts
        Seconds in "lp" (step 1), "mip" (HiGHS's branch and cut), "separation" and "rounding".
    """

    labels: Tensor
    score: Tensor
    bound: Tensor
    gap: Tensor
    optimal: Tensor
    integral_lp: Tensor
    cuts: list
    solves: Tensor
    timings: list = field(default_factory=list)


@dataclass
class _Search:
    """One instance's state: the incumbent (labels, score), the bound and the counts."""

    labels: np.ndarray
    score: float
    bound: float
    optimal: bool = False
    integral_lp: bool = False
    solves: int = 0
    cuts: list = field(default_factory=list)
    timings: dict = field(default_factory=lambda: {"lp": 0.0, "mip": 0.0, "separation": 0.0, "rounding": 0.0})


def _labels_of(x: np.ndarray, V: int, L: int) -> np.ndarray:
    return x[: V * L].reshape(V, L).argmax(1)


def _onehot(labels: np.ndarray, edges: np.ndarray, L: int) -> np.ndarray:
    """The program's variables (node then edge indicators) of a labeling."""
    V, E = len(labels), len(edges)
    x = np.zeros(V * L + E * L * L)
    x[np.arange(V) * L + labels] = 1.0
    if E:
        x[V * L + np.arange(E) * L * L + labels[edges[:, 0]] * L + labels[edges[:, 1]]] = 1.0
    return x


class _BranchAndCut:
    """:func:`map_exact` on one graph: what the instances share."""

    def __init__(self, problem: _Problem, edges: np.ndarray, time_limit: float | None, node_limit: int | None,
                 max_rounds: int) -> None:
        self.problem, self.edges = problem, edges
        self.adj = adjacency(torch.from_numpy(edges), problem.V).tocsr()
        self.time_limit, self.node_limit, self.max_rounds = time_limit, node_limit, max_rounds

    def score(self, cost: np.ndarray, labels: np.ndarray) -> float:
        return float(-cost @ _onehot(labels, self.edges, self.problem.L))

    def rounded(self, search: _Search, cost: np.ndarray, mu: np.ndarray) -> None:
        """Make the node variables ``mu`` (V, L) a connected labeling; keep it if it scores higher."""
        t0 = time.perf_counter()
        labels = _round_one(mu, self.adj, self.problem.labels)
        score = self.score(cost, labels)
        if score > search.score:
            search.labels, search.score = labels, score
        search.timings["rounding"] += time.perf_counter() - t0

    def solve(self, cost: np.ndarray, start: list) -> _Search:
        began = time.perf_counter()
        p, V, L = self.problem, self.problem.V, self.problem.L
        if V == 0:
            return _Search(np.zeros(0, dtype=np.int64), 0.0, 0.0, optimal=True, integral_lp=True)
        run = p.solve(cost, np.zeros(0), start)  # step 1: the LP with its cuts
        search = _Search(np.zeros(V, dtype=np.int64), -np.inf, float(-cost @ run.x), cuts=run.cuts)
        search.timings["lp"] = run.timings["lp"]
        search.timings["separation"] = run.timings["separation"]
        mu = run.x[: V * L].reshape(V, L)
        if run.converged and np.all((mu < 1e-6) | (mu > 1 - 1e-6)):
            search.labels, search.score = mu.argmax(1), float(-cost @ run.x)
            search.optimal = search.integral_lp = True
            return search
        self.rounded(search, cost, mu)
        scale = cost_scale(cost)
        inst = _Instance(cost / scale, p.A, p.rhs, 0)
        inst.h.changeColsIntegrality(V * L, np.arange(V * L, dtype=np.int32),
                                     np.full(V * L, highspy.HighsVarType.kInteger))
        inst.h.setOptionValue("mip_rel_gap", MIP_REL_GAP)
        if self.node_limit is not None:
            inst.h.setOptionValue("mip_max_nodes", self.node_limit)
        if run.cuts:
            inst.add_rows([p.row(c, i, j, S.numpy()) for c, i, j, S in run.cuts])
        while search.solves < self.max_rounds:
            if self.time_limit is not None:
                left = self.time_limit - (time.perf_counter() - began)
                if left <= 0:
                    break
                inst.h.setOptionValue("time_limit", left)
            x = self._mip(inst, search, cost, scale)
            if x is None:  # a limit stopped it before any solution
                break
            t0 = time.perf_counter()
            found = p.separate(x)
            search.timings["separation"] += time.perf_counter() - t0
            if not found:  # the program's solution keeps every constraint: optimal unless a limit stopped it
                search.optimal = inst.h.getModelStatus() == highspy.HighsModelStatus.kOptimal
                labels = _labels_of(x, V, L)
                score = self.score(cost, labels)
                if search.optimal or score > search.score:
                    search.labels, search.score = labels, score
                break
            self.rounded(search, cost, x[: V * L].reshape(V, L))
            inst.add_rows([p.row(*cut) for cut in found])
            search.cuts += [(c, i, j, torch.from_numpy(S).long()) for c, i, j, S in found]
        if search.optimal:
            search.bound = search.score
        return search

    def _mip(self, inst: _Instance, search: _Search, cost: np.ndarray, scale: float) -> np.ndarray | None:
        """One branch-and-cut solve; updates the bound; returns the solution (None where a limit
        stopped HiGHS before it found one). No start from the incumbent: after ``setSolution``,
        highspy 1.16 reported the start's values with another solution's objective."""
        t0 = time.perf_counter()
        inst.h.run()
        search.solves += 1
        search.timings["mip"] += time.perf_counter() - t0
        status = inst.h.getModelStatus()
        if status == highspy.HighsModelStatus.kInfeasible:
            raise ValueError(f"no labeling keeps every label of connected = {self.problem.labels} "
                             "connected: the graph has more components than labels")
        info = inst.h.getInfo()
        if np.isfinite(info.mip_dual_bound):
            search.bound = min(search.bound, -info.mip_dual_bound * scale)
        if info.primal_solution_status == 0:  # no solution
            return None
        return np.asarray(inst.h.getSolution().col_value)


def _check_feasible(edges: Tensor, V: int, L: int, hard: list[int]) -> None:
    """Some labeling keeps the constraints unless every label is connected and the graph has more
    components than labels (each label then lies in one component, and every component needs one)."""
    if len(hard) < L or V == 0:
        return
    count = connected_components(adjacency(edges, V), directed=False)[0]
    if count > L:
        raise ValueError(f"no labeling keeps every label of connected = {hard} connected: the graph has "
                         f"{count} components, more than the {L} labels")


def map_exact(
    unary: Tensor,
    pairwise: Tensor,
    edges: Tensor,
    *,
    connected: list[int] | None = None,
    time_limit: float | None = None,
    node_limit: int | None = None,
    max_rounds: int = 100,
    max_iter: int = 100,
    tol: float = 1e-6,
    cuts_per_round: int = 100,
    nested: int = 4,
    cuts: list | None = None,
    num_workers: int | None = None,
) -> ExactResult:
    """The highest-scoring labeling in which every label of ``connected`` forms a connected
    subgraph, by the LP relaxation with connectivity cuts and then branch and cut (HiGHS).

    Parameters
    ----------
    unary : Tensor (V, L) or (B, V, L)
    pairwise : Tensor (E, L, L) or (B, E, L, L)
        ``pairwise[e, s, t]`` scores label s at ``edges[e, 0]`` and t at ``edges[e, 1]``.
    edges : Tensor (E, 2) int64
        Undirected edges with i < j, no duplicates.
    connected : list of int, optional
        The labels whose nodes must form one connected subgraph (none: plain MAP).
    time_limit : float > 0, optional
        Seconds per instance; when it runs out, the best connected labeling found is returned with
        its bound and gap (``optimal`` False).
    node_limit : int >= 1, optional
        Branch-and-bound nodes per branch-and-cut solve (HiGHS's ``mip_max_nodes``), the same way.
    max_rounds : int >= 1
        Branch-and-cut solves per instance (each adds the cuts its solution violates).
    max_iter, tol, cuts_per_round, nested, cuts
        As for :func:`structtorch.lp.map_lp` (its first step).
    num_workers : int >= 1, optional
        Threads for the B instances (default ``torch.get_num_threads()``).

    Returns
    -------
    ExactResult
        B = 1 for unbatched input.

    Raises
    ------
    ValueError
        If no labeling keeps the constraints (every label connected on a graph with more
        components than labels).

    Examples
    --------
    >>> import torch
    >>> from structtorch import lp
    >>> edges = lp.grid_edges(1, 3)                       # a path 0 - 1 - 2
    >>> unary = torch.tensor([[0.0, 1.0], [0.0, -0.5], [0.0, 1.0]])
    >>> pairwise = torch.zeros(len(edges), 2, 2)
    >>> res = lp.map_exact(unary, pairwise, edges, connected=[1])
    >>> res.labels, res.score, bool(res.optimal)          # label 1 must be connected: all three
    (tensor([[1, 1, 1]]), tensor([1.5000]), True)

    Notes
    -----
    The integer program has V L integer variables: graphs of hundreds to a few thousand nodes
    solve in seconds to minutes where the LP is nearly integral; in the worst case branch and
    bound is exponential, hence ``time_limit``. For a fast connected labeling without a solver,
    round the LP (:func:`structtorch.lp.round_connected`).
    """
    unary_b, pairwise_b, edges = check_graph_potentials(unary, pairwise, edges)
    B, V, L = unary_b.shape
    hard, _ = check_connected(connected, None, L)
    if time_limit is not None:
        time_limit = check_real("time_limit", time_limit, minimum=0.0, strict=True)
    node_limit = None if node_limit is None else check_int("node_limit", node_limit, 1)
    options = _Options(check_int("max_iter", max_iter, 1), check_tol("tol", tol),
                       check_int("cuts_per_round", cuts_per_round, 1), check_int("nested", nested, 1))
    search = _BranchAndCut(
        _Problem(V, L, _constraints(V, L, edges), np.concatenate([np.ones(V), np.zeros(2 * len(edges) * L)]),
                 Separator.build(edges, V) if hard else None, hard, {}, options),
        edges.numpy(), time_limit, node_limit, check_int("max_rounds", max_rounds, 1))
    _check_feasible(edges, V, L, hard)
    start = check_cuts(cuts, B, V, L)
    workers = check_num_workers(num_workers)
    cost = -torch.cat([unary_b.reshape(B, V * L), pairwise_b.reshape(B, -1)], 1)
    cost = cost.detach().double().cpu().numpy()
    found = parallel_map(lambda b: search.solve(cost[b], start[b]), range(B), workers)
    ref = unary_b
    as_ref = {"dtype": ref.dtype, "device": ref.device}
    score = torch.tensor([f.score for f in found], **as_ref)
    bound = torch.tensor([f.bound for f in found], **as_ref)
    labels = torch.from_numpy(np.stack([f.labels for f in found]) if found else np.zeros((0, V), np.int64))
    return ExactResult(labels.long().to(ref.device), score, bound, (bound - score).clamp(min=0),
                       torch.tensor([f.optimal for f in found], dtype=torch.bool, device=ref.device),
                       torch.tensor([f.integral_lp for f in found], dtype=torch.bool, device=ref.device),
                       [f.cuts for f in found],
                       torch.tensor([f.solves for f in found], dtype=torch.long, device=ref.device),
                       [f.timings for f in found])
