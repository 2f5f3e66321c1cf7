"""Labeled graphs with a planted labeled cycle (structtorch.data.graphs.motif_graphs) and the
subgraph-boosting example that uses them."""

from __future__ import annotations

import re

import networkx as nx
import numpy as np
import pytest
import torch
from _runner import run_example

from structtorch.data.graphs import motif_graphs
from structtorch.mining.graphs import contains, occurrence_matrix, to_networkx


@pytest.mark.parametrize("motif, k", [("triangle", 3), ("square", 4)])
def test_structure_splits_and_motif(motif, k):
    data = motif_graphs(90, num_nodes=(8, 12), motif=motif, seed=1)
    assert len(data) == 90 and data.labels.dtype == torch.long
    assert torch.bincount(data.labels).tolist() == [45, 45]
    assert (len(data.train), len(data.val), len(data.test)) == (30, 30, 30)
    every = torch.cat([data.train, data.val, data.test])
    assert torch.equal(every.sort().values, torch.arange(90))
    for split in (data.train, data.val, data.test):
        assert torch.equal(split, split.sort().values)
    nodes, edges, elabels = data.motif
    assert nodes.tolist() == [i % 4 for i in range(k)] and len(edges) == k
    for nl, e, el in data.graphs:
        assert nl.dtype == e.dtype == el.dtype == np.int64
        assert 8 <= len(nl) <= 12 and e.shape == (len(el), 2)
        assert nl.min() >= 0 and nl.max() < 4 and el.min() >= 0 and el.max() < 2
        assert (e[:, 0] != e[:, 1]).all(), "no self loops"
        assert len({frozenset(p) for p in e.tolist()}) == len(e), "no multi-edges"
        assert nx.is_connected(to_networkx((nl, e, el)))
    y = data.labels.numpy().astype(bool)
    has = occurrence_matrix([data.motif], data.graphs)[:, 0]
    assert (has == y).all(), "the labeled cycle occurs exactly in the positives"
    assert all(contains(data.motif, data.graphs[i]) == y[i] for i in range(0, 90, 7))
    # the open path that replaces the cycle in the negatives: k edges, ending on a copy of m_0's label
    path = (np.array([i % 4 for i in range(k)] + [0]), np.array([(i, i + 1) for i in range(k)]),
            np.arange(k) % 2)
    assert occurrence_matrix([path], [g for g, pos in zip(data.graphs, y, strict=True) if not pos]).all()
    again = motif_graphs(90, num_nodes=(8, 12), motif=motif, seed=1)
    assert all(all(np.array_equal(a, b) for a, b in zip(g, h, strict=True))
               for g, h in zip(again.graphs, data.graphs, strict=True))
    assert torch.equal(again.labels, data.labels) and torch.equal(again.test, data.test)


def test_bags_of_labels_have_one_distribution():
    data = motif_graphs(1200, seed=2)
    y = data.labels
    V = torch.tensor([len(g[0]) for g in data.graphs], dtype=torch.float32)
    E = torch.tensor([len(g[1]) for g in data.graphs], dtype=torch.float32)
    assert abs(V[y == 1].mean() - V[y == 0].mean()) < 0.3
    assert abs(E[y == 1].mean() - E[y == 0].mean()) < 0.5
    for kind, width in (("nodes", 4), ("edges", 2), ("triples", 4 * 2 * 4)):
        counts = data.label_counts(kind)
        assert counts.shape == (1200, width)
        total = counts.sum(1)
        assert torch.equal(total, V if kind == "nodes" else E)
        gap = (counts[y == 1].mean(0) - counts[y == 0].mean(0)).abs()
        assert gap.max() < 0.35, (kind, gap)
    # the planted labels and labeled edges are the same multiset in both classes: graph by graph,
    # each graph holds at least two 0s, one 1 and one 2, and the three labeled edges of the cycle
    nodes, triples = data.label_counts("nodes"), data.label_counts("triples")
    assert (nodes[:, 0] >= 2).all() and (nodes[:, 1:3] >= 1).all()
    cycle = [(0 * 2 + 0) * 4 + 1, (1 * 2 + 1) * 4 + 2, (0 * 2 + 0) * 4 + 2]  # (0,e0,1), (1,e1,2), (0,e0,2)
    assert (triples[:, cycle] >= 1).all()
    with pytest.raises(ValueError, match="kind"):
        data.label_counts("paths")


def test_argument_errors():
    with pytest.raises(ValueError, match="n must"):
        motif_graphs(0)
    with pytest.raises(TypeError, match="n must"):
        motif_graphs(3.0)
    with pytest.raises(ValueError, match="motif"):
        motif_graphs(10, motif="pentagon")
    with pytest.raises(ValueError, match=r"num_nodes\[0\]"):
        motif_graphs(10, num_nodes=(4, 10))  # a triangle needs 3 + 1 motif nodes and 1 background node
    with pytest.raises(ValueError, match=r"num_nodes\[1\]"):
        motif_graphs(10, num_nodes=(12, 10))
    with pytest.raises(TypeError, match="num_nodes"):
        motif_graphs(10, num_nodes=12)
    with pytest.raises(ValueError, match="num_node_labels"):
        motif_graphs(10, num_node_labels=0)
    with pytest.raises(ValueError, match="num_edge_labels"):
        motif_graphs(10, num_edge_labels=0)
    with pytest.raises(ValueError, match="edge_prob"):
        motif_graphs(10, edge_prob=1.5)
    with pytest.raises(ValueError, match="splits"):
        motif_graphs(10, splits=(5, 5, 5))
    with pytest.raises(ValueError, match="by chance"):  # one label each, complete background: always a triangle
        motif_graphs(4, num_nodes=(8, 8), num_node_labels=1, num_edge_labels=1, edge_prob=1.0)
    assert len(motif_graphs(10, splits=(4, 3, 3)).train) == 4


def test_example_runs_and_boosting_beats_the_bags():
    out = run_example("graph_mining.py", "--n", "60", "--nu", "0.1", "0.25", "--max-size", "2", "3",
                      "--C", "1", "--top", "2")
    assert "validation accuracy (%) of subgraph LPBoost" in out and "test accuracy (%)" in out
    rows = {}
    for name in ("subgraph LPBoost", "bag of node labels", "bag of nodes+edges+triples"):
        m = re.search(rf"^  {re.escape(name)}\s+(?:size=\d+ nu=|C=)[\d.e+-]+\s+([\d.]+)\s+([\d.]+)\s+[\d.]+\s+[\d.]+\s+(\d+)$", out,
                      flags=re.M)
        assert m, (name, out)
        rows[name] = float(m.group(2)), int(m.group(3))
    assert rows["subgraph LPBoost"][0] >= 90.0 and rows["subgraph LPBoost"][1] >= 1
    assert rows["bag of node labels"][1] == 4
    assert "planted motif: ((0, 1, 0, 0, 1), (1, 2, 1, 1, 2), (2, 0, 2, 0, 0))" in out
    assert re.search(r"^  alpha [01]\.\d{3}  d [+-]1  [123] edges  \(\(0, 1, ", out, flags=re.M), out
