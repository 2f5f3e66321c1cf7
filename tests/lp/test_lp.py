"""LP relaxations against brute force: tight on trees, exact when integral, connectivity cuts."""

from __future__ import annotations

import itertools
import math
import subprocess
import sys

import numpy as np
import pytest
import torch
from brute import (
    FIVE_CYCLE,
    cvxpy_smoothed,
    is_connected,
    labeling_score,
    lp_brute,
    lp_graphs,
    random_potentials,
)
from hypothesis import given, settings
from hypothesis import strategies as st_
from torch import Tensor

import structtorch as st
from structtorch import lp


@settings(deadline=None)
@given(T=st_.integers(1, 7), L=st_.integers(1, 3), seed=st_.integers(0, 2**31))
def test_chain_lp_is_tight_and_equals_viterbi(T, L, seed):
    unary, pairwise = random_potentials(T, T - 1, L, seed)
    edges = torch.stack([torch.arange(T - 1), torch.arange(1, T)], 1)
    res = lp.map_lp(unary, pairwise, edges)
    score, path = st.viterbi(unary[None], pairwise[None] if T > 1 else torch.zeros(L, L, dtype=torch.float64))
    assert bool(res.integral[0]) and np.isclose(res.score.item(), score.item(), atol=1e-7)
    assert torch.equal(lp.round_labels(res.mu)[0][0], path[0]) or np.isclose(
        labeling_score(unary.numpy(), pairwise.numpy(), edges.numpy(), lp.round_labels(res.mu)[0][0].numpy()),
        score.item(), atol=1e-7)


@settings(deadline=None)
@given(graph=lp_graphs(), L=st_.integers(2, 3), seed=st_.integers(0, 2**31), integer=st_.booleans())
def test_lp_bounds_map_and_is_exact_when_integral(graph, L, seed, integer):
    V, edges = graph
    unary, pairwise = random_potentials(V, len(edges), L, seed, integer)
    res = lp.map_lp(unary, pairwise, edges)
    best = lp_brute(unary.numpy(), pairwise.numpy(), edges.numpy())
    assert res.score.item() >= best - 1e-7
    if bool(res.integral[0]):
        labels = lp.round_labels(res.mu)[0][0].numpy()
        assert np.isclose(res.score.item(), best, atol=1e-7)
        assert np.isclose(labeling_score(unary.numpy(), pairwise.numpy(), edges.numpy(), labels), best, atol=1e-7)


def test_tree_lp_is_tight():
    edges = torch.tensor([[0, 1], [0, 2], [1, 3], [1, 4], [2, 5]])
    for seed in range(10):
        unary, pairwise = random_potentials(6, 5, 3, seed)
        res = lp.map_lp(unary, pairwise, edges)
        assert bool(res.integral[0])
        assert np.isclose(res.score.item(), lp_brute(unary.numpy(), pairwise.numpy(), edges.numpy()), atol=1e-7)


def test_two_node_fractional_vertex():
    """Digest §1.6: the cut mu_1(a) + mu_2(a) <= 1 on the local polytope of two binary nodes has the
    fractional vertex (1/2, 1/2, 1/2, 1/2 | 1/2, 0, 0, 1/2), optimal for a reward on (a, a)."""
    pairwise = torch.zeros(1, 2, 2, dtype=torch.float64)
    pairwise[0, 0, 0] = 2.0
    res = lp.map_lp(torch.zeros(2, 2, dtype=torch.float64), pairwise, torch.tensor([[0, 1]]),
                    cuts=[(0, 0, 1, torch.zeros(0, dtype=torch.long))])
    torch.testing.assert_close(res.mu[0], torch.full((2, 2), 0.5, dtype=torch.float64))
    torch.testing.assert_close(res.mu_edges[0, 0], torch.tensor([[0.5, 0.0], [0.0, 0.5]], dtype=torch.float64))
    assert res.score.item() == pytest.approx(1.0) and not bool(res.integral[0])
    assert res.fractional_fraction.item() == 1.0


def all_separators(V, edges):
    """(i, j, S) for every non-adjacent pair i < j and every (i, j) vertex separator S."""
    adjacent = {tuple(e) for e in edges.tolist()}
    for i, j in itertools.combinations(range(V), 2):
        if (i, j) in adjacent:
            continue
        others = [k for k in range(V) if k not in (i, j)]
        for r in range(len(others) + 1):
            for S in itertools.combinations(others, r):
                keep = [k for k in range(V) if k not in S]
                if not is_connected_pair(i, j, edges[[a in keep and b in keep for a, b in edges.tolist()]]):
                    yield i, j, S


def brute_separation(y, edges, V):
    """Most violated y_i + y_j - sum_S y_k - 1 over non-adjacent pairs and all their separators."""
    return max([0.0] + [y[i] + y[j] - 1 - sum(y[k] for k in S) for i, j, S in all_separators(V, edges)])


