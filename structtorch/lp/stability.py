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
import torch
from torch import Tensor

from .multicut import MulticutResult, _Graph, multicut, separate

__all__ = ["stability_range", "variable_stability", "critical_edges", "solution_path"]

Separation = Callable[[np.ndarray], list]


def _auxiliary(w: np.ndarray, z_star: np.ndarray, d: np.ndarray, t: float, rows: list, sep: Separation,
               tol: float, max_iter: int) -> float:
    """Optimal value of the auxiliary LP, or +inf when it is infeasible."""
    n = len(w)
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    inf = highspy.kHighsInf
    # columns: z (n), alpha
    h.addVars(n + 1, np.zeros(n + 1), np.full(n + 1, inf))
    h.changeColsCost(n + 1, np.arange(n + 1, dtype=np.int32), np.append(w, -float(w @ z_star)))
    box = [(np.array([i, n]), np.array([1.0, -1.0]), 0.0) for i in range(n)]  # z_i - alpha <= 0

    def add(rows):
        starts = np.cumsum([0] + [len(idx) for idx, _, _ in rows[:-1]]).astype(np.int32)
        index = np.concatenate([np.asarray(idx) for idx, _, _ in rows]).astype(np.int32)
        value = np.concatenate([np.asarray(c, dtype=float) for _, c, _ in rows])
        h.addRows(len(rows), np.full(len(rows), -inf), np.zeros(len(rows)), len(index), starts, index, value)

    def homogenized(rows):  # a z <= b  ->  a z - alpha b <= 0
        return [(np.append(idx, n), np.append(coef, -rhs), 0.0) for idx, coef, rhs in rows]

    add(box + homogenized(rows))
    h.addRow(t, t, n + 1, np.arange(n + 1, dtype=np.int32), np.append(-d, float(d @ z_star)))
    for _ in range(max_iter):
        h.run()
        status = h.getModelStatus()
        if status == highspy.HighsModelStatus.kInfeasible:
            return math.inf
        if status != highspy.HighsModelStatus.kOptimal:
            raise RuntimeError(f"the auxiliary stability LP did not solve: HiGHS status "
                               f"'{h.modelStatusToString(status)}'")
        x = np.asarray(h.getSolution().col_value)
        alpha = x[n]
        found = sep(np.clip(x[:n] / alpha, 0.0, 1.0)) if alpha > tol else []
        if not found:
            return float(h.getInfo().objective_function_value)
        add(homogenized(found))
    raise RuntimeError(f"the auxiliary stability LP did not converge in max_iter = {max_iter} rounds")


def _problem(result: MulticutResult, direction: Tensor):
    if not isinstance(result, MulticutResult):
        raise TypeError(f"result must be a MulticutResult, got {type(result).__name__}")
    if not result.integral:
        raise ValueError("stability ranges need an integral (certified optimal) solution")
    E = len(result.edges)
    d = torch.as_tensor(direction, dtype=torch.float64)
    if d.shape != (E,):
        raise ValueError(f"direction must have shape (E,) = ({E},), got {tuple(d.shape)}")
    if not bool(torch.isfinite(d).all()):
        raise ValueError("direction must be finite")
    g = _Graph(result.edges.numpy(), result.num_nodes)
    rows = [(idx, coef, rhs) for _, idx, coef, rhs in result.cuts]

    def sep(z):
        return [(idx, coef, rhs) for _, idx, coef, rhs in separate(g, z, result.relaxation, 1e-9)]

    return result.weights.numpy(), result.z.numpy(), d.numpy(), rows, sep


def stability_range(result: MulticutResult, direction: Tensor, *, tol: float = 1e-9,
                    max_iter: int = 1000) -> tuple[float, float]:
    """(rho_minus, rho_plus): z* of ``result`` stays optimal over the relaxation for the weights
    w + theta d, theta in [rho_minus, rho_plus] (-inf / +inf when unbounded).

    Parameters
    ----------
    result : MulticutResult
        An integral solution of :func:`multicut`.
    direction : Tensor (E,)
        The perturbation d.
    """
    w, z_star, d, rows, sep = _problem(result, direction)
    plus = _auxiliary(w, z_star, d, 1.0, rows, sep, tol, max_iter)
    minus = _auxiliary(w, z_star, d, -1.0, rows, sep, tol, max_iter)
    return (-minus if math.isfinite(minus) else -math.inf), plus


def variable_stability(result: MulticutResult, **options) -> Tensor:
    """(E, 2) stability ranges for d = e_m, each edge weight moved alone. Cut edges get
    [-inf, a >= 0], uncut edges [b <= 0, +inf]."""
    E = len(result.edges)
    out = torch.empty(E, 2, dtype=torch.float64)
    for m in range(E):
        d = torch.zeros(E, dtype=torch.float64)
        d[m] = 1.0
        out[m] = torch.tensor(stability_range(result, d, **options))
    return out


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
                  eps: float = 1e-6, max_steps: int = 200) -> list[PathStep]:
    """The optimal partitions along w + theta d for theta in [theta_min, theta_max]: a list of
    ((lo, hi), solution) with the stability interval of each, walking from theta_min upward and
    re-solving just past each breakpoint."""
    if not theta_min <= theta_max:
        raise ValueError(f"need theta_min <= theta_max, got {theta_min} and {theta_max}")
    d = torch.as_tensor(direction, dtype=torch.float64)
    w = result.weights
    theta, path = theta_min, []
    for _ in range(max_steps):
        current = multicut(result.edges, w + theta * d, relaxation=result.relaxation,
                           num_nodes=result.num_nodes)
        if not current.integral:
            raise ValueError(f"the relaxation is fractional at theta = {theta}: no certified partition")
        lo, hi = stability_range(current, d)
        path.append(((theta + lo, theta + hi), current))
        if theta + hi >= theta_max:
            break
        theta = theta + hi + eps
    return path
