"""The dual QP of cutting-plane training over its working set of planes (:class:`WorkingSet`).

The solvers: DAQP (a dual active-set method for small dense QPs) on the dual or on the primal in
factored coordinates, hot-started from the last active set; Clarabel (an interior-point method)
where DAQP fails, is slower or has no yardstick yet (its first solve); shrinking to the planes
likely active for large working sets.
The cutting-plane method itself is :mod:`structtorch.learn.solvers.cutting_plane`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import clarabel
import daqp
import numpy as np
import scipy.sparse as sp
import torch

__all__ = ["WorkingSet"]

DENSE_LIMIT = 1000
"""The most planes for which DAQP may get the dual on the dense Gram matrix (and the Gram matrix is
kept up to date); larger working sets get the primal in factored coordinates."""
DAQP_TOL = 1e-10
"""DAQP's primal feasibility and proximal-point tolerances (at their defaults the multipliers of a
singular QP and the feasible alpha are off by ~1e-6 relative)."""
DAQP_ITERATIONS = 6000
"""Active-set iterations DAQP may take on the primal form before Clarabel takes over (hot-started
from the last active set it solved a 2,333-plane slack-rescaling working set in about 3,500, cold
in 11,800; where it fails it cycles or runs to the limit)."""
QP_TIME_LIMIT = 600.0
"""Seconds Clarabel (or DAQP on the dual form) may spend on one dual QP (Clarabel: a RuntimeError
beyond, never a hang)."""
CLARABEL_CAP = 1e3
"""The largest owner sum of alpha / scale Clarabel may give (its unknowns stay of order one)."""
DAQP_PAUSE = 5
"""Solves of the primal form (a shrinking round counts as one) that go straight to Clarabel after
DAQP failed on it or took longer than Clarabel's last solve (and over ``DAQP_MIN_TIME`` /
``DAQP_TIME_SHARE`` seconds: timing noise is no miss), doubled after each such try in a row
(up to ``DAQP_PAUSE_MAX``). Its failures ran to the iteration limit (a 4,000-plane slack-rescaling
working set, 3-7 s each) or overran its time limit in its setup (hot-started with ~1,150 active
planes, n = 1000: 4-13 s against a limit of 0.8 s), and on the margin-rescaling working sets of C =
0.1, n = 1000, its successes took 0.5-1.2 s against Clarabel's 0.45-0.5 s."""
DAQP_PAUSE_MAX = 320
"""The longest pause (solves)."""
DAQP_TIME_SHARE = 2.0
"""DAQP may spend this many times the last Clarabel solve on the primal form (at least
``DAQP_MIN_TIME`` seconds): without it, twelve failures took 16 s each against 2 s per Clarabel
solve (Bauer slack rescaling, n = 1000), though DAQP can overrun its limit in its setup (see
``DAQP_PAUSE``). Until Clarabel has run once there is no yardstick, and the primal form goes to
Clarabel: a first budget of ``QP_TIME_LIMIT`` let DAQP take
20-70 s per solve where Clarabel takes 0.5 s (margin rescaling, C = 0.1, n = 1000: 622 s of QP)."""
DAQP_MIN_TIME = 0.1
DENSE_NEW = 4
"""At most this many new planes are made dense to update the Gram matrix (one d-vector each); more
take the sparse product."""
SHRINK_FROM = 400
"""Working sets of more planes are solved by shrinking (:meth:`WorkingSet._solve_shrunk`): the QP
over the planes likely to be active, then again with the planes its solution violates most, until
none is violated (at the optimum of a slack-rescaling working set of 4,000 planes, n = 400, about
550 are active)."""
SHRINK_ADD = 32
"""Planes a shrinking round adds at least (each owner's most violated ones, at least one per owner
with a violated plane): one-slack has a single owner, and one plane per round took 5-13 rounds."""
SHRINK_TOL = 1e-9
"""A plane outside the shrunk QP is violated where it exceeds its owner's slack by more than this
times max abs(c)."""
CLARABEL_TOL = 1e-10
"""Clarabel's gap and feasibility tolerances. At its defaults (1e-8) the interior-point alpha keeps
thousands of planes slightly positive, so they are never dropped as inactive, and the working set of
a slack-rescaling training stayed at 4,000-6,000 planes (n = 400)."""