@settings(deadline=None)
@given(graph=lp_graphs(max_nodes=7), seed=st_.integers(0, 2**31), ones=st_.floats(0.0, 0.8))
def test_separation_oracle_matches_enumeration(graph, seed, ones):
    V, edges = graph
    rng = np.random.default_rng(seed)
    y = rng.random(V)
    y[rng.random(V) < ones] = 1.0
    y[rng.random(V) < 0.2] = 0.0
    violation, i, j, S = lp.connectivity_cut(torch.tensor(y), edges)
    expected = brute_separation(y, edges, V)
    if expected <= 1e-6:
        assert i == -1 and violation == 0.0
        return
    assert violation == pytest.approx(expected, abs=1e-4)
    assert violation == pytest.approx(y[i] + y[j] - 1 - y[S.numpy()].sum(), abs=1e-12)
    # S separates i and j
    keep = [k for k in range(V) if k not in set(S.tolist())]
    sub = edges[[a in keep and b in keep for a, b in edges.tolist()]]
    assert not is_connected_pair(i, j, sub)


def is_connected_pair(i, j, edges):
    comp, changed = {i}, True
    while changed:
        changed = False
        for a, b in edges.tolist():
            if (a in comp) != (b in comp):
                comp |= {a, b}
                changed = True
    return j in comp


def test_five_cycle_separator():
    """Digest §1.4: for i=0, j=3 on the 5-cycle the best separator weighs min(y_a, y_b) + y_c."""
    y = torch.tensor([1.0, 0.2, 0.3, 1.0, 0.1], dtype=torch.float64)
    violation, i, j, S = lp.connectivity_cut(y, FIVE_CYCLE)
    assert (i, j) == (0, 3) and sorted(S.tolist()) == [1, 4]
    assert violation == pytest.approx(1.0 + 1.0 - 1.0 - 0.3)
    assert lp.connectivity_cut(torch.tensor([1.0, 1.0, 0.0, 0.0, 0.0]), FIVE_CYCLE)[1] == -1  # adjacent


@settings(deadline=None)
@given(graph=lp_graphs(max_nodes=6), seed=st_.integers(0, 2**31), soft=st_.booleans())
def test_connectivity_lp_bounds_the_constrained_map(graph, seed, soft):
    V, edges = graph
    unary, pairwise = random_potentials(V, len(edges), 2, seed, integer=True)
    kwargs = {"connected_soft": {1: 1.5}} if soft else {"connected": [1]}
    res = lp.map_lp(unary, pairwise, edges, **kwargs)
    best = lp_brute(unary.numpy(), pairwise.numpy(), edges.numpy(), *(((), {1: 1.5}) if soft else ([1],)))
    assert bool(res.converged[0])
    assert res.score.item() >= best - 1e-6
    if bool(res.integral[0]):
        labels = lp.round_labels(res.mu)[0][0].numpy()
        assert np.isclose(res.score.item(), best, atol=1e-6)
        if not soft:
            assert is_connected(np.nonzero(labels == 1)[0], edges)


def test_denoising_instance_is_connected_and_mostly_integral():
    H = W = 12
    edges = lp.grid_edges(H, W)
    g = torch.Generator().manual_seed(0)
    truth = torch.zeros(H, W, dtype=torch.long)
    truth[2:10, 5:7] = 1
    truth[5:7, 2:10] = 1
    unary = torch.zeros(H * W, 2, dtype=torch.float64)
    unary[torch.arange(H * W), truth.reshape(-1)] = 1 + 0.9 * torch.randn(H * W, generator=g, dtype=torch.float64)
    pairwise = torch.zeros(len(edges), 2, 2, dtype=torch.float64)
    k = 0.5 * torch.randn(len(edges), generator=g, dtype=torch.float64).abs()
    pairwise[:, 0, 1] = pairwise[:, 1, 0] = -k
    plain = lp.map_lp(unary, pairwise, edges)
    res = lp.map_lp(unary, pairwise, edges, connected=[1])
    assert res.score.item() <= plain.score.item() + 1e-9 and len(res.cuts[0]) > 0
    labels = lp.round_labels(res.mu)[0][0]
    if bool(res.integral[0]):
        assert is_connected(labels.eq(1).nonzero().squeeze(1).tolist(), edges)
    assert res.fractional_fraction.item() < 0.05


def test_score_gradient_is_the_solution():
    unary, pairwise = random_potentials(5, 5, 2, 3)
    unary.requires_grad_()
    pairwise.requires_grad_()
    res = lp.map_lp(unary, pairwise, FIVE_CYCLE, connected=[1])
    res.score.sum().backward()
    torch.testing.assert_close(unary.grad, res.mu[0])
    torch.testing.assert_close(pairwise.grad, res.mu_edges[0])


def test_batch_and_dtype_device_follow_inputs():
    unary, pairwise = random_potentials(5, 5, 3, 4)
    batch = torch.stack([unary, -unary]).float()
    res = lp.map_lp(batch, pairwise.float(), FIVE_CYCLE)
    assert res.mu.shape == (2, 5, 3) and res.mu.dtype == torch.float32 and res.mu_edges.shape == (2, 5, 3, 3)
    single = lp.map_lp(-unary, pairwise, FIVE_CYCLE)
    assert res.score[1].item() == pytest.approx(single.score.item(), abs=1e-4)


