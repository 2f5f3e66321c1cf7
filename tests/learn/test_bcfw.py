"""Block-coordinate Frank-Wolfe for margin-rescaled structural SVMs (structtorch.learn.bcfw)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import structtorch as st
from structtorch.data import SequenceData, make_tagging_data
from structtorch.learn.bcfw import fit_bcfw
from structtorch.nn.sparse import SparseFeaturePotentials


def tiny(n=8, seed=3):
    return make_tagging_data(n, seed=seed, min_length=3, max_length=6, num_features=2, num_labels=3, noise=1.0)


def primal(model, data, lam):
    with torch.no_grad():
        unary, trans = model(data.x)
        hinge = st.StructuredHingeLoss()(unary, trans, data.labels, lengths=data.lengths)
        return float(hinge) + 0.5 * lam * sum(float(p.pow(2).sum()) for p in model.parameters())


@pytest.mark.parametrize("averaging", [False, True])
def test_duality_gap_decreases_and_reaches_tolerance(averaging):
    data = tiny()
    model = st.LinearChainPotentials(2, 3)
    history = fit_bcfw(model, data, l2=2.0, epochs=150, tol=5e-3, averaging=averaging)
    gap, dual = history["gap"], history["dual"]
    assert history.converged and gap[-1] <= 5e-3 < gap[0] and len(history) < 150
    assert min(gap[: len(gap) // 2]) > gap[-1] and gap[0] > 50 * gap[-1]
    assert all(g >= -1e-6 for g in gap)  # weak duality
    if not averaging:  # line search makes every block step a dual ascent step
        assert all(b >= a - 1e-9 for a, b in zip(dual, dual[1:], strict=False))
    # the recorded primal is fit's objective (mean hinge + l2/2 ||theta||^2) at the returned weights
    assert history["objective"][-1] == pytest.approx(primal(model, data, 2.0), rel=1e-5)


def test_primal_matches_the_subgradient_optimum():
    data, lam = tiny(), 2.0
    bcfw = st.LinearChainPotentials(2, 3)
    hb = fit_bcfw(bcfw, data, l2=lam, epochs=300, tol=1e-3, averaging=False)
    sgd = st.LinearChainPotentials(2, 3)
    opt = torch.optim.SGD(sgd.parameters(), lr=0.1)
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda e: 1 / (1 + e) ** 0.5)
    hs = st.train.fit(sgd, data, st.StructuredHingeLoss(), optimizer=opt, scheduler=schedule, epochs=400, l2=lam,
                      batch_size=len(data), progress=False, select="objective")
    best_sgd = min(hs["objective"])
    assert hb["dual"][-1] <= best_sgd + 1e-6  # the dual bounds every primal value
    assert abs(hb["objective"][-1] - best_sgd) < 2e-3
    # strictly convex: the two solvers' weights agree
    for a, b in zip(bcfw.parameters(), sgd.parameters(), strict=True):
        torch.testing.assert_close(a.detach(), b.detach(), atol=0.05, rtol=0)


def test_fit_solver_bcfw_is_fit_bcfw_and_sparse_features_work():
    data, lam = tiny(6), 1.0
    kw = {"epochs": 5, "seed": 2}
    h1 = fit_bcfw(st.LinearChainPotentials(2, 3), data, l2=lam, tol=0.0, **kw)
    h2 = st.train.fit(st.LinearChainPotentials(2, 3), data, None, l2=lam, solver="bcfw", progress=False, **kw)
    assert h1["gap"] == h2["gap"] and not h2.converged
    # the same model through sparse bags: feature f of a position is an id with value x[b, t, f]
    n, T, F = data.x.shape
    ids = torch.arange(F).expand(n, T, F).clone()
    ids[torch.arange(T) >= data.lengths[:, None]] = -1

    class Valued(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = SparseFeaturePotentials(F, 3)

        def forward(self, x):
            return self.inner(x[..., 0].long(), values=x[..., 1])

    packed = SequenceData(torch.stack([ids.float(), data.x], -1), data.labels, data.lengths)
    h3 = fit_bcfw(Valued(), packed, l2=lam, tol=0.0, **kw)
    assert h3["gap"] == pytest.approx(h1["gap"], rel=1e-4, abs=1e-6)


def test_bcfw_with_validation_metrics_and_hamming_h():
    train, val = tiny(8), tiny(4, seed=9)
    model = st.LinearChainPotentials(2, 3)
    loss = st.StructuredHingeLoss(h=lambda k: 2.0 * k)
    history = st.train.fit(model, train, loss, C=1.0, epochs=3, val_data=val, solver="bcfw", progress=False,
                           solver_options={"averaging": False}, select="val_accuracy")
    assert set(history.epochs[0]) == {"objective", "dual", "gap", "time", "val_accuracy", "val_hamming"}
    assert history.best_epoch is not None


def test_bcfw_errors():
    data = tiny(4)
    model = st.LinearChainPotentials(2, 3)
    with pytest.raises(ValueError, match="needs a regularizer"):
        st.train.fit(model, data, None, epochs=1, solver="bcfw", progress=False)
    with pytest.raises(ValueError, match="rescaling='slack'"):
        st.train.fit(model, data, st.StructuredHingeLoss("slack"), l2=1.0, epochs=1, solver="bcfw", progress=False)
    with pytest.raises(TypeError, match="StructuredHingeLoss with margin rescaling"):
        st.train.fit(model, data, st.LinearChainCRF(3), l2=1.0, epochs=1, solver="bcfw", progress=False)
    with pytest.raises(ValueError, match="takes no optimizer"):
        st.train.fit(model, data, None, l2=1.0, epochs=1, solver="bcfw", progress=False,
                     optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    with pytest.raises(ValueError, match="solver must be one of"):
        st.train.fit(model, data, None, l2=1.0, epochs=1, solver="adam", progress=False)

    class Quadratic(nn.Module):  # not linear in its parameters
        def __init__(self):
            super().__init__()
            self.inner = st.LinearChainPotentials(2, 3)

        def forward(self, x):
            u, a = self.inner(x)
            return u * u.abs(), a

    with pytest.raises(ValueError, match="needs potentials linear in the parameters"):
        fit_bcfw(Quadratic(), data, l2=1.0, epochs=1)


def test_blocks_are_stored_on_their_sequences_features():
    """With sparse indicator features each block w_i lives on its sequence's features: the blocks'
    total size stays far below n * d (a dense copy per sequence)."""
    from structtorch.learn.bcfw import BCFW

    g = torch.Generator().manual_seed(0)
    n, T, F, N = 40, 6, 5000, 3
    ids = torch.randint(0, F, (n, T, 4), generator=g)
    labels = torch.randint(0, N, (n, T), generator=g)
    data = SequenceData(ids.float(), labels, torch.full((n,), T))

    class Bags(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = SparseFeaturePotentials(F, N)

        def forward(self, x):
            return self.inner(x.long())

    solver = BCFW(Bags(), data, None, lam=0.1)
    solver.run_pass()
    stored = sum(block._nnz() for block in solver.w_blocks)
    assert 0 < stored < 0.01 * n * solver.d
    assert torch.allclose(sum(block.to_dense() for block in solver.w_blocks), solver.w)


def test_the_average_and_the_parameters_follow_every_sparse_step():
    """Each block step touches its support only: the averaged iterate kept as w - drift / T equals
    Algorithm 4's recurrence w_avg = (1 - rho) w_avg + rho w, rho = 2 / (k + 2), and the model's
    parameters equal w after every step (float32 parameters: w rounded)."""
    from structtorch.learn.bcfw import BCFW

    data = tiny(n=10)
    model = st.LinearChainPotentials(2, 3).float()
    solver = BCFW(model, data, None, lam=0.05, seed=1)
    reference = solver.w.clone()
    order = torch.randperm(10, generator=torch.Generator().manual_seed(0)).tolist() * 3
    for k, i in enumerate(order):
        solver._step(i)
        rho = 2.0 / (k + 2.0)
        reference = (1 - rho) * reference + rho * solver.w
        torch.testing.assert_close(solver.w_avg, reference, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(solver.vector.current(), solver.w.float().double(), rtol=0, atol=0)
    assert solver.k == 30 and bool((solver.w != 0).any())


def test_sparse_gradients_give_the_same_steps():
    """SparseFeaturePotentials(sparse_grad=True) hands BCFW sparse gradients (EmbeddingBag rows),
    read off their indices without densifying: the same iterates as the dense gradients."""
    from structtorch.learn.bcfw import BCFW

    g = torch.Generator().manual_seed(2)
    n, T, F, N = 12, 5, 40, 3
    data = SequenceData(torch.randint(-1, F, (n, T, 3), generator=g), torch.randint(0, N, (n, T), generator=g),
                        torch.randint(1, T + 1, (n,), generator=g))
    iterates = []
    for sparse_grad in (False, True):
        model = SparseFeaturePotentials(F, N, sparse_grad=sparse_grad).double()
        solver = BCFW(model, data, None, lam=0.1, seed=0)
        solver.run_pass()
        solver.run_pass()
        iterates.append((solver.w.clone(), solver.w_avg))
    torch.testing.assert_close(iterates[0], iterates[1], rtol=1e-12, atol=1e-12)
    assert bool((iterates[0][0] != 0).any())


def test_bcfw_refuses_a_loss_it_would_not_train():
    """Issue 53, item 9: BCFW calls the loss-augmented oracle, not the loss's forward: a subclass
    overriding forward, segment losses or partial labels would be trained as the plain Hamming
    problem, silently. The data's costs (SequenceData.cost) are its way to other losses."""
    data = make_tagging_data(4, seed=0, min_length=2, max_length=3, num_features=2, num_labels=2)

    class Costed(st.StructuredHingeLoss):
        def forward(self, unary, transitions, target, **kw):
            return super().forward(unary, transitions, target, cost=torch.ones(2, 2), **kw)

    cases = [(Costed(), TypeError, "overrides"), (st.StructuredHingeLoss(ignore_index=-100), ValueError,
             "ignore_index=-100"), (st.StructuredHingeLoss(loss="zero_one"), ValueError, "loss='zero_one'")]
    for loss, exc, match in cases:
        with pytest.raises(exc, match=f"solver='bcfw'.*{match}"):
            st.train.fit(st.LinearChainPotentials(2, 2), data, loss, epochs=1, C=1.0, solver="bcfw", progress=False)
