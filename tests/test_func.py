"""torch.func on the differentiable dynamic programs (issue 54, item 2): ``vmap``, ``jacrev``,
``jacfwd`` and ``hessian`` of the log-partitions, marginals, CRF loss, hinges, loss-augmented
values and the distributions' entropies, against loops over the mapped dimension and central
finite differences in float64. Under a transform the autograd Functions run their PyTorch
references (``structtorch._library.transformed``)."""

from __future__ import annotations

import pytest
import torch
from torch.func import hessian, jacfwd, jacrev, vmap

import structtorch as st

B, T, N = 2, 4, 3
G = torch.Generator().manual_seed(0)
A = torch.randn(N, N, generator=G, dtype=torch.float64)
A[0, 2] = float("-inf")  # a forbidden transition
Y = torch.randint(0, N, (B, T), generator=G)
L = torch.tensor([4, 2])
COST = torch.rand(B, T, N, generator=G, dtype=torch.float64)

FUNCTIONS = {
    "log_partition": lambda u: st.log_partition(u, A, lengths=L),
    "marginals": lambda u: st.marginals(u, A, lengths=L),
    "chain_nll": lambda u: st.train.chain_nll(u, A, Y, lengths=L, reduction="none"),
    "margin hinge": lambda u: st.structured_hinge(u, A, Y, lengths=L, reduction="none"),
    "slack hinge": lambda u: st.structured_hinge(u, A, Y, lengths=L, rescaling="slack", reduction="none"),
    "loss_augmented(cost=)": lambda u: st.loss_augmented(u, A, Y, lengths=L, cost=COST)[0],
    "semimarkov_log_partition": lambda u: st.semimarkov_log_partition(u, A, max_len=2, lengths=L),
    "ChainDistribution.entropy": lambda u: st.ChainDistribution(u, A, lengths=L).entropy,
    "SemiMarkovDistribution.entropy": lambda u: st.SemiMarkovDistribution(u, A, max_len=2, lengths=L).entropy,
}
SMOOTH = {"log_partition", "marginals", "chain_nll", "semimarkov_log_partition", "ChainDistribution.entropy",
          "SemiMarkovDistribution.entropy"}  # the others are piecewise linear: a zero Hessian


def _unary(seed: int) -> torch.Tensor:
    return torch.randn(B, T, N, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _finite_jacobian(f, u: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """d f(u) / d u by central differences: f's shape + u's shape."""
    columns = []
    for i in range(u.numel()):
        step = torch.zeros_like(u).view(-1)
        step[i] = eps
        step = step.view_as(u)
        columns.append((f(u + step) - f(u - step)) / (2 * eps))
    return torch.stack(columns, -1).reshape(*f(u).shape, *u.shape)


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_vmap_equals_a_loop(name):
    f = FUNCTIONS[name]
    us = torch.stack([_unary(s) for s in range(3)])
    torch.testing.assert_close(vmap(f)(us), torch.stack([f(u) for u in us]), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_jacrev_and_jacfwd_equal_finite_differences(name):
    f = FUNCTIONS[name]
    u = _unary(5)
    want = _finite_jacobian(f, u)
    torch.testing.assert_close(jacrev(f)(u), want, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(jacfwd(f)(u), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_hessian_equals_finite_differences_of_the_gradient(name):
    def total(u):
        return FUNCTIONS[name](u).sum()

    u = _unary(7)
    got = hessian(total)(u)
    want = _finite_jacobian(jacrev(total), u)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    if name not in SMOOTH:
        assert got.abs().max() == 0
    else:
        assert got.abs().max() > 0
        square = got.reshape(u.numel(), u.numel())
        torch.testing.assert_close(square, square.T)  # symmetric


def test_per_example_marginals_under_vmap_of_jacrev_match_the_marginals():
    """The gradient of log Z is the marginals, under any composition of transforms."""
    us = torch.stack([_unary(s) for s in range(3)])
    grads = vmap(jacrev(lambda u: st.log_partition(u, A, lengths=L).sum()))(us)
    torch.testing.assert_close(grads, torch.stack([st.marginals(u, A, lengths=L) for u in us]), rtol=0, atol=1e-10)


def test_transforms_on_the_triton_backend_check_values_without_the_counting_kernel():
    """Under a transform the value checks assert with PyTorch ops: the Triton counting kernel cannot
    read functorch's wrapped tensors (it raised "Cannot access storage of TensorWrapper")."""
    from conftest import use_backend

    g = torch.Generator().manual_seed(0)
    unary, trans = torch.randn(2, 4, 3, generator=g, dtype=torch.float64), torch.randn(3, 3, generator=g,
                                                                                       dtype=torch.float64)
    with use_backend("triton"):
        grad = torch.func.grad(lambda u: st.log_partition(u, trans).sum())(unary)
        torch.testing.assert_close(grad, st.marginals(unary, trans))
        bad = unary.clone()
        bad[0, 1, 2] = float("nan")
        with pytest.raises((ValueError, RuntimeError), match="unary"):
            torch.func.grad(lambda u: st.log_partition(u, trans).sum())(bad)
