"""Labeled-graph substructures: subgraph containment, gSpan canonical codes and graph mining.

The graph part of Nowozin (2009), Part I (digest §4.2-4.3): the substructure poset of connected
labeled graphs under subgraph monomorphism (Def. 12), its total order by gSpan minimum DFS codes
(Yan & Han 2002) with rightmost-path extension, frequent subgraph mining (Problem 2) and
discriminative mining for boosting with the gain bound of Theorem 2 (with the erratum: the bound
holds for all *super*-patterns, i.e. all descendants in the enumeration tree).

Graphs
------
A labeled graph is either a tuple ``(node_labels (V,), edges (E, 2), edge_labels (E,))`` of integer
arrays, tensors or lists, or a :class:`networkx.Graph` whose nodes carry an integer ``"label"``
attribute (edges may carry ``"label"``; a missing edge label is 0). Graphs must be simple and
undirected (no self loops, no multi-edges, ``(u, v)`` and ``(v, u)`` count as the same edge) with
non-negative labels.

Patterns
--------
Mined patterns are connected graphs with at least one edge, represented by their minimum DFS code:
a tuple of 5-tuples ``(i, j, label_i, edge_label, label_j)`` of ints, where ``i, j`` are DFS
discovery indices; ``i < j`` is a forward (tree) edge and ``i > j`` a backward edge. Two graphs are
isomorphic iff their minimum codes are equal, so codes are hashable canonical forms.
:func:`code_to_graph` turns a code back into a graph tuple and :func:`contains` accepts codes as
patterns directly.

Codes are ordered by gSpan's DFS-lexicographic order: at the first differing tuple (both are
rightmost-path extensions of the common prefix) a backward edge precedes a forward edge, backward
edges are ordered by target index, forward edges by *decreasing* source depth, and ties by the
labels ``(label_i, edge_label, label_j)``. For the example graph of the digest (§6.3 item 6) this
order gives the corrected minimum code listed there.

Mining keeps, per pattern, the list of its embeddings (graph index, tuple of graph vertices per
code vertex); a child's support is counted by extending these embeddings by one edge, never by a
fresh isomorphism test per (pattern, graph) pair. Extensions that gSpan's label bounds show to be
non-minimal (a new vertex labeled below vertex 0, a branch smaller than the rightmost-path edge it
leaves from) are not collected at all; the others pass the full minimality test.
"""

from __future__ import annotations

import math
import numbers
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import networkx as nx
import numpy as np
import torch
from networkx.algorithms import isomorphism

__all__ = [
    "DFSCode",
    "GraphLike",
    "best_patterns",
    "code_key",
    "code_to_graph",
    "contains",
    "dfs_code",
    "embeddings",
    "frequent_patterns",
    "gain_bound",
    "is_min_code",
    "occurrence_matrix",
    "rightmost_extensions",
    "to_networkx",
]

Edge5 = tuple[int, int, int, int, int]
DFSCode = tuple[Edge5, ...]
GraphLike = Any  # (node_labels, edges, edge_labels) tuple or networkx.Graph
Embedding = tuple[int, tuple[int, ...]]  # (graph index, graph vertex of each code vertex)


class _LG(NamedTuple):
    """Internal labeled graph: vertex labels and adjacency maps ``neighbour -> edge label``."""

    labels: list[int]
    adj: list[dict[int, int]]

    @property
    def n_edges(self) -> int:
        return sum(len(a) for a in self.adj) // 2


# ---------------------------------------------------------------------------------------------
# Input conversion and validation
# ---------------------------------------------------------------------------------------------


def _int_array(x: Any, name: str) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    arr = np.asarray(x)
    if arr.size == 0:
        return arr.astype(np.int64)
    if arr.dtype == object and all(isinstance(v, numbers.Integral) and not isinstance(v, bool)
                                   for v in arr.reshape(-1)):
        raise ValueError(f"{name} must hold int64 integers, got one beyond [-2**63, 2**63 - 1]")
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{name} must hold integers, got dtype {arr.dtype}")
    if arr.dtype == np.uint64 and (arr > np.iinfo(np.int64).max).any():
        raise ValueError(f"{name} must hold int64 integers, got one beyond 2**63 - 1")
    return arr.astype(np.int64)


def _is_code(x: Any) -> bool:
    return (
        isinstance(x, tuple)
        and len(x) > 0
        and all(
            isinstance(e, tuple)
            and len(e) == 5
            and all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in e)
            for e in x
        )
    )


