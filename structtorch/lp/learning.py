"""Max-margin learning over the LP relaxation (Nowozin 2009, §6.4; digest §1.7).

The loss is the area-weighted Hamming loss Delta(y, mu) = sum_i r_i (1 - mu_i(y_i)) with
sum_i r_i = 1 (for binary labels this is the thesis's area-normalized loss on the foreground
indicators). It is linear in mu, so loss-augmented inference is the same LP with the unary scores
shifted by r_i on every label but the true one, and the margin-rescaled hinge

    max_{mu in relaxation} [score(mu) + Delta(y, mu)] - score(y)

has the Danskin subgradient Psi(x, mu_hat) - Psi(x, y): no differentiation through the solver.
"""

from __future__ import annotations

import inspect

import numpy as np
import torch
from torch import Tensor, nn

from .._checks import check_float
from .._library import NotScriptable
from .._numerics import reduce_batch
from .exact import ExactResult, map_exact
from .graph import check_graph_potentials
from .relaxation import LPResult, WarmStart, lp_score, map_lp

__all__ = ["relaxed_hinge", "RelaxedHingeLoss", "GraphStructure", "area_weights"]


def area_weights(area: Tensor | None, B: int, V: int, ref: Tensor, normalize: bool = True) -> Tensor:
    """(B, V) loss weights r_i: ``area`` (default all ones), divided by its sum per instance when
    ``normalize``."""
    if area is None:
        return ref.new_full((B, V), 1.0 / max(V, 1) if normalize else 1.0)
    area = check_float("area", area, ref, "unary")
    if area.dim() == 1:
        area = area.unsqueeze(0).expand(B, V)
    if area.shape != (B, V):
        raise ValueError(f"area must have shape (V,) = ({V},) or (B, V) = ({B}, {V}), "
                         f"got {tuple(area.shape)}")
    if bool((area < 0).any()) or bool((area.sum(1) <= 0).any()):
        raise ValueError("area must be non-negative with a positive sum per instance")
    return area / area.sum(1, keepdim=True) if normalize else area


def _one_hot(index: Tensor, n: int, dtype: torch.dtype) -> Tensor:
    """``one_hot(index, n)`` in ``dtype`` for indices already checked to lie in [0, n): without
    ``one_hot``'s own range check (two host syncs on a device)."""
    out = torch.zeros(*index.shape, n, dtype=dtype, device=index.device)
    return out.scatter_(-1, index.unsqueeze(-1), 1)


def _onehot_edges(target: Tensor, edges: Tensor, L: int, dtype: torch.dtype) -> Tensor:
    i, j = target[:, edges[:, 0]], target[:, edges[:, 1]]
    return _one_hot(i * L + j, L * L, dtype).view(*i.shape, L, L)


REDUCTIONS = ("mean", "sum", "none")


def _check_reduction(reduction: object) -> str:
    if not isinstance(reduction, str) or reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
    return reduction


def _check_no_lengths(lengths, V: int) -> None:
    if lengths is not None and bool((torch.as_tensor(lengths) != V).any()):
        raise ValueError(f"graph instances have no lengths: every node counts (lengths must be None or "
                         f"V = {V})")


