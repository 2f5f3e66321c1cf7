"""Graphs for the LP relaxations: grid edges and the validation of graph potentials."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from .._checks import _fmt, check_finite, check_float, check_int
from ._options import is_integer_dtype

__all__ = ["grid_edges", "check_edges", "check_graph_potentials", "num_nodes_of"]


def grid_edges(H: int, W: int, connectivity: int = 4) -> Tensor:
    """Edges (E, 2) int64 of an H x W pixel grid, node r * W + c, each row (i, j) with i < j.

    ``H``, ``W``: ints >= 1. ``connectivity`` 4 joins horizontal and vertical neighbours, 8 also
    the diagonal ones.
    """
    H, W = check_int("H", H, 1), check_int("W", W, 1)
    if isinstance(connectivity, bool) or connectivity not in (4, 8):
        raise ValueError(f"connectivity must be 4 or 8, got {connectivity!r}")
    idx = torch.arange(H * W).view(H, W)
    pairs = [(idx[:, :-1], idx[:, 1:]), (idx[:-1, :], idx[1:, :])]
    if connectivity == 8:
        pairs += [(idx[:-1, :-1], idx[1:, 1:]), (idx[:-1, 1:], idx[1:, :-1])]
    edges = torch.cat([torch.stack([a.reshape(-1), b.reshape(-1)], 1) for a, b in pairs])
    return torch.sort(edges, dim=1).values


def check_edges(edges: object, num_nodes: int) -> Tensor:
    """Validate edges (E, 2) int64 with 0 <= i < j < num_nodes and no duplicates."""
    if not isinstance(edges, Tensor):
        raise TypeError(f"edges must be a torch.Tensor of shape (E, 2), got {type(edges).__name__}")
    if not is_integer_dtype(edges.dtype):
        raise TypeError(f"edges must be an integer tensor of shape (E, 2), got {edges.dtype}")
    if edges.dim() != 2 or edges.shape[1] != 2:
        raise ValueError(f"edges must have shape (E, 2), got {_fmt(edges.shape)}")
    edges = edges.long().cpu()  # graphs live on the host: checked there (no device sync)
    e = edges.numpy()
    if len(e):
        if e.min() < 0 or e.max() >= num_nodes:
            raise ValueError(f"edges must index nodes in [0, V) = [0, {num_nodes}), got min "
                             f"{int(e.min())} and max {int(e.max())}")
        if (e[:, 0] == e[:, 1]).any():
            row = int(np.flatnonzero(e[:, 0] == e[:, 1])[0])
            raise ValueError(f"edges has a self-loop at row {row}: {e[row].tolist()}")
        if (e[:, 0] > e[:, 1]).any():
            row = int(np.flatnonzero(e[:, 0] > e[:, 1])[0])
            raise ValueError(f"edges must have i < j in every row (pairwise[e, s, t] scores label s at "
                             f"edges[e, 0]); row {row} is {e[row].tolist()}")
        key = e[:, 0] * num_nodes + e[:, 1]
        _, inverse, counts = np.unique(key, return_inverse=True, return_counts=True)
        if (counts > 1).any():
            row = int(np.flatnonzero(counts[inverse] > 1)[0])
            raise ValueError(f"edges has a duplicate edge {e[row].tolist()} (row {row})")
    return edges


def num_nodes_of(edges: object, num_nodes: object, minimum: int = 0) -> int:
    """V: ``num_nodes`` (an int >= ``minimum``), or by default the largest node index in ``edges``
    plus one (an error when there is none)."""
    if num_nodes is not None:
        return check_int("num_nodes", num_nodes, minimum)
    if not (isinstance(edges, Tensor) and is_integer_dtype(edges.dtype)):
        check_edges(edges, 0)  # a wrong type gets its own message
    if edges.numel() == 0:
        raise ValueError("num_nodes is needed when edges is empty (there is no largest node index)")
    return max(int(edges.max()) + 1, minimum)


def check_graph_potentials(unary: object, pairwise: object, edges: object,
                           edges_checked: bool = False) -> tuple[Tensor, Tensor, Tensor]:
    """Bring unary (V, L) / (B, V, L) and pairwise (E, L, L) / (B, E, L, L) to batched form and
    validate the edges (unless ``edges_checked``: a layer's own, checked when it was built);
    returns (unary (B, V, L), pairwise (B, E, L, L), edges (E, 2) int64 on CPU)."""
    unary = check_float("unary", unary)
    if unary.dim() == 2:
        unary = unary.unsqueeze(0)
    if unary.dim() != 3 or unary.shape[2] < 1:
        raise ValueError(f"unary must have shape (V, L) or (B, V, L), got {_fmt(unary.shape)}")
    check_finite("unary", unary, " (-inf is not supported by the LP relaxations)")
    B, V, L = unary.shape
    edges = edges if edges_checked else check_edges(edges, V)
    E = len(edges)
    pairwise = check_float("pairwise", pairwise, unary, "unary")
    if pairwise.dim() == 3:
        pairwise = pairwise.unsqueeze(0).expand(B, *pairwise.shape)
    if pairwise.shape != (B, E, L, L):
        raise ValueError(f"pairwise must have shape (E, L, L) = ({E}, {L}, {L}) or (B, E, L, L) = "
                         f"({B}, {E}, {L}, {L}), got {_fmt(pairwise.shape)}")
    check_finite("pairwise", pairwise, " (-inf is not supported by the LP relaxations)")
    return unary, pairwise, edges


def adjacency(edges: Tensor, num_nodes: int):
    """Symmetric scipy CSR adjacency (int8 ones) of the graph."""
    import scipy.sparse as sp

    e = edges.numpy()
    rows = np.concatenate([e[:, 0], e[:, 1]])
    cols = np.concatenate([e[:, 1], e[:, 0]])
    return sp.csr_array((np.ones(len(rows), dtype=np.int8), (rows, cols)), shape=(num_nodes, num_nodes))
