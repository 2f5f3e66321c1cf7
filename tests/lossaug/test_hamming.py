"""Loss-augmented Viterbi against brute-force enumeration, for both rescalings and any h."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from brute import enumerate_row, instances
from conftest import use_backend
from hypothesis import assume, given
from hypothesis import strategies as st_

import structtorch as st


def brute_force(rows, target, L, h, rescaling, weights=None, cost=None):
    """max over labelings of the margin/slack objective; rows = [(labeling, score)]."""
    table = dict(rows)
    gold = table[tuple(target[:L])]
    best = -np.inf
    for y, s in rows:
        if s == -np.inf:
            continue
        if cost is not None:
            loss = sum(cost[t][y[t]] for t in range(L))
        else:
            k = sum((1 if weights is None else weights[t]) * (y[t] != target[t]) for t in range(L))
            loss = h(k)
        best = max(best, s + loss - gold if rescaling == "margin" else loss * (1 + s - gold))
    return best


def feasible_target(inst, rng):
    """A target labeling with a finite score in every row, or None."""
    B, T, N = inst.unary.shape
    target = np.zeros((B, T), dtype=np.int64)
    for b in range(B):
        L = int(inst.lengths[b])
        finite = [y for y, s in enumerate_row(inst, b) if s > -np.inf]
        if not finite:
            return None
        target[b, :L] = finite[rng.integers(len(finite))]
    return torch.tensor(target)


H_CHOICES = ["identity", "random", "square", "negative_affine"]


def h_of(name, T, rng):
    table = {
        "identity": np.arange(T + 1.0),
        "random": rng.integers(-3, 4, size=T + 1).astype(float),
        "square": np.minimum(np.arange(T + 1.0), 2) ** 2,
        "negative_affine": 1.0 - 0.5 * np.arange(T + 1.0),
    }[name]
    return torch.tensor(table), (lambda k: table[k])


@given(inst=instances(max_t=5, max_n=3), rescaling=st_.sampled_from(["margin", "slack"]),
       h_name=st_.sampled_from(H_CHOICES), seed=st_.integers(0, 2**31))
def test_matches_enumeration(backend, inst, rescaling, h_name, seed):
    rng = np.random.default_rng(seed)
    target = feasible_target(inst, rng)
    assume(target is not None)
    T = inst.unary.shape[1]
    h_tensor, h_fn = h_of(h_name, T, rng)
    value, path, hamming = st.loss_augmented(
        *inst.args(), target, h=h_tensor.to(inst.unary.dtype), rescaling=rescaling, **inst.kwargs
    )
    for b in range(inst.unary.shape[0]):
        L = int(inst.lengths[b])
        rows = enumerate_row(inst, b)
        expected = brute_force(rows, target[b].tolist(), L, h_fn, rescaling)
        assert np.isclose(value[b].item(), expected, atol=inst.tol, rtol=inst.tol)
        y = tuple(path[b, :L].tolist())
        assert (path[b, L:] == -1).all()
        assert hamming[b].item() == sum(y[t] != target[b, t].item() for t in range(L))
        # the returned labeling attains the value
        s = dict(rows)[y]
        gold = dict(rows)[tuple(target[b, :L].tolist())]
        k = hamming[b].item()
        attained = s + h_fn(k) - gold if rescaling == "margin" else h_fn(k) * (1 + s - gold)
        assert np.isclose(attained, expected, atol=inst.tol, rtol=inst.tol)


@given(inst=instances(max_t=5, max_n=3), rescaling=st_.sampled_from(["margin", "slack"]),
       seed=st_.integers(0, 2**31))
def test_integer_weights_match_enumeration(backend, inst, rescaling, seed):
    rng = np.random.default_rng(seed)
    target = feasible_target(inst, rng)
    assume(target is not None)
    B, T, _ = inst.unary.shape
    weights = torch.tensor(rng.integers(0, 3, size=(B, T)))
    h = lambda k: torch.sin(k) * 3  # noqa: E731  nonlinear, sign-changing
    value, path, hamming = st.loss_augmented(*inst.args(), target, h=h, rescaling=rescaling,
                                                     weights=weights, **inst.kwargs)
    for b in range(B):
        L = int(inst.lengths[b])
        expected = brute_force(enumerate_row(inst, b), target[b].tolist(), L,
                               lambda k: 3 * np.sin(k), rescaling, weights=weights[b].tolist())
        assert np.isclose(value[b].item(), expected, atol=1e-5, rtol=1e-5)
        assert hamming.dtype == torch.int64
        assert hamming[b].item() == int(((path[b, :L] != target[b, :L]) * weights[b, :L]).sum())


@given(inst=instances(max_t=5, max_n=3), seed=st_.integers(0, 2**31), shape=st_.sampled_from(["NN", "BTN", "w"]))
def test_decomposable_margin_losses_match_enumeration(backend, inst, seed, shape):
    rng = np.random.default_rng(seed)
    target = feasible_target(inst, rng)
    assume(target is not None)
    B, T, N = inst.unary.shape
    kwargs, costs = {}, []
    if shape == "w":
        w = rng.uniform(0.1, 2.0, size=(B, T))
        kwargs["weights"] = torch.tensor(w)
        costs = [[[w[b, t] * (j != target[b, t].item()) for j in range(N)] for t in range(T)] for b in range(B)]
    else:
        c = rng.uniform(0, 2, size=(N, N) if shape == "NN" else (B, T, N))
        kwargs["cost"] = torch.tensor(c, dtype=inst.unary.dtype)
        costs = [[c[target[b, t].item()] if shape == "NN" else c[b, t] for t in range(T)] for b in range(B)]
    value, path, _ = st.loss_augmented(*inst.args(), target, **kwargs, **inst.kwargs)
    for b in range(B):
        L = int(inst.lengths[b])
        expected = brute_force(enumerate_row(inst, b), target[b].tolist(), L, None, "margin", cost=costs[b])
        assert np.isclose(value[b].item(), expected, atol=1e-5, rtol=1e-5)


@given(inst=instances(max_t=6, max_n=3), seed=st_.integers(0, 2**31))
def test_fold_and_table_agree_for_affine_h(inst, seed):
    target = feasible_target(inst, np.random.default_rng(seed))
    assume(target is not None)
    h = lambda k: 2.5 * k - 1.0  # noqa: E731
    a = st.loss_augmented(*inst.args(), target, h=h, algorithm="viterbi", **inst.kwargs)
    b = st.loss_augmented(*inst.args(), target, h=h, algorithm="hamming", **inst.kwargs)
    torch.testing.assert_close(a[0], b[0], atol=inst.tol, rtol=inst.tol)


@given(inst=instances(max_t=7, max_n=4), rescaling=st_.sampled_from(["margin", "slack"]),
       seed=st_.integers(0, 2**31))
def test_compiled_and_torch_tables_agree(inst, rescaling, seed):
    target = feasible_target(inst, np.random.default_rng(seed)) if inst.unary.shape[1] <= 5 else None
    if target is None:
        target = torch.zeros(inst.unary.shape[:2], dtype=torch.long)
        assume(bool(torch.isfinite(st.path_score(*inst.args(), target, **inst.kwargs)).all()))
    h = torch.tensor(np.random.default_rng(seed).normal(size=inst.unary.shape[1] + 1), dtype=inst.unary.dtype)
    out = []
    for name in ("compiled", "torch"):
        with use_backend(name):
            out.append(st.loss_augmented(*inst.args(), target, h=h, rescaling=rescaling,
                                                 algorithm="hamming", **inst.kwargs))
    torch.testing.assert_close(out[0][0], out[1][0])
    assert torch.equal(out[0][1], out[1][1]) and torch.equal(out[0][2], out[1][2])


def brute_window(x, target, L, order, h, rescaling):
    N = x.shape[-1]

    def score(y):
        return sum(x[(t,) + tuple(y[t - order + k] if t - order + k >= 0 else 0 for k in range(order + 1))]
                   for t in range(L))

    gold = score(target[:L])
    best = -np.inf
    for y in itertools.product(range(N), repeat=L):
        s = score(y)
        if s == -np.inf:
            continue
        k = sum(y[t] != target[t] for t in range(L))
        best = max(best, s + h(k) - gold if rescaling == "margin" else h(k) * (1 + s - gold))
    return best


def window_instance(order: int, B: int, T: int, N: int, rng, data, dtype=torch.float64):
    """Random order-l window scores (integers, 15% -inf) as (numpy array, tensor), lengths drawn
    by hypothesis, and a target."""
    shape = (B, T) + (N,) * (order + 1)
    x = rng.integers(-2, 3, size=shape).astype(float)
    x[rng.random(shape) < 0.15] = -np.inf
    lengths = torch.tensor(data.draw(st_.lists(st_.integers(0, T), min_size=B, max_size=B)))
    target = torch.tensor(rng.integers(0, N, size=(B, T)))
    return x, torch.tensor(x, dtype=dtype), lengths, target


@given(order=st_.integers(0, 2), B=st_.integers(1, 2), T=st_.integers(0, 5), N=st_.integers(1, 3),
       rescaling=st_.sampled_from(["margin", "slack"]), h_name=st_.sampled_from(H_CHOICES),
       seed=st_.integers(0, 2**31), data=st_.data())
def test_window_matches_enumeration(order, B, T, N, rescaling, h_name, seed, data):
    rng = np.random.default_rng(seed)
    x, scores, lengths, target = window_instance(order, B, T, N, rng, data)
    gold = st.window_score(scores, target, lengths) if T else torch.zeros(B)
    if not torch.isfinite(gold).all():
        with pytest.raises(ValueError, match="target has score -inf"):
            st.window_loss_augmented(scores, target, lengths=lengths)
        return
    h_tensor, h_fn = h_of(h_name, T, rng)
    value, path, hamming = st.window_loss_augmented(scores, target, h=h_tensor, rescaling=rescaling,
                                                            lengths=lengths)
    for b in range(B):
        L = int(lengths[b])
        expected = brute_window(x[b], target[b].tolist(), L, order, h_fn, rescaling)
        assert np.isclose(value[b].item(), expected, atol=1e-9)
        assert hamming[b].item() == int((path[b, :L] != target[b, :L]).sum()) and (path[b, L:] == -1).all()


def test_subgradient_margin_and_slack():
    torch.manual_seed(0)
    u = torch.randn(2, 6, 3, dtype=torch.float64, requires_grad=True)
    A = torch.randn(3, 3, dtype=torch.float64, requires_grad=True)
    target = torch.randint(0, 3, (2, 6))
    for rescaling in ("margin", "slack"):
        u.grad = A.grad = None
        value, path, hamming = st.loss_augmented(u, A, target, rescaling=rescaling)
        value.sum().backward()
        scale = torch.ones(2, dtype=torch.float64) if rescaling == "margin" else hamming.double()
        expected_u = torch.zeros_like(u)
        expected_A = torch.zeros_like(A)
        for b in range(2):
            for lab, sign in ((path[b], 1.0), (target[b], -1.0)):
                for t in range(6):
                    expected_u[b, t, lab[t]] += sign * scale[b]
                for t in range(5):
                    expected_A[lab[t], lab[t + 1]] += sign * scale[b]
        torch.testing.assert_close(u.grad, expected_u)
        torch.testing.assert_close(A.grad, expected_A)


@pytest.mark.parametrize(
    "kwargs, exc, message",
    [
        ({"rescaling": "hinge"}, ValueError, "rescaling must be 'margin' or 'slack', got 'hinge'"),
        ({"h": torch.zeros(3)}, ValueError, r"h must have shape \(T\+1,\) = \(5,\) or \(B, T\+1\) = \(2, 5\), got \(3,\)"),
        ({"h": lambda k: k * float("nan")}, ValueError, r"h must be finite; h\[0\] = nan"),
        ({"h": lambda k: k.expand(2, 5) / (1 - k)}, ValueError, r"h must be finite; h\[0, 1\] = inf"),
        ({"h": lambda k: torch.zeros(2)}, ValueError, r"h must return a tensor of shape \(T\+1,\) = \(5,\)"),
        ({"h": "square"}, TypeError, "h must be None, a callable or a tensor"),
        ({"h": lambda k: __import__("math").sqrt(k)}, TypeError, "h must map a float64 tensor of counts 0..4 elementwise"),
        ({"weights": torch.tensor([[1.0, float("nan"), 1, 1], [1, 1, 1, 1]])}, ValueError, r"weights must be finite; weights\[0, 1\] = nan"),
        ({"weights": torch.full((2, 4), 10**6), "h": lambda k: k**2}, ValueError, "the Hamming table would need K\\+1 counts"),
        ({"weights": torch.full((2, 4), -0.5), "rescaling": "slack"}, ValueError, "weights must be non-negative integers"),
        ({"weights": torch.full((2, 4), 2.0**0.5), "rescaling": "slack"}, ValueError, "or integers after a common scale"),
        ({"weights": torch.full((2, 4), 0.5), "h": torch.arange(5.0)}, ValueError, "h as a tensor indexes integer counts"),
        ({"pair_cost": torch.zeros(2, 3, 3, 3), "weights": torch.ones(2, 4)}, ValueError, "cost and pair_cost replace weights"),
        ({"pair_cost": torch.zeros(2, 4, 3, 3)}, ValueError, r"pair_cost must have shape \(B, T-1, N, N\) = \(2, 3, 3, 3\)"),
        ({"pair_cost": torch.full((2, 3, 3, 3), -1.0), "rescaling": "slack"}, ValueError, "pair_cost must be non-negative"),
        ({"cost": torch.full((3, 3), 0.1), "pair_cost": torch.full((2, 3, 3, 3), 3**0.5), "rescaling": "slack"},
         ValueError, "cost and pair_cost must be non-negative"),
        ({"weights": torch.ones(2, 3)}, ValueError, r"weights must have shape \(B, T\) = \(2, 4\)"),
        ({"cost": torch.zeros(3, 3), "weights": torch.ones(2, 4)}, ValueError, "cost and pair_cost replace weights"),
        ({"cost": torch.zeros(2, 2)}, ValueError, r"cost must have shape \(N, N\) = \(3, 3\)"),
        ({"algorithm": "fast"}, ValueError, "algorithm must be one of"),
        ({"algorithm": "viterbi", "rescaling": "slack"}, ValueError, "algorithm='viterbi' needs margin"),
    ],
)
def test_bad_input(kwargs, exc, message):
    u, A = torch.zeros(2, 4, 3), torch.zeros(3, 3)
    with pytest.raises(exc, match=message):
        st.loss_augmented(u, A, torch.zeros(2, 4, dtype=torch.long), **kwargs)


def test_bad_target():
    u, A = torch.zeros(2, 4, 3), torch.zeros(3, 3)
    with pytest.raises(ValueError, match=r"target must lie in \[0, N\) = \[0, 3\) within each length; target\[1, 2\] = 5"):
        st.loss_augmented(u, A, torch.tensor([[0, 0, 0, 0], [0, 0, 5, 0]]))
    with pytest.raises(ValueError, match=r"target must have shape \(B, T\) = \(2, 4\)"):
        st.loss_augmented(u, A, torch.zeros(2, 3, dtype=torch.long))
    A = torch.zeros(3, 3)
    A[0, 0] = float("-inf")
    with pytest.raises(ValueError, match="target has score -inf in row 0"):
        st.loss_augmented(u, A, torch.zeros(2, 4, dtype=torch.long))


def test_ties_prefer_the_target():
    """With h = 0 every labeling ties under margin rescaling: the target (zero subgradient) wins."""
    u, A, y = torch.zeros(2, 4, 3), torch.zeros(3, 3), torch.ones(2, 4, dtype=torch.long)
    for algorithm in ("auto", "hamming"):
        value, path, hamming = st.loss_augmented(u, A, y, h=lambda k: 0 * k, algorithm=algorithm)
        assert torch.equal(path, y) and hamming.tolist() == [0, 0] and value.tolist() == [0.0, 0.0]


def test_large_integer_weights_fold_without_a_table():
    u, A, y = torch.randn(2, 4, 3), torch.randn(3, 3), torch.zeros(2, 4, dtype=torch.long)
    value, path, hamming = st.loss_augmented(u, A, y, weights=torch.full((2, 4), 5e6))
    expected, _, _ = st.loss_augmented(u, A, y, cost=5e6 * (1 - torch.eye(3)))
    torch.testing.assert_close(value, expected)


def _cost_brute_force(rows, target, L, h, rescaling, unit, pair):
    """max over labelings of the objective with Delta = h(sum_t unit[t][y_t] + sum_t pair[t][y_t][y_t+1])."""
    gold = dict(rows)[tuple(target[:L])]
    best = -np.inf
    for y, s in rows:
        if s == -np.inf:
            continue
        count = sum(unit[t][y[t]] for t in range(L)) + sum(pair[t][y[t]][y[t + 1]] for t in range(L - 1))
        value = s + h(count) - gold if rescaling == "margin" else h(count) * (1 + s - gold)
        best = max(best, value)
    return best


@given(inst=instances(max_t=5, max_n=3), rescaling=st_.sampled_from(["margin", "slack"]),
       h_name=st_.sampled_from(["none", "sin"]), parts=st_.sampled_from(["pair", "cost+pair", "cost"]),
       real=st_.booleans(), seed=st_.integers(0, 2**31))
def test_pair_costs_match_enumeration(backend, inst, rescaling, h_name, parts, real, seed):
    """Costs of label pairs (order-2 losses) and per-position costs: margin rescaling with real
    costs (h=None: folded), slack rescaling and any h with costs that are integers after a common
    scale (here halves), against enumeration; the count returned is the path's cost."""
    rng = np.random.default_rng(seed)
    target = feasible_target(inst, rng)
    assume(target is not None)
    B, T, N = inst.unary.shape
    table_mode = rescaling == "slack" or h_name == "sin"
    draw = (lambda size: rng.integers(0, 5, size=size) / 2.0) if table_mode or not real else \
        (lambda size: rng.uniform(-1, 2, size=size))
    unit = draw((B, T, N)) if "cost" in parts else np.zeros((B, T, N))
    pair = draw((B, max(T - 1, 0), N, N)) if "pair" in parts else np.zeros((B, max(T - 1, 0), N, N))
    h_fn = (lambda k: k) if h_name == "none" else (lambda k: 3 * np.sin(k))
    kwargs = dict(rescaling=rescaling, **inst.kwargs)
    if h_name == "sin":
        kwargs["h"] = lambda k: 3 * torch.sin(k)
    if "cost" in parts:
        kwargs["cost"] = torch.tensor(unit)
    if "pair" in parts:
        kwargs["pair_cost"] = torch.tensor(pair)
    value, path, count = st.loss_augmented(*inst.args(), target, **kwargs)
    for b in range(B):
        L = int(inst.lengths[b])
        rows = enumerate_row(inst, b)
        expected = _cost_brute_force(rows, target[b].tolist(), L, h_fn, rescaling, unit[b], pair[b])
        assert np.isclose(value[b].item(), expected, atol=1e-5, rtol=1e-5), (b, value[b].item(), expected)
        y = path[b, :L].tolist()
        want = sum(unit[b][t][y[t]] for t in range(L)) + sum(pair[b][t][y[t]][y[t + 1]] for t in range(L - 1))
        assert np.isclose(float(count[b]), want, atol=1e-9)


