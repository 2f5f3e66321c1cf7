"""Labelings from (possibly fractional) LP solutions: the largest marginal (:func:`round_labels`),
or a labeling that keeps every connectivity constraint (:func:`round_connected`), and the score of
a labeling (:func:`labeling_score`)."""

from __future__ import annotations

import heapq
from collections.abc import Iterable

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment
from scipy.sparse.csgraph import connected_components
from torch import Tensor

from .._checks import check_values
from ._options import check_connected, check_real_tensor
from .graph import adjacency, check_edges, check_graph_potentials

__all__ = ["round_labels", "round_connected", "labeling_score", "fractional", "fractional_nodes",
           "FRACTIONAL_TOL"]

FRACTIONAL_TOL = 1e-6


def fractional(x: Tensor) -> Tensor:
    """Entries strictly inside (0, 1), beyond FRACTIONAL_TOL."""
    return (x > FRACTIONAL_TOL) & (x < 1 - FRACTIONAL_TOL)


def fractional_nodes(mu: Tensor) -> Tensor:
    """(B,) fraction of the V nodes of mu (B, V, L) with a fractional variable (0 when V = 0), in
    mu's dtype (float64 for integer mu)."""
    dtype = mu.dtype if mu.dtype.is_floating_point else torch.float64
    return fractional(mu).any(2).to(dtype).sum(1) / max(mu.shape[1], 1)


def round_labels(mu: Tensor) -> tuple[Tensor, Tensor]:
    """Round node variables to labels.

    Parameters
    ----------
    mu : Tensor (V, L) or (B, V, L)
        Node variables of an LP solution (rows sum to one).

    Returns
    -------
    labels : Tensor (B, V) int64
        ``argmax_s mu_i(s)`` (ties: the smallest label, so a node at 1/2 foreground, 1/2
        background rounds to label 0, the thesis's "round down" for binary problems).
    fractional : Tensor (B,)
        Fraction of nodes with a variable strictly between 0 and 1 (beyond 1e-6); 0 when V = 0.
    """
    mu = _batched_mu(mu)
    return mu.argmax(2), fractional_nodes(mu)


def _batched_mu(mu: Tensor) -> Tensor:
    check_real_tensor("mu", mu)
    if mu.dim() not in (2, 3):
        raise ValueError(f"mu must have shape (V, L) or (B, V, L), got {tuple(mu.shape)}")
    if mu.shape[-1] == 0:
        raise ValueError(f"mu must have at least one label (L >= 1), got shape {tuple(mu.shape)}")
    mu = mu.unsqueeze(0) if mu.dim() == 2 else mu
    check_values("mu", mu, posinf=True)
    return mu


def round_connected(mu: Tensor, edges: Tensor, connected: list[int]) -> Tensor:
    """Round node variables to a labeling in which every label of ``connected`` forms one connected
    subgraph (or none), never violating a requested constraint (no solver; a heuristic).

    The largest marginal of each node gives a first labeling (as :func:`round_labels`). For each
    connected label, its largest component by LP mass (the sum of ``mu[:, c]`` over it) is kept
    and its other nodes are released; nodes of the other labels keep theirs. The released nodes
    are then assigned greedily, the largest marginal first, to a label that keeps every constraint:
    any label outside ``connected``, or a connected label whose kept nodes are adjacent (which
    grows its component and so keeps it connected). Where every label is connected, a graph
    component that no kept set reaches takes, whole, the connected label absent elsewhere with the
    largest mass on it (and where the kept sets leave too few such labels, every graph component
    takes one label whole). The labeling is a rounding, not the constrained MAP: compare its score
    (:func:`labeling_score`) with the LP's, an upper bound, to see the gap, or solve exactly with
    :func:`structtorch.lp.map_exact`.

    Parameters
    ----------
    mu : Tensor (V, L) or (B, V, L)
        Node variables of an LP solution (e.g. :func:`structtorch.lp.map_lp`'s ``mu``).
    edges : Tensor (E, 2) int64
        The graph's undirected edges.
    connected : list of int
        The labels whose nodes must form a connected subgraph (empty: :func:`round_labels`).

    Returns
    -------
    Tensor (B, V) int64
        The labels (on ``mu``'s device; B = 1 for an unbatched ``mu``).

    Raises
    ------
    ValueError
        If no labeling satisfies the constraints: every label is connected and the graph has more
        components than labels.

    Examples
    --------
    >>> import torch
    >>> from structtorch import lp
    >>> edges = lp.grid_edges(1, 5)                       # a path 0 - 1 - 2 - 3 - 4
    >>> mu = torch.tensor([[0.1, 0.9], [0.6, 0.4], [0.8, 0.2], [0.1, 0.9], [0.2, 0.8]])
    >>> lp.round_labels(mu)[0]                            # label 1 in two pieces
    tensor([[1, 0, 0, 1, 1]])
    >>> lp.round_connected(mu, edges, connected=[1])      # the heavier piece kept
    tensor([[0, 0, 0, 1, 1]])
    """
    mu = _batched_mu(mu)
    B, V, L = mu.shape
    edges = check_edges(edges, V)
    hard = sorted(check_connected(connected, None, L)[0])
    adj = adjacency(edges, V).tocsr()
    values = mu.detach().double().cpu().numpy()
    out = [_round_one(values[b], adj, hard) for b in range(B)]
    return torch.from_numpy(np.stack(out) if out else np.zeros((0, V), dtype=np.int64)).to(mu.device)