def _from_networkx(g: nx.Graph, name: str) -> _LG:
    if g.is_directed():
        raise ValueError(f"{name} must be an undirected graph, got a directed networkx graph")
    if g.is_multigraph():
        raise ValueError(f"{name} must be a simple graph, got a networkx multigraph")
    if nx.number_of_selfloops(g) > 0:
        raise ValueError(f"{name} must be a simple graph without self loops")
    index = {v: k for k, v in enumerate(g.nodes)}
    labels = []
    for v, data in g.nodes(data=True):
        if "label" not in data:
            raise ValueError(f"{name}: node {v!r} has no 'label' attribute")
        lab = data["label"]
        if not isinstance(lab, numbers.Integral) or isinstance(lab, bool) or lab < 0:
            raise ValueError(f"{name}: node {v!r} label must be a non-negative int, got {lab!r}")
        labels.append(int(lab))
    adj: list[dict[int, int]] = [{} for _ in labels]
    for u, v, data in g.edges(data=True):
        lab = data.get("label", 0)
        if not isinstance(lab, numbers.Integral) or isinstance(lab, bool) or lab < 0:
            raise ValueError(f"{name}: edge ({u!r}, {v!r}) label must be a non-negative int, got {lab!r}")
        a, b = index[u], index[v]
        adj[a][b] = int(lab)
        adj[b][a] = int(lab)
    return _LG(labels, adj)


def _as_graph(g: GraphLike, name: str = "graph") -> _LG:
    """Validate one graph and convert it to the internal form."""
    if isinstance(g, _LG):
        return g
    if isinstance(g, nx.Graph):
        return _from_networkx(g, name)
    if _is_code(g):
        return _code_graph(g, name)
    if not isinstance(g, (tuple, list)) or len(g) != 3:
        raise TypeError(
            f"{name} must be a (node_labels, edges, edge_labels) tuple, a networkx.Graph or a DFS code, "
            f"got {type(g).__name__}"
        )
    node_labels = _int_array(g[0], f"{name} node_labels")
    edges = _int_array(g[1], f"{name} edges")
    edge_labels = _int_array(g[2], f"{name} edge_labels")
    if node_labels.ndim != 1:
        raise ValueError(f"{name} node_labels must have shape (V,), got {node_labels.shape}")
    if edges.size == 0:
        edges = edges.reshape(0, 2)
    if edges.ndim != 2 or edges.shape[1] != 2:
        raise ValueError(f"{name} edges must have shape (E, 2), got {edges.shape}")
    edge_labels = edge_labels.reshape(-1) if edge_labels.size == 0 else edge_labels
    if edge_labels.shape != (edges.shape[0],):
        raise ValueError(
            f"{name} edge_labels must have shape ({edges.shape[0]},) to match edges, got {edge_labels.shape}"
        )
    if (node_labels < 0).any():
        raise ValueError(f"{name} node_labels must be non-negative")
    if (edge_labels < 0).any():
        raise ValueError(f"{name} edge_labels must be non-negative")
    n = node_labels.shape[0]
    if edges.size and (edges.min() < 0 or edges.max() >= n):
        raise ValueError(f"{name} edges must index nodes in [0, {n}), got values outside")
    adj: list[dict[int, int]] = [{} for _ in range(n)]
    for (u, v), lab in zip(edges.tolist(), edge_labels.tolist(), strict=True):
        if u == v:
            raise ValueError(f"{name} must be a simple graph: self loop at node {u}")
        if v in adj[u]:
            raise ValueError(f"{name} must be a simple graph: edge ({u}, {v}) appears more than once")
        adj[u][v] = lab
        adj[v][u] = lab
    return _LG([int(v) for v in node_labels.tolist()], adj)


def _as_graphs(graphs: Iterable[GraphLike], name: str = "graphs") -> list[_LG]:
    if isinstance(graphs, (nx.Graph, _LG)) or _is_code(graphs):
        raise TypeError(f"{name} must be a sequence of graphs, got a single graph")
    out = [_as_graph(g, f"{name}[{k}]") for k, g in enumerate(graphs)]
    if not out:
        raise ValueError(f"{name} must not be empty")
    return out


