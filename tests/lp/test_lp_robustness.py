"""Property tests of the structtorch.lp contract under bad and extreme input (issue 10).

Every public entry point either raises a ValueError/TypeError whose message names the offending
argument, or returns the reference answer: brute-force enumeration for tiny instances, the
unscaled solution for instances scaled by 1e-9 .. 1e9, the trivial result for empty sizes.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from brute import (
    FIVE_CYCLE,
    brute_range,
    is_connected,
    lp_brute,
    lp_graphs,
    multicut_problems,
    partition_vectors,
    random_potentials,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st_

from structtorch import lp
from structtorch.lp.clustering import all_pairs

FAST = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ERRORS = (ValueError, TypeError)

# values that are never valid for an option; each test adds the ones particular to its option
NOT_NUMBERS = st_.sampled_from(["3", [1], {}, 1j, torch.ones(2)])  # None is a valid default of some options
BAD_INTS = st_.one_of(st_.integers(max_value=0), st_.floats(allow_nan=True), st_.booleans(), NOT_NUMBERS)
BAD_TOLS = st_.one_of(st_.floats(max_value=0.0), st_.floats(min_value=1.0), st_.just(float("nan")),
                      st_.booleans(), NOT_NUMBERS, st_.none())
SCALES = st_.floats(-9.0, 9.0).map(lambda e: 10.0 ** e)


def raises_naming(name: str, call) -> None:
    """``call()`` raises a ValueError or TypeError whose message names ``name``."""
    with pytest.raises(ERRORS) as info:
        call()
    assert name in str(info.value), f"{name!r} not in {info.value!r}"


def path_problem():
    return torch.zeros(5, 2, dtype=torch.float64), torch.zeros(4, 2, 2, dtype=torch.float64), lp.grid_edges(1, 5)


@FAST
@given(option=st_.sampled_from(["max_iter", "cuts_per_round", "nested", "tol"]), data=st_.data())
def test_map_lp_rejects_bad_options(option, data):
    value = data.draw(BAD_TOLS if option == "tol" else BAD_INTS)
    unary, pairwise, edges = path_problem()
    raises_naming(option, lambda: lp.map_lp(unary, pairwise, edges, connected=[1], **{option: value}))


@FAST
@given(where=st_.sampled_from(["unary", "pairwise"]),
       value=st_.sampled_from([float("nan"), float("inf"), -float("inf"), 1e20, -1e30]),
       batched=st_.booleans())
def test_map_lp_rejects_non_finite_and_huge_potentials(where, value, batched):
    unary, pairwise, edges = path_problem()
    target = unary if where == "unary" else pairwise
    target.view(-1)[3] = value
    if batched:
        unary, pairwise = unary.expand(2, 5, 2).clone(), pairwise.expand(2, 4, 2, 2).clone()
    raises_naming(where, lambda: lp.map_lp(unary, pairwise, edges))


@FAST
@given(unary_shape=st_.lists(st_.integers(0, 4), min_size=1, max_size=4),
       pairwise_shape=st_.lists(st_.integers(0, 4), min_size=1, max_size=5),
       dtype=st_.sampled_from([torch.float32, torch.float64, torch.int64, torch.complex64, torch.bool]))
def test_map_lp_shapes_and_dtypes(unary_shape, pairwise_shape, dtype):
    """Wrong shapes and dtypes get an error naming the argument; right ones solve (the all-zero
    potentials score 0)."""
    edges = torch.tensor([[0, 1], [1, 2]])
    unary, pairwise = torch.zeros(unary_shape, dtype=dtype), torch.zeros(pairwise_shape, dtype=dtype)
    if not (dtype.is_floating_point and len(unary_shape) in (2, 3) and unary_shape[-1] >= 1):
        raises_naming("unary", lambda: lp.map_lp(unary, pairwise, edges))
        return
    B, V, L = unary_shape if len(unary_shape) == 3 else [1, *unary_shape]
    if V < 3:  # the edges need nodes 0..2
        raises_naming("edges", lambda: lp.map_lp(unary, pairwise, edges))
    elif tuple(pairwise_shape) not in ((2, L, L), (B, 2, L, L)):
        raises_naming("pairwise", lambda: lp.map_lp(unary, pairwise, edges))
    else:
        res = lp.map_lp(unary, pairwise, edges)
        assert res.mu.shape == (B, V, L) and res.score.tolist() == [0.0] * B


@FAST
@given(graph=lp_graphs(max_nodes=5), L=st_.integers(2, 3), seed=st_.integers(0, 2**31), scale=SCALES,
       connected=st_.booleans())
def test_map_lp_matches_brute_force_at_every_scale(graph, L, seed, scale, connected):
    """Scaled instances give the unscaled solution, which matches enumeration when integral."""
    V, edges = graph
    unary, pairwise = random_potentials(V, len(edges), L, seed)
    kwargs = {"connected": [1]} if connected else {}
    base = lp.map_lp(unary, pairwise, edges, **kwargs)
    res = lp.map_lp(unary * scale, pairwise * scale, edges, **kwargs)
    assert bool(res.converged[0]) and bool(base.converged[0])
    assert res.score.item() / scale == pytest.approx(base.score.item(), rel=1e-6, abs=1e-9)
    best = lp_brute(unary.numpy(), pairwise.numpy(), edges.numpy(), [1] if connected else ())
    assert res.score.item() / scale >= best - 1e-7
    if bool(res.integral[0]):
        labels = lp.round_labels(res.mu)[0][0].numpy()
        assert res.score.item() / scale == pytest.approx(best, abs=1e-7)
        assert not connected or is_connected(np.nonzero(labels == 1)[0], edges)


@FAST
@given(B=st_.integers(0, 2), V=st_.integers(0, 3), L=st_.integers(1, 3), soft=st_.booleans())
def test_map_lp_empty_sizes(B, V, L, soft):
    """B = 0 or V = 0 give empty / trivial results; else label 0 (favoured by 1 per node, and
    connected on the path) everywhere."""
    edges = torch.tensor([[0, 1], [1, 2]])[: max(V - 1, 0)]
    kwargs = {"connected_soft": {0: 1.0}} if soft else {"connected": [0]}
    unary = torch.zeros(B, V, L)
    unary[..., 0] = 1.0
    res = lp.map_lp(unary, torch.zeros(len(edges), L, L), edges, **kwargs)
    assert res.mu.shape == (B, V, L) and res.score.shape == res.converged.shape == (B,)
    assert res.score.tolist() == [float(V)] * B and res.converged.tolist() == [True] * B
    assert res.fractional_fraction.tolist() == [0.0] * B and res.integral.tolist() == [True] * B
    assert lp.round_labels(res.mu)[0].tolist() == [[0] * V] * B


@FAST
@given(row=st_.one_of(
    st_.tuples(st_.integers(0, 1), st_.integers(0, 4), st_.integers(0, 4)),  # no separator
    st_.tuples(st_.floats(allow_nan=True), st_.just(0), st_.just(2), st_.just([1])),
    st_.tuples(st_.just(1), st_.just(0), st_.just(2), st_.lists(st_.floats(allow_nan=True), min_size=1)),
    st_.tuples(st_.just(1), st_.just(0), st_.just(2), st_.just(torch.tensor([float("nan")]))),
    st_.tuples(st_.integers(-3, 5), st_.integers(-3, 8), st_.integers(-3, 8), st_.lists(st_.integers(-3, 8))),
    st_.integers(), st_.text(max_size=3),
))
def test_cuts_rows_are_checked(row):
    """Malformed rows name ``cuts``; valid ones (connectivity cuts or not) solve without error."""
    unary, pairwise = torch.zeros(5, 2), torch.zeros(5, 2, 2)
    try:
        res = lp.map_lp(unary, pairwise, FIVE_CYCLE, connected=[1], cuts=[row])
    except ERRORS as exc:
        assert "cut" in str(exc), exc
        return
    c, i, j, S = row
    assert 0 <= c < 2 and 0 <= i < 5 and 0 <= j < 5 and i != j and all(0 <= k < 5 for k in S)
    assert not {i, j} & set(S) and bool(res.converged[0])


@FAST
@given(problem=multicut_problems(max_nodes=6), scale=SCALES, relaxation=st_.sampled_from(lp.RELAXATIONS))
def test_multicut_matches_enumeration_at_every_scale(problem, scale, relaxation):
    V, edges, w, _ = problem
    base = lp.multicut(edges, w, relaxation=relaxation, num_nodes=V)
    res = lp.multicut(edges, w * scale, relaxation=relaxation, num_nodes=V)
    assert res.converged and base.converged and res.integral == base.integral
    assert res.objective / scale == pytest.approx(base.objective, rel=1e-6, abs=1e-12)
    best = float((partition_vectors(edges, V) @ w.numpy()).min())
    assert res.objective / scale <= best + 1e-7
    if res.integral:
        assert res.objective / scale == pytest.approx(best, abs=1e-7)


@FAST
@given(problem=multicut_problems(max_nodes=4, complete=True), scale=SCALES)
def test_stability_range_is_exact_at_every_scale(problem, scale):
    """On K3/K4 LP-CO is the multicut polytope: ranges of w * scale are the exact ones times scale."""
    V, edges, w, d = problem
    res = lp.multicut(edges, w * scale, num_nodes=V)
    Z = partition_vectors(edges, V)
    assert res.integral and res.objective / scale == pytest.approx(float((Z @ w.numpy()).min()), abs=1e-9)
    want = brute_range(Z, w.numpy(), res.z.numpy(), d.numpy())
    for a, b in zip(lp.stability_range(res, d), want, strict=True):
        assert (math.isinf(a) and a == b) or a / scale == pytest.approx(b, rel=1e-6, abs=1e-9)


@FAST
@given(option=st_.sampled_from(["max_iter", "tol", "num_nodes", "weights", "relaxation"]), data=st_.data())
def test_multicut_rejects_bad_arguments(option, data):
    edges, w = all_pairs(3), torch.tensor([1.0, -1.0, 1.0])
    kwargs = {"weights": w}
    if option == "max_iter":
        kwargs[option] = data.draw(BAD_INTS)
    elif option == "tol":
        kwargs[option] = data.draw(BAD_TOLS)
    elif option == "num_nodes":
        kwargs[option] = data.draw(st_.one_of(st_.integers(-5, -1), st_.floats(), NOT_NUMBERS))  # None: default
    elif option == "weights":
        kwargs[option] = data.draw(st_.sampled_from([
            torch.tensor([1.0, -1.0, 1j]), torch.tensor([1.0, float("nan"), 1.0]), torch.tensor([1.0, 1e20, 1.0]),
            torch.ones(2), torch.ones(3, 1), torch.ones(3, dtype=torch.bool), [1.0, -1.0, 1.0], None]))
    else:
        kwargs[option] = data.draw(st_.sampled_from(["cycles", "", None, 3]))
    weights = kwargs.pop("weights")
    raises_naming(option, lambda: lp.multicut(edges, weights, **kwargs))


@FAST
@given(V=st_.integers(0, 5))
def test_multicut_without_edges(V):
    res = lp.multicut(torch.zeros(0, 2, dtype=torch.long), torch.zeros(0), num_nodes=V)
    assert res.converged and res.integral and res.objective == 0.0 and res.iterations == 0
    assert res.clusters.tolist() == list(range(V))
    assert lp.stability_range(res, torch.zeros(0)) == (-math.inf, math.inf)


@FAST
@given(option=st_.sampled_from(["direction", "index", "tol", "max_iter"]), lp_result=st_.booleans(),
       data=st_.data())
def test_stability_range_rejects_bad_arguments(option, lp_result, data):
    if lp_result:
        res = lp.map_lp(torch.tensor([[1.0, 0.0], [0.0, 1.0]]), torch.zeros(1, 2, 2), torch.tensor([[0, 1]]))
    else:
        res = lp.multicut(all_pairs(3), torch.tensor([1.0, -1.0, 1.0]))
    n = res.cost.shape[1] if lp_result else 3
    kwargs = {"direction": torch.ones(n)}
    if option == "direction":
        kwargs[option] = data.draw(st_.sampled_from([
            torch.ones(n + 1), torch.ones(n, 1), torch.ones(n, dtype=torch.complex64), torch.full((n,), float("nan")),
            torch.full((n,), float("inf")), torch.full((n,), 1e21), torch.ones(n, dtype=torch.bool), "d", None]))
    elif option == "index":
        kwargs[option] = data.draw(st_.one_of(st_.integers(-5, -1), st_.integers(1, 50), st_.floats(), NOT_NUMBERS,
                                              st_.none()))
    elif option == "tol":
        kwargs[option] = data.draw(st_.one_of(st_.floats(max_value=0.0), st_.just(float("inf")), NOT_NUMBERS,
                                              st_.none()))
    else:
        kwargs[option] = data.draw(BAD_INTS)
    direction = kwargs.pop("direction")
    raises_naming(option, lambda: lp.stability_range(res, direction, **kwargs))


@FAST
@given(V=st_.integers(0, 6), seed=st_.integers(0, 2**31), tol=st_.one_of(BAD_TOLS, st_.floats(1e-9, 0.5)),
       bad=st_.sampled_from([None, "nan", "above", "below", "complex", "shape"]))
def test_connectivity_cut_contract(V, seed, tol, bad):
    edges = all_pairs(V)[: V]
    y = torch.tensor(np.random.default_rng(seed).random(V))
    if bad == "nan" and V:
        y[0] = float("nan")
    elif bad == "above" and V:
        y[0] = 2.0  # outside [-tol, 1 + tol] for every tol < 1 (1.5 is inside at tol = 0.5)
    elif bad == "below" and V:
        y[0] = -1.0
    elif bad == "complex":
        y = y.to(torch.complex128)
    elif bad == "shape":
        y = y.reshape(V, 1)
    valid_tol = isinstance(tol, float) and 0 < tol < 1
    if bad in ("complex", "shape") or (bad in ("nan", "above", "below") and V):
        raises_naming("y", lambda: lp.connectivity_cut(y, edges, tol=tol if valid_tol else 1e-6))
    if not valid_tol:
        raises_naming("tol", lambda: lp.connectivity_cut(torch.zeros(V), edges, tol=tol))
    if bad is None and valid_tol:
        violation, i, j, S = lp.connectivity_cut(y, edges, tol=tol)
        assert violation == 0.0 or (violation > tol and i < j)
        if i >= 0:
            assert violation == pytest.approx(float(y[i] + y[j] - 1 - y[S].sum()), abs=1e-12)


@FAST
@given(H=st_.one_of(st_.integers(-2, 4), st_.floats(), NOT_NUMBERS, st_.booleans()),
       W=st_.integers(1, 4), connectivity=st_.sampled_from([4, 8, 6, 0, True, "4", None]))
def test_grid_edges_contract(H, W, connectivity):
    valid_H = isinstance(H, int) and not isinstance(H, bool) and H >= 1
    if not valid_H:
        raises_naming("H", lambda: lp.grid_edges(H, W, connectivity))
    elif connectivity not in (4, 8) or isinstance(connectivity, bool):
        raises_naming("connectivity", lambda: lp.grid_edges(H, W, connectivity))
    else:
        edges = lp.grid_edges(H, W, connectivity)
        diagonal = 2 * (H - 1) * (W - 1) if connectivity == 8 else 0
        assert len(edges) == H * (W - 1) + (H - 1) * W + diagonal
        assert bool((edges[:, 0] < edges[:, 1]).all()) and (not len(edges) or int(edges.max()) < H * W)


@FAST
@given(shape=st_.lists(st_.integers(0, 3), min_size=0, max_size=4),
       dtype=st_.sampled_from([torch.float32, torch.float64, torch.int64, torch.complex64]),
       nan=st_.booleans())
def test_round_labels_contract(shape, dtype, nan):
    mu = torch.rand(shape).to(dtype) if dtype != torch.int64 else torch.randint(0, 2, shape)
    if nan and mu.numel() and dtype.is_floating_point:
        mu.view(-1)[0] = float("nan")
    nan = nan and mu.numel() > 0 and dtype.is_floating_point
    if dtype.is_complex or len(shape) not in (2, 3) or nan or shape[-1] == 0:
        raises_naming("mu", lambda: lp.round_labels(mu))
        return
    labels, frac = lp.round_labels(mu)
    B = shape[0] if len(shape) == 3 else 1
    assert labels.shape == (B, shape[-2]) and frac.shape == (B,)
    assert bool(((frac >= 0) & (frac <= 1)).all())


@FAST
@given(option=st_.sampled_from(["num_labels", "smoothing", "max_cuts", "num_nodes"]),
       data=st_.data())
def test_map_relaxation_rejects_bad_options(option, data):
    if option == "smoothing":
        value = data.draw(st_.one_of(st_.floats(max_value=-1e-12), st_.sampled_from([float("nan"), float("inf")]),
                                     NOT_NUMBERS))
    elif option == "num_labels":
        value = data.draw(st_.one_of(st_.integers(-3, 1), st_.floats(), NOT_NUMBERS, st_.booleans()))
    else:
        value = data.draw(BAD_INTS)
    kwargs = {"num_labels": 2, option: value}
    raises_naming(option, lambda: lp.MAPRelaxation(FIVE_CYCLE, **kwargs))
