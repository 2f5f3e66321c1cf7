"""A differentiable MAP relaxation layer: a native QP with an exact implicit backward, or cvxpylayers.

The LP over the local polytope has a piecewise-constant solution in the potentials: its gradient
is zero almost everywhere (measured norms 1e-6 to 1e-4 through cvxpylayers). The layer therefore
solves the quadratically smoothed problem

    max_mu  <theta, mu> - smoothing / 2 * sum_i ||mu_i||^2    over the local polytope and the cut block

(the node variables; label-symmetric), whose node solution is unique and moves smoothly with the
potentials. With two labels the formulation is the reduced one, y_i = mu_i(1) and z_e = mu_e(1, 1)
(mu_e(0, 1) = y_j - z_e and so on: one variable per node and per edge instead of 2 and 4), with the
same objective (sum_i ||mu_i||^2 = 2 sum_i (y_i - 1/2)^2 + V / 2); with more labels it is the full
local polytope. Connectivity cuts enter as the rows of a fixed-size cut block (``max_cuts`` rows
D, ``D vec(mu) <= 1``, unused rows zero).

Two solvers compute the same thing:

- ``"qp"`` (the default for ``smoothing > 0``, :mod:`structtorch.lp._qp`): each instance is handed
  to Clarabel as a quadratic program, its answer polished on its active set and differentiated
  exactly through the KKT system of that active set (one sparse factorization, reduced by the
  rows that fix a variable: the 0/1 nodes). 5-16x faster than cvxpylayers on 16 x 16 and 32 x 32
  grids (benchmarks/lp_layers.py), the same solution to about 1e-5 (diffcp's accuracy) and the
  same gradients to about 3e-4 (relative norm).
- ``"cvxpylayers"``: the problem compiled by cvxpy (seconds on a 32 x 32 grid, so the compiled
  problem is cached per graph structure: edges, V, L, ``max_cuts``, ``smoothing``, solver and its
  arguments; see :meth:`MAPRelaxation.cache_info`) and differentiated by diffcp (LSQR on the cone
  program's residual map: about 3 correct digits). Needed for ``smoothing = 0`` (the plain LP).

The B instances of a batch are solved on ``num_workers`` threads.
"""

from __future__ import annotations

import copy
import functools

import numpy as np
import scipy.sparse as sp
import torch
from torch import Tensor, nn

from .._checks import check_finite, check_int
from .._library import NotScriptable
from ._options import check_real, check_real_tensor
from ._parallel import check_num_workers
from ._qp import BinaryProgram, LocalPolytopeProgram, SmoothedQP
from .graph import check_edges, check_graph_potentials, num_nodes_of
from .relaxation import check_cuts

__all__ = ["MAPRelaxation", "cut_block"]


def cut_block(cuts, B: int, V: int, L: int, max_cuts: int, ref: Tensor) -> Tensor:
    """(B, max_cuts, V, L) rows of the cut block from ``LPResult.cuts``-style lists of
    (label, i, j, separator), one list for all instances or one per instance, or from a
    (K, V, L) / (B, K, V, L) tensor of coefficients (K <= max_cuts)."""
    block = ref.new_zeros(B, max_cuts, V, L)
    if cuts is None:
        return block
    if isinstance(cuts, Tensor):
        check_real_tensor("cuts", cuts)
        check_finite("cuts", cuts, " (a NaN or inf coefficient would reach the solver)")
        rows = cuts.to(ref).unsqueeze(0).expand(B, *cuts.shape) if cuts.dim() == 3 else cuts.to(ref)
        if rows.dim() != 4 or rows.shape[0] != B or rows.shape[2:] != (V, L) or rows.shape[1] > max_cuts:
            raise ValueError(f"cuts must have shape (K, V, L) or (B, K, V, L) with K <= max_cuts = "
                             f"{max_cuts}, V = {V}, L = {L}, got {tuple(cuts.shape)}")
        block[:, : rows.shape[1]] = rows
        return block
    rows = check_cuts(cuts, B, V, L)
    index, value = [], []  # (b, k, node, label) of every coefficient, added in one call
    for b, instance in enumerate(rows):
        if len(instance) > max_cuts:
            raise ValueError(f"{len(instance)} cuts do not fit the cut block of max_cuts = {max_cuts} rows")
        for k, (c, i, j, S) in enumerate(instance):
            nodes = torch.cat([torch.tensor([i, j]), S])
            index.append(torch.stack([torch.full_like(nodes, b), torch.full_like(nodes, k), nodes,
                                      torch.full_like(nodes, c)]))
            value.append(torch.cat([torch.ones(2), -torch.ones(len(S))]))
    if index:
        where = torch.cat(index, 1).to(ref.device)
        block.index_put_(tuple(where), torch.cat(value).to(ref), accumulate=True)
    return block


