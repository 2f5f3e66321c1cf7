"""Labeled graphs whose class is a labeled *structure*, not a bag of labels (Nowozin 2009, Part I, ch. 3).

:func:`motif_graphs` plants, in a random labeled background graph, either a labeled cycle (class 1)
or the same labeled edges as an open path (class 0). Both classes receive the same node labels and
the same edge labels in the same numbers, so histograms of node labels, of edge labels, and even of
labeled edges ``(node label, edge label, node label)`` have one distribution in both classes: a
classifier on those bags is at chance, while the subgraph pattern of the cycle separates the
classes exactly (the input of subgraph boosting, :class:`structtorch.mining.LPBoost` over
:func:`structtorch.mining.graphs.best_patterns`).

The planted structure, for a cycle of length ``k`` (3 for ``"triangle"``, 4 for ``"square"``), uses
``k + 1`` motif nodes ``m_0 .. m_k`` with node labels ``i mod L`` for ``m_i`` (``i < k``) and label
``0`` for ``m_k`` (a second copy of ``m_0``'s label), and ``k`` motif edges with edge labels
``i mod K``:

* class 1 (positive): the cycle ``m_0 - m_1 - ... - m_{k-1} - m_0``; ``m_k`` hangs off the background;
* class 0 (negative): the path ``m_0 - m_1 - ... - m_{k-1} - m_k``, whose last edge carries the label
  of the cycle's closing edge (it ends at the copy ``m_k`` instead of closing on ``m_0``).

Each labeled edge of the cycle, ``(label m_i, edge label, label m_{i+1})``, also occurs in the path.
Two further random edges join motif nodes to the background in both classes, so every graph has
the same number of edges as the other class's graphs of the same size. Negatives whose background
happens to create the labeled cycle are rejected and redrawn, so the motif (``GraphData.motif``) is
contained, per :func:`structtorch.mining.graphs.contains`, in exactly the positive graphs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from .._checks import check_int, check_number

__all__ = ["GraphData", "MOTIFS", "motif_graphs"]

MOTIFS = {"triangle": 3, "square": 4}
"""Motif name -> length of the planted cycle."""

Graph = tuple[np.ndarray, np.ndarray, np.ndarray]


@dataclass
class GraphData:
    """Labeled graphs with binary labels.

    Attributes
    ----------
    graphs : list of n tuples ``(node_labels (V,), edges (E, 2), edge_labels (E,))``
        int64 arrays; simple, undirected, connected graphs (each edge listed once).
    labels : Tensor (n,) int64
        1 if the graph contains the planted labeled cycle, 0 if it holds the open path instead.
        (:class:`~structtorch.mining.LPBoost` takes these as they are; the miners' ``{-1, +1}``
        convention is ``2 * labels - 1``.)
    train, val, test : Tensor int64
        Sorted indices of the three splits (disjoint, covering ``range(n)``).
    motif : tuple ``(node_labels (k,), edges (k, 2), edge_labels (k,))``
        The planted labeled cycle, a pattern for :func:`structtorch.mining.graphs.contains`.
    num_node_labels, num_edge_labels : int
        Node labels lie in ``[0, num_node_labels)``, edge labels in ``[0, num_edge_labels)``.
    """

    graphs: list[Graph]
    labels: Tensor
    train: Tensor
    val: Tensor
    test: Tensor
    motif: Graph
    num_node_labels: int
    num_edge_labels: int

    def __len__(self) -> int:
        return len(self.graphs)

    def label_counts(self, kind: str = "nodes") -> Tensor:
        """Bag-of-labels features of every graph (for histogram baselines).

        Parameters
        ----------
        kind : {"nodes", "edges", "triples"}
            Counts of node labels (width ``L``), of edge labels (width ``K``), or of labeled edges
            ``(a, e, b)`` with node labels ``a <= b`` and edge label ``e`` (width ``L * K * L``, index
            ``(a * K + e) * L + b``; entries with ``a > b`` stay zero).

        Returns
        -------
        Tensor (n, width) float32
        """
        L, K = self.num_node_labels, self.num_edge_labels
        widths = {"nodes": L, "edges": K, "triples": L * K * L}
        if kind not in widths:
            raise ValueError(f"kind must be one of {tuple(widths)}, got {kind!r}")
        out = np.zeros((len(self.graphs), widths[kind]), dtype=np.float32)
        for i, (nodes, edges, elabels) in enumerate(self.graphs):
            if kind == "nodes":
                idx = nodes
            elif kind == "edges":
                idx = elabels
            else:
                a, b = nodes[edges[:, 0]], nodes[edges[:, 1]]
                a, b = np.minimum(a, b), np.maximum(a, b)
                idx = (a * K + elabels) * L + b
            np.add.at(out[i], idx, 1.0)
        return torch.from_numpy(out)


def _motif(k: int, L: int, K: int) -> Graph:
    nodes = np.arange(k, dtype=np.int64) % L
    edges = np.array([(i, (i + 1) % k) for i in range(k)], dtype=np.int64)
    return nodes, edges, np.arange(k, dtype=np.int64) % K


def _one_graph(rng: np.random.Generator, positive: bool, V: int, k: int, L: int, K: int,
               edge_prob: float) -> Graph:
    """One graph of V nodes: a background on V - k - 1 nodes and the k + 1 motif nodes."""
    B = V - k - 1
    labels = np.concatenate([rng.integers(0, L, B), np.arange(k) % L, [0]]).astype(np.int64)
    edges: list[tuple[int, int]] = []
    elabels: list[int] = []
    # background: a random spanning tree plus each other pair with probability edge_prob
    for v in range(1, B):
        edges.append((int(rng.integers(0, v)), v))
    tree = set(edges)
    for u in range(B):
        for v in range(u + 1, B):
            if (u, v) not in tree and rng.random() < edge_prob:
                edges.append((u, v))
    elabels += rng.integers(0, K, len(edges)).tolist()
    m = [B + i for i in range(k + 1)]  # motif nodes
    for i in range(k - 1):
        edges.append((m[i], m[i + 1]))
        elabels.append(i % K)
    edges.append((m[k - 1], m[0] if positive else m[k]))  # closes the cycle, or extends the path
    elabels.append((k - 1) % K)
    # two random edges from motif nodes to the background (the positives' m_k must be one of them)
    if positive:
        anchors = [m[k], m[int(rng.integers(0, k))]]
    else:
        anchors = [m[i] for i in rng.choice(k + 1, 2, replace=False)]
    for a in anchors:
        edges.append((int(rng.integers(0, B)), a))
        elabels.append(int(rng.integers(0, K)))
    # shuffle node ids, edge order and orientation so that no position reveals the motif
    perm = rng.permutation(V)
    e = perm[np.asarray(edges, dtype=np.int64)]
    flip = rng.random(len(e)) < 0.5
    e[flip] = e[flip][:, ::-1]
    order = rng.permutation(len(e))
    out_labels = np.empty(V, dtype=np.int64)
    out_labels[perm] = labels
    return out_labels, e[order], np.asarray(elabels, dtype=np.int64)[order]


def motif_graphs(n: int = 300, *, num_nodes: tuple[int, int] = (10, 16), num_node_labels: int = 4,
                 num_edge_labels: int = 2, edge_prob: float = 0.1, motif: str = "triangle",
                 splits: tuple[int, int, int] | None = None, seed: int = 0) -> GraphData:
    """Random labeled graphs classified by a planted labeled cycle against the same labels as a path.

    See the module docstring for the construction. The background on ``V - k - 1`` nodes is a
    uniformly random recursive tree plus each other node pair with probability ``edge_prob``; its
    node labels are uniform on ``[0, num_node_labels)`` and all its edge labels (and those of the
    two motif-to-background edges) uniform on ``[0, num_edge_labels)``. The classes alternate and are
    shuffled (balanced up to one graph).

    Parameters
    ----------
    n : int
        Number of graphs.
    num_nodes : (int, int)
        Smallest and largest number of nodes V (inclusive, drawn uniformly), motif nodes included:
        at least ``k + 2`` (one background node).
    num_node_labels, num_edge_labels : int
        Label alphabet sizes L >= 1 and K >= 1.
    edge_prob : float in [0, 1]
        Density of the background beyond its spanning tree.
    motif : {"triangle", "square"}
        The planted cycle (length 3 or 4). A square needs patterns of 4 edges to be seen whole.
    splits : (int, int, int), optional
        Train, validation and test sizes summing to n (default: thirds, the remainder to train).
    seed : int

    Returns
    -------
    GraphData

    Raises
    ------
    ValueError
        Bad arguments, or a background so dense or so poor in labels that the labeled cycle keeps
        appearing by chance in the negatives (more than 100 redraws for one graph).
    """
    from structtorch.mining.graphs import contains

    n = check_int("n", n, 1)
    if motif not in MOTIFS:
        raise ValueError(f"motif must be one of {tuple(MOTIFS)}, got {motif!r}")
    k = MOTIFS[motif]
    if not isinstance(num_nodes, (tuple, list)) or len(num_nodes) != 2:
        raise TypeError(f"num_nodes must be a pair (min, max), got {num_nodes!r}")
    lo = check_int("num_nodes[0]", num_nodes[0], k + 2)
    hi = check_int("num_nodes[1]", num_nodes[1], lo)
    L = check_int("num_node_labels", num_node_labels, 1)
    K = check_int("num_edge_labels", num_edge_labels, 1)
    edge_prob = check_number("edge_prob", edge_prob, low=0.0, high=1.0)
    seed = check_int("seed", seed)
    if splits is None:
        third = n // 3
        splits = (n - 2 * third, third, third)
    if (not isinstance(splits, (tuple, list)) or len(splits) != 3
            or any(isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < 0 for s in splits)
            or sum(splits) != n):
        raise ValueError(f"splits must be three non-negative ints summing to n = {n}, got {splits!r}")
    rng = np.random.default_rng(seed)
    pattern = _motif(k, L, K)
    labels = rng.permutation(np.arange(n) % 2)
    graphs = []
    for y in labels.tolist():
        V = int(rng.integers(lo, hi + 1))
        for _ in range(100):
            g = _one_graph(rng, bool(y), V, k, L, K, edge_prob)
            if y or not contains(pattern, g):
                break
        else:
            raise ValueError(f"the background creates the labeled {motif} by chance too often: lower "
                             f"edge_prob ({edge_prob}) or num_nodes, or use more labels")
        graphs.append(g)
    order = rng.permutation(n)
    a, b, _ = (int(s) for s in splits)
    return GraphData(graphs, torch.as_tensor(labels, dtype=torch.long), torch.as_tensor(np.sort(order[:a])),
                     torch.as_tensor(np.sort(order[a:a + b])), torch.as_tensor(np.sort(order[a + b:])),
                     pattern, L, K)
