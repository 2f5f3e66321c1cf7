"""Brute-force oracles for structtorch.mining.graphs (digest §4.2-4.3, §6.3 items 6-7, §7 errata 4 and 16)."""

from __future__ import annotations

import itertools
import random

import networkx as nx
import numpy as np
import pytest
import torch

from structtorch.mining import graphs as G

X, Y, Z = 0, 1, 2
A, B, C, D = 0, 1, 2, 3
# Fig. 16 / Table 2 graph as reconstructed in the digest (§6.3 item 6)
THESIS_GRAPH = ([X, X, Y, Z, Z], [(0, 1), (1, 2), (0, 2), (2, 3), (2, 4), (0, 4)], [A, A, B, D, B, C])
THESIS_MIN = (
    (0, 1, X, A, X),
    (1, 2, X, A, Y),
    (2, 0, Y, B, X),
    (2, 3, Y, B, Z),
    (3, 0, Z, C, X),
    (2, 4, Y, D, Z),
)


def _adj(graph):
    labels, edges, elabels = graph
    adj = {v: {} for v in range(len(labels))}
    for (u, v), le in zip(edges, elabels, strict=True):
        adj[u][v] = le
        adj[v][u] = le
    return list(labels), adj


def all_dfs_codes(graph):
    """Every DFS code of a connected graph (Algorithm 4: backward edges first, any order of forward edges)."""
    labels, adj = _adj(graph)
    n_edges = sum(len(a) for a in adj.values()) // 2
    out = []

    def rec(index, stack, used, code):
        if len(code) == n_edges:
            out.append(tuple(code))
            return
        r = stack[-1]
        back = [w for w in adj[r] if w in index and frozenset((r, w)) not in used]
        if back:  # backward edges are emitted at once, by visiting index
            w = min(back, key=index.get)
            e = (index[r], index[w], labels[r], adj[r][w], labels[w])
            rec(index, stack, used | {frozenset((r, w))}, code + [e])
            return
        stack = list(stack)
        while not [w for w in adj[stack[-1]] if w not in index]:
            stack.pop()
        v = stack[-1]
        for w in adj[v]:
            if w not in index:
                e = (index[v], len(index), labels[v], adj[v][w], labels[w])
                rec({**index, w: len(index)}, stack + [w], used | {frozenset((v, w))}, code + [e])

    for s in range(len(labels)):
        rec({s: 0}, [s], frozenset(), [])
    return out


def brute_min(graph):
    return min(all_dfs_codes(graph), key=G.code_key)


def random_connected(rng, n_min=2, n_max=5, n_labels=2, n_elabels=2, extra=0.4):
    n = rng.randint(n_min, n_max)
    edges = set()
    for v in range(1, n):
        edges.add((rng.randrange(v), v))
    for u, v in itertools.combinations(range(n), 2):
        if (u, v) not in edges and rng.random() < extra:
            edges.add((u, v))
    edges = sorted(edges)
    return (
        [rng.randrange(n_labels) for _ in range(n)],
        edges,
        [rng.randrange(n_elabels) for _ in edges],
    )


def permuted(graph, rng):
    labels, edges, elabels = graph
    perm = list(range(len(labels)))
    rng.shuffle(perm)
    new_labels = [0] * len(labels)
    for v, p in enumerate(perm):
        new_labels[p] = labels[v]
    order = list(range(len(edges)))
    rng.shuffle(order)
    new_edges = [
        (perm[edges[k][1]], perm[edges[k][0]])
        if rng.random() < 0.5
        else (perm[edges[k][0]], perm[edges[k][1]])
        for k in order
    ]
    return new_labels, new_edges, [elabels[k] for k in order]


def brute_contains(pattern, graph):
    pl, padj = _adj(pattern)
    gl, gadj = _adj(graph)
    for m in itertools.permutations(range(len(gl)), len(pl)):
        if all(pl[v] == gl[m[v]] for v in range(len(pl))) and all(
            gadj[m[u]].get(m[v]) == le for u in padj for v, le in padj[u].items()
        ):
            return True
    return False


