"""The graph-regularized kernel of Altun, McAllester & Belkin (2005, eqs. 11-13) and the transductive
kernel of their eq. 18.

Derivation of the form used here
--------------------------------
With the Gram matrix ``K`` of the base kernel over all n sample points (labeled and unlabeled) and
the Laplacian ``L`` of their similarity graph, the paper's kernel is

    k~(p, p') = k_p^T Q^{-1} k_p',   Q = lam1 K + lam2 K L K,   k_p = [k(p, x_i)]_i   (eq. 13).

Put ``M = (lam2 / lam1) L``. If ``p = x_a`` is a sample point, ``k_p = K e_a`` and, for invertible K,

    k~(x_a, p') = e_a^T K (lam1 K (I + M K))^{-1} k_p' = (1 / lam1) e_a^T (I + M K)^{-1} k_p'
               = (1 / lam1) [k(x_a, p') - k_a^T (I + M K)^{-1} M k_p'],

using ``(I + M K)^{-1} = I - (I + M K)^{-1} M K``. The last line needs no inverse of K (which is
numerically singular for smooth kernels) nor of the singular L: ``I + M K`` has eigenvalues >= 1
(it is similar to ``I + K^1/2 M K^1/2``). It is Sindhwani, Niyogi & Belkin's (2005) deformed kernel

    k~(x, z) = (1 / lam1) [k(x, z) - k_x^T (I + M K)^{-1} M k_z],

which is used here for all pairs. It equals the paper's form whenever one argument is a sample
point; for two out-of-sample points the forms differ (the paper's ``k_x^T Q^{-1} k_z`` only sees
x and z through their projections on the sample) and the deformed kernel is the RKHS kernel of the
regularized problem (8). ``(I + M K)^{-1} M`` is symmetric (push-through identity).

Computation: ``method="dense"`` factors ``I + M K`` once (LU, O(n^3)) and keeps
``G = (I + M K)^{-1} M`` (n x n); ``method="cg"`` never factors: it solves ``(I + M K) H = M K_b``
for the right-hand points b by conjugate gradients in the K inner product, where ``I + M K`` is
self-adjoint and positive definite, with the sparse L (O(iterations n^2 |b|), memory O(n^2) for the
cached Gram matrix).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from structtorch._checks import check_int, check_number
from structtorch.semisup.graph import _check_graph, _check_points, _sq_dist, laplacian

__all__ = ["rbf_kernel", "GraphRegularizedKernel", "TransductiveKernel"]

Kernel = Callable[[Tensor, Tensor], Tensor]

DENSE_MAX = 6000  # "auto" is dense up to here: dense beat CG at every n measured (<= 6,000, RESULTS.md)


def rbf_kernel(a: Tensor, b: Tensor, gamma: float) -> Tensor:
    """``exp(-gamma ||a_i - b_j||^2)``.

    Parameters
    ----------
    a : Tensor (na, D)
    b : Tensor (nb, D)
    gamma : float > 0

    Returns
    -------
    Tensor (na, nb)
    """
    a, b = _check_points("a", a), _check_points("b", b)
    if a.shape[1] != b.shape[1] or a.dtype != b.dtype or a.device != b.device:
        raise ValueError(f"a and b must share D, dtype and device, got {tuple(a.shape)} {a.dtype} {a.device} "
                         f"and {tuple(b.shape)} {b.dtype} {b.device}")
    gamma = check_number("gamma", gamma, low=0.0, open_low=True)
    return torch.exp(-gamma * _sq_dist(a, b))


def _check_lams(lam1: float, lam2: float) -> tuple[float, float]:
    lam1 = check_number("lam1", lam1, low=0.0, open_low=True)
    lam2 = check_number("lam2", lam2, low=0.0)
    return lam1, lam2


def _gram(kernel: Kernel, a: Tensor, b: Tensor, name: str) -> Tensor:
    K = kernel(a, b)
    if not isinstance(K, Tensor) or K.shape != (a.shape[0], b.shape[0]):
        got = tuple(K.shape) if isinstance(K, Tensor) else type(K).__name__
        raise ValueError(f"base_kernel({name}) must return a Gram matrix of shape "
                         f"({a.shape[0]}, {b.shape[0]}), got {got}")
    return K


class GraphRegularizedKernel:
    """``k~(x, z) = (1/lam1) [k(x, z) - k_x^T (I + M K)^{-1} M k_z]``, ``M = (lam2/lam1) L`` (see the
    module docstring for the derivation from eq. 13).

    Parameters
    ----------
    base_kernel : callable (a (na, D), b (nb, D)) -> (na, nb)
        e.g. ``functools.partial(rbf_kernel, gamma=0.5)``.
    x_all : Tensor (n, D)
        All sample points (labeled and unlabeled tokens), the nodes of ``W``.
    W : Tensor (n, n), sparse COO or dense
        The symmetric similarity graph (e.g. :func:`knn_graph`).
    lam1 : float > 0
        Weight of the RKHS norm.
    lam2 : float >= 0
        Weight of the Laplacian term (0 gives ``k / lam1``).
    normalized : bool
        Use the normalized Laplacian ``I - D^-1/2 W D^-1/2`` (eigenvalues in [0, 2], so lam2 does
        not depend on the graph's degrees and weights) instead of ``D - W``.
    method : {"auto", "dense", "cg"}
        ``auto`` is dense up to ``DENSE_MAX`` points.
    tol, max_iter : float, int
        Relative residual and iteration cap of conjugate gradients.

    Attributes
    ----------
    K : Tensor (n, n)
        The base Gram matrix over ``x_all``.
    W : Tensor (n, n), sparse COO
        The graph, coalesced.
    G : Tensor (n, n) or None
        ``(I + M K)^{-1} M`` (dense method with lam2 > 0).
    """

    def __init__(self, base_kernel: Kernel, x_all: Tensor, W: Tensor, lam1: float, lam2: float, *,
                 normalized: bool = False, method: str = "auto", tol: float = 1e-8,
                 max_iter: int = 1000) -> None:
        if not callable(base_kernel):
            raise TypeError("base_kernel must be callable (a, b) -> Gram matrix, got "
                            f"{type(base_kernel).__name__}")
        self.base_kernel = base_kernel
        self.x_all = _check_points("x_all", x_all)
        n = x_all.shape[0]
        W = _check_graph(W, n)
        if W.device != x_all.device:
            raise ValueError(f"W is on {W.device} but x_all is on {x_all.device}; use one device")
        self.W = W
        self.lam1, self.lam2 = _check_lams(lam1, lam2)
        if method not in ("auto", "dense", "cg"):
            raise ValueError(f"method must be 'auto', 'dense' or 'cg', got {method!r}")
        self.method = ("dense" if n <= DENSE_MAX else "cg") if method == "auto" else method
        self.tol = check_number("tol", tol, low=0.0, open_low=True)
        self.max_iter = check_int("max_iter", max_iter, 1)
        self.K = _gram(base_kernel, x_all, x_all, "x_all, x_all").to(x_all.dtype)
        self.M = laplacian(W.to(x_all.dtype), normalized=normalized) * (self.lam2 / self.lam1)
        self.G = None
        if self.method == "dense" and self.lam2 > 0:  # lam2 = 0: M = 0, k~ = k / lam1, no solve
            I = torch.eye(n, dtype=x_all.dtype, device=x_all.device)
            Md = self.M.to_dense()
            G = torch.linalg.solve(I + Md @ self.K, Md)
            self.G = 0.5 * (G + G.T)

    def __repr__(self) -> str:
        return (f"GraphRegularizedKernel(n={self.x_all.shape[0]}, lam1={self.lam1:g}, lam2={self.lam2:g}, "
                f"method={self.method!r})")

    def _solve(self, R: Tensor) -> Tensor:
        """``(I + M K)^{-1} R`` for R (n, m), by CG in the K inner product (columns batched)."""
        K, M = self.K, self.M
        H = torch.zeros_like(R)
        res = R.clone()
        Kres = K @ res
        P, KP = res.clone(), Kres.clone()
        rz = (res * Kres).sum(0)
        stop = self.tol ** 2 * rz.clamp_min(torch.finfo(R.dtype).tiny)
        for _ in range(self.max_iter):
            if bool((rz <= stop).all()):
                break
            AP = P + M @ KP
            KAP = KP + K @ (M @ KP)
            alpha = rz / (KP * AP).sum(0).clamp_min(torch.finfo(R.dtype).tiny)
            H = H + alpha * P
            res = res - alpha * AP
            Kres = Kres - alpha * KAP
            rz_new = (res * Kres).sum(0)
            beta = rz_new / rz.clamp_min(torch.finfo(R.dtype).tiny)
            P, KP = res + beta * P, Kres + beta * KP
            rz = rz_new
        return H

    def against(self, b: Tensor) -> Callable[[Tensor], Tensor]:
        """``a -> k~(a, b)`` with the solve for the fixed points ``b`` (nb, D) done once."""
        b = _check_points("b", b)
        Hb = None
        if self.lam2 > 0:
            Kb = _gram(self.base_kernel, self.x_all, b, "x_all, b")
            Hb = self.G @ Kb if self.G is not None else self._solve(self.M @ Kb)

        def k_tilde(a: Tensor) -> Tensor:
            a = _check_points("a", a)
            k_ab = _gram(self.base_kernel, a, b, "a, b")
            if Hb is not None:
                k_ab = k_ab - _gram(self.base_kernel, a, self.x_all, "a, x_all") @ Hb
            return k_ab / self.lam1

        return k_tilde

    def __call__(self, a: Tensor, b: Tensor) -> Tensor:
        """The Gram matrix ``k~(a_i, b_j)``, (na, nb)."""
        return self.against(b)(a)


class TransductiveKernel:
    """The transductive kernel of eq. 18, ``mu1 k + mu2 k_S``, with the graph kernel
    ``k_S = c (L + eps I)^{-1}`` (the regularized Laplacian kernel, scaled by c to a mean diagonal
    of 1 so that the weights compare with a unit-diagonal base kernel): defined on the sample only.

    Out-of-sample points have no row in ``k_S``; :meth:`__call__` takes points and uses
    ``k_S(x, .) = 0`` for points that are not (exactly) sample points, so out of sample only
    ``mu1 k`` remains. This is the limitation the graph-regularized kernel removes (section 5).

    Parameters
    ----------
    base_kernel, x_all, W
        As for :class:`GraphRegularizedKernel`.
    mu1, mu2 : float >= 0
        The mixture weights.
    eps : float > 0
        The ridge that makes the Laplacian invertible.
    """

    def __init__(self, base_kernel: Kernel, x_all: Tensor, W: Tensor, mu1: float, mu2: float, *,
                 eps: float = 1e-2) -> None:
        self.base_kernel = base_kernel
        self.x_all = _check_points("x_all", x_all)
        n = x_all.shape[0]
        L = laplacian(_check_graph(W, n).to(x_all.dtype)).to_dense()
        self.mu1 = check_number("mu1", mu1, low=0.0)
        self.mu2 = check_number("mu2", mu2, low=0.0)
        eps = check_number("eps", eps, low=0.0, open_low=True)
        KS = torch.linalg.inv(L + eps * torch.eye(n, dtype=x_all.dtype, device=x_all.device))
        KS = 0.5 * (KS + KS.T)
        self.KS = KS / KS.diagonal().mean()

    def _index(self, a: Tensor) -> Tensor:
        """Sample index of each row of ``a``, -1 when it is not a sample point."""
        d = _sq_dist(a, self.x_all)
        v, i = d.min(1)
        return torch.where(v <= 1e-12 * (1 + (a * a).sum(1)), i, torch.full_like(i, -1))

    def __call__(self, a: Tensor, b: Tensor) -> Tensor:
        """``mu1 k(a, b) + mu2 k_S(a, b)``, (na, nb)."""
        a, b = _check_points("a", a), _check_points("b", b)
        out = self.mu1 * _gram(self.base_kernel, a, b, "a, b")
        ia, ib = self._index(a), self._index(b)
        inside = (ia >= 0)[:, None] & (ib >= 0)[None, :]
        KS = self.KS[ia.clamp_min(0)][:, ib.clamp_min(0)]
        return out + self.mu2 * torch.where(inside, KS, torch.zeros_like(KS))