_CACHE_SIZE = 16
SOLVERS = ("auto", "qp", "cvxpylayers")


def _compile(edges: Tensor, V: int, num_labels: int, max_cuts: int, smoothing: float, solve_method: str,
             solver_args: dict | None):
    """The CvxpyLayer of the smoothed relaxation on one graph (cvxpy canonicalization: seconds)."""
    import cvxpy as cp
    from cvxpylayers.torch import CvxpyLayer

    E, L, K = len(edges), num_labels, max_cuts
    e = edges.numpy()
    pick = [sp.csr_array((np.ones(E), (np.arange(E), e[:, s])), shape=(E, V)) for s in (0, 1)]
    if L == 2:
        y, z = cp.Variable(V), cp.Variable(E)
        a, b, C, h = cp.Parameter(V), cp.Parameter(E), cp.Parameter((K, V)), cp.Parameter(K)
        yi, yj = pick[0] @ y, pick[1] @ y
        cons = [y >= 0, y <= 1, z >= 0, z <= yi, z <= yj, z >= yi + yj - 1, C @ y <= h]
        smooth = 2 * cp.sum_squares(y - 0.5)  # = sum_i ||mu_i||^2 - V / 2
        obj = a @ y + b @ z - smoothing / 2 * smooth
        params, variables = [a, b, C, h], [y]
    else:
        mu, mue = cp.Variable((V, L)), cp.Variable((E, L * L))
        a, b, D = cp.Parameter((V, L)), cp.Parameter((E, L * L)), cp.Parameter((K, V * L))
        rows = sp.kron(sp.eye(L), np.ones((1, L))).tocsr()  # sum over t of (s, t)
        # sum over s of (s, t) for t < L-1: the row of t = L-1 follows from the others and the
        # normalization, and redundant equalities make the KKT system singular (inexact gradients)
        cols = sp.kron(np.ones((1, L)), sp.eye(L)).tocsr()[: L - 1]
        cons = [mu >= 0, mue >= 0, cp.sum(mu, axis=1) == 1, mue @ rows.T == pick[0] @ mu,
                mue @ cols.T == pick[1] @ mu[:, : L - 1], D @ cp.vec(mu, order="C") <= 1]
        linear = cp.sum(cp.multiply(a, mu)) + cp.sum(cp.multiply(b, mue))
        obj = linear - smoothing / 2 * cp.sum_squares(mu)
        params, variables = [a, b, D], [mu]
    problem = cp.Problem(cp.Maximize(obj), cons)
    args = {"solve_method": solve_method, **(solver_args or {})}
    return CvxpyLayer(problem, parameters=params, variables=variables, solver_args=args)