def connected_subgraph_codes(graph, max_size):
    """Minimum codes of all connected edge subsets with 1..max_size edges (by brute force)."""
    labels, edges, elabels = graph
    codes = set()
    for k in range(1, max_size + 1):
        for sub in itertools.combinations(range(len(edges)), k):
            verts = sorted({v for e in sub for v in edges[e]})
            idx = {v: i for i, v in enumerate(verts)}
            h = nx.Graph([(idx[edges[e][0]], idx[edges[e][1]]) for e in sub])
            if not nx.is_connected(h):
                continue
            g = (
                [labels[v] for v in verts],
                [(idx[edges[e][0]], idx[edges[e][1]]) for e in sub],
                [elabels[e] for e in sub],
            )
            codes.add(brute_min(g))
    return codes


def test_thesis_minimum_dfs_code():
    codes = all_dfs_codes(THESIS_GRAPH)
    assert len(codes) == 36
    assert min(codes) == THESIS_MIN  # plain lexicographic order of the thesis (Algorithm 4)
    assert min(codes, key=G.code_key) == THESIS_MIN  # gSpan DFS-lexicographic order
    assert G.dfs_code(THESIS_GRAPH) == THESIS_MIN
    assert G.is_min_code(THESIS_MIN)
    # the thesis's printed γ is a valid code but not the minimum (erratum 16)
    assert all(G.is_min_code(c) == (c == THESIS_MIN) for c in codes)


def test_dfs_code_against_enumeration_and_renumbering():
    rng = random.Random(0)
    for _ in range(60):
        g = random_connected(rng)
        code = G.dfs_code(g)
        assert code == brute_min(g)
        assert G.dfs_code(permuted(g, rng)) == code
        assert G.dfs_code(G.code_to_graph(code)) == code
        assert G.is_min_code(code)
        nxg = G.to_networkx(g)
        assert G.dfs_code(nxg) == code
        tg = tuple(torch.as_tensor(np.asarray(a, dtype=np.int64)) for a in g)
        assert G.dfs_code(tg) == code


def test_dfs_code_is_isomorphism_invariant():
    rng = random.Random(1)
    gs = [random_connected(rng, 3, 4, 2, 1) for _ in range(40)]
    nm = nx.algorithms.isomorphism.categorical_node_match("label", None)
    em = nx.algorithms.isomorphism.categorical_edge_match("label", None)
    for g1, g2 in itertools.combinations(gs, 2):
        iso = nx.is_isomorphic(G.to_networkx(g1), G.to_networkx(g2), node_match=nm, edge_match=em)
        assert (G.dfs_code(g1) == G.dfs_code(g2)) == iso


def test_small_codes():
    assert G.dfs_code(([3], [], [])) == ()
    assert G.dfs_code(([2, 1], [(0, 1)], [5])) == ((0, 1, 1, 5, 2),)
    with pytest.raises(ValueError, match="connected"):
        G.dfs_code(([0, 0, 0], [(0, 1)], [0]))


def test_contains_against_brute_force():
    rng = random.Random(2)
    for _ in range(150):
        g = random_connected(rng, 3, 6, 2, 2, 0.4)
        p = random_connected(rng, 2, 4, 2, 2, 0.3)
        expect = brute_contains(p, g)
        assert G.contains(p, g) == expect
        assert G.contains(G.dfs_code(p), g) == expect
        gm = nx.algorithms.isomorphism.GraphMatcher(
            G.to_networkx(g),
            G.to_networkx(p),
            node_match=lambda a, b: a["label"] == b["label"],
            edge_match=lambda a, b: a["label"] == b["label"],
        )
        assert gm.subgraph_is_monomorphic() == expect


