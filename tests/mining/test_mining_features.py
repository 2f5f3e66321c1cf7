"""SubstructureFeatures against brute force, and mined features feeding the structured models unchanged."""

from __future__ import annotations

import functools
import itertools

import networkx as nx
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as hs

import structtorch as st
from structtorch.mining import LPBoost, SubstructureFeatures, best_patterns, contains, frequent_patterns
from structtorch.mining import graphs as G

f = frozenset


def brute_contains(p, x) -> bool:
    return any(all(p[k] <= x[i] for k, i in enumerate(idx)) for idx in itertools.combinations(range(len(x)), len(p)))


itemset = hs.frozensets(hs.integers(0, 3), min_size=1, max_size=2)
sequence = hs.lists(itemset, min_size=0, max_size=5).map(tuple)


@settings(max_examples=40, deadline=None)
@given(hs.lists(sequence, min_size=1, max_size=4), hs.lists(hs.lists(itemset, min_size=1, max_size=2).map(tuple),
                                                              min_size=1, max_size=5), hs.integers(1, 4))
def test_windows_against_brute_force(batch, patterns, width):
    feats = SubstructureFeatures(patterns)
    out = feats.transform_windows(batch, width)
    T = max(len(s) for s in batch)
    assert out.shape == (len(batch), T, len(feats)) and out.dtype == torch.float32
    left, right = (width - 1) // 2, width // 2
    for b, s in enumerate(batch):
        for j in range(T):
            for k, p in enumerate(feats.patterns):
                want = j < len(s) and brute_contains(p, s[max(0, j - left):j + right + 1])
                assert out[b, j, k].item() == float(want)


def test_set_patterns_on_windows_are_bags():
    batch = [(f({1}), f({2}), f({3}), f({1, 3}))]
    feats = SubstructureFeatures([f({1}), f({1, 2}), f({1, 3})])
    out = feats.transform_windows(batch, 3)
    # window of j: union of positions j-1..j+1
    assert out[0].tolist() == [[1, 1, 0], [1, 1, 1], [1, 1, 1], [1, 0, 1]]


def test_transform_dense_sparse_and_rows():
    rng = np.random.default_rng(0)
    data = [tuple(f(rng.choice(4, size=2, replace=False).tolist()) for _ in range(3)) for _ in range(12)]
    rows = frequent_patterns(data, 0.25, max_size=2)
    feats = SubstructureFeatures(rows)  # (pattern, support) rows are accepted
    assert feats.kind == "sequences" and len(feats) == len(rows)
    X = feats.transform(data)
    assert X.shape == (12, len(rows))
    assert X.sum(0).tolist() == [float(s) for _, s in rows]  # column sums are the supports
    assert torch.equal(feats.transform(data, sparse=True).to_dense(), X)
    assert feats.transform(data, dtype=torch.bool).dtype == torch.bool
    for n, x in enumerate(data):
        assert X[n].tolist() == [float(contains(t, x)) for t in feats.patterns]
    assert len(SubstructureFeatures(rows + rows)) == len(rows)  # duplicates dropped


def brute_neighbourhood(graph, v, radius):
    labels, edges, elabels = graph
    g = nx.Graph()
    g.add_nodes_from((u, {"label": lab}) for u, lab in enumerate(labels))
    g.add_edges_from((a, b, {"label": lab}) for (a, b), lab in zip(edges, elabels, strict=True))
    return nx.ego_graph(g, v, radius=radius)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("radius", [0, 1, 2])
def test_neighbourhoods_against_brute_force(seed, radius):
    rng = np.random.default_rng(seed)
    V = 9
    edges = [(u, w) for u in range(V) for w in range(u + 1, V) if rng.random() < 0.3]
    graph = (rng.integers(0, 2, V).tolist(), edges, rng.integers(0, 2, len(edges)).tolist())
    pats = [code for code, _ in G.frequent_patterns([graph], 1, max_size=2)]
    feats = SubstructureFeatures(pats)
    out = feats.transform_neighbourhoods(graph, radius)
    assert out.shape == (V, len(pats))
    for v in range(V):
        ego = brute_neighbourhood(graph, v, radius)
        for k, code in enumerate(pats):
            assert out[v, k].item() == float(G.contains(code, ego)), (v, k)


