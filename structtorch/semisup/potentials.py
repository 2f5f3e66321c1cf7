"""Kernel chain potentials over the labeled tokens (Altun, McAllester & Belkin 2005, eqs. 14-15)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from structtorch._checks import check_int
from structtorch.semisup.graph import _check_points

__all__ = ["KernelChainPotentials"]


class KernelChainPotentials(nn.Module):
    """Chain potentials ``f(s, u) = sum_i beta[s, i] k~(x_i, u)`` over the labeled tokens ``x_i``.

    The score of a labeling is ``F(x, y) = sum_t f(y_t, x_t) + sum_t f(y_t, y_t+1)`` with parts
    (label, observation) and (label, label) (eqs. 3-4). With the graph-regularized kernel k~ the
    observation parts of different labels never interact (block-diagonal K and L, one identical
    n x n block per label), so each label s has its own coefficient row ``beta[s]`` over the
    labeled tokens and the same kernel. Transition parts have the kernel ``delta delta`` whose
    graph-regularized version is ``delta delta / lam1``: their scores are ``beta_trans / lam1``.

    The regularizer of eq. 15 is ``beta^T K~ beta`` summed over the label blocks, plus
    ``||beta_trans||^2 / lam1``; :func:`structtorch.train.fit` uses :meth:`regularizer` in place
    of the squared norm of the parameters (``l2=2 / n`` gives eq. 15's objective divided by n).

    Parametrization: with ``K~_ll = U diag(s) U^T`` over the labeled tokens, the trained weights are
    ``w = beta U diag(s)^1/2`` (N, r), r the eigenvalues above ``rcond * max(s)``, and the
    transitions' ``tau = beta_trans / sqrt(lam1)``. Then ``beta^T K~ beta = ||w||^2`` and the model is
    linear in whitened features ``diag(s)^-1/2 U^T k~(x_l, u)``: (sub)gradient steps see a
    well-conditioned problem (in beta they would follow the kernel's condition number), and the
    regularizer is the plain squared norm of the parameters. ``beta`` and ``beta_trans`` are
    properties.

    Parameters
    ----------
    kernel : GraphRegularizedKernel or callable (a (na, D), b (nb, D)) -> (na, nb)
        With an ``against(b)`` method (as :class:`GraphRegularizedKernel`) the solve for the
        labeled tokens is done once here. ``kernel.lam1`` (default 1) scales the transitions.
    x_labeled_tokens : Tensor (n_l, D)
        The observations of all tokens of the labeled sequences.
    num_labels : int
        N.
    transitions : bool
        Learn transition scores (the structured model, "STR"); False keeps them at zero (per-token
        multiclass SVM with the same kernel, "SVM").
    inputs : {"tokens", "rows"}
        What ``forward`` takes: token observations (B, T, D), or their kernel rows (B, T, n_l)
        computed once by :meth:`kernel_rows` (training on a fixed set of sequences then costs
        one matrix product per step instead of a kernel evaluation).
    rcond : float
        Eigenvalues of the labeled Gram matrix ``K~_ll`` (n_l, n_l) below ``rcond`` times the largest
        are dropped from the whitened parametrization.

    Shapes: ``forward(tokens (B, T, D)) -> (unary (B, T, N), transitions (N, N))``.
    """

    def __init__(self, kernel: Callable[[Tensor, Tensor], Tensor], x_labeled_tokens: Tensor,
                 num_labels: int, *, transitions: bool = True, inputs: str = "tokens",
                 rcond: float = 1e-10) -> None:
        super().__init__()
        x = _check_points("x_labeled_tokens", x_labeled_tokens)
        self.num_labels = check_int("num_labels", num_labels, 1)
        if inputs not in ("tokens", "rows"):
            raise ValueError(f"inputs must be 'tokens' or 'rows', got {inputs!r}")
        self.inputs = inputs
        self.lam1 = float(getattr(kernel, "lam1", 1.0))
        self.kernel = kernel
        self.x_labeled = x
        self._k: Callable[[Tensor], Tensor] = (kernel.against(x) if hasattr(kernel, "against")
                                               else lambda a: kernel(a, x))
        gram = self._k(x).detach()
        s, U = torch.linalg.eigh(0.5 * (gram + gram.T))
        keep = s > float(rcond) * max(float(s.max()), 0.0)
        if not bool(keep.any()):
            raise ValueError("the kernel's Gram matrix over x_labeled_tokens has no positive eigenvalue")
        self.register_buffer("whiten", U[:, keep] * s[keep].rsqrt())  # (n_l, r): beta = weight @ whiten.T
        self.weight = nn.Parameter(torch.zeros(num_labels, int(keep.sum()), dtype=x.dtype, device=x.device))
        trans = torch.zeros(num_labels, num_labels, dtype=x.dtype, device=x.device)
        self.tau = nn.Parameter(trans) if transitions else None
        if not transitions:
            self.register_buffer("_zero_trans", trans)

    @property
    def beta(self) -> Tensor:
        """(N, n_l) the coefficients of eq. 14 over the labeled tokens."""
        return self.weight @ self.whiten.T

    @property
    def beta_trans(self) -> Tensor | None:
        """(N, N) the transition coefficients (transition scores are ``beta_trans / lam1``)."""
        return None if self.tau is None else self.tau * self.lam1 ** 0.5

    def extra_repr(self) -> str:
        return (f"num_labels={self.num_labels}, labeled_tokens={self.x_labeled.shape[0]}, "
                f"rank={self.weight.shape[1]}, transitions={self.tau is not None}")

    def kernel_rows(self, tokens: Tensor) -> Tensor:
        """``k~(u, x_i)`` for every token u: (..., n_l) for tokens (..., D)."""
        if not isinstance(tokens, Tensor) or tokens.dim() < 2 or tokens.shape[-1] != self.x_labeled.shape[1]:
            got = tuple(tokens.shape) if isinstance(tokens, Tensor) else type(tokens).__name__
            raise ValueError(f"tokens must have shape (B, T, {self.x_labeled.shape[1]}), got {got}")
        flat = tokens.reshape(-1, tokens.shape[-1]).to(self.x_labeled.dtype)
        return self._k(flat).reshape(*tokens.shape[:-1], -1)

    def forward(self, tokens: Tensor) -> tuple[Tensor, Tensor]:
        """Chain potentials of token observations (B, T, D) (or of their kernel rows (B, T, n_l)
        with ``inputs="rows"``): unary (B, T, N), transitions (N, N)."""
        if self.inputs == "rows":
            n_l = self.x_labeled.shape[0]
            if not isinstance(tokens, Tensor) or tokens.dim() < 2 or tokens.shape[-1] != n_l:
                got = tuple(tokens.shape) if isinstance(tokens, Tensor) else type(tokens).__name__
                raise ValueError(f"with inputs='rows' the input must be kernel rows of shape (B, T, {n_l}), "
                                 f"got {got}")
            rows = tokens.to(self.weight.dtype)
        else:
            rows = self.kernel_rows(tokens)
        unary = (rows @ self.whiten) @ self.weight.T
        trans = self.tau * self.lam1 ** -0.5 if self.tau is not None else self._zero_trans
        return unary, trans

    def regularizer(self) -> Tensor:
        """``sum_s beta_s^T K~ beta_s + ||beta_trans||^2 / lam1`` (eq. 15)."""
        reg = self.weight.pow(2).sum()  # = sum_s beta_s^T K~ beta_s
        if self.tau is not None:
            reg = reg + self.tau.pow(2).sum()  # = ||beta_trans||^2 / lam1
        return reg
