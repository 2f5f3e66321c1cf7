"""Clustering problems as graph-partitioning weights (Nowozin 2009, Table 9).

Each builder returns ``(edges (E, 2) int64, weights (E,) float64)`` over all pairs i < j of the V
nodes, for :func:`structtorch.lp.multicut` (which minimizes sum_e w_e z_e, z_e = 1 when the pair
is split). Node order: ``sorted(graph.nodes)`` for networkx graphs.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from .._checks import check_int
from ._options import as_real_tensor, check_costs, check_real

__all__ = ["all_pairs", "modularity_weights", "correlation_weights", "consensus_weights",
           "cluster_size_bias", "modularity"]


def all_pairs(V: int) -> Tensor:
    """(V (V - 1) / 2, 2) int64 edges of the complete graph on V >= 0 nodes, i < j."""
    V = check_int("V", V, 0)
    i, j = torch.triu_indices(V, V, offset=1)
    return torch.stack([i, j], 1)


def _check_graph(graph) -> None:
    import networkx as nx

    if not isinstance(graph, nx.Graph):
        raise TypeError(f"graph must be a networkx graph (nx.Graph), got {type(graph).__name__}")


def _adjacency(graph) -> tuple[np.ndarray, list]:
    import networkx as nx

    _check_graph(graph)
    if graph.is_directed() or graph.is_multigraph():
        raise ValueError("graph must be a simple undirected networkx graph")
    nodes = sorted(graph.nodes)
    if any(graph.has_edge(v, v) for v in nodes):
        raise ValueError("graph must be simple: it has a self-loop")
    if graph.number_of_edges() == 0:
        raise ValueError("graph has no edges")
    return nx.to_numpy_array(graph, nodelist=nodes, weight=None), nodes


def modularity_weights(graph) -> tuple[Tensor, Tensor]:
    """w_ij = (A_ij - k_i k_j / 2m) / 2m over all pairs, so that the modularity of a partition is
    Q = -2 sum_{i<j} w_ij z_ij (maximizing Q = minimizing sum w z)."""
    A, _ = _adjacency(graph)
    k = A.sum(1)
    two_m = A.sum()
    B = (A - np.outer(k, k) / two_m) / two_m
    edges = all_pairs(len(A))
    return edges, torch.from_numpy(B[edges[:, 0].numpy(), edges[:, 1].numpy()].copy())


def correlation_weights(similarity: Tensor) -> tuple[Tensor, Tensor]:
    """w_ij = v(i, j) from a symmetric (V, V) rating matrix (positive: same cluster)."""
    v = as_real_tensor("similarity", similarity).double()
    check_costs("similarity", v)
    if v.dim() != 2 or v.shape[0] != v.shape[1] or not torch.allclose(v, v.T):
        raise ValueError(f"similarity must be a symmetric (V, V) matrix, got shape {tuple(v.shape)}")
    edges = all_pairs(v.shape[0])
    return edges, v[edges[:, 0], edges[:, 1]].clone()


def consensus_weights(clusterings: Tensor) -> tuple[Tensor, Tensor]:
    """w_ij = (1/m) sum_k (1 - 2 r^k_ij), r^k_ij = 1 when clustering k splits i and j; clusterings
    (m, V) int64 labels."""
    c = as_real_tensor("clusterings", clusterings)
    if c.dtype.is_floating_point:
        raise TypeError(f"clusterings must be an (m, V) integer tensor, got {c.dtype}")
    if c.dim() != 2 or c.shape[0] == 0:
        raise ValueError(f"clusterings must be an (m, V) integer tensor with m >= 1, got shape "
                         f"{tuple(c.shape)}")
    edges = all_pairs(c.shape[1])
    split = (c[:, edges[:, 0]] != c[:, edges[:, 1]]).double()
    return edges, (1 - 2 * split).mean(0)


def cluster_size_bias(V: int, lam: float, kind: str = "squared") -> tuple[Tensor, Tensor]:
    """Weights to add for a bias on cluster sizes: ``"squared"`` (``lam sum_k |C_k|^2``, penalizes
    large clusters): -lam per pair; ``"difference"`` (``lam sum_{k,l} (|C_k| - |C_l|)^2``, favours equal
    sizes): -2 lam per pair."""
    if kind not in ("squared", "difference"):
        raise ValueError(f"kind must be 'squared' or 'difference', got {kind!r}")
    lam = check_real("lam", lam)
    edges = all_pairs(V)
    return edges, torch.full((len(edges),), -lam * (1 if kind == "squared" else 2), dtype=torch.float64)


def modularity(graph, clusters: Tensor) -> float:
    """Newman's modularity of the partition ``clusters`` (V,) (order: sorted(graph.nodes))."""
    import networkx as nx

    _check_graph(graph)
    nodes = sorted(graph.nodes)
    labels = torch.as_tensor(clusters).tolist()
    if len(labels) != len(nodes):
        raise ValueError(f"clusters must have one label per node (V = {len(nodes)}), got {len(labels)}")
    groups: dict[int, set] = {}
    for v, c in zip(nodes, labels, strict=True):
        groups.setdefault(c, set()).add(v)
    return float(nx.community.modularity(graph, list(groups.values()), weight=None))