def relaxed_hinge(
    unary: Tensor,
    pairwise: Tensor,
    edges: Tensor,
    target: Tensor,
    *,
    connected: list[int] | None = None,
    connected_soft: dict | None = None,
    area: Tensor | None = None,
    normalize: bool = True,
    reduction: str = "mean",
    return_result: bool = False,
    exact: bool = False,
    warm_start: WarmStart | None = None,
    ids=None,
    **lp_options,
) -> Tensor | tuple[Tensor, LPResult | ExactResult]:
    """Margin-rescaled structured hinge with loss-augmented inference over the LP relaxation.

    Parameters
    ----------
    unary : Tensor (V, L) or (B, V, L)
    pairwise : Tensor (E, L, L) or (B, E, L, L)
    edges : Tensor (E, 2) int64
    target : Tensor (V,) or (B, V) int64
        True labels.
    connected, connected_soft :
        As for :func:`structtorch.lp.map_lp`; soft weights given as tensors get gradients too.
    area : Tensor (V,) or (B, V), optional
        Region sizes r_i of the loss; uniform by default.
    normalize : bool
        Divide the areas by their sum per instance (the thesis's loss, at most 1). False counts
        mislabelled area (the plain Hamming count without ``area``), which gives the margin a
        per-node scale and trains faster by subgradient steps.
    reduction : {"mean", "sum", "none"}
    return_result : bool
        Also return the loss-augmented :class:`LPResult` (e.g. to pass its ``cuts`` back in the
        next epoch: they depend on the graph only), or with ``exact`` the :class:`ExactResult`.
    exact : bool
        Loss-augmented inference by :func:`structtorch.lp.map_exact` (branch and cut: the exact
        loss-augmented labeling under hard connectivity, for graphs small enough) instead of the
        relaxation, whose fractional answers make the hinge an upper bound of the exact one.
        Hard ``connected`` labels only.
    warm_start : WarmStart, optional
        Keep each instance's working set of connectivity cuts and its LP (with its basis) from this call to
        the next (epochs over the same data: see :class:`structtorch.lp.WarmStart`); the hinge is
        that of the cold start wherever both converge. LP path only (not with ``exact``).
    ids : sequence of B hashables or (B,) integer tensor, optional
        The instances' keys in ``warm_start`` (e.g. dataset indices). Default: the target
        labelings themselves (their bytes, numbered where a batch repeats one), which identify an
        image across epochs unless augmentation changes its labels.
    **lp_options
        Passed to :func:`map_lp` (max_iter, tol, cuts, ...) or, with ``exact``, to
        :func:`map_exact` (also time_limit, node_limit), among them ``num_workers``: the
        threads that solve the B loss-augmented problems concurrently (default
        ``torch.get_num_threads()``; the loss does not depend on it).

    Returns
    -------
    Tensor: max(0, hinge) reduced over the batch; (B,) for reduction "none" (and the LPResult).
    """

    _check_reduction(reduction)
    unary_b, pairwise_b, edges = check_graph_potentials(unary, pairwise, edges)
    B, V, L = unary_b.shape
    if not isinstance(target, Tensor) or target.dtype != torch.long:
        raise TypeError(f"target must be an int64 tensor of shape (V,) or (B, V) = ({B}, {V})")
    target = target.unsqueeze(0) if target.dim() == 1 else target
    if target.shape != (B, V):
        raise ValueError(f"target must have shape (V,) or (B, V) = ({B}, {V}), got {tuple(target.shape)}")
    labels = target.cpu().numpy()  # the target's one transfer to the host (checks, keys, components)
    if labels.size and (labels.min() < 0 or labels.max() >= L):
        raise ValueError(f"target labels must lie in [0, L) = [0, {L})")
    target = target.to(unary_b.device)
    r = area_weights(area, B, V, unary_b, normalize)
    wrong = r.unsqueeze(2) * (1 - _one_hot(target, L, unary_b.dtype))  # Delta is <wrong, mu>
    if warm_start is not None:
        if exact:
            raise ValueError("warm_start keeps the LP's working sets: it does not apply with exact=True")
        keys = _target_keys(labels) if ids is None else ids
        lp_options = {**lp_options, "warm_start": warm_start, "keys": keys}
    elif ids is not None:
        raise ValueError("ids are the instance keys of warm_start: pass warm_start too")
    with torch.no_grad():
        if exact:
            if connected_soft:
                raise ValueError("exact=True takes hard connectivity (connected=) only, not connected_soft")
            res = map_exact(unary_b + wrong, pairwise_b, edges, connected=connected, **lp_options)
            mu = _one_hot(res.labels, L, unary_b.dtype)
            mu_edges = _onehot_edges(res.labels, edges.to(target.device), L, unary_b.dtype)
        else:
            res = map_lp(unary_b + wrong, pairwise_b, edges, connected=connected,
                         connected_soft=connected_soft, **lp_options)
            mu, mu_edges = res.mu, res.mu_edges
    y_nodes = _one_hot(target, L, unary_b.dtype)
    y_edges = _onehot_edges(target, edges.to(target.device), L, unary_b.dtype)
    found = lp_score(unary_b, pairwise_b, mu, mu_edges)
    gold = lp_score(unary_b, pairwise_b, y_nodes, y_edges)
    split = _disconnected(labels, edges, connected, connected_soft)
    soft = list((connected_soft or {}).items())
    if soft:  # phi_conn of an integral labeling: 1 if split, else 0
        phi = torch.from_numpy(np.stack([split[c] for c, _ in soft], 1)).to(gold)
        for pos, (_, w) in enumerate(soft):
            found = found - w * res.slack[:, pos]
            gold = gold - w * phi[:, pos]
    value = reduce_batch((found + (wrong * mu).sum((1, 2)) - gold).clamp(min=0), reduction)
    return (value, res) if return_result else value