def test_to_ids_round_trip():
    rng = np.random.default_rng(1)
    X = torch.from_numpy(rng.random((3, 5, 7)) < 0.3).float()
    ids = SubstructureFeatures.to_ids(X)
    assert ids.shape[:2] == (3, 5) and ids.dtype == torch.int64
    back = torch.zeros_like(X)
    for b, t in itertools.product(range(3), range(5)):
        for i in ids[b, t].tolist():
            if i >= 0:
                back[b, t, i] = 1
    assert torch.equal(back, X)
    assert (SubstructureFeatures.to_ids(X, offset=10)[ids >= 0] == ids[ids >= 0] + 10).all()


def test_from_model_multiclass():
    data = [(f({0}), f({1})), (f({1}), f({0})), (f({2}),)] * 4
    y = [0, 1, 2] * 4
    model = LPBoost(functools.partial(best_patterns, max_size=2), nu=0.3).fit(data, y)
    feats = SubstructureFeatures.from_model(model)
    want = {t for group in model.patterns_ for t, _ in group}
    assert set(feats.patterns) == want and len(feats) == len(want)


def test_bad_input():
    with pytest.raises(ValueError, match="non-empty"):
        SubstructureFeatures([])
    with pytest.raises(TypeError, match="one kind"):
        SubstructureFeatures([f({1}), (f({1}),)])
    feats = SubstructureFeatures([(f({1}),)])
    with pytest.raises(ValueError, match="width must be"):
        feats.transform_windows([(f({1}),)], 0)
    with pytest.raises(TypeError, match="graph patterns"):
        feats.transform_neighbourhoods(([0], [], []), 1)
    with pytest.raises(ValueError, match="non-negative"):
        feats.transform_windows([(f({-1}),)], 1)
    gfeats = SubstructureFeatures([((0, 1, 0, 0, 0),)])
    with pytest.raises(TypeError, match="transform_neighbourhoods"):
        gfeats.transform_windows([(f({1}),)], 1)
    with pytest.raises(ValueError, match="radius"):
        gfeats.transform_neighbourhoods(([0, 0], [(0, 1)], [0]), -1)
    with pytest.raises(ValueError, match="simple graph"):
        gfeats.transform_neighbourhoods(([0, 0], [(0, 1), (1, 0)], [0, 0]), 1)
    with pytest.raises(TypeError, match="not fitted|patterns_"):
        SubstructureFeatures.from_model(object())


# ---- mined features feed the structured models unchanged -----------------------------------------


def _window_batch():
    rng = np.random.default_rng(5)
    batch = [tuple(f(rng.choice(6, size=2, replace=False).tolist()) for _ in range(L)) for L in (7, 5, 6)]
    feats = SubstructureFeatures(frequent_patterns(batch, 2, max_size=2))
    return batch, feats, feats.transform_windows(batch, 3)


def test_windows_feed_dense_and_sparse_chain_potentials_identically():
    batch, feats, X = _window_batch()
    lengths = torch.tensor([len(s) for s in batch])
    dense = st.LinearChainPotentials(len(feats), 3)
    sparse = st.SparseFeaturePotentials(len(feats), 3)
    with torch.no_grad():
        sparse.emission.weight.copy_(dense.emission.weight.T)
        sparse.bias.copy_(dense.emission.bias)
        sparse.transitions.copy_(dense.transitions)
    u1, t1 = dense(X)
    u2, t2 = sparse(SubstructureFeatures.to_ids(X))
    assert torch.allclose(u1, u2, atol=1e-6) and torch.equal(t1, t2)
    tags = torch.zeros(3, 7, dtype=torch.long)
    loss = st.StructuredHingeLoss()(u1, t1, tags, lengths=lengths)
    loss.backward()
    assert dense.emission.weight.grad is not None and torch.isfinite(loss)


def test_windows_feed_hsm_contents():
    batch, feats, X = _window_batch()
    allowed = torch.ones(2, 2, dtype=torch.bool)
    model = st.HiddenSemiMarkovSVM(allowed, 3, content_of=[0, 1], content_range=(0.0, 1.0), monotone=None)
    with torch.no_grad():
        model.content_plif.raw.copy_(torch.linspace(-1.0, 1.0, model.content_plif.raw.numel()).reshape(2, -1))
    lengths = torch.tensor([len(s) for s in batch])
    score, *_ = st.semimarkov_viterbi(**model(None, X[..., :2].double(), lengths))
    blank, *_ = st.semimarkov_viterbi(**model(None, torch.zeros_like(X[..., :2]).double(), lengths))
    assert score.shape == (3,) and torch.isfinite(score).all()
    assert not torch.allclose(score, blank)  # the mined window features change the segment scores


