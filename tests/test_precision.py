"""Precision: every DP's float32 result against its float64 result at large offsets.

The inputs are float32 values; the reference runs the same values promoted to float64. On CPU
every DP accumulates in double, so its float32 result must be the float64 result rounded once:
the same structures (paths, segmentations, k-best lists) and values within a few float32 ulps,
with and without requires_grad. Each batch row has its own offset (the rows of a batch are
independent), so one call covers every offset.
"""

from __future__ import annotations

import contextlib

import pytest
import torch

import structtorch as st

OFFSETS = [1e4, 1e5, 1e6]
B, T, N = 3, 40, 4


def row_offsets(rows: int) -> torch.Tensor:
    """(rows, 1, 1) the offsets of the batch rows, OFFSETS in turn."""
    return torch.tensor([OFFSETS[i % len(OFFSETS)] for i in range(rows)]).view(rows, 1, 1)


def _ulps(x: torch.Tensor, n: float = 4.0) -> torch.Tensor:
    """n float32 ulps of the magnitude of x (at least of 1)."""
    return n * torch.finfo(torch.float32).eps * x.double().abs().clamp(min=1.0)


def assert_f32_close(got: torch.Tensor, ref: torch.Tensor, n: float = 4.0) -> None:
    assert got.dtype == torch.float32
    err = (got.double() - ref.double()).abs()
    assert bool((err <= _ulps(ref, n)).all()), f"max error {float(err.max())} over {n} ulps"


def chain(seed: int = 0):
    """Chain potentials: row b offset by OFFSETS[b], of lengths T, T - 7 and 13."""
    g = torch.Generator().manual_seed(seed)
    unary = torch.randn(B, T, N, generator=g) + row_offsets(B)
    trans = torch.randn(N, N, generator=g)
    lengths = torch.tensor([T, T - 7, 13])
    return unary, trans, lengths


def as64(*xs):
    return tuple(x.double() if x.is_floating_point() else x for x in xs)


def reference():
    """Where the float64 references run: the compiled kernels when they are built (every backend's
    float64 results are the compiled ones', tests/test_triton.py; the interpreted Triton kernels
    would take as long again), else the backend under test."""
    from structtorch._extension import chain_ops

    return st.use_backend("compiled") if chain_ops() is not None else contextlib.nullcontext()


@pytest.fixture(params=[False, True], ids=["no-grad", "requires-grad"])
def grad(request):
    return request.param


def _maybe_grad(x: torch.Tensor, grad: bool) -> torch.Tensor:
    return x.clone().requires_grad_() if grad else x


def test_chain_dps(backend, grad):
    unary, trans, lengths = chain()
    u = _maybe_grad(unary, grad)
    u64, t64 = as64(unary, trans)
    with reference():
        ref_score, ref_path = st.viterbi(u64, t64, lengths=lengths)
        ref_logz = st.log_partition(u64, t64, lengths=lengths)
        ref_marg = st.marginals(u64, t64, lengths=lengths)
        ref_scores, ref_paths = st.kbest(u64, t64, 2, lengths=lengths)
    score, path = st.viterbi(u, trans, lengths=lengths)
    assert torch.equal(path, ref_path)
    assert_f32_close(score, ref_score)
    assert_f32_close(st.path_score(u, trans, ref_path.clamp(min=0), lengths=lengths), ref_score)
    assert_f32_close(st.log_partition(u, trans, lengths=lengths), ref_logz)
    marg = st.marginals(u, trans, lengths=lengths)
    assert (marg.double() - ref_marg).abs().max() < 1e-6
    scores, paths = st.kbest(u, trans, 2, lengths=lengths)  # k = 2: a runner-up, at a quarter of k = 4's cost
    assert torch.equal(paths, ref_paths)
    assert_f32_close(scores, ref_scores)
    assert torch.equal(scores[:, 0], score)