def _target_keys(target: np.ndarray | Tensor) -> list[tuple[bytes, int]]:
    """(B,) keys of the rows of ``target`` (B, V) int64: its bytes and the occurrence number of
    that labeling within the batch (so that repeated labelings get distinct keys)."""
    seen: dict[bytes, int] = {}
    keys = []
    for row in (target.cpu().numpy() if isinstance(target, Tensor) else target):
        raw = row.tobytes()
        keys.append((raw, seen.get(raw, 0)))
        seen[raw] = seen.get(raw, 0) + 1
    return keys


def _disconnected(y: np.ndarray, edges: Tensor, connected, connected_soft) -> dict[int, np.ndarray]:
    """{label: (B,) bool} whether the nodes of that label in the target ``y`` (B, V) are split;
    hard-connected labels must not be (the target would be infeasible). One component search per
    label over the batch (the rows' subgraphs side by side)."""
    from scipy.sparse import coo_array
    from scipy.sparse.csgraph import connected_components

    labels = list(connected or []) + list(connected_soft or {})
    if not labels:
        return {}
    e = edges.cpu().numpy()
    B, V = y.shape
    out = {}
    for c in labels:
        inside = y == c
        row, k = np.nonzero(inside[:, e[:, 0]] & inside[:, e[:, 1]])  # the edges within label c
        graph = coo_array((np.ones(len(k)), (row * V + e[k, 0], row * V + e[k, 1])), shape=(B * V, B * V))
        _, comp = connected_components(graph, directed=False)
        rows, nodes = np.nonzero(inside)
        _, first = np.unique(comp[rows * V + nodes], return_index=True)  # one entry per component
        out[c] = np.bincount(rows[first], minlength=B) > 1
        if c in (connected or []) and out[c].any():
            b = int(np.flatnonzero(out[c])[0])
            raise ValueError(f"target row {b} splits label {c} into several components, but connected "
                             f"requires it to be connected")
    return out


class RelaxedHingeLoss(NotScriptable, nn.Module):
    """:func:`relaxed_hinge` on a fixed graph, callable as ``loss(unary, pairwise, target,
    lengths=None, weights=None, ids=None)`` so that :func:`structtorch.train.fit` can train graph
    models (``weights`` are the region areas; ``lengths`` must be None or all V).

    ``warm_start=True`` keeps a :class:`structtorch.lp.WarmStart` (``self.warm_start``): every
    instance starts from the working set of cuts and the LP of its last call, keyed by ``ids``
    (default: the target labelings), which makes later epochs much cheaper under connectivity.
    """

    def __init__(self, edges: Tensor, *, connected: list[int] | None = None,
                 connected_soft: dict | None = None, normalize: bool = True, reduction: str = "mean",
                 warm_start: bool | WarmStart = False, **lp_options) -> None:
        super().__init__()
        _check_reduction(reduction)
        if not isinstance(warm_start, (bool, WarmStart)):
            raise TypeError(f"warm_start must be a bool or a structtorch.lp.WarmStart, got "
                            f"{type(warm_start).__name__}")
        self.edges, self.connected, self.connected_soft = edges, connected, connected_soft
        self.normalize, self.reduction, self.lp_options = normalize, reduction, lp_options
        self.warm_start = WarmStart() if warm_start is True else (warm_start or None)

    def forward(self, unary: Tensor, pairwise: Tensor, target: Tensor, *, lengths: Tensor | None = None,
                weights: Tensor | None = None, ids=None, **unused) -> Tensor:
        if unused:
            raise TypeError(f"unexpected arguments for a graph hinge: {sorted(unused)}")
        _check_no_lengths(lengths, unary.shape[-2])
        return relaxed_hinge(unary, pairwise, self.edges, target, connected=self.connected,
                             connected_soft=self.connected_soft, area=weights, normalize=self.normalize,
                             reduction=self.reduction, warm_start=self.warm_start, ids=ids, **self.lp_options)


