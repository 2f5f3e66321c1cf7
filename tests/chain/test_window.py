"""Higher-order Viterbi (order l windows) against brute-force enumeration."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from brute import pad
from conftest import use_backend
from hypothesis import given
from hypothesis import strategies as st_

import structtorch as st


def brute_window(scores: np.ndarray, L: int, order: int):
    N = scores.shape[-1] if scores.ndim > 1 else 1
    best, arg = -np.inf, None
    for y in itertools.product(range(N), repeat=L):
        total = 0.0
        for t in range(L):
            window = tuple(y[t - order + k] if t - order + k >= 0 else 0 for k in range(order + 1))
            total += scores[(t,) + window]
        if total > best or (total == best and arg is not None and tuple(reversed(y)) < tuple(reversed(arg))):
            best, arg = total, y
    if L == 0:
        return 0.0, ()
    return best, arg


@given(
    order=st_.integers(0, 2),
    B=st_.integers(1, 3),
    T=st_.integers(0, 5),
    N=st_.integers(1, 3),
    integer=st_.booleans(),
    p_inf=st_.sampled_from([0.0, 0.3]),
    seed=st_.integers(0, 2**31),
    data=st_.data(),
)
def test_viterbi_window_matches_enumeration(backend, order, B, T, N, integer, p_inf, seed, data):
    rng = np.random.default_rng(seed)
    shape = (B, T) + (N,) * (order + 1)
    x = rng.integers(-2, 3, size=shape).astype(float) if integer else rng.normal(size=shape)
    x[rng.random(shape) < p_inf] = -np.inf
    lengths = torch.tensor(data.draw(st_.lists(st_.integers(0, T), min_size=B, max_size=B)))
    dtype = torch.float32 if integer and data.draw(st_.booleans()) else torch.float64  # float32: exact sums
    scores = torch.tensor(x, dtype=dtype, requires_grad=True)
    score, path = st.window_viterbi(scores, lengths=lengths)
    score_value = score.detach()
    assert score.shape == (B,) and path.shape == (B, T)
    finite = torch.isfinite(score)
    score[finite].sum().backward()
    for b in range(B):
        L = int(lengths[b])
        best, y = brute_window(x[b], L, order)
        if best == -np.inf:
            assert score_value[b] == float("-inf") and (path[b] == -1).all()
            assert (scores.grad[b] == 0).all()
            continue
        assert np.isclose(score_value[b].item(), best, atol=1e-9)
        assert path[b].tolist() == pad(y, T)
        indicator = np.zeros(x.shape[1:])
        for t in range(L):
            indicator[(t,) + tuple(y[t - order + k] if t - order + k >= 0 else 0 for k in range(order + 1))] += 1
        np.testing.assert_array_equal(scores.grad[b].double().numpy(), indicator)
    assert score.dtype == dtype
    # window_score of random labelings against the explicit sum (-inf where a window is forbidden)
    labels = torch.tensor(rng.integers(0, N, size=(B, T)))
    got = st.window_score(scores.detach(), labels, lengths)
    for b in range(B):
        L, y = int(lengths[b]), labels[b].tolist()
        windows = [(t,) + tuple(y[t - order + k] if t - order + k >= 0 else 0 for k in range(order + 1))
                   for t in range(L)]
        assert np.isclose(got[b].item(), sum(x[b][w] for w in windows), atol=1e-9, equal_nan=False) or (
            got[b].item() == -np.inf and any(x[b][w] == -np.inf for w in windows))


def test_order_one_window_equals_viterbi(backend):
    torch.manual_seed(0)
    u = torch.randn(4, 7, 3, dtype=torch.float64)
    A = torch.randn(3, 3, dtype=torch.float64)
    lengths = torch.tensor([7, 5, 1, 0])
    # g_0(y_{-1}=0, y_0) = u_0(y_0); g_t(i, j) = A[i, j] + u_t(j)
    g = A.expand(4, 7, 3, 3) + u.unsqueeze(2)
    g = torch.cat([u[:, :1].unsqueeze(2).expand(4, 1, 3, 3), g[:, 1:]], dim=1)
    s1, p1 = st.viterbi(u, A, lengths=lengths)
    s2, p2 = st.window_viterbi(g, lengths=lengths)
    assert torch.equal(p1, p2)
    torch.testing.assert_close(s1, s2)


@pytest.mark.parametrize("order", [0, 1, 2])
def test_window_viterbi_equals_the_torch_backend(backend, order):
    """Gaussian scores with -inf entries, an empty and an infeasible row: the same score (the DP's
    own sum), path and gradient, bit for bit, and the same under vmap."""
    g = torch.Generator().manual_seed(order)
    x = torch.randn((3, 4, 5) + (3,) * (order + 1), generator=g, dtype=torch.float64)
    x[torch.rand(x.shape, generator=g) < 0.2] = float("-inf")
    x[2, :, 1] = float("-inf")  # rows 8-11 below: no window at position 1
    x = x.reshape((12, 5) + (3,) * (order + 1))
    lengths = torch.tensor([5, 3, 0, 1] * 3)
    results = []
    for name in (backend, "torch"):
        with use_backend(name):
            scores = x.clone().requires_grad_()
            best, path = st.window_viterbi(scores, lengths=lengths)
            (grad,) = torch.autograd.grad(torch.where(best > float("-inf"), best, 0.0).sum(), scores)
            with st.set_validation(False):  # the host-side overflow check reads values: not under vmap
                batched = torch.func.vmap(lambda s: st.window_viterbi(s, lengths=lengths[:4]))(x.view(3, 4, *x.shape[1:]))
            results.append((best.detach(), path, grad, batched[0].reshape(12), batched[1].reshape(12, 5)))
    for got, want in zip(*results, strict=True):
        assert torch.equal(got, want)
    assert results[0][0][2] == 0 and results[0][0][8] == float("-inf") and (results[0][1][8] == -1).all()


def test_ignored_prestart_axes_do_not_matter(backend):
    """Entries with a nonzero pre-start label are never read."""
    g = torch.zeros(1, 3, 2, 2, 2)
    g[0, 0, 1] = -1000.0  # y_{-2} = 1: ignored
    g[0, 1, 1] = 5000.0  # y_{-1} = 1 at t = 1: ignored
    g[0, 2, 1, 1, 1] = 1.0
    score, path = st.window_viterbi(g)
    assert path.tolist() == [[1, 1, 1]] and score.item() == 1.0


@pytest.mark.parametrize(
    "scores, message",
    [
        (torch.zeros(2, 3), r"scores must have shape \(B, T\) \+ \(N,\) \* \(l \+ 1\), got \(2, 3\)"),
        (torch.zeros(2, 3, 4, 5), r"N >= 1 on every label axis, got \(2, 3, 4, 5\)"),
        (torch.zeros(2, 3, 4, dtype=torch.long), "scores must be float32 or float64"),
    ],
)
def test_viterbi_window_bad_input(scores, message):
    with pytest.raises((ValueError, TypeError), match=message):
        st.window_viterbi(scores)


def test_viterbi_window_bad_lengths():
    with pytest.raises(ValueError, match=r"lengths must lie in \[0, T\] = \[0, 3\]"):
        st.window_viterbi(torch.zeros(2, 3, 2, 2), lengths=torch.tensor([1, 4]))


@pytest.mark.parametrize("order", [1, 2, 3])
def test_window_ties_follow_viterbi_rule(backend, order):
    """All-tied windows except a penalty on the all-zero tail: the answer is reverse-lex smallest."""
    N, T = 2, order + 2
    g = torch.zeros((1, T) + (N,) * (order + 1))
    g[(0, T - 1) + (0,) * (order + 1)] = -1.0  # the window of zeros at the end is worse
    score, path = st.window_viterbi(g)
    rows = [(y, sum(float(g[(0, t) + tuple(y[t - order + k] if t - order + k >= 0 else 0 for k in range(order + 1))])
                    for t in range(T))) for y in itertools.product(range(N), repeat=T)]
    best = max(s for _, s in rows)
    expected = min((y for y, s in rows if s == best), key=lambda y: tuple(reversed(y)))
    assert path[0].tolist() == list(expected) and score.item() == best