def _float_grads(unary, trans, lengths, w, dtype, out: list) -> None:
    """d logZ and d (w . marginals) w.r.t. unary and transitions in ``dtype``, appended to out."""
    u = unary.to(dtype).requires_grad_()
    a = trans.to(dtype).requires_grad_()
    logz = st.log_partition(u, a, lengths=lengths).sum()
    out.extend(torch.autograd.grad(logz, (u, a)))
    marg = st.marginals(u, a, lengths=lengths)
    out.extend(torch.autograd.grad((marg * w.to(dtype)).sum(), (u, a)))


def test_gradients_match_float64(backend):
    """d logZ and d (w . marginals) in float32 equal the float64 ones."""
    unary, trans, lengths = chain(seed=1)
    w = torch.randn(B, T, N, generator=torch.Generator().manual_seed(2))
    got, ref = [], []
    for dtype, out, where in ((torch.float32, got, contextlib.nullcontext()), (torch.float64, ref, reference())):
        with where:
            _float_grads(unary, trans, lengths, w, dtype, out)
    for g32, g64 in zip(got, ref, strict=True):
        assert g32.dtype == torch.float32
        assert (g32.double() - g64).abs().max() < 2e-5 * max(1.0, float(g64.abs().max()))


def test_marginals_do_not_depend_on_requires_grad(backend):
    """The reproducer: randn + 1e4 and 1e6, marginals with and without requires_grad."""
    for offset in (1e4, 1e6):
        u = torch.randn(1, 40, 4, generator=torch.Generator().manual_seed(0)) + offset
        t = torch.randn(4, 4, generator=torch.Generator().manual_seed(1))
        plain = st.marginals(u, t)
        with_grad = st.marginals(u.clone().requires_grad_(), t)
        assert (plain - with_grad).abs().max() < 1e-6


def test_kbest_one_is_viterbi_at_large_offsets(backend):
    """The reproducer: kbest(k=1) was 0.96 worse than viterbi on float32 scores offset by 1e5."""
    for seed in range(5):
        g = torch.Generator().manual_seed(seed)
        u, t = torch.randn(1, 40, 4, generator=g) + 1e5, torch.randn(4, 4, generator=g)
        best, path = st.viterbi(u, t)
        scores, paths = st.kbest(u, t, 1)
        assert torch.equal(paths[:, 0], path)
        assert torch.equal(scores[:, 0], best)


@pytest.mark.parametrize("order", [0, 1, 2])
def test_window(order, grad):
    g = torch.Generator().manual_seed(order)
    scores = torch.randn((B + 1, T) + (N,) * (order + 1), generator=g)
    scores = scores + row_offsets(B + 1).view(-1, 1, *(1,) * (order + 1))
    lengths = torch.tensor([T, 9, T - 3, 0])
    score, path = st.window_viterbi(_maybe_grad(scores, grad), lengths=lengths)
    ref_score, ref_path = st.window_viterbi(scores.double(), lengths=lengths)
    assert torch.equal(path, ref_path)
    assert_f32_close(score, ref_score)


@pytest.mark.parametrize("rescaling", ["margin", "slack"])
@pytest.mark.parametrize("h", [None, "square"])
def test_loss_augmented(backend, rescaling, h, grad):
    unary, trans, lengths = chain(seed=3)
    target = st.viterbi(unary.double(), trans.double(), lengths=lengths)[1].clamp(min=0)
    target[:, ::3] = (target[:, ::3] + 1) % N  # a target that is not the best labeling
    hfun = None if h is None else (lambda k: k**2)
    value, path, count = st.loss_augmented(
        _maybe_grad(unary, grad), trans, target, h=hfun, rescaling=rescaling, lengths=lengths)
    with reference():
        ref_value, ref_path, ref_count = st.loss_augmented(
            *as64(unary, trans), target, h=hfun, rescaling=rescaling, lengths=lengths)
    assert torch.equal(path, ref_path)
    assert torch.equal(count, ref_count)
    # the value is a difference of two scores of size ~T * offset: rounded once, at their scale
    scale = unary.double().abs().sum((1, 2)) / N * (ref_count.double().clamp(min=1) ** 2 if h else 1)
    assert ((value.double() - ref_value).abs() <= _ulps(scale)).all()


