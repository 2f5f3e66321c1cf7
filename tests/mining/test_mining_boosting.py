"""LPBoost / TCBoost (Algorithm 1) against the full master over all enumerated patterns (digest §6.3 item 9)."""

from __future__ import annotations

import functools
import warnings

import numpy as np
import pytest
from scipy.optimize import linprog

from structtorch.mining import LPBoost, TCBoost, best_patterns, frequent_patterns
from structtorch.mining import graphs as G
from structtorch.mining.boosting import _stumps

f = frozenset


def random_sequences(rng, n, alphabet=4, max_len=4, max_set=2):
    return [tuple(f(rng.choice(alphabet, size=rng.integers(1, max_set + 1), replace=False).tolist())
                  for _ in range(rng.integers(1, max_len + 1))) for _ in range(n)]


def all_columns(data, max_size):
    """Both directions of every pattern of size <= max_size occurring in data (the full column set)."""
    pats = [t for t, _ in frequent_patterns(data, 1, max_size=max_size)]
    return [(t, 1) for t in pats] + [(t, -1) for t in pats]


def full_lp(data, y, D, max_size):
    """The LPBoost dual over all columns at once: min beta s.t. A lambda <= beta, sum lambda = 1, 0 <= lambda <= D."""
    cols = all_columns(data, max_size)
    A = (_stumps(cols, data) * y[:, None]).T
    N = len(data)
    res = linprog(np.r_[np.zeros(N), 1.0], A_ub=np.c_[A, -np.ones(len(A))], b_ub=np.zeros(len(A)),
                  A_eq=np.r_[np.ones(N), 0.0][None], b_eq=[1.0], bounds=[(0, D)] * N + [(None, None)],
                  method="highs")
    assert res.status == 0
    return -res.fun, A  # gamma = -beta


MINER = functools.partial(best_patterns, max_size=3)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("nu", [0.1, 0.3, 1.0])
def test_lpboost_equals_full_lp_and_no_violated_column(seed, nu):
    rng = np.random.default_rng(seed)
    data = random_sequences(rng, 24)
    y = rng.choice([-1.0, 1.0], 24)
    model = LPBoost(MINER, nu=nu, columns=int(rng.integers(1, 6))).fit(data, y)
    assert model.converged_
    gamma, A = full_lp(data, y, 1.0 / (nu * 24), 3)
    assert model.gamma_ == pytest.approx(gamma, abs=1e-9)
    assert model.history_[-1]["objective"] == pytest.approx(gamma, abs=1e-9)
    # no column of the whole (size <= 3) space violates the final dual solution
    assert (A @ model.lambda_).max() + model.gamma_ <= model.eps + 1e-9
    # the primal weights: alpha >= 0, sum 1, strong duality with the soft-margin primal
    assert (model.alpha_ > 0).all() and model.alpha_.sum() == pytest.approx(1.0, abs=1e-9)
    margins = y * model.decision_function(data)
    assert model.primal_objective(margins, model.D_) == pytest.approx(gamma, abs=1e-8)
    assert (model.lambda_ >= 0).all() and (model.lambda_ <= model.D_ + 1e-12).all()
    assert model.lambda_.sum() == pytest.approx(1.0)


@pytest.mark.parametrize("p,T", [(2.0, 1.0), (1.5, 1.0), (3.0, 0.5)])
@pytest.mark.parametrize("seed", range(3))
def test_tcboost_pnorm_against_full_master(p, T, seed):
    rng = np.random.default_rng(100 + seed)
    data = random_sequences(rng, 20)
    y = rng.choice([-1.0, 1.0], 20)
    model = TCBoost(MINER, p=p, D=0.3, T=T).fit(data, y)
    assert model.converged_
    cols = all_columns(data, 3)
    A = (_stumps(cols, data) * y[:, None]).T
    _, _, _, full = model._master(A, 0.3)
    assert model.history_[-1]["objective"] == pytest.approx(full, abs=1e-6)
    assert (A @ model.lambda_).max() + model.gamma_ <= 1e-6
    assert model.alpha_.sum() == pytest.approx(1.0 / T, abs=1e-6)
    margins = y * model.decision_function(data)
    assert model.primal_objective(margins, 0.3) == pytest.approx(full, abs=1e-6)


def test_pnorm_master_dual_constant():
    # one column, N = 2, y h = (+1, -1): the dual max gamma - c (l1^q + l2^q) s.t. l1 - l2 <= -gamma
    # with q = 2, D = 1 (c = 1/4), i.e. max over l1 of -(2 l1 - 1) - (l1^2 + (1 - l1)^2) / 4: a grid search
    model = TCBoost(MINER, p=2.0, D=1.0)
    A = np.array([[1.0, -1.0]])
    lam, gamma, alpha, obj = model._master(A, 1.0)
    grid = np.linspace(0, 1, 100001)
    vals = -(grid - (1 - grid)) - 0.25 * (grid ** 2 + (1 - grid) ** 2)
    assert obj == pytest.approx(vals.max(), abs=1e-6)
    assert lam[0] == pytest.approx(grid[vals.argmax()], abs=1e-4)
    assert alpha.sum() == pytest.approx(1.0, abs=1e-6)


