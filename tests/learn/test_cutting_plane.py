"""Cutting-plane training of structural SVMs (fit(solver="cutting_plane")): the optimum against the
QP over every labeling (cvxpy), the certificate, and the errors."""

from __future__ import annotations

import functools
import itertools

import cvxpy as cp
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as hs
from torch import nn

import structtorch as st
from structtorch.data import SequenceData, make_tagging_data
from structtorch.learn.solvers.cutting_plane import WorkingSet, cheapest_cuts, length_chunks


def tiny(n=4, seed=3, max_length=3, labels=2):
    return make_tagging_data(n, seed=seed, min_length=1, max_length=max_length, num_features=2,
                             num_labels=labels, noise=1.5)


def psi(model, x, labels):
    """The joint feature map of a linear model: the gradient of the path score (float64, (d,))."""
    params = [p for p in model.parameters()]
    unary, trans = model(x[None])
    score = st.path_score(unary, trans, labels[None])
    grads = torch.autograd.grad(score.sum(), params, allow_unused=True)
    flat = [torch.zeros_like(p) if g is None else g for g, p in zip(grads, params, strict=True)]
    return torch.cat([g.reshape(-1) for g in flat]).double().numpy()


def brute_force_optimum(model, data, lam, rescaling):
    """min lam/2 ||w||^2 + mean xi over every labeling's constraint (cvxpy), at Hamming losses."""
    d = sum(p.numel() for p in model.parameters())
    w, xi = cp.Variable(d), cp.Variable(len(data))
    constraints = [xi >= 0]
    for i in range(len(data)):
        L = int(data.lengths[i])
        x, y = data.x[i, :L], data.labels[i, :L]
        true = psi(model, x, y)
        for other in itertools.product(range(2), repeat=L):
            delta = float((torch.tensor(other) != y).sum())
            if delta == 0:
                continue
            margin = (true - psi(model, x, torch.tensor(other))) @ w
            constraints.append(xi[i] >= (delta - margin if rescaling == "margin" else delta * (1 - margin)))
    problem = cp.Problem(cp.Minimize(lam / 2 * cp.sum_squares(w) + cp.sum(xi) / len(data)), constraints)
    problem.solve(solver=cp.CLARABEL)
    return problem.value


@pytest.mark.parametrize("rescaling", ["margin", "slack"])
@pytest.mark.parametrize("variant", ["one_slack", "n_slack"])
def test_optimum_is_the_qp_over_every_labeling(variant, rescaling):
    data = tiny()
    lam, tol = 0.5, 1e-6
    model = st.LinearChainPotentials(2, 2)
    history = st.train.fit(model, data, st.StructuredHingeLoss(rescaling), epochs=300, l2=lam,
                           solver="cutting_plane", solver_options={"variant": variant, "tol": tol}, progress=False)
    best = brute_force_optimum(st.LinearChainPotentials(2, 2), data, lam, rescaling)
    assert history.converged and history["gap"][-1] <= tol
    assert history["dual"][-1] <= best + 1e-6 <= history["objective"][-1] + 2e-6
    assert history["objective"][-1] == pytest.approx(best, abs=1e-5)


@pytest.mark.parametrize("variant", ["one_slack", "n_slack"])
def test_the_certificate_is_the_primal_of_the_returned_weights(variant):
    data = make_tagging_data(12, seed=1, min_length=2, max_length=6, num_features=3, num_labels=3, noise=1.0)
    data = SequenceData(data.x.double(), data.labels, data.lengths)  # float64: a tight certificate
    model = st.LinearChainPotentials(3, 3).double()
    loss = st.StructuredHingeLoss("slack")
    history = st.train.fit(model, data, loss, epochs=200, C=2.0, solver="cutting_plane",
                           solver_options={"variant": variant, "tol": 1e-4}, progress=False)
    lam = 1 / (len(data) * 2.0)
    with torch.no_grad():
        unary, trans = model(data.x)
        primal = float(loss(unary, trans, data.labels, lengths=data.lengths))
        primal += lam / 2 * sum(float(p.pow(2).sum()) for p in model.parameters())
    assert history.converged and history["gap"][-1] <= 1e-4
    assert history["objective"][-1] == pytest.approx(primal, rel=1e-9)
    gap = np.array(history["gap"])
    assert (gap >= -1e-9).all() and gap[0] > 100 * gap[-1]  # weak duality; it closes
    dual = np.array(history["dual"])
    assert (np.diff(dual) >= -1e-7).all()  # the working set only grows in value
    calls = np.array(history["oracle_calls"])
    assert (np.diff(calls) > 0).all() and calls[0] == len(data)


