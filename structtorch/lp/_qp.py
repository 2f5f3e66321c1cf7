"""The smoothed relaxation as a native QP: Clarabel's solve, an active-set polish and an exact
implicit backward (the default path of :class:`structtorch.lp.MAPRelaxation`).

Each instance is the convex quadratic program

    maximize  c . x - 1/2 x' P x   subject to   A x = b,  G x <= g,  R x_nodes <= h

with P diagonal and positive on the node variables (the smoothing), zero on the edge variables;
``A x = b`` and ``G x <= g`` describe the local polytope (they depend on the graph only, and for
two labels on the signs of the edge couplings), ``R x_nodes <= h`` is the cut block. The steps:

1. **Solve** with Clarabel's interior-point QP solver directly (no cvxpy canonicalization: the
   quadratic stays a quadratic, not a second-order cone).
2. **Active set**: the inequalities whose multiplier exceeds their slack.
3. **Polish**: the equality-constrained QP on that active set is one symmetric indefinite linear
   system, the KKT matrix ``K = [[P, M'], [M, 0]]`` (M: the equalities and active rows). Its
   solution is exact to rounding; it replaces the interior point's answer when it keeps every row,
   stays close to it and gives the cut rows non-negative multipliers; otherwise up to two
   primal-dual active-set steps correct the set (else the interior point's answer stays).
4. **Backward**: the same factorization gives the vector-Jacobian product. For an upstream
   gradient v on x, ``K [u; w] = [v; 0]`` gives dL/dc = u, dL/d(rhs of an active row) = w_k and
   dL/d(row k) = -(mu_k u + w_k x) (Amos & Kolter 2017, OptNet). Inactive rows get zero.

Degenerate active sets (several active rows through one point, edge variables tied along a cycle)
make K singular. Rows that depend on others are set aside, keeping those with the larger
interior-point multipliers (see :class:`KKT`: the gradient is then a one-sided derivative); what
stays singular is factored with a tiny regularization (``[[P + d, M'], [M, -d]]``, d = 1e-10 times
the largest entry of P) and each solve refined twice against the exact K, which picks the
least-norm multipliers and leaves the node solution (unique: P is positive on it) exact to
rounding.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import clarabel
import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla
import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from ._parallel import parallel_map

__all__ = ["QPInstance", "solve_qp", "vjp", "BinaryProgram", "LocalPolytopeProgram", "SmoothedQP"]

TOL = 1e-9  # Clarabel's gap and feasibility tolerances
FEASIBLE = 1e-7  # a polished point may violate a row by this much (relative to the row's scale)
REGULARIZATION = 1e-10
REFINE = 2  # steps of iterative refinement of a KKT solve
POLISH_STEPS = 3  # active sets tried by the polish
CLOSE = 1e-5  # the polished point lies this close to the interior point's (relative)
MAX_SWAPS = 3  # rounds of setting aside the weak rows of a degenerate active set around cut rows
MAX_DENSE = 4_000_000  # entries of the dense QR that finds dependent rows around a cut row


@dataclass
class QPInstance:
    """One instance in standard form: maximize c.x - 1/2 x'Px over A x = b, G x <= g.

    ``P`` is the diagonal of P (n,); ``A`` (m_eq, n) and ``G`` (m_in, n) are CSC matrices. The last
    ``len(param_rows)`` rows of G are cut rows, which take gradients: ``param_rows`` holds their
    positions among the ``num_params`` rows of the cut block (none where the block is all zero).
    """

    P: np.ndarray
    c: np.ndarray
    A: sp.csc_array
    b: np.ndarray
    G: sp.csc_array
    g: np.ndarray
    param_rows: np.ndarray
    num_params: int
    solvers: SolverPool | None = None  # Clarabel solvers to reuse


@dataclass
class QPSolution:
    """The solution x (n,), the active rows, their multipliers and the factored KKT system (for
    the backward pass)."""

    x: np.ndarray
    active: np.ndarray  # indices into G's rows
    multipliers: np.ndarray  # of [A; G[active]]
    kkt: KKT


def _settings() -> clarabel.DefaultSettings:
    settings = clarabel.DefaultSettings()
    settings.verbose = False
    settings.tol_gap_abs = settings.tol_gap_rel = settings.tol_feas = TOL
    settings.iterative_refinement_enable = False  # the polish refines
    # the costs are scaled to 1 below, and every row is finite: neither step would change anything
    settings.equilibrate_enable = settings.presolve_enable = False
    return settings


def _clarabel(qp: QPInstance) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """x, the multipliers of every row (equalities first) and the inequalities' slacks from
    Clarabel (minimizing -c.x + 1/2 x'Px, scaled so that its largest coefficient is 1: the
    tolerances are then relative). A solver built for an instance of the same sparsity (the
    program's, with or without its dense cut block) is updated with the new values instead of
    built again (its symbolic factorization is kept: about a quarter of a 16 x 16 grid's solve)."""
    n, m = len(qp.c), qp.A.shape[0]
    scale = max(float(np.abs(qp.c).max(initial=0.0)), float(qp.P.max(initial=0.0)), 1e-300)
    P = sp.csc_array((qp.P / scale, np.arange(n), np.arange(n + 1)), shape=(n, n))
    Ab = sp.vstack([qp.A, qp.G]).tocsc() if m else qp.G
    rhs, q = np.concatenate([qp.b, qp.g]), -qp.c / scale
    key = len(qp.param_rows)  # the sparsity: the program's, with or without its cut block
    solver = qp.solvers.take(key) if qp.solvers is not None else None
    if solver is not None:
        solver.update(P=P.data, q=q, A=Ab.data, b=rhs)
    else:
        cones = ([clarabel.ZeroConeT(m)] if m else []) + ([clarabel.NonnegativeConeT(qp.G.shape[0])]
                                                         if qp.G.shape[0] else [])
        solver = clarabel.DefaultSolver(P, q, Ab, rhs, cones, _settings())
    sol = solver.solve()
    if qp.solvers is not None:
        qp.solvers.give(key, solver)
    status = str(sol.status)
    if "Infeasible" in status:
        raise ValueError("the smoothed relaxation is infeasible: the cut block's rows (cuts) exclude "
                         "every point of the local polytope")
    if status not in ("Solved", "AlmostSolved"):
        raise RuntimeError(f"the smoothed relaxation did not solve: Clarabel status {status}")
    return np.asarray(sol.x)[:n], np.asarray(sol.z) * scale, np.asarray(sol.s)[m:]


class KKT:
    """The KKT matrix of P and the active rows M, reduced and factored.

    Rows with a single variable (bounds, and rows whose other variables such rows fixed: the
    cascade of a labeling's 0/1 nodes through its edges) fix that variable and are eliminated
    first, round by round; the rest, ``[[P_F + d, M_F'], [M_F, -d]]`` over the free variables F and
    the remaining rows, is factored by SuperLU with the regularization d. :meth:`solve` substitutes
    forward for the fixed variables and backward for the eliminated rows' multipliers.

    Degenerate active sets: a row whose variables other rows all fixed is a combination of them.
    Where such a row is a cut row, the rows of these combinations are chosen again greedily by
    multiplier (``weights``: the interior point's), the weaker ones that depend on stronger ones
    are set aside (treated as inactive) and the cascade runs again, so that the rows kept are a
    basis that prefers the strongly active rows: their multipliers stay non-negative, and the
    derivative is the one-sided derivative of that active set (with the dependent rows all kept,
    the least-norm compromise would be neither side's). Rows still dependent get multiplier 0.
    """

    def __init__(self, P: np.ndarray, M: sp.coo_array, weights: np.ndarray, params: np.ndarray) -> None:
        nonzero = M.data != 0
        (m, n), row, col, val = M.shape, M.row[nonzero], M.col[nonzero], M.data[nonzero]
        self.P, self.shape, self.entries = P, (m, n), (row, col, val)
        aside = np.zeros(m, dtype=bool)
        for _ in range(MAX_SWAPS if params.any() else 1):
            free, live, dependent = self._cascade(~aside, weights, params)
            swap = self._weaker_supports(dependent[params[dependent]], weights)
            if not len(swap) and params[live].any():
                swap = self._dependent_live(free, live, weights)
            if not len(swap):
                break
            aside[swap] = True
        self.free, self.live = np.flatnonzero(free), np.flatnonzero(live)
        nf, nl = len(self.free), len(self.live)
        fpos, lpos = np.full(n, -1), np.full(m, -1)
        fpos[self.free], lpos[self.live] = np.arange(nf), np.arange(nl)
        keep = (fpos[col] >= 0) & (lpos[row] >= 0)
        r, c, v = lpos[row[keep]], fpos[col[keep]], val[keep]
        self.live_entries = np.flatnonzero(lpos[row] >= 0)  # M[live] x for the right side
        d = REGULARIZATION * max(float(P.max(initial=0.0)), 1.0)
        diag = np.arange(nf + nl)
        K = sp.csc_array((np.concatenate([P[self.free] + d, np.full(nl, -d), v, v]),
                          (np.concatenate([diag, nf + r, c]), np.concatenate([diag, c, nf + r]))),
                         shape=(nf + nl, nf + nl))
        self.factor = spla.splu(K, permc_spec="COLAMD") if nf + nl else None
        self.regularization = np.concatenate([np.full(nf, d), np.full(nl, -d)])
        self.K = K  # the regularized matrix; K z - regularization * z is the exact one

    def _cascade(self, use: np.ndarray, weights: np.ndarray, params: np.ndarray):
        """Eliminate the rows in ``use`` that fix a variable, round by round (of several rows that
        could fix one, a structural row before a cut row, then the one of largest weight, so that
        a cut row's dependence shows as its own): (free variables, rows left for the factored
        system, rows left without a free variable: dependent on the eliminated ones)."""
        (m, n), (row, col, val) = self.shape, self.entries
        free, live = np.ones(n, dtype=bool), use.copy()
        self.rounds = []
        while True:
            count = np.bincount(row, free[col], m)
            single = live & (count == 1)
            if not single.any():
                break
            pick = np.flatnonzero(single[row] & free[col])  # the entries on the free variable
            pick = pick[np.lexsort((-weights[row[pick]], params[row[pick]]))]
            var, first = np.unique(col[pick], return_index=True)
            rows = row[pick[first]]
            where = np.full(m, -1)
            where[rows] = np.arange(len(rows))
            inside = np.flatnonzero(where[row] >= 0)  # every entry of these rows
            self.rounds.append((rows, var, val[pick[first]], where[row[inside]], col[inside], val[inside]))
            free[var], live[rows] = False, False
        count = np.bincount(row, free[col], m)
        return free, live & (count > 0), np.flatnonzero(live & (count == 0))

    def _weaker_supports(self, dependent: np.ndarray, weights: np.ndarray) -> np.ndarray:
        """The eliminated rows to set aside so that the dependent (cut) rows enter where they are
        stronger: the rows of the dependent rows' circuits (each one and the eliminated rows it is
        a combination of, by back-substitution through the rounds), kept greedily by weight; those
        of them that depend on stronger ones leave. The rank stays: a row that leaves lies in the
        span of the circuit rows kept."""
        (m, n), (row, col, val) = self.shape, self.entries
        if not len(dependent):
            return np.zeros(0, dtype=np.int64)
        M = sp.csr_array((val, (row, col)), shape=(m, n))
        target = M[dependent].toarray()  # (d, n): the rows to express
        alpha = np.zeros((len(dependent), m))
        for rows, var, coef, *_ in reversed(self.rounds):
            alpha[:, rows] = 0.0
            alpha[:, rows] = (target[:, var] - (M.T @ alpha.T).T[:, var]) / coef
        circuits = np.union1d(np.flatnonzero(np.abs(alpha).max(axis=0) > 1e-9), dependent)
        touched = np.unique(col[np.isin(row, circuits)])
        return np.setdiff1d(self._greedy_dependent(circuits, touched, weights), dependent)

    def _dependent_live(self, free: np.ndarray, live: np.ndarray, weights: np.ndarray) -> np.ndarray:
        """Rows left for the factored system that depend on stronger ones (run only where a cut
        row is among them: the split of the multipliers of dependent rows matters for a cut row's
        gradient alone)."""
        return self._greedy_dependent(np.flatnonzero(live), np.flatnonzero(free), weights)

    def _greedy_dependent(self, rows: np.ndarray, cols: np.ndarray, weights: np.ndarray) -> np.ndarray:
        """Of ``rows`` (restricted to the variables ``cols``), those in the span of stronger ones,
        taken in order of decreasing weight: Gram-Schmidt over their columns (M') in that order,
        twice orthogonalized, where a column whose remainder is small (1e-9 of the largest column)
        lies in the span of those kept before it and is not kept. Nothing beyond ``MAX_DENSE``
        entries."""
        (m, n), (row, col, val) = self.shape, self.entries
        if len(rows) * len(cols) > MAX_DENSE:
            return np.zeros(0, dtype=np.int64)
        order = rows[np.argsort(-weights[rows], kind="stable")]
        rpos, cpos = np.full(m, -1), np.full(n, -1)
        rpos[order], cpos[cols] = np.arange(len(order)), np.arange(len(cols))
        inside = (rpos[row] >= 0) & (cpos[col] >= 0)
        dense = np.zeros((len(cols), len(order)))
        dense[cpos[col[inside]], rpos[row[inside]]] = val[inside]
        tiny = 1e-9 * max(float(np.abs(dense).max(initial=0.0)), 1.0)
        basis = np.zeros((len(cols), 0))
        dropped = []
        for k in range(len(order)):
            v = dense[:, k]
            for _ in range(2):
                v = v - basis @ (basis.T @ v)
            norm = float(np.linalg.norm(v))
            if norm <= tiny:
                dropped.append(k)
            else:
                basis = np.column_stack([basis, v / norm])
        return order[np.array(dropped, dtype=np.int64)]

    def solve(self, c: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(x, mu) with P x + M' mu = c and M x = r (least-norm on degenerate rows)."""
        (m, n), (row, col, val) = self.shape, self.entries
        x, mu = np.zeros(n), np.zeros(m)
        for rows, var, coef, at, cols, vals in self.rounds:  # the fixed variables, in their order
            x[var] = (r[rows] - np.bincount(at, vals * x[cols], len(rows))) / coef
        F, Lv = self.free, self.live
        if self.factor is not None:
            e = self.live_entries
            Mx = np.bincount(row[e], val[e] * x[col[e]], m)
            rhs = np.concatenate([c[F], r[Lv] - Mx[Lv]])
            z = self.factor.solve(rhs)
            for _ in range(REFINE):  # refined against the exact (unregularized) system
                z += self.factor.solve(rhs - (self.K @ z - self.regularization * z))
            x[F], mu[Lv] = z[: len(F)], z[len(F):]
        for rows, var, coef, *_ in reversed(self.rounds):  # their rows' multipliers, last fixed first
            mu[rows] = 0.0
            Mtmu = np.bincount(col, val * mu[row], n)
            mu[rows] = (c[var] - self.P[var] * x[var] - Mtmu[var]) / coef
        return x, mu


def _distinct(qp: QPInstance, active: np.ndarray) -> np.ndarray:
    """The active rows without repeats of a cut row (the same coefficients and right side): of
    equal rows the first stays active (the repeats then take no gradient: moving one of two equal
    rows is a kink, and this is the side on which it loosens)."""
    first = qp.G.shape[0] - len(qp.param_rows)
    cuts = active[active >= first]
    if len(cuts) < 2:
        return active
    G = sp.csr_array(qp.G[cuts])
    seen, repeats = set(), []
    for k, r in enumerate(cuts):
        lo, hi = G.indptr[k], G.indptr[k + 1]
        key = (G.indices[lo:hi].tobytes(), G.data[lo:hi].tobytes(), float(qp.g[r]))
        if key in seen:
            repeats.append(r)
        seen.add(key)
    return np.setdiff1d(active, repeats)


def _polish(qp: QPInstance, active: np.ndarray, lam: np.ndarray) -> tuple[np.ndarray, np.ndarray, KKT]:
    """x and the multipliers of [A; G[active]] from the KKT system of that active set."""
    m, first = qp.A.shape[0], qp.G.shape[0] - len(qp.param_rows)
    rows = sp.vstack([qp.A, qp.G[active]]) if m else qp.G[active]
    kkt = KKT(qp.P, sp.coo_array(rows), np.concatenate([np.full(m, np.inf), lam[active]]),
              np.concatenate([np.zeros(m, dtype=bool), active >= first]))
    x, mult = kkt.solve(qp.c, np.concatenate([qp.b, qp.g[active]]))
    return x, mult, kkt


def solve_qp(qp: QPInstance) -> QPSolution:
    """Clarabel's solution, polished on its active set, with the KKT system kept.

    The active set is read off the interior point (multiplier above slack). Its polished point is
    taken where it keeps every row, stays within ``CLOSE`` of the interior point's (a wrong active
    set moves it further) and gives the cut rows non-negative multipliers (the split of the other
    rows' multipliers over a degenerate active set does not matter). Otherwise the active set is
    corrected, as a primal-dual active-set step: the cut rows with negative multipliers leave, the
    broken rows join, up to ``POLISH_STEPS`` times; if none works the interior point's answer stays
    (accurate to about 1e-9).
    """
    x, duals, slack = _clarabel(qp)
    m, first = qp.A.shape[0], qp.G.shape[0] - len(qp.param_rows)
    lam = duals[m:]
    active = _distinct(qp, np.flatnonzero(lam > slack))
    feasible = FEASIBLE * (1.0 + np.abs(qp.g).max(initial=0.0))
    signed = -FEASIBLE * (1.0 + np.abs(qp.c).max(initial=0.0))
    close = CLOSE * (1.0 + np.abs(x).max(initial=0.0))
    tried = None
    for _ in range(POLISH_STEPS):
        xp, mult, kkt = _polish(qp, active, lam)
        tried = tried or (active, kkt)
        broken = np.flatnonzero(qp.G @ xp > qp.g + feasible)
        negative = active[(mult[m:] < signed) & (active >= first)]
        if not len(broken) and not len(negative) and np.abs(xp - x).max(initial=0.0) <= close:
            return QPSolution(xp, active, mult, kkt)
        changed = np.union1d(np.setdiff1d(active, negative), broken)
        if np.array_equal(changed, active):
            break
        active = _distinct(qp, changed)
    active, kkt = tried  # the interior point's answer and multipliers, the first active set's system
    return QPSolution(x, active, np.concatenate([duals[:m], lam[active]]), kkt)


def vjp(qp: QPInstance, sol: QPSolution, v: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(dL/dc (n,), dL/d(cut rows) (num_params, n), dL/d(cut rhs) (num_params,)) for the upstream
    gradient ``v`` (n,) on x."""
    m = qp.A.shape[0]
    u, w = sol.kkt.solve(v, np.zeros(sol.kkt.shape[0]))
    grad_rows, grad_rhs = np.zeros((qp.num_params, len(qp.c))), np.zeros(qp.num_params)
    first = qp.G.shape[0] - len(qp.param_rows)
    pos = np.flatnonzero(sol.active >= first)  # active cut rows, as positions among the active rows
    rows = qp.param_rows[sol.active[pos] - first]
    mult, wk = sol.multipliers[m + pos], w[m + pos]
    # dx = K^-1 [dc - dM' mu; dr - dM x], so dL/dM_k = -(mu_k u + w_k x) and dL/dr_k = w_k
    grad_rows[rows] = -(mult[:, None] * u[None, :] + wk[:, None] * sol.x[None, :])
    grad_rhs[rows] = wk
    return u, grad_rows, grad_rhs


class SolverPool:
    """The idle Clarabel solvers of one program, by sparsity: a solve takes one (or builds one)
    and gives it back, so that the solvers outlive the threads of a batch and every call reuses
    them. At most as many as ever ran at once."""

    def __init__(self) -> None:
        self._idle: dict[int, list] = {}
        self._lock = threading.Lock()

    def take(self, key: int):
        with self._lock:
            idle = self._idle.get(key)
            return idle.pop() if idle else None

    def give(self, key: int, solver) -> None:
        with self._lock:
            self._idle.setdefault(key, []).append(solver)


class _Program:
    """What the programs share: their pool of solvers (not pickled or copied with the program)."""

    def __init__(self) -> None:
        self.solvers = SolverPool()

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "solvers"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.solvers = SolverPool()


def _cut_rows(R: np.ndarray, h: np.ndarray, n: int) -> tuple[sp.csr_array, np.ndarray, np.ndarray]:
    """The cut block as rows padded to n columns (R's columns first), their right sides and
    positions: none where the block is all zero, else all K rows with every one of R's columns
    stored (zeros too), so that every such instance has the same sparsity and Clarabel's solver
    is reused (a zero row ``0 <= h`` binds nothing). An all-zero row with h < 0 is infeasible."""
    used = np.abs(R).max(axis=1, initial=0.0) > 0
    if np.any(~used & (h < 0)):
        raise ValueError("the smoothed relaxation is infeasible: a row of the cut block (cuts) has no "
                         "coefficient but a right side below 0")
    if not used.any():
        return sp.csr_array((0, n)), np.zeros(0), np.zeros(0, dtype=np.int64)
    K, N = R.shape
    block = sp.csr_array((R.ravel().astype(np.float64), np.tile(np.arange(N), K), np.arange(K + 1) * N),
                         shape=(K, n))
    return block, h.astype(np.float64), np.arange(K)


class BinaryProgram(_Program):
    """Two labels, the reduced form: x = (y (V), z (E)) with y_i = mu_i(1), z_e = mu_e(1, 1);
    maximize a.y + b.z - s sum_i (y_i - 1/2)^2 (c = (a + s, b), P = 2 s on y).

    Of the four rows of an edge's polytope two can bind at the optimum: z <= y_i, z <= y_j where
    b_e > 0 (then z = min(y_i, y_j), which meets z >= 0 and z >= y_i + y_j - 1 on [0, 1]), and
    z >= 0, z >= y_i + y_j - 1 where b_e < 0 (z = max(0, y_i + y_j - 1), which meets the others);
    where b_e = 0, z is irrelevant and kept in [0, y_i]. The optimum in y is that of the full
    polytope. The rows share one sparsity pattern (z and y_i in an edge's first row, z, y_i and y_j
    in its second, some coefficients 0 by sign), so an instance only fills in the coefficients.
    """

    def __init__(self, edges: np.ndarray, V: int, smoothing: float) -> None:
        super().__init__()
        E = len(edges)
        self.V, self.E = V, E
        z, r0 = V + np.arange(E), 2 * np.arange(E)
        box = np.arange(V)
        # rows 0..2E-1: the edges' two rows; then -y <= 0 and y <= 1
        rows = np.concatenate([r0, r0, r0 + 1, r0 + 1, r0 + 1, 2 * E + box, 2 * E + V + box])
        cols = np.concatenate([z, edges[:, 0], z, edges[:, 0], edges[:, 1], box, box])
        order = np.lexsort((rows, cols))  # column-major: the CSC layout
        self.rows, self.cols, self.order = rows[order], cols[order], order
        counts = np.bincount(self.cols, minlength=V + E)
        self.indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.box_values = np.concatenate([-np.ones(V), np.ones(V)])
        self.g = np.concatenate([np.zeros(2 * E + V), np.ones(V)])
        self.P = np.concatenate([np.full(V, 2.0 * smoothing), np.zeros(E)])
        self.A, self.b = sp.csc_array((0, V + E)), np.zeros(0)

    def structure_rows(self, coupling: np.ndarray) -> tuple[sp.csc_array, np.ndarray]:
        """The edges' rows (two per edge, by the sign of its coupling b_e) and the box rows."""
        pos, neg = coupling > 0, coupling < 0
        zero = ~pos & ~neg
        # row 2e: z - y_i <= 0 (b > 0) or -z <= 0; row 2e + 1: z - y_j <= 0 (b > 0),
        # -z + y_i + y_j <= 1 (b < 0) or z - y_i <= 0 (b = 0)
        values = np.concatenate([np.where(pos, 1.0, -1.0), np.where(pos, -1.0, 0.0),
                                 np.where(neg, -1.0, 1.0), np.where(neg, 1.0, np.where(zero, -1.0, 0.0)),
                                 np.where(pos, -1.0, np.where(neg, 1.0, 0.0)), self.box_values])
        n, m = self.V + self.E, 2 * self.E + 2 * self.V
        G = sp.csc_array((values[self.order], self.rows, self.indptr), shape=(m, n))
        g = self.g.copy()
        g[1:2 * self.E:2] = neg
        return G, g

    def instance(self, c: np.ndarray, R: np.ndarray, h: np.ndarray) -> QPInstance:
        """c = (a + s, b) (V + E,), R (K, V), h (K,)."""
        G, g = self.structure_rows(c[self.V:])
        cuts, g_cuts, rows = _cut_rows(R, h, len(c))
        if len(rows):
            G, g = sp.vstack([G, cuts]).tocsc(), np.concatenate([g, g_cuts])
        return QPInstance(self.P, c, self.A, self.b, G, g, rows, len(R), self.solvers)


class LocalPolytopeProgram(_Program):
    """L labels, the full local polytope: x = (mu (V L), mu_e (E L^2)); maximize <theta, x> -
    s/2 ||mu||^2 over the normalization and marginalization rows (the column sums of the last
    label left out: they follow from the others and make the rows dependent) and x >= 0."""

    def __init__(self, edges: np.ndarray, V: int, L: int, smoothing: float) -> None:
        super().__init__()
        E = len(edges)
        self.V, self.L = V, L
        n_nodes, n = V * L, V * L + E * L * L
        nodes = np.arange(n_nodes).reshape(V, L)
        pair = n_nodes + np.arange(E * L * L).reshape(E, L, L)
        rows, cols, vals = [np.repeat(np.arange(V), L)], [nodes.reshape(-1)], [np.ones(n_nodes)]
        r0 = V
        for side, labels in ((0, L), (1, L - 1)):  # sum_t mu_e(s, t) = mu_i(s); sum_s mu_e(s, t) = mu_j(t)
            members = (pair if side == 0 else pair.transpose(0, 2, 1))[:, :labels]
            row = r0 + np.arange(E * labels).reshape(E, labels)
            rows += [np.repeat(row.reshape(-1), L), row.reshape(-1)]
            cols += [members.reshape(-1), nodes[edges[:, side]][:, :labels].reshape(-1)]
            vals += [np.ones(E * labels * L), -np.ones(E * labels)]
            r0 += E * labels
        entries = (np.concatenate(rows), np.concatenate(cols))
        self.A = sp.csc_array((np.concatenate(vals), entries), shape=(r0, n))
        self.b = np.concatenate([np.ones(V), np.zeros(r0 - V)])
        self.P = np.concatenate([np.full(n_nodes, smoothing), np.zeros(n - n_nodes)])
        self.nonneg = sp.csc_array(-sp.eye(n))

    def instance(self, c: np.ndarray, R: np.ndarray, h: np.ndarray) -> QPInstance:
        """c = (theta_u, theta_p) flattened (n,), R (K, V L), h (K,)."""
        cuts, g_cuts, rows = _cut_rows(R, h, len(c))
        G = sp.vstack([self.nonneg, cuts]).tocsc() if len(rows) else self.nonneg
        g = np.concatenate([np.zeros(len(c)), g_cuts])
        return QPInstance(self.P, c, self.A, self.b, G, g, rows, len(R), self.solvers)


class SmoothedQP(torch.autograd.Function):
    """x_nodes (B, N) of the QPs of a batch: c (B, n), R (B, K, N), h (B, K) in, one transfer to
    the CPU and back per batch; the backward pass is :func:`vjp` per instance."""

    @staticmethod
    def forward(ctx, c: Tensor, R: Tensor, h: Tensor, program, workers: int) -> Tensor:
        (B, n), (K, N) = c.shape, R.shape[1:]
        packed = torch.cat([c, R.reshape(B, K * N), h], 1).detach().to("cpu", torch.float64).numpy()
        c_np, R_np, h_np = packed[:, :n], packed[:, n:n + K * N].reshape(B, K, N), packed[:, n + K * N:]

        def run(b: int):
            qp = program.instance(c_np[b], R_np[b], h_np[b])
            return qp, solve_qp(qp)

        solved = parallel_map(run, range(len(c_np)), workers)
        ctx.solved, ctx.workers, ctx.N = solved, workers, N
        x = np.stack([sol.x[:N] for _, sol in solved]).clip(0.0, 1.0) if solved else np.zeros((0, N))
        x += 0.0  # -0.0 (a fixed node's substitution) prints as 0
        return torch.from_numpy(x).to(device=c.device, dtype=c.dtype)

    @staticmethod
    @once_differentiable  # the backward is a linear solve on the CPU: no second derivative
    def backward(ctx, grad: Tensor):
        N = ctx.N
        g_np = grad.detach().to("cpu", torch.float64).numpy()

        def back(b: int):
            qp, sol = ctx.solved[b]
            v = np.zeros(len(qp.c))
            v[:N] = g_np[b]
            return vjp(qp, sol, v)

        parts = parallel_map(back, range(len(g_np)), ctx.workers)
        B = len(parts)
        n = len(ctx.solved[0][0].c) if B else 0
        K = ctx.solved[0][0].num_params if B else 0
        dc = np.stack([p[0] for p in parts]) if B else np.zeros((0, n))
        dR = np.stack([p[1][:, :N] for p in parts]) if B else np.zeros((0, K, N))
        dh = np.stack([p[2] for p in parts]) if B else np.zeros((0, K))
        to = {"device": grad.device, "dtype": grad.dtype}
        return (*(torch.from_numpy(t).to(**to) for t in (dc, dR, dh)), None, None)
