"""Separation of the connectivity (vertex-separator) inequalities by minimum cuts.

For a label plane y in [0, 1]^V the connected-subgraph polytope is described by

    y_i + y_j - sum_{k in S} y_k <= 1    for non-adjacent i, j and every (i, j) vertex separator S

(Nowozin 2009, Thm. 5-6; digest eqs. 64-68). For a pair (i, j) the most violated inequality is a
minimum-weight vertex cut: split every vertex k into k_in -> k_out with capacity y_k, join
neighbours by infinite arcs s_out -> t_in, and cut from i_out to j_in. The max-flow is
:func:`scipy.sparse.csgraph.maximum_flow` (integer capacities: y is scaled by about 1e6 and the
violation of the separator found is then computed exactly from y). Only pairs with
y_i + y_j > 1 can be violated, and vertices joined by a path of y = 1 vertices are equivalent, so
one representative per such component is enough (the union-find speed-up of the thesis, here
:func:`scipy.sparse.csgraph.connected_components`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch
from scipy.sparse.csgraph import breadth_first_order, connected_components, maximum_flow
from torch import Tensor

from ._options import check_real_tensor, check_tol
from .graph import adjacency, check_edges

__all__ = ["connectivity_cut", "Separator"]

_INF = 2**30


@dataclass
class Separator:
    """Flow network of one graph, built once and reused for every pair and every y."""

    num_nodes: int
    adjacency: sp.csr_array  # (V, V) symmetric
    network: sp.csr_array  # (2V, 2V) int32 capacities; split arcs hold placeholders
    split: np.ndarray  # positions of the arcs k_in -> k_out in network.data, by k

    @classmethod
    def build(cls, edges: Tensor, num_nodes: int) -> Separator:
        V = num_nodes
        adj = adjacency(edges, V)
        src, dst = adj.nonzero()
        rows = np.concatenate([np.arange(V), V + src])  # k_in -> k_out, s_out -> t_in
        cols = np.concatenate([V + np.arange(V), dst])
        caps = np.concatenate([np.ones(V), np.full(len(src), _INF)]).astype(np.int32)
        net = sp.csr_array((caps, (rows, cols)), shape=(2 * V, 2 * V))
        net.sort_indices()
        split = np.array([net.indptr[k] + np.searchsorted(net.indices[net.indptr[k]:net.indptr[k + 1]], V + k)
                          for k in range(V)], dtype=np.int64)
        return cls(V, adj, net, split)

    def min_separator(self, y: np.ndarray, i: int, j: int, scale: float, blocked: np.ndarray | None = None,
                      near_source: bool = True) -> tuple[float, np.ndarray] | None:
        """Minimum y-weight (i, j) vertex separator avoiding ``blocked`` vertices, the one nearest
        to i (or to j): (exact weight, vertices), or None when every separator needs a blocked
        vertex."""
        V = self.num_nodes
        net = self.network.copy()
        caps = np.minimum(np.round(y * scale), _INF // (V + 1)).astype(np.int32)
        caps[[i, j]] = _INF
        if blocked is not None:
            caps[blocked] = _INF
        net.data[self.split] = caps
        result = maximum_flow(net, V + i, j)  # source i_out, sink j_in
        if result.flow_value >= _INF:
            return None
        residual = (net - result.flow).tocsr()
        residual.data = (residual.data > 0).astype(np.int8)
        residual.eliminate_zeros()
        reached = np.zeros(2 * V, dtype=bool)
        if near_source:  # the vertices reachable from the source: the min cut nearest to i
            reached[breadth_first_order(residual, V + i, directed=True, return_predecessors=False)] = True
            cut = np.nonzero(reached[:V] & ~reached[V:])[0]
        else:  # the vertices that reach the sink: the min cut nearest to j
            into_sink = breadth_first_order(residual.T.tocsr(), j, directed=True, return_predecessors=False)
            reached[into_sink] = True
            cut = np.nonzero(~reached[:V] & reached[V:])[0]
        return float(y[cut].sum()), cut

    def violated(self, y: np.ndarray, tol: float = 1e-6, limit: int | None = None, nested: int = 1,
                 offset: float = 0.0) -> list[tuple[float, int, int, np.ndarray]]:
        """Inequalities violated by more than ``tol + offset`` (``offset``: a soft label's slack),
        as (violation, i, j, separator), most violated first: at most ``nested`` per pair of
        representatives (disjoint separators), and at most ``limit`` (pairs are tried heaviest
        component first, so the first cuts separate the small pieces from the main one)."""
        V = self.num_nodes
        ones = y >= 1 - tol
        _, comp = connected_components(self.adjacency[ones][:, ones], directed=False)
        label = np.full(V, -1)
        label[ones] = comp
        mass = np.bincount(comp, minlength=comp.max() + 1 if len(comp) else 0).astype(float)
        reps = {}
        for k in np.nonzero(ones)[0]:
            reps.setdefault(label[k], k)
        candidates = [(mass[c], k) for c, k in reps.items()]
        candidates += [(y[k], k) for k in np.nonzero((y > tol) & ~ones)[0]]
        order = [k for _, k in sorted(candidates, key=lambda t: -t[0])]
        scale = float(min(1e6, (_INF // 4) / (V + 1)))
        found = []
        for a, i in enumerate(order):
            for j in order[a + 1:]:
                if y[i] + y[j] <= 1 + tol + offset or self.adjacency[i, j]:
                    continue
                found += self.nested(y, int(i), int(j), tol + offset, scale, nested)
                if limit is not None and len(found) >= limit:
                    return sorted(found, key=lambda c: -c[0])[:limit]
        return sorted(found, key=lambda c: -c[0])

    def nested(self, y: np.ndarray, i: int, j: int, tol: float, scale: float,
               count: int) -> list[tuple[float, int, int, np.ndarray]]:
        """Up to ``count`` violated inequalities for (i, j) with disjoint separators ("nested cuts":
        each min cut's vertices are blocked before the next; the cuts alternate between the ones
        nearest to i and to j). Zero-weight separators come in nested rings; cutting several at
        once stops the LP from creeping a fractional path out by one ring per round."""
        out, blocked = [], []
        for k in range(count):
            found = self.min_separator(y, i, j, scale, np.array(blocked, dtype=np.int64), k % 2 == 0)
            if found is None:
                break
            weight, cut = found
            violation = y[i] + y[j] - 1 - weight
            if violation <= tol:
                break
            out.append((float(violation), min(i, j), max(i, j), cut))
            blocked += cut.tolist()
        return out


def connectivity_cut(y: Tensor, edges: Tensor, *, tol: float = 1e-6) -> tuple[float, int, int, Tensor]:
    """The most violated vertex-separator inequality for y (V,) in [0, 1].

    Parameters
    ----------
    y : Tensor (V,)
        Values of one label plane (e.g. ``mu[:, c]`` of an LP solution).
    edges : Tensor (E, 2) int64
        Undirected edges, i < j.
    tol : float in (0, 1)
        Violations up to ``tol`` do not count.

    Returns
    -------
    violation : float
        ``y_i + y_j - 1 - sum_{k in S} y_k`` of the most violated inequality (> tol), or 0.0 when
        none is violated.
    i, j : int
        The separated pair (i < j), -1 when none is violated.
    separator : Tensor (|S|,) int64
        The vertex separator S (empty when none is violated).
    """
    check_real_tensor("y", y)
    if y.dim() != 1:
        raise ValueError(f"y must be a (V,) tensor, got shape {tuple(y.shape)}")
    tol = check_tol("tol", tol)
    values = y.detach().double().cpu().numpy()
    if np.isnan(values).any() or (values < -tol).any() or (values > 1 + tol).any():
        raise ValueError(f"y must lie in [0, 1] (up to tol = {tol:g}) and not be NaN")
    sep = Separator.build(check_edges(edges, len(values)), len(values))
    found = sep.violated(np.clip(values, 0.0, 1.0), tol)  # every pair: the most violated comes first
    if not found:
        return 0.0, -1, -1, torch.zeros(0, dtype=torch.long)
    violation, i, j, cut = found[0]
    return violation, i, j, torch.from_numpy(cut).long()
