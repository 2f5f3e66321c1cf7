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

Most pairs need no flow at all (issue 26). Call the vertices of positive (scaled, rounded)
capacity, i, j and the blocked vertices the *support*. When i and j lie in different components of
the support, the cut is a zero-capacity one: the non-support neighbours of i's component (the cut
nearest to i) or of j's (nearest to j). Otherwise a path from i to j whose inner vertices all weigh
at least y_i + y_j - 1 - tol certifies that no (i, j) inequality is violated (every separator holds
one of them), and only when there is none does a flow run, on the network of that component and
its non-support neighbours: vertices further out can neither be reached from i_out nor reach j_in
in the residual graph, so both nearest minimum cuts are the ones of the whole network. The
components come from one breadth-first search, or, for a support that several pairs of a round
share (the first cut of one representative i is the same for every j), from one labelling of all
components, kept for the round in a cache of bounded size (least recently used out). The cuts,
and so the LP's rows and optimum, are exactly those of one max-flow per pair on the whole network;
on thin, noisy label planes the support components are small and most pairs lie in different ones.

:meth:`Separator.violated` runs this round compiled (``csrc/separation.cpp``) where the C++ kernels
built and the CPU backend is "compiled" (the default): the same pairs in the same order, the same
capacities, and the nearest minimum cuts, which do not depend on the max-flow algorithm, so the
cuts, their violations (summed in numpy's order) and their order are those of the Python round,
bit for bit (tested). There, the first cut of a pair of positive vertices reads the components of
the positive vertices (labelled once per plane), and one widest-path search from i certifies all
its pairs at once. ``use_backend("torch")`` runs the Python round, the reference.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
import torch
from scipy.sparse.csgraph import breadth_first_order, connected_components, maximum_flow
from torch import Tensor

from .._backend import _choose, fast_ops
from .._checks import check_int
from ._options import check_connected, check_real_tensor, check_tol
from .graph import adjacency, check_edges

__all__ = ["connectivity_cut", "connectivity_cuts", "Separator"]

_INF = 2**30
_MARGIN = 1e-9  # certificates of "not violated" keep this far from the tolerance (rounding)
_CACHED_LABELS = 1 << 22  # vertex labels a round keeps at most (about): bounds _Plane.seen

Cut = tuple[float, int, int, np.ndarray]  # (violation, i, j, separator)
Weighted = tuple[float, np.ndarray]  # (exact y-weight, separator)


@dataclass
class Separator:
    """The graph of one label plane, built once and reused for every pair, round and y.

    Attributes
    ----------
    num_nodes : int
        V.
    adjacency : scipy.sparse.csr_array (V, V)
        Symmetric int8 adjacency with sorted int32 indices; its CSR arrays are the arcs u -> v.
    arc_src : np.ndarray (2E,) int32
        The tail u of every arc, in CSR order (``adjacency.indices`` holds the heads).
    """

    num_nodes: int
    adjacency: sp.csr_array
    arc_src: np.ndarray
    _csr: tuple[Tensor, Tensor] | None = field(default=None, repr=False, compare=False)

    @classmethod
    def build(cls, edges: Tensor, num_nodes: int) -> Separator:
        """The separator of the graph with ``num_nodes`` vertices and validated ``edges`` (E, 2)."""
        adj = adjacency(edges, num_nodes)
        adj.sort_indices()
        adj.indices, adj.indptr = adj.indices.astype(np.int32), adj.indptr.astype(np.int32)
        return cls(num_nodes, adj, np.repeat(np.arange(num_nodes, dtype=np.int32), np.diff(adj.indptr)))

    def capacities(self, y: np.ndarray, scale: float) -> np.ndarray:
        """(V,) int64 capacities of the split arcs: y scaled and rounded."""
        return np.minimum(np.round(y * scale), _INF // (self.num_nodes + 1)).astype(np.int64)

    def arcs_from(self, keep: np.ndarray) -> sp.csr_array:
        """(V, V) graph of the arcs where ``keep`` (2E,) holds, float64 so that csgraph's routines
        take it without a copy (they ignore the values)."""
        V = self.num_nodes
        indptr = np.concatenate(([0], np.cumsum(keep, dtype=np.int32)))[self.adjacency.indptr]
        return sp.csr_array((np.ones(int(indptr[-1])), self.adjacency.indices[keep], indptr), shape=(V, V))

    def reach(self, support: np.ndarray, s: int) -> np.ndarray:
        """(V,) bool: the support component of s and its non-support neighbours (a breadth-first
        search along the arcs that leave support vertices)."""
        graph = self.arcs_from(support[self.arc_src])
        reached = np.zeros(self.num_nodes, dtype=bool)
        reached[breadth_first_order(graph, s, directed=True, return_predecessors=False)] = True
        return reached

    def min_separator(self, y: np.ndarray, i: int, j: int, scale: float, blocked: np.ndarray | None = None,
                      near_source: bool = True, plane: _Plane | None = None,
                      floor: float | None = None) -> Weighted | None:
        """Minimum y-weight (i, j) vertex separator avoiding ``blocked`` vertices.

        Parameters
        ----------
        y : np.ndarray (V,)
            The label plane, in [0, 1] (the certificate of ``floor`` needs y >= 0).
        i, j : int
            The pair, non-adjacent.
        scale : float
            Capacities are ``round(y * scale)`` (those of ``plane`` when it is given).
        blocked : np.ndarray of int, optional
            Vertices the separator may not use (infinite capacity).
        near_source : bool
            Return the minimum cut nearest to i (True) or to j.
        plane : _Plane, optional
            The capacities of y with the components found so far, shared by the calls on one y: it
            must have been built from this ``y`` and ``scale``.
        floor : float, optional
            Give up (None) without a flow when an i-j path has only inner vertices with
            y >= floor or blocked: every separator then weighs at least ``floor``.

        Returns
        -------
        (weight, separator) or None
            The exact y-weight and the sorted vertices of the cut, or None when every separator
            needs a blocked vertex (or weighs at least ``floor``).
        """
        plane = _Plane(self, y, scale) if plane is None else plane
        blocked = np.zeros(0, dtype=np.int64) if blocked is None else np.asarray(blocked, dtype=np.int64)
        s, t = (i, j) if near_source else (j, i)
        side = plane.side(i, j, blocked, s)
        if not side.members[t]:  # different components: a zero-capacity cut, no flow needed
            cut = side.boundary
        else:
            if floor is not None and self.path_above(y, i, j, blocked, floor):
                return None
            region = side.members.copy()
            region[side.boundary] = True
            cut = self._flow_cut(plane.caps, region, i, j, blocked, near_source)
            if cut is None:
                return None
        return float(y[cut].sum()), cut

    def path_above(self, y: np.ndarray, i: int, j: int, blocked: np.ndarray, floor: float) -> bool:
        """Whether an i-j path has only inner vertices with y >= floor or blocked (a widest-path
        certificate: every separator avoiding the blocked vertices weighs at least ``floor``)."""
        strong = y >= floor
        strong[[i, j]] = True
        strong[blocked] = True
        return bool(self.reach(strong, i)[j])

    def _flow_cut(self, caps: np.ndarray, region: np.ndarray, i: int, j: int, blocked: np.ndarray,
                  near_source: bool) -> np.ndarray | None:
        """The nearest minimum cut by max-flow on the split network of ``region`` (the common
        support component of i and j with its non-support neighbours), in global vertex ids."""
        W = np.nonzero(region)[0]
        n = len(W)
        local = np.full(self.num_nodes, -1, dtype=np.int32)
        local[W] = np.arange(n, dtype=np.int32)
        cap = caps[W]
        cap[local[np.concatenate([[i, j], blocked[region[blocked]]])]] = _INF
        heads = self.adjacency.indices
        keep = region[self.arc_src] & region[heads]
        counts = np.bincount(local[self.arc_src[keep]], minlength=n)
        # nodes k_in = k (one arc, to k_out = n + k) and k_out (arcs to the neighbours' k_in)
        indptr = np.concatenate([np.arange(n + 1), n + np.cumsum(counts)]).astype(np.int32)
        indices = np.concatenate([n + np.arange(n, dtype=np.int32), local[heads[keep]]])
        data = np.concatenate([cap, np.full(len(indices) - n, _INF)]).astype(np.int32)
        net = sp.csr_array((data, indices, indptr), shape=(2 * n, 2 * n))
        a, b = int(local[i]), int(local[j])
        result = maximum_flow(net, n + a, b)  # source i_out, sink j_in
        if result.flow_value >= _INF:
            return None
        return W[_nearest_cut(net, result.flow, n, a, b, near_source)]

    def violated(self, y: np.ndarray, tol: float = 1e-6, limit: int | None = None, nested: int = 1,
                 offset: float = 0.0) -> list[Cut]:
        """Inequalities violated by more than ``tol + offset`` (``offset``: a soft label's slack),
        as (violation, i, j, separator), most violated first: at most ``nested`` per pair of
        representatives (disjoint separators), and at most ``limit`` (pairs are tried heaviest
        component first, so the first cuts separate the small pieces from the main one)."""
        kernel = _compiled()
        if kernel is not None:
            return self._violated_compiled(kernel, y, tol, limit, nested, offset)
        order = self._candidates(y, tol)
        scale = float(min(1e6, (_INF // 4) / (self.num_nodes + 1)))
        plane = _Plane(self, y, scale)
        found: list[Cut] = []
        for i, j in self._pairs(order, y, 1 + tol + offset):
            found += self.nested(y, i, j, tol + offset, scale, nested, plane=plane)
            if limit is not None and len(found) >= limit:
                return sorted(found, key=lambda c: -c[0])[:limit]
        return sorted(found, key=lambda c: -c[0])

    def _violated_compiled(self, kernel, y: np.ndarray, tol: float, limit: int | None, nested: int,
                           offset: float) -> list[Cut]:
        """:meth:`violated` by the compiled oracle (``csrc/separation.cpp``): the same cuts."""
        if self._csr is None:
            self._csr = (torch.from_numpy(self.adjacency.indptr), torch.from_numpy(self.adjacency.indices))
        plane = torch.from_numpy(np.ascontiguousarray(y, dtype=np.float64))
        pairs, violation, vertices, offsets = kernel.connectivity_cuts(
            plane, *self._csr, float(tol), float(offset), -1 if limit is None else int(limit), int(nested))
        bounds, cut = offsets.tolist(), vertices.numpy()
        return [(v, i, j, cut[bounds[k]:bounds[k + 1]])
                for k, (v, (i, j)) in enumerate(zip(violation.tolist(), pairs.tolist(), strict=True))]

    def _candidates(self, y: np.ndarray, tol: float) -> np.ndarray:
        """One representative per component of y >= 1 - tol vertices (its lowest index, weighted by
        the component's size) and every other vertex with y > tol, heaviest first (stable)."""
        ones = y >= 1 - tol
        _, comp = connected_components(self.adjacency[ones][:, ones], directed=False)
        mass = np.bincount(comp).astype(float)
        first = np.sort(np.unique(comp, return_index=True)[1])  # components by their lowest vertex
        reps = np.nonzero(ones)[0][first]
        others = np.nonzero((y > tol) & ~ones)[0]
        weight = np.concatenate([mass[comp[first]], y[others]])
        return np.concatenate([reps, others])[np.argsort(-weight, kind="stable")]

    def _pairs(self, order: np.ndarray, y: np.ndarray, threshold: float) -> Iterator[tuple[int, int]]:
        """Non-adjacent pairs (order[a], order[b]), a < b, with y_i + y_j > threshold, in the
        order a, then b."""
        indptr, indices = self.adjacency.indptr, self.adjacency.indices
        for a, i in enumerate(order[:-1]):
            rest = order[a + 1:]
            ok = y[i] + y[rest] > threshold
            ok[np.isin(rest, indices[indptr[i]:indptr[i + 1]])] = False
            for j in rest[ok]:
                yield int(i), int(j)

    def nested(self, y: np.ndarray, i: int, j: int, tol: float, scale: float,
               count: int, plane: _Plane | None = None) -> list[Cut]:
        """Up to ``count`` violated inequalities for (i, j) with disjoint separators ("nested cuts":
        each min cut's vertices are blocked before the next; the cuts alternate between the ones
        nearest to i and to j). Zero-weight separators come in nested rings; cutting several at
        once stops the LP from creeping a fractional path out by one ring per round."""
        plane = _Plane(self, y, scale) if plane is None else plane
        floor = y[i] + y[j] - 1 - tol + _MARGIN  # a separator this heavy is not violated
        out, blocked = [], np.zeros(0, dtype=np.int64)
        for k in range(count):
            found = self.min_separator(y, i, j, scale, blocked, k % 2 == 0, plane=plane, floor=floor)
            if found is None:
                break
            weight, cut = found
            violation = y[i] + y[j] - 1 - weight
            if violation <= tol:
                break
            out.append((float(violation), min(i, j), max(i, j), cut))
            blocked = np.concatenate([blocked, cut])
        return out


@dataclass
class _Side:
    """The support component of one end of a pair: ``members`` (V,) bool and ``boundary``, its
    sorted non-support neighbours (the zero-capacity cut around it)."""

    members: np.ndarray
    boundary: np.ndarray


@dataclass
class _Components:
    """Connected components of one support set: ``labels`` (V,) and the boundaries of all
    components at once, as the sorted keys ``label * V + vertex``."""

    labels: np.ndarray
    boundary_keys: np.ndarray


class _Plane:
    """One label plane: its capacities and the support components found so far.

    A support is the positive-capacity vertices plus the pair and the blocked vertices, so it is
    identified by the vertices added to the positive ones. The pairs of one round share a few
    supports (no blocked vertex before the first cut, the same first cut for one representative
    i), so a support met a second time gets all its components labelled once; one met once gets
    a breadth-first search from the vertex asked about. ``seen`` keeps the supports met (None
    until labelled), the least recently used dropped beyond ``capacity`` entries: a round with no
    cut limit can meet a new support for almost every pair, and (V,) labels for each would grow
    without bound. A dropped support is searched afresh, with the same result.
    """

    def __init__(self, sep: Separator, y: np.ndarray, scale: float):
        self.sep = sep
        self.caps = sep.capacities(y, scale)
        self.positive = self.caps > 0
        self.seen: OrderedDict[bytes, _Components | None] = OrderedDict()
        self.capacity = max(16, _CACHED_LABELS // max(1, sep.num_nodes))

    def side(self, i: int, j: int, blocked: np.ndarray, s: int) -> _Side:
        """The component of s (i or j) in the support of the pair (i, j) with ``blocked``."""
        extra = np.concatenate([[i, j], blocked])
        added = np.unique(extra[~self.positive[extra]])
        support = self.positive.copy()
        support[added] = True
        key = added.tobytes()
        if key not in self.seen:  # first time: one search from s
            self.seen[key] = None
            if len(self.seen) > self.capacity:
                self.seen.popitem(last=False)
            reached = self.sep.reach(support, s)
            return _Side(reached & support, np.nonzero(reached & ~support)[0])
        self.seen.move_to_end(key)
        if self.seen[key] is None:  # second time: label every component
            self.seen[key] = self._label(support)
        V, labels, keys = self.sep.num_nodes, self.seen[key].labels, self.seen[key].boundary_keys
        c = int(labels[s])
        lo, hi = np.searchsorted(keys, [c * V, (c + 1) * V])
        return _Side(labels == c, keys[lo:hi] - c * V)

    def _label(self, support: np.ndarray) -> _Components:
        """Components of the support graph and, per component, its non-support neighbours."""
        sep, V = self.sep, self.sep.num_nodes
        heads = sep.adjacency.indices
        inside = support[sep.arc_src]
        graph = sep.arcs_from(inside & support[heads])  # symmetric: strong = weak components
        _, labels = connected_components(graph, directed=True, connection="strong")
        out = inside & ~support[heads]
        keys = np.unique(labels[sep.arc_src[out]].astype(np.int64) * V + heads[out])
        return _Components(labels, keys)


def _compiled():
    """The compiled kernels' module when the CPU backend is "compiled" (the default where they
    built; ``use_backend("torch")`` runs the Python oracle, the reference), else None."""
    return fast_ops() if _choose("cpu") == "compiled" else None


def _nearest_cut(net: sp.csr_array, flow: sp.csr_array, n: int, a: int, b: int,
                 near_source: bool) -> np.ndarray:
    """Local vertices of the minimum cut nearest to the source a_out (the vertices whose in-node
    the residual graph reaches from it but not their out-node) or to the sink b_in."""
    residual = (net - flow).tocsr()
    residual.data = (residual.data > 0).astype(np.int8)
    residual.eliminate_zeros()
    reached = np.zeros(2 * n, dtype=bool)
    if near_source:
        reached[breadth_first_order(residual, n + a, directed=True, return_predecessors=False)] = True
        return np.nonzero(reached[:n] & ~reached[n:])[0]
    reached[breadth_first_order(residual.T.tocsr(), b, directed=True, return_predecessors=False)] = True
    return np.nonzero(~reached[:n] & reached[n:])[0]


def _marginals(name: str, x: Tensor, dims: tuple[int, ...], shape: str, tol: float) -> np.ndarray:
    """``x`` as float64 numpy clipped to [0, 1], after checking it is a real tensor of one of the
    ranks ``dims`` with values in [0, 1] up to ``tol``."""
    check_real_tensor(name, x)
    if x.dim() not in dims:
        raise ValueError(f"{name} must be a {shape} tensor, got shape {tuple(x.shape)}")
    values = x.detach().double().cpu().numpy()
    if np.isnan(values).any() or (values < -tol).any() or (values > 1 + tol).any():
        raise ValueError(f"{name} must lie in [0, 1] (up to tol = {tol:g}) and not be NaN")
    return np.clip(values, 0.0, 1.0)


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
    tol = check_tol("tol", tol)
    values = _marginals("y", y, (1,), "(V,)", tol)
    sep = Separator.build(check_edges(edges, len(values)), len(values))
    found = sep.violated(values, tol)  # every pair: the most violated comes first
    if not found:
        return 0.0, -1, -1, torch.zeros(0, dtype=torch.long)
    violation, i, j, cut = found[0]
    return violation, i, j, torch.from_numpy(cut).long()


Row = tuple[int, int, int, Tensor]  # (label, i, j, separator): a row of map_lp's cuts


def connectivity_cuts(mu: Tensor, edges: Tensor, connected: list[int], *, tol: float = 1e-6,
                      max_cuts: int | None = None, nested: int = 1) -> list[list[Row]]:
    """The vertex-separator inequalities that node marginals violate, as rows of ``cuts``.

    The separation round of :func:`map_lp` on any point: e.g. the output of
    :class:`MAPRelaxation`, whose violated cuts can fill its cut block on the next call (cutting
    planes for the smoothed problem itself), or a marginal from elsewhere.

    Parameters
    ----------
    mu : Tensor (V, L) or (B, V, L)
        Node marginals in [0, 1] (up to ``tol``), e.g. ``MAPRelaxation``'s output or
        ``LPResult.mu``.
    edges : Tensor (E, 2) int64
        Undirected edges, i < j.
    connected : list of int
        The labels whose planes ``mu[..., c]`` are separated.
    tol : float in (0, 1)
        Violations up to ``tol`` do not count.
    max_cuts : int >= 1, optional
        At most this many rows per instance. Each label's round stops once it has found that many
        (as :func:`map_lp`'s ``cuts_per_round``: pairs are tried heaviest component first, so these
        are not always the most violated of all), and the most violated of the rounds' are kept.
        Without it every pair is tried and the first row is the most violated inequality.
    nested : int >= 1
        Cuts per violated pair, with disjoint separators (as :func:`map_lp`'s ``nested``).

    Returns
    -------
    list of B lists of (label, i, j, separator) rows
        ``separator`` a sorted ``(|S|,)`` int64 tensor; most violated first: the row format of
        :func:`map_lp`'s and :class:`MAPRelaxation`'s ``cuts`` (one list per instance). A (V, L)
        ``mu`` gives one list.

    Examples
    --------
    >>> import torch
    >>> from structtorch import lp
    >>> mu = torch.zeros(9, 2)
    >>> mu[:, 0] = 1
    >>> mu[[0, 8], :] = torch.tensor([0.0, 1.0])  # two far corners of a 3 x 3 grid take label 1
    >>> [(c, i, j, S.tolist()) for c, i, j, S in lp.connectivity_cuts(mu, lp.grid_edges(3, 3), [1])[0]]
    [(1, 0, 8, [1, 3])]
    """
    tol = check_tol("tol", tol)
    limit = None if max_cuts is None else check_int("max_cuts", max_cuts, 1)
    nested = check_int("nested", nested, 1)
    values = _marginals("mu", mu, (2, 3), "(V, L) or (B, V, L)", tol)
    values = values[None] if mu.dim() == 2 else values
    B, V, L = values.shape
    labels, _ = check_connected(connected, None, L)
    sep = Separator.build(check_edges(edges, V), V)
    out = []
    for plane in values:
        found = [(v, c, i, j, S) for c in labels
                 for v, i, j, S in sep.violated(plane[:, c], tol, limit, nested)]
        found.sort(key=lambda row: -row[0])
        out.append([(c, i, j, torch.from_numpy(S).long()) for _, c, i, j, S in found[:limit]])
    return out