@given(inst=instances(max_t=5, max_n=3), seed=st_.integers(0, 2**31))
def test_real_weights_under_slack_rescaling(backend, inst, seed):
    """Real weights that are integers after a common scale (thirds) work under slack rescaling:
    the table counts in thirds, h sees the real weighted count."""
    rng = np.random.default_rng(seed)
    target = feasible_target(inst, rng)
    assume(target is not None)
    B, T, _ = inst.unary.shape
    w = rng.integers(0, 4, size=(B, T)) / 3.0
    value, path, count = st.loss_augmented(*inst.args(), target, rescaling="slack", weights=torch.tensor(w),
                                           h=lambda k: k**2, **inst.kwargs)
    for b in range(B):
        L = int(inst.lengths[b])
        expected = brute_force(enumerate_row(inst, b), target[b].tolist(), L, lambda k: k**2, "slack",
                               weights=w[b].tolist())
        assert np.isclose(value[b].item(), expected, atol=1e-5, rtol=1e-5)
        y = path[b, :L]
        assert np.isclose(float(count[b]), float((w[b, :L] * (y != target[b, :L]).numpy()).sum()))


def test_window_pair_costs_fold_and_table_agree():
    """Order-2 windows with pair costs: the folded Viterbi (margin, h=None) and the table agree."""
    g = torch.Generator().manual_seed(0)
    scores = torch.randn(3, 5, 3, 3, 3, generator=g, dtype=torch.float64)
    target = torch.randint(0, 3, (3, 5), generator=g)
    pair = torch.randint(0, 3, (3, 4, 3, 3), generator=g).double()
    lengths = torch.tensor([5, 3, 1])
    kw = dict(pair_cost=pair, lengths=lengths)
    folded = st.window_loss_augmented(scores, target, **kw)
    table = st.window_loss_augmented(scores, target, algorithm="hamming", **kw)
    torch.testing.assert_close(folded[0], table[0])
    torch.testing.assert_close(folded[2], table[2])
    with pytest.raises(ValueError, match="pair_cost needs windows of order l >= 1"):
        st.window_loss_augmented(scores[..., 0, 0], target, pair_cost=pair)


