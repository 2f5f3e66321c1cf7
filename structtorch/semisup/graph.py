"""Similarity graphs over points and the Laplacian regularizer (Altun, McAllester & Belkin 2005, eq. 9, 19).

``knn_graph`` builds the heat-kernel kNN graph W over token observations without an n x n dense
matrix; ``laplacian`` gives ``L = D - W``; ``laplacian_penalty(f, W)`` is
``tr(F^T L F) = 1/2 sum_ij W_ij ||f_i - f_j||^2``, the smoothness term of eq. 9, for scores of any
model (kernel, linear or neural).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from structtorch._checks import check_finite, check_int, check_number
from structtorch._threads import call_threads

__all__ = ["knn_graph", "laplacian", "laplacian_penalty"]


def _check_points(name: str, x: object) -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of shape (n, D), got {type(x).__name__}")
    if x.dtype not in (torch.float32, torch.float64):
        raise TypeError(f"{name} must be float32 or float64, got {x.dtype}")
    if x.dim() != 2:
        raise ValueError(f"{name} must have shape (n, D), got {tuple(x.shape)}")
    if x.shape[1] == 0:
        raise ValueError(f"{name} must have at least one feature (shape (n, D) with D >= 1), "
                         f"got {tuple(x.shape)}")
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


def _gamma(dim: int, u: float, extra: int) -> float:
    """``gamma_{dim + extra} = (dim + extra) u / (1 - (dim + extra) u)``, the classic bound on the
    relative rounding error of a sum of ``dim + extra`` terms (huge when it is meaningless)."""
    v = (dim + extra) * u
    return v / (1.0 - v) if v < 0.5 else 1e10


def _roundoff(dtype: torch.dtype, device: torch.device) -> tuple[float, float]:
    """Unit roundoff of ``dtype`` for elementwise work, and of its matrix products on ``device``
    (float32 products may run in TF32 or bfloat16 when the user allowed it)."""
    u = torch.finfo(dtype).eps / 2
    if dtype != torch.float32:
        return u, u
    reduced = torch.get_float32_matmul_precision() != "highest"
    try:
        if device.type == "cuda":
            reduced |= bool(torch.backends.cuda.matmul.allow_tf32)
            reduced |= getattr(torch.backends.cuda.matmul, "fp32_precision", "none") not in ("none", "ieee")
        elif device.type == "cpu":
            reduced |= getattr(torch.backends.mkldnn.matmul, "fp32_precision", "none") not in ("none", "ieee")
    except AttributeError:  # pragma: no cover - older or newer torch without these switches
        pass
    return u, (2.0 ** -8 if reduced else u)  # 2^-8 covers bfloat16 and TF32 inputs


def _needed(dk: Tensor, na: Tensor, gam: float, eta: float, tol: float) -> Tensor:
    """The computed ``tau = ||a'||^2 + ||b'||^2 - 2 a'.b'`` (a' the centred query, ``na = ||a'||^2``)
    at and above which a point is provably no nearer than ``dk (1 - tol)``, float64 (r,).

    The rounding of ``tau`` is at most ``2 gam (||a'||^2 + ||b'||^2) + eta <= 2 gam (3 ||a'||^2 +
    2 d) + eta``, d the true squared distance (``||b'||^2 <= 2 ||a'||^2 + 2 d``; ``eta`` covers
    underflow), so ``d >= (tau - 6 gam ||a'||^2 - eta) / (1 + 4 gam)``. Exact duplicates
    (``dk == 0``) need nothing: -inf."""
    dk = dk.double()
    need = dk * (1.0 - tol) * (1.0 + 4.0 * gam) + 6.0 * gam * (1.0 + 2.0 * gam) * na.double() + eta
    return need.masked_fill_(dk == 0, -torch.inf)


def _spatial_order(p: Tensor, leaf: int = 8) -> Tensor:
    """A permutation of the rows of ``p`` (u, D) that keeps nearby points together: the leaf order
    of a kd-tree (median splits on each cell's axis of largest spread), built level by level."""
    u, dim = p.shape
    order = torch.arange(u, device=p.device)
    if u <= leaf:
        return order
    seg = torch.zeros(u, dtype=torch.long, device=p.device)
    pos = torch.arange(u, device=p.device)
    cells = 1
    while -(-u // cells) > leaf:
        pts = p[order]
        idx = seg[:, None].expand(u, dim)
        hi = p.new_full((cells, dim), -torch.inf).scatter_reduce_(0, idx, pts, "amax")
        lo = p.new_full((cells, dim), torch.inf).scatter_reduce_(0, idx, pts, "amin")
        axis = (hi - lo).argmax(1)
        key = pts.gather(1, axis[seg][:, None]).squeeze(1)
        o = torch.argsort(key, stable=True)
        o = o[torch.argsort(seg[o], stable=True)]  # by cell, then by the cell's coordinate
        order = order[o]
        counts = torch.bincount(seg, minlength=cells)
        start = counts.cumsum(0) - counts
        seg = 2 * seg + (pos - start[seg] >= (counts[seg] + 1) // 2)
        cells *= 2
    return order


def _rescore(x: Tensor, xp: Tensor, q: Tensor, best: Tensor, best_v: Tensor, k: int, group: int,
             step: int = 64) -> tuple[Tensor, Tensor]:
    """Distances ``||x_i - x_j||^2`` (by differences, on the points as given) from the queries
    ``q`` (r,) to the points of their groups ``best`` (r, kk), and the k nearest, ascending; groups
    at infinite distance (fewer than kk usable) are left out."""
    n, dim = x.shape
    kk = best.shape[1]
    blocks = xp.view(-1, group * dim)
    offsets = torch.arange(group, device=x.device)
    step = max(1, min(step, (1 << 22) // (kk * group * dim)))  # many groups: fewer queries at once
    dists, nbrs = [], []
    for u in range(0, len(best), step):
        b, qi = best[u:u + step], q[u:u + step]
        r = len(b)
        cand = (b[:, :, None] * group + offsets).reshape(r, -1)
        pts = torch.index_select(blocks, 0, b.reshape(-1)).view(r, -1, dim)
        d = torch.linalg.vector_norm(pts - x[qi, None], dim=2).square_()
        bad = (cand >= n) | (cand == qi[:, None])
        bad |= (best_v[u:u + step] == torch.inf)[:, :, None].expand(r, kk, group).reshape(r, -1)
        v, j = torch.topk(d.masked_fill_(bad, torch.inf), k, dim=1, largest=False)
        dists.append(v)
        nbrs.append(cand.gather(1, j))
    return torch.cat(dists), torch.cat(nbrs)


def _chunk_minima(xw: Tensor, q: Tensor, n: int, group: int, cols: int) -> tuple[Tensor, Tensor]:
    """Group minima of ``||a'||^2 + ||b'||^2 - 2 a'.b'`` for chunks of queries ``q`` (c, s), each
    chunk centred at its own mean (the query itself when s = 1: then these are plain differences):
    ((c s, groups), ||a'||^2 (c s,)). Memory O(c s groups) plus tiles of about 2^22 numbers."""
    c, s = q.shape
    N, dim = xw.shape
    a = xw[q]
    mu = a if s == 1 else a.mean(1, keepdim=True)
    a = a - mu
    na = (a * a).sum(2)
    w = min(cols, max(group, (1 << 22) // (c * dim) // group * group))
    gmin = xw.new_empty(c, s, N // group)
    for c0 in range(0, N, w):
        bc = xw[c0:c0 + w] - mu  # (c, w, D): each chunk's columns around its own centre
        ww = bc.shape[1]
        nb = (bc * bc).sum(2)
        if c0 + ww > n:
            nb[:, max(0, n - c0):] = torch.inf  # padding
        tile = nb[:, None, :] if s == 1 else torch.baddbmm(nb[:, None, :], a, bc.transpose(1, 2), alpha=-2.0)
        rel = q - c0
        ci, si = ((rel >= 0) & (rel < ww)).nonzero(as_tuple=True)
        tile[ci, si, rel[ci, si]] = torch.inf  # no self-loops
        gmin[:, :, c0 // group:(c0 + ww) // group] = tile.view(c, s, -1, group).amin(3)
    gmin += na[:, :, None]
    return gmin.view(c * s, -1), na.view(-1)


def _refine(x: Tensor, xo: Tensor, todo: Tensor, d2: Tensor, nbrs: Tensor, k: int, group: int, rows: int,
            cols: int, tol: float, eta: float) -> None:
    """Redo the queries ``todo`` whose group search could not be certified, in place in ``d2``,
    ``nbrs``: sorted spatially, in chunks centred at their own mean (rectangular tiles against all
    groups), certified again, and the rest retried in chunks 4 times smaller, down to single
    queries (plain differences, always right). The first pass runs in the dtype of ``x`` when
    many queries are left and its products are exact enough; the others in float64."""
    n, dim = x.shape
    m = xo.shape[0] // group
    kk, cap = min(k, m), max(32, 4 * k, m // 8)  # comparing cap groups costs less than a pass
    u_r, u_m = _roundoff(x.dtype, x.device)
    pending = todo[_spatial_order(x[todo])]
    size, first = min(rows, len(pending)), True
    while len(pending):
        wd = x.dtype if first and u_m == u_r and 16 * len(pending) > n else torch.float64
        gam = _gamma(dim, _roundoff(wd, x.device)[1], 16)
        xw = xo.to(wd)
        step = size * max(1, rows // size)
        failed = []
        for s in range(0, len(pending), step):
            q = pending[s:s + step]
            full = len(q) // size * size
            for part in (q[:full].view(-1, size), q[full:].view(1, -1)):
                if part.numel() == 0:
                    continue
                gmin, na = _chunk_minima(xw, part, n, group, cols)
                qi = part.reshape(-1)
                v, b = torch.topk(gmin, kk, dim=1, largest=False)
                d, j = _rescore(x, xo, qi, b, v, k, group)
                if size > 1 and kk < m:
                    # the groups that might hold a point nearer than d_k (1 - tol): when there are
                    # only a few (near ties), compare all their points; else retry in smaller chunks
                    count = (gmin < _needed(d[:, -1], na, gam, eta, tol)[:, None]).sum(1)
                    top = kk
                    while top < min(cap, m):  # in bands of counts, so that few groups are wasted
                        top, low = min(2 * top, cap, m), top
                        more = ((count > low) & (count <= top)).nonzero().squeeze(1)
                        if len(more):
                            v2, b2 = torch.topk(gmin[more], top, dim=1, largest=False)
                            d[more], j[more] = _rescore(x, xo, qi[more], b2, v2, k, group)
                    failed.append(qi[count > cap])
                d2[qi], nbrs[qi] = d, j
        pending = torch.cat(failed) if failed else todo[:0]
        size, first = max(1, size // 4), False


_SPARE = 8  # groups kept per point beyond its k best: near ties are settled without a new search


def _knn(x: Tensor, k: int, rows: int, cols: int, group: int) -> tuple[Tensor, Tensor]:
    """The k nearest neighbours of every point of ``x`` among the others, exact in the sense of
    :func:`knn_graph`: (d2 (n, k) ascending, j (n, k)).

    Points are split into groups of ``group`` consecutive points and centred at their mean. Each
    (rows, cols) tile of ``m = ||a'||^2 + ||b'||^2 - 2 a'.b'``, from a block of rows to the columns
    from that block on (the upper triangle: half the products), is reduced at once to minima over
    groups, both ways: row points against column groups, and column points against the block's
    row groups (kept as a running top-(k + _SPARE) of groups per point, updated only where a tile
    beats it). The points of each point's k best groups are compared again, by
    ``||x_i - x_j||^2``. The rounding of ``m`` is bounded (:func:`_needed`), so the kept group
    minima prove, for almost every point, that no point outside its examined groups is nearer
    than ``d_k (1 - tol)``: the (k + 1)-th minimum directly, or, for near ties, after the points
    of the few kept groups below the bound are compared too. The others (points far from the
    mean, as in well separated clusters, or many ties) are searched again by :func:`_refine`.
    """
    n, dim = x.shape
    m = -(-n // group)  # groups; the last one is padded with points at infinite distance
    pad = m * group - n
    rows = group * max(1, rows // group)
    cols = rows * max(1, cols // rows)
    kk, kk1 = min(k, m), min(k + _SPARE, m)
    u_r, u_m = _roundoff(x.dtype, x.device)
    gam, tol = _gamma(dim, u_m, 16), 8.0 * _gamma(dim, u_r, 8)
    eta = (4 * dim + 16) * torch.finfo(x.dtype).tiny  # underflow, flushed or not
    xc = x - x.mean(0)  # distances do not move; ||b||^2 - 2 a.b loses less to rounding
    norms = (xc * xc).sum(1)
    xp = torch.cat([xc, xc.new_zeros(pad, dim)])
    xo = torch.cat([x, x.new_zeros(pad, dim)])  # the points as given, for the exact distances
    col_norms = torch.cat([norms, norms.new_full((pad,), torch.inf)])
    row_norms = torch.cat([norms, norms.new_zeros(pad)])
    # best (group minimum, group) of each point against the row blocks before its own, (kk1, n + pad)
    run_v = x.new_full((kk1, n + pad), torch.inf)
    run_i = torch.zeros(kk1, n + pad, dtype=torch.long, device=x.device)
    d2 = x.new_empty(n, k)
    nbrs = torch.empty(n, k, dtype=torch.long, device=x.device)
    todo = []
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
                t = t.view(-1, group, t.shape[1]).amin(1)
                # merged into the running lists only where a row group beats the kept kk1-th
                hit = (t < run_v[kk1 - 1, c0:c + w]).any(0).nonzero().squeeze(1)
                if len(hit):
                    v, j = torch.topk(t[:, hit], min(kk1, r // group), dim=0, largest=False)
                    hit += c0
                    run_v[:, hit], run_i[:, hit] = _merge(run_v[:, hit], run_i[:, hit], v, j + s // group,
                                                          kk1, 0)
        gmin.add_(row_norms[s:s + r, None])
        v, j = torch.topk(gmin, min(kk1, gmin.shape[1]), dim=1, largest=False)
        best_v, best = _merge(run_v[:, s:s + r].T, run_i[:, s:s + r].T, v, j + s // group, kk1, 1)
        nr = min(r, n - s)
        q = torch.arange(s, s + nr, device=x.device)
        d, j = _rescore(x, xo, q, best[:nr, :kk], best_v[:nr, :kk], k, group)
        d2[s:s + nr], nbrs[s:s + nr] = d, j
        if kk1 > kk:  # else every group was examined
            # the kept groups that might hold a point nearer than d_k (1 - tol) (near ties): compare
            # all their points when they are not all the kept groups, else search again
            count = (best_v[:nr] < _needed(d[:, -1], norms[s:s + nr], gam, eta, tol)[:, None]).sum(1)
            more = ((count > kk) & (count < kk1)).nonzero().squeeze(1)
            if len(more):
                c = int(count[more].max())
                d2[s + more], nbrs[s + more] = _rescore(x, xo, q[more], best[more, :c], best_v[more, :c], k,
                                                        group)
            todo.append(q[count >= kk1])
    todo = torch.cat(todo) if todo else nbrs.new_empty(0)
    if len(todo):
        _refine(x, xo, todo, d2, nbrs, k, group, rows, cols, tol, eta)
    return d2, nbrs


def _neighbours(x: Tensor, k: int, chunk: int) -> tuple[Tensor, Tensor, int]:
    """``_knn`` on ``x 2^-e``, the points scaled by a power of two (exactly) so that their largest
    coordinate lies in [1/2, 1): no squared distance overflows, none underflows needlessly.
    Returns (scaled squared distances (n, k), neighbours (n, k), e)."""
    n = x.shape[0]
    top = float(x.abs().max())
    e = math.frexp(top)[1] if top > 0 else 0
    if e:
        h = e // 2
        x = x * 2.0 ** -h * 2.0 ** (h - e)  # two exact steps: 2^-e alone may not be a float32
    group = max(1, min(32, n // (8 * k)))
    cols = chunk if x.device.type == "cpu" else 16 * chunk  # square tiles stay in a CPU cache
    d2, j = _knn(x, k, chunk, cols, group)
    return d2, j, e


def _heat(d2: Tensor, e: int, t: float | None) -> Tensor:
    """``exp(-d^2 / t)`` in float64 for the squared distances ``d^2 = d2 4^e`` given scaled, with no
    overflow: ``t = None`` takes the mean ``d^2`` (the scale cancels); else ``d^2`` exactly when
    it is a normal float64, and ``d^2 / t`` in the log domain when it is not."""
    d2 = d2.double()
    if t is None:
        t_s = float(d2.mean())
        return torch.exp(-d2 / t_s) if t_s > 0 else torch.ones_like(d2)  # all neighbours coincide
    pos = d2[d2 > 0]
    if len(pos) == 0:
        return torch.ones_like(d2)
    lo, hi = math.log2(float(pos.min())) + 2 * e, math.log2(float(pos.max())) + 2 * e
    if -1022 < lo and hi < 1023:  # d^2 is a normal float64: scale back exactly, by powers of two
        rest = 2 * e
        while rest:
            step = max(-1000, min(1000, rest))
            d2, rest = d2 * 2.0**step, rest - step
        return torch.exp(-d2 / t)
    # d^2 / t overflowing gives weight 0, underflowing 1, both right; log(0) = -inf gives 1
    return torch.exp(-torch.exp(torch.log(d2) + (2 * e * math.log(2.0) - math.log(t))))


@call_threads()
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
    n x n). A bound on the rounding of the tiles certifies the result point by point (near ties
    by comparing every point the bound cannot rule out); the few points it cannot certify
    (clusters far apart compared with their size, many ties; all of them when float32 products
    may run in TF32 or bfloat16) are searched again in spatially sorted chunks centred at their
    own mean, in float64 unless many, and in ever smaller chunks, down to single points. Points
    are scaled by a power of two first (exact), so huge or tiny coordinates neither overflow nor
    underflow; the weights are computed in float64 (``d^2 / t`` in the log domain if need be).

    Exact means: for every point ``i``, with ``d_k(i)`` the largest of the squared distances to
    its returned neighbours (computed by differences, ``||x_i - x_j||^2``), every point ``j != i``
    not returned has ``||x_i - x_j||^2 >= d_k(i) (1 - tol)``, ``tol = 16 gamma``,
    ``gamma = (D + 8) u / (1 - (D + 8) u)`` and ``u`` the unit roundoff of the dtype of ``x``
    (2^-24 for float32, 2^-53 for float64), up to the dtype's underflow threshold. So neighbours
    are the true k nearest, except that points at equal (or within ``tol`` relatively equal)
    distance may be taken in either order.

    Parameters
    ----------
    x : Tensor (n, D) float, D >= 1
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
    if t is not None:
        t = check_number("t", t, low=0.0, open_low=True)
    d2, j, e = _neighbours(x, k, chunk)
    i = torch.arange(n, device=x.device).repeat_interleave(k)
    j = j.reshape(-1)
    w = _heat(d2.reshape(-1), e, t).to(x.dtype)
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