def _round_one(mu: np.ndarray, adj, hard: list[int]) -> np.ndarray:
    """:func:`round_connected` of one instance (V, L) on the CSR adjacency ``adj``."""
    V, L = mu.shape
    first = mu.argmax(1)
    label = np.where(np.isin(first, hard), -1, first)  # -1: not assigned yet
    for c in hard:
        nodes = np.flatnonzero(first == c)
        if not len(nodes):
            continue
        _, comp = connected_components(adj[nodes][:, nodes], directed=False)
        mass = np.bincount(comp, weights=mu[nodes, c])
        label[nodes[comp == int(mass.argmax())]] = c
    free = [s for s in range(L) if s not in hard]
    heap = []  # (-mu, label, node): the largest marginal first, ties to the smaller label

    def offer(i: int, labels: Iterable[int]) -> None:
        for s in labels:
            heapq.heappush(heap, (-mu[i, s], s, i))

    for i in np.flatnonzero(label < 0):
        near = {int(label[j]) for j in adj.indices[adj.indptr[i]:adj.indptr[i + 1]] if label[j] >= 0}
        offer(i, free + [c for c in hard if c in near])
    while heap:
        _, s, i = heapq.heappop(heap)
        if label[i] >= 0:
            continue
        label[i] = s
        if s in hard:  # its unassigned neighbours may now join s
            offer_to = [j for j in adj.indices[adj.indptr[i]:adj.indptr[i + 1]] if label[j] < 0]
            for j in offer_to:
                offer(j, [s])
    left = np.flatnonzero(label < 0)  # every label is connected and no kept set reaches these
    if len(left):
        _, comp = connected_components(adj[left][:, left], directed=False)
        unused = [c for c in hard if not (label == c).any()]
        if comp.max() + 1 > len(unused):  # the kept sets took labels these parts need: one per part
            return _label_per_component(mu, adj, hard)
        for k in range(comp.max() + 1):
            part = left[comp == k]
            c = max(unused, key=lambda c: (mu[part, c].sum(), -c))
            label[part] = c
            unused.remove(c)
    return label.astype(np.int64)


def _label_per_component(mu: np.ndarray, adj, hard: list[int]) -> np.ndarray:
    """Every label connected: each component of the graph takes one label whole, distinct labels,
    of the largest total mass (an assignment problem); a ValueError where there are more
    components than labels (then no labeling keeps the constraints)."""
    count, comp = connected_components(adj, directed=False)
    if count > len(hard):
        raise ValueError(f"no labeling keeps every label of connected = {hard} connected: the graph has "
                         f"{count} components, more than the {len(hard)} labels")
    mass = np.stack([mu[comp == k][:, hard].sum(0) for k in range(count)])
    parts, chosen = linear_sum_assignment(mass, maximize=True)
    label = np.empty(len(mu), dtype=np.int64)
    for k, j in zip(parts, chosen, strict=True):
        label[comp == k] = hard[j]
    return label


def labeling_score(unary: Tensor, pairwise: Tensor, edges: Tensor, labels: Tensor) -> Tensor:
    """The score of labelings: ``sum_i unary[i, y_i] + sum_e pairwise[e, y_i, y_j]``.

    Parameters
    ----------
    unary : Tensor (V, L) or (B, V, L)
    pairwise : Tensor (E, L, L) or (B, E, L, L)
    edges : Tensor (E, 2) int64
    labels : Tensor (V,) or (B, V) int64 in [0, L)

    Returns
    -------
    Tensor (B,)
        Differentiable in the potentials (B = 1 for unbatched input).
    """
    unary, pairwise, edges = check_graph_potentials(unary, pairwise, edges)
    B, V, L = unary.shape
    if not isinstance(labels, Tensor) or labels.dtype.is_floating_point or labels.dtype == torch.bool:
        raise TypeError(f"labels must be an integer tensor, got {getattr(labels, 'dtype', type(labels))}")
    labels = labels.reshape(1, -1) if labels.dim() == 1 else labels
    if labels.shape != (B, V):
        raise ValueError(f"labels must have shape (B, V) = {(B, V)} or (V,), got {tuple(labels.shape)}")
    if labels.numel() and (int(labels.min()) < 0 or int(labels.max()) >= L):
        bad = int(labels.min()) if int(labels.min()) < 0 else int(labels.max())
        raise ValueError(f"labels must be in [0, L) = [0, {L}), found {bad}")
    labels = labels.long().to(unary.device)
    score = unary.gather(2, labels[..., None]).squeeze(2).sum(1)
    if len(edges):
        e = edges.to(unary.device)
        pair = labels[:, e[:, 0]] * L + labels[:, e[:, 1]]
        score = score + pairwise.reshape(B, len(e), L * L).gather(2, pair[..., None]).squeeze(2).sum(1)
    return score