@dataclass
class _DaqpPace:
    """When DAQP may try the primal form and for how long (shared by a working set and the parts it
    is shrunk to): ``pause`` solves left without it after it failed or took longer than Clarabel
    (``next_pause``: the pause after the next such try), and ``clarabel`` the seconds of the last
    Clarabel solve (one or two calls, :meth:`WorkingSet._solve_factored`), its fallback and
    yardstick (None until Clarabel has run: the first solve of the primal form goes to Clarabel)."""

    pause: int = 0
    clarabel: float | None = None
    next_pause: int = DAQP_PAUSE

    def ready(self) -> bool:
        """Whether DAQP may try this solve (counting down the pause where not)."""
        if self.clarabel is not None and not self.pause:
            return True
        self.pause = max(self.pause - 1, 0)
        return False

    def budget(self) -> float:
        """Seconds DAQP may take (``DAQP_TIME_SHARE`` times the last Clarabel solve)."""
        return min(QP_TIME_LIMIT, max(DAQP_MIN_TIME, DAQP_TIME_SHARE * (self.clarabel or 0.0)))

    def tried(self, seconds: float, solved: bool) -> None:
        """After DAQP failed or took longer than Clarabel (and than ``DAQP_MIN_TIME`` /
        ``DAQP_TIME_SHARE``), it pauses for ``DAQP_PAUSE`` solves, twice as many after each such try
        in a row, up to ``DAQP_PAUSE_MAX``."""
        if solved and seconds <= max(self.clarabel or 0.0, DAQP_MIN_TIME / DAQP_TIME_SHARE):
            self.next_pause = DAQP_PAUSE
        else:
            self.pause, self.next_pause = self.next_pause, min(2 * self.next_pause, DAQP_PAUSE_MAX)