def test_contains_is_non_induced():
    triangle = ([0, 0, 0], [(0, 1), (1, 2), (0, 2)], [0, 0, 0])
    path = ([0, 0, 0], [(0, 1), (1, 2)], [0, 0])
    assert G.contains(path, triangle)
    assert not G.contains(triangle, path)
    assert not G.contains(([0, 0], [(0, 1)], [1]), triangle)  # edge label differs


def test_embeddings_count_monomorphisms():
    rng = random.Random(3)
    for _ in range(30):
        g = random_connected(rng, 3, 6, 2, 1, 0.4)
        p = random_connected(rng, 2, 3, 2, 1, 0.3)
        code = G.dfs_code(p)
        pg = G.to_networkx(G.code_to_graph(code))
        gm = nx.algorithms.isomorphism.GraphMatcher(
            G.to_networkx(g),
            pg,
            node_match=lambda a, b: a["label"] == b["label"],
            edge_match=lambda a, b: a["label"] == b["label"],
        )
        expect = {
            tuple(inv[v] for v in range(len(pg)))
            for m in gm.subgraph_monomorphisms_iter()
            for inv in [{b: a for a, b in m.items()}]
        }
        got = G.embeddings(code, [g])
        assert len(got) == len(set(got))
        assert {m for _, m in got} == expect


def test_rightmost_extensions():
    g = THESIS_GRAPH
    ext = G.rightmost_extensions(THESIS_MIN[:2], [g])
    assert THESIS_MIN[2] in ext  # backward edge 2 -> 0
    assert all(e[1] == 0 or e[1] == 3 for e in ext)  # backward to the rightmost path or forward to vertex 3
    first = G.rightmost_extensions((), [g])
    assert len(first) > 0 and all(e[:2] == (0, 1) for e in first)
    assert sum(len(v) for v in first.values()) == 2 * len(g[1])


def _data(seed, n=5):
    rng = random.Random(seed)
    return [random_connected(rng, 2, 5, 2, 2, 0.35) for _ in range(n)]


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("min_support", [1, 2])
def test_frequent_patterns_against_brute_force(seed, min_support):
    graphs = _data(seed)
    per_graph = [connected_subgraph_codes(g, 3) for g in graphs]
    counts = {}
    for codes in per_graph:
        for c in codes:
            counts[c] = counts.get(c, 0) + 1
    expect = {c: s for c, s in counts.items() if s >= min_support}
    got = G.frequent_patterns(graphs, min_support, max_size=3)
    assert len(got) == len({c for c, _ in got})  # each pattern exactly once
    assert dict(got) == expect
    assert all(G.is_min_code(c) for c, _ in got)
    frac = G.frequent_patterns(graphs, min_support / len(graphs), max_size=3)
    assert frac == got


@pytest.mark.parametrize("seed", range(3))
def test_pruned_extensions_keep_every_canonical_child(seed):
    """gSpan's label bounds (used by the miners) skip only extensions whose code is not minimal."""
    rng = random.Random(200 + seed)
    graphs = [G._as_graph(random_connected(rng, 4, 7, 2, 2, 0.4)) for _ in range(4)]
    skipped = 0
    for code, _ in G.frequent_patterns(graphs, 1, max_size=4):
        embs = G._embeddings(code, graphs)
        info = G._code_info(code)
        full = G._extend(info, graphs, embs)
        pruned = G._extend(info, graphs, embs, G._bounds(code, info))
        assert all(pruned[e] == full[e] for e in pruned)
        assert {e for e in full if G.is_min_code(code + (e,))} <= set(pruned)
        skipped += len(full) - len(pruned)
    assert skipped > 0


def test_frequent_patterns_sizes():
    graphs = _data(4)
    got = G.frequent_patterns(graphs, 1, max_size=2)
    assert {len(c) for c, _ in got} <= {1, 2}
    assert dict(got) == {c: s for c, s in G.frequent_patterns(graphs, 1, max_size=3) if len(c) <= 2}


