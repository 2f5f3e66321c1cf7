"""Multicut by cutting planes and stability ranges against enumeration of all partitions."""

from __future__ import annotations

import itertools
import math

import networkx as nx
import numpy as np
import pytest
import torch
from brute import brute_range, multicut_problems, partition_vectors
from hypothesis import assume, given, settings
from hypothesis import strategies as st_

from structtorch import lp
from structtorch.lp.clustering import all_pairs


@settings(deadline=None)
@given(problem=multicut_problems(), relaxation=st_.sampled_from(lp.RELAXATIONS))
def test_multicut_bounds_and_matches_enumeration_when_integral(problem, relaxation):
    V, edges, w, _ = problem
    res = lp.multicut(edges, w, relaxation=relaxation, num_nodes=V)
    Z = partition_vectors(edges, V)
    best = float((Z @ w.numpy()).min())
    assert res.objective <= best + 1e-7
    if res.integral:
        assert res.objective == pytest.approx(best, abs=1e-7)
        c = res.clusters.numpy()
        e = edges.numpy()
        assert np.array_equal((c[e[:, 0]] != c[e[:, 1]]).astype(float), res.z.numpy())


def k4(outer):
    """Digest §2.7: K4 with centre 1, spokes 0.2 / 0.8 / 0.9, outer triangle ``outer``."""
    edges = torch.tensor([[0, 1], [1, 2], [1, 3], [0, 2], [0, 3], [2, 3]])
    return edges, torch.tensor([0.2, 0.8, 0.9, *outer], dtype=torch.float64)


def test_k4_odd_wheel_example():
    edges, w = k4((-0.7, -0.9, -0.9))  # the -0.7 edge touches vertex 0, whose spoke weighs 0.2
    c = lp.multicut(edges, w, relaxation="cycle")
    assert c.objective == pytest.approx(-1.55) and not c.integral
    torch.testing.assert_close(c.z, torch.tensor([0.5, 0.5, 0.5, 1, 1, 1], dtype=torch.float64))
    co = lp.multicut(edges, w, relaxation="cycle+oddwheel")
    assert co.objective == pytest.approx(-1.5) and co.integral
    assert [k for k, *_ in co.cuts].count("oddwheel") == 1
    assert lp.multicut(*k4((-0.9, -0.9, -0.7)), relaxation="cycle").objective == pytest.approx(-1.6)


def test_modularity_karate_and_lesmis():
    karate = nx.karate_club_graph()
    edges, w = lp.modularity_weights(karate)
    for relaxation in lp.RELAXATIONS:
        res = lp.multicut(edges, w, relaxation=relaxation)
        assert res.integral and -2 * res.objective == pytest.approx(0.4198, abs=5e-5)
        assert lp.modularity(karate, res.clusters) == pytest.approx(-2 * res.objective, abs=1e-9)
    lesmis = nx.les_miserables_graph()
    res = lp.multicut(*lp.modularity_weights(lesmis), relaxation="cycle")
    assert not res.integral and -2 * res.objective == pytest.approx(0.5609, abs=5e-5)  # Table 10, LP-C


@settings(deadline=None)
@given(problem=multicut_problems(max_nodes=4, complete=True))
def test_stability_range_is_exact_where_lp_co_is_the_multicut_polytope(problem):
    V, edges, w, d = problem
    res = lp.multicut(edges, w, num_nodes=V)
    assert res.integral  # on K3 and K4, cycle + odd-wheel inequalities describe the multicut polytope
    got = lp.stability_range(res, d)
    want = brute_range(partition_vectors(edges, V), w.numpy(), res.z.numpy(), d.numpy())
    for a, b in zip(got, want, strict=True):
        assert (math.isinf(a) and a == b) or a == pytest.approx(b, abs=1e-6)


@settings(deadline=None, max_examples=25)
@given(problem=multicut_problems(max_nodes=6))
def test_theorem_8_relaxation_range_within_the_exact_one(problem):
    V, edges, w, d = problem
    res = lp.multicut(edges, w, num_nodes=V)
    assume(res.integral)
    lo, hi = lp.stability_range(res, d)
    xlo, xhi = brute_range(partition_vectors(edges, V), w.numpy(), res.z.numpy(), d.numpy())
    assert xlo - 1e-7 <= lo <= 1e-9 and -1e-9 <= hi <= xhi + 1e-7


