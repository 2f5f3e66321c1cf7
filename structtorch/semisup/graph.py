"""Similarity graphs over points and the Laplacian regularizer (Altun, McAllester & Belkin 2005, eq. 9, 19).

``knn_graph`` builds the heat-kernel kNN graph W over token observations without an n x n dense
matrix; ``laplacian`` gives ``L = D - W``; ``laplacian_penalty(f, W)`` is
``tr(F^T L F) = 1/2 sum_ij W_ij ||f_i - f_j||^2``, the smoothness term of eq. 9, for scores of any
model (kernel, linear or neural).
"""

from __future__ import annotations

import torch
from torch import Tensor

from structtorch._checks import check_finite, check_int, check_number

__all__ = ["knn_graph", "laplacian", "laplacian_penalty"]


def _check_points(name: str, x: object) -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of shape (n, D), got {type(x).__name__}")
    if x.dtype not in (torch.float32, torch.float64):
        raise TypeError(f"{name} must be float32 or float64, got {x.dtype}")
    if x.dim() != 2:
        raise ValueError(f"{name} must have shape (n, D), got {tuple(x.shape)}")
    check_finite(name, x)
    return x


def _check_graph(W: object, n: int | None = None, name: str = "W") -> Tensor:
    """W as a coalesced sparse COO (n, n) float tensor."""
    if not isinstance(W, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor (sparse COO or dense) of shape (n, n), "
                        f"got {type(W).__name__}")
    if W.dim() != 2 or W.shape[0] != W.shape[1] or (n is not None and W.shape[0] != n):
        want = f"({n}, {n})" if n is not None else "(n, n)"
        raise ValueError(f"{name} must have shape {want}, got {tuple(W.shape)}")
    if W.dtype not in (torch.float32, torch.float64):
        raise TypeError(f"{name} must be float32 or float64, got {W.dtype}")
    return (W if W.layout == torch.sparse_coo else W.to_sparse_coo()).coalesce()


