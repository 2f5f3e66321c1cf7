"""torch.compile (fullgraph, no graph breaks) and torch.func on the structured layers: the kernels
are torch.library operators with fake implementations (chain/_ops.py, semimarkov/_ops.py,
lossaug/_ops.py); value checks become asynchronous assertions inside a compiled graph."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo

import structtorch as st

B, T, N = 3, 6, 4


def _inputs(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    unary = torch.randn(B, T, N, generator=g, dtype=torch.float64, requires_grad=True)
    trans = torch.randn(N, N, generator=g, dtype=torch.float64, requires_grad=True)
    labels = torch.randint(0, N, (B, T), generator=g)
    return unary, trans, labels, torch.tensor([6, 4, 1])


CRF = st.LinearChainCRF(N).double()
ENTRY_POINTS = {
    "log_partition": lambda u, a, y, L: st.log_partition(u, a, lengths=L),
    "viterbi": lambda u, a, y, L: st.viterbi(u, a, lengths=L)[0],
    "LinearChainCRF": lambda u, a, y, L: CRF(u, y, lengths=L) + CRF.decode(u, lengths=L)[0],
    "StructuredHingeLoss margin": lambda u, a, y, L: st.StructuredHingeLoss(reduction="none")(u, a, y, lengths=L),
    "StructuredHingeLoss slack": lambda u, a, y, L: st.StructuredHingeLoss("slack", reduction="none")(
        u, a, y, lengths=L),
    "semimarkov_viterbi": lambda u, a, y, L: st.semimarkov_viterbi(u, a, max_len=3, lengths=L)[0],
    "semimarkov_log_partition": lambda u, a, y, L: st.semimarkov_log_partition(u, a, max_len=3, lengths=L),
}


@pytest.mark.parametrize("name", list(ENTRY_POINTS))
def test_no_graph_breaks_and_compiled_equals_eager(name):
    fn = ENTRY_POINTS[name]
    u, a, y, L = _inputs()
    torch._dynamo.reset()
    explained = torch._dynamo.explain(fn)(u, a, y, L)
    assert explained.graph_break_count == 0, [r.reason for r in explained.break_reasons]
    assert explained.graph_count == 1

    eager = fn(u, a, y, L)
    grads = torch.autograd.grad(eager.sum(), (u, a), allow_unused=True)
    compiled = torch.compile(fn, fullgraph=True, backend="aot_eager")
    out = compiled(u, a, y, L)
    torch.testing.assert_close(out, eager, rtol=1e-12, atol=1e-12)
    for got, want in zip(torch.autograd.grad(out.sum(), (u, a), allow_unused=True), grads, strict=True):
        assert (got is None) == (want is None)
        if want is not None:
            torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_compiled_log_partition_on_other_backends(backend):
    from conftest import use_backend

    u, a, _, L = _inputs(1)
    with use_backend(backend):
        eager = st.log_partition(u, a, lengths=L)
        torch._dynamo.reset()
        out = torch.compile(lambda u, a: st.log_partition(u, a, lengths=L), fullgraph=True, backend="aot_eager")(u, a)
        torch.testing.assert_close(out, eager, rtol=1e-12, atol=1e-12)
        (gu,) = torch.autograd.grad(out.sum(), u)
    torch.testing.assert_close(gu, st.marginals(u.detach(), a.detach(), lengths=L), rtol=0, atol=1e-10)


def test_value_checks_stay_in_the_compiled_graph():
    u, a, y, L = _inputs(2)
    torch._dynamo.reset()
    compiled = torch.compile(lambda u, a: st.log_partition(u, a, lengths=L), fullgraph=True, backend="aot_eager")
    compiled(u, a)
    bad = u.detach().clone()
    bad[0, 0, 0] = float("nan")
    with pytest.raises(RuntimeError, match="unary contains NaN or \\+inf"):
        compiled(bad, a)


def test_a_model_compiles_whole_and_trains():
    torch.manual_seed(3)
    encoder = torch.nn.Linear(5, N)
    crf = st.LinearChainCRF(N)
    hinge = st.StructuredHingeLoss("slack")

    def step(x, y, lengths):
        emissions = encoder(x)
        loss = crf(emissions, y, lengths=lengths).mean() + hinge(emissions, crf.transitions, y, lengths=lengths)
        sm = st.semimarkov_log_partition(emissions, crf.transitions, max_len=2, lengths=lengths)
        return loss + 0.0 * sm.sum(), crf.decode(emissions, lengths=lengths)[1]

    x, y, L = torch.randn(B, T, 5), torch.randint(0, N, (B, T)), torch.tensor([6, 3, 5])
    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    loss, path = compiled(x, y, L)
    ref_loss, ref_path = step(x, y, L)
    torch.testing.assert_close(loss, ref_loss)
    assert torch.equal(path, ref_path)
    loss.backward()
    assert encoder.weight.grad.abs().sum() > 0 and crf.transitions.grad.abs().sum() > 0


def test_inductor_compiles_the_crf():
    u, a, y, L = _inputs(4)
    fn = ENTRY_POINTS["LinearChainCRF"]
    torch._dynamo.reset()
    out = torch.compile(fn, fullgraph=True)(u, a, y, L)
    torch.testing.assert_close(out, fn(u, a, y, L))


def test_func_grad_of_log_partition_is_the_marginals_and_of_viterbi_the_path():
    u, a, _, L = _inputs(5)
    u, a = u.detach(), a.detach()
    gu = torch.func.grad(lambda u: st.log_partition(u, a, lengths=L).sum())(u)
    torch.testing.assert_close(gu, st.marginals(u, a, lengths=L), rtol=0, atol=1e-10)
    gu = torch.func.grad(lambda u: st.viterbi(u, a, lengths=L)[0].sum())(u)
    path = st.viterbi(u, a, lengths=L)[1]
    onehot = torch.nn.functional.one_hot(path.clamp(min=0), N) * (path >= 0).unsqueeze(-1)
    assert torch.equal(gu, onehot.double())


def test_vmap_over_log_partition_and_viterbi():
    g = torch.Generator().manual_seed(6)
    us = torch.randn(5, B, T, N, generator=g, dtype=torch.float64)
    a_s = torch.randn(5, N, N, generator=g, dtype=torch.float64)
    L = torch.tensor([6, 4, 1])
    for a_dim, a in ((None, a_s[0]), (0, a_s)):
        logz = torch.func.vmap(lambda u, a: st.log_partition(u, a, lengths=L), in_dims=(0, a_dim))(us, a)
        score, path = torch.func.vmap(lambda u, a: st.viterbi(u, a, lengths=L), in_dims=(0, a_dim))(us, a)
        for v in range(5):
            a_v = a if a_dim is None else a[v]
            torch.testing.assert_close(logz[v], st.log_partition(us[v], a_v, lengths=L))
            ref_score, ref_path = st.viterbi(us[v], a_v, lengths=L)
            torch.testing.assert_close(score[v], ref_score)
            assert torch.equal(path[v], ref_path)


def test_per_sample_gradients_with_vmap_of_grad():
    g = torch.Generator().manual_seed(7)
    us = torch.randn(4, 1, T, N, generator=g, dtype=torch.float64)
    a = torch.randn(N, N, generator=g, dtype=torch.float64)
    grads = torch.func.vmap(torch.func.grad(lambda a, u: st.log_partition(u, a).sum()), in_dims=(None, 0))(a, us)
    for v in range(4):
        a_v = a.clone().requires_grad_()
        (want,) = torch.autograd.grad(st.log_partition(us[v], a_v).sum(), a_v)
        torch.testing.assert_close(grads[v], want)
