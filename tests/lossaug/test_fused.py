"""The fused chain search (the unweighted Hamming loss, h the identity) against brute force on every
backend, and its gradients (position weights and costs too), ties and errors on the "triton"
backend, where the kernels run the whole search (``lossaug/_triton.py``: the folded Viterbi of chains and of order-l chains, the table and its
choice, the indicators)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from brute import enumerate_row, instances
from conftest import INTERPRETED_EXAMPLES, use_backend
from hypothesis import assume, given, settings
from hypothesis import strategies as st_
from test_hamming import brute_force, brute_window, feasible_target, window_instance

import structtorch as st

CASES = [("margin", "auto"), ("margin", "hamming"), ("slack", "auto")]


@given(inst=instances(max_t=5, max_n=3), case=st_.sampled_from(CASES), seed=st_.integers(0, 2**31))
def test_identity_h_matches_enumeration(backend, inst, case, seed):
    rescaling, algorithm = case
    target = feasible_target(inst, np.random.default_rng(seed))
    assume(target is not None)
    value, path, hamming = st.loss_augmented(*inst.args(), target, rescaling=rescaling, algorithm=algorithm,
                                             **inst.kwargs)
    assert value.dtype == inst.unary.dtype and hamming.dtype == torch.int64
    for b in range(inst.unary.shape[0]):
        L = int(inst.lengths[b])
        rows = enumerate_row(inst, b)
        expected = brute_force(rows, target[b].tolist(), L, lambda k: k, rescaling)
        assert np.isclose(value[b].item(), expected, atol=inst.tol, rtol=inst.tol)
        y = tuple(path[b, :L].tolist())
        assert (path[b, L:] == -1).all()
        k = sum(y[t] != target[b, t].item() for t in range(L))
        assert hamming[b].item() == k
        s, gold = dict(rows)[y], dict(rows)[tuple(target[b, :L].tolist())]
        attained = s + k - gold if rescaling == "margin" else k * (1 + s - gold)
        assert np.isclose(attained, expected, atol=inst.tol, rtol=inst.tol)


def _run(inst, target, backend, rescaling, algorithm, weight):
    """(value, path, count, gradients of sum(weight * value) w.r.t. unary and transitions)."""
    u = inst.unary.clone().requires_grad_()
    a = inst.transitions.clone().requires_grad_()
    with use_backend(backend):
        value, path, count = st.loss_augmented(u, a, target, rescaling=rescaling, algorithm=algorithm,
                                               **inst.kwargs)
        grads = torch.autograd.grad((value * weight.to(value.dtype)).sum(), (u, a), allow_unused=True)
    grads = tuple(torch.zeros_like(x) if g is None else g for g, x in zip(grads, (u, a), strict=True))
    return value.detach(), path, count, *grads


@given(inst=instances(max_t=5, max_n=3), case=st_.sampled_from(CASES), seed=st_.integers(0, 2**31))
def test_triton_matches_torch_with_gradients(inst, case, seed):
    """The kernels' value, labeling, count and gradients (the indicators, scaled) equal the PyTorch
    search's, whose value is recomputed along the labeling and differentiated by autograd."""
    rescaling, algorithm = case
    target = feasible_target(inst, np.random.default_rng(seed))
    assume(target is not None)
    weight = torch.arange(1.0, inst.unary.shape[0] + 1)
    ref = _run(inst, target, "torch", rescaling, algorithm, weight)
    out = _run(inst, target, "triton", rescaling, algorithm, weight)
    torch.testing.assert_close(out[0], ref[0], atol=inst.tol, rtol=inst.tol)
    assert torch.equal(out[1], ref[1]) and torch.equal(out[2], ref[2])
    for g, r in zip(out[3:], ref[3:], strict=True):
        torch.testing.assert_close(g, r, atol=inst.tol, rtol=inst.tol)