def test_grid_edges():
    e = lp.grid_edges(2, 3)
    assert e.tolist() == [[0, 1], [1, 2], [3, 4], [4, 5], [0, 3], [1, 4], [2, 5]]
    assert len(lp.grid_edges(3, 3, connectivity=8)) == 12 + 8
    with pytest.raises(ValueError, match="connectivity must be 4 or 8"):
        lp.grid_edges(2, 2, connectivity=6)


@pytest.mark.parametrize(
    "edges, pairwise_shape, kwargs, exc, message",
    [
        (torch.tensor([[0, 5]]), (1, 2, 2), {}, ValueError, r"edges must index nodes in \[0, V\) = \[0, 3\)"),
        (torch.tensor([[1, 1]]), (1, 2, 2), {}, ValueError, "self-loop"),
        (torch.tensor([[0, 1], [0, 1]]), (2, 2, 2), {}, ValueError, "duplicate edge"),
        (torch.tensor([[1, 0]]), (1, 2, 2), {}, ValueError, "i < j"),
        (torch.tensor([[0.0, 1.0]]), (1, 2, 2), {}, TypeError, "edges must be an integer tensor"),
        (torch.tensor([0, 1]), (1, 2, 2), {}, ValueError, r"edges must have shape \(E, 2\)"),
        (torch.tensor([[0, 1]]), (1, 2, 3), {}, ValueError, r"pairwise must have shape \(E, L, L\) = \(1, 2, 2\)"),
        (torch.tensor([[0, 1]]), (1, 2, 2), {"connected": [2]}, ValueError, r"connected labels must be ints in \[0, L\)"),
        (torch.tensor([[0, 1]]), (1, 2, 2), {"connected": [0.7]}, ValueError, "connected labels must be ints"),
        (torch.tensor([[0, 1]]), (1, 2, 2), {"connected_soft": {1: float("inf")}}, ValueError, r"finite number in \[0, inf\)"),
        (torch.tensor([[0, 1]]), (1, 2, 2), {"connected_soft": {1: -1.0}}, ValueError, r"weights must be a finite number in \[0, inf\)"),
        (torch.tensor([[0, 1]]), (1, 2, 2), {"connected": [1], "connected_soft": {1: 1.0}}, ValueError, "both"),
    ],
)
def test_bad_input(edges, pairwise_shape, kwargs, exc, message):
    with pytest.raises(exc, match=message):
        lp.map_lp(torch.zeros(3, 2), torch.zeros(pairwise_shape), edges, **kwargs)


def test_nan_potentials_and_infeasible_lp():
    unary = torch.zeros(3, 2)
    unary[1, 0] = float("nan")
    with pytest.raises(ValueError, match="unary contains NaN"):
        lp.map_lp(unary, torch.zeros(1, 2, 2), torch.tensor([[0, 1]]))
    # one label, a disconnected graph and hard connectivity: no feasible labeling
    with pytest.raises(RuntimeError, match="HiGHS status 'Infeasible'"):
        lp.map_lp(torch.zeros(3, 1), torch.zeros(1, 1, 1), torch.tensor([[0, 1]]), connected=[0])
    with pytest.raises(ValueError, match=r"y must lie in \[0, 1\]"):
        lp.connectivity_cut(torch.tensor([0.5, 1.5]), torch.zeros(0, 2, dtype=torch.long))


def test_round_labels():
    mu = torch.tensor([[[1.0, 0.0], [0.5, 0.5], [0.0, 1.0], [0.2, 0.8]]])
    labels, frac = lp.round_labels(mu)
    assert labels.tolist() == [[0, 0, 1, 1]] and frac.item() == pytest.approx(0.5)


CUTS = [(1, 0, 2, [1])]


@pytest.mark.parametrize("solver", ["qp", "cvxpylayers"])
@pytest.mark.parametrize("L", [2, 3])
def test_layer_matches_cvxpy_and_the_lp(L, solver):
    torch.manual_seed(L)
    unary, pairwise = 0.5 * torch.randn(5, L, dtype=torch.float64), 0.5 * torch.randn(5, L, L, dtype=torch.float64)
    layer = lp.MAPRelaxation(FIVE_CYCLE, L, smoothing=0.5, solver=solver)
    for cuts in ((), CUTS):
        torch.testing.assert_close(layer(unary, pairwise, cuts=list(cuts))[0],
                                   cvxpy_smoothed(unary, pairwise, FIVE_CYCLE, 0.5, cuts), atol=1e-4, rtol=0)
    unary, pairwise = random_potentials(5, 5, L, 1)  # tiny smoothing: the LP solution, with and without cuts
    sharp = lp.MAPRelaxation(FIVE_CYCLE, L, smoothing=1e-4, solver=solver)
    for kwargs in ({}, {"connected": [1]}):
        res = lp.map_lp(unary, pairwise, FIVE_CYCLE, **kwargs)
        if bool(res.integral[0]):
            torch.testing.assert_close(sharp(unary, pairwise, cuts=res.cuts), res.mu, atol=1e-3, rtol=0)


