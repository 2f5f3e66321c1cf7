"""Totally corrective boosting over substructure weak learners (Nowozin 2009, ch. 1, Algorithm 1).

The weak learners are the stumps of Def. 5, ``h(x; (t, d)) = d`` if the pattern ``t`` occurs in ``x``
and ``-d`` otherwise, and the classifier is ``F(x) = sum_w alpha_w h(x; w)`` with ``alpha >= 0``.
Boosting fits this linear model in the space of all patterns by column generation on the dual

    max_{gamma, lambda}  gamma / T - R(lambda)
    s.t.  sum_n lambda_n y_n h(x_n; w) <= -gamma   (: alpha_w)   for every weak learner w,
          lambda >= 0,  sum_n lambda_n = 1,

whose multipliers are the primal weights ``alpha`` (``sum_w alpha_w = 1 / T``; the printed objective
``T gamma`` is a rescaling of T, erratum 10). Each round the miner finds the weak learners of largest
gain ``sum_n lambda_n y_n h(x_n; w)`` under the current ``lambda`` (Problem 1); those violating their
dual constraint (gain ``+ gamma > 0``, erratum 5) join the restricted master, which is re-solved over all
columns so far (totally corrective). The loop stops when no weak learner violates its constraint by
more than ``eps``: then the restricted solution is optimal for the full, possibly infinite, problem.

Losses
------
* LPBoost (:class:`LPBoost`, the limit ``p -> 1``; Demiriz et al.): the soft-margin LP
  ``max rho - D sum_n xi_n`` s.t. ``y_n F(x_n) + xi_n >= rho``, ``xi >= 0``, ``alpha >= 0``,
  ``sum alpha = 1``, with ``D = 1 / (nu N)``; its dual has the box ``0 <= lambda_n <= D`` and R = 0. The
  master is an LP solved by HiGHS (``scipy.optimize.linprog``); ``nu`` in (0, 1] bounds the fraction of
  margin errors (Demiriz et al.'s nu-property).
* The p-norm hinge (:class:`TCBoost`, eqs. 12-15): ``min -rho + D sum_n xi_n^p`` with ``p > 1``, whose
  dual penalty is ``R(lambda) = ((q - 1)^(q - 1) / (q (D q)^(q - 1))) sum_n lambda_n^q``,
  ``q = p / (p - 1)``; the master is a smooth convex program solved through cvxpy (Clarabel).

Multiclass problems are decomposed one-vs-one and predicted by a decision DAG (DDAG, Platt et al.),
as in the thesis's KTH experiment: ``K (K - 1) / 2`` binary problems, ``K - 1`` evaluations per instance.
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from structtorch.mining.sequences import occurrence_matrix

__all__ = ["TCBoost", "LPBoost", "Miner"]

Miner = Callable[..., list]
"""``miner(data, y, weights, *, top_k) -> [(pattern, direction, gain), ...]``, as :func:`best_patterns`."""


def _check_positive(name: str, value: object, *, high: float = math.inf, closed_high: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    v = float(value)
    if not (0.0 < v and (v <= high if closed_high else v < high)) or not math.isfinite(v):
        bound = f"(0, {high}]" if math.isfinite(high) else "(0, inf)"
        raise ValueError(f"{name} must lie in {bound}, got {value!r}")
    return v


def _check_count(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    return int(value)


def _stumps(columns: Sequence[tuple[Any, int]], data: Sequence) -> np.ndarray:
    """``h(x_n; (t, d))`` for every column: an (N, M) array of -1 / +1."""
    if not columns:
        return np.zeros((len(data), 0))
    occ = occurrence_matrix([t for t, _ in columns], data)
    d = np.array([d for _, d in columns], dtype=np.float64)
    return (2.0 * occ - 1.0) * d


class TCBoost:
    """Totally corrective boosting (Algorithm 1) with the p-norm hinge loss, ``p > 1``.

    Parameters
    ----------
    miner : callable
        ``miner(data, y, weights, *, top_k)`` returning ``(pattern, direction, gain)`` triples sorted
        by decreasing gain, e.g. ``functools.partial(structtorch.mining.best_patterns, max_size=3)``
        (sets, sequences or graphs).
    p : float > 1
        The exponent of the slack penalty ``D sum_n xi_n^p``.
    nu : float in (0, 1], optional
        Sets ``D = 1 / (nu N)`` (Demiriz et al.'s convention); give ``nu`` or ``D``.
    D : float > 0, optional
        The slack penalty directly.
    T : float > 0
        The weights sum to ``1 / T`` (regularization; only a rescaling for LPBoost).
    max_iter : int
        Most column-generation rounds.
    eps : float >= 0
        Stop when the largest dual violation ``max_w gain(w) + gamma`` is at most ``eps``.
    columns : int
        Weak learners requested from the miner per round (all those violating are added).

    Attributes
    ----------
    classes_ : ndarray (K,)
    patterns_ : list of (pattern, direction)
        Binary problems: the weak learners with non-zero weight. Multiclass: one such list per
        one-vs-one pair (see ``pairs_``).
    alpha_ : ndarray (M,) or list of ndarray
        Their weights (> 0), in the same layout as ``patterns_``.
    pairs_ : list of (i, j)
        Class indices of each one-vs-one problem: class ``j`` is the positive side (multiclass only).
    estimators_ : list of TCBoost
        The binary classifiers of ``pairs_`` (multiclass only).
    lambda_, gamma_ : ndarray (N,), float
        The dual solution of the last master (binary only): the boosting weights and the negated
        largest edge.
    n_iter_, converged_ : int, bool
    history_ : list of dict
        Per round: ``max_violation``, ``objective`` (the master's dual value), ``columns``.
    """

    def __init__(self, miner: Miner, *, p: float = 2.0, nu: float | None = None, D: float | None = None,
                 T: float = 1.0, max_iter: int = 100, eps: float = 1e-6, columns: int = 5) -> None:
        if not callable(miner):
            raise TypeError(f"miner must be callable like best_patterns(data, y, weights, top_k=...), "
                            f"got {type(miner).__name__}")
        self.miner = miner
        self.p = self._check_p(p)
        if (nu is None) == (D is None):
            raise ValueError("give exactly one of nu (D = 1 / (nu N)) and D")
        self.nu = None if nu is None else _check_positive("nu", nu, high=1.0)
        self.D = None if D is None else _check_positive("D", D)
        self.T = _check_positive("T", T)
        self.max_iter = _check_count("max_iter", max_iter)
        if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not (0 <= eps < math.inf):
            raise ValueError(f"eps must be a finite number >= 0, got {eps!r}")
        self.eps = float(eps)
        self.columns = _check_count("columns", columns)

    def _check_p(self, p: object) -> float:
        if isinstance(p, bool) or not isinstance(p, numbers.Real) or not (1.0 < float(p) < math.inf):
            raise ValueError(f"p must be a finite number > 1 (use LPBoost for p -> 1), got {p!r}")
        return float(p)

    def __repr__(self) -> str:
        reg = f"nu={self.nu}" if self.nu is not None else f"D={self.D}"
        return (f"{type(self).__name__}(p={self.p}, {reg}, T={self.T}, max_iter={self.max_iter}, "
                f"eps={self.eps})")

    # ---------------------------------------------------------------------------------------------
    # the restricted master

    def _penalty(self, N: int) -> float:
        D = self.D if self.D is not None else 1.0 / (self.nu * N)
        return D

    def _master(self, A: np.ndarray, D: float) -> tuple[np.ndarray, float, np.ndarray, float]:
        """Solve the restricted dual for the edges ``A[m, n] = y_n h(x_n; w_m)``.

        Returns ``(lambda, gamma, alpha, objective)``.
        """
        import cvxpy as cp

        M, N = A.shape
        q = self.p / (self.p - 1.0)
        c = (q - 1.0) ** (q - 1.0) / (q * (D * q) ** (q - 1.0))
        lam, gamma = cp.Variable(N, nonneg=True), cp.Variable()
        edge = A @ lam <= -gamma
        penalty = c * cp.power(cp.pnorm(lam, q), q)  # (more accurate in Clarabel than sum(power(lam, q)))
        prob = cp.Problem(cp.Maximize(gamma / self.T - penalty), [edge, cp.sum(lam) == 1])
        prob.solve(solver=cp.CLARABEL)
        if prob.status not in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE):
            raise RuntimeError(f"the restricted master failed: cvxpy status {prob.status}")
        alpha = np.maximum(np.asarray(edge.dual_value, dtype=np.float64).reshape(M), 0.0)
        return np.clip(lam.value, 0.0, None), float(gamma.value), alpha, float(prob.value)

    def primal_objective(self, margins: np.ndarray, D: float) -> float:
        """The primal objective ``min_rho -rho + D sum_n max(rho - margin_n, 0)^p`` at fixed margins
        ``y_n F(x_n)`` (for duality checks): at optimum it equals the master's value (``history_``)."""
        from scipy.optimize import minimize_scalar

        m = np.asarray(margins, dtype=np.float64)

        def f(rho: float) -> float:
            return -rho + D * float((np.maximum(rho - m, 0.0) ** self.p).sum())

        lo, hi = float(m.min()) - 1.0, float(m.max()) + 1.0
        return float(minimize_scalar(f, bounds=(lo, hi), method="bounded", options={"xatol": 1e-12}).fun)

    # ---------------------------------------------------------------------------------------------
    # fitting

    def fit(self, data: Sequence, y: Any) -> TCBoost:
        """Fit on instances ``data`` (itemsets, itemset sequences or graphs) with labels ``y`` (N,).

        Two classes give one binary problem (the larger class value is the positive side, so labels
        -1 / +1 keep their meaning); more classes are decomposed one-vs-one.
        """
        if isinstance(data, (str, bytes)) or not isinstance(data, Sequence):
            raise TypeError(f"data must be a list of instances, got {type(data).__name__}")
        if len(data) == 0:
            raise ValueError("data must be non-empty")
        yy = np.asarray(y.detach().cpu() if hasattr(y, "detach") else y)
        if yy.shape != (len(data),):
            raise ValueError(f"y must have shape ({len(data)},) (one label per instance), "
                             f"got {tuple(yy.shape)}")
        self.classes_ = np.unique(yy)
        if len(self.classes_) < 2:
            raise ValueError(f"y must contain at least two classes, got {self.classes_.tolist()}")
        if len(self.classes_) == 2:
            self._fit_binary(data, np.where(yy == self.classes_[1], 1.0, -1.0))
            return self
        self.pairs_, self.estimators_ = [], []
        for i in range(len(self.classes_)):
            for j in range(i + 1, len(self.classes_)):
                idx = np.flatnonzero((yy == self.classes_[i]) | (yy == self.classes_[j]))
                est = self._clone()
                est.classes_ = self.classes_[[i, j]]
                est._fit_binary([data[k] for k in idx], np.where(yy[idx] == self.classes_[j], 1.0, -1.0))
                self.pairs_.append((i, j))
                self.estimators_.append(est)
        self.patterns_ = [e.patterns_ for e in self.estimators_]
        self.alpha_ = [e.alpha_ for e in self.estimators_]
        self.n_iter_ = max(e.n_iter_ for e in self.estimators_)
        self.converged_ = all(e.converged_ for e in self.estimators_)
        return self

    def _clone(self) -> TCBoost:
        est = object.__new__(type(self))
        est.__dict__.update({k: v for k, v in self.__dict__.items() if not k.endswith("_")})
        return est

    def _fit_binary(self, data: Sequence, y: np.ndarray) -> None:
        N = len(data)
        D = self._penalty(N)
        # no master yet: every weak learner counts as violated in the first round (gamma = +inf here;
        # Algorithm 1's "gamma = -inf" would leave the first restricted master empty)
        lam, gamma = np.full(N, 1.0 / N), math.inf
        cols: list[tuple[Any, int]] = []
        index: dict[tuple[Any, int], int] = {}
        A = np.zeros((0, N))
        alpha = np.zeros(0)
        self.history_: list[dict] = []
        self.converged_ = False
        for it in range(1, self.max_iter + 1):
            found = self.miner(data, y, lam, top_k=self.columns)
            if it == 1 and not found:
                warnings.warn(f"{type(self).__name__}: the miner found no weak learner (is min_support above "
                              "every pattern's support?); the classifier is the constant 0", RuntimeWarning,
                              stacklevel=3)
            violation = max((g + gamma for _, _, g in found), default=-math.inf)
            new = [(t, d) for t, d, g in found if g + gamma > self.eps and (t, d) not in index]
            self.n_iter_ = it
            if violation <= self.eps or not new:
                self.converged_ = violation <= self.eps
                if not self.converged_:  # the only violated columns are already in the master
                    warnings.warn(f"{type(self).__name__}: the master's solution violates one of its own "
                                  f"columns by {violation:.3g} > eps = {self.eps:g} (solver tolerance); "
                                  "stopping", RuntimeWarning, stacklevel=3)
                break
            for col in new:
                index[col] = len(cols)
                cols.append(col)
            A = np.concatenate([A, (_stumps(new, data) * y[:, None]).T])
            lam, gamma, alpha, objective = self._master(A, D)
            self.history_.append({"max_violation": violation, "objective": objective, "columns": len(cols)})
        else:
            warnings.warn(f"{type(self).__name__} did not converge in max_iter = {self.max_iter} rounds "
                          f"(largest violation {violation:.3g} > eps = {self.eps:g})", RuntimeWarning,
                          stacklevel=3)
        keep = alpha > 1e-9 * max(float(alpha.sum()), 1e-300)
        self.columns_ = cols
        self.column_alpha_ = alpha
        self.patterns_ = [cols[m] for m in np.flatnonzero(keep)]
        self.alpha_ = alpha[keep]
        self.lambda_, self.gamma_, self.D_ = lam, gamma, D

    # ---------------------------------------------------------------------------------------------
    # prediction

    def _check_fitted(self) -> None:
        if not hasattr(self, "classes_"):
            raise RuntimeError(f"this {type(self).__name__} is not fitted: call fit(data, y) first")

    def decision_function(self, data: Sequence) -> np.ndarray:
        """``F(x) = sum_w alpha_w h(x; w)``: shape (n,) for two classes (positive: ``classes_[1]``), or
        (n, K (K - 1) / 2) for K classes, one column per pair of ``pairs_`` (positive: its class j)."""
        self._check_fitted()
        if isinstance(data, (str, bytes)) or not isinstance(data, Sequence) or len(data) == 0:
            raise ValueError("data must be a non-empty list of instances")
        if len(self.classes_) == 2:
            return _stumps(self.patterns_, data) @ self.alpha_
        # each distinct pattern is matched once, whatever the number of pairs that selected it
        distinct = dict.fromkeys(t for e in self.estimators_ for t, _ in e.patterns_)
        index = {t: m for m, t in enumerate(distinct)}
        occ = 2.0 * occurrence_matrix(list(index), data) - 1.0 if index else np.zeros((len(data), 0))
        out = np.zeros((len(data), len(self.estimators_)))
        for k, e in enumerate(self.estimators_):
            if e.patterns_:
                cols = [index[t] for t, _ in e.patterns_]
                signed = e.alpha_ * np.array([d for _, d in e.patterns_], dtype=np.float64)
                out[:, k] = occ[:, cols] @ signed
        return out

    def predict(self, data: Sequence) -> np.ndarray:
        """Class labels (n,): the sign of F for two classes, the decision DAG for more."""
        F = self.decision_function(data)
        if F.ndim == 1:
            return self.classes_[(F > 0).astype(int)]
        K = len(self.classes_)
        pair_index = np.full((K, K), -1)
        for k, (i, j) in enumerate(self.pairs_):
            pair_index[i, j] = k
        lo, hi = np.zeros(len(F), dtype=int), np.full(len(F), K - 1)
        rows = np.arange(len(F))
        for _ in range(K - 1):  # compare the first and last remaining class; drop the loser
            votes_hi = F[rows, pair_index[lo, hi]] > 0
            lo = np.where(votes_hi, lo + 1, lo)
            hi = np.where(votes_hi, hi, hi - 1)
        return self.classes_[lo]

    def score(self, data: Sequence, y: Any) -> float:
        """Accuracy of :meth:`predict` on ``(data, y)``."""
        yy = np.asarray(y.detach().cpu() if hasattr(y, "detach") else y)
        return float((self.predict(data) == yy).mean())


class LPBoost(TCBoost):
    """LPBoost (Demiriz et al. 2002): :class:`TCBoost` with the hinge loss, the limit ``p -> 1``.

    The restricted master is the LP ``min_{lambda, beta} beta`` s.t. ``sum_n lambda_n y_n h(x_n; w) <= beta``
    for the columns so far, ``sum lambda = 1``, ``0 <= lambda <= D = 1 / (nu N)`` (``gamma = -beta``), solved
    by HiGHS; ``alpha`` are its constraint multipliers (``sum alpha = 1``). At optimum the primal's
    ``-rho + D sum_n xi_n`` equals ``gamma`` (strong duality).

    Parameters
    ----------
    miner : callable
        As for :class:`TCBoost`, e.g. ``functools.partial(best_patterns, max_size=3)``.
    nu : float in (0, 1]
        The thesis's model-selected parameter (KTH: 0.05): at most a fraction ``nu`` of the training
        instances are margin errors, and at least ``nu`` are support vectors.
    max_iter, eps, columns
        As for :class:`TCBoost`.

    Examples
    --------
    >>> import functools
    >>> from structtorch.mining import LPBoost, best_patterns
    >>> data = [(frozenset({1}), frozenset({2})), (frozenset({2}), frozenset({1}))] * 4
    >>> y = [1, -1] * 4
    >>> model = LPBoost(functools.partial(best_patterns, max_size=2), nu=0.5).fit(data, y)
    >>> model.predict(data).tolist() == y
    True
    """

    def __init__(self, miner: Miner, *, nu: float = 0.05, max_iter: int = 100, eps: float = 1e-6,
                 columns: int = 5) -> None:
        super().__init__(miner, p=1.0, nu=nu, max_iter=max_iter, eps=eps, columns=columns)

    def _check_p(self, p: object) -> float:
        return 1.0

    def __repr__(self) -> str:
        return f"LPBoost(nu={self.nu}, max_iter={self.max_iter}, eps={self.eps}, columns={self.columns})"

    def _master(self, A: np.ndarray, D: float) -> tuple[np.ndarray, float, np.ndarray, float]:
        from scipy.optimize import linprog

        M, N = A.shape
        c = np.zeros(N + 1)
        c[-1] = 1.0
        A_ub = np.concatenate([A, -np.ones((M, 1))], axis=1)
        A_eq = np.concatenate([np.ones((1, N)), np.zeros((1, 1))], axis=1)
        bounds = [(0.0, D)] * N + [(None, None)]
        res = linprog(c, A_ub=A_ub, b_ub=np.zeros(M), A_eq=A_eq, b_eq=[1.0], bounds=bounds, method="highs")
        if res.status != 0:
            raise RuntimeError(f"the restricted master LP failed: {res.message}")
        alpha = np.maximum(-np.asarray(res.ineqlin.marginals, dtype=np.float64), 0.0)
        beta = float(res.x[-1])
        return np.clip(res.x[:N], 0.0, D), -beta, alpha, -beta

    def primal_objective(self, margins: np.ndarray, D: float) -> float:
        """``min_rho -rho + D sum_n max(rho - margin_n, 0)``: piecewise linear, so the optimum lies at
        a margin; at optimum it equals the master's value ``gamma``."""
        m = np.asarray(margins, dtype=np.float64)
        return float(min(-r + D * np.maximum(r - m, 0.0).sum() for r in m))
