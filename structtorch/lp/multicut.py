"""Graph partitioning over the multicut polytope by cutting planes (Nowozin 2009, ch. 7).

    min_z  sum_e w_e z_e      z_e = 1 iff the edge e = (i, j) joins two different clusters,

over the relaxation of the multicut polytope (Algorithm 8): the box [0, 1]^E, the cycle
inequalities z_m <= sum_{e in p} z_e for every edge m and every path p between its ends
(separated by shortest paths, eq. 79; "LP-C") and, once no cycle inequality is violated, the
odd-wheel inequalities sum_{E(C)} z - sum_{i in C} z_{j i} <= (|C| - 1) / 2 for odd cycles C
around a centre j (separated by shortest odd cycles in the bipartite double cover of the centre's
neighbourhood with weights 1/2 - z_st + (z_js + z_jt) / 2, violated below 1/2: the digest's
corrected threshold; "LP-CO"). An integral optimum certifies the optimal partition.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
import torch
from scipy.sparse.csgraph import connected_components, dijkstra
from torch import Tensor

from .._checks import check_int
from ._highs import cost_scale
from ._options import check_costs, check_real_tensor, check_tol
from .graph import check_edges, num_nodes_of
from .relaxation import _Instance

__all__ = ["multicut", "MulticutResult", "RELAXATIONS"]

RELAXATIONS = ("cycle", "cycle+oddwheel")


@dataclass
class MulticutResult:
    """Solution of :func:`multicut`.

    Attributes
    ----------
    z : Tensor (E,) float64
        Edge variables (1: cut).
    objective : float
        sum_e w_e z_e, a lower bound on the optimal partition's objective (equal when integral).
    integral : bool
        z is integral and violates no inequality of the relaxation (False when ``max_iter``
        stopped the loop early): the partition is certified optimal.
    clusters : Tensor (V,) int64 or None
        Cluster label per node when integral.
    cuts : list of (kind, edge indices (k,) int64, coefficients (k,), rhs)
        The inequalities added ("cycle" or "oddwheel"), each ``coefficients . z[edges] <= rhs``.
    iterations : int
        LP solves.
    time : float
        Seconds.
    edges, weights : the problem (E, 2) int64 and (E,) float64; relaxation : str; num_nodes : int.
    converged : bool
        The last solution violates no inequality of the relaxation, so ``objective`` is the
        relaxation's optimum (a lower bound on the best partition's objective). False when
        ``max_iter`` stopped the loop first: ``z`` is then only the optimum of the cuts found so
        far, and ``objective`` is not a valid bound. (False by default for results built by hand:
        nothing certified them.)
    """

    z: Tensor
    objective: float
    integral: bool
    clusters: Tensor | None
    cuts: list
    iterations: int
    time: float
    edges: Tensor = field(repr=False)
    weights: Tensor = field(repr=False)
    relaxation: str = "cycle+oddwheel"
    num_nodes: int = 0
    converged: bool = False


class _Graph:
    """Edge lookup and shortest paths with edge lengths z (zero lengths are kept as edges)."""

    def __init__(self, edges: np.ndarray, V: int):
        self.edges, self.V = edges, V
        self.index = {(int(a), int(b)): e for e, (a, b) in enumerate(edges)}
        self.index.update({(b, a): e for (a, b), e in list(self.index.items())})
        self.neighbours = [[] for _ in range(V)]
        for a, b in edges:
            self.neighbours[a].append(int(b))
            self.neighbours[b].append(int(a))

    def lengths(self, z: np.ndarray) -> sp.csr_array:
        e = self.edges
        rows, cols = np.concatenate([e[:, 0], e[:, 1]]), np.concatenate([e[:, 1], e[:, 0]])
        return sp.csr_array((np.concatenate([z, z]), (rows, cols)), shape=(self.V, self.V))


def _path(pred: np.ndarray, source: int, target: int) -> list[int]:
    nodes = [target]
    while nodes[-1] != source:
        nodes.append(int(pred[nodes[-1]]))
    return nodes[::-1]


def _cycle_cuts(g: _Graph, z: np.ndarray, tol: float) -> list:
    """z_m <= sum_{e in p} z_e violated for the shortest path p between the ends of m."""
    dist, pred = dijkstra(g.lengths(z), directed=False, return_predecessors=True)
    cuts, seen = [], set()
    for m in np.argsort(-z):
        i, j = (int(v) for v in g.edges[m])
        if z[m] <= tol or dist[i, j] >= z[m] - tol:
            continue
        nodes = _path(pred[i], i, j)
        path = [g.index[(a, b)] for a, b in zip(nodes[:-1], nodes[1:], strict=True)]
        if m in path:
            continue
        key = (int(m), tuple(sorted(path)))
        if key not in seen:
            seen.add(key)
            idx = np.array([m, *path], dtype=np.int64)
            cuts.append(("cycle", idx, np.concatenate([[1.0], -np.ones(len(path))]), 0.0))
    return cuts


def _simple_odd_cycle(walk: list[int]) -> list[int]:
    """A simple odd cycle inside a closed odd walk (given without repeating its start at the end)."""
    while True:
        first = {}
        for pos, v in enumerate(walk):
            if v in first:
                a, b = first[v], pos
                inner, outer = walk[a:b], walk[:a] + walk[b:]
                walk = inner if len(inner) % 2 == 1 else outer
                break
            first[v] = pos
        else:
            return walk


def _oddwheel_cuts(g: _Graph, z: np.ndarray, tol: float) -> list:
    """Odd-wheel inequalities violated by z, one per centre (the shortest odd cycle)."""
    cuts = []
    for j in range(g.V):
        nb = g.neighbours[j]
        if len(nb) < 3:
            continue
        local = {v: k for k, v in enumerate(nb)}
        rows, cols, vals = [], [], []
        for s_ in nb:
            for t in g.neighbours[s_]:
                if t in local and local[s_] < local[t]:
                    w = 0.5 - z[g.index[(s_, t)]] + 0.5 * (z[g.index[(j, s_)]] + z[g.index[(j, t)]])
                    w = max(w, 0.0)
                    n, a, b = len(nb), local[s_], local[t]
                    rows += [a, n + a, b, n + b]  # s' - t'', s'' - t', t' - s'', t'' - s'
                    cols += [n + b, b, n + a, a]
                    vals += [w, w, w, w]
        if not rows:
            continue
        n = len(nb)
        cover = sp.csr_array((np.array(vals), (np.array(rows), np.array(cols))), shape=(2 * n, 2 * n))
        dist, pred = dijkstra(cover, directed=True, indices=np.arange(n), return_predecessors=True)
        best = min(range(n), key=lambda a: dist[a, n + a])
        if not dist[best, n + best] < 0.5 - tol:
            continue
        walk = [v % n for v in _path(pred[best], best, n + best)][:-1]
        cycle = [nb[v] for v in _simple_odd_cycle(walk)]
        q = len(cycle)
        rim = [g.index[(a, b)] for a, b in zip(cycle, cycle[1:] + cycle[:1], strict=True)]
        spokes = [g.index[(j, v)] for v in cycle]
        idx = np.array(rim + spokes, dtype=np.int64)
        coef = np.concatenate([np.ones(q), -np.ones(q)])
        if float(coef @ z[idx]) > (q - 1) / 2 + tol:
            cuts.append(("oddwheel", idx, coef, (q - 1) / 2))
    return cuts


def separate(g: _Graph, z: np.ndarray, relaxation: str, tol: float) -> list:
    cuts = _cycle_cuts(g, z, tol)
    if not cuts and relaxation == "cycle+oddwheel":
        cuts = _oddwheel_cuts(g, z, tol)
    return cuts


def _clusters(edges: np.ndarray, z: np.ndarray, V: int) -> Tensor:
    keep = edges[z < 0.5]
    adj = sp.csr_array((np.ones(len(keep)), (keep[:, 0], keep[:, 1])), shape=(V, V))
    return torch.from_numpy(connected_components(adj, directed=False)[1]).long()


def _check_problem(edges, weights, num_nodes) -> tuple[Tensor, np.ndarray, int]:
    """(edges (E, 2) int64, weights (E,) float64, V) validated."""
    V = num_nodes_of(edges, num_nodes)
    edges = check_edges(edges, V)
    E = len(edges)
    weights = check_real_tensor("weights", weights, (E,), f"(E,) = ({E},)")
    check_costs("weights", weights)
    return edges, weights.detach().double().cpu().numpy(), V


def multicut(
    edges: Tensor,
    weights: Tensor,
    *,
    relaxation: str = "cycle+oddwheel",
    max_iter: int = 1000,
    tol: float = 1e-7,
    num_nodes: int | None = None,
) -> MulticutResult:
    """Minimize sum_e w_e z_e over a relaxation of the multicut polytope (Algorithm 8).

    Parameters
    ----------
    edges : Tensor (E, 2) int64
        A simple graph (i < j, no duplicates).
    weights : Tensor (E,)
        Real (not complex), finite and below 1e20 in magnitude; w_e < 0 favours cutting edge e,
        w_e > 0 keeping its ends together.
    relaxation : {"cycle", "cycle+oddwheel"}
        LP-C or LP-CO.
    max_iter : int >= 1
        Most LP solves.
    tol : float in (0, 1)
        Separation and integrality tolerance (on z, which lies in [0, 1]).
    num_nodes : int >= 0, optional
        V (default: the largest node index plus one; needed when E = 0).

    Returns
    -------
    MulticutResult
        Check ``converged`` (or ``integral``, which implies it) before trusting ``objective`` as a
        bound. E = 0 gives every node its own cluster, objective 0, converged.

    Notes
    -----
    The LPs are solved for ``weights / max |weights|``, so the solution does not depend on the
    scale of the weights (modularity weights are of order 1 / m^2); weights smaller than about
    1e-7 of the largest one are at the solver's resolution (see :mod:`structtorch.lp._highs`).

    Examples
    --------
    >>> import torch
    >>> from structtorch.lp import multicut
    >>> edges = torch.tensor([[0, 1], [1, 2], [0, 2]])
    >>> result = multicut(edges, torch.tensor([1.0, 1.0, -3.0]))  # w < 0: cutting the edge pays
    >>> result.z.tolist(), result.objective, result.clusters.tolist(), result.converged
    ([1.0, 0.0, 1.0], -2.0, [0, 1, 1], True)
    """
    t0 = time.perf_counter()
    if relaxation not in RELAXATIONS:
        raise ValueError(f"relaxation must be one of {RELAXATIONS}, got {relaxation!r}")
    max_iter, tol = check_int("max_iter", max_iter, 1), check_tol("tol", tol)
    edges, w, V = _check_problem(edges, weights, num_nodes)
    E = len(edges)
    g = _Graph(edges.numpy(), V)
    inst = _Instance(w / cost_scale(w), sp.csc_array((0, E)), np.zeros(0), 0)
    cuts, iterations, found, z = [], 0, [], np.zeros(0)
    while E and iterations < max_iter:
        z = np.clip(inst.solve(), 0.0, 1.0)
        iterations += 1
        found = separate(g, z, relaxation, tol)
        if not found or iterations >= max_iter:
            break
        inst.add_rows([(idx, coef) for _, idx, coef, _ in found], np.array([rhs for *_, rhs in found]))
        cuts += found
    # an integral z certifies the optimum only when no inequality is left violated
    integral = not found and bool(((z < tol) | (z > 1 - tol)).all())
    z = np.round(z) + 0.0 if integral else z  # + 0.0: no -0.0
    return MulticutResult(torch.from_numpy(z), float(w @ z), integral,
                          _clusters(edges.numpy(), z, V) if integral else None, cuts, iterations,
                          time.perf_counter() - t0, edges, torch.from_numpy(w), relaxation, V, not found)
