"""MAP inference by the LP relaxation over the local polytope, with connectivity cutting planes.

Variables mu_i(s) (V x L) and mu_ij(s, t) (E x L x L) in [0, 1]; maximize

    sum_i sum_s unary[i, s] mu_i(s) + sum_e sum_{s,t} pairwise[e, s, t] mu_e(s, t)

subject to sum_s mu_i(s) = 1 and the marginalization constraints of every edge (digest eqs.
59-61, relaxed). ``connected`` labels add the vertex-separator inequalities of their label planes
on demand (Algorithm 7: solve, separate, add the violated cuts, re-solve with a warm-started dual
simplex); ``connected_soft`` labels add them with one slack s_c >= 0 per label that the objective
charges ``weight * s_c`` (the soft connectivity potential). The solver is HiGHS (highspy).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import highspy
import numpy as np
import scipy.sparse as sp
import torch
from torch import Tensor

from .graph import check_graph_potentials
from .rounding import fractional
from .separation import Separator

__all__ = ["map_lp", "LPResult", "lp_score"]


@dataclass
class LPResult:
    """Solution of :func:`map_lp` for a batch of B instances on one graph.

    Attributes
    ----------
    mu : Tensor (B, V, L)
        Node variables (detached; dtype and device of ``unary``).
    mu_edges : Tensor (B, E, L, L)
        Edge variables.
    score : Tensor (B,)
        The LP optimum, differentiable w.r.t. ``unary``, ``pairwise`` (and soft weights given as
        tensors): by Danskin its gradient is ``mu`` / ``mu_edges``.
    integral : Tensor (B,) bool
        All variables within 1e-6 of 0 or 1 (with ``converged``, ``mu`` is then the exact
        constrained MAP).
    fractional_fraction : Tensor (B,)
        Fraction of nodes with a fractional variable.
    cuts : list of B lists of (label, i, j, separator)
        The connectivity cuts added, with ``separator`` a (|S|,) int64 tensor.
    iterations : Tensor (B,) int64
        LP solves per instance.
    converged : Tensor (B,) bool
        No violated cut remained (False when ``max_iter`` stopped the loop).
    slack : Tensor (B, C_soft)
        The soft-connectivity slacks, in the order of ``connected_soft``.
    timings : list of B dicts
        Seconds spent in "lp" and "separation".
    edges : Tensor (E, 2), cost : Tensor (B, n), connected : list of int
        The problem, for :func:`structtorch.lp.stability_range`: ``cost`` is the minimized energy
        -[unary, pairwise] over the n = V L + E L^2 variables, ``connected`` the hard labels.
    """

    mu: Tensor
    mu_edges: Tensor
    score: Tensor
    integral: Tensor
    fractional_fraction: Tensor
    cuts: list
    iterations: Tensor
    converged: Tensor
    slack: Tensor
    timings: list = field(default_factory=list)
    edges: Tensor | None = field(default=None, repr=False)
    cost: Tensor | None = field(default=None, repr=False)
    connected: list = field(default_factory=list)
    soft: bool = False


def _constraints(V: int, L: int, edges: Tensor) -> sp.csc_array:
    """Equality rows: normalization (V) and marginalization of every edge (2 E L)."""
    E = len(edges)
    nodes = np.arange(V * L).reshape(V, L)
    pair = V * L + np.arange(E * L * L).reshape(E, L, L)
    e = edges.numpy()
    rows, cols, vals = [np.repeat(np.arange(V), L)], [nodes.reshape(-1)], [np.ones(V * L)]
    r0 = V
    for side in (0, 1):  # sum_t mu_e(s, t) = mu_i(s); sum_s mu_e(s, t) = mu_j(t)
        row = r0 + np.arange(E * L).reshape(E, L)
        members = pair if side == 0 else pair.transpose(0, 2, 1)
        rows += [np.repeat(row.reshape(-1), L), row.reshape(-1)]
        cols += [members.reshape(-1), nodes[e[:, side]].reshape(-1)]
        vals += [np.ones(E * L * L), -np.ones(E * L)]
        r0 += E * L
    A = sp.coo_array((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                     shape=(r0, V * L + E * L * L))
    return A.tocsc()


def _weight(w) -> float:
    return float(w.detach()) if isinstance(w, Tensor) else float(w)


def _check_labels(connected, connected_soft, L: int) -> tuple[list[int], list[tuple[int, object]]]:
    hard = [] if connected is None else list(connected)
    soft = [] if connected_soft is None else list(connected_soft.items())
    for c in hard + [c for c, _ in soft]:
        if isinstance(c, bool) or not isinstance(c, (int, np.integer)) or not 0 <= c < L:
            raise ValueError(f"connected labels must be ints in [0, L) = [0, {L}), got {c!r}")
    for c, w in soft:
        if not (np.isfinite(_weight(w)) and _weight(w) >= 0):
            raise ValueError(f"connected_soft weights must be finite and >= 0 (else the LP is unbounded), "
                             f"got {_weight(w)} for label {c}")
    if set(hard) & {c for c, _ in soft}:
        raise ValueError("a label cannot be both in connected and in connected_soft")
    return [int(c) for c in hard], [(int(c), w) for c, w in soft]


class _Instance:
    """One LP with its cut rows, solved and re-solved by HiGHS."""

    def __init__(self, cost: np.ndarray, A: sp.csc_array, rhs: np.ndarray, num_slack: int):
        self.h = highspy.Highs()
        self.h.setOptionValue("output_flag", False)
        lp = highspy.HighsLp()
        n = A.shape[1] + num_slack
        lp.num_col_, lp.num_row_ = n, A.shape[0]
        lp.col_cost_ = cost
        upper = np.concatenate([np.ones(A.shape[1]), np.full(num_slack, highspy.kHighsInf)])
        lp.col_lower_, lp.col_upper_ = np.zeros(n), upper
        lp.row_lower_, lp.row_upper_ = rhs, rhs
        full = sp.hstack([A, sp.csc_array((A.shape[0], num_slack))]).tocsc() if num_slack else A
        lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        lp.a_matrix_.start_, lp.a_matrix_.index_, lp.a_matrix_.value_ = full.indptr, full.indices, full.data
        lp.a_matrix_.num_col_, lp.a_matrix_.num_row_ = n, A.shape[0]
        self.h.passModel(lp)

    def solve(self) -> np.ndarray:
        self.h.run()
        status = self.h.getModelStatus()
        if status != highspy.HighsModelStatus.kOptimal:
            raise RuntimeError(f"the LP relaxation did not solve: HiGHS status "
                               f"'{self.h.modelStatusToString(status)}'")
        return np.asarray(self.h.getSolution().col_value)

    def add_rows(self, rows: list[tuple[np.ndarray, np.ndarray]], upper: np.ndarray | None = None) -> None:
        """Add rows ``val . x[idx] <= upper`` (default 1)."""
        starts = np.cumsum([0] + [len(idx) for idx, _ in rows[:-1]])
        index = np.concatenate([idx for idx, _ in rows]).astype(np.int32)
        value = np.concatenate([val for _, val in rows]).astype(np.float64)
        k = len(rows)
        upper = np.ones(k) if upper is None else np.asarray(upper, dtype=np.float64)
        self.h.addRows(k, np.full(k, -highspy.kHighsInf), upper, len(index), starts.astype(np.int32),
                       index, value)


def _cut_row(c: int, i: int, j: int, S: np.ndarray, L: int,
             slack: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Column indices and coefficients of mu_i(c) + mu_j(c) - sum_S mu_k(c) (- s_c) <= 1."""
    idx = np.concatenate([[i * L + c, j * L + c], np.asarray(S, dtype=np.int64) * L + c])
    val = np.concatenate([[1.0, 1.0], -np.ones(len(S))])
    return (idx, val) if slack is None else (np.append(idx, slack), np.append(val, -1.0))