def test_variable_stability_pattern_and_infinite_ends():
    g = torch.Generator().manual_seed(3)
    edges = all_pairs(5)
    w = torch.randn(len(edges), generator=g, dtype=torch.float64)
    res = lp.multicut(edges, w)
    assert res.integral
    ranges = lp.variable_stability(res)
    cut = res.z == 1
    assert torch.isinf(ranges[cut, 0]).all() and (ranges[cut, 1] >= 0).all()
    assert torch.isinf(ranges[~cut, 1]).all() and (ranges[~cut, 0] <= 0).all()
    assert lp.stability_range(res, torch.zeros(len(edges))) == (-math.inf, math.inf)


def test_solution_path_and_critical_edges():
    g = torch.Generator().manual_seed(5)
    V = 5
    sim = torch.rand(V, V, generator=g, dtype=torch.float64)
    edges, w = lp.correlation_weights((sim + sim.T) / 2)
    ones = torch.ones(len(edges), dtype=torch.float64)
    w = w - 1.0
    path = lp.solution_path(lp.multicut(edges, w), ones, -1.0, 1.0)
    assert path[0][0][0] <= -1.0 and path[-1][0][1] >= 1.0
    for ((lo, hi), sol), ((lo2, _), _) in zip(path[:-1], path[1:], strict=True):
        assert lo2 == pytest.approx(hi, abs=1e-5)  # consecutive intervals meet at the breakpoints
        mid = (max(lo, -1.0) + min(hi, 1.0)) / 2
        best = lp.multicut(edges, w + mid * ones)
        assert float((w + mid * ones) @ sol.z) == pytest.approx(best.objective, abs=1e-7)
    clusters = [int(sol.clusters.max()) + 1 for _, sol in path]
    assert clusters == sorted(clusters, reverse=True) and clusters[0] > clusters[-1]  # more weight: fewer clusters
    # two triangles joined by a bridge: the bridge is not critical, and brute force agrees
    G = nx.Graph([(0, 1), (1, 2), (0, 2), (3, 4), (4, 5), (3, 5), (2, 3)])
    critical = set(lp.critical_edges(G))
    base = lp.multicut(*lp.modularity_weights(G)).clusters
    for a, b in G.edges:
        H = G.copy()
        H.remove_edge(a, b)
        other = lp.multicut(*lp.modularity_weights(H)).clusters
        same = all((base[i] == base[j]) == (other[i] == other[j]) for i in range(6) for j in range(6))
        assert ((a, b) in critical) == (not same)


def test_weights_and_bad_input():
    edges, w = lp.consensus_weights(torch.tensor([[0, 0, 1], [0, 1, 1]]))
    torch.testing.assert_close(w, torch.tensor([0.0, -1.0, 0.0], dtype=torch.float64))
    assert lp.cluster_size_bias(4, 0.5, "difference")[1].unique().tolist() == [-1.0]
    with pytest.raises(ValueError, match=r"weights must be a tensor of shape \(E,\) = \(3,\)"):
        lp.multicut(all_pairs(3), torch.zeros(2))
    with pytest.raises(ValueError, match="relaxation must be one of"):
        lp.multicut(all_pairs(3), torch.zeros(3), relaxation="cycle+bicycle")
    res = lp.multicut(all_pairs(3), torch.tensor([1.0, -1.0, 1.0]))
    with pytest.raises(ValueError, match=r"direction must be a tensor of shape \(E,\) or \(n,\) = \(3,\)"):
        lp.stability_range(res, torch.zeros(4))
    frac = lp.multicut(*k4((-0.7, -0.9, -0.9)), relaxation="cycle")
    with pytest.raises(ValueError, match="integral"):
        lp.stability_range(frac, torch.zeros(6))
    with pytest.raises(ValueError, match="simple undirected"):
        lp.modularity_weights(nx.MultiGraph([(0, 1), (0, 1)]))
    with pytest.raises(ValueError, match="symmetric"):
        lp.correlation_weights(torch.tensor([[0.0, 1.0], [0.0, 0.0]]))


def labeling_vectors(V, L, edges):
    """Indicator vectors x = [mu, mu_edges] (n,) of every labeling, and the labelings."""
    ys = list(itertools.product(range(L), repeat=V))
    X = []
    for y in ys:
        mu = np.zeros((V, L))
        mu[np.arange(V), y] = 1
        mue = np.zeros((len(edges), L, L))
        for e, (a, b) in enumerate(edges.tolist()):
            mue[e, y[a], y[b]] = 1
        X.append(np.concatenate([mu.reshape(-1), mue.reshape(-1)]))
    return np.array(X), ys


