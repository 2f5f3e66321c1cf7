"""window_log_partition and window_marginals (issue 54, item 4): chains of order l = 0, 1, 2
against enumeration of every labeling (their window scores), with -inf windows, infeasible and
empty rows; the marginals are the gradient of the log-partition and sum to one per position; a
higher-order CRF trains by likelihood; torch.func transforms."""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as hst

import structtorch as st


def _brute(scores: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """(B,) log-partition by enumeration of window_score over every labeling of each length."""
    B, T, N = scores.shape[:3]
    out = []
    for b in range(B):
        L = int(lengths[b])
        paths = torch.zeros(max(N**L, 1), T, dtype=torch.long)
        if L:
            paths[:, :L] = torch.tensor(list(itertools.product(range(N), repeat=L)))
        rows = scores[b:b + 1].expand(len(paths), *scores.shape[1:])
        values = st.window_score(rows, paths, lengths[b:b + 1].expand(len(paths)))
        if not (values > float("-inf")).any():  # infeasible: no graph (logsumexp's gradient is NaN there)
            out.append(torch.tensor(float("-inf"), dtype=scores.dtype))
        else:
            out.append(torch.logsumexp(values, 0) if L else values.sum() * 0)
    return torch.stack(out)


@settings(max_examples=40, deadline=None, database=None)
@given(hst.integers(0, 2), hst.integers(1, 3), hst.integers(1, 4), hst.integers(1, 3), hst.integers(0, 2**16),
       hst.sampled_from([0.0, 0.2, 0.6]))
def test_window_log_partition_and_marginals_equal_enumeration(order, B, T, N, seed, forbid):
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn((B, T) + (N,) * (order + 1), generator=g, dtype=torch.float64)
    scores[torch.rand(scores.shape, generator=g) < forbid] = float("-inf")
    lengths = torch.randint(0, T + 1, (B,), generator=g)
    leaf = scores.clone().requires_grad_()
    want = _brute(leaf, lengths)
    got = st.window_log_partition(scores, lengths=lengths)
    torch.testing.assert_close(got, want.detach(), rtol=1e-10, atol=1e-10)
    finite = want > float("-inf")
    total = torch.where(finite, want, 0.0).sum()
    want_marginals = torch.autograd.grad(total, leaf)[0] if total.requires_grad else torch.zeros_like(scores)
    marginals = st.window_marginals(scores, lengths=lengths)
    torch.testing.assert_close(marginals, want_marginals, rtol=1e-9, atol=1e-10)
    inside = (torch.arange(T) < lengths[:, None]) & finite[:, None]
    torch.testing.assert_close(marginals.flatten(2).sum(-1), inside.double(), rtol=0, atol=1e-9)


def test_the_gradient_of_the_log_partition_is_the_marginals_and_a_higher_order_crf_trains():
    g = torch.Generator().manual_seed(0)
    scores = torch.randn(3, 6, 3, 3, 3, generator=g, dtype=torch.float64, requires_grad=True)
    lengths = torch.tensor([6, 4, 0])
    (grad,) = torch.autograd.grad(st.window_log_partition(scores, lengths=lengths).sum(), scores)
    torch.testing.assert_close(grad, st.window_marginals(scores, lengths=lengths))
    torch.autograd.gradcheck(lambda s: st.window_marginals(s, lengths=lengths).sum((2, 3, 4)), (scores,))
    y = torch.randint(0, 3, (3, 6), generator=g)
    weights = torch.zeros(3, 3, 3, dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.SGD([weights], lr=0.5)
    losses = []
    for _ in range(30):  # the likelihood of a second-order CRF, by window_score - window_log_partition
        s = scores.detach() + weights
        nll = st.window_log_partition(s, lengths=lengths) - st.window_score(s, y, lengths=lengths)
        optimizer.zero_grad()
        nll.sum().backward()
        optimizer.step()
        losses.append(nll.sum().item())
    assert losses[-1] < losses[0] - 0.5


def test_window_marginals_under_torch_func_and_bad_input():
    g = torch.Generator().manual_seed(1)
    many = torch.randn(4, 2, 5, 3, 3, generator=g, dtype=torch.float64)
    got = torch.func.vmap(st.window_marginals)(many)
    torch.testing.assert_close(got, torch.stack([st.window_marginals(m) for m in many]))
    hess = torch.func.hessian(lambda s: st.window_log_partition(s).sum())(many[0])
    assert hess.shape == (2, 5, 3, 3) * 2 and torch.isfinite(hess).all()
    with pytest.raises(ValueError, match="scores"):
        st.window_log_partition(torch.randn(2, 4, 3, 2))
    with pytest.raises(ValueError, match="lengths"):
        st.window_marginals(torch.randn(2, 4, 3, 3), lengths=torch.tensor([5, 1]))


def test_every_window_function_takes_a_mask():
    """Issue 54, item 3: mask= on the window functions: equal to them over the compacted rows, a
    window holding consecutive positions of the mask, results back at the mask's positions."""
    g = torch.Generator().manual_seed(2)
    scores = torch.randn(3, 6, 3, 3, 3, generator=g, dtype=torch.float64)
    mask = torch.tensor([[1, 0, 1, 1, 0, 1], [0, 0, 1, 1, 1, 1], [0] * 6], dtype=torch.bool)
    order = torch.sort((~mask).int(), dim=1, stable=True).indices
    packed = scores.gather(1, order.view(3, 6, 1, 1, 1).expand_as(scores))
    lengths = mask.sum(1)

    def back(x, fill):
        out = torch.full_like(x, fill)
        for b in range(3):
            out[b, mask[b]] = x[b, :int(lengths[b])]
        return out

    best, path = st.window_viterbi(scores, mask=mask)
    ref_best, ref_path = st.window_viterbi(packed, lengths=lengths)
    torch.testing.assert_close(best, ref_best)
    assert torch.equal(path, back(ref_path, -1))
    torch.testing.assert_close(st.window_score(scores, path.clamp(min=0), mask=mask), ref_best)
    torch.testing.assert_close(st.window_log_partition(scores, mask=mask),
                               st.window_log_partition(packed, lengths=lengths))
    torch.testing.assert_close(st.window_marginals(scores, mask=mask),
                               back(st.window_marginals(packed, lengths=lengths), 0.0))
    target = path.clamp(min=0)
    value, found, _ = st.window_loss_augmented(scores, target, mask=mask)
    ref_value, ref_found, _ = st.window_loss_augmented(packed, ref_path.clamp(min=0), lengths=lengths)
    torch.testing.assert_close(value, ref_value)
    assert torch.equal(found, back(ref_found, -1))
    with pytest.raises(ValueError, match="mask or lengths"):
        st.window_viterbi(scores, mask=mask, lengths=lengths)