@pytest.mark.parametrize("solver", ["qp", "cvxpylayers"])
@pytest.mark.parametrize("L", [2, 3])
def test_layer_gradients_match_finite_differences_of_plain_cvxpy(L, solver):
    torch.manual_seed(L)
    layer = lp.MAPRelaxation(FIVE_CYCLE, L, smoothing=1.0, solver=solver)
    unary = 0.5 * torch.randn(5, L, dtype=torch.float64, requires_grad=True)
    pairwise = 0.5 * torch.randn(5, L, L, dtype=torch.float64, requires_grad=True)
    weights = torch.randn(5, L, dtype=torch.float64)
    gu, gp = torch.autograd.grad((layer(unary, pairwise, cuts=CUTS)[0] * weights).sum(), (unary, pairwise))
    assert gu.abs().max() > 1e-2  # smoothing makes the solution move with the potentials

    def plain(u, p):
        return float((cvxpy_smoothed(u, p, FIVE_CYCLE, 1.0, CUTS) * weights).sum())

    for x, g, idx in ((unary, gu, 0), (pairwise, gp, 1)):
        flat = x.detach().reshape(-1)
        for k in range(0, flat.numel(), 3):
            args = [unary.detach(), pairwise.detach()]
            step = torch.zeros_like(flat)
            step[k] = 1e-4
            args[idx] = (flat + step).view_as(x)
            up = plain(*args)
            args[idx] = (flat - step).view_as(x)
            fd = (up - plain(*args)) / 2e-4
            # diffcp's adjoint uses LSQR: about 3 correct digits
            assert fd == pytest.approx(float(g.reshape(-1)[k]), abs=5e-3, rel=2e-2)


def test_layer_bad_input():
    layer = lp.MAPRelaxation(FIVE_CYCLE, 2, max_cuts=1)
    with pytest.raises(ValueError, match="2 cuts do not fit the cut block of max_cuts = 1"):
        layer(torch.zeros(5, 2), torch.zeros(5, 2, 2), cuts=[(1, 0, 2, [1]), (1, 0, 3, [4])])
    with pytest.raises(ValueError, match="V = 5 nodes and L = 2 labels"):
        layer(torch.zeros(6, 2), torch.zeros(5, 2, 2))
    with pytest.raises(ValueError, match="num_labels must be an int >= 2"):
        lp.MAPRelaxation(FIVE_CYCLE, 1)


def test_relaxed_hinge_equals_loss_augmented_viterbi_on_chains():
    """On a chain the relaxation is tight: the hinge is that of the exact loss-augmented Viterbi with
    the area weights as position weights."""
    g = torch.Generator().manual_seed(0)
    B, T, L = 3, 6, 3
    unary = torch.randn(B, T, L, generator=g, dtype=torch.float64, requires_grad=True)
    pairwise = torch.randn(B, T - 1, L, L, generator=g, dtype=torch.float64, requires_grad=True)
    target = torch.randint(0, L, (B, T), generator=g)
    area = torch.rand(B, T, generator=g, dtype=torch.float64) + 0.1
    edges = torch.stack([torch.arange(T - 1), torch.arange(1, T)], 1)
    got = lp.relaxed_hinge(unary, pairwise, edges, target, area=area, reduction="none")
    weights = area / area.sum(1, keepdim=True)
    want = st.loss_augmented(unary, pairwise, target, weights=weights)[0].clamp(min=0)
    torch.testing.assert_close(got, want)
    g_got = torch.autograd.grad(got.sum(), (unary, pairwise))
    g_want = torch.autograd.grad(want.sum(), (unary, pairwise))
    for a, b in zip(g_got, g_want, strict=True):
        torch.testing.assert_close(a, b)
    hinge = st.StructuredHingeLoss(reduction="none")
    torch.testing.assert_close(hinge(unary, pairwise, target, edges=edges, weights=area), got)


def test_fit_trains_a_graph_model_with_connectivity():
    """train.fit with RelaxedHingeLoss: a linear node model on a 6x6 grid learns to segment."""
    H = W = 6
    edges = lp.grid_edges(H, W)
    g = torch.Generator().manual_seed(0)
    n = 12
    labels = torch.zeros(n, H * W, dtype=torch.long)
    for k in range(n):
        r, c = int(torch.randint(0, 3, (1,), generator=g)), int(torch.randint(0, 3, (1,), generator=g))
        labels[k].view(H, W)[r:r + 3, c:c + 3] = 1
    x = torch.stack([labels.double() + 0.8 * torch.randn(n, H * W, generator=g, dtype=torch.float64),
                     torch.ones(n, H * W, dtype=torch.float64)], 2)
    data = st.data.SequenceData(x, labels, torch.full((n,), H * W))

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.node = torch.nn.Linear(2, 2, bias=False).double()
            self.edge = torch.nn.Parameter(torch.zeros(2, 2, dtype=torch.float64))

        def forward(self, x):
            return self.node(x), self.edge.expand(len(edges), 2, 2)

    with torch.random.fork_rng():  # the initialization and the batches' order fixed, whatever ran before
        torch.manual_seed(0)
        model = Model()
        loss = lp.RelaxedHingeLoss(edges, connected=[1])
        history = st.train.fit(model, data, loss, epochs=15, batch_size=4, progress=False, metrics=(),
                               optimizer=torch.optim.Adam(model.parameters(), lr=0.1))
    assert history["objective"][-1] < history["objective"][0]
    with torch.no_grad():
        unary, pairwise = model(x)
        res = lp.map_lp(unary, pairwise, edges, connected=[1])
    accuracy = float((lp.round_labels(res.mu)[0] == labels).double().mean())
    assert accuracy > 0.85