def _code_graph(code: DFSCode, name: str = "code") -> _LG:
    """Graph of a DFS code (vertices numbered by discovery index)."""
    labels: dict[int, int] = {}
    adj: dict[int, dict[int, int]] = {}
    for k, (i, j, li, le, lj) in enumerate(code):
        if min(i, j, li, le, lj) < 0 or i == j:
            raise ValueError(f"{name}[{k}] = {(i, j, li, le, lj)} is not a valid DFS code tuple")
        for v, lab in ((i, li), (j, lj)):
            if labels.setdefault(v, lab) != lab:
                raise ValueError(f"{name}[{k}]: vertex {v} has two labels")
        if j in adj.get(i, {}):
            raise ValueError(f"{name}[{k}]: edge ({i}, {j}) appears twice")
        adj.setdefault(i, {})[j] = le
        adj.setdefault(j, {})[i] = le
    n = len(labels)
    if sorted(labels) != list(range(n)):
        raise ValueError(f"{name} must number its vertices 0..{n - 1}")
    return _LG([labels[v] for v in range(n)], [adj.get(v, {}) for v in range(n)])


def code_to_graph(code: DFSCode) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Convert a DFS code into a ``(node_labels, edges, edge_labels)`` tuple of int64 arrays.

    Parameters
    ----------
    code : tuple of (i, j, label_i, edge_label, label_j)
        A DFS code (not necessarily minimal); vertex ``k`` of the result is code vertex ``k``.

    Returns
    -------
    node_labels : ndarray (V,)
    edges : ndarray (E, 2), in code order, as ``(i, j)``
    edge_labels : ndarray (E,)
    """
    g = _code_graph(tuple(code))
    edges = np.array([(e[0], e[1]) for e in code], dtype=np.int64).reshape(-1, 2)
    return (
        np.array(g.labels, dtype=np.int64),
        edges,
        np.array([e[3] for e in code], dtype=np.int64),
    )


def to_networkx(graph: GraphLike) -> nx.Graph:
    """Convert a graph tuple, networkx graph or DFS code to a ``networkx.Graph`` with ``label`` attributes."""
    g = _as_graph(graph)
    out = nx.Graph()
    for v, lab in enumerate(g.labels):
        out.add_node(v, label=lab)
    for u, nbrs in enumerate(g.adj):
        for v, lab in nbrs.items():
            if u < v:
                out.add_edge(u, v, label=lab)
    return out


# ---------------------------------------------------------------------------------------------
# Containment (Def. 12)
# ---------------------------------------------------------------------------------------------


def _label_match(a: dict, b: dict) -> bool:
    return a.get("label", 0) == b.get("label", 0)


def contains(pattern: GraphLike, graph: GraphLike) -> bool:
    """Subgraph relation of Def. 12: is there a label-preserving injective map of ``pattern`` into ``graph``.

    This is subgraph *monomorphism*: every vertex of ``pattern`` maps to a distinct vertex of ``graph``
    with the same label and every pattern edge maps to a graph edge with the same label; graph edges
    between mapped vertices that are not in the pattern are allowed (non-induced).

    Parameters
    ----------
    pattern : graph tuple, networkx.Graph or DFS code
    graph : graph tuple or networkx.Graph

    Returns
    -------
    bool
    """
    p = _as_graph(pattern, "pattern")
    g = _as_graph(graph, "graph")
    if len(p.labels) > len(g.labels) or p.n_edges > g.n_edges:
        return False
    matcher = isomorphism.GraphMatcher(
        to_networkx(g), to_networkx(p), node_match=_label_match, edge_match=_label_match
    )
    return matcher.subgraph_is_monomorphic()


# ---------------------------------------------------------------------------------------------
# DFS codes
# ---------------------------------------------------------------------------------------------


def _edge_key(e: Edge5) -> tuple[int, int, int, int, int]:
    """Sort key of a code tuple among the rightmost extensions of one common prefix (gSpan order)."""
    i, j, li, le, lj = e
    if i > j:  # backward: before any forward edge, by target index
        return (0, j, li, le, lj)
    return (1, -i, li, le, lj)  # forward: deepest source first


def code_key(code: DFSCode) -> tuple[tuple[int, int, int, int, int], ...]:
    """Sort key of DFS codes of one graph under gSpan's DFS-lexicographic order."""
    return tuple(_edge_key(e) for e in code)


class _CodeInfo(NamedTuple):
    labels: list[int]
    rmpath: list[int]  # code vertices from the root to the rightmost vertex
    pedges: set[tuple[int, int]]