def _loss_kwargs(kind: str, B: int, T: int, N: int, rng, bounded: bool) -> dict:
    """Loss arguments of one kind, non-negative integers (the table takes them); ``max_count`` from
    the shapes when ``bounded``."""
    draw = {"weights": (B, T), "cost": (B, T, N), "pair_cost": (B, max(T - 1, 0), N, N)}
    kwargs = {name: torch.tensor(rng.integers(0, 3, size=shape), dtype=torch.float64 if name != "weights"
                                 else torch.long) for name, shape in draw.items() if name in kind}
    if "cost" in kind and "pair" not in kind and rng.random() < 0.5:
        kwargs["cost"] = kwargs["cost"].long()  # integer costs are costs too
    return {**kwargs, "max_count": 4 * T} if bounded else kwargs


@settings(max_examples=INTERPRETED_EXAMPLES)
@given(inst=instances(max_t=5, max_n=3), rescaling=st_.sampled_from(["margin", "slack"]),
       h=st_.sampled_from([None, "sin"]), kind=st_.sampled_from(["weights", "cost", "pair_cost", "cost+pair_cost"]),
       bounded=st_.booleans(), seed=st_.integers(0, 2**31))
def test_triton_weights_and_costs_match_torch_with_gradients(inst, rescaling, h, kind, bounded, seed):
    """Position weights, per-label costs and pair costs run whole in the kernels (the folded Viterbi
    for margin rescaling with h the identity, else the table): value, labeling, count and the
    gradients equal the PyTorch search's (itself checked against enumeration in test_hamming.py),
    with the table sized by ``max_count`` or by the values."""
    rng = np.random.default_rng(seed)
    target = feasible_target(inst, rng)
    assume(target is not None)
    B, T, N = inst.unary.shape
    kwargs = _loss_kwargs(kind, B, T, N, rng, bounded)
    if h == "sin":
        kwargs["h"] = lambda k: 2 * torch.sin(k)
    outs = []
    for backend in ("torch", "triton"):
        u, a = inst.unary.clone().requires_grad_(), inst.transitions.clone().requires_grad_()
        with use_backend(backend):
            value, path, count = st.loss_augmented(u, a, target, rescaling=rescaling, **kwargs, **inst.kwargs)
            grads = torch.autograd.grad(value.sum(), (u, a), allow_unused=True)
        outs.append((value.detach(), path, count, *(torch.zeros_like(x) if g is None else g
                                                    for g, x in zip(grads, (u, a), strict=True))))
    ref, out = outs
    torch.testing.assert_close(out[0], ref[0], atol=inst.tol, rtol=inst.tol)
    assert torch.equal(out[1], ref[1])
    assert out[2].dtype == ref[2].dtype and torch.equal(out[2], ref[2])
    for g, r in zip(out[3:], ref[3:], strict=True):
        torch.testing.assert_close(g, r, atol=inst.tol, rtol=inst.tol)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("shared", [True, False])
def test_triton_gradient_is_the_indicator_difference(case, shared):
    rescaling, algorithm = case
    g = torch.Generator().manual_seed(3)
    B, T, N = 3, 5, 3
    u = torch.randn(B, T, N, generator=g, dtype=torch.float64, requires_grad=True)
    a = torch.randn(*((N, N) if shared else (B, T - 1, N, N)), generator=g, dtype=torch.float64,
                    requires_grad=True)
    start = torch.randn(B, N, generator=g, dtype=torch.float64, requires_grad=True)
    end = torch.randn(N, generator=g, dtype=torch.float64, requires_grad=True)
    lengths = torch.tensor([5, 2, 0])
    target = torch.randint(0, N, (B, T), generator=g)
    with use_backend("triton"):
        value, path, count = st.loss_augmented(u, a, target, start=start, end=end, lengths=lengths,
                                               rescaling=rescaling, algorithm=algorithm)
        grads = torch.autograd.grad(value.sum(), (u, a, start, end), retain_graph=True)
        second = torch.autograd.grad(value.sum(), u, create_graph=True)[0]  # the PyTorch indicators
    scale = torch.ones(B, dtype=torch.float64) if rescaling == "margin" else count.double()
    expected = [torch.zeros_like(x) for x in (u, a, start, end)]
    for b in range(B):
        L = int(lengths[b])
        for labels, sign in ((path[b], 1.0), (target[b], -1.0)):
            w = sign * scale[b]
            for t in range(L):
                expected[0][b, t, labels[t]] += w
                if t:
                    index = (labels[t - 1], labels[t]) if shared else (b, t - 1, labels[t - 1], labels[t])
                    expected[1][index] += w
            if L:
                expected[2][b, labels[0]] += w
                expected[3][labels[L - 1]] += w
    for got, want in zip(grads, expected, strict=True):
        torch.testing.assert_close(got, want)
    torch.testing.assert_close(second, expected[0])
    assert (path[2] == -1).all() and value[2].item() == 0.0 and count[2].item() == 0


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_triton_ties_prefer_the_target(case, dtype):
    """Every other labeling scores exactly one less per mistake: all tie with the target (value 0),
    which wins with a zero subgradient."""
    rescaling, algorithm = case
    T, N = 4, 3
    y = torch.tensor([[0, 2, 1, 1], [2, 2, 0, 1]])
    u = torch.nn.functional.one_hot(y, N).to(dtype).requires_grad_()
    a = torch.zeros(N, N, dtype=dtype)
    with use_backend("triton"):
        value, path, count = st.loss_augmented(u, a, y, rescaling=rescaling, algorithm=algorithm,
                                               lengths=torch.tensor([T, 3]))
        (grad,) = torch.autograd.grad(value.sum(), u)
    assert path.tolist() == [[0, 2, 1, 1], [2, 2, 0, -1]] and count.tolist() == [0, 0]
    assert value.tolist() == [0.0, 0.0] and value.dtype == dtype and not grad.any()