def _sq_dist(a: Tensor, b: Tensor) -> Tensor:
    """Squared Euclidean distances (len(a), len(b)), clamped at 0."""
    d = (a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2.0 * (a @ b.T)
    return d.clamp_min_(0.0)


def _merge(v1: Tensor, i1: Tensor, v2: Tensor, i2: Tensor, k: int, dim: int) -> tuple[Tensor, Tensor]:
    """The k smallest of two (value, index) lists along ``dim``."""
    v, j = torch.topk(torch.cat([v1, v2], dim), k, dim=dim, largest=False)
    return v, torch.cat([i1, i2], dim).gather(dim, j)


def _knn(x: Tensor, k: int, rows: int, cols: int, group: int) -> tuple[Tensor, Tensor]:
    """Exact k nearest neighbours of every point of ``x`` among the others: (d2 (n, k), j (n, k)).

    Points are split into groups of ``group`` consecutive points. Each (rows, cols) tile of
    squared distances, from a block of rows to the columns from that block on (the upper triangle:
    half the products), is reduced at once to minima over groups, both ways: row points against
    column groups, and column points against the block's row groups (kept as a running top-k of
    groups per point). The k groups with the smallest minima hold the k nearest points (each of
    them lies in a group whose minimum is at most its distance, and fewer than k groups can beat
    that), so only their ``k * group`` points are compared again, by ``||x_i - x_j||^2``.
    """
    n, dim = x.shape
    x = x - x.mean(0)  # distances do not move; ||b||^2 - 2 a.b loses less to rounding
    m = -(-n // group)  # groups; the last one is padded with points at infinite distance
    pad = m * group - n
    rows = group * max(1, rows // group)
    cols = rows * max(1, cols // rows)
    kk = min(k, m)
    norms = (x * x).sum(1)
    xp = torch.cat([x, x.new_zeros(pad, dim)])
    col_norms = torch.cat([norms, norms.new_full((pad,), torch.inf)])
    row_norms = torch.cat([norms, norms.new_zeros(pad)])
    # best (group minimum, group) of each point against the row blocks before its own, (kk, n + pad)
    run_v = x.new_full((kk, n + pad), torch.inf)
    run_i = torch.zeros(kk, n + pad, dtype=torch.long, device=x.device)
    dists, nbrs = [], []
    for s in range(0, n, rows):
        a = xp[s:s + rows]
        r = len(a)
        gmin = x.new_empty(r, (n + pad - s) // group)  # row points against the groups from s on
        for c in range(s, n + pad, cols):
            tile = torch.addmm(col_norms[None, c:c + cols], a, xp[c:c + cols].T, alpha=-2.0)
            w = tile.shape[1]
            if c == s:  # no self-loops
                own = torch.arange(min(r, w), device=x.device)
                tile[own, own] = torch.inf
            gmin[:, (c - s) // group:(c - s + w) // group] = tile.view(r, -1, group).amin(2)
            c0 = max(c, s + r)  # the columns past this row block, against its row groups
            if c0 < c + w:
                t = tile[:, c0 - c:].add_(row_norms[s:s + r, None])
                t[max(0, n - s):] = torch.inf  # padded rows
                v, j = torch.topk(t.view(-1, group, t.shape[1]).amin(1), min(kk, r // group), dim=0,
                                  largest=False)
                cut = slice(c0, c + w)
                run_v[:, cut], run_i[:, cut] = _merge(run_v[:, cut], run_i[:, cut], v, j + s // group, kk, 0)
        gmin.add_(row_norms[s:s + r, None])
        v, j = torch.topk(gmin, min(kk, gmin.shape[1]), dim=1, largest=False)
        best_v, best = _merge(run_v[:, s:s + r].T, run_i[:, s:s + r].T, v, j + s // group, kk, 1)
        d, j = _rescore(x, xp, best[:n - s], best_v[:n - s], s, k, group)
        dists.append(d)
        nbrs.append(j)
    return torch.cat(dists), torch.cat(nbrs)


def _rescore(x: Tensor, xp: Tensor, best: Tensor, best_v: Tensor, s: int, k: int, group: int,
             step: int = 64) -> tuple[Tensor, Tensor]:
    """Exact distances from points ``s, s + 1, ...`` to the points of their groups ``best`` (r, kk),
    and the k nearest; groups at infinite distance (fewer than kk usable) are left out."""
    n, dim = x.shape
    kk = best.shape[1]
    blocks = xp.view(-1, group * dim)
    offsets = torch.arange(group, device=x.device)
    dists, nbrs = [], []
    for u in range(0, len(best), step):
        b = best[u:u + step]
        q = len(b)
        cand = (b[:, :, None] * group + offsets).reshape(q, -1)
        pts = torch.index_select(blocks, 0, b.reshape(-1)).view(q, -1, dim)
        d = torch.linalg.vector_norm(pts - x[s + u:s + u + q, None], dim=2).square_()
        bad = (cand >= n) | (cand == torch.arange(s + u, s + u + q, device=x.device)[:, None])
        bad |= (best_v[u:u + q] == torch.inf)[:, :, None].expand(q, kk, group).reshape(q, -1)
        v, j = torch.topk(d.masked_fill_(bad, torch.inf), k, dim=1, largest=False)
        dists.append(v)
        nbrs.append(cand.gather(1, j))
    return torch.cat(dists), torch.cat(nbrs)


def knn_graph(x: Tensor, k: int = 5, *, t: float | None = None, mutual: bool = False,
              chunk: int = 2048) -> Tensor:
    """The symmetric k-nearest-neighbour graph with heat-kernel weights (eq. 19).

    ``W_ij = exp(-||x_i - x_j||^2 / t)`` when ``j`` is among the ``k`` nearest neighbours of ``i``
    or ``i`` among those of ``j`` (``mutual=False``), or both (``mutual=True``); 0 otherwise and on
    the diagonal. The search is exact brute force on the device of ``x``, in square tiles of
    squared distances over the upper triangle only (half the products; ``chunk`` rows, and on CPU
    ``chunk`` columns, so that a tile stays in cache). Each tile is reduced at once, both ways, to
    minima over groups of up to 32 consecutive points, and only the points of each point's ``k``
    best groups are compared again, by ``||x_i - x_j||^2`` (memory O(chunk n / 32 + k n), never
    n x n). Points at equal distance may be taken in either order.

    Parameters
    ----------
    x : Tensor (n, D) float
    k : int, 1 <= k < n
    t : float > 0, optional
        The heat-kernel width; None takes the mean squared distance to the k nearest neighbours.
    mutual : bool
    chunk : int
        Rows per distance tile.

    Returns
    -------
    Tensor (n, n), sparse COO, coalesced, dtype and device of ``x``
    """
    x = _check_points("x", x)
    n = x.shape[0]
    k = check_int("k", k, 1)
    if k >= n:
        raise ValueError(f"k must be < n = {n} (the number of points in x), got k = {k}")
    chunk = check_int("chunk", chunk, 1)
    group = max(1, min(32, n // (8 * k)))
    cols = chunk if x.device.type == "cpu" else 16 * chunk  # square tiles stay in a CPU cache
    d2, j = _knn(x, k, chunk, cols, group)
    if t is None:
        t = float(d2.mean())
        if t == 0.0:
            t = 1.0  # all neighbours coincide: any width gives weight 1
    else:
        t = check_number("t", t, low=0.0, open_low=True)
    i = torch.arange(n, device=x.device).repeat_interleave(k)
    j = j.reshape(-1)
    w = torch.exp(-d2.reshape(-1) / t)
    # both directions of each kNN edge, with a count of how many directions were found
    idx = torch.stack([torch.cat([i, j]), torch.cat([j, i])])
    vals = torch.stack([torch.cat([w, w]), torch.ones(2 * len(w), dtype=x.dtype, device=x.device)], dim=1)
    both = torch.sparse_coo_tensor(idx, vals, (n, n, 2), check_invariants=False).coalesce()
    ind, v = both.indices(), both.values()
    count = v[:, 1]  # 2 when the edge is in both kNN lists, else 1
    keep = count > 1.5 if mutual else count > 0
    weight = v[keep, 0] / count[keep]
    return torch.sparse_coo_tensor(ind[:, keep], weight, (n, n), check_invariants=False).coalesce()


def laplacian(W: Tensor, *, normalized: bool = False) -> Tensor:
    """The graph Laplacian ``L = D - W`` (or ``I - D^-1/2 W D^-1/2``), sparse.

    Parameters
    ----------
    W : Tensor (n, n), sparse COO or dense, symmetric, non-negative
    normalized : bool
        The symmetric normalized Laplacian; isolated nodes get a zero row.

    Returns
    -------
    Tensor (n, n), sparse COO, coalesced
    """
    W = _check_graph(W)
    n = W.shape[0]
    ind, w = W.indices(), W.values()
    deg = torch.zeros(n, dtype=w.dtype, device=w.device).index_add_(0, ind[0], w)
    diag = torch.arange(n, device=w.device).expand(2, n)
    if normalized:
        inv = torch.where(deg > 0, deg.clamp_min(torch.finfo(w.dtype).tiny).rsqrt(), torch.zeros_like(deg))
        off = -w * inv[ind[0]] * inv[ind[1]]
        d = (deg > 0).to(w.dtype)
    else:
        off, d = -w, deg
    return torch.sparse_coo_tensor(torch.cat([ind, diag], 1), torch.cat([off, d]), (n, n),
                                   check_invariants=False).coalesce()


def laplacian_penalty(f: Tensor, W: Tensor) -> Tensor:
    """``tr(F^T L F) = 1/2 sum_ij W_ij ||f_i - f_j||^2``, the manifold regularizer of eq. 9.

    Differentiable in ``f`` (and in the values of ``W``), O(nnz(W) N) time and memory. ``f`` holds
    the scores of n parts (tokens) under any model: for a chain model, the unary scores of the
    labeled and unlabeled tokens, ``f = unary[mask]`` (n, N), so that parts (label s, token u) are
    compared only with parts of the same label (eq. 19's block structure). Typical use with a
    labeled batch and a batch of unlabeled tokens::

        unary, trans = model(x_labeled)
        loss = hinge(unary, trans, labels, lengths=lengths)
        f = model(x_pool)[0].reshape(-1, N)          # all tokens of the graph, (n, N)
        loss = loss + lam2 / lam1 * laplacian_penalty(f, W) / n

    Parameters
    ----------
    f : Tensor (n,) or (n, N) float
    W : Tensor (n, n), sparse COO or dense, symmetric

    Returns
    -------
    Tensor () scalar, dtype of ``f``
    """
    if not isinstance(f, Tensor) or f.dtype not in (torch.float32, torch.float64) or f.dim() not in (1, 2):
        got = f"{f.dtype} tensor of shape {tuple(f.shape)}" if isinstance(f, Tensor) else type(f).__name__
        raise TypeError(f"f must be a float tensor of shape (n,) or (n, N), got {got}")
    W = _check_graph(W, f.shape[0])
    if W.device != f.device:
        raise ValueError(f"W is on {W.device} but f is on {f.device}; use one device")
    F = f[:, None] if f.dim() == 1 else f
    ind, w = W.indices(), W.values().to(F.dtype)
    diff = F[ind[0]] - F[ind[1]]
    return 0.5 * (w * (diff * diff).sum(1)).sum()