class _Bounds(NamedTuple):
    """Necessary conditions for a rightmost extension of a minimum code to be minimal (gSpan's pruning).

    * A new vertex needs a label >= ``root``, the label of code vertex 0: else an edge at it starts a
      smaller code.
    * A forward edge from a rightmost-path vertex ``i`` needs ``(edge label, new label) >= step[i]``,
      and a backward edge from the rightmost vertex ``r`` to ``v`` needs
      ``(edge label, label of r) >= step[v]``, where ``step[u]`` holds the labels of the
      rightmost-path edge out of ``u`` (the edge and the vertex it reaches; ``(-1, -1)`` for ``r``):
      else a DFS that takes the new edge at ``i`` (or ``v``) first has a smaller code.
    """

    root: int
    step: dict[int, tuple[int, int]]


def _bounds(code: DFSCode, info: _CodeInfo) -> _Bounds:
    """The :class:`_Bounds` of a non-empty minimum code with its :func:`_code_info` (labels are
    non-negative, so ``(-1, -1)`` bounds nothing)."""
    rp = info.rmpath
    step = dict.fromkeys(rp, (-1, -1))
    for i, j, _, le, lj in code:
        if i < j and i in step and j in step and rp.index(j) == rp.index(i) + 1:
            step[i] = (le, lj)
    return _Bounds(code[0][2], step)


def _code_info(code: DFSCode) -> _CodeInfo:
    labels: dict[int, int] = {}
    parent: dict[int, int] = {}
    pedges: set[tuple[int, int]] = set()
    for i, j, li, _, lj in code:
        labels.setdefault(i, li)
        labels.setdefault(j, lj)
        if i < j:
            parent[j] = i
        pedges.add((i, j))
        pedges.add((j, i))
    n = len(labels)
    path = []
    v = n - 1
    while v >= 0 and n:
        path.append(v)
        v = parent.get(v, -1)
    return _CodeInfo([labels[k] for k in range(n)], path[::-1], pedges)


def _extend(
    info: _CodeInfo, graphs: Sequence[_LG], embs: Iterable[Embedding], bounds: _Bounds | None = None
) -> dict[Edge5, list[Embedding]]:
    """Rightmost-path extensions of a (non-empty) code over its embeddings.

    With ``bounds`` (the miner), extensions that :func:`_bounds` shows to be non-minimal are skipped.
    """
    out: dict[Edge5, list[Embedding]] = defaultdict(list)
    rp = info.rmpath
    r = rp[-1]
    n = len(info.labels)
    lr = info.labels[r]
    backward = [(v, info.labels[v]) for v in rp[:-1] if (r, v) not in info.pedges]
    forward = [(i, info.labels[i]) for i in rp]
    for gid, m in embs:
        g = graphs[gid]
        nbr_r = g.adj[m[r]]
        for v, lv in backward:  # backward edges from the rightmost vertex, targets on the rightmost path
            le = nbr_r.get(m[v])
            if le is not None and (bounds is None or (le, lr) >= bounds.step[v]):
                out[(r, v, lr, le, lv)].append((gid, m))
        for i, li in forward:  # forward edges from the rightmost path to new vertices
            for w, le in g.adj[m[i]].items():
                if w not in m:
                    lw = g.labels[w]
                    if bounds is None or (lw >= bounds.root and (le, lw) >= bounds.step[i]):
                        out[(i, n, li, le, lw)].append((gid, m + (w,)))
    return dict(out)


def _initial(graphs: Sequence[_LG], gids: Iterable[int] | None = None) -> dict[Edge5, list[Embedding]]:
    out: dict[Edge5, list[Embedding]] = {}
    for gid in range(len(graphs)) if gids is None else gids:
        g = graphs[gid]
        for u, nbrs in enumerate(g.adj):
            for v, le in nbrs.items():
                out.setdefault((0, 1, g.labels[u], le, g.labels[v]), []).append((gid, (u, v)))
    return out


def _min_code(g: _LG, target: DFSCode | None = None) -> DFSCode | None:
    """Minimum DFS code of a connected graph by greedy growth keeping all tied embeddings.

    With ``target``, stops at the first tuple that differs from it and returns ``None``.
    """
    graphs = [g]
    ext = _initial(graphs)
    code: list[Edge5] = []
    total = g.n_edges
    while True:
        best = min(ext, key=_edge_key)
        if target is not None and (len(code) >= len(target) or target[len(code)] != best):
            return None
        code.append(best)
        if len(code) == total:
            return tuple(code)
        embs = list(dict.fromkeys(ext[best]))
        ext = _extend(_code_info(tuple(code)), graphs, embs)