def test_neighbourhoods_feed_lp_unaries():
    rng = np.random.default_rng(2)
    V = 8
    edges = [(u, u + 1) for u in range(V - 1)] + [(0, 2), (3, 5)]
    graph = (rng.integers(0, 2, V).tolist(), edges, [0] * len(edges))
    feats = SubstructureFeatures([c for c, _ in G.frequent_patterns([graph], 1, max_size=2)])
    X = feats.transform_neighbourhoods(graph, 1, dtype=torch.float64)
    unary = X @ torch.from_numpy(rng.normal(size=(len(feats), 2)))
    pairwise = torch.eye(2, dtype=torch.float64).expand(len(edges), 2, 2) * 0.3  # attractive Potts
    res = st.lp.map_lp(unary, pairwise, torch.tensor(edges))
    E = torch.tensor(edges)
    best = max(float(unary[torch.arange(V), torch.tensor(y)].sum() + 0.3 * (torch.tensor(y)[E[:, 0]] ==
                                                                           torch.tensor(y)[E[:, 1]]).sum())
               for y in itertools.product(range(2), repeat=V))
    assert float(res.score.reshape(())) == pytest.approx(best, abs=1e-6)  # submodular: the LP is exact


@settings(max_examples=30, deadline=None)
@given(hs.lists(hs.lists(itemset, min_size=1, max_size=3), min_size=1, max_size=4), hs.data())
def test_list_and_set_typed_patterns_equal_their_frozen_forms(patterns, data):
    """Issue 21 item 6: list-typed sequences and set-typed itemsets are documented pattern kinds
    (``contains`` takes them) but were refused as unhashable while de-duplicating."""
    seqs = [[set(e) for e in p] for p in patterns]  # lists of sets, duplicates possible
    frozen = [tuple(f(e) for e in p) for p in patterns]
    feats = SubstructureFeatures(seqs)
    assert feats.patterns == list(dict.fromkeys(frozen))
    batch = data.draw(hs.lists(sequence, min_size=1, max_size=3))
    torch.testing.assert_close(feats.transform(batch), SubstructureFeatures(frozen).transform(batch))
    for k, p in enumerate(feats.patterns):
        assert [contains(seqs[frozen.index(p)], x) for x in batch] == feats.transform(batch)[:, k].bool().tolist()
    sets = [set(p[0]) for p in patterns]
    assert SubstructureFeatures(sets).patterns == list(dict.fromkeys(f(s) for s in sets))


def test_graph_patterns_of_every_form_deduplicate():
    tri = ([0, 1, 2], [(0, 1), (1, 2)], [0, 0])
    arrays = tuple(np.asarray(x) for x in tri)
    feats = SubstructureFeatures([tri, arrays, ([0, 1], [(0, 1)], [1])])
    assert len(feats) == 2 and feats.patterns[0] is tri


def test_items_beyond_int64_are_refused_clearly():
    """Issue 21 item 12: an item id beyond int64 raised a bare OverflowError."""
    big = 2**70
    for call in (lambda: frequent_patterns([f({big}), f({1})], 1),
                 lambda: frequent_patterns([(f({big}),), (f({1}),)], 1),
                 lambda: best_patterns([f({big}), f({1})], [1, -1], 1),
                 lambda: SubstructureFeatures([f({big})]),
                 lambda: SubstructureFeatures([f({1})]).transform([f({big})])):
        with pytest.raises(ValueError, match=r"non-negative int64 item ids \(in \[0, 2\*\*63 - 1\]\), got item 1180591620717411303424"):
            call()
    assert frequent_patterns([f({2**63 - 1}), f({2**63 - 1})], 2) == [(f({2**63 - 1}), 2)]
    with pytest.raises(ValueError, match=r"node_labels must hold int64 integers"):
        G.frequent_patterns([([big, 1], [(0, 1)], [0])], 1)
