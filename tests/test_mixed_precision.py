"""float16 / bfloat16 potentials and torch.autocast: the DPs compute in float32 or better and
return results in the input dtype (see structtorch._precision)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from brute import Instance, brute_best, brute_logsumexp, brute_marginals, enumerate_row, instances, pad
from hypothesis import given
from hypothesis import strategies as hs

import structtorch as st

HALVES = [torch.float16, torch.bfloat16]
# one rounding of the result to the output dtype: relative 2^-11 (fp16), 2^-8 (bf16), plus slack
RTOL = {torch.float16: 2e-3, torch.bfloat16: 1e-2}


def rounded(inst: Instance, dtype: torch.dtype) -> tuple[Instance, Instance]:
    """The instance in ``dtype``, and the same (rounded) values in float64 for the brute force."""
    def cast(x, to):
        return None if x is None else x.to(dtype).to(to)

    parts = (inst.unary, inst.transitions, inst.start, inst.end)
    half = Instance(*(cast(x, dtype) for x in parts), inst.lengths)
    exact = Instance(*(cast(x, torch.float64) for x in parts), inst.lengths)
    return half, exact


def close(got: float, expected: float, dtype: torch.dtype, scale: float = 1.0) -> bool:
    if expected == -np.inf:
        return got == -np.inf
    return abs(got - expected) <= RTOL[dtype] * max(abs(expected), scale)


@given(inst=instances(max_t=5, max_n=3), dtype=hs.sampled_from(HALVES))
def test_chain_dps_match_float64_brute_force(backend, inst, dtype):
    half, exact = rounded(inst, dtype)
    score, path = st.viterbi(*half.args(), **half.kwargs)
    logz = st.log_partition(*half.args(), **half.kwargs)
    marg = st.marginals(*half.args(), **half.kwargs)
    assert score.dtype == logz.dtype == marg.dtype == dtype and path.dtype == torch.int64
    T = inst.unary.shape[1]
    for b in range(inst.unary.shape[0]):
        rows = enumerate_row(exact, b)
        best, y = brute_best(rows)
        assert close(float(score[b]), best, dtype)
        if y is not None:  # half values widen exactly: the same DP on the same numbers
            assert path[b].tolist() == pad(y, T)
        assert close(float(logz[b]), brute_logsumexp([s for _, s in rows]), dtype)
        np.testing.assert_allclose(marg[b].double().numpy(), brute_marginals(exact, b),
                                   atol=RTOL[dtype], rtol=0)


@pytest.mark.parametrize("dtype", HALVES)
def test_gradients_are_marginals_and_path_indicators(backend, dtype):
    torch.manual_seed(0)
    unary = torch.randn(3, 6, 4).to(dtype).requires_grad_()
    trans = torch.randn(4, 4).to(dtype).requires_grad_()
    lengths = torch.tensor([6, 4, 1])
    st.log_partition(unary, trans, lengths=lengths).sum().backward()
    assert unary.grad.dtype == trans.grad.dtype == dtype
    ref = st.marginals(unary.detach().double(), trans.detach().double(), lengths=lengths)
    torch.testing.assert_close(unary.grad.double(), ref, atol=RTOL[dtype], rtol=0)

    unary.grad = None
    score, path = st.viterbi(unary, trans, lengths=lengths)
    score.sum().backward()
    onehot = torch.nn.functional.one_hot(path.clamp(min=0), 4) * (path >= 0).unsqueeze(-1)
    assert torch.equal(unary.grad, onehot.to(dtype))


@pytest.mark.parametrize("dtype", HALVES)
def test_semimarkov_in_half_precision(backend, dtype):
    torch.manual_seed(1)
    content = torch.randn(2, 7, 3).to(dtype)
    trans = torch.randn(3, 3).to(dtype)
    lengths = torch.tensor([7, 5])
    score, labels, starts = st.semimarkov_viterbi(content, trans, max_len=3, lengths=lengths)
    logz = st.semimarkov_log_partition(content, trans, max_len=3, lengths=lengths)
    ref_score, ref_labels, ref_starts = st.semimarkov_viterbi(content.double(), trans.double(), max_len=3,
                                                              lengths=lengths)
    ref_logz = st.semimarkov_log_partition(content.double(), trans.double(), max_len=3, lengths=lengths)
    assert score.dtype == logz.dtype == dtype
    assert torch.equal(labels, ref_labels) and torch.equal(starts, ref_starts)
    torch.testing.assert_close(score.double(), ref_score, rtol=RTOL[dtype], atol=0)
    torch.testing.assert_close(logz.double(), ref_logz, rtol=RTOL[dtype], atol=0)


@pytest.mark.parametrize("rescaling", ["margin", "slack"])
def test_hinge_in_half_precision(backend, rescaling):
    torch.manual_seed(2)
    unary = torch.randn(3, 5, 4).to(torch.bfloat16).requires_grad_()
    trans = torch.randn(4, 4).to(torch.bfloat16)
    target = torch.randint(0, 4, (3, 5))
    loss = st.structured_hinge(unary, trans, target, rescaling=rescaling, reduction="none")
    ref = st.structured_hinge(unary.detach().double(), trans.double(), target, rescaling=rescaling,
                              reduction="none")
    assert loss.dtype == torch.bfloat16
    torch.testing.assert_close(loss.double(), ref, rtol=RTOL[torch.bfloat16], atol=1e-2)
    loss.sum().backward()
    assert unary.grad.dtype == torch.bfloat16 and torch.isfinite(unary.grad.float()).all()


def test_mixed_dtypes_promote_and_float32_float64_still_refused():
    unary = torch.randn(2, 3, 4)
    trans = torch.randn(4, 4)
    assert st.log_partition(unary.bfloat16(), trans).dtype == torch.float32
    assert st.log_partition(unary.half(), trans.bfloat16()).dtype == torch.float32
    assert st.log_partition(unary.half(), trans.double()).dtype == torch.float64
    with pytest.raises(TypeError, match="use one dtype"):
        st.log_partition(unary, trans.double())


def test_half_result_beyond_range_raises():
    unary = torch.full((1, 10, 2), 8000.0, dtype=torch.float16)  # logZ ~ 80000 > 65504
    with pytest.raises(ValueError, match="overflows torch.float16"):
        st.log_partition(unary, torch.zeros(2, 2, dtype=torch.float16))
    assert st.log_partition(unary.bfloat16(), torch.zeros(2, 2, dtype=torch.bfloat16)).isfinite().all()


def test_crf_under_autocast_trains_an_encoder():
    torch.manual_seed(3)
    encoder = torch.nn.Linear(6, 4)
    crf = st.LinearChainCRF(4)
    x = torch.randn(5, 7, 6)
    y = torch.randint(0, 4, (5, 7))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        emissions = encoder(x)
        assert emissions.dtype == torch.bfloat16
        nll = crf(emissions, y)
        hinge = st.StructuredHingeLoss("slack")(emissions, crf.transitions, y, start=crf.start, end=crf.end)
        _, path = crf.decode(emissions)
    # bf16 emissions beside float32 parameters: computed and returned in float32
    assert nll.dtype == hinge.dtype == torch.float32
    ref = crf(emissions.detach().float(), y)
    torch.testing.assert_close(nll.detach(), ref.detach(), rtol=1e-6, atol=1e-5)
    assert torch.equal(path, crf.decode(emissions.float())[1])
    (nll.mean() + hinge).backward()
    for p in (encoder.weight, crf.transitions):
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0


def test_crf_module_in_bfloat16():
    torch.manual_seed(4)
    crf = st.LinearChainCRF(3).to(torch.bfloat16)
    unary = torch.randn(2, 4, 3, dtype=torch.bfloat16, requires_grad=True)
    y = torch.randint(0, 3, (2, 4))
    nll = crf(unary, y)
    assert nll.dtype == torch.bfloat16 and (nll.float() > 0).all()
    nll.sum().backward()
    assert crf.transitions.grad.dtype == torch.bfloat16 and unary.grad.dtype == torch.bfloat16


@pytest.mark.parametrize("dtype", HALVES)
def test_kbest_path_score_and_windows_in_half_precision(dtype):
    torch.manual_seed(5)
    unary, trans = torch.randn(2, 5, 3).to(dtype), torch.randn(3, 3).to(dtype)
    scores, paths = st.kbest(unary, trans, 3)
    ref_scores, ref_paths = st.kbest(unary.double(), trans.double(), 3)
    assert scores.dtype == dtype and torch.equal(paths, ref_paths)
    torch.testing.assert_close(scores.double(), ref_scores, rtol=RTOL[dtype], atol=0)
    labels = ref_paths[:, 0]
    assert st.path_score(unary, trans, labels).dtype == dtype
    window = torch.randn(2, 5, 3, 3).to(dtype)  # order 1
    score, path = st.window_viterbi(window)
    ref_score, ref_path = st.window_viterbi(window.double())
    assert score.dtype == dtype and torch.equal(path, ref_path)
    torch.testing.assert_close(score.double(), ref_score, rtol=RTOL[dtype], atol=0)