def test_max_count_sizes_the_table_without_reading_the_values(backend):
    """``max_count`` gives the table's size: the same result as the size read off the values, for
    weights, costs and pair costs (integer or floating dtypes); a bound that some row exceeds, real
    values, and a bad bound are errors that name it."""
    g = torch.Generator().manual_seed(3)
    B, T, N = 3, 5, 3
    u, a = torch.randn(B, T, N, generator=g, dtype=torch.float64), torch.randn(N, N, generator=g, dtype=torch.float64)
    target = torch.randint(0, N, (B, T), generator=g)
    losses = {"weights": {"weights": torch.randint(0, 3, (B, T), generator=g)},
              "cost": {"cost": torch.randint(0, 3, (B, T, N), generator=g)},
              "pair_cost": {"pair_cost": torch.randint(0, 3, (B, T - 1, N, N), generator=g).double()}}
    for kwargs in losses.values():
        for rescaling, h in (("slack", None), ("margin", lambda k: k.sqrt())):
            ref = st.loss_augmented(u, a, target, rescaling=rescaling, h=h, **kwargs)
            out = st.loss_augmented(u, a, target, rescaling=rescaling, h=h, max_count=6 * T, **kwargs)
            torch.testing.assert_close(out[0], ref[0])
            assert torch.equal(out[1], ref[1]) and torch.equal(out[2], ref[2])
    error = ValueError if backend != "triton" else RuntimeError  # an asynchronous assertion off the host
    with pytest.raises(error, match="weights sum beyond max_count = 2 in some row"):
        st.loss_augmented(u, a, target, rescaling="slack", weights=torch.full((B, T), 1), max_count=2)
    with pytest.raises(error, match="weights must be non-negative integers with max_count"):
        st.loss_augmented(u, a, target, rescaling="slack", weights=torch.full((B, T), 0.5), max_count=20)
    with pytest.raises(error, match="cost must be non-negative integers with max_count"):
        st.loss_augmented(u, a, target, rescaling="slack", cost=-torch.ones(N, N), max_count=20)
    with pytest.raises(ValueError, match="max_count must be an int >= 0, got -1"):
        st.loss_augmented(u, a, target, rescaling="slack", weights=torch.ones(B, T), max_count=-1)
    with pytest.raises(TypeError, match="max_count must be an int, got float"):
        st.loss_augmented(u, a, target, rescaling="slack", weights=torch.ones(B, T), max_count=2.0)
    with pytest.raises(ValueError, match="max_count must be below 1000000"):
        st.loss_augmented(u, a, target, rescaling="slack", weights=torch.ones(B, T), max_count=10**6)
    with st.set_validation(False):  # unchecked: the kernels never index past the table
        try:
            st.loss_augmented(u, a, target, rescaling="slack", weights=torch.full((B, T), 1), max_count=2)
        except RuntimeError as exc:  # the compiled kernel's own bound check
            assert backend == "compiled" and "sum to at most K = 2" in str(exc)