def check_cuts(cuts, B: int, V: int, L: int) -> list[list]:
    """Cut rows (label, i, j, separator) as one list for all instances or one list per instance,
    validated; returns B lists with int labels/nodes and int64 separators."""
    if cuts is None:
        return [[] for _ in range(B)]
    per_instance = cuts if len(cuts) == B and all(isinstance(c, list) for c in cuts) else [cuts] * B
    checked = []
    for rows in per_instance:
        out = []
        for row in rows:
            c, i, j, S = row
            S = torch.as_tensor(S, dtype=torch.long).reshape(-1).cpu()
            ok = 0 <= int(c) < L and 0 <= int(i) < V and 0 <= int(j) < V and int(i) != int(j)
            ok = ok and (not len(S) or (int(S.min()) >= 0 and int(S.max()) < V and not bool(
                torch.isin(S, torch.tensor([int(i), int(j)])).any())))
            if not ok:
                raise ValueError(f"cut rows must be (label in [0, {L}), i != j in [0, {V}), separator in "
                                 f"[0, {V}) without i and j), got {row}")
            out.append((int(c), int(i), int(j), S))
        checked.append(out)
    return checked


def lp_score(unary: Tensor, pairwise: Tensor, mu: Tensor, mu_edges: Tensor) -> Tensor:
    """(B,) <unary, mu> + <pairwise, mu_edges>, differentiable in all four."""
    return (unary * mu).sum((1, 2)) + (pairwise * mu_edges).sum((1, 2, 3))


