"""Glue between the compiled CPU kernels (``csrc/chain.cpp``) and autograd.

The kernels run the two sequential recursions (alpha forward, beta backward) in double; all other
work (row-normalized exponentials of the transitions, node and edge marginals, the shared-
transition gradient as one matrix product) is done here with vectorized tensor ops. k-best lists,
sampling and order-l windows run the PyTorch recursions of ``_torch.py`` in double.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .._extension import chain_ops
from . import _torch
from .layout import Chain


def finite_or_zero(x: Tensor) -> Tensor:
    return torch.where(torch.isfinite(x), x, torch.zeros((), dtype=x.dtype, device=x.device))


def row_normalize(transitions: Tensor) -> tuple[Tensor, Tensor]:
    """r = max_j a[.., i, j] (may be -inf) and f = exp(a - r) <= 1 (0 on all -inf rows), in double."""
    a = transitions.double()
    r = a.amax(-1)
    return r.contiguous(), torch.exp(a - finite_or_zero(r).unsqueeze(-1)).contiguous()


def _edge_gradient(chain: Chain, f: Tensor, s_edge: Tensor, q_edge: Tensor, exact: Tensor,
                   alpha: Tensor, beta: Tensor, logz: Tensor, g: Tensor) -> Tensor:
    """g-weighted edge marginals (summed over (b, t) when shared), in double.

    edge[b, t, i, j] = s_edge[b, t, i] * f[i, j] * q_edge[b, t, j], except on steps flagged
    ``exact`` (where that product could overflow), recomputed as
    exp(alpha_t[i] + a[i, j] + u_{t+1}[j] + beta_{t+1}[j] - logZ).
    """
    N = f.shape[-1]
    if chain.shared:
        grad = (s_edge.reshape(-1, N).t() @ q_edge.reshape(-1, N)) * f
    else:
        grad = s_edge.unsqueeze(-1) * f * q_edge.unsqueeze(-2)
    if bool(exact.any()):
        b, t = exact.nonzero(as_tuple=True)
        a = chain.transitions.double()
        blocks = a.expand(len(b), N, N) if chain.shared else a[b, t]
        w = chain.unary[b, t + 1].double() + beta[b, t + 1]
        log_edge = alpha[b, t, :, None] + blocks + w[:, None, :] - logz[b, None, None]
        edge = g[b, None, None] * torch.exp(log_edge)
        if chain.shared:
            grad += edge.sum(0)
        else:
            grad[b, t] += edge
    return grad


def _forward(chain: Chain) -> tuple[Tensor, tuple[Tensor, Tensor, Tensor]]:
    """logZ (B,) in double and the forward factors (alpha, p, m) the backward reuses."""
    r, f = row_normalize(chain.transitions)
    logz, alpha, p, m = chain_ops().logz_forward(
        chain.unary, chain.transitions, r, f, chain.start, chain.end, chain.lengths
    )
    return logz, (alpha, p, m)


def _backward(chain: Chain, logz: Tensor, factors: tuple[Tensor, Tensor, Tensor], g: Tensor,
              edges: bool = True):
    """(grad unary, grad transitions or None) for upstream gradient g (B,) in double."""
    alpha, p, m = factors
    g = g.contiguous()
    r, f = row_normalize(chain.transitions)  # recomputed rather than kept alive between passes
    ft = f.transpose(-1, -2).contiguous()
    g_unary, s_edge, q_edge, exact, beta = chain_ops().logz_backward(
        g, chain.unary, chain.transitions, r, ft, chain.end, chain.lengths, logz, alpha, p, m
    )
    if not edges:
        return g_unary, None
    return g_unary, _edge_gradient(chain, f, s_edge, q_edge, exact, alpha, beta, logz, g)


@torch.no_grad()
def viterbi(chain: Chain) -> tuple[Tensor, Tensor]:
    """The best score (B,) float64 and labeling (B, T) from the compiled Viterbi (-1 beyond each
    length and on infeasible rows)."""
    args = (chain.unary, chain.transitions, chain.start, chain.end, chain.lengths)
    return chain_ops().viterbi_forward(*args)


def node_marginals(chain: Chain) -> Tensor:
    """(B, T, N) node marginals straight from the kernels, outside autograd."""
    logz, factors = _forward(chain)
    _torch.guard(chain, logz, "the log-partition")  # float64: the marginals may be representable
    ones = torch.ones_like(logz)
    return _backward(chain, logz, factors, ones, edges=False)[0]


def log_partition_state(B: int, T: int, N: int) -> list[tuple[int, ...]]:
    """Shapes of the float64 factors :func:`log_partition_forward` saves: alpha, p (B, T, N), m (B, T)."""
    return [(B, T, N), (B, T, N), (B, T)]


def log_partition_forward(chain: Chain) -> tuple[Tensor, tuple[Tensor, Tensor, Tensor]]:
    """logZ (B,) float64 and the factors the backward reuses (see ``chain/_ops.py``)."""
    return _forward(chain)


def log_partition_backward(chain: Chain, logz: Tensor, state, g: Tensor) -> tuple[Tensor, ...]:
    """Gradients w.r.t. unary, transitions, start and end (input dtype) for upstream g (B,) float64."""
    g_unary, g_trans = _backward(chain, logz, tuple(state), g)
    last = (chain.lengths - 1).clamp(min=0)[:, None, None].expand(-1, 1, chain.unary.shape[2])
    g_end = g_unary.gather(1, last).squeeze(1)
    return g_unary, g_trans.to(chain.unary.dtype), g_unary[:, 0].contiguous(), g_end


def kbest(chain: Chain, k: int) -> tuple[Tensor, Tensor]:
    """The k best scores (B, k) float64 and labelings (B, k, T) by the k-list recursion of
    ``_torch.py`` in double (there is no compiled k-best kernel)."""
    return _torch.kbest(chain.map(torch.Tensor.double), k)


def sample(chain: Chain, noise: Tensor) -> Tensor:
    """(n, B, T) labelings drawn with ``noise`` (n, B, T, N), the logarithms of Exp(1) draws, by
    the backward sampling of ``_torch.py`` in double (there is no compiled sampler)."""
    return _torch.sample(chain.map(torch.Tensor.double), noise)


def window_viterbi(scores: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
    """The best score (B,) float64 and labeling (B, T) of window scores by the DP of ``_torch.py``
    in double (there is no compiled window kernel)."""
    return _torch.window_viterbi(scores.double(), lengths)
