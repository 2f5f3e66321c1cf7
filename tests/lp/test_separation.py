"""The connectivity separator (issue 26): its shortcuts against the plain full-network max-flow
and against enumeration of all vertex separators.

The separator computes a flow only when i and j share a component of the support (positive
capacity, i, j, blocked vertices), on that component's network, and labels the components of a
support met twice once for all pairs. Every such shortcut must give exactly the cuts of one
max-flow per pair on the whole split network (the code before issue 26, kept here as the
reference), so that the LP sees the same rows in the same order. The round runs compiled
(``csrc/separation.cpp``, the default on CPU) or in Python (``use_backend("torch")``): both are
checked against the reference and against each other, bit for bit.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from brute import lp_graphs
from hypothesis import given, settings
from hypothesis import strategies as st_
from scipy.sparse.csgraph import breadth_first_order, connected_components, maximum_flow

from structtorch import lp
from structtorch._backend import chain_ops, use_backend
from structtorch.lp import separation
from structtorch.lp.graph import adjacency
from structtorch.lp.separation import _INF, Separator, _Plane

SCALE = 1e6
ORACLES = ["python"] + (["compiled"] if chain_ops() is not None else [])


@pytest.fixture(params=ORACLES)
def oracle(request):
    """Each test of whole rounds runs on both oracles."""
    with use_backend("compiled" if request.param == "compiled" else "torch"):
        yield request.param


@pytest.fixture
def python_oracle():
    """Tests of the Python round's own machinery (cache, flows) run it."""
    with use_backend("torch"):
        yield