def map_lp(
    unary: Tensor,
    pairwise: Tensor,
    edges: Tensor,
    *,
    connected: list[int] | None = None,
    connected_soft: dict | None = None,
    max_iter: int = 100,
    tol: float = 1e-6,
    cuts_per_round: int = 100,
    cuts: list | None = None,
    nested: int = 4,
) -> LPResult:
    """Maximize the score over the local polytope, with connectivity cuts (Algorithm 7).

    Parameters
    ----------
    unary : Tensor (V, L) or (B, V, L)
    pairwise : Tensor (E, L, L) or (B, E, L, L)
        ``pairwise[e, s, t]`` scores label s at ``edges[e, 0]`` and t at ``edges[e, 1]``.
    edges : Tensor (E, 2) int64
        Undirected edges with i < j, no duplicates.
    connected : list of int, optional
        Labels whose nodes must form one connected subgraph (hard potential, eq. 70).
    connected_soft : dict {label: weight >= 0}, optional
        Soft connectivity: the score loses ``weight * max(0, max_d d^T mu^c - 1)``.
    max_iter : int
        Most LP solves per instance.
    tol : float
        Separation tolerance.
    cuts_per_round : int
        Most violated cuts added per label and round (one per pair of representatives).
    nested : int
        Cuts per violated pair, with disjoint separators (nested cuts; 1 = the thesis's single
        most violated one). Several rings of zero-weight separators per round speed up
        convergence a lot on noisy instances.
    cuts : list of (label, i, j, separator), or a list of B such lists, optional
        Rows ``mu_i(label) + mu_j(label) - sum_{k in separator} mu_k(label) <= 1`` to start from
        (``- s_label`` for soft labels), e.g. the ``cuts`` of an earlier result on the same graph
        (they depend on the graph only). Rows are taken as given: they are connectivity cuts
        when the separator separates i and j.

    Returns
    -------
    LPResult
    """
    unary_b, pairwise_b, edges = check_graph_potentials(unary, pairwise, edges)
    if max_iter < 1 or cuts_per_round < 1:
        raise ValueError(f"max_iter and cuts_per_round must be >= 1, got {max_iter} and {cuts_per_round}")
    B, V, L = unary_b.shape
    E = len(edges)
    hard, soft = _check_labels(connected, connected_soft, L)
    A = _constraints(V, L, edges)
    rhs = np.concatenate([np.ones(V), np.zeros(2 * E * L)])
    sep = Separator.build(edges, V) if hard or soft else None
    soft_w = np.array([_weight(w) for _, w in soft])
    slack_col = {c: V * L + E * L * L + pos for pos, (c, _) in enumerate(soft)}
    cost = -torch.cat([unary_b.reshape(B, -1), pairwise_b.reshape(B, -1)], 1).detach().double().cpu().numpy()
    n = V * L + E * L * L
    start = check_cuts(cuts, B, V, L)
    sols, all_cuts, iters, done, timings = [], [], [], [], []
    for b in range(B):
        inst = _Instance(np.concatenate([cost[b], soft_w]), A, rhs, len(soft))
        if start[b]:
            inst.add_rows([_cut_row(c, i, j, S.numpy(), L, slack_col.get(c)) for c, i, j, S in start[b]])
        found, t_lp, t_sep = list(start[b]), 0.0, 0.0
        converged, solves = False, 0
        while solves < max_iter:
            t0 = time.perf_counter()
            x = inst.solve()
            solves += 1
            t_lp += time.perf_counter() - t0
            if sep is None:
                converged = True
                break
            t0 = time.perf_counter()
            rows = []
            for c in hard + [c for c, _ in soft]:
                y = np.clip(x[np.arange(V) * L + c], 0.0, 1.0)
                slack = x[slack_col[c]] if c in slack_col else 0.0
                for _, i, j, S in sep.violated(y, tol, cuts_per_round, nested, offset=slack):
                    rows.append(_cut_row(c, i, j, S, L, slack_col.get(c)))
                    found.append((c, i, j, torch.from_numpy(S).long()))
            t_sep += time.perf_counter() - t0
            if not rows:
                converged = True
                break
            inst.add_rows(rows)
        sols.append(x)
        all_cuts.append(found)
        iters.append(solves)
        done.append(converged)
        timings.append({"lp": t_lp, "separation": t_sep})
    X = torch.from_numpy(np.stack(sols))
    mu = X[:, : V * L].reshape(B, V, L).clamp(0, 1)
    mu_e = X[:, V * L:n].reshape(B, E, L, L).clamp(0, 1)
    slack = X[:, n:].clamp(min=0)
    frac, frac_e = fractional(mu), fractional(mu_e).flatten(1).any(1)
    ref = unary_b
    mu, mu_e, slack = (t.to(dtype=ref.dtype, device=ref.device) for t in (mu, mu_e, slack))
    score = lp_score(unary_b, pairwise_b, mu, mu_e)
    for pos, (_, w) in enumerate(soft):
        score = score - w * slack[:, pos]
    dev = ref.device
    return LPResult(mu, mu_e, score, (~frac.flatten(1).any(1) & ~frac_e).to(dev),
                    frac.any(2).double().mean(1).to(dtype=ref.dtype, device=dev), all_cuts,
                    torch.tensor(iters, device=dev), torch.tensor(done, device=dev), slack, timings, edges,
                    torch.from_numpy(cost), hard, bool(soft))