class WorkingSet:
    """The planes ``xi_owner >= c_k - <w, a_k>`` found so far and the dual QP over them:

        max_alpha  c^T alpha - 1/(2 lambda) ||A^T alpha||^2,
        alpha >= 0,   sum of alpha_k over each owner's planes <= bound,

    (the bound is 1 for one slack, 1/n for n slacks); w = A^T alpha / lambda.

    DAQP (a dual active-set method for small dense QPs) solves one of two forms: the dual on the
    dense Gram matrix A A^T (up to ``DENSE_LIMIT`` planes and no more than the used columns, see
    :meth:`_dual_form`; kept up to date as planes come and go; hot-started from the last active
    set), or the QP's primal in factored coordinates
    (:meth:`_clarabel`'s problem), alpha its multipliers: F F^T = A A^T with F = A's used columns
    when they are few or sparse, else V sqrt(L) from the Gram matrix's eigendecomposition (its rank
    r <= k columns), so that its size is r + (owners) whatever k. Working sets of more than
    ``SHRINK_FROM`` planes are solved by shrinking (:meth:`_solve_shrunk`). Where DAQP fails or is
    paused (:class:`_DaqpPace`; always on the first solve of the primal form), Clarabel (an
    interior-point method, robust to scaling) solves that primal. HiGHS's active-set QP solver,
    tried first, stopped 1 % short of the optimum on the dense, singular Gram matrix with thousands
    of planes, and hung or dropped curvature (entries below 1e-9) at the scales planes of norm 1e4
    give; every method works on costs divided by max abs(c) and alpha over a scale of order one.

    Parameters
    ----------
    d : int
        Dimension of w.
    lam : float
        lambda > 0.
    bound : float
        The bound on each owner's dual sum.
    """

    def __init__(self, d: int, lam: float, bound: float) -> None:
        self.d, self.lam, self.bound = d, lam, bound
        self.owners: list[int] = []
        self.c = np.zeros(0)
        self.rows = sp.csr_array((0, d))
        self.gram: np.ndarray | None = np.zeros((0, 0))  # A A^T, kept up to date while k <= DENSE_LIMIT
        self.alpha = np.zeros(0)
        self.idle = np.zeros(0, dtype=np.int64)
        self.qp_time = 0.0
        self.pace = _DaqpPace()
        self.w_primal: np.ndarray | None = None  # w of the last solve's primal solution, if it had one

    def __len__(self) -> int:
        return len(self.owners)

    def state_dict(self) -> dict[str, Any]:
        """The planes, their dual variables and idle counts, the Gram matrix, the last primal w and
        the solver's pace, as tensors and plain values (for checkpoints)."""
        def tensor(a: np.ndarray | None) -> torch.Tensor | None:
            return None if a is None else torch.from_numpy(np.ascontiguousarray(a))

        rows = self.rows.tocsr()
        return {"d": self.d, "lam": self.lam, "bound": self.bound,
                "owners": torch.tensor(self.owners, dtype=torch.int64), "c": tensor(self.c),
                "rows": (tensor(rows.data), tensor(rows.indices.astype(np.int64)),
                         tensor(rows.indptr.astype(np.int64))),
                "gram": tensor(self.gram), "alpha": tensor(self.alpha), "idle": tensor(self.idle),
                "qp_time": self.qp_time, "w_primal": tensor(self.w_primal),
                "pace": (self.pace.pause, self.pace.clarabel, self.pace.next_pause)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        saved, mine = (state["d"], state["lam"], state["bound"]), (self.d, self.lam, self.bound)
        if saved != mine:
            raise ValueError(f"working set of (d, lambda, bound) = {saved}, expected {mine}")

        def array(t: torch.Tensor | None) -> np.ndarray | None:
            return None if t is None else t.numpy().copy()

        data, indices, indptr = (array(t) for t in state["rows"])
        self.rows = sp.csr_array((data, indices, indptr), shape=(len(indptr) - 1, self.d))
        self.owners = state["owners"].tolist()
        self.c, self.gram, self.alpha = array(state["c"]), array(state["gram"]), array(state["alpha"])
        self.idle, self.w_primal = array(state["idle"]), array(state["w_primal"])
        self.qp_time = float(state["qp_time"])
        self.pace = _DaqpPace(*state["pace"])

    def add(self, owners: list[int], c: np.ndarray, rows: sp.csr_array) -> None:
        """Add planes: their owners, constants c (k,) and vectors a (k, d)."""
        if not owners:
            return
        if self.gram is not None and len(self) + len(owners) <= DENSE_LIMIT:
            if len(owners) <= DENSE_NEW:  # the old planes times the dense new ones: no sparse product
                new = rows.toarray()
                cross, inner = (self.rows @ new.T).T, new @ new.T
            else:  # (new, old): transposing the few new rows only
                cross, inner = (self.rows @ rows.T).toarray().T, (rows @ rows.T).toarray()
            self.gram = np.block([[self.gram, cross.T], [cross, inner]])
        else:
            self.gram = None  # computed again when needed
        self.rows = sp.vstack([self.rows, rows], format="csr")
        self.owners += owners
        self.c = np.concatenate([self.c, c])
        self.alpha = np.concatenate([self.alpha, np.zeros(len(owners))])
        self.idle = np.concatenate([self.idle, np.zeros(len(owners), dtype=np.int64)])

    def feasible(self, alpha: np.ndarray) -> np.ndarray:
        """``alpha`` made dual-feasible: entries below 1e-9 of the largest set to 0 (so that unused
        planes are seen as unused) and each owner's sum scaled down to the bound (the QP solver's answer
        is feasible only to its tolerance); any such alpha gives a lower bound."""
        alpha = np.where(alpha > 1e-9 * float(alpha.max(initial=0.0)), alpha, 0.0)  # interior-point zeros
        owners = np.asarray(self.owners)
        sums = np.bincount(owners, weights=alpha, minlength=owners.max() + 1)
        scale = np.where(sums > self.bound, self.bound / np.where(sums > 0, sums, 1.0), 1.0)
        return alpha * scale[owners]

    def solve(self) -> float:
        """Solve the dual QP; returns the dual value of the (feasible) solution, which is a lower
        bound on the primal optimum.

        DAQP (a dual active-set method for small dense QPs) solves the dual on the dense Gram matrix
        (k unknowns, where :meth:`_dual_form` says so; hot-started from the last solution), or
        else the primal in the factored coordinates (r + owners unknowns, alpha its
        multipliers; :meth:`_daqp_primal`). The dual works on alpha / s, s the smaller of the bound
        and the scale of one plane's optimal alpha (lambda max abs(c) / max ||a_k||^2), so that the
        unknowns are of order 1 at any plane norm; the primal on alpha over the scale of the last
        solution (:meth:`_scales`). Where DAQP fails or is paused, Clarabel (an interior-point
        method) solves the primal (:meth:`_clarabel`); DAQP pauses where it failed or was slower
        than Clarabel (:class:`_DaqpPace`). An answer whose dual value is below 0 becomes alpha = 0
        (e.g. an interior-point alpha of tiny positive entries where no plane is worth any)."""
        if not len(self):
            return 0.0
        began = time.perf_counter()
        solve = self._solve_shrunk if len(self) > SHRINK_FROM else self._solve_whole
        self.alpha, self.w_primal = solve()
        value = self.dual()
        if value < 0.0:  # alpha = 0 is better (its dual value is 0)
            self.alpha, value = np.zeros(len(self)), 0.0
        self.idle = np.where(self.alpha > 0, 0, self.idle + 1)
        self.qp_time += time.perf_counter() - began
        return value

    def _solve_whole(self) -> tuple[np.ndarray, np.ndarray | None]:
        """(alpha, the primal's w or None) over every plane: DAQP on the dual or the factored
        primal (:meth:`_dual_form`), then Clarabel (see :meth:`solve`)."""
        if not self.rows.nnz:  # every plane is zero (or none is left): no QP (Clarabel fails on it)
            return self._solve_linear()
        dual_form = self._dual_form()
        alpha = self._daqp_dual() if dual_form else None
        if alpha is not None:
            return alpha, None
        return self._solve_factored(daqp_first=not dual_form)

    def _solve_linear(self) -> tuple[np.ndarray, np.ndarray]:
        """(alpha, w = 0) where every plane is zero: the dual is then linear, and alpha puts the bound
        on each owner's plane of largest c where that c is positive."""
        order, rank = self._ranked(np.arange(len(self)), self.c)
        top = order[rank == 0]
        alpha = np.zeros(len(self))
        alpha[top] = np.where(self.c[top] > 0, self.bound, 0.0)
        return alpha, np.zeros(self.d)

    def _solve_shrunk(self) -> tuple[np.ndarray, np.ndarray]:
        """(alpha, w) by shrinking: :meth:`_solve_whole` over the planes active at the last solve
        and the new ones (alpha 0 elsewhere, which is dual-feasible), then again with the planes
        that w violates most (:meth:`_violated`), until none is violated by more than
        ``SHRINK_TOL`` max abs(c): then alpha is optimal over all planes (the working set's primal
        at w is within that of the shrunk QP's). Each QP costs about planes x dimension^2, and most
        planes of a large working set stay inactive."""
        chosen = np.flatnonzero(self.idle == 0)  # active at the last solve, or new
        full = self.alpha
        while True:
            part = self._part(chosen, full[chosen])
            alpha, w = part._solve_whole()
            w = part.rows.T @ alpha / self.lam if w is None else w
            full = np.zeros(len(self))
            full[chosen] = alpha
            violated = self._violated(w, chosen)
            if not len(violated):
                return full, w
            chosen = np.union1d(chosen, violated)

    def _part(self, chosen: np.ndarray, alpha: np.ndarray) -> WorkingSet:
        """The working set of the planes ``chosen`` (sorted indices), with ``alpha`` (a hot start)."""
        part = WorkingSet(self.d, self.lam, self.bound)
        part.owners = [self.owners[i] for i in chosen]
        part.c, part.rows = self.c[chosen], self.rows[chosen]
        part.alpha, part.idle = alpha, self.idle[chosen]
        part.gram = None if self.gram is None else self.gram[np.ix_(chosen, chosen)]
        part.pace = self.pace
        return part

    def _violated(self, w: np.ndarray, chosen: np.ndarray) -> np.ndarray:
        """Planes not ``chosen`` whose c - <w, a> exceeds their owner's slack under the chosen planes,
        max(0, their largest c - <w, a>), by more than ``SHRINK_TOL`` max abs(c): the most violated
        of each owner, at least ``SHRINK_ADD`` in all where that many are violated (sorted)."""
        values = self.c - self.rows @ w
        owners = np.asarray(self.owners)
        slack = np.zeros(owners.max() + 1)
        np.maximum.at(slack, owners[chosen], values[chosen])
        excess = values - slack[owners]
        excess[chosen] = -np.inf
        order, rank = self._ranked(np.flatnonzero(excess > SHRINK_TOL * self.peak), excess)
        per_owner = max(1, -(-SHRINK_ADD // max(int((rank == 0).sum()), 1)))
        return np.sort(order[rank < per_owner])

    def _ranked(self, planes: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(``planes`` sorted by owner, then by ``values`` (k,) descending; each one's rank among its
        owner's, 0 for the largest)."""
        owners = np.asarray(self.owners, dtype=np.int64)[planes]
        order = np.lexsort((-values[planes], owners))
        starts = np.flatnonzero(np.diff(owners[order], prepend=-1))
        rank = np.arange(len(order)) - np.repeat(starts, np.diff(np.append(starts, len(order))))
        return planes[order], rank

    def _solve_factored(self, daqp_first: bool) -> tuple[np.ndarray, np.ndarray]:
        """(alpha, w): the dual's feasible solution from the primal in factored coordinates, and the
        w of that primal's solution, in units of the scale nearest the last solution
        (:meth:`_scales`): DAQP (if ``daqp_first`` and it is not paused, :class:`_DaqpPace`; in
        units of the bound, then of one plane's alpha), else Clarabel
        (in units of the last solution's alpha); Clarabel again at the bound where the first scale
        capped the answer, keeping the better.

        The primal's w, not A^T alpha / lambda: near the optimum many planes tie, and an
        interior-point alpha spreads over them; its dual value is accurate, but A^T alpha / lambda
        magnifies its error by the planes' norms (a Bauer slack-rescaling working set, n = 400: a
        working-set primal 0.2-0.8 above the dual, against 1e-8 with the primal's w)."""
        factor, lift = self.factor()
        norm = max(float(np.sqrt(factor.multiply(factor).sum(1).max())), 1e-150)
        factor = sp.csc_matrix(factor / norm)
        small = self.lam * self.peak / norm**2
        scales = self._scales(small)
        answers = []
        if daqp_first and self.pace.ready():  # at the bound, then (if smaller) one plane's scale
            began = time.perf_counter()
            deadline = began + self.pace.budget()
            for scale in (self.bound, small) if small < 1e-3 * self.bound else (self.bound,):
                answer = self._daqp_primal(factor, norm, scale, deadline - time.perf_counter())
                if answer is not None:
                    answers = [answer]
                    break
            self.pace.tried(time.perf_counter() - began, bool(answers))
        if not answers:
            began = time.perf_counter()
            answers.append(self._clarabel(factor, norm, scales[0]))
            if len(scales) > 1 and (self._owner_sums(answers[0][0]).max(initial=0.0)
                                    >= 0.99 * CLARABEL_CAP * scales[0]):
                answers.append(self._clarabel(factor, norm, scales[1]))
            self.pace.clarabel = time.perf_counter() - began
        alpha, v = max(answers, key=lambda answer: self.dual(answer[0]))
        return alpha, lift(self.peak * v / norm)

    def _scales(self, small: float) -> tuple[float, ...]:
        """Units of alpha for the factored QP, the first to try first: ten times the largest owner sum
        of the last solution, within [small, bound] (small: one plane's optimal alpha, lambda max
        abs(c) / max ||a_k||^2, the unit of a first solve); then the bound, where the first is below
        it by more than the cap on the unknowns (``CLARABEL_CAP``)."""
        top = float(self._owner_sums(self.alpha).max(initial=0.0))
        first = min(max(10.0 * top, small), self.bound)
        return (first, self.bound) if first * CLARABEL_CAP < self.bound else (first,)

    def _owner_sums(self, alpha: np.ndarray) -> np.ndarray:
        """Each owner's sum of alpha."""
        return np.bincount(np.asarray(self.owners, dtype=np.int64), weights=alpha) if len(alpha) else alpha

    def _dual_form(self) -> bool:
        """Whether DAQP gets the dual (k unknowns) rather than the primal (r + owners unknowns, with
        r at most the planes' used columns): where k <= ``DENSE_LIMIT`` and k <= the used columns,
        so that the Gram matrix may be regular (on a singular one DAQP's proximal-point iterations
        are slow: 10,000 iterations, 5 s, and a failure on 560 planes in 188 dimensions)."""
        k = len(self)
        if k > DENSE_LIMIT:
            return False
        return np.diff(self.rows.indptr).max() >= k or len(self._columns()) >= k  # one full plane settles it

    def _columns(self) -> np.ndarray:
        """The columns some plane uses (sorted; a bincount, no sort of the k x nnz indices)."""
        return np.flatnonzero(np.bincount(self.rows.indices, minlength=self.d))

    def _groups(self) -> tuple[np.ndarray, np.ndarray]:
        """(the distinct owners, each plane's index among them)."""
        owners = np.asarray(self.owners)
        groups = np.unique(owners)
        return groups, np.searchsorted(groups, owners)

    def _daqp_dual(self) -> np.ndarray | None:
        """The dual's feasible solution by DAQP on the dense Gram matrix (None where DAQP fails)."""
        gram, k = self.dense_gram(), len(self)
        peak = self.peak
        scale = min(self.bound, self.lam * peak / max(float(gram.diagonal().max()), 1e-300))
        groups, member = self._groups()
        blocks = (member[None, :] == np.arange(len(groups))[:, None]).astype(np.float64)  # (groups, k)
        hessian = np.ascontiguousarray(gram * (scale / (self.lam * peak)))
        upper = np.concatenate([np.full(k, 1e30), np.full(len(groups), self.bound / scale)])
        lower = np.concatenate([np.zeros(k), np.full(len(groups), -1e30)])
        start = np.ascontiguousarray(self.alpha / scale)
        beta, _, flag, _ = daqp.solve(hessian, np.ascontiguousarray(-self.c / peak), blocks, upper, lower,
                                      np.zeros(k + len(groups), dtype=np.intc), primal_start=start,
                                      primal_tol=DAQP_TOL, eta_prox=DAQP_TOL, time_limit=QP_TIME_LIMIT)
        return self.feasible(scale * np.asarray(beta)) if flag == 1 else None

    def _daqp_primal(self, factor: sp.csc_matrix, norm: float, scale: float,
                     seconds: float = QP_TIME_LIMIT) -> tuple[np.ndarray, np.ndarray] | None:
        """(alpha, v): the dual's feasible solution as DAQP's multipliers of the primal of
        :meth:`_clarabel`, and that primal's v (None where DAQP fails or takes over ``seconds``)."""
        if seconds <= 0:
            return None
        k, r = factor.shape
        peak = self.peak
        groups, member = self._groups()
        g = len(groups)
        kappa = scale * norm**2 / (self.lam * peak)
        hessian = np.zeros((r + g, r + g))
        hessian[np.arange(r), np.arange(r)] = 1.0 / kappa
        cost = np.concatenate([np.zeros(r), np.full(g, self.bound / scale)])
        rows = np.zeros((k, r + g))
        rows[:, :r] = factor.toarray()
        rows[np.arange(k), r + member] = 1.0
        upper = np.full(r + g + k, 1e30)
        lower = np.concatenate([np.full(r, -1e30), np.zeros(g), self.c / peak])
        sense = np.zeros(r + g + k, dtype=np.intc)
        # hot start: the planes of largest alpha last time active at their lower bounds (DAQP's
        # ACTIVE | LOWER bits), at most as many as the unknowns (with half as many, a Bauer margin
        # rescaling working set, n = 400, took 1,000-2,000 iterations instead of 100-300)
        last = np.flatnonzero(self.alpha > 0)
        last = last[np.argsort(-self.alpha[last])[:r + g]]
        sense[r + g + last] = 3
        x, _, flag, info = daqp.solve(hessian, cost, rows, upper, lower, sense,
                                      primal_tol=DAQP_TOL, eta_prox=DAQP_TOL, iter_limit=DAQP_ITERATIONS,
                                      time_limit=seconds)
        if flag != 1:
            return None
        beta = np.maximum(-np.asarray(info["lam"])[r + g:], 0.0)  # lower bounds active: lam <= 0
        return self.feasible(scale * beta), np.asarray(x)[:r]

    @property
    def peak(self) -> float:
        """max abs(c), the costs' scale (at least 1e-300)."""
        return max(float(np.abs(self.c).max()), 1e-300)

    def dense_gram(self) -> np.ndarray:
        """A A^T (k, k), dense."""
        if self.gram is None or self.gram.shape[0] != len(self):
            self.gram = (self.rows @ self.rows.T).toarray()
        return self.gram

    def _clarabel(self, factor: sp.csc_matrix, norm: float, scale: float) -> tuple[np.ndarray, np.ndarray]:
        """(alpha, v): alpha (k,) feasible for the dual, scale times the beta maximizing the dual in
        beta = alpha / scale found as the multipliers of its primal

            min_{v, xi}  1/(2 kappa) ||v||^2 + m sum_g xi_g,   xi_owner(k) >= c_k - <F_k, v>,  xi >= 0,

        (F the factor divided by ``norm``, c divided by max abs(c), kappa = scale norm^2 /
        (lambda max abs(c)), m = bound / scale capped at 1e3): r + (owners) unknowns whatever k, and
        Clarabel's factorization eliminates the k plane rows first; and that primal's v."""
        k, r = factor.shape
        peak = self.peak
        groups, index = self._groups()
        g = len(groups)
        member = sp.csc_matrix((np.ones(k), (np.arange(k), index)), shape=(k, g))
        kappa = scale * norm**2 / (self.lam * peak)
        hessian = sp.block_diag([sp.identity(r) / kappa, sp.csc_matrix((g, g))]).tocsc()
        # a block's sum of beta at most bound / scale, and CLARABEL_CAP (a small scale looks for small
        # alpha; a tighter bound only restricts the feasible set, every answer stays a lower bound)
        q = np.concatenate([np.zeros(r), np.full(g, min(self.bound / scale, CLARABEL_CAP))])
        rows = sp.vstack([sp.hstack([-factor, -member]),
                          sp.hstack([sp.csc_matrix((g, r)), -sp.identity(g)])]).tocsc()
        rhs = np.concatenate([-self.c / peak, np.zeros(g)])
        cones = [clarabel.NonnegativeConeT(k + g)]
        for tol in (CLARABEL_TOL, None):  # None: Clarabel's defaults, where the tight tolerances fail
            settings = clarabel.DefaultSettings()
            settings.verbose = False
            settings.time_limit = QP_TIME_LIMIT
            if tol is not None:
                settings.tol_gap_abs = settings.tol_gap_rel = settings.tol_feas = tol
            result = clarabel.DefaultSolver(sp.triu(hessian).tocsc(), q, rows, rhs, cones, settings).solve()
            if str(result.status) in ("Solved", "AlmostSolved"):
                break
        else:
            raise RuntimeError(f"the cutting-plane dual QP did not solve: Clarabel status '{result.status}'")
        beta = np.maximum(np.asarray(result.z)[:k], 0.0)
        return self.feasible(scale * beta), np.asarray(result.x)[:r]

    def factor(self) -> tuple[sp.csr_array, Callable[[np.ndarray], np.ndarray]]:
        """(F, lift): a (k, r) matrix F with F F^T = A A^T, and the map of v (r,) to the w (d,)
        with A w = F v in A's row space: F is A's nonzero columns when they are few or sparse (at
        most k of them, or fewer nonzeros than the k x k Gram matrix has entries; w is v on those
        columns), else V sqrt(L) of the Gram matrix's eigendecomposition without its null space
        (r = its rank; w = A^T V L^(-1/2) v)."""
        k = len(self)
        columns = self._columns()
        used = self.rows[:, columns]

        def on_columns(v: np.ndarray) -> np.ndarray:
            w = np.zeros(self.d)
            w[columns] = v[:len(columns)]
            return w

        if used.shape[1] <= k or used.nnz + used.shape[1] <= k * k:
            return used, on_columns
        values, vectors = np.linalg.eigh(self.dense_gram())
        keep = values > 1e-12 * max(float(values[-1]), 1e-300)
        basis = vectors[:, keep] / np.sqrt(values[keep])  # (k, r): A^T basis is orthonormal
        return sp.csr_array(vectors[:, keep] * np.sqrt(values[keep])), lambda v: self.rows.T @ (basis @ v)

    def dual(self, alpha: np.ndarray | None = None) -> float:
        """The dual objective at ``alpha`` (default: the current alpha), from the Gram matrix where
        it is kept (no pass over the planes)."""
        alpha = self.alpha if alpha is None else alpha
        if self.gram is not None and len(alpha) == len(self.gram):
            return float(self.c @ alpha - 0.5 * (alpha @ self.gram @ alpha) / self.lam)
        z = self.rows.T @ alpha
        return float(self.c @ alpha - 0.5 * (z @ z) / self.lam)

    def weights(self) -> np.ndarray:
        """w (d,): the last solve's primal solution where it solved the primal form (see
        :meth:`_solve_factored`), else A^T alpha / lambda."""
        if not len(self):
            return np.zeros(self.d)
        if self.w_primal is not None:
            return self.w_primal
        return self.rows.T @ self.alpha / self.lam

    def prune(self, inactive: int) -> None:
        """Drop the planes whose alpha has been 0 for ``inactive`` solves (the dual value stays)."""
        keep = self.idle < inactive
        if keep.all():
            return
        self.owners = [o for o, k in zip(self.owners, keep, strict=True) if k]
        self.c, self.alpha, self.idle = self.c[keep], self.alpha[keep], self.idle[keep]
        self.rows = self.rows[np.flatnonzero(keep)]
        self.gram = None if self.gram is None else self.gram[np.ix_(keep, keep)]