@settings(deadline=None, max_examples=25)
@given(V=st_.integers(2, 5), L=st_.integers(2, 3), seed=st_.integers(0, 2**31), tree=st_.booleans())
def test_map_stability_on_trees_matches_enumeration(V, L, seed, tree):
    """On trees the local polytope is the marginal polytope: the LP range is the exact one."""
    rng = np.random.default_rng(seed)
    edges = torch.tensor([[int(rng.integers(0, k)), k] for k in range(1, V)] if tree else
                         [[k, k + 1] for k in range(V - 1)])
    unary, pairwise = torch.tensor(rng.normal(size=(V, L))), torch.tensor(rng.normal(size=(len(edges), L, L)))
    res = lp.map_lp(unary, pairwise, edges)
    assert bool(res.integral[0])
    X, _ = labeling_vectors(V, L, edges)
    x_star = torch.cat([res.mu[0].reshape(-1), res.mu_edges[0].reshape(-1)]).numpy()
    w = res.cost[0].numpy()
    d = rng.normal(size=len(w))
    got = lp.stability_range(res, torch.tensor(d))
    want = brute_range(X, w, x_star, d)
    for a, b in zip(got, want, strict=True):
        assert (math.isinf(a) and a == b) or a == pytest.approx(b, abs=1e-6)
    node = lp.node_stability(res)
    i = int(rng.integers(0, V))
    e_i = np.zeros(len(w))
    e_i[i * L + int(res.mu[0, i].argmax())] = 1
    assert float(node[i]) == pytest.approx(brute_range(X, w, x_star, e_i)[1], abs=1e-6)


def test_map_stability_with_connectivity_is_conservative():
    """Theorem 8 with connectivity cuts: the LP range lies within the exact constrained range."""
    from brute import is_connected

    edges = torch.tensor([[0, 1], [1, 2], [2, 3], [3, 4], [0, 4], [1, 3]])
    rng = np.random.default_rng(1)
    checked = 0
    for _ in range(20):
        unary, pairwise = torch.tensor(rng.normal(size=(5, 2))), torch.tensor(rng.normal(size=(6, 2, 2)))
        res = lp.map_lp(unary, pairwise, edges, connected=[1])
        if not bool(res.integral[0]):
            continue
        X, ys = labeling_vectors(5, 2, edges)
        keep = [k for k, y in enumerate(ys) if is_connected(np.nonzero(np.array(y) == 1)[0], edges)]
        x_star = torch.cat([res.mu[0].reshape(-1), res.mu_edges[0].reshape(-1)]).numpy()
        d = rng.normal(size=len(x_star))
        lo, hi = lp.stability_range(res, torch.tensor(d))
        xlo, xhi = brute_range(X[keep], res.cost[0].numpy(), x_star, d)
        assert xlo - 1e-7 <= lo <= 1e-9 and -1e-9 <= hi <= xhi + 1e-7
        checked += 1
    assert checked >= 10


def test_review_regressions():
    # stopping early never certifies: the triangle with one repulsive edge needs a cycle cut
    tri, w = all_pairs(3), torch.tensor([-1.0, 1.0, 1.0])
    early = lp.multicut(tri, w, max_iter=1)
    assert not early.integral and early.clusters is None
    assert lp.multicut(tri, w).objective == pytest.approx(0.0)
    # a solution that is not optimal for the weights is an error, not a range
    res = lp.multicut(tri, torch.tensor([1.0, -1.0, 1.0], dtype=torch.float64))
    res.weights = torch.tensor([3.0, -1.0, 1.0], dtype=torch.float64)
    with pytest.raises(ValueError, match="not optimal"):
        lp.stability_range(res, torch.ones(3))
    # ranges scale as 1 / scale of d
    g = torch.Generator().manual_seed(0)
    edges = all_pairs(6)
    res = lp.multicut(edges, torch.randn(len(edges), generator=g, dtype=torch.float64))
    d = torch.randn(len(edges), generator=g, dtype=torch.float64)
    base = lp.stability_range(res, d)
    for s in (1e-7, 1e9):
        lo, hi = lp.stability_range(res, s * d)
        for a, b in zip((lo * s, hi * s), base, strict=True):
            assert (math.isinf(a) and a == b) or a == pytest.approx(b, rel=1e-6, abs=1e-9)


# --- issue 10: reliability -------------------------------------------------------------------------


def test_issue10_tiny_weights_are_solved_exactly():
    """Issue 10.2: HiGHS's absolute tolerances certified objective 0 for weights of 1e-9 (the
    optimum -1e-9 cuts the -2e-9 edge and one of the others)."""
    res = lp.multicut(all_pairs(3), torch.tensor([1e-9, -2e-9, 1e-9], dtype=torch.float64))
    assert res.integral and res.converged
    assert res.objective == pytest.approx(-1e-9, rel=1e-9)
    assert res.z[1].item() == 1.0 and res.z.sum().item() == 2.0


