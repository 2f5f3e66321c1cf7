"""MAPRelaxation's QP path (Clarabel, active-set polish, exact implicit backward) against a direct
cvxpy formulation of the smoothed relaxation, the cvxpylayers path and its own central differences:
random graphs and potentials, attractive and mixed couplings, with and without cut rows."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from brute import FIVE_CYCLE, cvxpy_smoothed, lp_graphs
from hypothesis import given, settings
from hypothesis import strategies as st_

from structtorch import lp


@st_.composite
def graphs(draw, max_nodes=6):
    """(V, edges): a random graph (brute.lp_graphs) or a small grid."""
    if draw(st_.booleans()):
        return draw(lp_graphs(max_nodes=max_nodes))
    h, w = draw(st_.integers(1, 3)), draw(st_.integers(2, 3))
    return h * w, lp.grid_edges(h, w)


def potentials(V, E, L, seed, coupling):
    """(unary (V, L), pairwise (E, L, L)) float64: Gaussian unaries; Potts couplings of random
    strength ("attractive"), or Gaussian pairwise scores ("mixed")."""
    g = torch.Generator().manual_seed(seed)
    unary = torch.randn(V, L, generator=g, dtype=torch.float64)
    if coupling == "attractive":
        strength = torch.rand(E, 1, 1, generator=g, dtype=torch.float64)
        pairwise = strength * torch.eye(L, dtype=torch.float64)
    else:
        pairwise = torch.randn(E, L, L, generator=g, dtype=torch.float64)
    return unary, pairwise


def random_cuts(V, L, seed, k):
    """k rows (label, i, j, separator) on one label plane: any set of them is a satisfiable
    constraint with an interior point (small mu on the plane), as connectivity cuts are."""
    rng = np.random.default_rng(seed)
    label = int(rng.integers(L))
    rows = []
    for _ in range(k if V >= 2 else 0):
        i, j = rng.choice(V, 2, replace=False)
        rest = [v for v in range(V) if v not in (i, j)]
        S = rng.choice(rest, rng.integers(0, len(rest) + 1), replace=False) if rest else []
        rows.append((label, int(i), int(j), sorted(int(s) for s in S)))
    return rows


def objective(mu, unary, pairwise, edges, smoothing, mu_edges=None):
    return float((unary * mu).sum() - smoothing / 2 * (mu * mu).sum())


@settings(deadline=None, max_examples=40)
@given(graph=graphs(), L=st_.integers(2, 3), seed=st_.integers(0, 2**31), ncuts=st_.integers(0, 3),
       coupling=st_.sampled_from(["attractive", "mixed"]), smoothing=st_.sampled_from([0.05, 0.5, 2.0]))
def test_qp_layer_equals_the_smoothed_relaxation(graph, L, seed, ncuts, coupling, smoothing):
    V, edges = graph
    unary, pairwise = potentials(V, len(edges), L, seed, coupling)
    cuts = random_cuts(V, L, seed, ncuts)
    layer = lp.MAPRelaxation(edges, L, num_nodes=V, smoothing=smoothing, max_cuts=4)
    assert layer.solver == "qp"
    mu = layer(unary, pairwise, cuts=cuts)[0]
    ref, value = cvxpy_smoothed(unary, pairwise, edges, smoothing, cuts, return_objective=True)
    torch.testing.assert_close(mu, ref, atol=1e-5, rtol=0)
    # the objective at the layer's node solution, with the best edge variables for it
    found = cvxpy_value_at(mu, unary, pairwise, edges, smoothing, cuts)
    assert found == pytest.approx(value, rel=1e-6, abs=1e-6)


def cvxpy_value_at(mu, unary, pairwise, edges, smoothing, cuts):
    """The smoothed objective with the node variables fixed to ``mu`` (the edge variables
    optimized): equal to the optimum when ``mu`` is the optimal node solution."""
    import cvxpy as cp

    V, L = unary.shape
    E = len(edges)
    obj = float((unary * mu).sum() - smoothing / 2 * (mu * mu).sum())
    if not E:
        return obj
    m = mu.numpy().clip(0, 1)
    mue = cp.Variable((E, L * L))
    cons = [mue >= 0]
    for e, (i, j) in enumerate(edges.tolist()):
        M = cp.reshape(mue[e], (L, L), order="C")
        cons += [cp.sum(M, axis=1) == m[i], cp.sum(M, axis=0) == m[j]]
    problem = cp.Problem(cp.Maximize(cp.sum(cp.multiply(pairwise.reshape(E, -1).numpy(), mue))), cons)
    problem.solve(solver=cp.CLARABEL)
    return obj + problem.value


def one_sided_differences(fn, x, weights, step=1e-6):
    """(forward, backward) differences of sum(weights * fn(x)) along each coordinate of x."""
    flat = x.detach().reshape(-1).clone()
    base = float((fn(x) * weights).sum())
    fwd, bwd = torch.empty_like(flat), torch.empty_like(flat)
    for k in range(flat.numel()):
        up, down = flat.clone(), flat.clone()
        up[k] += step
        down[k] -= step
        fwd[k] = (float((fn(up.view_as(x)) * weights).sum()) - base) / step
        bwd[k] = (base - float((fn(down.view_as(x)) * weights).sum())) / step
    return fwd.view_as(x), bwd.view_as(x)


@settings(deadline=None, max_examples=15)
@given(graph=graphs(max_nodes=5), L=st_.integers(2, 3), seed=st_.integers(0, 2**31),
       coupling=st_.sampled_from(["attractive", "mixed"]), with_cuts=st_.booleans())
def test_qp_gradients_equal_finite_differences(graph, L, seed, coupling, with_cuts):
    """The implicit backward against finite differences of the layer itself (unary, pairwise and
    the cut block's coefficients, perturbed so that integral nodes do not sit exactly on a cut).
    The solution is piecewise affine in them: where both one-sided differences agree (almost
    everywhere) the gradient must equal them to 1e-3; on a kink (a degenerate active set, as the
    local polytope's vertices are) it is the derivative of one of the active sets that meet there
    and must lie between them or within 1e-2 of one."""
    V, edges = graph
    unary, pairwise = potentials(V, len(edges), L, seed, coupling)
    layer = lp.MAPRelaxation(edges, L, num_nodes=V, smoothing=0.7, max_cuts=2)
    g = torch.Generator().manual_seed(seed)
    block = lp.cut_block(random_cuts(V, L, seed, 2 if with_cuts else 0), 1, V, L, 2, unary)[0]
    block = block + 0.05 * torch.randn(block.shape, generator=g, dtype=torch.float64) * (block != 0)
    weights = torch.randn(1, V, L, generator=g, dtype=torch.float64)
    u, p, d = (t.clone().requires_grad_() for t in (unary, pairwise, block))
    (layer(u, p, cuts=d) * weights).sum().backward()
    for x, grad, fn in ((unary, u.grad, lambda t: layer(t, pairwise, cuts=block)),
                        (pairwise, p.grad, lambda t: layer(unary, t, cuts=block)),
                        (block, d.grad, lambda t: layer(unary, pairwise, cuts=t))):
        with torch.no_grad():
            fwd, bwd = one_sided_differences(fn, x, weights)
        tol = 1e-3 * (1 + grad.abs())
        smooth = (fwd - bwd).abs() <= tol
        assert bool(((grad - fwd).abs() <= tol)[smooth].all()), (grad, fwd, bwd)
        loose = 10 * tol
        low, high = torch.minimum(fwd, bwd) - loose, torch.maximum(fwd, bwd) + loose
        assert bool(((grad >= low) & (grad <= high)).all()), (grad, fwd, bwd)


@pytest.mark.parametrize("L, coupling", [(2, "attractive"), (2, "mixed"), (3, "attractive")])
def test_qp_gradients_equal_cvxpylayers(L, coupling):
    """Within 2e-2 (relative norm) of cvxpylayers' gradients, whose own derivative is approximate
    (diffcp's LSQR), with a cut in the block."""
    edges = lp.grid_edges(4, 4)
    unary, pairwise = potentials(16, len(edges), L, 3, coupling)
    unary = unary[None].expand(3, -1, -1) + 0.3 * torch.randn(3, 16, L, generator=torch.Generator().manual_seed(0),
                                                               dtype=torch.float64)
    weights = torch.randn(3, 16, L, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    cuts = [(1, 0, 15, [5, 6, 9]), (0, 3, 12, [6, 9])]
    grads, outs = [], []
    for solver in ("qp", "cvxpylayers"):
        layer = lp.MAPRelaxation(edges, L, smoothing=0.5, max_cuts=2, solver=solver)
        u, p = unary.clone().requires_grad_(), pairwise.clone().requires_grad_()
        mu = layer(u, p, cuts=cuts)
        (mu * weights).sum().backward()
        outs.append(mu.detach())
        grads.append((u.grad, p.grad))
    torch.testing.assert_close(outs[0], outs[1], atol=1e-4, rtol=0)
    for a, b in zip(*grads, strict=True):
        assert float((a - b).norm() / b.norm()) < 2e-2


def test_qp_layer_is_a_gradcheck_clean_autograd_function():
    unary, pairwise = potentials(5, 5, 2, 11, "mixed")
    layer = lp.MAPRelaxation(FIVE_CYCLE, 2, smoothing=1.0)
    torch.autograd.gradcheck(lambda u, p: layer(u, p), (unary.requires_grad_(), pairwise.requires_grad_()),
                             eps=1e-6, atol=1e-5, rtol=1e-3)


def test_qp_layer_edge_cases():
    none = torch.zeros(0, 2, dtype=torch.long)
    layer = lp.MAPRelaxation(none, 2, num_nodes=3, smoothing=1.0)  # no edges: y = clip(1/2 + a / 2s)
    unary = torch.tensor([[0.0, 0.3], [0.2, 0.0], [0.0, -5.0]], dtype=torch.float64, requires_grad=True)
    mu = layer(unary, torch.zeros(0, 2, 2, dtype=torch.float64))
    torch.testing.assert_close(mu[0, :, 1], torch.tensor([0.65, 0.4, 0.0], dtype=torch.float64))
    mu[0, :, 1].sum().backward()
    torch.testing.assert_close(unary.grad, torch.tensor([[-0.5, 0.5], [-0.5, 0.5], [0.0, 0.0]], dtype=torch.float64))
    grid = lp.MAPRelaxation(lp.grid_edges(2, 2), 3)
    assert grid(torch.zeros(0, 4, 3), torch.zeros(4, 3, 3)).shape == (0, 4, 3)  # empty batch
    # an unused row of the block is no constraint; an all-zero row with a negative side is infeasible
    two = lp.MAPRelaxation(lp.grid_edges(2, 2), 2, max_cuts=2)
    assert two(torch.zeros(4, 2), torch.zeros(4, 2, 2), cuts=torch.zeros(2, 4, 2)).shape == (1, 4, 2)
    one_row = torch.zeros(1, 4, 2)
    one_row[0] = 1.0  # sum_i (mu_i(0) + mu_i(1)) = 4 <= 1: no coefficient left on y, right side -3
    with pytest.raises(ValueError, match="smoothed relaxation is infeasible: a row of the cut block"):
        two(torch.zeros(4, 2), torch.zeros(4, 2, 2), cuts=one_row)
    two_rows = torch.zeros(2, 4, 2)
    two_rows[0, :, 1] = two_rows[1, :, 0] = 1.0  # sum_i y_i <= 1 and sum_i (1 - y_i) <= 1
    with pytest.raises(ValueError, match="smoothed relaxation is infeasible: the cut block's rows"):
        two(torch.zeros(4, 2), torch.zeros(4, 2, 2), cuts=two_rows)


def test_qp_layer_solver_option():
    with pytest.raises(ValueError, match="solver must be one of"):
        lp.MAPRelaxation(FIVE_CYCLE, 2, solver="osqp")
    with pytest.raises(ValueError, match="solver='qp' needs smoothing > 0"):
        lp.MAPRelaxation(FIVE_CYCLE, 2, solver="qp", smoothing=0.0)
    assert lp.MAPRelaxation(FIVE_CYCLE, 2, smoothing=0.0).solver == "cvxpylayers"  # auto: the plain LP
    assert "solver='qp'" in repr(lp.MAPRelaxation(FIVE_CYCLE, 2))
    with pytest.raises(ValueError, match="solver='cvxpylayers' needs at least one edge"):
        lp.MAPRelaxation(torch.zeros(0, 2, dtype=torch.long), 2, num_nodes=2, solver="cvxpylayers")


def test_qp_layer_survives_copies_and_pickling(tmp_path):
    import copy

    layer = lp.MAPRelaxation(FIVE_CYCLE, 2, smoothing=0.5)
    unary, pairwise = potentials(5, 5, 2, 0, "attractive")
    first = layer(unary, pairwise)
    torch.save(layer, tmp_path / "layer.pt")
    for other in (copy.deepcopy(layer), torch.load(tmp_path / "layer.pt", weights_only=False)):
        torch.testing.assert_close(other(unary, pairwise), first, atol=1e-9, rtol=0)


def test_qp_gradient_at_a_degenerate_cut_is_a_one_sided_derivative():
    """Node 1 sits at 1 (its box row) and node 2 at 0 while the cut mu_1(1) + mu_2(1) <= 1 holds
    node 2 down: three active rows for two variables. The rows kept prefer the larger interior-
    point multipliers (the cut over the box row), so the gradient is the derivative on the side
    where the cut tightens (with the least-norm compromise of all three it was 0: neither side)."""
    unary, pairwise = potentials(3, 0, 2, 0, "attractive")
    layer = lp.MAPRelaxation(torch.zeros(0, 2, dtype=torch.long), 2, num_nodes=3, smoothing=0.7, max_cuts=2)
    block = lp.cut_block([(1, 2, 1, []), (1, 2, 0, [])], 1, 3, 2, 2, unary)[0]
    weights = torch.randn(1, 3, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    cuts = block.clone().requires_grad_()
    mu = layer(unary, pairwise, cuts=cuts)
    torch.testing.assert_close(mu[0, :, 1], torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64))
    (mu * weights).sum().backward()
    fwd, bwd = one_sided_differences(lambda t: layer(unary, pairwise, cuts=t), block, weights)
    assert float((fwd - bwd).abs().max()) > 1  # a kink
    torch.testing.assert_close(cuts.grad, fwd, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("L", [2, 3])
def test_qp_layer_runs_a_constant_number_of_ops_and_no_sync_without_checks(L):
    """The batch crosses to the solvers and back in one piece: the operators a call runs (each a
    launch on a GPU) do not grow with B or V, and with value checks off nothing syncs."""
    import structtorch as st
    from structtorch.profiling import device_ops

    counts = []
    for H, B in ((3, 2), (3, 6), (5, 6)):
        edges = lp.grid_edges(H, H)
        layer = lp.MAPRelaxation(edges, L, smoothing=0.5, max_cuts=4)
        unary = torch.randn(B, H * H, L, dtype=torch.float64, requires_grad=True)
        pairwise = torch.zeros(len(edges), L, L, dtype=torch.float64)
        block = lp.cut_block([(1, 0, H * H - 1, [1, H])], B, H * H, L, 4, unary)
        counts.append(device_ops(lambda: layer(unary, pairwise, block).sum().backward()))  # noqa: B023
        with st.set_validation(False):
            assert device_ops(lambda: layer(unary, pairwise, block).sum().backward()).syncs == 0  # noqa: B023
    assert len({c.ops for c in counts}) == 1 and len({c.syncs for c in counts}) == 1, counts


def test_qp_layer_refuses_a_second_derivative():
    layer = lp.MAPRelaxation(lp.grid_edges(2, 2), 2, smoothing=1.0)
    unary = torch.randn(4, 2, dtype=torch.float64, requires_grad=True)
    mu = layer(unary, torch.zeros(4, 2, 2, dtype=torch.float64))
    (grad,) = torch.autograd.grad((mu[..., 1] ** 2).sum(), unary, create_graph=True)
    with pytest.raises(RuntimeError, match="differentiate twice"):
        grad.sum().backward()