def brute_ddag(F, pairs, K):
    """Platt's DDAG on one row of pair decisions, by list elimination."""
    index = {pair: k for k, pair in enumerate(pairs)}
    classes = list(range(K))
    while len(classes) > 1:
        i, j = classes[0], classes[-1]
        classes.remove(i if F[index[(i, j)]] > 0 else j)
    return classes[0]


def test_multiclass_ddag():
    rng = np.random.default_rng(7)
    K = 4
    motifs = [(f({0}), f({1})), (f({1}), f({0})), (f({2}), f({3})), (f({3}), f({2}))]
    y = rng.integers(0, K, 60)
    data = [tuple(rng.permutation([f({4}), f({5})]).tolist()) + motifs[c] for c in y]
    model = LPBoost(MINER, nu=0.2).fit(data, np.array(["abcd"[c] for c in y]))
    assert model.classes_.tolist() == list("abcd")
    assert model.pairs_ == [(i, j) for i in range(K) for j in range(i + 1, K)]
    assert len(model.patterns_) == len(model.alpha_) == 6
    F = model.decision_function(data)
    assert F.shape == (60, 6)
    pred = model.predict(data)
    assert pred.tolist() == ["abcd"[brute_ddag(row, model.pairs_, K)] for row in F]
    assert model.score(data, np.array(["abcd"[c] for c in y])) == 1.0
    # random decisions: the vectorized DAG equals list elimination
    Fr = rng.normal(size=(200, 6))
    model.decision_function = lambda data: Fr
    assert [list("abcd").index(c) for c in model.predict([None] * 200)] == [
        brute_ddag(row, model.pairs_, K) for row in Fr]


def test_binary_labels_keep_their_sign():
    data = [(f({1}), f({2}))] * 5 + [(f({2}), f({1}))] * 5
    y = np.array([1] * 5 + [-1] * 5)
    model = LPBoost(MINER, nu=0.5).fit(data, y)
    assert model.classes_.tolist() == [-1, 1]
    assert (np.sign(model.decision_function(data)) == y).all()
    assert model.predict(data).tolist() == y.tolist()
    assert model.predict([(f({1}), f({9}), f({2}))]).tolist() == [1]


def test_sets_and_graphs():
    rng = np.random.default_rng(3)
    sets = [f(rng.choice(5, size=3, replace=False).tolist()) for _ in range(30)]
    y = np.array([1 if {0, 1} <= s else -1 for s in sets])
    model = LPBoost(functools.partial(best_patterns, max_size=2), nu=0.1).fit(sets, y)
    assert model.score(sets, y) == 1.0
    tri = ([0, 0, 1], [(0, 1), (1, 2), (0, 2)], [0, 0, 0])
    path = ([0, 0, 1], [(0, 1), (1, 2)], [0, 0])
    graphs = [tri, path] * 6
    yg = np.array([1, -1] * 6)
    gm = LPBoost(functools.partial(G.best_patterns, max_size=3), nu=0.2).fit(graphs, yg)
    assert gm.converged_ and gm.score(graphs, yg) == 1.0


def test_warns_when_not_converged():
    rng = np.random.default_rng(0)
    data = random_sequences(rng, 24)
    y = rng.choice([-1.0, 1.0], 24)
    with pytest.warns(RuntimeWarning, match="did not converge"):
        model = LPBoost(MINER, nu=0.1, max_iter=1, columns=1).fit(data, y)
    assert not model.converged_ and model.n_iter_ == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        LPBoost(MINER, nu=0.1).fit(data, y)


def test_no_pattern_warns_and_predicts_constant():
    data = [(f({1}),), (f({2}),), (f({3}),)]
    miner = functools.partial(best_patterns, min_support=3)
    with pytest.warns(RuntimeWarning, match="found no weak learner"):
        model = LPBoost(miner, nu=0.5).fit(data, [1, -1, 1])
    assert model.patterns_ == [] and (model.decision_function(data) == 0).all()


def test_bad_input():
    data = [(f({1}),), (f({2}),)]
    with pytest.raises(ValueError, match="nu must lie in"):
        LPBoost(MINER, nu=0.0)
    with pytest.raises(ValueError, match="nu must lie in"):
        LPBoost(MINER, nu=1.5)
    with pytest.raises(ValueError, match="p must be"):
        TCBoost(MINER, p=1.0, nu=0.1)
    with pytest.raises(ValueError, match="exactly one of nu"):
        TCBoost(MINER, p=2.0, nu=0.1, D=1.0)
    with pytest.raises(TypeError, match="miner must be callable"):
        LPBoost("best_patterns", nu=0.1)
    with pytest.raises(ValueError, match="max_iter"):
        LPBoost(MINER, nu=0.1, max_iter=0)
    with pytest.raises(ValueError, match="data must be non-empty"):
        LPBoost(MINER, nu=0.1).fit([], [])
    with pytest.raises(ValueError, match=r"y must have shape \(2,\)"):
        LPBoost(MINER, nu=0.1).fit(data, [1, -1, 1])
    with pytest.raises(ValueError, match="at least two classes"):
        LPBoost(MINER, nu=0.1).fit(data, [1, 1])
    with pytest.raises(RuntimeError, match="not fitted"):
        LPBoost(MINER, nu=0.1).predict(data)
    with pytest.raises(ValueError, match="unsorted|non-negative"):
        LPBoost(MINER, nu=0.5).fit([(f({-1}),), (f({2}),)], [1, -1])