@pytest.mark.parametrize("scale", [1e-9, 1e9])
def test_issue10_multicut_and_ranges_are_scale_invariant(scale):
    rng = np.random.default_rng(0)
    edges = all_pairs(6)
    Z = partition_vectors(edges, 6)
    for _ in range(4):
        w, d = torch.tensor(rng.normal(size=len(edges))), torch.tensor(rng.normal(size=len(edges)))
        base, res = lp.multicut(edges, w), lp.multicut(edges, w * scale)
        torch.testing.assert_close(res.z, base.z, atol=1e-6, rtol=0)
        assert res.objective / scale == pytest.approx(base.objective, rel=1e-7)
        assert res.integral == base.integral and res.converged and base.converged
        if base.integral:
            assert base.objective == pytest.approx(float((Z @ w.numpy()).min()), abs=1e-9)
            want = lp.stability_range(base, d)
            for got in (lp.stability_range(res, d * scale), [x / scale for x in lp.stability_range(res, d)]):
                for a, b in zip(got, want, strict=True):
                    assert (math.isinf(a) and a == b) or a == pytest.approx(b, rel=1e-6, abs=1e-12)


@pytest.mark.parametrize("scale", [1e-9, 1e9])
def test_issue10_map_ranges_are_scale_invariant(scale):
    rng = np.random.default_rng(1)
    edges = torch.tensor([[0, 1], [1, 2], [1, 3]])
    X, _ = labeling_vectors(4, 2, edges)
    for _ in range(3):
        unary, pairwise = torch.tensor(rng.normal(size=(4, 2))), torch.tensor(rng.normal(size=(3, 2, 2)))
        base, res = lp.map_lp(unary, pairwise, edges), lp.map_lp(unary * scale, pairwise * scale, edges)
        d = torch.tensor(rng.normal(size=res.cost.shape[1]))
        x_star = torch.cat([base.mu[0].reshape(-1), base.mu_edges[0].reshape(-1)]).numpy()
        want = brute_range(X, base.cost[0].numpy(), x_star, d.numpy())
        got = [x / scale for x in lp.stability_range(res, d)]
        for a, b in zip(got, want, strict=True):
            assert (math.isinf(a) and a == b) or a == pytest.approx(b, rel=1e-6, abs=1e-9)


def test_issue10_converged_flag_and_max_iter():
    """Issue 10.3: a max_iter stop looked like a fractional optimum; max_iter <= 0 was accepted."""
    tri, w = all_pairs(3), torch.tensor([-1.0, 1.0, 1.0])
    early = lp.multicut(tri, w, max_iter=1)
    assert not early.converged and not early.integral and early.iterations == 1
    full = lp.multicut(tri, w)
    assert full.converged and full.integral and full.objective == pytest.approx(0.0)
    frac = lp.multicut(*k4((-0.7, -0.9, -0.9)), relaxation="cycle")
    assert frac.converged and not frac.integral  # a genuine fractional optimum of LP-C
    for bad, exc in ((0, ValueError), (-3, ValueError), (2.0, TypeError), (True, TypeError)):
        with pytest.raises(exc, match="max_iter must be"):
            lp.multicut(tri, w, max_iter=bad)
    for bad in (0.0, float("nan"), 1.0):
        with pytest.raises(ValueError, match="tol must"):
            lp.multicut(tri, w, tol=bad)


def test_issue10_no_edges():
    res = lp.multicut(torch.zeros(0, 2, dtype=torch.long), torch.zeros(0), num_nodes=3)
    assert res.clusters.tolist() == [0, 1, 2] and res.objective == 0.0 and res.z.shape == (0,)
    assert res.integral and res.converged and res.iterations == 0
    assert lp.stability_range(res, torch.zeros(0)) == (-math.inf, math.inf)
    assert lp.variable_stability(res).shape == (0, 2)
    with pytest.raises(ValueError, match="num_nodes is needed when edges is empty"):
        lp.multicut(torch.zeros(0, 2, dtype=torch.long), torch.zeros(0))
    with pytest.raises(ValueError, match="num_nodes must be an int >= 0"):
        lp.multicut(all_pairs(3), torch.zeros(3), num_nodes=-1)