def _check_connected(g: _LG, name: str) -> None:
    n = len(g.labels)
    if n <= 1:
        return
    seen = {0}
    stack = [0]
    while stack:
        for w in g.adj[stack.pop()]:
            if w not in seen:
                seen.add(w)
                stack.append(w)
    if len(seen) != n:
        raise ValueError(f"{name} must be connected (DFS codes describe connected graphs)")


def dfs_code(graph: GraphLike) -> DFSCode:
    """Minimum DFS code of a connected labeled graph (its gSpan canonical label, Def. 14).

    Parameters
    ----------
    graph : graph tuple, networkx.Graph or DFS code
        Must be connected. A graph without edges has the empty code ``()``.

    Returns
    -------
    tuple of (i, j, label_i, edge_label, label_j)
        Equal for two graphs iff they are isomorphic (labels included).
    """
    g = _as_graph(graph)
    _check_connected(g, "graph")
    if g.n_edges == 0:
        return ()
    code = _min_code(g)
    assert code is not None
    return code


def is_min_code(code: DFSCode) -> bool:
    """Whether ``code`` is the minimum DFS code of the graph it describes (gSpan's canonicity check)."""
    code = tuple(tuple(int(v) for v in e) for e in code)
    if not code:
        return True
    g = _code_graph(code, "code")
    _check_connected(g, "code")
    return _min_code(g, code) is not None


def embeddings(code: DFSCode, graphs: Sequence[GraphLike]) -> list[Embedding]:
    """All embeddings of a DFS code into ``graphs``, found by replaying the code edge by edge.

    Returns
    -------
    list of (graph index, tuple of graph vertices, one per code vertex)
    """
    lgs = _as_graphs(graphs)
    return _embeddings(tuple(code), lgs)


def _embeddings(code: DFSCode, lgs: Sequence[_LG]) -> list[Embedding]:
    if not code:
        return [(gid, (v,)) for gid, g in enumerate(lgs) for v in range(len(g.labels))]
    embs = _initial(lgs).get(code[0], [])
    for k in range(1, len(code)):
        embs = _extend(_code_info(code[:k]), lgs, embs).get(code[k], [])
    return embs


def rightmost_extensions(
    code: DFSCode, graphs: Sequence[GraphLike], embs: Sequence[Embedding] | None = None
) -> dict[Edge5, list[Embedding]]:
    """Rightmost-path extensions of a DFS code that occur in ``graphs``, with the extended embeddings.

    Parameters
    ----------
    code : DFS code
        The empty code ``()`` extends to all single edges ``(0, 1, l_u, l_e, l_v)``.
    graphs : sequence of graphs
    embs : list of (graph index, vertex tuple), optional
        The embeddings of ``code`` (as kept by the miner); computed by :func:`embeddings` if omitted.

    Returns
    -------
    dict
        ``extension tuple -> embeddings of code + (extension,)``: backward edges from the rightmost
        vertex to the rightmost path and forward edges from the rightmost path to a new vertex.
    """
    lgs = _as_graphs(graphs)
    code = tuple(tuple(int(v) for v in e) for e in code)
    if not code:
        return _initial(lgs)
    if embs is None:
        embs = _embeddings(code, lgs)
    return _extend(_code_info(code), lgs, embs)


def occurrence_matrix(patterns: Sequence[GraphLike], graphs: Sequence[GraphLike]) -> np.ndarray:
    """Binary features ``phi_t(x_n) = 1[t ⊆ x_n]`` (Def. 3) of many patterns on many graphs.

    Each pattern is matched against all graphs at once by replaying its minimum DFS code over the
    embedding lists (one pass per pattern, not one isomorphism test per (pattern, graph) pair).

    Parameters
    ----------
    patterns : sequence of DFS codes or connected graphs with at least one edge
    graphs : sequence of graphs

    Returns
    -------
    ndarray of bool, shape (len(graphs), len(patterns))
    """
    lgs = _as_graphs(graphs)
    out = np.zeros((len(lgs), len(patterns)), dtype=bool)
    for k, pattern in enumerate(patterns):
        p = _as_graph(pattern, f"patterns[{k}]")
        if p.n_edges == 0:
            raise ValueError(f"patterns[{k}] must have at least one edge")
        _check_connected(p, f"patterns[{k}]")
        code = _min_code(p)
        assert code is not None
        for gid, _ in _embeddings(code, lgs):
            out[gid, k] = True
    return out


