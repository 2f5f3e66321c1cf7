"""Glue between the compiled CPU kernels (``csrc/chain.cpp``) and autograd.

The kernels run the two sequential recursions (alpha forward, beta backward) in double, with the
node and edge marginals (summed per sequence for shared transitions) and, for the CRF loss, the
labeling's score and indicators; the row-normalized exponentials of the transitions are computed
here. k-best lists,
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


def _forward(chain: Chain,
             labels: Tensor | None = None) -> tuple[Tensor, tuple[Tensor, Tensor, Tensor], Tensor]:
    """logZ (B,) in double, the forward factors (alpha, p, m) the backward reuses, and with
    ``labels`` the CRF loss logZ - score(labels) (B,) (+inf where logZ = -inf; else empty)."""
    r, f = row_normalize(chain.transitions)
    gold = chain.lengths.new_empty(0) if labels is None else labels.contiguous()
    logz, alpha, p, m, nll = chain_ops().logz_forward(
        chain.unary, chain.transitions, r, f, chain.start, chain.end, chain.lengths, gold
    )
    return logz, (alpha, p, m), nll


def _backward(chain: Chain, logz: Tensor, factors: tuple[Tensor, Tensor, Tensor], g: Tensor,
              edges: bool = True, labels: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
    """(grad unary, grad transitions in double or None) for upstream gradient g (B,) in double: of
    logZ, or with ``labels`` of logZ - score(labels). The kernel adds the edge marginals up per
    sequence for shared transitions (summed over the batch here)."""
    alpha, p, m = factors
    r, f = row_normalize(chain.transitions)  # recomputed rather than kept alive between passes
    ft = f.transpose(-1, -2).contiguous()
    gold = chain.lengths.new_empty(0) if labels is None else labels.contiguous()
    g_unary, g_trans = chain_ops().logz_backward(
        g.contiguous(), chain.unary, chain.transitions, r, f, ft, chain.end, chain.lengths, logz, alpha, p, m,
        gold, edges
    )
    if not edges:
        return g_unary, None
    return g_unary, g_trans.sum(0) if chain.shared else g_trans


@torch.no_grad()
def viterbi(chain: Chain) -> tuple[Tensor, Tensor]:
    """The best score (B,) float64 and labeling (B, T) from the compiled Viterbi (-1 beyond each
    length and on infeasible rows)."""
    args = (chain.unary, chain.transitions, chain.start, chain.end, chain.lengths)
    return chain_ops().viterbi_forward(*args)


def node_marginals(chain: Chain) -> Tensor:
    """(B, T, N) node marginals straight from the kernels, outside autograd."""
    logz, factors, _ = _forward(chain)
    _torch.guard(chain, logz, "the log-partition")  # float64: the marginals may be representable
    ones = torch.ones_like(logz)
    return _backward(chain, logz, factors, ones, edges=False)[0]


def log_partition_state(B: int, T: int, N: int) -> list[tuple[int, ...]]:
    """Shapes of the float64 factors :func:`log_partition_forward` saves: alpha, p (B, T, N), m (B, T)."""
    return [(B, T, N), (B, T, N), (B, T)]


def log_partition_forward(chain: Chain) -> tuple[Tensor, tuple[Tensor, Tensor, Tensor]]:
    """logZ (B,) float64 and the factors the backward reuses (see ``chain/_ops.py``)."""
    logz, factors, _ = _forward(chain)
    return logz, factors


def _gradients(chain: Chain, logz: Tensor, state, g: Tensor, labels: Tensor | None) -> tuple[Tensor, ...]:
    """Gradients w.r.t. unary, transitions, start and end (input dtype): start's is the first
    position's unary gradient, end's the last's (zero on empty rows)."""
    g_unary, g_trans = _backward(chain, logz, tuple(state), g, labels=labels)
    last = (chain.lengths - 1).clamp(min=0)[:, None, None].expand(-1, 1, chain.unary.shape[2])
    g_end = g_unary.gather(1, last).squeeze(1)
    return g_unary, g_trans.to(chain.unary.dtype), g_unary[:, 0].contiguous(), g_end


def log_partition_backward(chain: Chain, logz: Tensor, state, g: Tensor) -> tuple[Tensor, ...]:
    """Gradients w.r.t. unary, transitions, start and end (input dtype) for upstream g (B,) float64."""
    return _gradients(chain, logz, state, g, None)


def nll_forward(chain: Chain, labels: Tensor) -> tuple[Tensor, Tensor, tuple[Tensor, Tensor, Tensor]]:
    """The CRF loss logZ - score(labels) (B,) float64 (+inf where logZ = -inf), logZ and the factors
    :func:`nll_backward` reuses, in one kernel call."""
    logz, factors, nll = _forward(chain, labels)
    return nll, logz, factors


def nll_backward(chain: Chain, labels: Tensor, logz: Tensor, state, g: Tensor) -> tuple[Tensor, ...]:
    """Gradients of logZ - score(labels) w.r.t. unary, transitions, start and end (input dtype) for
    upstream g (B,) float64: the marginals minus the labeling's indicators, in one kernel call."""
    return _gradients(chain, logz, state, g, labels)


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
