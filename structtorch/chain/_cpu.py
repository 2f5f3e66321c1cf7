"""Glue between the compiled CPU kernels (``csrc/chain.cpp``) and autograd.

The kernels run the two sequential recursions (alpha forward, beta backward) in double, with the
node and edge marginals (summed per sequence for shared transitions) and, for the CRF loss, the
labeling's score and indicators; the row-normalized exponentials of the transitions and the
gradients' assembly are computed in C++ too (``csrc/chain.cpp``), called through the Python
bindings (:func:`structtorch._extension.fast_ops`), so that a small call makes one call here.
k-best lists run a compiled k-list Viterbi; sampling and order-l windows run the PyTorch recursions
of ``_torch.py`` in double.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .._extension import fast_ops
from . import _torch
from .layout import Chain


def _forward(chain: Chain,
             labels: Tensor | None = None) -> tuple[Tensor, tuple[Tensor, Tensor, Tensor], Tensor]:
    """logZ (B,) in double, the forward factors (alpha, p, m) the backward reuses, and with
    ``labels`` the CRF loss logZ - score(labels) (B,) (+inf where logZ = -inf; else empty)."""
    logz, alpha, p, m, nll = fast_ops().logz_forward(
        chain.unary, chain.transitions, chain.start, chain.end, chain.lengths, labels
    )
    return logz, (alpha, p, m), nll


def _backward(chain: Chain, logz: Tensor, factors: tuple[Tensor, Tensor, Tensor], g: Tensor,
              edges: bool = True, labels: Tensor | None = None) -> list[Tensor]:
    """Gradients (input dtype) for upstream gradient g (B,) in double, of logZ or with ``labels``
    of logZ - score(labels): w.r.t. unary, transitions, start and end (start's is the first
    position's unary gradient, end's the last's, zero on empty rows; the kernel adds the edge
    marginals up per sequence for shared transitions, summed over the batch), or with ``edges``
    False w.r.t. unary alone."""
    return fast_ops().logz_backward(g, chain.unary, chain.transitions, chain.end, chain.lengths, logz,
                                    *factors, labels, edges)


def viterbi(chain: Chain) -> tuple[Tensor, Tensor]:
    """The best score (B,) float64 and labeling (B, T) from the compiled Viterbi (-1 beyond each
    length and on infeasible rows); it records no graph."""
    return fast_ops().viterbi_forward(chain.unary, chain.transitions, chain.start, chain.end, chain.lengths)


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


def log_partition_backward(chain: Chain, logz: Tensor, state, g: Tensor) -> tuple[Tensor, ...]:
    """Gradients w.r.t. unary, transitions, start and end (input dtype) for upstream g (B,) float64."""
    return tuple(_backward(chain, logz, tuple(state), g))


def nll_forward(chain: Chain, labels: Tensor) -> tuple[Tensor, Tensor, tuple[Tensor, Tensor, Tensor]]:
    """The CRF loss logZ - score(labels) (B,) float64 (+inf where logZ = -inf), logZ and the factors
    :func:`nll_backward` reuses, in one kernel call."""
    logz, factors, nll = _forward(chain, labels)
    return nll, logz, factors


def nll_backward(chain: Chain, labels: Tensor, logz: Tensor, state, g: Tensor) -> tuple[Tensor, ...]:
    """Gradients of logZ - score(labels) w.r.t. unary, transitions, start and end (input dtype) for
    upstream g (B,) float64: the marginals minus the labeling's indicators, in one kernel call."""
    return tuple(_backward(chain, logz, tuple(state), g, labels=labels))


def kbest(chain: Chain, k: int) -> tuple[Tensor, Tensor]:
    """The k best scores (B, k) float64 and labelings (B, k, T) by the compiled k-list Viterbi
    (the recursion of ``_torch.py``, bit for bit: the same scores, order and ties)."""
    return fast_ops().kbest_forward(chain.unary, chain.transitions, chain.start, chain.end, chain.lengths, k)


def sample(chain: Chain, noise: Tensor) -> Tensor:
    """(n, B, T) labelings drawn with ``noise`` (n, B, T, N), the logarithms of Exp(1) draws, by
    the backward sampling of ``_torch.py`` in double (there is no compiled sampler)."""
    return _torch.sample(chain.map(torch.Tensor.double), noise)


def window_viterbi(scores: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
    """The best score (B,) float64 and labeling (B, T) of window scores by the DP of ``_torch.py``
    in double (there is no compiled window kernel)."""
    return _torch.window_viterbi(scores.double(), lengths)