def test_working_set_dual_is_feasible_and_prunes():
    ws = WorkingSet(d=2, lam=1.0, bound=1.0)
    import scipy.sparse as sp

    ws.add([0, 0], np.array([1.0, 0.5]), sp.csr_array(np.array([[1.0, 0.0], [0.0, -1.0]])))
    dual = ws.solve()
    # max a1 + 0.5 a2 - (a1^2 + a2^2) / 2 with a1 + a2 <= 1: a1 = 0.75, a2 = 0.25
    np.testing.assert_allclose(ws.alpha, [0.75, 0.25], atol=1e-6)
    assert dual == pytest.approx(0.75 + 0.125 - (0.75**2 + 0.25**2) / 2, abs=1e-9)
    np.testing.assert_allclose(ws.weights(), [0.75, -0.25], atol=1e-6)
    ws.add([0], np.array([-5.0]), sp.csr_array(np.array([[1.0, 1.0]])))  # never active
    for _ in range(3):
        ws.solve()
    ws.prune(2)
    assert len(ws) == 2 and ws.rows.shape == (2, 2) and ws.c.tolist() == [1.0, 0.5]


def test_errors():
    data = tiny()

    class Deep(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = st.LinearChainPotentials(2, 2)

        def forward(self, x):
            unary, trans = self.inner(x)
            return torch.tanh(unary), trans

    fit = st.train.fit
    hinge = st.StructuredHingeLoss()
    with pytest.raises(ValueError, match="linear in the parameters"):
        fit(Deep(), data, hinge, epochs=1, C=1.0, solver="cutting_plane", progress=False)
    with pytest.raises(TypeError, match="StructuredHingeLoss"):
        fit(st.LinearChainPotentials(2, 2), data, st.train.chain_nll, epochs=1, C=1.0, solver="cutting_plane",
            progress=False)
    with pytest.raises(ValueError, match="regularizer"):
        fit(st.LinearChainPotentials(2, 2), data, hinge, epochs=1, solver="cutting_plane", progress=False)
    with pytest.raises(ValueError, match="variant"):
        fit(st.LinearChainPotentials(2, 2), data, hinge, epochs=1, C=1.0, solver="cutting_plane",
            solver_options={"variant": "two_slack"}, progress=False)
    with pytest.raises(ValueError, match="optimizer"):
        model = st.LinearChainPotentials(2, 2)
        fit(model, data, hinge, epochs=1, C=1.0, solver="cutting_plane", progress=False,
            optimizer=torch.optim.SGD(model.parameters(), lr=0.1))


def test_structure_models_train_too():
    """A model returning a ChainDistribution (loss(structure, target)) trains to the same optimum."""

    class AsStructure(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = st.LinearChainPotentials(2, 2)

        def forward(self, x, lengths=None):
            return st.ChainDistribution(*self.inner(x), lengths=lengths)

    data = tiny(n=6, max_length=4)
    kw = dict(epochs=300, C=1.0, solver="cutting_plane", solver_options={"tol": 1e-6}, progress=False)
    h1 = st.train.fit(AsStructure(), data, st.StructuredHingeLoss(), **kw)
    h2 = st.train.fit(st.LinearChainPotentials(2, 2), data, st.StructuredHingeLoss(), **kw)
    assert h1.converged and h1["objective"][-1] == pytest.approx(h2["objective"][-1], abs=1e-5)


def test_sparse_features():
    """SparseFeaturePotentials (sparse gradients) trains; planes are stored sparse."""
    from structtorch.nn.sparse import SparseFeaturePotentials

    n, T, F = 10, 5, 30
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, F, (n, T, 2), generator=g)
    labels = torch.randint(0, 3, (n, T), generator=g)
    data = SequenceData(ids, labels, torch.full((n,), T))
    model = SparseFeaturePotentials(F, 3)
    history = st.train.fit(model, data, st.StructuredHingeLoss(), epochs=300, C=1.0, solver="cutting_plane",
                           solver_options={"tol": 1e-5, "variant": "n_slack"}, progress=False)
    assert history.converged


def _dual_qp(rows, c, lam, bound, owners):
    """cvxpy's value of the working set's dual QP."""
    alpha = cp.Variable(len(c))
    groups = np.asarray(owners)
    cons = [alpha >= 0] + [cp.sum(alpha[groups == g]) <= bound for g in np.unique(groups)]
    problem = cp.Problem(cp.Maximize(c @ alpha - cp.sum_squares(rows.T @ alpha) / (2 * lam)), cons)
    problem.solve(solver=cp.CLARABEL)
    return problem.value


@pytest.mark.parametrize("d", [6, 100])  # the planes themselves (d <= k) or the Gram's factor (d > k)
@pytest.mark.parametrize("bound, owners", [(1.0, [0] * 40), (0.25, [i % 4 for i in range(40)])])
@pytest.mark.parametrize("size", [1.0, 1e4])
@pytest.mark.parametrize("method", ["daqp-dual", "daqp-primal", "clarabel"])
def test_working_set_qp_is_exact(bound, owners, d, size, method, monkeypatch):
    """The dual over 40 planes (one block or four, a rank-deficient Gram matrix): a feasible alpha,
    its dual value at least cvxpy's, and the primal of the returned w equal to it (a certificate);
    with planes of norm ~1e4 and constants ~30 (alpha ~1e-7, the Gram matrix ~1e8: HiGHS's QP
    solver stopped 1 % short or hung there) the value still matches, and the certificate holds to
    1e-5.
    Every QP method: DAQP on the dual (the dense Gram matrix) or on the primal (factored), and
    Clarabel on the primal."""
    import scipy.sparse as sp

    monkeypatch.setattr(WorkingSet, "_dual_form", lambda self: method == "daqp-dual")
    if method == "clarabel":
        monkeypatch.setattr(WorkingSet, "_daqp_primal", lambda self, *args: None)
    else:  # DAQP must answer itself
        monkeypatch.setattr(WorkingSet, "_clarabel", lambda self, *args: pytest.fail("Clarabel ran"))
    rng = np.random.default_rng(0)
    rows = rng.normal(size=(40, d)) * size
    rows[5] = rows[3] + rows[4]
    c = (20 + 20 * rng.random(40)) if size > 1 else rng.random(40)
    ws = WorkingSet(d=d, lam=0.04, bound=bound)
    ws.pace.clarabel = 60.0  # as if Clarabel had run (DAQP waits for its time as a yardstick)
    ws.add(owners, c, sp.csr_array(rows))
    got = ws.solve()
    alpha, groups = ws.alpha, np.asarray(owners)
    assert (alpha >= 0).all() and all(alpha[groups == g].sum() <= bound * (1 + 1e-12) for g in np.unique(groups))
    want = _dual_qp(rows, c, 0.04, bound, owners)
    assert got >= want - 1e-6 * abs(want)  # (cvxpy's own answer is off by 0.5 % at ~1e-7)
    if size == 1.0:
        assert got == pytest.approx(want, rel=1e-6)
    w = ws.weights()
    violation = c - rows @ w
    primal = 0.02 * w @ w + sum(bound * max(0.0, violation[groups == g].max()) for g in np.unique(groups))
    assert primal - got <= (1e-6 if size == 1.0 else 1e-5) * abs(primal)  # a certificate of w at any norm


def test_daqp_is_paced_by_clarabel(monkeypatch):
    """DAQP tries the primal form only once Clarabel has run (Clarabel's time is its yardstick and
    budget); a failure or a success slower than Clarabel pauses it for DAQP_PAUSE solves, doubled for
    each such try in a row up to DAQP_PAUSE_MAX; a faster success ends the doubling. (A first budget
    of QP_TIME_LIMIT let DAQP take a minute per solve where Clarabel took half a second.)"""
    import scipy.sparse as sp

    from structtorch.learn.solvers.working_set import DAQP_PAUSE, DAQP_PAUSE_MAX, DAQP_TIME_SHARE, _DaqpPace

    def paused(pace: _DaqpPace) -> int:  # solves without DAQP before it may try again
        for count in range(10 * DAQP_PAUSE_MAX):
            if pace.ready():
                return count
        raise AssertionError("DAQP never tries again")

    pace = _DaqpPace()
    assert not pace.ready()  # no yardstick yet
    pace.clarabel = 0.5
    assert pace.ready() and pace.budget() == DAQP_TIME_SHARE * 0.5
    pace.tried(0.4, solved=True)
    assert paused(pace) == 0
    pace.clarabel = 1e-4
    pace.tried(1e-3, solved=True)  # slower, but within timing noise
    assert paused(pace) == 0
    pace.clarabel = 0.5
    pace.tried(0.6, solved=True)  # slower than Clarabel
    assert paused(pace) == DAQP_PAUSE
    pace.tried(0.1, solved=False)  # a second miss in a row
    assert paused(pace) == 2 * DAQP_PAUSE
    pace.tried(0.1, solved=True)
    pace.tried(0.1, solved=False)
    assert paused(pace) == DAQP_PAUSE
    for _ in range(20):
        pace.tried(5.0, solved=True)
    assert paused(pace) == DAQP_PAUSE_MAX
    calls = []
    for name in ("_clarabel", "_daqp_primal"):
        method = getattr(WorkingSet, name)
        monkeypatch.setattr(WorkingSet, name, lambda self, *args, name=name, method=method:
                            calls.append(name) or method(self, *args))
    monkeypatch.setattr(WorkingSet, "_dual_form", lambda self: False)
    rng = np.random.default_rng(2)
    ws = WorkingSet(d=6, lam=0.1, bound=1.0)
    ws.add([0] * 10, 1.0 + rng.random(10), sp.csr_array(rng.normal(size=(10, 6))))
    ws.solve()
    assert calls == ["_clarabel"] and ws.pace.clarabel is not None
    ws.add([0], np.array([3.0]), sp.csr_array(rng.normal(size=(1, 6))))
    ws.solve()
    assert calls[1] == "_daqp_primal"
    monkeypatch.setattr(WorkingSet, "_daqp_primal", lambda self, *args: calls.append("_daqp_primal"))  # fails
    ws.pace.pause, ws.pace.next_pause = 0, DAQP_PAUSE  # (whatever the machine's speed made of solve 2)
    tried = []
    for _ in range(DAQP_PAUSE + 2):
        calls.clear()
        ws.add([0], np.array([3.0]), sp.csr_array(rng.normal(size=(1, 6))))
        ws.solve()
        tried.append("_daqp_primal" in calls)
    assert tried == [True] + [False] * DAQP_PAUSE + [True]  # the solves pace DAQP


@pytest.mark.parametrize("bound, owners", [(1.0, [0] * 60), (0.1, [i % 10 for i in range(60)])])
def test_shrinking_reaches_the_optimum_over_every_plane(bound, owners, monkeypatch):
    """A large working set is solved by shrinking: the QP over the planes active last time and the
    new ones, then again with the planes its w violates most. Started from one plane (the others marked
    idle, as if they had been inactive), it must add the violated planes round by round until its
    alpha is optimal over all 60: cvxpy's value, and the primal of its w equal to it."""
    import scipy.sparse as sp

    from structtorch.learn.solvers import working_set

    monkeypatch.setattr(working_set, "SHRINK_FROM", 5)
    parts = []
    part = WorkingSet._part
    monkeypatch.setattr(WorkingSet, "_part", lambda self, *args: parts.append(1) or part(self, *args))
    rng = np.random.default_rng(1)
    rows, c = rng.normal(size=(60, 8)), 1.0 + rng.random(60)
    ws = WorkingSet(d=8, lam=0.05, bound=bound)
    ws.add(owners, c, sp.csr_array(rows))
    ws.idle[1:] = 1  # only plane 0 counts as active before the first round
    got = ws.solve()
    assert len(parts) >= 2  # it did have to add planes
    want = _dual_qp(rows, c, 0.05, bound, owners)
    assert got == pytest.approx(want, rel=1e-6)
    w, groups = ws.weights(), np.asarray(owners)
    violation = c - rows @ w
    primal = 0.025 * w @ w + sum(bound * max(0.0, violation[groups == g].max()) for g in np.unique(groups))
    assert primal - got <= 1e-6 * abs(primal)
    assert ws.alpha.shape == (60,) and (ws.alpha >= 0).all()


def test_shrinking_adds_the_most_violated_planes_per_owner():
    """A shrinking round adds each owner's most violated planes, at least SHRINK_ADD in all: one
    owner (one-slack) gets its SHRINK_ADD worst, many owners one each; chosen planes and planes
    under their owner's slack are never added."""
    import scipy.sparse as sp

    from structtorch.learn.solvers.working_set import SHRINK_ADD

    ws = WorkingSet(d=1, lam=1.0, bound=1.0)
    ws.add([0] * 100, np.arange(100.0), sp.csr_array(np.zeros((100, 1))))  # c - <w, a> = c
    chosen = np.array([10])  # owner 0's slack: 10
    got = ws._violated(np.zeros(1), chosen)
    np.testing.assert_array_equal(got, np.arange(100 - SHRINK_ADD, 100))
    ws = WorkingSet(d=1, lam=1.0, bound=0.01)
    owners = [i // 2 for i in range(200)]  # 100 owners of 2 planes; the second is the larger
    ws.add(owners, np.tile([1.0, 2.0], 100), sp.csr_array(np.zeros((200, 1))))
    got = ws._violated(np.zeros(1), np.array([0, 1]))  # owner 0 fully chosen
    np.testing.assert_array_equal(got, np.arange(3, 200, 2))


@pytest.mark.parametrize("shrink_from", [5, 400])
def test_zero_planes_and_nothing_active(shrink_from, monkeypatch):
    """Planes that are all zero make the dual linear: alpha is the bound on each owner's plane of
    largest positive c, and w = 0 (Clarabel failed on the factored primal of a single zero plane).
    A shrunk solve where no plane was active and none is new starts from the empty QP."""
    import scipy.sparse as sp

    from structtorch.learn.solvers import working_set

    monkeypatch.setattr(working_set, "SHRINK_FROM", shrink_from)
    owners, c = [0, 0, 1, 1, 2, 2, 2, 3, 3, 3], np.array([0.5, 2.0, -1.0, -2.0, 1.0, 3.0, 3.0, 0.0, 1.0, 0.5])
    ws = WorkingSet(d=4, lam=0.1, bound=0.25)
    ws.add(owners, c, sp.csr_array((10, 4)))
    assert ws.solve() == pytest.approx(0.25 * (2.0 + 3.0 + 1.0))
    assert (ws.weights() == 0).all() and (ws.alpha >= 0).all()
    np.testing.assert_allclose(np.bincount(owners, weights=ws.alpha), [0.25, 0.0, 0.25, 0.25])
    rng = np.random.default_rng(0)
    ws = WorkingSet(d=4, lam=0.1, bound=1.0)
    ws.add([0] * 10, -1.0 - rng.random(10), sp.csr_array(rng.normal(size=(10, 4))))
    assert ws.solve() == 0.0 and ws.solve() == 0.0  # the second with every plane idle
    assert (ws.alpha == 0).all() and (ws.idle == 2).all()


class _Segmenter(nn.Module):
    """Semi-Markov potentials linear in the parameters: per-position content from the features,
    length scores and transitions (a SemiMarkovDistribution)."""

    def __init__(self, features: int, labels: int, max_len: int):
        super().__init__()
        self.content = nn.Linear(features, labels, bias=False)
        self.length = nn.Parameter(torch.zeros(max_len, labels))
        self.transitions = nn.Parameter(torch.zeros(labels, labels))

    def forward(self, x, lengths=None):
        return st.SemiMarkovDistribution(self.content(x), self.transitions, max_len=self.length.shape[0],
                                         length_scores=self.length, lengths=lengths)


@pytest.mark.parametrize("loss", ["hamming", "boundary", "segment"])
def test_segmentations_train_on_labels_and_starts(loss):
    """Data with segment starts: fit passes (labels, starts) to the structure's hinge; the returned
    objective is the true primal of the returned weights, and other starts (the same labels cut
    into one-position segments) give another optimum."""
    g = torch.Generator().manual_seed(0)
    n, T, N, S = 5, 6, 2, 3
    x = torch.randn(n, T, 3, generator=g, dtype=torch.float64)
    lengths = torch.tensor([6, 4, 5, 1, 6])
    t = torch.arange(T)
    inside = t < lengths[:, None]
    labels = torch.randint(0, N, (n, T // 2), generator=g).repeat_interleave(2, 1)  # segments of 2
    hinge = st.StructuredHingeLoss(loss=loss)
    results = []
    for s in ((t % 2 == 0) & inside, inside):
        data = SequenceData(x, labels, lengths, s)
        model = _Segmenter(3, N, S).double()
        history = st.train.fit(model, data, hinge, epochs=200, C=1.0, solver="cutting_plane",
                               solver_options={"tol": 1e-6}, progress=False, objective=False)
        assert history.converged
        with torch.no_grad():
            w = torch.cat([p.reshape(-1) for p in model.parameters()])
            primal = float(hinge(model(x, lengths=lengths), (data.labels, s))) + 0.5 / n * float(w @ w)
        assert history["objective"][-1] == pytest.approx(primal, rel=1e-9, abs=1e-12)
        results.append(primal)
    assert results[0] != pytest.approx(results[1], rel=1e-3)


def test_hidden_semi_markov_svm_is_affine_unless_monotone():
    """The HSM SVM with free PLiFs trains by cutting planes (its structure carries input tracks: the
    potentials are affine in w) and certifies the returned weights; monotone PLiFs (a softplus
    parametrization) are refused."""
    from structtorch.data import gene_grammar

    class HSM(nn.Module):
        def __init__(self, monotone):
            super().__init__()
            self.hsm = st.HiddenSemiMarkovSVM(gene_grammar(), 5, signal_of=[0, 1, 2, 2, 1, 3],
                                              content_of=[0, 1, 1, 1, 1, 2], num_points=4, monotone=monotone)

        def forward(self, x, lengths=None):
            pot = self.hsm(x[..., :4], x[..., 4:], lengths)
            return st.SemiMarkovDistribution(pot.pop("content"), pot.pop("transitions"), **pot)

    g = torch.Generator().manual_seed(0)
    n, T = 3, 5
    labels = torch.zeros(n, T, dtype=torch.long)  # one intergenic segment
    starts = torch.zeros(n, T, dtype=torch.bool)
    starts[:, 0] = True
    data = SequenceData(torch.randn(n, T, 7, generator=g), labels, torch.full((n,), T), starts)
    kw = dict(epochs=3, C=1.0, solver="cutting_plane", progress=False, objective=False)
    model, hinge = HSM(None).double(), st.StructuredHingeLoss(loss="boundary")
    data.x = data.x.double()
    history = st.train.fit(model, data, hinge, **kw)
    with torch.no_grad():  # the recorded objective is the true primal of the returned weights
        w = torch.cat([p.reshape(-1) for p in model.parameters()])
        primal = float(hinge(model(data.x, lengths=data.lengths), (labels, starts))) + 0.5 / n * float(w @ w)
    assert history["objective"][-1] == pytest.approx(primal, rel=1e-9)
    assert history["dual"][-1] <= primal + 1e-12
    with pytest.raises(ValueError, match="linear in the parameters"):
        st.train.fit(HSM("increasing"), data, st.StructuredHingeLoss(), **kw)


def test_graph_models_train_over_the_relaxation():
    """A GraphStructure model (the LP relaxation; map_lp is the oracle) trains by n-slack cutting
    planes; on a path graph the relaxation is tight, so its optimum is the same chain model's."""
    from structtorch import lp

    g = torch.Generator().manual_seed(0)
    n, V, F = 6, 4, 3
    x = torch.randn(n, V, F, generator=g, dtype=torch.float64)
    labels = torch.randint(0, 2, (n, V), generator=g)
    edges = torch.tensor([[0, 1], [1, 2], [2, 3]])

    class Potentials(nn.Module):
        def __init__(self):
            super().__init__()
            self.node = nn.Linear(F, 2, bias=False).double()
            self.pair = nn.Parameter(torch.zeros(2, 2, dtype=torch.float64))

    class Graph(Potentials):
        def forward(self, x, lengths=None):
            return lp.GraphStructure(self.node(x), self.pair.expand(len(edges), 2, 2), edges, normalize=False)

    class Chain(Potentials):
        def forward(self, x):
            return self.node(x), self.pair

    data = SequenceData(x, labels, torch.full((n,), V))
    kw = dict(epochs=300, C=1.0, solver="cutting_plane", progress=False, objective=False)
    graph = Graph()
    h_graph = st.train.fit(graph, data, st.StructuredHingeLoss(), solver_options={"variant": "n_slack", "tol": 1e-6},
                           **kw)
    h_chain = st.train.fit(Chain(), data, st.StructuredHingeLoss(), solver_options={"tol": 1e-6}, **kw)
    assert h_graph.converged and h_chain.converged
    assert h_graph["objective"][-1] == pytest.approx(h_chain["objective"][-1], abs=1e-5)
    unary, pair = graph.node(x).detach(), graph.pair.detach()
    # the rounded MAP over the relaxation is a best labeling (which one, among ties, may differ)
    torch.testing.assert_close(st.path_score(unary, pair, graph(x).argmax), st.viterbi(unary, pair)[0])


@pytest.mark.parametrize("sparse", [False, True])
def test_per_sequence_planes_from_one_batched_backward(sparse):
    """ParameterVector.jacobian (n-slack's planes from one batched oracle call) equals one backward
    per sequence, also for sparse gradients (which take the per-sequence fallback)."""
    from structtorch.learn.solvers._linear import ParameterVector
    from structtorch.nn.sparse import SparseFeaturePotentials

    g = torch.Generator().manual_seed(1)
    if sparse:
        data = SequenceData(torch.randint(0, 20, (5, 4, 2), generator=g), torch.randint(0, 3, (5, 4), generator=g),
                            torch.tensor([4, 2, 3, 1, 4]))
        model = SparseFeaturePotentials(20, 3)
    else:
        data = tiny(n=5, max_length=4, labels=3)
        model = st.LinearChainPotentials(2, 3)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(generator=g)
    vector = ParameterVector(list(model.parameters()))
    hinge = st.StructuredHingeLoss(rescaling="slack", reduction="none")
    values = hinge(*model(data.x), data.labels, lengths=data.lengths)
    jac = vector.jacobian(values)
    rows = [vector.grad_retained(values[i]) for i in range(len(values))]
    assert jac.shape == (5, vector.d) and torch.allclose(jac, torch.stack(rows))
    assert (jac != 0).any()


@pytest.mark.parametrize("solver", ["cutting_plane", "bcfw"])
def test_relative_tolerance_stops_at_its_gap(solver):
    data = tiny(n=6)
    options = {"tol": 0.0, "rtol": 0.05}
    history = st.train.fit(st.LinearChainPotentials(2, 2), data, st.StructuredHingeLoss(), epochs=500, C=1.0,
                           solver=solver, solver_options=options, progress=False)
    assert history.converged
    gaps = [g / o for g, o in zip(history["gap"], history["objective"], strict=True)]
    assert gaps[-1] <= 0.05 and all(g > 0.05 for g in gaps[:-1])
    with pytest.raises(ValueError, match="rtol"):
        st.train.fit(st.LinearChainPotentials(2, 2), data, st.StructuredHingeLoss(), epochs=1, C=1.0,
                     solver=solver, solver_options={"rtol": -1.0}, progress=False)


def test_options_that_do_not_apply_or_are_not_bools_are_refused():
    data = tiny(n=4)
    fit = functools.partial(st.train.fit, st.LinearChainPotentials(2, 2), data, st.StructuredHingeLoss(),
                            epochs=1, C=1.0, progress=False)
    with pytest.raises(ValueError, match="margin is an option of variant='n_slack'"):
        fit(solver="cutting_plane", solver_options={"variant": "one_slack", "margin": 0.1})
    for option in ("averaging", "line_search"):
        with pytest.raises(TypeError, match=f"{option} must be a bool"):
            fit(solver="bcfw", solver_options={option: "False"})
    with pytest.raises(TypeError, match="enabled must be a bool"):
        st.set_adaptive_threads("0")


@pytest.mark.parametrize("step", [1.0, 0.5, 0.05])
def test_every_step_reaches_the_optimum(step):
    """The in-out point moves where the oracle runs, not the bound: any step certifies the optimum."""
    data, lam = tiny(), 0.5
    history = st.train.fit(st.LinearChainPotentials(2, 2), data, st.StructuredHingeLoss(), epochs=500, l2=lam,
                           solver="cutting_plane", solver_options={"tol": 1e-6, "step": step}, progress=False)
    best = brute_force_optimum(st.LinearChainPotentials(2, 2), data, lam, "margin")
    assert history.converged
    assert history["dual"][-1] <= best + 1e-6 <= history["objective"][-1] + 2e-6


def test_step_must_be_in_zero_one():
    fit = functools.partial(st.train.fit, st.LinearChainPotentials(2, 2), tiny(), st.StructuredHingeLoss(),
                            epochs=1, C=1.0, solver="cutting_plane", progress=False)
    for bad in (0.0, 1.5, float("nan")):
        with pytest.raises(ValueError, match=r"step must be a finite number in \(0, 1\]"):
            fit(solver_options={"step": bad})
    with pytest.raises(TypeError, match="step must be a real number"):
        fit(solver_options={"step": "0.5"})


@settings(max_examples=60, deadline=None)
@given(hs.lists(hs.integers(0, 6), max_size=7), hs.integers(1, 40), hs.integers(0, 30))
def test_length_chunks_are_the_cheapest_cut_of_the_sorted_lengths(lengths, cap, overhead):
    """Against every partition of the sorted sequences into contiguous chunks (cuts between equal
    lengths included): none is cheaper; then each chunk over cap splits into parts of at most cap."""
    lengths = torch.tensor(lengths, dtype=torch.long)
    order, cuts = cheapest_cuts(lengths, overhead)
    n, sizes = len(lengths), sorted(lengths.clamp(min=1).tolist())
    assert lengths[order].tolist() == sorted(lengths.tolist())
    bounds = [0, *(b for _, b, _ in cuts)]  # contiguous, covering 0..n-1
    assert [a for a, _, _ in cuts] == bounds[:-1] and bounds[-1] == n

    def cost(bounds):
        return sum((b - a) * sizes[b - 1] + overhead for a, b in zip(bounds[:-1], bounds[1:], strict=True))

    cheapest = min((cost([0, *c, n]) for k in range(n) for c in itertools.combinations(range(1, n), k)),
                   default=0)
    assert cost(bounds) == cheapest
    chunks = length_chunks(lengths, cap, overhead)
    assert (torch.cat(chunks).tolist() if chunks else []) == order.tolist()
    for chunk in chunks:
        assert len(chunk) * max(int(lengths[chunk].max()), 1) <= cap or len(chunk) == 1


def test_one_slack_chunks_sum_to_the_plane_of_the_whole_data(monkeypatch):
    """The default one_slack batches (sorted by length, trimmed) give the hinge sum and gradient of
    one call over the data in order."""
    from structtorch.learn.solvers import cutting_plane

    n, T, F = 40, 12, 25
    g = torch.Generator().manual_seed(1)
    lengths = torch.randint(1, T + 1, (n,), generator=g)
    inside = torch.arange(T) < lengths[:, None]
    ids = torch.where(inside[..., None], torch.randint(0, F, (n, T, 3), generator=g), -1)
    labels = torch.where(inside, torch.randint(0, 4, (n, T), generator=g), 0)
    data = SequenceData(ids, labels, lengths)
    monkeypatch.setattr(cutting_plane, "ONE_SLACK_POSITIONS", 64)
    model = st.SparseFeaturePotentials(F, 4).double()
    state = cutting_plane.CuttingPlane(model, data, st.StructuredHingeLoss(), 0.1)
    torch.nn.init.normal_(model.emission.weight, generator=g)
    assert len(state.batches) > 2 and all(b.x.shape[1] == int(b.lengths.max()) for b in state.batches)
    value, grad = state._planes(state.batches)
    whole_value, whole_grad = state._planes([data])
    assert value.item() == pytest.approx(whole_value.item(), rel=1e-12)
    torch.testing.assert_close(grad, whole_grad, rtol=1e-12, atol=1e-12)


def test_unknown_solver_options_are_named():
    fit = functools.partial(st.train.fit, st.LinearChainPotentials(2, 2), tiny(), st.StructuredHingeLoss(),
                            epochs=1, C=1.0, progress=False)
    for solver in ("cutting_plane", "bcfw"):
        with pytest.raises(TypeError, match=rf"solver_options of solver='{solver}' take .*got \['bogus'\]"):
            fit(solver=solver, solver_options={"bogus": 1})
    with pytest.raises(ValueError, match="takes no solver_options"):
        fit(solver="subgradient", solver_options={"tol": 1.0})
