"""Expectations of a structure's indicator features, shared by every structure: the marginals as
the gradients of the log-partition, the entropy logZ - <marginals, potentials>, and log-probabilities
score - logZ taken in the accumulation dtype."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from ._checks import cast_checked
from ._library import transformed
from ._numerics import NEG_INF, accumulate

__all__ = ["logz_and_grads", "entropy", "log_prob"]


def _node(x: Tensor, create_graph: bool) -> Tensor:
    """A distinct autograd node for ``x``: a view connected to ``x`` when the graph is kept and ``x``
    requires grad, else a fresh leaf."""
    if create_graph and x.requires_grad:
        return x.view(x.shape)
    return x.detach().clone().requires_grad_()


def logz_and_grads(fn: Callable[..., Tensor], parts: Sequence[Tensor]) -> tuple[Tensor, list[Tensor]]:
    """``fn(*parts)`` (a (B,) log-partition) and its gradients w.r.t. every part (the marginals),
    differentiable w.r.t. the parts when grad mode is on and one of them requires grad; infeasible
    rows (-inf) get zero gradients. Works under ``torch.inference_mode`` too; refused under
    ``torch.export`` (which cannot trace a gradient taken inside the call)."""
    if transformed():  # torch.func: autograd.grad and requires_grad_ are refused inside a transform
        return _func_logz_and_grads(fn, parts)
    if torch.compiler.is_exporting():
        raise NotImplementedError(
            "torch.export cannot trace the gradient of a log-partition taken inside the call (a "
            "distribution's marginals, entropy or cross-entropy): export the log-partition, the "
            "decoder, or LinearChainCRF.marginals (the chain's node marginals, an operator)")
    create_graph = torch.is_grad_enabled() and any(p.requires_grad for p in parts)
    context = torch.enable_grad() if create_graph else torch.inference_mode(False)
    with context, torch.enable_grad():
        nodes = [_node(p, create_graph) for p in parts]
        logz = fn(*nodes)
        total = torch.where(torch.isfinite(logz.detach()), logz, 0.0).sum()
        grads = torch.autograd.grad(total, nodes, create_graph=create_graph, allow_unused=True)
    grads = [torch.zeros_like(n) if g is None else g for g, n in zip(grads, nodes, strict=True)]
    if not create_graph:
        logz, grads = logz.detach(), [g.detach() for g in grads]
    return logz, grads


def _func_logz_and_grads(fn: Callable[..., Tensor], parts: Sequence[Tensor]) -> tuple[Tensor, list[Tensor]]:
    """:func:`logz_and_grads` by ``torch.func.grad`` (under a transform), differentiable by the
    enclosing transforms."""
    def total(*nodes: Tensor) -> tuple[Tensor, Tensor]:
        logz = fn(*nodes)
        return torch.where(logz > NEG_INF, logz, 0.0).sum(), logz

    grads, logz = torch.func.grad(total, argnums=tuple(range(len(parts))), has_aux=True)(*parts)
    return logz, list(grads)


def entropy(logz: Tensor, grads: Sequence[Tensor], parts: Sequence[Tensor]) -> Tensor:
    """(B,) logZ - <marginals, potentials> in the accumulation dtype, with -inf potentials (marginal
    0) left out, and 0 on rows without a feasible structure: the cross-entropy of p with itself."""
    return cross_entropy(logz, grads, logz, parts)


def cross_entropy(logz_p: Tensor, grads_p: Sequence[Tensor], logz_q: Tensor,
                  parts_q: Sequence[Tensor]) -> Tensor:
    """(B,) -sum_y p(y) log q(y) = logZ_q - <marginals of p, potentials of q> in the accumulation
    dtype: terms where p's marginal is 0 left out (never 0 * -inf), +inf where p puts mass on a
    part that q forbids (or q has no structure), 0 on rows where p has none."""
    inner = logz_q.new_zeros(logz_q.shape)
    forbidden = torch.zeros(logz_q.shape, dtype=torch.bool, device=logz_q.device)
    for mu, theta in zip(grads_p, parts_q, strict=True):
        mu, theta = accumulate(mu), accumulate(theta)
        weighed = mu > 0
        ruled_out = theta == NEG_INF
        inner = inner + (mu * torch.where(weighed & ~ruled_out, theta, 0.0)).flatten(1).sum(1)
        forbidden = forbidden | (weighed & ruled_out).flatten(1).any(1)
    infinite = forbidden | (logz_q == NEG_INF)
    value = torch.where(infinite, float("inf"), logz_q - torch.where(infinite, 0.0, inner))
    return torch.where(logz_p > NEG_INF, value, 0.0)


def log_prob(score: Tensor, logz: Tensor, dtype: torch.dtype, potentials: str) -> Tensor:
    """(B,) score - logZ, both in the accumulation dtype, cast once to ``dtype``: -inf on infeasible
    rows (logZ = -inf) and where the score is -inf. ``potentials`` names the inputs in overflow
    messages."""
    out = torch.where(logz == NEG_INF, NEG_INF, score - logz.to(score.dtype))
    return cast_checked(out, dtype, "the log-probability", potentials)