def test_nested_cuts_are_disjoint_rings():
    """On the path 0-1-2-3-4 with y = (1, 0, 0, 0, 1), every inner vertex separates 0 from 4 at
    weight 0: nested cuts return all three, nearest to 0, nearest to 4, then the middle one."""
    from structtorch.lp.separation import Separator

    edges = torch.tensor([[0, 1], [1, 2], [2, 3], [3, 4]])
    sep = Separator.build(edges, 5)
    cuts = sep.nested(np.array([1.0, 0.0, 0.0, 0.0, 1.0]), 0, 4, 1e-6, 1e6, 5)
    assert [c[3].tolist() for c in cuts] == [[1], [3], [2]] and all(c[0] == 1.0 for c in cuts)


def enumerated_lp(unary, pairwise, edges, connected=(), soft=None):
    """The LP with every vertex-separator inequality of the connected labels written out."""
    from scipy.optimize import linprog

    from structtorch.lp.relaxation import _constraints

    V, L = unary.shape
    A = _constraints(V, L, edges).toarray()
    n = A.shape[1]
    soft = soft or {}
    labels = list(connected) + list(soft)
    A = np.hstack([A, np.zeros((A.shape[0], len(soft)))])
    rows = []
    for pos, c in enumerate(labels):
        for i, j, S in all_separators(V, edges):
            row = np.zeros(n + len(soft))
            row[[i * L + c, j * L + c]] = 1
            row[[k * L + c for k in S]] = -1
            if c in soft:
                row[n + pos - len(connected)] = -1
            rows.append(row)
    cost = -np.concatenate([unary.reshape(-1).numpy(), pairwise.reshape(-1).numpy(), np.zeros(len(soft))])
    cost[n:] = list(soft.values())
    bounds = [(0, 1)] * n + [(0, None)] * len(soft)
    res = linprog(cost, A_ub=np.array(rows) if rows else None, b_ub=np.ones(len(rows)) if rows else None,
                  A_eq=A, b_eq=np.concatenate([np.ones(V), np.zeros(A.shape[0] - V)]), bounds=bounds, method="highs")
    return -res.fun


@settings(deadline=None, max_examples=30)
@given(graph=lp_graphs(max_nodes=6), L=st_.integers(2, 3), seed=st_.integers(0, 2**31), soft=st_.booleans())
def test_cutting_planes_reach_the_fully_enumerated_lp(graph, L, seed, soft):
    V, edges = graph
    unary, pairwise = random_potentials(V, len(edges), L, seed)
    kwargs = {"connected_soft": {1: 0.7}} if soft else {"connected": [1]}
    res = lp.map_lp(unary, pairwise, edges, **kwargs)
    assert bool(res.converged[0])
    want = enumerated_lp(unary, pairwise, edges, **({"soft": {1: 0.7}} if soft else {"connected": [1]}))
    assert res.score.item() == pytest.approx(want, abs=1e-6)
    again = lp.map_lp(unary, pairwise, edges, cuts=res.cuts[0], max_iter=1, **kwargs)  # cuts keep their slack
    assert again.score.item() == pytest.approx(res.score.item(), abs=1e-7)


def test_soft_slack_offsets_the_violation_only():
    """Regression: with slack 0.3, y = (.7, 1, .5, 1) on a path still violates the cut (1, 3, {2})
    by 0.5 > 0.3 (the slack must not merge y >= 0.7 nodes into the y = 1 components)."""
    from structtorch.lp.separation import Separator

    sep = Separator.build(torch.tensor([[0, 1], [1, 2], [2, 3]]), 4)
    found = sep.violated(np.array([0.7, 1.0, 0.5, 1.0]), 1e-6, offset=0.3)
    assert [(f[1], f[2], f[3].tolist()) for f in found][:1] == [(1, 3, [2])] and found[0][0] == pytest.approx(0.5)