@pytest.mark.parametrize("rescaling, h", [("margin", None), ("slack", None), ("margin", "sqrt")])
def test_integer_pair_costs_are_taken_as_their_values(rescaling, h):
    """Issue 41 (already fixed by the fused pair-cost path): an int64 pair_cost was refused ("must be a
    floating tensor") although the docs describe costs as non-negative integers; negatives stay refused
    where the count table needs them non-negative."""
    g = torch.Generator().manual_seed(0)
    u, a = torch.randn(2, 4, 3, generator=g), torch.randn(3, 3, generator=g)
    target = torch.randint(0, 3, (2, 4), generator=g)
    pair = torch.randint(0, 3, (2, 3, 3, 3), generator=g)
    kw = dict(rescaling=rescaling, h=None if h is None else (lambda k: k.sqrt()))
    ref = st.loss_augmented(u, a, target, pair_cost=pair.double(), **kw)
    for dtype in (torch.int64, torch.int32, torch.uint8):
        got = st.loss_augmented(u, a, target, pair_cost=pair.to(dtype), **kw)
        torch.testing.assert_close(got[0], ref[0])
        assert torch.equal(got[1], ref[1])
    if rescaling == "slack" or h is not None:
        with pytest.raises(ValueError, match="pair_cost must be non-negative"):
            st.loss_augmented(u, a, target, pair_cost=-pair - 1, **kw)
