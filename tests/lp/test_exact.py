"""Connected labelings: exact MAP by branch and cut (lp.map_exact) against brute force, and the
rounding that keeps every connectivity constraint (lp.round_connected)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from brute import is_connected, labeling_score, lp_brute, lp_graphs, random_potentials
from hypothesis import given, settings
from hypothesis import strategies as st_
from scipy.sparse.csgraph import connected_components

from structtorch import lp


def two_blobs(H=6, W=6):
    """The issue's toy: two blobs that want label 1 (unary +2 inside, -1 outside, Potts 0.2)."""
    edges = lp.grid_edges(H, W)
    u = torch.full((H, W), -1.0, dtype=torch.float64)
    u[0:2, 0:2] = 2
    u[4:6, 4:6] = 2
    unary = torch.stack([torch.zeros(H * W, dtype=torch.float64), u.reshape(-1)], 1)
    pairwise = torch.tensor([[0.2, 0.0], [0.0, 0.2]], dtype=torch.float64).expand(len(edges), 2, 2)
    return unary, pairwise, edges


def keeps(labels, edges, connected):
    labels = labels.numpy()
    return all(is_connected(np.flatnonzero(labels == c).tolist(), edges) for c in connected)


@st_.composite
def connected_problems(draw, max_nodes=6):
    V, edges = draw(lp_graphs(max_nodes=max_nodes))
    L = draw(st_.integers(2, 3))
    connected = draw(st_.lists(st_.integers(0, L - 1), min_size=0, max_size=L, unique=True))
    return V, edges, L, sorted(connected), draw(st_.integers(0, 2**31)), draw(st_.booleans())


def graph_components(V, edges):
    adj = lp.rounding.adjacency(edges, V)
    return connected_components(adj, directed=False)[0]


@settings(deadline=None, max_examples=60)
@given(connected_problems())
def test_exact_map_is_the_best_connected_labeling(problem):
    """Against every labeling (those with each connected label's nodes connected): the same score,
    a labeling that keeps the constraints, a certificate (bound = score)."""
    V, edges, L, connected, seed, integer = problem
    unary, pairwise = random_potentials(V, len(edges), L, seed, integer)
    best = lp_brute(unary.numpy(), pairwise.numpy(), edges.numpy(), connected)
    if not np.isfinite(best):  # every label connected, more graph components than labels
        with pytest.raises(ValueError, match="connected"):
            lp.map_exact(unary, pairwise, edges, connected=connected)
        return
    res = lp.map_exact(unary, pairwise, edges, connected=connected, num_workers=1)
    labels = res.labels[0]
    assert bool(res.optimal[0]) and keeps(labels, edges, connected)
    assert res.score.item() == pytest.approx(best, abs=1e-6)
    assert labeling_score(unary.numpy(), pairwise.numpy(), edges.numpy(), labels.numpy()) == pytest.approx(
        res.score.item(), abs=1e-9)
    assert res.bound.item() == pytest.approx(best, abs=1e-6) and res.gap.item() <= 1e-6


@settings(deadline=None, max_examples=80)
@given(connected_problems(max_nodes=8), st_.floats(0.0, 1.0))
def test_rounding_never_breaks_a_connectivity_constraint(problem, sharpness):
    """Any node variables (one-hot to uniform): the rounded labeling keeps every constraint, or the
    call says that none can (every label connected, more graph components than labels)."""
    V, edges, L, connected, seed, _ = problem
    g = torch.Generator().manual_seed(seed)
    mu = torch.softmax(torch.randn(2, V, L, generator=g, dtype=torch.float64) / max(1 - sharpness, 1e-3), 2)
    feasible = len(connected) < L or graph_components(V, edges) <= L
    if not feasible:
        with pytest.raises(ValueError, match="no labeling keeps every label of connected"):
            lp.round_connected(mu, edges, connected)
        return
    labels = lp.round_connected(mu, edges, connected)
    assert labels.shape == (2, V) and labels.dtype == torch.long
    for row in labels:
        assert keeps(row, edges, connected)
    # labels the constraints never touched keep their largest marginal where it is not connected
    plain = lp.round_labels(mu)[0]
    free = ~torch.isin(plain, torch.tensor(connected))
    assert torch.equal(labels[free], plain[free])


def test_the_two_blobs_get_a_connected_labeling_and_its_gap():
    unary, pairwise, edges = two_blobs()
    relaxed = lp.map_lp(unary, pairwise, edges, connected=[1])
    assert not bool(relaxed.integral[0])  # a fractional band joins the blobs
    plain = lp.round_labels(relaxed.mu)[0]
    assert not keeps(plain[0], edges, [1])  # the largest marginal: two blobs, the forbidden answer
    rounded = lp.round_connected(relaxed.mu, edges, [1])
    assert keeps(rounded[0], edges, [1])
    rounded_score = lp.labeling_score(unary, pairwise, edges, rounded)
    exact = lp.map_exact(unary, pairwise, edges, connected=[1])
    assert bool(exact.optimal[0]) and keeps(exact.labels[0], edges, [1])
    assert rounded_score.item() <= exact.score.item() + 1e-9 <= relaxed.score.item() + 2e-9
    assert exact.score.item() == pytest.approx(19.8)  # the blobs joined by a path of label 1
    assert exact.bound.item() == pytest.approx(exact.score.item())