def test_relaxed_hinge_with_connectivity():
    edges = FIVE_CYCLE
    unary, pairwise = random_potentials(5, 5, 2, 8)
    target = torch.tensor([1, 1, 0, 0, 0])
    w = torch.tensor(0.8, dtype=torch.float64, requires_grad=True)
    value = lp.relaxed_hinge(unary, pairwise, edges, target, connected_soft={1: w}, normalize=False)
    res = lp.map_lp(unary + (1 - torch.nn.functional.one_hot(target, 2)), pairwise, edges, connected_soft={1: 0.8})
    (grad,) = torch.autograd.grad(value, w)
    if value.item() > 0:
        assert grad.item() == pytest.approx(-res.slack[0, 0].item(), abs=1e-9)  # target connected: phi = 0
    split = torch.tensor([1, 0, 1, 0, 0])  # nodes 0 and 2 are not adjacent
    with pytest.raises(ValueError, match="target row 0 splits label 1"):
        lp.relaxed_hinge(unary, pairwise, edges, split, connected=[1])
    value, res = lp.relaxed_hinge(unary, pairwise, edges, target, connected=[1], return_result=True)
    assert isinstance(res, lp.LPResult) and bool(res.converged[0]) and value.item() >= 0
    again = lp.relaxed_hinge(unary, pairwise, edges, target, connected=[1], cuts=res.cuts, max_iter=1)
    assert again.item() == pytest.approx(value.item(), abs=1e-9)  # the cuts carry over
    w2 = torch.tensor(0.8, dtype=torch.float64, requires_grad=True)
    value = lp.relaxed_hinge(unary, pairwise, edges, split, connected_soft={1: w2}, normalize=False)
    if value.item() > 0:
        (grad,) = torch.autograd.grad(value, w2)
        res = lp.map_lp(unary + (1 - torch.nn.functional.one_hot(split, 2)), pairwise, edges,
                        connected_soft={1: 0.8})
        assert grad.item() == pytest.approx(1.0 - res.slack[0, 0].item(), abs=1e-9)  # phi(target) = 1


# --- issue 10: reliability -------------------------------------------------------------------------

PATH5 = lp.grid_edges(1, 5)
ISSUE_UNARY = torch.tensor([[[0, 1], [0, -.5], [0, -.5], [0, -.5], [0, 1.]]])


@pytest.mark.parametrize("kwargs, name", [({"nested": 0}, "nested"), ({"nested": -1}, "nested"),
                                          ({"tol": float("nan")}, "tol")])
def test_issue10_connectivity_options_are_validated(kwargs, name):
    """Issue 10.1: nested <= 0 or tol = nan skipped the separation and claimed a certificate for
    the disconnected labeling {0, 4}."""
    with pytest.raises(ValueError, match=name):
        lp.map_lp(ISSUE_UNARY, torch.zeros(4, 2, 2), PATH5, connected=[1], **kwargs)
    res = lp.map_lp(ISSUE_UNARY, torch.zeros(4, 2, 2), PATH5, connected=[1])
    labels = lp.round_labels(res.mu)[0][0]
    assert bool(res.converged[0]) and bool(res.integral[0])
    assert is_connected(labels.eq(1).nonzero().squeeze(1).tolist(), PATH5)
    assert res.score.item() == pytest.approx(lp_brute(ISSUE_UNARY[0].numpy(), np.zeros((4, 2, 2)), PATH5.numpy(), [1]))


@pytest.mark.parametrize("kwargs, exc, message", [
    ({"max_iter": 0}, ValueError, "max_iter must be an int >= 1"),
    ({"max_iter": 2.0}, TypeError, "max_iter must be an int"),
    ({"max_iter": True}, TypeError, "max_iter must be an int"),
    ({"cuts_per_round": 0}, ValueError, "cuts_per_round must be an int >= 1"),
    ({"nested": 1.5}, TypeError, "nested must be an int"),
    ({"tol": 0.0}, ValueError, r"tol must be a finite number in \(0, inf\)"),
    ({"tol": float("inf")}, ValueError, "tol must be a finite number"),
    ({"tol": 1.0}, ValueError, r"tol must lie in \(0, 1\)"),
    ({"tol": "1e-6"}, TypeError, "tol must be a real number"),
    ({"connected": 1}, TypeError, "connected must be a list"),
    ({"connected_soft": [1]}, TypeError, "connected_soft must be a dict"),
    ({"connected_soft": {1: float("nan")}}, ValueError, "connected_soft weights must be a finite number"),
])
def test_issue10_map_lp_options(kwargs, exc, message):
    with pytest.raises(exc, match=message):
        lp.map_lp(ISSUE_UNARY, torch.zeros(4, 2, 2), PATH5, connected=kwargs.pop("connected", [1]), **kwargs)


def test_issue10_small_costs_are_solved_exactly():
    """Issue 10.2: HiGHS's absolute tolerances took the 1e-8 costs for zeros and returned [1, 1]."""
    res = lp.map_lp(torch.tensor([[[0, 1e-8], [1e-8, 0]]], dtype=torch.float64),
                    torch.zeros(1, 2, 2, dtype=torch.float64), torch.tensor([[0, 1]]))
    assert lp.round_labels(res.mu)[0].tolist() == [[1, 0]]
    assert bool(res.integral[0]) and bool(res.converged[0])
    assert res.score.item() == pytest.approx(2e-8, rel=1e-9)


@pytest.mark.parametrize("scale", [1e-9, 1e9])
@pytest.mark.parametrize("kwargs", [{}, {"connected": [1]}, {"connected_soft": {1: 0.7}}])
def test_issue10_map_lp_is_scale_invariant(scale, kwargs):
    edges = lp.grid_edges(4, 4)
    for seed in range(4):
        unary, pairwise = random_potentials(16, len(edges), 2, seed)
        base = lp.map_lp(unary, pairwise, edges, **kwargs)
        scaled_kwargs = {"connected_soft": {1: 0.7 * scale}} if "connected_soft" in kwargs else kwargs
        res = lp.map_lp(unary * scale, pairwise * scale, edges, **scaled_kwargs)
        torch.testing.assert_close(res.mu, base.mu, atol=1e-6, rtol=0)
        assert res.score.item() / scale == pytest.approx(base.score.item(), rel=1e-7, abs=1e-9)
        assert bool(res.converged[0]) and bool(res.integral[0]) == bool(base.integral[0])