def _structure_key(edges: Tensor, V: int, num_labels: int, max_cuts: int, smoothing: float,
                   solve_method: str, solver_args: dict | None) -> tuple | None:
    """Hashable description of everything the compiled problem depends on (None when the solver
    arguments are not hashable)."""
    args = tuple(sorted((solver_args or {}).items(), key=lambda kv: str(kv[0])))
    key = (edges.numpy().astype(np.int64).tobytes(), V, num_labels, max_cuts, smoothing, solve_method, args)
    try:
        hash(key)
    except TypeError:
        return None
    return key


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _compiled(key: tuple):
    """The cached CvxpyLayer of a structure key (the least recently used of more than
    ``_CACHE_SIZE`` graphs is dropped)."""
    edges_bytes, V, num_labels, max_cuts, smoothing, solve_method, args = key
    edges = torch.from_numpy(np.frombuffer(edges_bytes, dtype=np.int64).reshape(-1, 2).copy())
    return _compile(edges, V, num_labels, max_cuts, smoothing, solve_method, dict(args))


def _own_copy(template: nn.Module) -> nn.Module:
    """A shallow copy of a cached CvxpyLayer: it shares the compiled problem (``ctx``) and the
    buffer tensors, but has its own buffer, hook and submodule tables, so that moving one layer
    (``.to(device)``) or hooking it leaves the other layers on the same graph alone."""
    layer = copy.copy(template)
    for name, value in vars(template).items():
        if isinstance(value, dict):
            setattr(layer, name, type(value)(value))
    return layer