def _gain(code, graphs, y, w, d):
    h = np.array([d if G.contains(code, g) else -d for g in graphs], dtype=float)
    return float(np.sum(w * y * h))


@pytest.mark.parametrize("seed", range(4))
def test_best_patterns_against_exhaustive(seed):
    graphs = _data(10 + seed, n=6)
    rs = np.random.default_rng(seed)
    y = rs.choice([-1, 1], size=len(graphs))
    w = rs.random(len(graphs))
    w /= w.sum()
    patterns = [c for c, _ in G.frequent_patterns(graphs, 1, max_size=3)]
    gains = sorted(
        (max(_gain(c, graphs, y, w, 1), _gain(c, graphs, y, w, -1)) for c in patterns), reverse=True
    )
    for k in (1, 3):
        got = G.best_patterns(graphs, y, w, top_k=k, max_size=3)
        assert len(got) == min(k, len(patterns))
        np.testing.assert_allclose([g for _, _, g in got], gains[:k], atol=1e-12)
        for code, d, g in got:
            assert abs(_gain(code, graphs, y, w, d) - g) < 1e-12
    torch_got = G.best_patterns(graphs, torch.as_tensor(y), torch.as_tensor(w), max_size=3)
    assert abs(torch_got[0][2] - gains[0]) < 1e-12


def test_gain_bound_holds_for_all_superpatterns():
    rs = np.random.default_rng(5)
    graphs = _data(20, n=6)
    patterns = [c for c, _ in G.frequent_patterns(graphs, 1, max_size=3)]
    supports = {c: [n for n, g in enumerate(graphs) if G.contains(c, g)] for c in patterns}
    sub = {(t, q): G.contains(t, q) for t in patterns for q in patterns}
    for _ in range(20):
        y = rs.choice([-1, 1], size=len(graphs))
        w = rs.random(len(graphs))
        for t in patterns:
            mu = G.gain_bound(supports[t], y, w)
            gt = 2 * sum(w[n] * y[n] for n in supports[t]) - float(w @ y)
            assert abs(_gain(t, graphs, y, w, 1) - gt) < 1e-12
            for q in patterns:
                if sub[(t, q)]:
                    for d in (1, -1):
                        assert _gain(q, graphs, y, w, d) <= mu + 1e-12


def test_networkx_input():
    g = nx.Graph()
    g.add_node("a", label=1)
    g.add_node("b", label=0)
    g.add_edge("a", "b", label=2)
    assert G.dfs_code(g) == ((0, 1, 0, 2, 1),)
    g.add_node("c", label=0)
    g.add_edge("b", "c")  # missing edge label means 0
    assert G.contains(([0, 0], [(0, 1)], [0]), g)