def test_triton_rejects_bad_targets():
    u, a = torch.zeros(2, 4, 3), torch.zeros(3, 3)
    with use_backend("triton"), st.set_validation(True):
        with pytest.raises((ValueError, RuntimeError), match=r"target must lie in \[0, N\) = \[0, 3\)"):
            st.loss_augmented(u, a, torch.tensor([[0, 0, 0, 0], [0, 0, 5, 0]]))
        with pytest.raises(ValueError, match=r"target must have shape \(B, T\) = \(2, 4\)"):
            st.loss_augmented(u, a, torch.zeros(2, 3, dtype=torch.long))
        a[0, 0] = float("-inf")
        with pytest.raises((ValueError, RuntimeError), match="target has score -inf"):
            st.loss_augmented(u, a, torch.zeros(2, 4, dtype=torch.long), rescaling="slack")


@given(order=st_.integers(0, 2), B=st_.integers(1, 3), T=st_.integers(0, 5), N=st_.integers(1, 3),
       dtype=st_.sampled_from([torch.float32, torch.float64]), seed=st_.integers(0, 2**31), data=st_.data())
def test_window_identity_h_matches_enumeration_and_torch(order, B, T, N, dtype, seed, data):
    """Margin rescaling on order-l chains, h the identity: the kernel (value, labeling, count,
    gradient) against brute force and the PyTorch search, with -inf windows and empty rows."""
    rng = np.random.default_rng(seed)
    x, scores, lengths, target = window_instance(order, B, T, N, rng, data, dtype)
    assume(T == 0 or bool(torch.isfinite(st.window_score(scores, target, lengths)).all()))
    weight = torch.arange(1.0, B + 1, dtype=dtype)
    out = []
    for name in ("torch", "triton"):
        s = scores.clone().requires_grad_()
        with use_backend(name):
            value, path, hamming = st.window_loss_augmented(s, target, lengths=lengths)
            (grad,) = torch.autograd.grad((value * weight).sum(), s, allow_unused=True)
        out.append((value.detach(), path, hamming, torch.zeros_like(s) if grad is None else grad))
    for b in range(B):
        L = int(lengths[b])
        expected = brute_window(x[b], target[b].tolist(), L, order, lambda k: k, "margin")
        assert np.isclose(out[1][0][b].item(), expected, atol=1e-9)
    assert out[1][0].dtype == dtype and torch.equal(out[1][1], out[0][1]) and torch.equal(out[1][2], out[0][2])
    torch.testing.assert_close(out[1][0], out[0][0])
    torch.testing.assert_close(out[1][3], out[0][3])


@settings(max_examples=INTERPRETED_EXAMPLES)
@given(order=st_.integers(1, 2), B=st_.integers(1, 3), T=st_.integers(1, 4), N=st_.integers(1, 3),
       rescaling=st_.sampled_from(["margin", "slack"]), h=st_.sampled_from([None, "sin"]),
       kind=st_.sampled_from(["weights", "cost", "pair_cost", "cost+pair_cost"]), bounded=st_.booleans(),
       seed=st_.integers(0, 2**31), data=st_.data())