# ---------------------------------------------------------------------------------------------
# Mining
# ---------------------------------------------------------------------------------------------


def _check_size(max_size: int | None) -> int:
    if max_size is None:
        return 1 << 30
    if not isinstance(max_size, numbers.Integral) or isinstance(max_size, bool) or max_size < 1:
        raise ValueError(f"max_size must be a positive int (edges) or None, got {max_size!r}")
    return int(max_size)


def _check_support(min_support: float, n: int) -> int:
    if isinstance(min_support, bool) or not isinstance(min_support, numbers.Real):
        raise TypeError(f"min_support must be an int count or a float fraction, got {min_support!r}")
    if isinstance(min_support, numbers.Integral):
        if min_support < 1:
            raise ValueError(f"min_support must be >= 1 as a count, got {min_support}")
        return int(min_support)
    if not 0.0 < float(min_support) <= 1.0:
        raise ValueError(f"min_support as a fraction must lie in (0, 1], got {min_support}")
    return max(1, math.ceil(float(min_support) * n - 1e-9))


def _support(embs: Sequence[Embedding]) -> list[int]:
    return sorted({gid for gid, _ in embs})


def _children(
    code: DFSCode, embs: Sequence[Embedding], lgs: Sequence[_LG], min_support: int
) -> list[tuple[DFSCode, list[Embedding], list[int]]]:
    """Canonical children (minimum codes one edge larger) with support >= min_support."""
    if code:
        info = _code_info(code)
        ext = _extend(info, lgs, embs, _bounds(code, info))
    else:
        ext = _initial(lgs)
    out = []
    for e in sorted(ext, key=_edge_key):
        if not code and e[2] > e[4]:
            continue  # the reversed edge is smaller
        if len(ext[e]) < min_support:
            continue  # fewer embeddings than graphs needed
        sup = _support(ext[e])
        if len(sup) < min_support:
            continue
        child = code + (e,)
        if _min_code(_code_graph(child), child) is None:
            continue
        out.append((child, ext[e], sup))
    return out


def frequent_patterns(
    graphs: Sequence[GraphLike], min_support: float = 1, *, max_size: int | None = None
) -> list[tuple[DFSCode, int]]:
    """All connected subgraphs with support >= ``min_support`` and 1..``max_size`` edges (gSpan).

    Reverse search over minimum DFS codes: each pattern is visited exactly once, as the minimum
    code of its isomorphism class; support is counted on the kept embedding lists.

    Parameters
    ----------
    graphs : sequence of graphs
    min_support : int or float
        An int is a count of graphs; a float in (0, 1] a fraction of ``len(graphs)``.
    max_size : int, optional
        Largest pattern size in edges (unbounded if None).

    Returns
    -------
    list of (code, support)
        Minimum DFS codes in depth-first enumeration order, with the number of graphs containing them.
    """
    lgs = _as_graphs(graphs)
    size = _check_size(max_size)
    sigma = _check_support(min_support, len(lgs))
    out: list[tuple[DFSCode, int]] = []

    def visit(code: DFSCode, embs: Sequence[Embedding]) -> None:
        for child, cembs, sup in _children(code, embs, lgs, sigma):
            out.append((child, len(sup)))
            if len(child) < size:
                visit(child, cembs)

    visit((), [])
    return out


def _check_targets(y: Any, weights: Any, n: int) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(y, torch.Tensor):
        y = y.detach().cpu().numpy()
    if isinstance(weights, torch.Tensor):
        weights = weights.detach().cpu().numpy()
    y = np.asarray(y)
    w = np.asarray(weights, dtype=np.float64)
    if y.shape != (n,):
        raise ValueError(f"y must have shape ({n},) to match graphs, got {y.shape}")
    if w.shape != (n,):
        raise ValueError(f"weights must have shape ({n},) to match graphs, got {w.shape}")
    if y.dtype == bool or not np.isin(y, (-1, 1)).all():
        raise ValueError("y must hold labels in {-1, +1}")
    if not np.isfinite(w).all() or (w < 0).any():
        raise ValueError("weights must be finite and non-negative")
    return y.astype(np.float64), w


