"""Solution stability of LP relaxations (Nowozin 2009, ch. 7; digest §2.2-2.6).

For an optimal solution z* of min_{z in P} w^T z, the stability range along a direction d is the
interval [rho-, rho+] of theta for which z* stays optimal for w + theta d. Each end is one
auxiliary LP (digest eqs. 75-78, with the reconstructed sign):

    min_{alpha, z}  w^T z - alpha w^T z*
    s.t.  A z - alpha b <= 0   (the relaxation, homogenized),   0 <= z <= alpha,
          (d^T z*) alpha - d^T z = t,

whose optimal value is rho+ for t = +1 and -rho- for t = -1; an infeasible LP means an infinite
end. The relaxation's inequalities are separated on z / alpha with the same cutting planes as the
nominal problem and added homogenized. By Theorem 8 the range never over-estimates the true one.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import highspy
import numpy as np
import scipy.sparse as sp
import torch
from torch import Tensor

from .._checks import check_int
from ._highs import cost_scale, new_highs
from ._options import as_real_tensor, check_costs, check_real, check_tol
from .multicut import MulticutResult, _Graph, multicut, separate
from .relaxation import LPResult, _constraints, _cut_row
from .separation import Separator

__all__ = ["stability_range", "variable_stability", "critical_edges", "solution_path", "node_stability"]

Separation = Callable[[np.ndarray], list]
NOT_OPTIMAL = "the solution is not optimal for these weights (its stability range would exclude 0)"


def _row_matrix(rows: list, n: int) -> sp.csr_array:
    """Homogenized rows (idx, coef, rhs) -> coef . z - rhs alpha over the n + 1 columns (z, alpha)."""
    if not rows:
        return sp.csr_array((0, n + 1))
    r = np.concatenate([np.full(len(idx) + 1, k) for k, (idx, _, _) in enumerate(rows)])
    c = np.concatenate([np.append(np.asarray(idx, dtype=np.int64), n) for idx, _, _ in rows])
    v = np.concatenate([np.append(np.asarray(coef, dtype=float), -rhs) for _, coef, rhs in rows])
    return sp.csr_array((v, (r, c)), shape=(len(rows), n + 1))


class _Auxiliary:
    """The auxiliary LPs of one solution in one HiGHS model: the rows are built once, and each call
    rewrites the direction's row (d^T z*) alpha - d^T z = t. With ``warm`` the model re-solves from
    the previous basis and keeps the cuts found for earlier directions (they describe the polytope);
    that halves the time on MAP-MRF problems, whereas multicut problems, whose cycle cuts pile up,
    are faster from the base model each time. The costs are scaled to [-1, 1] and each direction
    to unit size (HiGHS's tolerances are absolute), and the ranges scaled back."""

    def __init__(self, w: np.ndarray, z_star: np.ndarray, rows: list, equalities: list, sep: Separation,
                 tol: float, max_iter: int, warm: bool = False):
        n, inf = len(w), highspy.kHighsInf
        self.z_star, self.sep, self.tol, self.max_iter, self.n = z_star, sep, tol, max_iter, n
        box = sp.hstack([sp.eye_array(n), sp.csr_array(-np.ones((n, 1)))])  # z_i - alpha <= 0
        ineq, eq = _row_matrix(rows, n), _row_matrix(equalities, n)
        placeholder = sp.csr_array(([1.0], ([0], [n])), shape=(1, n + 1))  # the direction's row
        A = sp.vstack([box, ineq, eq, placeholder]).tocsc()
        k = box.shape[0] + ineq.shape[0]
        self.row = A.shape[0] - 1
        lp = highspy.HighsLp()
        lp.num_col_, lp.num_row_ = n + 1, A.shape[0]
        self.w_scale = cost_scale(w)
        lp.col_cost_ = np.append(w, -float(w @ z_star)) / self.w_scale
        lp.col_lower_, lp.col_upper_ = np.zeros(n + 1), np.full(n + 1, inf)
        lp.row_lower_ = np.concatenate([np.full(k, -inf), np.zeros(eq.shape[0]), [0.0]])
        lp.row_upper_ = np.zeros(A.shape[0])
        lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        lp.a_matrix_.start_, lp.a_matrix_.index_, lp.a_matrix_.value_ = A.indptr, A.indices, A.data
        lp.a_matrix_.num_col_, lp.a_matrix_.num_row_ = n + 1, A.shape[0]
        self.h = new_highs()
        self.h.passModel(lp)
        self.base, self.warm = lp, warm
        self.columns = np.zeros(0, dtype=np.int64)  # the z columns the direction's row uses now

    def _set_direction(self, d: np.ndarray, t: float) -> None:
        h, row = self.h, self.row
        for col in self.columns:
            h.changeCoeff(row, int(col), 0.0)
        self.columns = np.nonzero(d)[0]
        for col in self.columns:
            h.changeCoeff(row, int(col), float(-d[col]))
        h.changeCoeff(row, self.n, float(d @ self.z_star))
        h.changeRowBounds(row, t, t)

    def value(self, d: np.ndarray, t: float) -> float:
        """Optimal value for the direction d and side t, or +inf when infeasible."""
        n, inf, h = self.n, highspy.kHighsInf, self.h
        if not self.warm:
            h.passModel(self.base)
            self.columns = np.zeros(0, dtype=np.int64)
        self._set_direction(d, t)
        for _ in range(self.max_iter):
            h.run()
            status = h.getModelStatus()
            if status == highspy.HighsModelStatus.kInfeasible:
                return math.inf
            if status == highspy.HighsModelStatus.kUnbounded:  # only below a non-optimal z*
                raise ValueError(NOT_OPTIMAL)
            if status != highspy.HighsModelStatus.kOptimal:
                raise RuntimeError(f"the auxiliary stability LP did not solve: HiGHS status "
                                   f"'{h.modelStatusToString(status)}'")
            x = np.asarray(h.getSolution().col_value)
            alpha = x[n]
            found = self.sep(np.clip(x[:n] / alpha, 0.0, 1.0)) if alpha > self.tol else []
            if not found:
                return float(h.getInfo().objective_function_value)
            M = _row_matrix(found, n)
            h.addRows(M.shape[0], np.full(M.shape[0], -inf), np.zeros(M.shape[0]), M.nnz,
                      M.indptr[:-1].astype(np.int32), M.indices.astype(np.int32), M.data)
        raise RuntimeError(f"the auxiliary stability LP did not converge in max_iter = {self.max_iter} "
                           f"rounds")

    def range(self, d: np.ndarray) -> tuple[float, float]:
        scale = float(np.abs(d).max()) if len(d) else 0.0
        if scale == 0.0:
            return -math.inf, math.inf
        # rho(w, d) = rho(w / w_scale, d / scale) * w_scale / scale
        plus, minus = self.value(d / scale, 1.0), self.value(d / scale, -1.0)
        if plus < -1e-7 or minus < -1e-7:  # relative to the largest cost: the costs are scaled
            raise ValueError(NOT_OPTIMAL)
        unit = self.w_scale / scale
        return (-minus * unit if math.isfinite(minus) else -math.inf), plus * unit


def _direction(direction, n: int) -> np.ndarray:
    """The direction as a real (n,) float64 array, finite and below the solver's infinity."""
    d = as_real_tensor("direction", direction, (n,), f"(E,) or (n,) = ({n},), one entry per variable")
    d = d.detach().double().cpu().numpy()
    check_costs("direction", d)
    return d


def _check_index(index: object, size: int) -> int:
    index = check_int("index", index, 0)
    if index >= size:
        raise ValueError(f"index must lie in [0, B) = [0, {size}) (an instance of the result), got {index}")
    return index


def _multicut_problem(result: MulticutResult, direction):
    if not result.integral:
        raise ValueError("stability ranges need an integral (certified optimal) solution; this one is "
                         "fractional")
    if not result.converged:
        raise ValueError("stability ranges need a converged solution; this one stopped at max_iter with "
                         "violated cuts left (raise max_iter)")
    g = _Graph(result.edges.numpy(), result.num_nodes)
    rows = [(idx, coef, rhs) for _, idx, coef, rhs in result.cuts]

    def sep(z):
        return [(idx, coef, rhs) for _, idx, coef, rhs in separate(g, z, result.relaxation, 1e-9)]

    return result.weights.numpy(), result.z.numpy(), _direction(direction, len(result.edges)), rows, sep, []


def _map_problem(result: LPResult, direction, index: int):
    """The local polytope (+ connectivity cuts) of instance ``index`` of an LPResult."""
    if result.cost is None or result.soft:
        raise ValueError("stability ranges need an LPResult of map_lp without soft connectivity")
    if not bool(result.integral[index]):
        raise ValueError(f"stability ranges need an integral solution; instance {index} is fractional")
    if not bool(result.converged[index]):
        raise ValueError(f"stability ranges need a converged solution; instance {index} stopped at max_iter "
                         "with violated cuts left (raise max_iter)")
    B, V, L = result.mu.shape
    E = len(result.edges)
    z_star = torch.cat([result.mu[index].reshape(-1), result.mu_edges[index].reshape(-1)])
    z_star = z_star.double().cpu().numpy()
    A = _constraints(V, L, result.edges).tocsr()
    rhs = np.concatenate([np.ones(V), np.zeros(2 * E * L)])
    equalities = [(A.indices[A.indptr[r]:A.indptr[r + 1]], A.data[A.indptr[r]:A.indptr[r + 1]], rhs[r])
                  for r in range(A.shape[0])]
    rows = [(*_cut_row(c, i, j, S.numpy(), L), 1.0) for c, i, j, S in result.cuts[index]]
    sep_graph = Separator.build(result.edges, V) if result.connected else None

    def sep(z):
        out = []
        for c in result.connected:
            y = z[np.arange(V) * L + c]
            out += [(*_cut_row(c, i, j, S, L), 1.0) for _, i, j, S in sep_graph.violated(y, 1e-9, None, 1)]
        return out

    return result.cost[index].numpy(), z_star, _direction(direction, len(z_star)), rows, sep, equalities


def _problem(result, direction, index: int = 0):
    if isinstance(result, MulticutResult):
        _check_index(index, 1)
        return _multicut_problem(result, direction)
    if isinstance(result, LPResult):
        return _map_problem(result, direction, _check_index(index, result.mu.shape[0]))
    raise TypeError(f"result must be a MulticutResult or an LPResult, got {type(result).__name__}")


def _check_optimal(w: np.ndarray, z_star: np.ndarray, rows, equalities, tol: float = 1e-7) -> None:
    """z* must satisfy its own constraints (a cheap guard against a mismatched result)."""
    for idx, coef, rhs in rows:
        if float(np.dot(coef, z_star[np.asarray(idx)])) > rhs + tol:
            raise ValueError("the solution violates its own cuts: it is not optimal for these weights")
    for idx, coef, rhs in equalities:
        if abs(float(np.dot(coef, z_star[np.asarray(idx)])) - rhs) > tol:
            raise ValueError("the solution violates the local polytope: it is not optimal for these weights")


def _auxiliary(result, direction, index: int, tol: float, max_iter: int) -> tuple[_Auxiliary, np.ndarray]:
    """The validated problem's auxiliary LPs, and the direction as an array."""
    tol, max_iter = check_tol("tol", tol, upper=None), check_int("max_iter", max_iter, 1)
    w, z_star, d, rows, sep, equalities = _problem(result, direction, index)
    _check_optimal(w, z_star, rows, equalities)
    return _Auxiliary(w, z_star, rows, equalities, sep, tol, max_iter, isinstance(result, LPResult)), d


def stability_range(result: MulticutResult | LPResult, direction: Tensor, *, index: int = 0,
                    tol: float = 1e-9, max_iter: int = 1000) -> tuple[float, float]:
    """(rho_minus, rho_plus): z* of ``result`` stays optimal over the relaxation for the weights
    w + theta d, theta in [rho_minus, rho_plus] (-inf / +inf when unbounded).

    Parameters
    ----------
    result : MulticutResult or LPResult
        An integral solution of :func:`multicut` (weights w over the E edges), or instance
        ``index`` of :func:`map_lp` (w = the energy -[unary, pairwise] flattened, n = V L + E L^2
        variables; connectivity cuts included, soft connectivity not supported).
    direction : Tensor (E,) or (n,)
        The perturbation d of the minimized weights: real, finite, below 1e20 in magnitude.
    index : int in [0, B)
        The instance of an LPResult (0 for a MulticutResult).
    tol : float > 0
        Smallest homogenization variable alpha for which the cuts are separated.
    max_iter : int >= 1
        Most separation rounds per auxiliary LP.

    Notes
    -----
    The auxiliary LPs are solved for the weights scaled to [-1, 1] and a unit-size direction, and
    the range is scaled back, so ranges scale exactly with the weights and inversely with d.
    """
    aux, d = _auxiliary(result, direction, index, tol, max_iter)
    return aux.range(d)


def _ranges(result, directions: np.ndarray, index: int, tol: float = 1e-9, max_iter: int = 1000) -> Tensor:
    """(k, 2) ranges of several directions (k, n), sharing the auxiliary LP's rows."""
    first = directions[0] if len(directions) else np.zeros(directions.shape[1])
    aux, _ = _auxiliary(result, first, index, tol, max_iter)  # validates the options even for k = 0
    if not len(directions):
        return torch.zeros(0, 2, dtype=torch.float64)
    return torch.tensor([aux.range(np.asarray(d, dtype=np.float64)) for d in directions], dtype=torch.float64)


def variable_stability(result: MulticutResult, **options) -> Tensor:
    """(E, 2) stability ranges for d = e_m, each edge weight moved alone. Cut edges get
    [-inf, a >= 0], uncut edges [b <= 0, +inf]. ``options``: tol, max_iter of
    :func:`stability_range`."""
    if not isinstance(result, MulticutResult):
        raise TypeError(f"result must be a MulticutResult, got {type(result).__name__}")
    return _ranges(result, np.eye(len(result.edges)), 0, **options)


def critical_edges(graph, *, relaxation: str = "cycle+oddwheel") -> list[tuple]:
    """Edges of a networkx graph whose removal changes the optimal modularity partition: edge e is
    critical iff 1 is outside the range for d = w(V, E minus e) - w(V, E) (digest §2.9c)."""
    from .clustering import modularity_weights

    edges, w = modularity_weights(graph)
    result = multicut(edges, w, relaxation=relaxation)
    if not result.integral:
        raise ValueError("the relaxation's optimum is fractional: no certified partition to test")
    critical = []
    for a, b in list(graph.edges):
        reduced = graph.copy()
        reduced.remove_edge(a, b)
        d = modularity_weights(reduced)[1] - w
        lo, hi = stability_range(result, d)
        if not lo <= 1.0 <= hi:
            critical.append((a, b))
    return critical


PathStep = tuple[tuple[float, float], MulticutResult]


def solution_path(result: MulticutResult, direction: Tensor, theta_min: float, theta_max: float, *,
                  eps: float | None = None, max_steps: int = 200) -> list[PathStep]:
    """The optimal partitions along w + theta d for theta in [theta_min, theta_max]: a list of
    ((lo, hi), solution) with the stability interval of each, walking from theta_min upward and
    re-solving ``eps`` past each breakpoint.

    ``theta_min <= theta_max`` finite; ``eps > 0`` (default 1e-6 max|w| / max|d|, the unit of
    theta, so that the path does not depend on the scale of w and d); ``max_steps >= 1``.
    """
    if not isinstance(result, MulticutResult):
        raise TypeError(f"result must be a MulticutResult, got {type(result).__name__}")
    theta_min, theta_max = check_real("theta_min", theta_min), check_real("theta_max", theta_max)
    if not theta_min <= theta_max:
        raise ValueError(f"need theta_min <= theta_max, got {theta_min} and {theta_max}")
    max_steps = check_int("max_steps", max_steps, 1)
    d = torch.from_numpy(_direction(direction, len(result.edges)))
    w = result.weights
    unit = cost_scale(w.numpy()) / cost_scale(d.numpy())
    eps = 1e-6 * unit if eps is None else check_real("eps", eps, minimum=0.0, strict=True)
    theta, path = theta_min, []
    for _ in range(max_steps):
        current = multicut(result.edges, w + theta * d, relaxation=result.relaxation,
                           num_nodes=result.num_nodes)
        if not current.integral:
            raise ValueError(f"the relaxation is fractional at theta = {theta}: no certified partition")
        lo, hi = stability_range(current, d)
        path.append(((theta + lo, theta + hi), current))
        if theta + hi >= theta_max:
            return path
        theta = theta + hi + eps
    raise RuntimeError(f"the solution path needs more than max_steps = {max_steps} solutions")


def node_stability(result: LPResult, *, index: int = 0, **options) -> Tensor:
    """(V,) per-node stability of an integral MAP labeling: how much energy the chosen label of
    node i can take (d = e_(i, y_i), its unary pushed toward the other labels) before the optimal
    labeling changes, rho_+ of that direction; +inf where no amount changes it. A
    non-probabilistic confidence map for segmentations. ``options``: tol, max_iter of
    :func:`stability_range`."""
    if not isinstance(result, LPResult):
        raise TypeError(f"result must be an LPResult, got {type(result).__name__}")
    B, V, L = result.mu.shape
    index = _check_index(index, B)
    labels = result.mu[index].argmax(1).cpu().numpy()
    directions = np.zeros((V, result.mu[index].numel() + result.mu_edges[index].numel()))
    directions[np.arange(V), np.arange(V) * L + labels] = 1.0
    return _ranges(result, directions, index, **options)[:, 1]