def test_issue10_huge_dynamic_range_is_at_the_solvers_resolution():
    """Scaling by the largest |cost| maps 1e-9 entries next to O(1) ones to about 1e-9, below HiGHS's
    1e-7 tolerance: the O(1) part is solved exactly and the objective is within 1e-7 of the optimum
    (the documented behaviour; the same as without scaling)."""
    edges = torch.tensor([[0, 1], [1, 2], [3, 4], [4, 5]])  # two chains: one O(1), one O(1e-9)
    g = torch.Generator().manual_seed(0)
    unary = torch.randn(6, 2, generator=g, dtype=torch.float64)
    pairwise = torch.randn(4, 2, 2, generator=g, dtype=torch.float64)
    unary[3:] *= 1e-9
    pairwise[2:] *= 1e-9
    res = lp.map_lp(unary, pairwise, edges)
    best = lp_brute(unary.numpy(), pairwise.numpy(), edges.numpy())
    assert best - 1e-7 <= res.score.item() <= best + 1e-7
    big = lp.map_lp(unary[:3], pairwise[:2], edges[:2])
    torch.testing.assert_close(res.mu[0, :3], big.mu[0], atol=1e-6, rtol=0)


@pytest.mark.parametrize("unary_value, pairwise_value, kwargs, name", [
    (1e20, 0.0, {}, "unary"), (-3e20, 0.0, {}, "unary"), (0.0, 1e25, {}, "pairwise"),
    (0.0, 0.0, {"connected_soft": {1: 1e20}}, "connected_soft weights"),
])
def test_issue10_infinite_costs_are_rejected(unary_value, pairwise_value, kwargs, name):
    unary = torch.zeros(5, 2, dtype=torch.float64)
    unary[2, 1] = unary_value
    pairwise = torch.full((4, 2, 2), pairwise_value, dtype=torch.float64)
    with pytest.raises(ValueError, match=f"{name} must be below 1e\\+20 in magnitude"):
        lp.map_lp(unary, pairwise, PATH5, **kwargs)


def test_issue10_empty_batches_and_graphs():
    edges = torch.tensor([[0, 1], [1, 2]])
    res = lp.map_lp(torch.zeros(0, 3, 2), torch.zeros(2, 2, 2), edges, connected=[1])
    assert res.mu.shape == (0, 3, 2) and res.mu_edges.shape == (0, 2, 2, 2) and res.score.shape == (0,)
    assert res.converged.dtype == torch.bool and res.iterations.dtype == torch.long and res.cuts == []
    assert res.integral.shape == res.converged.shape == res.fractional_fraction.shape == (0,)
    none = torch.zeros(0, 2, dtype=torch.long)
    res = lp.map_lp(torch.zeros(2, 0, 3), torch.zeros(0, 3, 3), none, connected_soft={1: 1.0})
    assert res.mu.shape == (2, 0, 3) and res.score.tolist() == [0.0, 0.0]
    assert res.converged.tolist() == [True, True] and res.integral.tolist() == [True, True]
    assert res.fractional_fraction.tolist() == [0.0, 0.0] and res.slack.tolist() == [[0.0], [0.0]]
    assert lp.round_labels(res.mu)[1].tolist() == [0.0, 0.0]  # no NaN fraction for V = 0
    plain = lp.map_lp(torch.zeros(0, 3), torch.zeros(0, 3, 3), none)
    assert lp.stability_range(plain, torch.zeros(0)) == (-math.inf, math.inf)
    assert lp.node_stability(plain).shape == (0,)
    with pytest.raises(ValueError, match="num_nodes is needed when edges is empty"):
        lp.MAPRelaxation(none, 2)


@pytest.mark.parametrize("cuts, exc, message", [
    ([(1, 0, 2)], ValueError, r"each row of cuts must be \(label, i, j, separator\)"),
    ([(1, 0, 2, [1]), 5], ValueError, r"each row of cuts must be \(label, i, j, separator\).*got 5"),
    ([(1, 0, 2, torch.tensor([float("nan")]))], TypeError, "cuts separators must hold integer node indices"),
    ([(1, 0, 2, [1.0])], TypeError, "cuts separators must be integer tensors or lists of ints"),
    ([(1.0, 0, 2, [1])], TypeError, "the label, i and j of a cuts row must be ints"),
    ([[(1, 0, 2, [1])], []], ValueError, "cuts given per instance must hold B = 1 lists"),
    (torch.zeros(3), TypeError, "cuts must be a list of rows"),
    ([(1, 0, 0, [1])], ValueError, "cut rows must be"),
])
def test_issue10_malformed_cuts(cuts, exc, message):
    with pytest.raises(exc, match=message):
        lp.map_lp(torch.zeros(5, 2), torch.zeros(5, 2, 2), FIVE_CYCLE, connected=[1], cuts=cuts)
    target = torch.zeros(5, dtype=torch.long)
    with pytest.raises(exc, match=message):
        lp.relaxed_hinge(torch.zeros(5, 2), torch.zeros(5, 2, 2), FIVE_CYCLE, target, connected=[1], cuts=cuts)
    if not isinstance(cuts, Tensor):
        with pytest.raises(exc, match=message):
            lp.cut_block(cuts, 1, 5, 2, 4, torch.zeros(0))