def gain_bound(support: Sequence[int], y: Any, weights: Any) -> float:
    """Theorem 2's bound ``mu(t)`` on the gain of every super-pattern ``q ⊇ t`` in either direction.

    ``mu(t) = max(2 Σ_{n∈supp, y_n=+1} λ_n − Σ λ_n y_n,  2 Σ_{n∈supp, y_n=−1} λ_n + Σ λ_n y_n)``
    where ``supp`` are the indices of the graphs containing ``t`` (the erratum of the digest's §7:
    the printed ``q ⊆ t`` must read ``t ⊆ q``).
    """
    y = np.asarray(y, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    idx = np.asarray(list(support), dtype=np.int64)
    total = float(w @ y)
    ys, ws = y[idx], w[idx]
    return max(2.0 * float(ws[ys > 0].sum()) - total, 2.0 * float(ws[ys < 0].sum()) + total)


def best_patterns(
    graphs: Sequence[GraphLike],
    y: Any,
    weights: Any,
    *,
    top_k: int = 1,
    max_size: int | None = None,
    min_support: float = 1,
) -> list[tuple[DFSCode, int, float]]:
    """Discriminative subgraph mining: the ``top_k`` weak learners of largest gain (Problem 1, eq. 19).

    The weak learner ``(t, d)`` outputs ``d`` on graphs containing ``t`` and ``-d`` otherwise (Def. 5);
    its gain is ``Σ_n λ_n y_n h(x_n; (t, d)) = d (2 Σ_{n: t ⊆ x_n} λ_n y_n − Σ_n λ_n y_n)``. The gSpan
    enumeration tree is searched depth first, children in decreasing order of the bound of Theorem 2,
    and a subtree is pruned when its bound cannot beat the current ``top_k``-th gain.

    Parameters
    ----------
    graphs : sequence of graphs
    y : array (N,)
        Labels in {-1, +1}.
    weights : array (N,)
        Non-negative sample weights ``λ`` (e.g. the boosting dual variables).
    top_k : int
        Number of patterns returned (each with its better direction).
    max_size : int, optional
        Largest pattern size in edges (unbounded if None).
    min_support : int or float
        Only patterns contained in at least this many graphs (or this fraction) are considered.

    Returns
    -------
    list of (code, direction, gain)
        At most ``top_k`` distinct patterns (minimum DFS codes) sorted by decreasing gain, direction
        in {-1, +1}. The empty pattern (a constant learner) is not included.
    """
    lgs = _as_graphs(graphs)
    yv, w = _check_targets(y, weights, len(lgs))
    if not isinstance(top_k, numbers.Integral) or isinstance(top_k, bool) or top_k < 1:
        raise ValueError(f"top_k must be a positive int, got {top_k!r}")
    size = _check_size(max_size)
    sigma = _check_support(min_support, len(lgs))
    wy = w * yv
    total = float(wy.sum())
    pos = w * (yv > 0)
    neg = w * (yv < 0)
    best: list[tuple[float, int, DFSCode, int]] = []  # (gain, order, code, direction), kept sorted desc
    counter = 0

    def threshold() -> float:
        return best[-1][0] if len(best) >= top_k else -math.inf

    def visit(code: DFSCode, embs: Sequence[Embedding]) -> None:
        nonlocal counter
        scored = []
        for child, cembs, sup in _children(code, embs, lgs, sigma):
            idx = np.asarray(sup, dtype=np.int64)
            mu = max(2.0 * float(pos[idx].sum()) - total, 2.0 * float(neg[idx].sum()) + total)
            g = 2.0 * float(wy[idx].sum()) - total
            scored.append((mu, g, child, cembs))
        scored.sort(key=lambda s: -s[0])
        for mu, g, child, cembs in scored:
            if mu <= threshold():
                break  # sorted by bound: no later sibling (or descendant) can enter the top k
            d = 1 if g >= 0 else -1
            if abs(g) > threshold():
                best.append((abs(g), counter, child, d))
                counter += 1
                best.sort(key=lambda b: (-b[0], b[1]))
                del best[top_k:]
            if len(child) < size and mu > threshold():
                visit(child, cembs)

    visit((), [])
    return [(code, d, gain) for gain, _, code, d in best]