def test_bad_input():
    with pytest.raises(ValueError, match="self loop"):
        G.dfs_code(([0, 0], [(0, 0)], [0]))
    with pytest.raises(ValueError, match="more than once"):
        G.contains(([0, 0], [(0, 1), (1, 0)], [0, 0]), THESIS_GRAPH)
    with pytest.raises(ValueError, match="node_labels must be non-negative"):
        G.dfs_code(([-1, 0], [(0, 1)], [0]))
    with pytest.raises(ValueError, match="edge_labels must be non-negative"):
        G.dfs_code(([0, 0], [(0, 1)], [-2]))
    with pytest.raises(ValueError, match="index nodes"):
        G.dfs_code(([0, 0], [(0, 2)], [0]))
    with pytest.raises(ValueError, match=r"shape \(E, 2\)"):
        G.dfs_code(([0, 0], [(0, 1, 1)], [0]))
    with pytest.raises(TypeError, match="integers"):
        G.dfs_code(([0.5, 0], [(0, 1)], [0]))
    with pytest.raises(ValueError, match="multigraph"):
        G.dfs_code(nx.MultiGraph([(0, 1)]))
    with pytest.raises(ValueError, match="undirected"):
        G.dfs_code(nx.DiGraph([(0, 1)]))
    with pytest.raises(ValueError, match="self loops"):
        G.dfs_code(nx.Graph([(0, 0)]))
    h = nx.Graph([(0, 1)])
    with pytest.raises(ValueError, match="no 'label'"):
        G.dfs_code(h)
    with pytest.raises(ValueError, match=r"graphs\[1\]"):
        G.frequent_patterns([THESIS_GRAPH, ([0], [(0, 0)], [0])], 1, max_size=2)
    with pytest.raises(ValueError, match="empty"):
        G.frequent_patterns([], 1, max_size=2)
    with pytest.raises(ValueError, match="max_size"):
        G.frequent_patterns([THESIS_GRAPH], 1, max_size=0)
    with pytest.raises(ValueError, match="min_support"):
        G.frequent_patterns([THESIS_GRAPH], 0, max_size=2)
    with pytest.raises(ValueError, match=r"\{-1, \+1\}"):
        G.best_patterns([THESIS_GRAPH, THESIS_GRAPH], [1, 0], [0.5, 0.5], max_size=2)
    with pytest.raises(ValueError, match="shape"):
        G.best_patterns([THESIS_GRAPH, THESIS_GRAPH], [1, -1, 1], [0.5, 0.5], max_size=2)
    with pytest.raises(ValueError, match="non-negative"):
        G.best_patterns([THESIS_GRAPH, THESIS_GRAPH], [1, -1], [0.5, -0.5], max_size=2)
    with pytest.raises(ValueError, match="top_k"):
        G.best_patterns([THESIS_GRAPH, THESIS_GRAPH], [1, -1], [0.5, 0.5], top_k=0, max_size=2)


@pytest.mark.parametrize("seed", [0, 1])
def test_frequent_patterns_unlabeled_symmetric(seed):
    rng = random.Random(100 + seed)
    graphs = [random_connected(rng, 3, 5, 1, 1, 0.6) for _ in range(4)]
    counts = {}
    for g in graphs:
        for c in connected_subgraph_codes(g, 3):
            counts[c] = counts.get(c, 0) + 1
    got = G.frequent_patterns(graphs, 1, max_size=3)
    assert len(got) == len({c for c, _ in got})
    assert dict(got) == counts


def test_occurrence_matrix():
    graphs = _data(30, n=6)
    patterns = [c for c, _ in G.frequent_patterns(graphs, 1, max_size=3)]
    m = G.occurrence_matrix(patterns, graphs)
    assert m.shape == (len(graphs), len(patterns))
    expect = np.array([[brute_contains(G.code_to_graph(c), g) for c in patterns] for g in graphs])
    np.testing.assert_array_equal(m, expect)
    np.testing.assert_array_equal(G.occurrence_matrix([G.code_to_graph(c) for c in patterns], graphs), expect)
    with pytest.raises(ValueError, match="at least one edge"):
        G.occurrence_matrix([([0], [], [])], graphs)


def test_best_patterns_min_support_and_ties():
    graphs = _data(40, n=6)
    y = np.array([1, -1, 1, -1, 1, -1])
    w = np.full(6, 1 / 6)
    frequent = dict(G.frequent_patterns(graphs, 3, max_size=3))
    got = G.best_patterns(graphs, y, w, top_k=50, max_size=3, min_support=3)
    assert {c for c, _, _ in got} == set(frequent)
    gains = [g for _, _, g in got]
    assert gains == sorted(gains, reverse=True) and all(g >= 0 for g in gains)


def test_is_min_code_rejects():
    assert not G.is_min_code(((0, 1, 1, 0, 0),))  # reversed first edge
    assert not G.is_min_code(((0, 1, 0, 0, 0), (0, 2, 0, 0, 1), (1, 3, 0, 1, 0)))
    with pytest.raises(ValueError, match="number its vertices"):
        G.is_min_code(((0, 2, 0, 0, 0),))
