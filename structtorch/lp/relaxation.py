"""MAP inference by the LP relaxation over the local polytope, with connectivity cutting planes.

Variables mu_i(s) (V x L) and mu_ij(s, t) (E x L x L) in [0, 1]; maximize

    sum_i sum_s unary[i, s] mu_i(s) + sum_e sum_{s,t} pairwise[e, s, t] mu_e(s, t)

subject to sum_s mu_i(s) = 1 and the marginalization constraints of every edge (digest eqs.
59-61, relaxed). ``connected`` labels add the vertex-separator inequalities of their label planes
on demand (Algorithm 7: solve, separate, add the violated cuts, re-solve with a warm-started dual
simplex); ``connected_soft`` labels add them with one slack s_c >= 0 per label that the objective
charges ``weight * s_c`` (the soft connectivity potential). The solver is HiGHS (highspy).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field
from numbers import Integral

import highspy
import numpy as np
import scipy.sparse as sp
import torch
from torch import Tensor

from .._checks import check_int
from ._highs import cost_scale, new_highs
from ._options import check_connected, check_costs, check_tol, is_integer_dtype
from ._parallel import check_num_workers, parallel_map
from .graph import check_graph_potentials
from .rounding import fractional, fractional_nodes
from .separation import Separator

__all__ = ["map_lp", "LPResult", "lp_score", "WarmStart"]


@dataclass
class LPResult:
    """Solution of :func:`map_lp` for a batch of B instances on one graph.

    Attributes
    ----------
    mu : Tensor (B, V, L)
        Node variables (detached; dtype and device of ``unary``).
    mu_edges : Tensor (B, E, L, L)
        Edge variables.
    score : Tensor (B,)
        The LP optimum, differentiable w.r.t. ``unary``, ``pairwise`` (and soft weights given as
        tensors): by Danskin its gradient is ``mu`` / ``mu_edges``.
    integral : Tensor (B,) bool
        All variables within 1e-6 of 0 or 1 (with ``converged``, ``mu`` is then the exact
        constrained MAP). Where it is False under connectivity, the largest marginal
        (:func:`structtorch.lp.round_labels`) may break the constraint; two ways out:
        :func:`structtorch.lp.round_connected` (fast, a rounding that keeps every constraint;
        compare its :func:`structtorch.lp.labeling_score` with ``score``, an upper bound) and
        :func:`structtorch.lp.map_exact` (the exact MAP by branch and cut, with a certified gap).
        ``str(result)`` says the same.
    fractional_fraction : Tensor (B,)
        Fraction of nodes with a fractional variable.
    cuts : list of B lists of (label, i, j, separator)
        The connectivity cuts added, with ``separator`` a ``(|S|,)`` int64 tensor.
    iterations : Tensor (B,) int64
        LP solves per instance.
    converged : Tensor (B,) bool
        The separation oracle found no violated cut in the last solution (False when ``max_iter``
        stopped the loop); always True without connectivity labels.
    slack : Tensor (B, C_soft)
        The soft-connectivity slacks, in the order of ``connected_soft``.
    timings : list of B dicts
        Seconds spent in "lp" and "separation" (wall-clock time of the instance's own loop; with
        ``num_workers`` > 1 the instances overlap, and the sum exceeds the call's time).
    edges : Tensor (E, 2), cost : Tensor (B, n), connected : list of int
        The problem, for :func:`structtorch.lp.stability_range`: ``cost`` is the minimized energy
        -[unary, pairwise] over the n = V L + E L^2 variables, ``connected`` the hard labels.
    """

    mu: Tensor
    mu_edges: Tensor
    score: Tensor
    integral: Tensor
    fractional_fraction: Tensor
    cuts: list
    iterations: Tensor
    converged: Tensor
    slack: Tensor
    timings: list = field(default_factory=list)
    edges: Tensor | None = field(default=None, repr=False)
    cost: Tensor | None = field(default=None, repr=False)
    connected: list = field(default_factory=list)
    soft: bool = False

    def __str__(self) -> str:
        """A summary: integral instances, fractional nodes, convergence and, where fractional
        solutions came back under connectivity, the two ways to a connected labeling."""
        B = len(self.score)
        whole = int(self.integral.sum())
        text = (f"LPResult of {B} instance(s): {whole} integral, {B - whole} fractional (mean "
                f"{float(self.fractional_fraction.double().mean()) if B else 0.0:.0%} of nodes), "
                f"{int(self.converged.sum())} converged, {sum(len(c) for c in self.cuts)} cuts")
        if whole < B and (self.connected or self.soft):
            text += ("; a fractional solution is no connected labeling: lp.round_connected(result.mu, edges, "
                     "connected) rounds it keeping every constraint (compare lp.labeling_score with "
                     "result.score, an upper bound), lp.map_exact(...) solves exactly by branch and cut")
        return text


def _constraints(V: int, L: int, edges: Tensor) -> sp.csc_array:
    """Equality rows: normalization (V) and marginalization of every edge (2 E L)."""
    E = len(edges)
    nodes = np.arange(V * L).reshape(V, L)
    pair = V * L + np.arange(E * L * L).reshape(E, L, L)
    e = edges.numpy()
    rows, cols, vals = [np.repeat(np.arange(V), L)], [nodes.reshape(-1)], [np.ones(V * L)]
    r0 = V
    for side in (0, 1):  # sum_t mu_e(s, t) = mu_i(s); sum_s mu_e(s, t) = mu_j(t)
        row = r0 + np.arange(E * L).reshape(E, L)
        members = pair if side == 0 else pair.transpose(0, 2, 1)
        rows += [np.repeat(row.reshape(-1), L), row.reshape(-1)]
        cols += [members.reshape(-1), nodes[e[:, side]].reshape(-1)]
        vals += [np.ones(E * L * L), -np.ones(E * L)]
        r0 += E * L
    A = sp.coo_array((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                     shape=(r0, V * L + E * L * L))
    return A.tocsc()


def _weight(w) -> float:
    return float(w.detach()) if isinstance(w, Tensor) else float(w)


class _Instance:
    """One LP with its cut rows, solved and re-solved by HiGHS (the costs as given: callers scale
    them, see :mod:`structtorch.lp._highs`)."""

    def __init__(self, cost: np.ndarray, A: sp.csc_array, rhs: np.ndarray, num_slack: int,
                 row_lower: np.ndarray | None = None):
        self.h = new_highs()
        lp = highspy.HighsLp()
        n = A.shape[1] + num_slack
        lp.num_col_, lp.num_row_ = n, A.shape[0]
        lp.col_cost_ = cost
        upper = np.concatenate([np.ones(A.shape[1]), np.full(num_slack, highspy.kHighsInf)])
        lp.col_lower_, lp.col_upper_ = np.zeros(n), upper
        lp.row_lower_, lp.row_upper_ = rhs if row_lower is None else row_lower, rhs
        full = sp.hstack([A, sp.csc_array((A.shape[0], num_slack))]).tocsc() if num_slack else A
        lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        lp.a_matrix_.start_, lp.a_matrix_.index_, lp.a_matrix_.value_ = full.indptr, full.indices, full.data
        lp.a_matrix_.num_col_, lp.a_matrix_.num_row_ = n, A.shape[0]
        self.h.passModel(lp)
        self.base = A.shape[0]  # rows before the added ones
        self.added_upper = np.zeros(0)  # upper bounds of the added rows
        self.row_value = np.zeros(0)  # the rows' activities at the last solution

    def set_cost(self, cost: np.ndarray) -> None:
        """New costs for every column (rows, bounds and the basis stay: the next solve starts there)."""
        self.h.changeColsCost(len(cost), np.arange(len(cost), dtype=np.int32), cost)

    def solve(self) -> np.ndarray:
        self.h.run()
        status = self.h.getModelStatus()
        if status != highspy.HighsModelStatus.kOptimal:
            raise RuntimeError(f"the LP relaxation did not solve: HiGHS status "
                               f"'{self.h.modelStatusToString(status)}'")
        solution = self.h.getSolution()
        self.row_value = np.asarray(solution.row_value)
        return np.asarray(solution.col_value)

    def delete_added(self, rows: np.ndarray) -> None:
        """Remove added rows (positions among them); where they are basic the basis stays valid."""
        self.h.deleteRows(len(rows), (self.base + np.asarray(rows)).astype(np.int32))
        self.added_upper = np.delete(self.added_upper, rows)

    def add_rows(self, rows: list[tuple[np.ndarray, np.ndarray]], upper: np.ndarray | None = None) -> None:
        """Add rows ``val . x[idx] <= upper`` (default 1)."""
        m = row_matrix(rows, self.h.getNumCol())
        k = len(rows)
        upper = np.ones(k) if upper is None else np.asarray(upper, dtype=np.float64)
        self.added_upper = np.concatenate([self.added_upper, upper])
        self.h.addRows(k, np.full(k, -highspy.kHighsInf), upper, m.nnz, m.indptr[:-1].astype(np.int32),
                       m.indices.astype(np.int32), m.data)


def row_matrix(rows: list[tuple[np.ndarray, np.ndarray]], width: int) -> sp.csr_array:
    """(len(rows), width) float64 CSR matrix of sparse rows given as (indices, values)."""
    indptr = np.concatenate([[0], np.cumsum([len(idx) for idx, _ in rows])])
    values = np.concatenate([val for _, val in rows]).astype(np.float64)
    columns = np.concatenate([idx for idx, _ in rows]).astype(np.int64)
    return sp.csr_array((values, columns, indptr), shape=(len(rows), width))


def _cut_row(c: int, i: int, j: int, S: np.ndarray, L: int,
             slack: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Column indices and coefficients of mu_i(c) + mu_j(c) - sum_S mu_k(c) (- s_c) <= 1."""
    idx = np.concatenate([[i * L + c, j * L + c], np.asarray(S, dtype=np.int64) * L + c])
    val = np.concatenate([[1.0, 1.0], -np.ones(len(S))])
    return (idx, val) if slack is None else (np.append(idx, slack), np.append(val, -1.0))


_ROW_FORM = "(label, i, j, separator) with separator a 1-D integer tensor or list of node indices"


def _is_index(x) -> bool:
    if isinstance(x, Tensor):
        return x.dim() == 0 and is_integer_dtype(x.dtype)
    return isinstance(x, Integral) and not isinstance(x, bool)


def _separator(S) -> Tensor:
    """A cut row's separator as a sorted (|S|,) int64 CPU tensor without repeats (it is a set):
    integer entries only (a float tensor could hold NaN or fractions, which no node index is)."""
    if isinstance(S, np.ndarray):
        if S.dtype.kind not in "iu":
            raise TypeError(f"cuts separators must hold integer node indices, got dtype {S.dtype}")
        S = torch.from_numpy(S)
    if isinstance(S, Tensor):
        if not is_integer_dtype(S.dtype):
            raise TypeError(f"cuts separators must hold integer node indices, got dtype {S.dtype}")
        return torch.unique(S.long().reshape(-1).cpu())
    if not isinstance(S, (list, tuple)) or not all(_is_index(k) for k in S):
        raise TypeError(f"cuts separators must be integer tensors or lists of ints, got {S!r}")
    return torch.unique(torch.tensor([int(k) for k in S], dtype=torch.long))


def _check_row(row, V: int, L: int) -> tuple[int, int, int, Tensor]:
    if not isinstance(row, (tuple, list)) or len(row) != 4:
        raise ValueError(f"each row of cuts must be {_ROW_FORM}, got {row!r}")
    c, i, j, S = row
    if not all(_is_index(x) for x in (c, i, j)):
        raise TypeError(f"the label, i and j of a cuts row must be ints, got {row!r}")
    c, i, j, S = int(c), int(i), int(j), _separator(S)
    ok = 0 <= c < L and 0 <= i < V and 0 <= j < V and i != j
    ok = ok and (not len(S) or (int(S.min()) >= 0 and int(S.max()) < V and not bool(
        torch.isin(S, torch.tensor([i, j])).any())))
    if not ok:
        raise ValueError(f"cut rows must be (label in [0, {L}), i != j in [0, {V}), separator in "
                         f"[0, {V}) without i and j), got {row}")
    return c, i, j, S


def check_cuts(cuts, B: int, V: int, L: int) -> list[list]:
    """Cut rows (label, i, j, separator) as one list for all instances or one list per instance,
    validated; returns B lists with int labels/nodes and int64 separators."""
    if cuts is None:
        return [[] for _ in range(B)]
    if not isinstance(cuts, (list, tuple)):
        raise TypeError(f"cuts must be a list of rows {_ROW_FORM}, or a list of B such lists, got "
                        f"{type(cuts).__name__}")
    per_instance = len(cuts) > 0 and all(
        isinstance(rows, (list, tuple)) and all(isinstance(r, (list, tuple)) for r in rows) for rows in cuts)
    if not per_instance:
        return [[_check_row(row, V, L) for row in cuts]] * B
    if len(cuts) != B:
        raise ValueError(f"cuts given per instance must hold B = {B} lists of rows, got {len(cuts)}")
    return [[_check_row(row, V, L) for row in rows] for rows in cuts]


@dataclass
class _Options:
    max_iter: int
    tol: float
    cuts_per_round: int
    nested: int


@dataclass
class _Warm:
    """What one instance keeps between calls: its working set of cuts (the rows that bound the
    last LP solved, and those added after it), its pool of every cut found, and the LP over the
    working set itself (``lp``: the next call changes its costs and re-solves from its basis) or,
    once that is given up for memory, the LP's basis."""

    cuts: list
    basis: object = None  # highspy.HighsBasis over the base rows and ``cuts`` (when lp is None)
    pool: _CutPool | None = None  # every cut known for the instance (``cuts`` among them)
    lp: _Instance | None = None  # the live LP: its rows are the base rows, then ``cuts``

    @classmethod
    def of(cls, inst: _Instance, cuts: list, solved: int, pool: _CutPool) -> _Warm:
        """``inst`` kept, less the rows of cuts that are slack at its last solution (a row below
        its bound is basic, so the basis stays valid), and the pool of all cuts (the most recent
        ``MAX_POOL``). Cuts added after the last solve stay."""
        pool = pool.trimmed(MAX_POOL)
        activity = inst.row_value[inst.base:inst.base + solved]
        slack = np.flatnonzero(activity < inst.added_upper[:solved] - _SLACK)
        if len(slack):
            inst.delete_added(slack)
        dropped = set(slack.tolist())
        return cls([c for k, c in enumerate(cuts) if k not in dropped], None, pool, inst)

    def frozen(self) -> _Warm:
        """The state without its live LP: the LP's basis instead (about a millisecond)."""
        if self.lp is None:
            return self
        basis = self.lp.h.getBasis()
        return _Warm(self.cuts, basis if basis.valid else None, self.pool)

    def __getstate__(self) -> dict:
        """Pickled without the solver objects (the LP, its basis): the cuts and the pool."""
        return {**self.__dict__, "basis": None, "lp": None}


_SLACK = 1e-9  # a cut row further than this below its bound 1 is slack (and basic)


MAX_POOL = 20_000  # cuts a WarmStart keeps per instance


class _CutPool:
    """Every cut known for an instance, with its key and its row (a CSR matrix over the LP's
    columns, grown as cuts join): kept across calls in ``_Warm.pool``."""

    def __init__(self) -> None:
        self.cuts: list = []
        self.keys: list = []
        self.known: set = set()
        self.matrix: sp.csr_array | None = None
        self.rows = 0  # cuts that have their row in ``matrix``

    def add(self, cut: tuple, key: tuple) -> None:
        if key not in self.known:
            self.known.add(key)
            self.cuts.append(cut)
            self.keys.append(key)

    def rows_for(self, problem: _Problem, width: int) -> sp.csr_array | None:
        """The matrix of all cuts' rows, built for the cuts that joined since the last call."""
        if len(self.cuts) > self.rows:
            new = row_matrix([problem.row(c, i, j, S.numpy()) for c, i, j, S in self.cuts[self.rows:]], width)
            self.matrix = new if self.matrix is None else sp.vstack([self.matrix, new]).tocsr()
            self.rows = len(self.cuts)
        return self.matrix

    def trimmed(self, limit: int) -> _CutPool:
        """The pool of the most recent ``limit`` cuts."""
        if len(self.cuts) <= limit:
            return self
        out = _CutPool()
        out.cuts, out.keys = self.cuts[-limit:], self.keys[-limit:]
        out.known = set(out.keys)
        if self.matrix is not None and self.rows == len(self.cuts):
            out.matrix, out.rows = self.matrix[-limit:], limit
        return out

    def __len__(self) -> int:
        return len(self.cuts)


class _Pool:
    """One call's view of an instance's cut pool: which cuts are in the LP, and the pool's
    violated cuts outside it, checked against each LP solution (one sparse product) before the
    separation oracle runs: most cuts an instance needs in a later epoch were found in an earlier
    one."""

    def __init__(self, problem: _Problem, pool: _CutPool, in_lp: list) -> None:
        self.problem, self.pool = problem, pool
        self.in_lp = set()
        self.enter(in_lp)

    def enter(self, cuts: list) -> None:
        """Cuts added to the LP (new ones join the pool)."""
        for cut in cuts:
            key = _key(cut)
            self.in_lp.add(key)
            self.pool.add(cut, key)

    def violated(self, x: np.ndarray) -> list:
        """The pool's cuts outside the LP that x violates by more than the tolerance, most violated
        first, at most as many as a separation round adds."""
        p, o = self.problem, self.problem.options
        matrix = self.pool.rows_for(p, len(x))
        if matrix is None:
            return []
        violation = matrix @ x - 1.0
        candidates = np.flatnonzero(violation > o.tol)
        out = []
        for k in candidates[np.argsort(-violation[candidates])]:
            if self.pool.keys[k] not in self.in_lp:
                out.append(self.pool.cuts[k])
                if len(out) >= o.cuts_per_round * o.nested * len(p.labels):
                    break
        return out


def _key(cut: tuple) -> tuple:
    c, i, j, S = cut
    return c, i, j, S.numpy().tobytes()


@dataclass
class _Run:
    """One instance's cutting-plane loop: the last solution, the cuts, LP solves, convergence."""

    x: np.ndarray
    cuts: list
    solves: int
    converged: bool
    timings: dict
    warm: _Warm | None = None


class _TwoLabels:
    """The local polytope of two labels in y_i = mu_i(1) and z_e = mu_e(1, 1): mu_i(0) = 1 - y_i,
    mu_e(1, 0) = y_i - z_e, mu_e(0, 1) = y_j - z_e and mu_e(0, 0) = 1 - y_i - y_j + z_e, which are
    non-negative where z_e <= y_i, z_e <= y_j and y_i + y_j - z_e <= 1 (0 <= z_e <= 1 are bounds).
    An affine bijection of the full LP's feasible set (the same optima and vertices) with a third
    of its columns and no equality rows: HiGHS re-solves it 1.3-2x faster. Full columns are
    ``M @ x + m0`` of the reduced ones x (slack columns map to themselves)."""

    def __init__(self, V: int, edges: Tensor, num_slack: int) -> None:
        E, e = len(edges), edges.numpy()
        nodes, pair = np.arange(2 * V).reshape(V, 2), 2 * V + np.arange(4 * E).reshape(E, 2, 2)
        y_i, y_j, z = e[:, 0], e[:, 1], V + np.arange(E)
        n, width = 2 * V + 4 * E, V + E
        full, reduced, coef = [], [], []
        for rows, cols, sign in [(nodes[:, 1], np.arange(V), 1), (nodes[:, 0], np.arange(V), -1),
                                 (pair[:, 1, 1], z, 1), (pair[:, 1, 0], y_i, 1), (pair[:, 1, 0], z, -1),
                                 (pair[:, 0, 1], y_j, 1), (pair[:, 0, 1], z, -1), (pair[:, 0, 0], y_i, -1),
                                 (pair[:, 0, 0], y_j, -1), (pair[:, 0, 0], z, 1),
                                 (n + np.arange(num_slack), width + np.arange(num_slack), 1)]:
            full.append(rows)
            reduced.append(cols)
            coef.append(np.full(len(rows), float(sign)))
        shape = (n + num_slack, width + num_slack)
        entries = (np.concatenate(full), np.concatenate(reduced))
        self.M = sp.csr_array((np.concatenate(coef), entries), shape=shape)
        self.MT = self.M.T.tocsr()
        self.m0 = np.zeros(n + num_slack)
        self.m0[nodes[:, 0]] = self.m0[pair[:, 0, 0]] = 1.0
        r = np.arange(E)  # rows: z - y_i <= 0, z - y_j <= 0, y_i + y_j - z <= 1
        rows = np.concatenate([r, E + r, 2 * E + r, r, E + r, 2 * E + r, 2 * E + r])
        cols = np.concatenate([z, z, z, y_i, y_j, y_i, y_j])
        vals = np.repeat([1.0, 1.0, -1.0, -1.0, -1.0, 1.0, 1.0], E)
        self.A = sp.csc_array((vals, (rows, cols)), shape=(3 * E, width))
        self.upper = np.concatenate([np.zeros(2 * E), np.ones(E)])
        self.lower = np.full(3 * E, -highspy.kHighsInf)

    def cost(self, cost: np.ndarray) -> np.ndarray:
        return self.MT @ cost

    def expand(self, x: np.ndarray) -> np.ndarray:
        return self.M @ x + self.m0

    def rows(self, rows: list) -> tuple[list, np.ndarray]:
        """Rows ``val . x_full[idx] <= 1`` as rows of the reduced columns, with their bounds."""
        R = row_matrix(rows, self.M.shape[0])
        out = (R @ self.M).tocsr()
        bounds = zip(out.indptr[:-1], out.indptr[1:], strict=True)
        return [(out.indices[a:b], out.data[a:b]) for a, b in bounds], 1.0 - R @ self.m0


@dataclass
class _Problem:
    """The local polytope of one graph with the connectivity labels: what every instance shares."""

    V: int
    L: int
    A: sp.csc_array
    rhs: np.ndarray
    sep: Separator | None
    labels: list[int]  # hard, then soft
    slack_col: dict[int, int]  # soft label -> its slack column
    options: _Options
    reduced: _TwoLabels | None = None  # the form HiGHS solves, when not the full local polytope

    def new_lp(self, cost: np.ndarray) -> _Instance:
        """The LP of one instance with (full) costs ``cost``, in the form HiGHS solves. Without
        presolve: it finds nothing to remove from a local polytope and costs a third of a cold
        solve (16 x 16 and 32 x 32 grids)."""
        r = self.reduced
        inst = (_Instance(cost, self.A, self.rhs, len(self.slack_col)) if r is None else
                _Instance(r.cost(cost), r.A, r.upper, len(self.slack_col), r.lower))
        inst.h.setOptionValue("presolve", "off")
        return inst

    def set_cost(self, inst: _Instance, cost: np.ndarray) -> None:
        inst.set_cost(cost if self.reduced is None else self.reduced.cost(cost))

    def solve_lp(self, inst: _Instance) -> np.ndarray:
        """The solution of ``inst`` in the full LP's columns."""
        x = inst.solve()
        return x if self.reduced is None else self.reduced.expand(x)

    def add_cuts(self, inst: _Instance, cuts: list) -> None:
        rows = [self.row(c, i, j, S.numpy()) for c, i, j, S in cuts]
        inst.add_rows(*((rows, None) if self.reduced is None else self.reduced.rows(rows)))

    def separate(self, x: np.ndarray) -> list[tuple[int, int, int, np.ndarray]]:
        """Violated connectivity cuts (label, i, j, separator) of the solution x."""
        V, L, o = self.V, self.L, self.options
        found = []
        for c in self.labels:
            y = np.clip(x[np.arange(V) * L + c], 0.0, 1.0)
            slack = x[self.slack_col[c]] if c in self.slack_col else 0.0
            found += [(c, i, j, S) for _, i, j, S in self.sep.violated(y, o.tol, o.cuts_per_round, o.nested,
                                                                         offset=slack)]
        return found

    def row(self, c: int, i: int, j: int, S: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return _cut_row(c, i, j, S, self.L, self.slack_col.get(c))

    def solve(self, cost: np.ndarray, soft_w: np.ndarray, start: list, warm: _Warm | None = None,
              keep: bool = False) -> _Run:
        """Algorithm 7 for one instance, on the costs scaled to [-1, 1] (the solution is that of the
        unscaled LP; HiGHS's absolute tolerances then act relative to the largest cost). ``warm``:
        the working set, basis and cut pool of earlier calls on this instance: the working set is
        solved from the first LP on (before ``start``), and each round adds the pool's violated
        cuts where there are any, the separation oracle's otherwise (so a converged run is one
        whose last solution the oracle passed, as cold); ``keep``: return what to keep in
        ``run.warm``."""
        if self.V == 0:  # nothing to label: the slacks stay at 0
            return _Run(np.zeros(len(soft_w)), [], 0, True, {"lp": 0.0, "separation": 0.0})
        scaled = np.concatenate([cost, soft_w]) / cost_scale(cost, soft_w)
        inst = warm.lp if warm is not None else None
        new = list(start)  # rows to add
        if inst is not None:  # the LP of the last call: its rows are those of warm.cuts
            self.set_cost(inst, scaled)
        else:
            inst = self.new_lp(scaled)
            new = (list(warm.cuts) if warm is not None else []) + new
        if new:
            self.add_cuts(inst, new)
        if warm is not None and warm.lp is None and warm.basis is not None:
            inst.h.setBasis(warm.basis)  # rows of the base LP and of warm.cuts, in this order
        start = (list(warm.cuts) if warm is not None else []) + list(start)
        known = warm.pool if warm is not None and warm.pool is not None else _CutPool()
        pool = _Pool(self, known, start) if keep else None  # only a warm start keeps and checks one
        run = _Run(np.zeros(0), list(start), 0, False, {"lp": 0.0, "separation": 0.0})
        solved_cuts = 0
        while run.solves < self.options.max_iter:
            t0 = time.perf_counter()
            run.x = self.solve_lp(inst)
            solved_cuts = len(run.cuts)
            run.solves += 1
            run.timings["lp"] += time.perf_counter() - t0
            if self.sep is None:
                run.converged = True
                break
            t0 = time.perf_counter()
            found = pool.violated(run.x) if pool is not None else []
            if not found:
                found = [(c, i, j, torch.from_numpy(S).long()) for c, i, j, S in self.separate(run.x)]
            run.timings["separation"] += time.perf_counter() - t0
            if not found:
                run.converged = True
                break
            self.add_cuts(inst, found)
            if pool is not None:
                pool.enter(found)
            run.cuts += found
        if keep:
            run.warm = _Warm.of(inst, run.cuts, solved_cuts, pool.pool)
        return run


class WarmStart:
    """The working sets of connectivity cuts and the LPs of training instances, kept from one
    call of :func:`map_lp` (or :func:`structtorch.lp.relaxed_hinge`) to the next.

    Nowozin's cutting-plane learning keeps the constraints it found for an instance from one
    iteration to the next; epochs over the same images change the potentials a little, and the
    cuts that bounded an instance's last LP mostly bound the next one. Each call with
    ``warm_start=`` and ``keys=`` starts every instance from its working set (the cuts whose rows
    were tight at its last solve, and those found after it) and from its last simplex basis, and
    stores the new ones; a pool of every cut found is checked before the separation oracle runs.
    Cuts depend on the graph only, so a working set is valid for any potentials; the LPs converge
    to the same optimum as a cold start (the answers agree where both converge).

    The LPs themselves stay in memory (HiGHS models: the next call only changes their costs and
    re-solves), about 1.3 MB each on a 16 x 16 grid with two labels and 4.1 MB at 32 x 32 (solved,
    before cuts); beyond ``max_lps`` instances the least recently used keep their cuts and basis
    only (the LP is then rebuilt: about 0.6 ms more per call at 16 x 16, 2.2 ms at 32 x 32, and a
    refactorization). Pickling keeps the working sets and pools, not the solver objects.

    One object serves one graph, label set and connectivity labels (checked). ``len(warm)``
    counts the instances kept; :meth:`clear` forgets them.

    Parameters
    ----------
    max_lps : int >= 0
        Live LPs kept at most (default 64).

    Examples
    --------
    >>> import torch
    >>> from structtorch import lp
    >>> edges, warm = lp.grid_edges(3, 3), lp.WarmStart()
    >>> unary = torch.zeros(2, 9, 2)
    >>> unary[:, :, 1] = -0.1  # label 1 costs a little everywhere ...
    >>> unary[:, [0, 8], 1] = 1.0  # ... but two far corners like it: connect them by a path
    >>> pairwise = torch.zeros(12, 2, 2)
    >>> first = lp.map_lp(unary, pairwise, edges, connected=[1], warm_start=warm, keys=[0, 1])
    >>> first.iterations.tolist(), first.score.tolist(), warm
    ([2, 2], [1.7000000476837158, 1.7000000476837158], WarmStart(2 instances, 6 cuts))
    >>> again = lp.map_lp(unary, pairwise, edges, connected=[1], warm_start=warm, keys=[0, 1])
    >>> again.iterations.tolist()  # the working set bounds the LP at once
    [1, 1]
    """

    def __init__(self, max_lps: int = 64) -> None:
        self.max_lps = check_int("max_lps", max_lps, 0)
        self._states: dict = {}
        self._live: OrderedDict = OrderedDict()  # keys whose state holds its LP, least recent first
        self._problem: tuple | None = None

    def __len__(self) -> int:
        return len(self._states)

    def __repr__(self) -> str:
        cuts = sum(len(w.cuts) for w in self._states.values())
        return f"WarmStart({len(self)} instances, {cuts} cuts)"

    def clear(self) -> None:
        """Forget every instance."""
        self._states.clear()
        self._live.clear()
        self._problem = None

    def cuts(self, key) -> list:
        """The working set of one instance: (label, i, j, separator) rows, as ``LPResult.cuts``."""
        return list(self._states[key].cuts) if key in self._states else []

    def _states_for(self, problem: tuple, keys: list) -> list:
        if self._problem is not None and self._problem != problem:
            raise ValueError("warm_start holds the working sets of another graph, label count or set of "
                             "connectivity labels; use one WarmStart per problem (or clear() it)")
        self._problem = problem
        states = [self._states.get(k) for k in keys]
        for k, w in zip(keys, states, strict=True):  # a call takes the LP: the store keeps the rest
            if w is not None and w.lp is not None:
                self._states[k] = _Warm(w.cuts, None, w.pool)
                self._live.pop(k, None)
        return states

    def _store(self, keys: list, runs: list) -> None:
        for k, run in zip(keys, runs, strict=True):
            if run.warm is not None:
                self._states[k] = run.warm
                if run.warm.lp is not None:
                    self._live[k] = None
        while len(self._live) > self.max_lps:
            old, _ = self._live.popitem(last=False)
            self._states[old] = self._states[old].frozen()


def check_keys(keys, B: int) -> list:
    """``keys`` as a list of B hashable instance keys (a 1-D integer tensor is read as ints)."""
    if isinstance(keys, Tensor):
        if keys.dim() != 1 or keys.dtype.is_floating_point or keys.dtype.is_complex:
            raise TypeError(f"keys given as a tensor must be a 1-D integer tensor, got {keys.dtype} of shape "
                            f"{tuple(keys.shape)}")
        keys = keys.tolist()
    if isinstance(keys, (str, bytes)) or not hasattr(keys, "__len__"):
        raise TypeError(f"keys must be a sequence of B = {B} hashable instance ids, got "
                        f"{type(keys).__name__}")
    keys = list(keys)
    if len(keys) != B:
        raise ValueError(f"keys must hold B = {B} instance ids, got {len(keys)}")
    for k in keys:
        try:
            hash(k)
        except TypeError:
            raise TypeError(f"keys must be hashable (ints, strings, tuples), got "
                            f"{type(k).__name__}") from None
    if len(set(keys)) != B:
        raise ValueError("keys must be distinct within a batch (one working set per instance)")
    return keys


def lp_score(unary: Tensor, pairwise: Tensor, mu: Tensor, mu_edges: Tensor) -> Tensor:
    """(B,) <unary, mu> + <pairwise, mu_edges>, differentiable in all four."""
    return (unary * mu).sum((1, 2)) + (pairwise * mu_edges).sum((1, 2, 3))


def map_lp(
    unary: Tensor,
    pairwise: Tensor,
    edges: Tensor,
    *,
    connected: list[int] | None = None,
    connected_soft: dict | None = None,
    max_iter: int = 100,
    tol: float = 1e-6,
    cuts_per_round: int = 100,
    cuts: list | None = None,
    nested: int = 4,
    num_workers: int | None = None,
    warm_start: WarmStart | None = None,
    keys=None,
) -> LPResult:
    """Maximize the score over the local polytope, with connectivity cuts (Algorithm 7).

    Parameters
    ----------
    unary : Tensor (V, L) or (B, V, L)
    pairwise : Tensor (E, L, L) or (B, E, L, L)
        ``pairwise[e, s, t]`` scores label s at ``edges[e, 0]`` and t at ``edges[e, 1]``.
    edges : Tensor (E, 2) int64
        Undirected edges with i < j, no duplicates.
    connected : list of int, optional
        Labels whose nodes must form one connected subgraph (hard potential, eq. 70).
    connected_soft : dict {label: weight >= 0}, optional
        Soft connectivity: the score loses ``weight * max(0, max_d d^T mu^c - 1)``.
    max_iter : int >= 1
        Most LP solves per instance.
    tol : float in (0, 1)
        Separation tolerance: violations of a cut up to ``tol`` do not count.
    cuts_per_round : int >= 1
        Most violated cuts added per label and round (one per pair of representatives).
    nested : int >= 1
        Cuts per violated pair, with disjoint separators (nested cuts; 1 = the thesis's single
        most violated one). Several rings of zero-weight separators per round speed up
        convergence a lot on noisy instances.
    cuts : list of (label, i, j, separator), or a list of B such lists, optional
        Rows ``mu_i(label) + mu_j(label) - sum_{k in separator} mu_k(label) <= 1`` to start from
        (``- s_label`` for soft labels), e.g. the ``cuts`` of an earlier result on the same graph
        (they depend on the graph only), with int label, i, j and an integer tensor or list of
        ints as separator. Rows are taken as given: they are connectivity cuts when the separator
        separates i and j.
    num_workers : int >= 1, optional
        Threads that solve the B instances concurrently (HiGHS releases the GIL while it
        solves); default ``torch.get_num_threads()``, 1 solves them one after the other in the
        calling thread. The results do not depend on it.

    Returns
    -------
    LPResult
        Batched: an unbatched (V, L) ``unary`` gives B = 1. B = 0 gives results with batch
        dimension 0; V = 0 an empty ``mu``, score 0 and no solve.

    Notes
    -----
    Potentials and soft weights must be below 1e20 in magnitude (the solver's infinity). Each
    instance is solved with its costs divided by their largest magnitude, so the solution does not
    depend on the scale of the potentials; costs smaller than about 1e-7 of the largest one are at
    the solver's resolution (see :mod:`structtorch.lp._highs`).

    Examples
    --------
    >>> import torch
    >>> from structtorch.lp import map_lp
    >>> unary = torch.tensor([[2., 0.], [0., 1.5]])  # (V, L)
    >>> pairwise = torch.tensor([[[1., 0.], [0., 1.]]])  # (E, L, L)
    >>> result = map_lp(unary, pairwise, torch.tensor([[0, 1]]))
    >>> result.score, result.integral, result.mu.argmax(-1)
    (tensor([3.5000]), tensor([True]), tensor([[0, 1]]))
    """
    unary_b, pairwise_b, edges = check_graph_potentials(unary, pairwise, edges)
    B, V, L = unary_b.shape
    E = len(edges)
    # the potentials' one transfer to the host: the LP's costs, checked there
    cost = -torch.cat([unary_b.reshape(B, V * L), pairwise_b.reshape(B, E * L * L)], 1)
    cost = cost.detach().double().cpu().numpy()
    check_costs("unary", cost[:, :V * L])
    check_costs("pairwise", cost[:, V * L:])
    options = _Options(check_int("max_iter", max_iter, 1), check_tol("tol", tol),
                       check_int("cuts_per_round", cuts_per_round, 1), check_int("nested", nested, 1))
    workers = check_num_workers(num_workers)
    hard, soft = check_connected(connected, connected_soft, L)
    start = check_cuts(cuts, B, V, L)
    warm = [None] * B
    if warm_start is not None:
        if not isinstance(warm_start, WarmStart):
            raise TypeError(f"warm_start must be a structtorch.lp.WarmStart, got {type(warm_start).__name__}")
        if keys is None:
            raise ValueError("warm_start needs keys: one id per instance of the batch")
        keys = check_keys(keys, B)
        fingerprint = (edges.numpy().tobytes(), V, L, tuple(hard), tuple(c for c, _ in soft))
        warm = warm_start._states_for(fingerprint, keys)
        # a stored basis fits the working set's rows only: not with extra rows given as cuts
        warm = [w if w is None or not start[b] else _Warm(w.cuts, None, w.pool, w.lp)
                for b, w in enumerate(warm)]
    elif keys is not None:
        raise ValueError("keys are the instance ids of warm_start: pass warm_start too")
    soft_w = np.array([_weight(w) for _, w in soft])
    check_costs("connected_soft weights", soft_w)
    problem = _Problem(V, L, _constraints(V, L, edges), np.concatenate([np.ones(V), np.zeros(2 * E * L)]),
                       Separator.build(edges, V) if hard or soft else None, hard + [c for c, _ in soft],
                       {c: V * L + E * L * L + pos for pos, (c, _) in enumerate(soft)}, options,
                       _TwoLabels(V, edges, len(soft)) if L == 2 else None)
    keep = warm_start is not None
    runs = parallel_map(lambda b: problem.solve(cost[b], soft_w, start[b], warm[b], keep), range(B), workers)
    if keep:
        warm_start._store(keys, runs)
    return _result(runs, unary_b, pairwise_b, edges, soft, cost, hard)


def _result(runs: list[_Run], unary_b: Tensor, pairwise_b: Tensor, edges: Tensor, soft: list,
            cost: np.ndarray, hard: list[int]) -> LPResult:
    """The LPResult of the instances' runs, in the dtype and on the device of ``unary``: the
    solutions and per-instance figures go to the device in one transfer."""
    B, V, L = unary_b.shape
    E, n = len(edges), cost.shape[1]
    X = torch.from_numpy(np.stack([r.x for r in runs]) if runs else np.zeros((0, n + len(soft))))
    mu, mu_e, slack = X[:, :V * L].clamp(0, 1), X[:, V * L:n].clamp(0, 1), X[:, n:].clamp(min=0)
    integral = ~fractional(mu).any(1) & ~fractional(mu_e).any(1)
    figures = torch.tensor([[r.solves, r.converged] for r in runs], dtype=torch.float64).reshape(B, 2)
    node_frac = fractional_nodes(mu.view(B, V, L))
    packed = torch.cat([mu, mu_e, slack, integral[:, None].double(), node_frac[:, None], figures], 1)
    packed = packed.to(unary_b.device)  # the one transfer back
    ref = unary_b
    mu, mu_e, slack = (t.to(ref.dtype) for t in (packed[:, :V * L].reshape(B, V, L),
                                                  packed[:, V * L:n].reshape(B, E, L, L),
                                                  packed[:, n:n + len(soft)]))
    extra = packed[:, n + len(soft):]
    score = lp_score(unary_b, pairwise_b, mu, mu_e)
    for pos, (_, w) in enumerate(soft):
        score = score - w * slack[:, pos]
    return LPResult(mu, mu_e, score, extra[:, 0].bool(), extra[:, 1].to(ref.dtype), [r.cuts for r in runs],
                    extra[:, 2].long(), extra[:, 3].bool(), slack,
                    [r.timings for r in runs], edges, torch.from_numpy(cost), hard, bool(soft))
