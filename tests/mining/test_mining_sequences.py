"""structtorch.mining for itemsets and itemset sequences: the digest's §6.3 oracles and brute force."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from structtorch.mining import (
    best_patterns,
    children,
    contains,
    enumerate_patterns,
    frequent_patterns,
    gain,
    gain_bound,
    occurrence_matrix,
    parent,
    separating_weights,
)
from structtorch.mining import sequences as S

f = frozenset
a, b, c, d = 0, 1, 2, 3


def seq(*elems):
    return tuple(f(e) for e in elems)


def brute_contains(p, x) -> bool:
    return any(all(p[k] <= x[i] for k, i in enumerate(idx)) for idx in itertools.combinations(range(len(x)), len(p)))


def itemsets(alphabet, max_items):
    return [f(s) for k in range(1, max_items + 1) for s in itertools.combinations(alphabet, k)]


def all_sequences(alphabet, max_items):
    """All sequences of non-empty itemsets with at most max_items items in total."""
    sets = itemsets(alphabet, max_items)
    out, frontier = [], [()]
    while frontier:
        nxt = []
        for s in frontier:
            used = sum(len(e) for e in s)
            for e in sets:
                if used + len(e) <= max_items:
                    nxt.append(s + (e,))
        out.extend(nxt)
        frontier = nxt
    return out


def random_sequences(rng, n, alphabet, max_len, max_set):
    return [tuple(f(rng.choice(alphabet, size=rng.integers(1, max_set + 1), replace=False).tolist())
                  for _ in range(rng.integers(0, max_len + 1))) for _ in range(n)]


def random_sets(rng, n, alphabet, max_set):
    return [f(rng.choice(alphabet, size=rng.integers(0, max_set + 1), replace=False).tolist()) for _ in range(n)]


# ---- §6.3 oracles ---------------------------------------------------------------------------------


def test_set_total_order_and_children():
    order = [f(), f({1}), f({1, 2}), f({1, 2, 3}), f({1, 3}), f({2}), f({2, 3}), f({3})]
    walk = list(enumerate_patterns(f(), [1, 2, 3], max_length=1, max_items=3))
    assert walk == order  # reverse-search preorder is the total order of Example 1
    assert parent(f({1, 2, 3})) == f({1, 2})
    assert children(f(), [1, 2, 3]) == [f({1}), f({2}), f({3})]
    assert children(f({1}), [1, 2, 3]) == [f({1, 2}), f({1, 3})]
    assert children(f({2}), [1, 2, 3]) == [f({2, 3})]
    assert children(f({3}), [1, 2, 3]) == [] and children(f({1, 2, 3}), [1, 2, 3]) == []


def test_frequent_extension_erratum_case():
    X = [f({1}), f({1, 2}), f({1, 2, 3}), f({3})]
    got = dict(frequent_patterns(X, 2))
    assert got == {f({1}): 3, f({2}): 2, f({3}): 2, f({1, 2}): 2}
    kids = [t for t in children(f({1}), [1, 2, 3]) if sum(contains(t, x) for x in X) >= 2]
    assert kids == [f({1, 2})]
    assert dict(frequent_patterns(X, 0.5)) == got


def test_feature_example():
    s = f({1, 3, 5})
    pats = [f({1}), f({2}), f({3}), f({1, 3}), f({1, 2, 3})]
    assert [int(contains(t, s)) for t in pats] == [1, 0, 1, 1, 0]


def test_sequence_containment_list_figs_25_26():
    seqs = {
        "s": seq({a, b}, {c}, {a, b}), "t": seq({b}, {a}), "u": seq({c}, {c}), "v": seq({a}, {a}),
        "w": seq({a, b}, {a, c}, {c}, {a, b, c}), "y": seq({d}, {a, d}, {a, c}),
    }
    got = {(p, q) for p in seqs for q in seqs if p != q and contains(seqs[p], seqs[q])}
    assert got == {("t", "s"), ("t", "w"), ("s", "w"), ("u", "w"), ("v", "s"), ("v", "w"), ("v", "y")}


def test_reduction_chains_table_6():
    def chain(s):
        out = [s]
        while s:
            s = parent(s)
            out.append(s)
        return out

    E = f()
    assert chain(seq({a, b}, {c}, {a, b})) == [
        seq({a, b}, {c}, {a, b}), seq({a, b}, {c}, {a}), (f({a, b}), f({c}), E), seq({a, b}, {c}),
        (f({a, b}), E), seq({a, b}), seq({a}), (E,), ()]
    assert chain(seq({a, b}, {a, c}, {c}, {a, b, c})) == [
        seq({a, b}, {a, c}, {c}, {a, b, c}), seq({a, b}, {a, c}, {c}, {a, b}), seq({a, b}, {a, c}, {c}, {a}),
        (f({a, b}), f({a, c}), f({c}), E), seq({a, b}, {a, c}, {c}), (f({a, b}), f({a, c}), E),
        seq({a, b}, {a, c}), seq({a, b}, {a}), (f({a, b}), E), seq({a, b}), seq({a}), (E,), ()]
    assert chain(seq({d}, {a, d}, {a, c})) == [
        seq({d}, {a, d}, {a, c}), seq({d}, {a, d}, {a}), (f({d}), f({a, d}), E), seq({d}, {a, d}),
        seq({d}, {a}), (f({d}), E), seq({d}), (E,), ()]
    for s in chain(seq({a, b}, {a, c}, {c}, {a, b, c}))[:-1]:
        assert s in children(parent(s), 4)  # round trip s in f^-1(f(s))


def test_reverse_search_enumerates_each_sequence_once():
    max_len, max_items, A = 3, 3, 3
    walk = list(enumerate_patterns((), A, max_length=max_len, max_items=max_items))
    assert len(walk) == len(set(walk))
    subsets = [f(s) for k in range(A + 1) for s in itertools.combinations(range(A), k)]
    expected = {s for n in range(max_len + 1) for s in itertools.product(subsets, repeat=n)
                if sum(len(e) for e in s) <= max_items}
    assert set(walk) == expected
    for s in walk[1:]:
        assert s in children(parent(s), A)


# ---- containment ----------------------------------------------------------------------------------


def test_contains_matches_brute_force():
    rng = np.random.default_rng(0)
    data = random_sequences(rng, 60, np.arange(4), 5, 3)
    pats = all_sequences(range(4), 3)[::3] + [()]
    for p in pats:
        for x in data:
            assert contains(p, x) == brute_contains(p, x)
    assert contains((), ()) and not contains((f(),), ())


# ---- miners against exhaustive enumeration --------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_frequent_sequences_exhaustive(seed):
    rng = np.random.default_rng(seed)
    data = random_sequences(rng, 30, np.arange(4), 5, 3)
    for sigma, max_size in [(1, 3), (3, 3), (0.2, 2)]:
        got = frequent_patterns(data, sigma, max_size=max_size)
        pats = [p for p, _ in got]
        assert len(pats) == len(set(pats))
        count = sigma if isinstance(sigma, int) else int(np.ceil(sigma * len(data)))
        expected = {}
        for p in all_sequences(range(4), max_size):
            s = sum(brute_contains(p, x) for x in data)
            if s >= count:
                expected[p] = s
        assert dict(got) == expected


@pytest.mark.parametrize("seed", [0, 1])
def test_frequent_sets_exhaustive(seed):
    rng = np.random.default_rng(seed)
    data = random_sets(rng, 40, np.arange(6), 4)
    got = frequent_patterns(data, 3, max_size=3)
    expected = {}
    for p in itemsets(range(6), 3):
        s = sum(p <= x for x in data)
        if s >= 3:
            expected[p] = s
    assert dict(got) == expected and len(got) == len(expected)


def test_gain_bound_holds_for_supersets():
    rng = np.random.default_rng(3)
    data = random_sequences(rng, 25, np.arange(3), 4, 2)
    pats = [()] + all_sequences(range(3), 3)
    supp = {p: np.array([brute_contains(p, x) for x in data]) for p in pats}
    for _ in range(20):
        lam = rng.random(len(data))
        lam /= lam.sum()
        y = rng.choice([-1, 1], size=len(data))
        for t in pats:
            mu = gain_bound(supp[t], y, lam)
            g = gain(supp[t], y, lam)
            assert np.isclose(g, sum(lam[n] * y[n] * (1 if supp[t][n] else -1) for n in range(len(data))))
            assert np.isclose(gain(supp[t], y, lam, -1), -g)
            for q in pats:
                if contains(t, q):
                    assert gain(supp[q], y, lam, 1) <= mu + 1e-12
                    assert gain(supp[q], y, lam, -1) <= mu + 1e-12


@pytest.mark.parametrize("seed", range(4))
def test_best_patterns_exhaustive_sequences(seed):
    rng = np.random.default_rng(seed)
    data = random_sequences(rng, 30, np.arange(4), 5, 3)
    y = rng.choice([-1, 1], size=len(data))
    lam = rng.random(len(data))
    gains = {}
    for p in all_sequences(range(4), 3):
        s = np.array([brute_contains(p, x) for x in data])
        if s.any():
            gains[p] = abs(gain(s, y, lam))
    ranked = sorted(gains.values(), reverse=True)
    got = best_patterns(data, y, lam, top_k=5, max_size=3)
    assert np.allclose([g for _, _, g in got], ranked[:5])
    for p, dd, g in got:
        s = np.array([brute_contains(p, x) for x in data])
        assert np.isclose(gain(s, y, lam, dd), g)
    (p1, _, g1), = best_patterns(data, torch.tensor(y), torch.tensor(lam), max_size=3)
    assert np.isclose(g1, ranked[0])


@pytest.mark.parametrize("seed", range(3))
def test_best_patterns_exhaustive_sets(seed):
    rng = np.random.default_rng(seed)
    data = random_sets(rng, 40, np.arange(6), 4)
    y = rng.choice([-1, 1], size=len(data))
    lam = rng.random(len(data))
    gains = []
    for p in itemsets(range(6), 3):
        s = np.array([p <= x for x in data])
        if s.sum() >= 2:
            gains.append(abs(gain(s, y, lam)))
    got = best_patterns(data, y, lam, top_k=3, max_size=3, min_support=2)
    assert np.allclose([g for _, _, g in got], sorted(gains, reverse=True)[:3])


# ---- sequences of single items (the level-wise pseudo-projection path) ----------------------------


def item_sequences(rng, n, alphabet, max_len):
    """Sequences of single items from ``alphabet`` (ints), about one itemset in ten empty."""
    return [tuple(f() if rng.random() < 0.1 else f({int(rng.choice(alphabet))})
                  for _ in range(rng.integers(0, max_len + 1))) for _ in range(n)]


@pytest.mark.parametrize("seed", range(3))
def test_frequent_item_sequences_exhaustive(seed):
    rng = np.random.default_rng(seed)
    alphabet = [2, 5, 11]
    data = item_sequences(rng, 30, alphabet, 6)
    for sigma, max_size in [(1, None), (3, None), (0.2, 2), (2, 3)]:
        got = frequent_patterns(data, sigma, max_size=max_size)
        count = sigma if isinstance(sigma, int) else int(np.ceil(sigma * len(data)))
        expected = {}
        for k in range(1, (max_size or 6) + 1):
            for p in itertools.product(alphabet, repeat=k):
                p = tuple(f({i}) for i in p)
                c = sum(brute_contains(p, x) for x in data)
                if c >= count:
                    expected[p] = c
        assert len(got) == len(expected) and dict(got) == expected


@pytest.mark.parametrize("seed", range(4))
def test_frequent_item_sequences_match_reverse_search(seed):
    """The level-wise path returns what the reverse search over position masks returns, in its order."""
    rng = np.random.default_rng(seed)
    small = item_sequences(rng, 60, rng.choice(100, size=5, replace=False), 8)
    large = item_sequences(rng, 60, rng.choice(10**12, size=300, replace=False), 8)  # sparse counts
    for data in (small, large):
        for sigma, max_size in [(1, None), (4, None), (2, 1), (3, 3)]:
            got = frequent_patterns(data, sigma, max_size=max_size)
            limit = S._check_max_size(max_size)
            assert got == S._frequent_search(S._encode(data), sigma, limit)


@pytest.mark.parametrize("chunk", [7, 300])
def test_frequent_item_sequences_in_batches(monkeypatch, chunk):
    """Levels too large for one scan are split into batches and counted run by run: same result."""
    rng = np.random.default_rng(5)
    small = item_sequences(rng, 80, [1, 2, 3, 4], 9)
    large = item_sequences(rng, 80, np.arange(0, 10**6, 997), 9)  # sparse counts
    cases = [(small, 1, None), (small, 6, None), (small, 3, 2), (large, 1, 3), (large, 2, None)]
    expected = [frequent_patterns(data, sigma, max_size=size) for data, sigma, size in cases]
    monkeypatch.setattr(S, "_CHUNK", chunk)
    assert [frequent_patterns(data, sigma, max_size=size) for data, sigma, size in cases] == expected
    assert frequent_patterns(small, 81) == []


def test_frequent_item_sequences_batch_of_patterns_without_suffix(monkeypatch):
    """A batch split whose first patterns end every sequence holding them (no pair to extend: item 0
    comes last, and its key comes first) is dropped, not scanned as an empty run."""
    data = [seq({1}, {2}, {3}, {4}, {5}, {0})] * 3
    expected = S._frequent_search(S._encode(data), 2, S._check_max_size(None))
    monkeypatch.setattr(S, "_CHUNK", 7)
    assert frequent_patterns(data, 2) == expected and len(expected) == 2**6 - 1


def test_frequent_item_sequences_one_sequence_with_repeats():
    """One instance, repeated items, an empty itemset: every distinct subsequence once, support 1."""
    data = [seq({a}, {b}, set(), {a}, {a})]
    got = frequent_patterns(data, 1)
    expected = {seq(*map(set, p)) for k in range(1, 5) for p in itertools.combinations([{a}, {b}, {a}, {a}], k)}
    assert len(got) == len(expected) and {p for p, _ in got} == expected and {n for _, n in got} == {1}
    assert got == S._frequent_search(S._encode(data), 1, S._check_max_size(None))
    assert frequent_patterns(data, 2) == []


def test_frequent_keys_dense_and_sparse():
    keys = np.random.default_rng(0).integers(0, 50, 300)
    values, counts = np.unique(keys, return_counts=True)
    for size in (50, 10**6):  # a bincount, then a sort
        freq, count, rank = S._frequent_keys(keys.astype(np.int32), size, 8)
        assert freq.tolist() == values[counts >= 8].tolist() and count.tolist() == counts[counts >= 8].tolist()
        hit = rank >= 0
        assert hit.tolist() == np.isin(keys, freq).tolist() and (freq[rank[hit]] == keys[hit]).all()


@pytest.mark.parametrize("seed", range(3))
def test_frequent_item_sequences_match_prefixspan(seed):
    prefixspan = pytest.importorskip("prefixspan")
    rng = np.random.default_rng(seed)
    db = [rng.integers(0, 8, size=rng.integers(1, 12)).tolist() for _ in range(80)]
    data = [tuple(f({i}) for i in x) for x in db]
    for sigma in (2, 5, 12):
        ours = {tuple(min(e) for e in p): c for p, c in frequent_patterns(data, sigma)}
        peer = {tuple(p): c for c, p in prefixspan.PrefixSpan(db).frequent(sigma)}
        assert ours == peer


def test_plain_and_checked_inputs_agree():
    """Lists, numpy ints and tuple subclasses (validated item by item) mine like tuples of frozensets of int."""
    rng = np.random.default_rng(4)
    for data in (item_sequences(rng, 20, [0, 1, 2], 5), random_sequences(rng, 20, np.arange(4), 5, 2)):
        expected = frequent_patterns(data, 2)
        as_lists = [[set(e) for e in x] for x in data]
        numpy_ints = [tuple(f(np.int64(i) for i in e) for e in x) for x in data]

        class Seq(tuple):
            pass

        for variant in (as_lists, numpy_ints, [Seq(x) for x in data], tuple(data)):
            assert frequent_patterns(variant, 2) == expected
            assert occurrence_matrix([p for p, _ in expected], variant).all(axis=0).tolist() == \
                occurrence_matrix([p for p, _ in expected], data).all(axis=0).tolist()
    with pytest.raises(TypeError, match=r"data\[0\]\[0\]"):
        frequent_patterns([seq({True})], 1)
    with pytest.raises(ValueError, match=r"data\[1\]\[0\]"):
        frequent_patterns([seq({1}), seq({2**63})], 1)
    with pytest.raises(TypeError, match=r"data\[0\]\[0\]"):
        frequent_patterns([seq({1.0})], 1)
    assert frequent_patterns([seq({2**63 - 1}, {2**63 - 1})], 1)[-1] == (seq({2**63 - 1}, {2**63 - 1}), 1)
    assert frequent_patterns([(), (f(),)], 1) == []


# ---- bad input ------------------------------------------------------------------------------------


def test_bad_inputs():
    X = [seq({1}, {2}), seq({2})]
    with pytest.raises(ValueError, match="data"):
        frequent_patterns([], 1)
    with pytest.raises(ValueError, match=r"data\[1\]"):
        frequent_patterns([seq({1}), seq({-2})], 1)
    with pytest.raises(TypeError, match=r"data\[1\]"):
        frequent_patterns([seq({1}), f({1})], 1)
    with pytest.raises(TypeError, match="data"):
        frequent_patterns([[1, 2]], 1)
    with pytest.raises(ValueError, match="min_support"):
        frequent_patterns(X, 0)
    with pytest.raises(ValueError, match="min_support"):
        frequent_patterns(X, 1.5)
    with pytest.raises(ValueError, match="max_size"):
        frequent_patterns(X, 1, max_size=0)
    with pytest.raises(ValueError, match="y"):
        best_patterns(X, [1, 0], [1.0, 1.0])
    with pytest.raises(ValueError, match="y"):
        best_patterns(X, [1], [1.0, 1.0])
    with pytest.raises(ValueError, match="weights"):
        best_patterns(X, [1, -1], [1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="weights"):
        best_patterns(X, [1, -1], [1.0, -1.0])
    with pytest.raises(ValueError, match="top_k"):
        best_patterns(X, [1, -1], [1.0, 1.0], top_k=0)
    with pytest.raises(ValueError, match="pattern"):
        contains(seq({-1}), seq({1}))
    with pytest.raises(TypeError, match="instance"):
        contains(f({1}), seq({1}))
    with pytest.raises(ValueError, match="pattern"):
        parent(())


def test_unbounded_size_sets():
    rng = np.random.default_rng(5)
    data = random_sets(rng, 30, np.arange(5), 5)
    expected = {}
    for p in itemsets(range(5), 5):
        s = sum(p <= x for x in data)
        if s >= 2:
            expected[p] = s
    assert dict(frequent_patterns(data, 2)) == expected
    (_, _, g), = best_patterns(data, np.ones(30), np.ones(30))
    supports = [sum(p <= x for x in data) for p in itemsets(range(5), 5)]
    assert g == max(abs(2 * k - 30) for k in supports if k >= 1)


def test_import_without_graphs_and_graph_dispatch():
    import subprocess
    import sys

    code = "import sys, structtorch.mining; assert 'structtorch.mining.graphs' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
    pytest.importorskip("structtorch.mining.graphs")
    g = (np.array([0, 0, 1]), np.array([[0, 1], [1, 2]]), np.array([0, 0]))
    assert contains(([0, 0], [[0, 1]], [0]), g)
    assert not contains(([1, 1], [[0, 1]], [0]), g)
    pats = frequent_patterns([g, g], 1, max_size=1)
    assert len(pats) == 2 and all(contains(p, g) for p, _ in pats)


def test_occurrence_matrix_matches_contains():
    rng = np.random.default_rng(7)
    data = random_sequences(rng, 40, np.arange(5), 5, 3)
    pats = all_sequences(range(5), 3)[::7] + [(), (f(),), seq({9})]
    X = occurrence_matrix(pats, data)
    assert X.shape == (40, len(pats))
    assert X.tolist() == [[contains(p, x) for p in pats] for x in data]
    sets = random_sets(rng, 20, np.arange(5), 3)
    spats = itemsets(range(5), 2) + [f()]
    assert occurrence_matrix(spats, sets).tolist() == [[p <= x for p in spats] for x in sets]
    with pytest.raises(TypeError, match=r"patterns\[0\]"):
        occurrence_matrix([seq({1})], sets)


_itemset = st.frozensets(st.integers(0, 3), max_size=3)
_sequence = st.lists(_itemset, max_size=5).map(tuple)


@settings(max_examples=200, deadline=None)
@given(_sequence, _sequence)
def test_contains_property(p, x):
    assert contains(p, x) == brute_contains(p, x)
    assert occurrence_matrix([p], [x])[0, 0] == brute_contains(p, x)
    if p:
        assert contains(parent(p), p) and p in children(parent(p), 4)


@pytest.mark.parametrize("kind", ["sets", "sequences"])
def test_capacity_theorem_1(kind):
    for seed in range(5):
        rng = np.random.default_rng(seed)
        if kind == "sets":
            data = random_sets(rng, 25, np.arange(5), 4)
        else:
            data = random_sequences(rng, 25, np.arange(3), 3, 2)
        label = {}
        y = np.array([label.setdefault(x, int(rng.choice([-1, 1]))) for x in data])
        beta = separating_weights(data, y)
        pats = [p for p, _ in beta]
        assert len(pats) == len(set(data))
        w = np.array([b for _, b in beta])
        F = occurrence_matrix(pats, data).astype(float) @ w
        assert np.allclose(F, y)
        N = len(data)
        assert (y * F / np.abs(w).sum() >= 1 / N**3).all()
    with pytest.raises(ValueError, match="consistent"):
        separating_weights([f({1}), f({1})], [1, -1])