@pytest.mark.parametrize("rescaling", ["margin", "slack"])
def test_loss_augmented_window(rescaling):
    g = torch.Generator().manual_seed(4)
    scores = torch.randn(B, T, N, N, N, generator=g) + row_offsets(B).view(B, 1, 1, 1, 1)
    lengths = torch.tensor([T, 11, 1])
    target = torch.randint(0, N, (B, T), generator=g)
    value, path, _ = st.window_loss_augmented(scores, target, rescaling=rescaling, lengths=lengths)
    ref_value, ref_path, _ = st.window_loss_augmented(
        scores.double(), target, rescaling=rescaling, lengths=lengths)
    assert torch.equal(path, ref_path)
    scale = scores.double().abs().amax((2, 3, 4)).sum(1) * T
    assert ((value.double() - ref_value).abs() <= _ulps(scale)).all()


SEMI_T = 24
"""The semi-Markov rows' length: the slack table is O(T^2) per row (K = T), and the triton backend
runs it interpreted."""


def semimarkov(seed: int = 5):
    """Semi-Markov potentials: rows offset by OFFSETS in turn, of lengths SEMI_T, 17, SEMI_T - 3 and 0."""
    g = torch.Generator().manual_seed(seed)
    content = torch.randn(B + 1, SEMI_T, N, generator=g) + row_offsets(B + 1)
    trans = torch.randn(N, N, generator=g)
    length_scores = torch.randn(6, N, generator=g)
    return content, trans, length_scores, torch.tensor([SEMI_T, 17, SEMI_T - 3, 0])


def test_semimarkov(backend, grad):
    content, trans, length_scores, lengths = semimarkov()
    kw = dict(max_len=6, lengths=lengths)
    score, labels, starts = st.semimarkov_viterbi(_maybe_grad(content, grad), trans,
                                                  length_scores=length_scores, **kw)
    with reference():
        ref = st.semimarkov_viterbi(*as64(content, trans), length_scores=length_scores.double(), **kw)
    assert torch.equal(labels, ref[1]) and torch.equal(starts, ref[2])
    assert_f32_close(score, ref[0])
    logz = st.semimarkov_log_partition(_maybe_grad(content, grad), trans, length_scores=length_scores, **kw)
    with reference():
        ref_logz = st.semimarkov_log_partition(*as64(content, trans), length_scores=length_scores.double(), **kw)
    assert_f32_close(logz, ref_logz)
    target_labels, target_starts = ref[1].clamp(min=0), ref[2].clone()
    target_starts[:, 5::7] = True  # a different segmentation as the target
    for rescaling in ("margin", "slack"):
        value, lab, _, H = st.semimarkov_loss_augmented(
            _maybe_grad(content, grad), trans, target_labels, target_starts, length_scores=length_scores,
            rescaling=rescaling, **kw)
        with reference():
            ref_value, ref_lab, _, ref_H = st.semimarkov_loss_augmented(
                *as64(content, trans), target_labels, target_starts, length_scores=length_scores.double(),
                rescaling=rescaling, **kw)
        assert torch.equal(lab, ref_lab) and torch.equal(H, ref_H)
        scale = content.double().abs().sum((1, 2)) / N * ref_H.double().clamp(min=1)
        assert ((value.double() - ref_value).abs() <= _ulps(scale)).all()


def test_crf_nll_keeps_its_digits(backend):
    """NLL = logZ - score: a small difference of two large numbers, taken in float64 on CPU."""
    unary, _, lengths = chain(seed=6)
    labels = torch.randint(0, N, (B, T), generator=torch.Generator().manual_seed(7))
    crf = st.LinearChainCRF(N)
    nll = crf(unary.clone().requires_grad_(), labels, lengths=lengths)
    ref = crf.double()(unary.double(), labels, lengths=lengths)
    assert nll.dtype == torch.float32
    assert ((nll.double() - ref).abs() < 1e-4 * ref.abs().clamp(min=1.0)).all()