class GraphStructure:
    """Graph labelings over the LP relaxation as a structure for :func:`structtorch.structured_hinge`.

    Parameters
    ----------
    unary : Tensor (V, L) or (B, V, L)
    pairwise : Tensor (E, L, L) or (B, E, L, L)
    edges : Tensor (E, 2) int64
    connected, connected_soft, normalize, exact, **lp_options
        As for :func:`relaxed_hinge`: with ``exact``, the argmax and the loss-augmented labeling
        are the exact ones under hard connectivity (:func:`structtorch.lp.map_exact`), so cutting
        planes train the exact structural SVM.

    Examples
    --------
    >>> from structtorch.lp import grid_edges
    >>> edges = grid_edges(3, 3)
    >>> structure = GraphStructure(torch.randn(9, 2), torch.zeros(len(edges), 2, 2), edges)
    >>> structure.loss_augmented(torch.zeros(9, dtype=torch.long))[0].shape
    torch.Size([1])
    """

    def __init__(self, unary: Tensor, pairwise: Tensor, edges: Tensor, *, connected: list[int] | None = None,
                 connected_soft: dict | None = None, normalize: bool = True, exact: bool = False,
                 **lp_options) -> None:
        self.unary, self.pairwise, self.edges = unary, pairwise, edges
        self.connected, self.connected_soft, self.normalize = connected, connected_soft, normalize
        if exact and connected_soft:
            raise ValueError("exact=True takes hard connectivity (connected=) only, not connected_soft")
        self.exact, self.lp_options = exact, lp_options

    @property
    def argmax(self) -> Tensor:
        """(B, V) or (V,) int64: the MAP labeling over the relaxation (:func:`map_lp`, the node
        marginals rounded by :func:`structtorch.lp.round_labels`), or with ``exact`` the exact MAP
        under connectivity (:func:`map_exact`), as :func:`structtorch.train.fit` decodes a
        structure."""
        from .rounding import round_labels

        solve = map_exact if self.exact else map_lp
        taken = inspect.signature(solve).parameters  # the options the solver takes too
        options = {k: v for k, v in self.lp_options.items() if k in taken}
        soft = {} if self.exact else {"connected_soft": self.connected_soft}
        with torch.no_grad():
            res = solve(self.unary.detach(), self.pairwise.detach(), self.edges, connected=self.connected,
                        **soft, **options)
        return res.labels if self.exact else round_labels(res.mu)[0]

    def loss_augmented(self, target: Tensor, *, h=None, rescaling: str = "margin",
                       weights: Tensor | None = None, cost: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """``(value (B,), labels (B, V))``: the margin-rescaled hinge value max(0, ...) over the
        relaxation (:func:`relaxed_hinge`, area-weighted Hamming loss; ``weights`` are the areas)
        and the rounded loss-augmented labeling. Only margin rescaling with h=None and no cost."""
        if rescaling != "margin" or h is not None or cost is not None:
            raise ValueError("graph models support margin rescaling with the area-weighted Hamming loss "
                             "only: rescaling='margin', h=None, cost=None")
        value, res = relaxed_hinge(self.unary, self.pairwise, self.edges, target, connected=self.connected,
                                   connected_soft=self.connected_soft, area=weights, normalize=self.normalize,
                                   reduction="none", return_result=True, exact=self.exact, **self.lp_options)
        return value, res.labels if self.exact else res.mu.argmax(-1)