class MAPRelaxation(NotScriptable, nn.Module):
    """Smoothed LP relaxation of MAP on a fixed graph as a differentiable layer.

    Parameters
    ----------
    edges : Tensor (E, 2) int64
        i < j, no duplicates.
    num_labels : int
        L >= 2.
    num_nodes : int >= 1, optional
        V (default: the largest node index in ``edges`` plus one; needed when E = 0).
    smoothing : float
        Finite weight >= 0 of the quadratic smoothing; 0 solves the plain LP, whose gradients
        vanish almost everywhere.
    max_cuts : int
        Rows of the cut block, >= 1.
    solver : {"auto", "qp", "cvxpylayers"}
        "qp": Clarabel's QP solve, polished on the active set, with the exact implicit backward
        (needs ``smoothing > 0``); "cvxpylayers": the cvxpy problem differentiated by diffcp;
        "auto" (default): "qp" where ``smoothing > 0``, else "cvxpylayers". Both give the same
        solution and (up to diffcp's LSQR accuracy) the same gradients, with any cuts, couplings
        and number of labels.
    solve_method : str
        diffcp's conic solver, "Clarabel" (default) or "SCS" (``solver="cvxpylayers"`` only).
    solver_args : dict, optional
        More keyword arguments for diffcp's solver (``solver="cvxpylayers"`` only).
    num_workers : int >= 1, optional
        Threads on which the B instances of a batch are solved (and differentiated); default
        ``torch.get_num_threads()`` at each call. With cvxpylayers, ``n_jobs_forward`` /
        ``n_jobs_backward`` in ``solver_args`` take precedence.

    Shapes: ``forward(unary (V, L) or (B, V, L), pairwise (E, L, L) or (B, E, L, L), cuts=None)``
    returns mu (B, V, L), differentiable w.r.t. both potentials.

    Notes
    -----
    Potentials and cut rows may live on any device: a batch goes to the CPU once and its solution
    comes back once (the solvers run on the CPU). With ``solver="qp"`` the gradient is that of the
    solution on its active set: exact where the active set is locally stable (almost everywhere),
    one of the one-sided derivatives on the measure-zero set where it is not.

    With ``solver="cvxpylayers"`` the compiled problem (cvxpy's canonicalization, seconds on a 32 x
    32 grid) is cached per structure: edges, V, L, ``max_cuts``, ``smoothing``, ``solve_method``
    and ``solver_args`` (unless they cannot be hashed). Layers on the same structure share it
    (``self.layer.ctx`` is the same object) and construct in milliseconds; each keeps its own
    buffers. The cache holds the 16 most recently used structures; see :meth:`cache_info` and
    :meth:`cache_clear`. With ``solver="qp"`` nothing is compiled (``self.layer`` is None).

    Examples
    --------
    >>> import torch
    >>> from structtorch.lp import MAPRelaxation
    >>> layer = MAPRelaxation(torch.tensor([[0, 1]]), num_labels=2)  # two nodes, one edge
    >>> unary = torch.tensor([[2., 0.], [0., 2.]], requires_grad=True)  # (V, L)
    >>> pairwise = torch.tensor([[[1., 0.], [0., 1.]]])  # (E, L, L): agreeing labels score 1
    >>> mu = layer(unary, pairwise)  # (B, V, L), relaxed label indicators
    >>> mu.detach().round(decimals=1)
    tensor([[[1., 0.],
             [0., 1.]]])
    >>> mu[0, 0, 0].backward()  # differentiable w.r.t. the potentials
    >>> unary.grad.shape
    torch.Size([2, 2])
    """

    def __init__(self, edges: Tensor, num_labels: int, *, num_nodes: int | None = None,
                 smoothing: float = 1e-2, max_cuts: int = 16, solver: str = "auto",
                 solve_method: str = "Clarabel", solver_args: dict | None = None,
                 num_workers: int | None = None) -> None:
        super().__init__()
        num_labels = check_int("num_labels", num_labels, 2)
        smoothing = check_real("smoothing", smoothing, minimum=0.0)
        max_cuts = check_int("max_cuts", max_cuts, 1)
        if not isinstance(solver, str) or solver not in SOLVERS:
            raise ValueError(f"solver must be one of {SOLVERS}, got {solver!r}")
        if solver == "qp" and smoothing == 0:
            raise ValueError("solver='qp' needs smoothing > 0 (the plain LP has no unique solution to "
                             "differentiate); use solver='cvxpylayers' for smoothing = 0")
        if not isinstance(solve_method, str):
            raise TypeError(f"solve_method must be a str such as 'Clarabel' or 'SCS', got {solve_method!r}")
        if solver_args is not None and not isinstance(solver_args, dict):
            raise TypeError(f"solver_args must be a dict or None, got {type(solver_args).__name__}")
        V = num_nodes_of(edges, num_nodes, minimum=1)
        self.edges = check_edges(edges, V)
        self.num_nodes, self.num_labels, self.max_cuts, self.smoothing = V, num_labels, max_cuts, smoothing
        self.num_workers = None if num_workers is None else check_num_workers(num_workers)
        self.solver = ("qp" if smoothing > 0 else "cvxpylayers") if solver == "auto" else solver
        self._solver_args = dict(solver_args or {})
        self.layer, self.program = None, None
        if self.solver == "qp":
            e = self.edges.numpy()
            self.program = (BinaryProgram(e, V, smoothing) if num_labels == 2
                            else LocalPolytopeProgram(e, V, num_labels, smoothing))
            return
        if not len(self.edges):
            raise ValueError("solver='cvxpylayers' needs at least one edge (cvxpylayers drops the unused "
                             "pairwise parameter); solver='qp' takes graphs without edges")
        key = _structure_key(self.edges, V, num_labels, max_cuts, smoothing, solve_method, solver_args)
        if key is None:  # solver arguments that cannot be hashed: compiled for this layer only
            template = _compile(self.edges, V, num_labels, max_cuts, smoothing, solve_method, solver_args)
        else:
            template = _compiled(key)
        self.layer = _own_copy(template)

    @staticmethod
    def cache_info() -> functools._CacheInfo:
        """Hits, misses and size of the cache of compiled problems (``functools.lru_cache``)."""
        return _compiled.cache_info()

    @staticmethod
    def cache_clear() -> None:
        """Empty the cache of compiled problems (layers built before keep theirs)."""
        _compiled.cache_clear()

    def _call_args(self, params: tuple[Tensor, ...]) -> dict:
        """Per-call diffcp arguments: the batch's threads (diffcp's solve-only path, taken without
        gradients, has no backward pass and refuses its thread count)."""
        workers = check_num_workers(self.num_workers)
        needs_grad = torch.is_grad_enabled() and any(p.requires_grad for p in params)
        names = ("n_jobs_forward", "n_jobs_backward") if needs_grad else ("n_jobs_forward",)
        return {k: workers for k in names if k not in self._solver_args}

    def extra_repr(self) -> str:
        return (f"num_nodes={self.num_nodes}, num_edges={len(self.edges)}, num_labels={self.num_labels}, "
                f"smoothing={self.smoothing}, max_cuts={self.max_cuts}, solver={self.solver!r}")

    def _binary(self, theta_u: Tensor, theta_p: Tensor, block: Tensor) -> Tensor:
        """mu (B, V, 2) of the reduced two-label problem: y = mu(1) from a.y + b.z."""
        i, j = self.edges[:, 0].to(theta_u.device), self.edges[:, 1].to(theta_u.device)
        a = theta_u[..., 1] - theta_u[..., 0]
        a = a.index_add(1, i, theta_p[:, :, 1, 0] - theta_p[:, :, 0, 0])
        a = a.index_add(1, j, theta_p[:, :, 0, 1] - theta_p[:, :, 0, 0])
        b = theta_p[:, :, 0, 0] - theta_p[:, :, 0, 1] - theta_p[:, :, 1, 0] + theta_p[:, :, 1, 1]
        C = block[..., 1] - block[..., 0]  # D mu = sum D_0 + (D_1 - D_0) y
        h = 1 - block[..., 0].sum(2)
        if self.program is not None:
            workers = check_num_workers(self.num_workers)
            y = SmoothedQP.apply(torch.cat([a + self.smoothing, b], 1), C, h, self.program, workers)
        else:
            (y,) = self.layer(a, b, C, h, solver_args=self._call_args((a, b, C, h)))
        return torch.stack([1 - y, y], 2)

    def _local_polytope(self, theta_u: Tensor, theta_p: Tensor, block: Tensor) -> Tensor:
        """mu (B, V, L) over the full local polytope."""
        B, V, L = theta_u.shape
        flat_p, rows = theta_p.reshape(B, len(self.edges) * L * L), block.reshape(B, self.max_cuts, V * L)
        if self.program is not None:
            c = torch.cat([theta_u.reshape(B, V * L), flat_p], 1)
            workers = check_num_workers(self.num_workers)
            rhs = theta_u.new_ones(B, self.max_cuts)
            return SmoothedQP.apply(c, rows, rhs, self.program, workers).view(B, V, L)
        params = (theta_u, flat_p.view(B, len(self.edges), L * L), rows)
        (mu,) = self.layer(*params, solver_args=self._call_args(params))
        return mu

    def forward(self, unary: Tensor, pairwise: Tensor, cuts=None) -> Tensor:
        """mu (B, V, L): the smoothed relaxed solution; ``cuts`` as for :func:`cut_block`."""
        unary_b, pairwise_b, _ = check_graph_potentials(unary, pairwise, self.edges, edges_checked=True)
        B, V, L = unary_b.shape
        if (V, L) != (self.num_nodes, self.num_labels):
            raise ValueError(f"unary must have V = {self.num_nodes} nodes and L = {self.num_labels} labels, "
                             f"got {tuple(unary_b.shape)}")
        theta_u, theta_p = unary_b.double(), pairwise_b.double()
        block = cut_block(cuts, B, V, L, self.max_cuts, theta_u)
        solve = self._binary if L == 2 else self._local_polytope
        mu = solve(theta_u, theta_p, block)
        # the QP path's solution lies in [0, 1] already (a clamp would stop the gradient of a node
        # rounded a hair past 1); diffcp's may leave it by its tolerance
        return (mu if self.program is not None else mu.clamp(0, 1)).to(unary_b.dtype)