def reference_min_separator(adj, y, i, j, blocked, near_source):
    """One max-flow on the whole split network (k_in -> k_out: y_k; s_out -> t_in: infinite)."""
    V = len(y)
    src, dst = adj.nonzero()
    caps = np.minimum(np.round(y * SCALE), _INF // (V + 1)).astype(np.int64)
    caps[[i, j]] = _INF
    caps[np.asarray(blocked, dtype=np.int64)] = _INF
    rows = np.concatenate([np.arange(V), V + src])
    cols = np.concatenate([V + np.arange(V), dst])
    data = np.concatenate([caps, np.full(len(src), _INF)]).astype(np.int32)
    net = sp.csr_array((data, (rows, cols)), shape=(2 * V, 2 * V))
    net.sort_indices()
    result = maximum_flow(net, V + i, j)
    if result.flow_value >= _INF:
        return None
    residual = (net - result.flow).tocsr()
    residual.data = (residual.data > 0).astype(np.int8)
    residual.eliminate_zeros()
    reached = np.zeros(2 * V, dtype=bool)
    if near_source:
        reached[breadth_first_order(residual, V + i, return_predecessors=False)] = True
        cut = np.nonzero(reached[:V] & ~reached[V:])[0]
    else:
        reached[breadth_first_order(residual.T.tocsr(), j, return_predecessors=False)] = True
        cut = np.nonzero(~reached[:V] & reached[V:])[0]
    return float(y[cut].sum()), cut


def reference_violated(adj, y, tol, limit, nested, offset):
    """The separation loop before issue 26: candidates, pairs in order, nested cuts, limit."""
    V = len(y)
    ones = y >= 1 - tol
    _, comp = connected_components(adj[ones][:, ones], directed=False)
    label = np.full(V, -1)
    label[ones] = comp
    mass = np.bincount(comp, minlength=comp.max() + 1 if len(comp) else 0).astype(float)
    reps = {}
    for k in np.nonzero(ones)[0]:
        reps.setdefault(label[k], k)
    candidates = [(mass[c], k) for c, k in reps.items()] + [(y[k], k) for k in np.nonzero((y > tol) & ~ones)[0]]
    order = [k for _, k in sorted(candidates, key=lambda t: -t[0])]
    found = []
    for a, i in enumerate(order):
        for j in order[a + 1:]:
            if y[i] + y[j] <= 1 + tol + offset or adj[i, j]:
                continue
            blocked = []
            for k in range(nested):
                out = reference_min_separator(adj, y, int(i), int(j), blocked, k % 2 == 0)
                if out is None or y[i] + y[j] - 1 - out[0] <= tol + offset:
                    break
                found.append((float(y[i] + y[j] - 1 - out[0]), int(min(i, j)), int(max(i, j)), out[1]))
                blocked += out[1].tolist()
            if limit is not None and len(found) >= limit:
                return sorted(found, key=lambda c: -c[0])[:limit]
    return sorted(found, key=lambda c: -c[0])


def thin_plane(H, rng, ones=0.15, fractional=0.25):
    """A grid label plane like the LP's on thin strokes: isolated y = 1 pixels and fractional
    pixels (some below the capacity resolution 1 / SCALE)."""
    y = np.zeros(H * H)
    u = rng.random(H * H)
    y[u < fractional] = rng.choice([0.5, 0.25, 0.75, 0.999, 4e-7], size=int((u < fractional).sum()))
    y[u > 1 - ones] = 1.0
    return y


def same_cuts(got, want):
    return len(got) == len(want) and all(
        g[0] == w[0] and g[1:3] == w[1:3] and np.array_equal(g[3], w[3]) for g, w in zip(got, want, strict=True))


@settings(deadline=None, max_examples=40)
@given(graph=lp_graphs(max_nodes=9), seed=st_.integers(0, 2**31), near_source=st_.booleans())
def test_min_separator_equals_the_full_network_flow(graph, seed, near_source):
    """Same cut (or None) as one max-flow on the whole network, with and without blocked vertices,
    whether i and j share a support component (flow on it) or not (zero-capacity cut)."""
    V, edges = graph
    rng = np.random.default_rng(seed)
    y = rng.choice([0.0, 0.0, 0.3, 0.5, 0.8, 1.0], size=V)
    sep = Separator.build(edges, V)
    adj = adjacency(edges, V)
    for i, j in itertools.combinations(range(V), 2):
        if adj[i, j]:
            continue
        others = [k for k in range(V) if k not in (i, j)]
        blocked = np.array(sorted(rng.choice(others, size=rng.integers(0, len(others) + 1), replace=False)),
                           dtype=np.int64)
        for b in (np.zeros(0, dtype=np.int64), blocked):
            got = sep.min_separator(y, i, j, SCALE, b, near_source)
            want = reference_min_separator(adj, y, i, j, b, near_source)
            assert (got is None) == (want is None)
            if got is not None:
                assert got[0] == want[0] and np.array_equal(got[1], want[1])


@settings(deadline=None, max_examples=25)
@given(graph=lp_graphs(max_nodes=7), seed=st_.integers(0, 2**31))
def test_min_separator_weight_matches_enumeration(graph, seed):
    """Brute force: the separator's weight is the least y-weight of all (i, j) vertex separators
    without blocked vertices (None when there is none), and it separates i from j."""
    V, edges = graph
    rng = np.random.default_rng(seed)
    y = rng.random(V) * (rng.random(V) < 0.7)
    sep = Separator.build(edges, V)
    adjacent = {tuple(e) for e in edges.tolist()}
    for i, j in itertools.combinations(range(V), 2):
        if (i, j) in adjacent:
            continue
        others = [k for k in range(V) if k not in (i, j)]
        blocked = [k for k in others if rng.random() < 0.3]
        free = [k for k in others if k not in blocked]
        best = min((sum(y[k] for k in S) for r in range(len(free) + 1) for S in itertools.combinations(free, r)
                    if separates(i, j, S, edges, V)), default=None)
        got = sep.min_separator(y, i, j, SCALE, np.array(blocked, dtype=np.int64), bool(rng.random() < 0.5))
        assert (got is None) == (best is None)
        if got is not None:
            assert got[0] == pytest.approx(best, abs=1e-5)
            assert separates(i, j, got[1].tolist(), edges, V) and not set(got[1].tolist()) & set(blocked)


def separates(i, j, S, edges, V):
    keep = np.ones(V, dtype=bool)
    keep[list(S)] = False
    e = [(a, b) for a, b in edges.tolist() if keep[a] and keep[b]]
    graph = sp.csr_array((np.ones(len(e)), ([a for a, _ in e], [b for _, b in e])), shape=(V, V))
    _, comp = connected_components(graph, directed=False)
    return comp[i] != comp[j]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("limit, nested, offset", [(None, 1, 0.0), (7, 4, 0.0), (100, 4, 0.0), (None, 3, 0.2)])
def test_violated_equals_the_loop_before_issue_26(seed, limit, nested, offset, oracle):
    """The whole round on 7x7 grid planes: same cuts, same violations, same order."""
    rng = np.random.default_rng(seed)
    H = 7
    y = thin_plane(H, rng)
    edges = lp.grid_edges(H, H)
    sep = Separator.build(edges, H * H)
    got = sep.violated(y, 1e-6, limit, nested, offset)
    want = reference_violated(adjacency(edges, H * H), y, 1e-6, limit, nested, offset)
    assert same_cuts(got, want) and (len(want) > 0 or seed > 0)


@settings(deadline=None, max_examples=40)
@given(graph=lp_graphs(max_nodes=9), seed=st_.integers(0, 2**31), tol=st_.sampled_from([1e-6, 1e-9]),
       nested=st_.integers(1, 4), limit=st_.sampled_from([None, 1, 3]), offset=st_.sampled_from([0.0, 0.1]),
       name=st_.sampled_from(ORACLES))
def test_violated_equals_the_loop_before_issue_26_on_any_graph(graph, seed, tol, nested, limit, offset, name):
    """Disconnected graphs, ties, values just above the tolerance and below the capacity resolution
    (with tol = 1e-9, as stability.py uses: pairs whose ends have zero capacity), y near 1."""
    V, edges = graph
    rng = np.random.default_rng(seed)
    y = rng.choice([0.0, 1.0, 1.0, 0.5, 0.25, 0.75, 4e-7, 5e-7, 2e-9, 1 - 1e-7, 1 / 3, 2 / 3], size=V)
    with use_backend("compiled" if name == "compiled" else "torch"):
        got = Separator.build(edges, V).violated(y, tol, limit, nested, offset)
    assert same_cuts(got, reference_violated(adjacency(edges, V), y, tol, limit, nested, offset))


def grid_plane(H, W, rng, kind):
    """Label planes of an LP on an H x W grid: uniform, halves, sparse levels, ones and zeros with
    fractional pixels between."""
    V = H * W
    if kind == 0:
        return rng.random(V)
    if kind == 1:
        return np.round(rng.random(V) * 2) / 2
    if kind == 2:
        return (rng.random(V) < 0.5) * rng.choice([1.0, 0.7, 0.3], V)
    return np.where(rng.random(V) < 0.3, 1.0, np.where(rng.random(V) < 0.5, 0.0, rng.random(V)))


@pytest.mark.skipif(len(ORACLES) < 2, reason="the compiled kernels did not build")
@settings(deadline=None, max_examples=60)
@given(H=st_.integers(1, 9), W=st_.integers(2, 9), kind=st_.integers(0, 3), seed=st_.integers(0, 2**31),
       nested=st_.integers(1, 4), limit=st_.sampled_from([None, 1, 5]), offset=st_.sampled_from([0.0, 0.3]))
def test_the_compiled_round_equals_the_python_one(H, W, kind, seed, nested, limit, offset):
    """On grids up to 9 x 9 (many pairs, flows on large components, nested cuts around blocked
    vertices), the compiled round returns the Python round's cuts, violations and order exactly."""
    y = grid_plane(H, W, np.random.default_rng(seed), kind)
    sep = Separator.build(lp.grid_edges(H, W), H * W)
    with use_backend("compiled"):
        got = sep.violated(y, 1e-6, limit, nested, offset)
    with use_backend("torch"):
        want = sep.violated(y, 1e-6, limit, nested, offset)
    assert same_cuts(got, want)


@pytest.mark.skipif(len(ORACLES) < 2, reason="the compiled kernels did not build")
def test_the_compiled_kernel_refuses_a_malformed_graph():
    """The kernel checks the CSR arrays it reads: a RuntimeError, never a read out of bounds."""
    from structtorch._extension import fast_ops

    y = torch.full((3,), 0.9, dtype=torch.float64)
    indptr, indices = torch.tensor([0, 1, 2, 2], dtype=torch.int32), torch.tensor([1, 7], dtype=torch.int32)
    with pytest.raises(RuntimeError, match="out of range"):
        fast_ops().connectivity_cuts(y, indptr, indices, 1e-6, 0.0, -1, 1)
    with pytest.raises(RuntimeError, match="indptr"):
        fast_ops().connectivity_cuts(y, indptr[:3], indices, 1e-6, 0.0, -1, 1)
    with pytest.raises(RuntimeError, match="float64"):
        fast_ops().connectivity_cuts(y.float(), indptr, indices, 1e-6, 0.0, -1, 1)


def test_bounded_cache_keeps_the_cuts(monkeypatch, python_oracle):
    """(The Python round's cache.) With room for 16 supports only (least recently used dropped), a round without a cut limit
    that meets many more gives the cuts of the reference, and no plane holds more than 16."""
    planes = []
    init = _Plane.__init__
    monkeypatch.setattr(_Plane, "__init__", lambda self, *a: init(self, *a) or planes.append(self))
    H = 7
    y = thin_plane(H, np.random.default_rng(3))
    sep = Separator.build(lp.grid_edges(H, H), H * H)
    want = sep.violated(y, 1e-6, None, 4)
    assert len(planes[0].seen) > 16  # unbounded here: the supports the round meets
    monkeypatch.setattr(separation, "_CACHED_LABELS", 1)
    sizes = []
    side = _Plane.side
    monkeypatch.setattr(_Plane, "side", lambda self, *a: sizes.append(len(self.seen)) or side(self, *a))
    got = sep.violated(y, 1e-6, None, 4)
    assert same_cuts(got, want)
    assert same_cuts(got, reference_violated(adjacency(lp.grid_edges(H, H), H * H), y, 1e-6, None, 4, 0.0))
    assert planes[1].capacity == 16 and max(sizes) == 16


@pytest.mark.parametrize("seed", range(4))
def test_cached_components_equal_a_fresh_search(seed):
    """A support met twice is labelled once (all components); each component and boundary it
    gives equals the breadth-first search of a fresh plane."""
    rng = np.random.default_rng(seed)
    H = 8
    y = thin_plane(H, rng)
    sep = Separator.build(lp.grid_edges(H, H), H * H)
    plane = _Plane(sep, y, SCALE)
    blocked = np.array(sorted(rng.choice(H * H, size=5, replace=False)), dtype=np.int64)
    for b in (np.zeros(0, dtype=np.int64), blocked):
        for s in range(H * H):
            fresh = _Plane(sep, y, SCALE).side(s, s, b, s)
            first, again = plane.side(s, s, b, s), plane.side(s, s, b, s)
            for side in (first, again):
                assert np.array_equal(side.members, fresh.members)
                assert np.array_equal(side.boundary, fresh.boundary)
    assert any(v is not None for v in plane.seen.values())  # the labelled path ran


def test_thin_strokes_need_few_flows(python_oracle):
    """On a thin-stroke LP plane (isolated y = 1 pixels), almost every cut is a zero-capacity one
    around a support component: no max-flow at all for pairs in different components."""
    H = 12
    y = np.zeros(H * H)
    y[[H * r + r for r in range(1, H - 1, 3)]] = 1.0  # every third pixel of a diagonal
    sep = Separator.build(lp.grid_edges(H, H), H * H)
    calls = []
    flow = sep._flow_cut
    sep._flow_cut = lambda *a: calls.append(1) or flow(*a)
    found = sep.violated(y, 1e-6, None, 4)
    assert len(found) > 0 and not calls
    assert same_cuts(found, reference_violated(adjacency(lp.grid_edges(H, H), H * H), y, 1e-6, None, 4, 0.0))
    assert all(c[0] == pytest.approx(1.0) for c in found)


def test_connectivity_cut_on_a_thin_diagonal():
    """Public oracle: two diagonal neighbours (not 4-adjacent) are cut by their zero-weight ring."""
    y = torch.zeros(9, dtype=torch.float64)
    y[[0, 4]] = 1.0  # (0, 0) and (1, 1) on a 3x3 grid
    violation, i, j, S = lp.connectivity_cut(y, lp.grid_edges(3, 3))
    assert (i, j) == (0, 4) and violation == pytest.approx(1.0) and S.tolist() == [1, 3]


def brute_max_violation(y, edges, V):
    """max over non-adjacent pairs of y_i + y_j - 1 - (the least y-weight of an (i, j) separator),
    by enumerating every vertex subset; -inf where no pair can be separated."""
    adjacent = {tuple(e) for e in edges.tolist()}
    best = -np.inf
    for i, j in itertools.combinations(range(V), 2):
        if (i, j) in adjacent:
            continue
        others = [k for k in range(V) if k not in (i, j)]
        weight = min(sum(y[k] for k in S) for r in range(len(others) + 1) for S in itertools.combinations(others, r)
                     if separates(i, j, S, edges, V))
        best = max(best, y[i] + y[j] - 1 - weight)
    return best


@settings(deadline=None, max_examples=30)
@given(graph=lp_graphs(max_nodes=7), seed=st_.integers(0, 2**31), L=st_.integers(2, 3),
       max_cuts=st_.sampled_from([None, 1, 3]), nested=st_.integers(1, 3), name=st_.sampled_from(ORACLES))
def test_connectivity_cuts_against_enumeration(graph, seed, L, max_cuts, nested, name):
    """Every row is a violated inequality whose separator separates its pair; rows come most
    violated first, at most max_cuts; without max_cuts the first one's violation is the largest of
    all pairs and separators (enumerated); there are none exactly when nothing is violated."""
    V, edges = graph
    rng = np.random.default_rng(seed)
    mu = torch.from_numpy(rng.choice([0.0, 0.25, 0.5, 0.75, 1.0], size=(2, V, L)))
    labels = sorted(rng.choice(L, size=rng.integers(1, L + 1), replace=False).tolist())
    with use_backend("compiled" if name == "compiled" else "torch"):
        rows = lp.connectivity_cuts(mu, edges, labels, max_cuts=max_cuts, nested=nested)
    assert len(rows) == 2
    for b, found in enumerate(rows):
        y = mu[b].numpy()
        violation = [y[i, c] + y[j, c] - 1 - y[S.numpy(), c].sum() for c, i, j, S in found]
        assert all(v > 1e-6 for v in violation) and violation == sorted(violation, reverse=True)
        assert all(separates(i, j, S.tolist(), edges, V) and S.dtype == torch.long for _, i, j, S in found)
        assert max_cuts is None or len(found) <= max_cuts
        best = max(brute_max_violation(y[:, c], edges, V) for c in labels)
        assert bool(found) == (best > 1e-6)
        if found and max_cuts is None:
            assert violation[0] == pytest.approx(best)


def test_connectivity_cuts_of_one_marginal_and_bad_inputs():
    edges = lp.grid_edges(3, 3)
    mu = torch.zeros(9, 2)
    mu[:, 0] = 1
    mu[[0, 8]] = torch.tensor([0.0, 1.0])
    rows = lp.connectivity_cuts(mu, edges, [1], nested=4)
    assert len(rows) == 1 and [(c, i, j) for c, i, j, _ in rows[0]] == [(1, 0, 8)] * 3
    assert lp.connectivity_cuts(mu, edges, [0]) == [[]]  # label 0 is connected
    assert lp.connectivity_cuts(mu[None, :0], torch.zeros(0, 2, dtype=torch.long), [1]) == [[]]
    for kwargs, error, match in [
        ({"mu": mu[:, 0]}, ValueError, "mu must be a"),
        ({"mu": mu.masked_fill(mu > 0.5, float("nan"))}, ValueError, "mu must lie in"),
        ({"mu": mu + 0.5}, ValueError, "mu must lie in"),
        ({"connected": [2]}, ValueError, "connected labels"),
        ({"connected": 1}, TypeError, "connected must be"),
        ({"max_cuts": 0}, ValueError, "max_cuts"),
        ({"nested": 1.5}, TypeError, "nested"),
        ({"tol": 0.0}, ValueError, "tol"),
        ({"edges": torch.tensor([[0, 9]])}, ValueError, "edges"),
    ]:
        args = {"mu": mu, "edges": edges, "connected": [1], **kwargs}
        with pytest.raises(error, match=match):
            lp.connectivity_cuts(args.pop("mu"), args.pop("edges"), args.pop("connected"), **args)