def test_issue10_cut_rows_as_lists_and_per_instance():
    """A row given as a list is one row (it was read as B = 1 per-instance lists before)."""
    pairwise = torch.zeros(1, 2, 2, dtype=torch.float64)
    pairwise[0, 0, 0] = 2.0
    args = (torch.zeros(2, 2, dtype=torch.float64), pairwise, torch.tensor([[0, 1]]))
    for cuts in ([[0, 0, 1, []]], [[(0, 0, 1, [])]], [(0, 0, 1, np.zeros(0, dtype=np.int64))]):
        assert lp.map_lp(*args, cuts=cuts).score.item() == pytest.approx(1.0)  # the fractional vertex


def test_issue10_nan_cut_block_is_rejected():
    layer = lp.MAPRelaxation(FIVE_CYCLE, 2, max_cuts=2)
    block = torch.zeros(1, 5, 2)
    block[0, 0, 1] = float("nan")
    with pytest.raises(ValueError, match="cuts must be finite"):
        layer(torch.zeros(5, 2), torch.zeros(5, 2, 2), cuts=block)
    with pytest.raises(TypeError, match="cuts must be a real"):
        layer(torch.zeros(5, 2), torch.zeros(5, 2, 2), cuts=block.to(torch.complex64))


@pytest.mark.parametrize("kwargs, exc, message", [
    ({"num_labels": 2.0}, TypeError, "num_labels must be an int"),
    ({"smoothing": float("nan")}, ValueError, "smoothing must be a finite number"),
    ({"max_cuts": 0}, ValueError, "max_cuts must be an int >= 1"),
    ({"num_nodes": 0}, ValueError, "num_nodes must be an int >= 1"),
    ({"solve_method": 3}, TypeError, "solve_method must be a str"),
])
def test_issue10_layer_options(kwargs, exc, message):
    with pytest.raises(exc, match=message):
        lp.MAPRelaxation(FIVE_CYCLE, **{"num_labels": 2, **kwargs})


def test_issue10_stability_index_is_checked():
    res = lp.map_lp(torch.zeros(1, 3, 2), torch.zeros(2, 2, 2), torch.tensor([[0, 1], [1, 2]]))
    d = torch.zeros(res.cost.shape[1])
    with pytest.raises(ValueError, match=r"index must lie in \[0, B\) = \[0, 1\)"):
        lp.stability_range(res, d, index=5)
    with pytest.raises(ValueError, match="index must be an int >= 0"):
        lp.stability_range(res, d, index=-1)
    with pytest.raises(TypeError, match="index must be an int"):
        lp.node_stability(res, index=0.0)


@pytest.mark.parametrize("call, exc, message", [
    (lambda: lp.grid_edges(2.5, 3), TypeError, "H must be an int"),
    (lambda: lp.grid_edges(2, 0), ValueError, "W must be an int >= 1"),
    (lambda: lp.grid_edges(2, 2, connectivity=True), ValueError, "connectivity must be 4 or 8"),
    (lambda: lp.round_labels([[1.0, 0.0]]), TypeError, "mu must be a torch.Tensor"),
    (lambda: lp.round_labels(torch.ones(2, 2, dtype=torch.complex64)), TypeError, "mu must be a real"),
    (lambda: lp.connectivity_cut(torch.ones(2), torch.zeros(0, 2, dtype=torch.long), tol=0), ValueError, "tol must be"),
    (lambda: lp.connectivity_cut(torch.ones(2, 1), torch.zeros(0, 2, dtype=torch.long)), ValueError, r"y must be a \(V,\)"),
    (lambda: lp.relaxed_hinge(torch.zeros(2, 2), torch.zeros(1, 2, 2), torch.tensor([[0, 1]]),
                              torch.zeros(2, dtype=torch.long), reduction="avg"), ValueError, "reduction must be one of"),
])
def test_issue10_unclear_errors(call, exc, message):
    with pytest.raises(exc, match=message):
        call()


def test_issue10_lp_calls_print_nothing():
    """Issue 10.6: the HiGHS banner went to stdout on the first solve of each process (highspy.Highs
    sets its callback in its constructor, before output_flag can be turned off)."""
    code = (
        "import torch\n"
        "from structtorch import lp\n"
        "res = lp.map_lp(torch.zeros(3, 2), torch.zeros(2, 2, 2), torch.tensor([[0, 1], [1, 2]]), connected=[1])\n"
        "mc = lp.multicut(lp.all_pairs(3), torch.tensor([1.0, -1.0, 1.0]))\n"
        "assert mc.integral and bool(res.integral[0])\n"
        "lp.stability_range(mc, torch.ones(3))\n"
        "lp.stability_range(res, torch.ones(res.cost.shape[1]))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
