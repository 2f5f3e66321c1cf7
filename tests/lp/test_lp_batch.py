"""Batches of LP solves in parallel (issue 12, item 4): threads give the sequential results, and
the compiled MAPRelaxation problem is cached per graph structure."""

from __future__ import annotations

import threading

import pytest
import torch

from structtorch import lp
from structtorch.lp._parallel import check_num_workers, parallel_map


def x_mask(H: int) -> torch.Tensor:
    """(H * H,) int64 foreground "X" (one connected component)."""
    r = torch.arange(H).view(H, 1)
    c = torch.arange(H).view(1, H)
    mask = ((r - c).abs() <= 1) | ((r + c - (H - 1)).abs() <= 1)
    return mask.long().reshape(-1)


def denoising_batch(B: int, H: int = 10, sigma: float = 1.0, k: float = 1.0, seed: int = 0):
    """B noisy instances of the connectivity-denoising X (unary 1 - sigma N(0, 1) on the true
    label, attractive Potts edges), float64."""
    g = torch.Generator().manual_seed(seed)
    truth, edges = x_mask(H), lp.grid_edges(H, H)
    V, E = H * H, len(edges)
    unary = torch.zeros(B, V, 2, dtype=torch.float64)
    unary[:, torch.arange(V), truth] = 1 - sigma * torch.randn(B, V, generator=g, dtype=torch.float64)
    pairwise = torch.zeros(B, E, 2, 2, dtype=torch.float64)
    potts = (k / 2) * torch.randn(B, E, generator=g, dtype=torch.float64).abs()
    pairwise[:, :, 0, 1] = pairwise[:, :, 1, 0] = -potts
    return unary, pairwise, edges, truth


