"""The public calls whose GPU launches and host syncs are held to a budget, as functions of the
sequence length T (test_launch_budget.py asserts the budgets; benchmarks/launches.py prints the
table). Each entry builds small inputs and returns a closure running one call (forward and
backward where the name says so, as ``torch.autograd.grad``: a training step that sets the
gradients to None, as ``optimizer.zero_grad()`` does, accumulates nothing)."""

from __future__ import annotations

from collections.abc import Callable

import torch

import structtorch as st

B, N, S = 3, 4, 3  # batch, labels, longest segment


def _chain(T: int, grad: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(T)
    u = torch.randn(B, T, N, generator=g, dtype=torch.float64, requires_grad=grad)
    a = torch.randn(N, N, generator=g, dtype=torch.float64, requires_grad=grad)
    lengths = torch.tensor([T, T - 1, 1])
    return u, a, lengths


def _backward(out: torch.Tensor, *inputs: torch.Tensor) -> None:
    torch.autograd.grad(out.sum(), inputs)


def _viterbi(T):
    u, a, lengths = _chain(T)
    return lambda: st.viterbi(u, a, lengths=lengths)


def _log_partition(T):
    u, a, lengths = _chain(T, grad=True)
    return lambda: _backward(st.log_partition(u, a, lengths=lengths), u, a)


def _marginals(T):
    u, a, lengths = _chain(T)
    return lambda: st.marginals(u, a, lengths=lengths)


def _marginals_backward(T):
    u, a, lengths = _chain(T, grad=True)
    weights = torch.randn(B, T, N, dtype=torch.float64, generator=torch.Generator().manual_seed(T))
    return lambda: _backward((st.marginals(u, a, lengths=lengths) * weights), u, a)


def _kbest(T):
    u, a, lengths = _chain(T)
    return lambda: st.kbest(u, a, 3, lengths=lengths)


def _sample(T):
    u, a, lengths = _chain(T)
    return lambda: st.sample(u, a, 2, lengths=lengths, generator=torch.Generator().manual_seed(0))


def _target(T):
    return torch.randint(0, N, (B, T), generator=torch.Generator().manual_seed(T + 1))


def _loss_augmented(rescaling):
    def make(T):
        u, a, lengths = _chain(T)
        target = _target(T)
        return lambda: st.loss_augmented(u, a, target, lengths=lengths, rescaling=rescaling)
    return make


def _window_viterbi(T):
    scores = torch.randn(B, T, N, N, N, dtype=torch.float64, generator=torch.Generator().manual_seed(T))
    lengths = torch.tensor([T, T - 1, 1])
    return lambda: st.window_viterbi(scores, lengths=lengths)


def _window_loss_augmented(T):
    scores = torch.randn(B, T, N, N, N, dtype=torch.float64, generator=torch.Generator().manual_seed(T))
    lengths = torch.tensor([T, T - 1, 1])
    target = _target(T)
    return lambda: st.window_loss_augmented(scores, target, lengths=lengths)


def _semimarkov(T, grad=False):
    g = torch.Generator().manual_seed(T)
    content = torch.randn(B, T, N, generator=g, dtype=torch.float64, requires_grad=grad)
    trans = torch.randn(N, N, generator=g, dtype=torch.float64, requires_grad=grad)
    return content, trans, torch.tensor([T, T - 1, 1])


def _semimarkov_viterbi(T):
    c, a, lengths = _semimarkov(T)
    return lambda: st.semimarkov_viterbi(c, a, max_len=S, lengths=lengths)


def _semimarkov_log_partition(T):
    c, a, lengths = _semimarkov(T, grad=True)
    return lambda: _backward(st.semimarkov_log_partition(c, a, max_len=S, lengths=lengths), c, a)


def _semimarkov_kbest(T):
    c, a, lengths = _semimarkov(T)
    return lambda: st.semimarkov_kbest(c, a, 3, max_len=S, lengths=lengths)


def _semimarkov_sample(T):
    c, a, lengths = _semimarkov(T)
    return lambda: st.semimarkov_sample(c, a, 2, max_len=S, lengths=lengths,
                                        generator=torch.Generator().manual_seed(0))


def _semimarkov_loss_augmented(T):
    c, a, lengths = _semimarkov(T)
    labels = torch.arange(T).div(2, rounding_mode="floor").remainder(N).expand(B, T)
    starts = (torch.arange(T) % 2 == 0).expand(B, T)
    return lambda: st.semimarkov_loss_augmented(c, a, labels, starts, max_len=S, lengths=lengths)


def _crf_nll(T):
    crf = st.LinearChainCRF(N).double()
    u, _, lengths = _chain(T, grad=True)
    mask = _word_mask(T, lengths)
    tags = _target(T)
    return lambda: _backward(crf(u, tags, mask), u, *crf.parameters())


def _crf_decode(T):
    crf = st.LinearChainCRF(N).double()
    u, _, lengths = _chain(T)
    mask = _word_mask(T, lengths)
    return lambda: crf.decode(u, mask)


def _word_mask(T: int, lengths: torch.Tensor) -> torch.Tensor:
    """A first-sub-token mask: [CLS] off, every third piece a continuation, padding beyond."""
    t = torch.arange(T)
    return (t > 0) & (t % 3 != 2) & (t < lengths[:, None])


def _viterbi_masked(T):
    u, a, lengths = _chain(T)
    mask = _word_mask(T, lengths)
    return lambda: st.viterbi(u, a, mask=mask)


def _hinge_slack(T):
    u, a, lengths = _chain(T, grad=True)
    loss = st.StructuredHingeLoss(rescaling="slack")
    target = _target(T)
    return lambda: _backward(loss(u, a, target, lengths=lengths), u, a)


CALLS: dict[str, Callable[[int], Callable[[], object]]] = {
    "viterbi": _viterbi,
    "viterbi (word mask)": _viterbi_masked,
    "log_partition fwd+bwd": _log_partition,
    "marginals": _marginals,
    "marginals fwd+bwd": _marginals_backward,
    "kbest": _kbest,
    "sample": _sample,
    "window_viterbi": _window_viterbi,
    "loss_augmented margin": _loss_augmented("margin"),
    "loss_augmented slack": _loss_augmented("slack"),
    "window_loss_augmented": _window_loss_augmented,
    "semimarkov_viterbi": _semimarkov_viterbi,
    "semimarkov_log_partition fwd+bwd": _semimarkov_log_partition,
    "semimarkov_kbest": _semimarkov_kbest,
    "semimarkov_sample": _semimarkov_sample,
    "semimarkov_loss_augmented": _semimarkov_loss_augmented,
    "LinearChainCRF NLL fwd+bwd": _crf_nll,
    "LinearChainCRF decode": _crf_decode,
    "StructuredHingeLoss slack fwd+bwd": _hinge_slack,
}