def test_triton_window_weights_and_costs_match_torch(order, B, T, N, rescaling, h, kind, bounded, seed, data):
    """Weights, costs and pair costs on order-l chains run whole in the window kernels: value,
    labeling, count and gradient equal the PyTorch search's, with -inf windows and empty rows."""
    rng = np.random.default_rng(seed)
    _, scores, lengths, target = window_instance(order, B, T, N, rng, data)
    assume(bool(torch.isfinite(st.window_score(scores, target, lengths)).all()))
    kwargs = _loss_kwargs(kind, B, T, N, rng, bounded)
    if h == "sin":
        kwargs["h"] = lambda k: 2 * torch.sin(k)
    out = []
    for name in ("torch", "triton"):
        s = scores.clone().requires_grad_()
        with use_backend(name):
            value, path, count = st.window_loss_augmented(s, target, lengths=lengths, rescaling=rescaling, **kwargs)
            (grad,) = torch.autograd.grad(value.sum(), s, allow_unused=True)
        out.append((value.detach(), path, count, torch.zeros_like(s) if grad is None else grad))
    (ref, found) = out
    torch.testing.assert_close(found[0], ref[0])
    assert torch.equal(found[1], ref[1]) and found[2].dtype == ref[2].dtype and torch.equal(found[2], ref[2])
    torch.testing.assert_close(found[3], ref[3])


def test_window_double_backward_and_bad_target():
    g = torch.Generator().manual_seed(5)
    scores = torch.randn(2, 4, 3, 3, 3, generator=g, dtype=torch.float64, requires_grad=True)
    target, lengths = torch.randint(0, 3, (2, 4), generator=g), torch.tensor([4, 2])
    with use_backend("triton"):
        value = st.window_loss_augmented(scores, target, lengths=lengths)[0]
        first = torch.autograd.grad(value.sum(), scores, retain_graph=True)[0]
        second = torch.autograd.grad(value.sum(), scores, create_graph=True)[0]
    torch.testing.assert_close(first, second)
    forbidden = scores.detach().clone()
    forbidden[0, 0, 0, 0, target[0, 0]] = float("-inf")
    with use_backend("triton"), st.set_validation(True):
        with pytest.raises((ValueError, RuntimeError), match=r"target must lie in \[0, N\) = \[0, 3\)"):
            st.window_loss_augmented(scores.detach(), target + 3, lengths=lengths)
        with pytest.raises((ValueError, RuntimeError), match="target has score -inf"):
            st.window_loss_augmented(forbidden, target, lengths=lengths)


def test_triton_search_compiles_whole():
    """The kernels' operators have fake implementations: a hinge on chains and on order-2 chains
    traces into one graph, forward and backward, with the eager results."""
    g = torch.Generator().manual_seed(7)
    u = torch.randn(3, 6, 4, generator=g, dtype=torch.float64, requires_grad=True)
    a = torch.randn(4, 4, generator=g, dtype=torch.float64, requires_grad=True)
    scores = torch.randn(3, 6, 4, 4, 4, generator=g, dtype=torch.float64, requires_grad=True)
    y, lengths = torch.randint(0, 4, (3, 6), generator=g), torch.tensor([6, 3, 5])
    calls = [(lambda u, a, s, r=rescaling: st.structured_hinge(u, a, y, lengths=lengths, rescaling=r))
             for rescaling in ("margin", "slack")]
    calls.append(lambda u, a, s: st.window_loss_augmented(s, y, lengths=lengths)[0].sum())
    with use_backend("triton"):
        for fn in calls:
            eager = fn(u, a, scores)
            expected = torch.autograd.grad(eager, (u, a, scores), allow_unused=True)
            torch._dynamo.reset()
            out = torch.compile(fn, fullgraph=True, backend="aot_eager")(u, a, scores)
            torch.testing.assert_close(out, eager)
            for got, want in zip(torch.autograd.grad(out, (u, a, scores), allow_unused=True), expected, strict=True):
                assert (got is None) == (want is None) and (got is None or torch.equal(got, want))