def assert_same_result(a: lp.LPResult, b: lp.LPResult) -> None:
    for name in ("mu", "mu_edges", "score", "integral", "fractional_fraction", "iterations", "converged",
                 "slack"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    assert len(a.cuts) == len(b.cuts)
    for rows_a, rows_b in zip(a.cuts, b.cuts, strict=True):
        assert [(c, i, j, S.tolist()) for c, i, j, S in rows_a] == [(c, i, j, S.tolist()) for c, i, j, S in rows_b]


@pytest.mark.parametrize("options", [{}, {"connected": [1]}, {"connected_soft": {1: 0.3}}])
def test_map_lp_threads_equal_sequential(options):
    unary, pairwise, edges, _ = denoising_batch(6)
    seq = lp.map_lp(unary, pairwise, edges, num_workers=1, **options)
    par = lp.map_lp(unary, pairwise, edges, num_workers=3, **options)
    assert_same_result(seq, par)
    if options:  # the instances need cuts: the threads ran real cutting-plane loops
        assert int(seq.iterations.max()) > 1
        assert sum(len(rows) for rows in seq.cuts) > 0
    default = lp.map_lp(unary, pairwise, edges, **options)  # torch.get_num_threads() threads
    assert_same_result(seq, default)


def test_map_lp_threads_keep_batch_order_with_start_cuts():
    unary, pairwise, edges, _ = denoising_batch(4, seed=3)
    first = lp.map_lp(unary, pairwise, edges, connected=[1], num_workers=1)
    # each instance restarts from its own cuts: a mix-up of the batch order would show
    seq = lp.map_lp(unary, pairwise, edges, connected=[1], cuts=first.cuts, num_workers=1)
    par = lp.map_lp(unary, pairwise, edges, connected=[1], cuts=first.cuts, num_workers=4)
    assert_same_result(seq, par)
    assert torch.equal(par.mu, first.mu)
    assert bool((par.iterations == 1).all())  # the cuts of the first run suffice


def test_relaxed_hinge_threads_equal_sequential():
    unary, pairwise, edges, truth = denoising_batch(5, seed=1)
    target = truth.expand(5, -1).clone()
    values, grads = [], []
    for workers in (1, 2):
        u = unary.clone().requires_grad_()
        soft = torch.tensor(0.4, dtype=torch.float64, requires_grad=True)
        loss = lp.relaxed_hinge(u, pairwise, edges, target, connected_soft={1: soft}, reduction="none",
                                num_workers=workers)
        loss.sum().backward()
        values.append(loss.detach())
        grads.append((u.grad, soft.grad))
    assert torch.equal(values[0], values[1])
    assert bool((values[0] > 0).any())
    assert torch.equal(grads[0][0], grads[1][0]) and torch.equal(grads[0][1], grads[1][1])
    module = lp.RelaxedHingeLoss(edges, connected=[1], num_workers=2)
    assert torch.equal(module(unary, pairwise, target),
                       lp.relaxed_hinge(unary, pairwise, edges, target, connected=[1], num_workers=1))


@pytest.mark.parametrize("bad, error", [(0, ValueError), (-2, ValueError), (1.5, TypeError), (True, TypeError),
                                        ("2", TypeError)])
def test_bad_num_workers_named(bad, error):
    unary, pairwise, edges, truth = denoising_batch(2, H=4)
    with pytest.raises(error, match="num_workers"):
        lp.map_lp(unary, pairwise, edges, num_workers=bad)
    with pytest.raises(error, match="num_workers"):
        lp.relaxed_hinge(unary, pairwise, edges, truth.expand(2, -1).clone(), num_workers=bad)
    with pytest.raises(error, match="num_workers"):
        lp.MAPRelaxation(edges, 2, num_workers=bad)


def test_num_workers_default_and_pool_runs_concurrently():
    assert check_num_workers(None) == torch.get_num_threads()
    assert check_num_workers(3) == 3
    # two items that each wait for the other: finishes only when both run at the same time
    barrier = threading.Barrier(2, timeout=20)
    names = parallel_map(lambda x: (barrier.wait(), threading.current_thread().name)[1], [0, 1], 2)
    assert len(set(names)) == 2 and all(n.startswith("structtorch-lp") for n in names)
    assert parallel_map(lambda x: x * x, range(7), 3) == [0, 1, 4, 9, 16, 25, 36]
    assert parallel_map(lambda x: threading.current_thread().name, [0, 1], 1) == [threading.current_thread().name] * 2


def test_parallel_map_raises_the_first_error_in_batch_order():
    def fn(x):
        if x >= 2:
            raise ValueError(f"item {x}")
        return x

    with pytest.raises(ValueError, match="item 2"):
        parallel_map(fn, range(5), 2)


def test_map_relaxation_compiled_problem_cached_per_structure():
    lp.MAPRelaxation.cache_clear()
    edges = lp.grid_edges(3, 3)
    assert lp.MAPRelaxation(edges, 2, max_cuts=2).layer is None  # the default QP path compiles nothing
    assert lp.MAPRelaxation.cache_info().misses == 0
    first = lp.MAPRelaxation(edges, 2, max_cuts=2, solver="cvxpylayers")
    info = lp.MAPRelaxation.cache_info()
    assert (info.hits, info.misses, info.currsize) == (0, 1, 1)
    second = lp.MAPRelaxation(edges.clone(), 2, max_cuts=2, num_workers=1, solver="cvxpylayers")  # same structure, new tensor
    info = lp.MAPRelaxation.cache_info()
    assert (info.hits, info.misses, info.currsize) == (1, 1, 1)
    assert second.layer.ctx is first.layer.ctx  # the compiled problem, not rebuilt
    assert second.layer is not first.layer and second.layer._buffers is not first.layer._buffers
    assert second.layer.A is first.layer.A  # buffers shared until one layer is moved
    # every part of the structure is part of the key
    cvx = {"solver": "cvxpylayers"}
    others = [lp.MAPRelaxation(edges, 2, max_cuts=2, smoothing=0.1, **cvx), lp.MAPRelaxation(edges, 2, max_cuts=3, **cvx),
              lp.MAPRelaxation(edges, 3, max_cuts=2, **cvx), lp.MAPRelaxation(edges[:-1], 2, max_cuts=2, num_nodes=9, **cvx),
              lp.MAPRelaxation(edges, 2, max_cuts=2, num_nodes=10, **cvx),
              lp.MAPRelaxation(edges, 2, max_cuts=2, solve_method="SCS", **cvx)]
    info = lp.MAPRelaxation.cache_info()
    assert (info.hits, info.misses, info.currsize) == (1, 7, 7)
    assert len({id(m.layer.ctx) for m in [first, *others]}) == 7
    # the cached layer gives the results of the first one, also on another number of threads
    g = torch.Generator().manual_seed(0)
    unary = torch.randn(3, 9, 2, generator=g, dtype=torch.float64)
    pairwise = torch.zeros(len(edges), 2, 2, dtype=torch.float64)
    pairwise[:, 0, 0] = pairwise[:, 1, 1] = 0.5
    mu1, mu2 = first(unary, pairwise), second(unary, pairwise)
    assert torch.equal(mu1, mu2)
    assert torch.allclose(mu1.sum(2), torch.ones(3, 9, dtype=torch.float64))
    # moving one layer's buffers leaves the other's
    second.layer.A = second.layer.A.to(torch.float32)
    assert first.layer.A.dtype == torch.float64
    lp.MAPRelaxation.cache_clear()
    assert lp.MAPRelaxation.cache_info().currsize == 0
    assert first.layer.ctx is second.layer.ctx  # built layers keep their problem


@pytest.mark.parametrize("solver", ["qp", "cvxpylayers"])
def test_map_relaxation_num_workers_same_gradients(solver):
    edges = lp.grid_edges(3, 3)
    g = torch.Generator().manual_seed(1)
    unary = torch.randn(4, 9, 2, generator=g, dtype=torch.float64)
    pairwise = torch.zeros(len(edges), 2, 2, dtype=torch.float64)
    pairwise[:, 0, 0] = pairwise[:, 1, 1] = 0.3
    out = []
    for workers in (1, 2):
        layer = lp.MAPRelaxation(edges, 2, smoothing=0.1, max_cuts=2, num_workers=workers, solver=solver)
        u = unary.clone().requires_grad_()
        mu = layer(u, pairwise)
        (mu[..., 1] * torch.arange(9, dtype=torch.float64)).sum().backward()
        out.append((mu.detach(), u.grad))
    assert torch.equal(out[0][0], out[1][0])
    assert torch.equal(out[0][1], out[1][1])
    assert float(out[0][1].abs().sum()) > 1e-3  # smoothed: real gradients
