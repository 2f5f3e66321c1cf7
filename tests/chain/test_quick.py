"""The small-call lanes (``chain/_quick.py``, ``csrc/quick.cpp``): where a lane answers, it answers
as the general path does (values, paths, gradients and double backward, on random instances with
-inf entries, ties, empty rows, every form of start/end/lengths/mask); where the general path must
answer (bad values, infeasible rows, moved masks, gradients under transforms) the lane declines."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as hst

import structtorch as st
from structtorch.chain import _quick
from structtorch.nn import crf as crf_module


def _instance(seed: int, B: int, T: int, N: int, dtype=torch.float64, ties=False, forbid=0.0):
    g = torch.Generator().manual_seed(seed)
    rand = (lambda *s: torch.randint(-2, 3, s, generator=g).to(dtype)) if ties else (
        lambda *s: torch.randn(*s, generator=g, dtype=dtype))
    u, A = rand(B, T, N), rand(N, N)
    A = torch.where(torch.rand(N, N, generator=g) < forbid, float("-inf"), A)
    return u, A, rand(N), rand(N), torch.randint(0, T + 1, (B,), generator=g), torch.randint(N, (B, T), generator=g)


_LANES = [(_quick, "viterbi"), (_quick, "nll"), (crf_module, "quick_viterbi"), (crf_module, "quick_nll")]


def _general(fn):
    """``fn()`` by the general path alone (every caller's lane switched off)."""
    keep = [getattr(module, name) for module, name in _LANES]
    try:
        for module, name in _LANES:
            setattr(module, name, lambda *a, **k: None)
        return fn()
    finally:
        for (module, name), lane in zip(_LANES, keep, strict=True):
            setattr(module, name, lane)


def _both(fn):
    lane = fn()
    return lane, _general(fn)


@settings(max_examples=40, deadline=None)
@given(seed=hst.integers(0, 10_000), B=hst.integers(1, 3), T=hst.integers(1, 5), N=hst.integers(1, 4),
       form=hst.sampled_from(["none", "vector", "rows"]), lengths=hst.booleans(), ties=hst.booleans(),
       shared=hst.booleans())
def test_viterbi_lane_equals_the_general_path(seed, B, T, N, form, lengths, ties, shared):
    u, A, s, e, L, _ = _instance(seed, B, T, N, ties=ties, forbid=0.3)
    if not shared:
        A = A.expand(B, T - 1, N, N).contiguous() + torch.randn(B, T - 1, N, N, dtype=u.dtype)
    s, e = {"none": (None, None), "vector": (s, e), "rows": (s.expand(B, N) + 0, e.expand(B, N) + 0)}[form]
    kwargs = dict(start=s, end=e, lengths=L if lengths else None)
    (score, path), (ref_score, ref_path) = _both(lambda: st.viterbi(u, A, **kwargs))
    torch.testing.assert_close(score, ref_score, rtol=0, atol=1e-12)
    assert torch.equal(path, ref_path)


@settings(max_examples=30, deadline=None)
@given(seed=hst.integers(0, 10_000), B=hst.integers(1, 3), T=hst.integers(1, 5), N=hst.integers(1, 4),
       lengths=hst.sampled_from(["none", "lengths", "mask"]), batch_first=hst.booleans(),
       reduction=hst.sampled_from(["none", "sum", "mean", "token_mean"]), constrained=hst.booleans())
def test_crf_loss_lane_equals_the_general_path(seed, B, T, N, lengths, batch_first, reduction, constrained):
    u, _, _, _, L, tags = _instance(seed, B, T, N)
    torch.manual_seed(seed)
    allowed = torch.rand(N, N) < 0.7 if constrained else None
    crf = st.LinearChainCRF(N, batch_first=batch_first, constraints=allowed).double()
    mask = torch.arange(T) < L[:, None]
    args = {"none": {}, "lengths": {"lengths": L}, "mask": {"mask": mask if batch_first else mask.t()}}[lengths]
    if not batch_first:
        u, tags = u.transpose(0, 1), tags.t()

    def loss_and_grads():
        x = u.detach().requires_grad_()
        loss = crf(x, tags, reduction=reduction, **args)
        finite = torch.where(torch.isfinite(loss), loss, 0.0).sum()
        grads = torch.autograd.grad(finite, (x, *crf.parameters()), allow_unused=True)
        return loss.detach(), grads

    (loss, grads), (ref, ref_grads) = _both(loss_and_grads)
    torch.testing.assert_close(loss, ref, rtol=1e-12, atol=1e-12)
    for g, r in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(g, r, rtol=1e-10, atol=1e-12)
    (score, path), (ref_score, ref_path) = _both(lambda: crf.decode(u, **args))
    torch.testing.assert_close(score, ref_score, rtol=0, atol=1e-12)
    assert torch.equal(path, ref_path)


def test_the_lanes_answer_the_common_calls():
    u, A, s, e, L, tags = _instance(0, 2, 4, 3, dtype=torch.float32)
    assert _quick.viterbi(u, A, s, e, L) is not None
    assert _quick.viterbi(u, A, None, None, None, torch.arange(4) < L[:, None]) is not None
    assert _quick.nll(u.requires_grad_(), A, s, e, None, None, tags) is not None


@pytest.mark.parametrize("case", ["nan", "posinf", "lengths", "labels", "interleaved", "infeasible", "vmap"])
def test_the_lanes_decline_what_the_general_path_must_answer(case):
    u, A, s, e, L, tags = _instance(1, 2, 4, 3)
    mask = None
    if case == "nan":
        u[0, 1, 2] = float("nan")
    elif case == "posinf":
        A[1, 1] = float("inf")
    elif case == "lengths":
        L[0] = 5
    elif case == "labels":
        tags[1, 0] = 3
        L[1] = 4
    elif case == "interleaved":
        mask, L = torch.tensor([[True, False, True, True], [True] * 4]), None
    elif case == "infeasible":
        A[:] = float("-inf")
        L = torch.tensor([4, 3])
    if case == "vmap":
        seen = []
        torch.func.vmap(lambda x: seen.append(_quick.viterbi(x, A, s, e, L)) or x)(u[None])
        assert seen == [None]
        return
    assert _quick.nll(u, A, s, e, L, mask, tags) is None
    if case != "labels":
        assert _quick.viterbi(u, A, s, e, L, mask) is None


def test_the_general_errors_are_unchanged_behind_the_lanes():
    u, A, _, _, _, tags = _instance(2, 2, 4, 3)
    u[1, 2, 0] = float("nan")
    with pytest.raises(ValueError, match=r"unary contains NaN at index \(1, 2, 0\)"):
        st.viterbi(u, A)
    crf = st.LinearChainCRF(3).double()
    with pytest.raises(ValueError, match=r"emissions contains NaN at index \(1, 2, 0\)"):
        crf(u, tags)
    tags[0, 1] = 7
    with pytest.raises(ValueError, match=r"tags must lie in \[0, N\) = \[0, 3\)"):
        crf(u.nan_to_num(), tags)


# start and end: None, (N,) or (B, N) each, and which of the inputs need a gradient: the C++ nodes
# number a None start or end out of their inputs.
_ENDS = [("none", "vector"), ("vector", "none"), ("rows", "vector"), ("none", "none"), ("rows", "rows")]


def _ends(s, e, B, forms):
    pick = {"none": lambda x: None, "vector": lambda x: x, "rows": lambda x: x.expand(B, -1) + 0}
    return pick[forms[0]](s), pick[forms[1]](e)


@pytest.mark.parametrize("forms", _ENDS)
@pytest.mark.parametrize("grads", [(True, True, True, True), (False, True, False, True), (True, False, True, False)])
def test_lane_gradients_pass_gradcheck_and_gradgradcheck(forms, grads):
    u, A, s, e, L, tags = _instance(3, 2, 4, 3)
    L = torch.tensor([4, 2])
    s, e = _ends(s, e, 2, forms)
    inputs = [x for x in (u, A, s, e) if x is not None]
    wanted = [x for x, g in zip((u, A, s, e), grads, strict=True) if x is not None and g]
    for x in wanted:
        x.requires_grad_()

    def loss(*xs):
        it = iter(xs)
        args = [next(it) if x is not None else None for x in (u, A, s, e)]
        out = _quick.nll(*args, L, None, tags)
        assert out is not None  # the lane answered
        return out

    assert torch.autograd.gradcheck(loss, tuple(inputs))
    assert torch.autograd.gradgradcheck(loss, tuple(inputs))


@pytest.mark.parametrize("forms", _ENDS)
@pytest.mark.parametrize("shared", [True, False])
def test_lane_viterbi_gradient_is_the_path_indicator(forms, shared):
    u, A, s, e, L, _ = _instance(4, 3, 5, 3)
    if not shared:
        A = A.expand(3, 4, 3, 3) + torch.randn(3, 4, 3, 3, dtype=u.dtype)
    s, e = _ends(s, e, 3, forms)
    leaves = [x.requires_grad_() for x in (u, A, s, e) if x is not None]
    weights = torch.tensor([1.0, 2.0, 3.0], dtype=u.dtype)
    score, path = st.viterbi(u, A, start=s, end=e, lengths=L)
    assert "ViterbiScore" in score.grad_fn.name()  # the lane's C++ node
    (score * weights).sum().backward()
    ref = [x.detach().clone().requires_grad_() for x in leaves]
    it = iter(ref)
    ru, rA, rs, re = (next(it) if x is not None else None for x in (u, A, s, e))
    ref_score, _ = _general(lambda: st.viterbi(ru, rA, start=rs, end=re, lengths=L))
    (ref_score * weights).sum().backward()
    for x, r in zip(leaves, ref, strict=True):
        torch.testing.assert_close(x.grad, r.grad)


def test_lane_viterbi_gradient_builds_a_graph_with_create_graph():
    """The node's create_graph branch (the indicators as PyTorch operators): the gradient is linear
    in the upstream weights, so its derivative w.r.t. them is the indicator again."""
    u, A, s, e, L, _ = _instance(5, 2, 4, 3)
    u.requires_grad_()
    w = torch.tensor([1.0, 2.0], dtype=u.dtype, requires_grad=True)
    score, path = st.viterbi(u, A, start=s, end=e, lengths=L)
    (gu,) = torch.autograd.grad((score * w).sum(), u, create_graph=True)
    assert gu.requires_grad
    (gw,) = torch.autograd.grad(gu.sum(), w)
    torch.testing.assert_close(gw, (path >= 0).sum(1).to(u.dtype))


def test_lanes_follow_the_validation_switch():
    u, A, _, _, _, _ = _instance(5, 1, 3, 2)
    with st.set_validation(False):
        assert _quick.viterbi(u, A) is not None
        u[0, 0, 0] = float("nan")
        assert _quick.viterbi(u, A) is not None  # unchecked: undefined results, as on the general path
    assert _quick.viterbi(u, A) is None