@pytest.mark.parametrize("call, exc, message", [
    (lambda res: lp.multicut(all_pairs(3), torch.tensor([1.0, -1.0, 1j])), TypeError, "weights must be a real"),
    (lambda res: lp.multicut(all_pairs(3), [1.0, -1.0, 1.0]), TypeError, "weights must be a torch.Tensor"),
    (lambda res: lp.multicut(all_pairs(3), torch.tensor([1.0, -1.0, 1e20])), ValueError,
     r"weights must be below 1e\+20"),
    (lambda res: lp.multicut(all_pairs(3), torch.tensor([1.0, -1.0, float("nan")])), ValueError, "weights must be finite"),
    (lambda res: lp.stability_range(res, torch.tensor([1j, 0, 0])), TypeError, "direction must be a real"),
    (lambda res: lp.stability_range(res, torch.tensor([1e20, 0, 0])), ValueError, r"direction must be below 1e\+20"),
    (lambda res: lp.stability_range(res, torch.tensor([float("inf"), 0, 0])), ValueError, "direction must be finite"),
    (lambda res: lp.stability_range(res, torch.ones(3), index=1), ValueError, r"index must lie in \[0, B\) = \[0, 1\)"),
    (lambda res: lp.stability_range(res, torch.ones(3), tol=-1.0), ValueError, r"tol must be a finite number in \(0, inf\)"),
    (lambda res: lp.stability_range(res, torch.ones(3), max_iter=0), ValueError, "max_iter must be an int >= 1"),
    (lambda res: lp.variable_stability(res, max_iter=0.5), TypeError, "max_iter must be an int"),
    (lambda res: lp.stability_range("res", torch.ones(3)), TypeError, "result must be a MulticutResult"),
    (lambda res: lp.solution_path(res, torch.ones(3), float("nan"), 1.0), ValueError, "theta_min must be a finite number"),
    (lambda res: lp.solution_path(res, torch.ones(3), 0.0, 1.0, eps=0.0), ValueError, r"eps must be a finite number in \(0, inf\)"),
    (lambda res: lp.solution_path(res, torch.ones(3), 0.0, 1.0, max_steps=0), ValueError, "max_steps must be an int >= 1"),
    (lambda res: lp.solution_path(res, torch.ones(2), 0.0, 1.0), ValueError, "direction must be a tensor of shape"),
    (lambda res: lp.modularity_weights([(0, 1), (1, 2)]), TypeError, "graph must be a networkx graph"),
    (lambda res: lp.modularity([(0, 1)], torch.zeros(2)), TypeError, "graph must be a networkx graph"),
    (lambda res: lp.all_pairs(2.5), TypeError, "V must be an int"),
    (lambda res: lp.cluster_size_bias(3, float("nan")), ValueError, "lam must be a finite number"),
    (lambda res: lp.consensus_weights(torch.zeros(0, 3, dtype=torch.long)), ValueError, "m >= 1"),
    (lambda res: lp.consensus_weights(torch.zeros(2, 3)), TypeError, "clusterings must be an"),
    (lambda res: lp.correlation_weights(torch.full((2, 2), float("nan"))), ValueError, "similarity must be finite"),
])
def test_issue10_unvalidated_arguments(call, exc, message):
    res = lp.multicut(all_pairs(3), torch.tensor([1.0, -1.0, 1.0], dtype=torch.float64))
    with pytest.raises(exc, match=message):
        call(res)


def test_issue10_default_path_step_follows_the_scale():
    """solution_path's default eps is relative (1e-6 max|w| / max|d|, the unit of theta): with the
    weights at 1e-6 (modularity weights of a few hundred edges) the path over the scaled theta
    interval is the same as at scale 1 (an absolute 1e-6 step would jump past every breakpoint)."""
    g = torch.Generator().manual_seed(5)
    sim = torch.rand(5, 5, generator=g, dtype=torch.float64)
    edges, w = lp.correlation_weights((sim + sim.T) / 2)
    w, ones = w - 1.0, torch.ones(len(edges), dtype=torch.float64)
    base = lp.solution_path(lp.multicut(edges, w), ones, -1.0, 1.0)
    tiny = lp.solution_path(lp.multicut(edges, w * 1e-6), ones, -1e-6, 1e-6)
    assert len(tiny) == len(base) > 1
    for ((lo, hi), sol), ((lo2, hi2), sol2) in zip(base, tiny, strict=True):
        assert torch.equal(sol.z, sol2.z)
        assert (lo2 * 1e6, hi2 * 1e6) == (pytest.approx(lo, rel=1e-6, abs=1e-9), pytest.approx(hi, rel=1e-6, abs=1e-9))