def test_limits_return_the_best_connected_labeling_with_its_gap():
    """A node limit of 1 (no branching) on a noisy instance that needs branching: a connected
    labeling, a valid bound above its score, no certificate; without the limit, the optimum."""
    g = torch.Generator().manual_seed(0)
    H = W = 7
    edges = lp.grid_edges(H, W)
    unary = torch.randn(H * W, 3, generator=g, dtype=torch.float64)
    pairwise = (0.3 * torch.eye(3, dtype=torch.float64)).expand(len(edges), 3, 3)
    res = lp.map_exact(unary, pairwise, edges, connected=[1, 2], node_limit=1, max_rounds=2)
    assert keeps(res.labels[0], edges, [1, 2]) and not bool(res.optimal[0])
    rounded = lp.round_connected(lp.map_lp(unary, pairwise, edges, connected=[1, 2]).mu, edges, [1, 2])
    # the incumbent is the best connected labeling met: never below the LP's connected rounding
    assert res.score.item() >= lp.labeling_score(unary, pairwise, edges, rounded).item() - 1e-9
    full = lp.map_exact(unary, pairwise, edges, connected=[1, 2])
    assert bool(full.optimal[0]) and full.score.item() >= res.score.item() - 1e-9
    assert res.bound.item() >= full.score.item() - 1e-6 and res.gap.item() > 1e-3
    assert res.gap.item() == pytest.approx(res.bound.item() - res.score.item(), abs=1e-12)
    assert lp.labeling_score(unary, pairwise, edges, res.labels).item() == pytest.approx(res.score.item())
    quick = lp.map_exact(unary, pairwise, edges, connected=[1, 2], time_limit=1e-3)
    assert keeps(quick.labels[0], edges, [1, 2]) and quick.bound.item() >= quick.score.item() - 1e-9


def test_batches_integral_lps_and_bad_arguments():
    unary, pairwise, edges = two_blobs()
    batch = torch.stack([unary, unary.flip(0)])
    res = lp.map_exact(batch, pairwise, edges, connected=[1], num_workers=2)
    assert res.labels.shape == (2, 36) and res.optimal.all()
    assert res.score[0].item() == pytest.approx(res.score[1].item())
    plain = lp.map_exact(unary, pairwise, edges)  # no constraint: the LP on a bipartite Potts grid
    assert bool(plain.integral_lp[0]) and int(plain.solves[0]) == 0
    assert plain.score.item() == pytest.approx(lp.map_lp(unary, pairwise, edges).score.item())
    with pytest.raises(ValueError, match="connected labels must be ints"):
        lp.map_exact(unary, pairwise, edges, connected=[2])
    with pytest.raises(ValueError, match="time_limit"):
        lp.map_exact(unary, pairwise, edges, connected=[1], time_limit=0)
    with pytest.raises(ValueError, match="node_limit"):
        lp.map_exact(unary, pairwise, edges, connected=[1], node_limit=0)
    with pytest.raises(ValueError, match="connected labels must be ints"):
        lp.round_connected(torch.rand(4, 2), lp.grid_edges(2, 2), [5])
    with pytest.raises(TypeError, match="connected must be a list"):
        lp.round_connected(torch.rand(4, 2), lp.grid_edges(2, 2), 1)
    mu = torch.rand(4, 2)  # a label given twice is one constraint
    assert torch.equal(lp.round_connected(mu, lp.grid_edges(2, 2), [1, 1]),
                       lp.round_connected(mu, lp.grid_edges(2, 2), [1]))
    with pytest.raises(ValueError, match="labels must be in"):
        lp.labeling_score(unary, pairwise, edges, torch.full((36,), 2))
    empty = lp.map_exact(torch.zeros(0, 2), torch.zeros(0, 2, 2), torch.zeros(0, 2, dtype=torch.long),
                         connected=[1])
    assert empty.labels.shape == (1, 0) and bool(empty.optimal[0])


def test_the_hinge_and_the_structure_take_the_exact_oracle():
    """relaxed_hinge(exact=True): the hinge of the exact loss-augmented labeling (enumerated), never
    above the relaxation's; GraphStructure(exact=True) decodes the exact MAP."""
    import itertools

    edges = lp.grid_edges(2, 3)
    unary, pairwise = random_potentials(6, len(edges), 2, seed=4)
    target = torch.tensor([1, 1, 1, 0, 0, 0])  # label 1: the first row of the 2x3 grid, connected
    exact = lp.relaxed_hinge(unary, pairwise, edges, target, connected=[1], exact=True, normalize=False)
    relaxed = lp.relaxed_hinge(unary, pairwise, edges, target, connected=[1], normalize=False)
    u, p, e, y = unary.numpy(), pairwise.numpy(), edges.numpy(), target.numpy()
    labelings = [np.array(z) for z in itertools.product(range(2), repeat=6)]
    best = max(labeling_score(u, p, e, z) + float((z != y).sum())
               for z in labelings if is_connected(np.flatnonzero(z == 1).tolist(), edges))
    assert exact.item() == pytest.approx(max(0.0, best - labeling_score(u, p, e, y)), abs=1e-9)
    assert exact.item() <= relaxed.item() + 1e-9
    structure = lp.GraphStructure(unary, pairwise, edges, connected=[1], exact=True)
    assert torch.equal(structure.argmax, lp.map_exact(unary, pairwise, edges, connected=[1]).labels)
    with pytest.raises(ValueError, match="hard connectivity"):
        lp.GraphStructure(unary, pairwise, edges, connected_soft={1: 1.0}, exact=True)
    with pytest.raises(ValueError, match="hard connectivity"):
        lp.relaxed_hinge(unary, pairwise, edges, target, connected_soft={1: 1.0}, exact=True)


def test_a_fractional_result_names_both_ways_out():
    unary, pairwise, edges = two_blobs()
    text = str(lp.map_lp(unary, pairwise, edges, connected=[1]))
    assert "1 fractional" in text and "lp.round_connected" in text and "lp.map_exact" in text
    assert "map_exact" not in str(lp.map_lp(unary, pairwise, edges))  # integral, no constraint
