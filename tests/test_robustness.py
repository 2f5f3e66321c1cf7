"""Robustness: the reproducers of the adversarial campaign (issue 10), and the property tests.

Anything that runs a compiled kernel on hostile input runs in a subprocess here, so a crash fails
one test instead of the suite: the fuzzers ``fuzz_kernels.py`` (raw kernels, arbitrary counts and
indices) and ``fuzz_api.py`` (every public DP entry point, bad and extreme arguments).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import structtorch as st
from structtorch._extension import chain_ops

HERE = Path(__file__).parent


def run_python(code: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter; a crash shows as a negative return code."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout, cwd=HERE.parent, env={**os.environ, "PYTHONHASHSEED": "0"})


def assert_clean_error(proc: subprocess.CompletedProcess, error: str, *words: str) -> None:
    assert proc.returncode == 1, f"return code {proc.returncode} (a crash is negative)\n{proc.stderr[-2000:]}"
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(error), last
    for word in words:
        assert word in last, last


HAMMING_CALLS = {
    "float weights >= 2^63": "st.loss_augmented(torch.zeros(2, 4, 3), torch.zeros(3, 3), "
                             "torch.zeros(2, 4, dtype=torch.long), weights=torch.tensor([[1e19, 1e19, 0, 0], "
                             "[1, 1, 1, 1.]]), rescaling='slack')",
    "int64 weights near 2^63": "st.loss_augmented(torch.zeros(2, 4, 3), torch.zeros(3, 3), "
                               "torch.zeros(2, 4, dtype=torch.long), weights=torch.tensor([[2**62, 2**62, "
                               "2**63 - 1, 0], [1, 1, 1, 1]]), rescaling='slack')",
    "window path": "st.window_loss_augmented(torch.zeros(2, 4, 3, 3), torch.zeros(2, 4, dtype=torch.long), "
                   "weights=torch.tensor([[2**62, 2**62, 2**63 - 1, 0], [1, 1, 1, 1]]), rescaling='slack')",
    "semi-Markov path": "st.semimarkov_loss_augmented(torch.zeros(2, 4, 3), torch.zeros(3, 3), "
                        "torch.zeros(2, 4, dtype=torch.long), torch.ones(2, 4, dtype=torch.bool), max_len=2, "
                        "weights=torch.tensor([[2**62, 2**62, 2**63 - 1, 0], [1, 1, 1, 1]]), rescaling='slack')",
}


@pytest.mark.parametrize("call", list(HAMMING_CALLS.values()), ids=list(HAMMING_CALLS))
def test_huge_hamming_weights_raise_instead_of_crashing(call):
    """Defect 1: the row sums wrapped around int64 and the kernel wrote out of bounds (SIGSEGV)."""
    proc = run_python(f"import torch, structtorch as st\n{call}")
    assert_clean_error(proc, "ValueError", "weights sum to K")


@pytest.mark.skipif(chain_ops() is None, reason="compiled kernels unavailable")
def test_kernels_check_counts_they_are_given():
    """The kernels never trust a count computed in Python: too small a K, negative weights,
    out-of-range targets, lengths and backtrack counts raise a RuntimeError."""
    proc = run_python("""
        import torch
        from structtorch._extension import chain_ops
        ops = chain_ops()
        u, a, s = torch.zeros(2, 4, 3), torch.zeros(3, 3), torch.zeros(2, 3)
        lengths, target = torch.tensor([4, 4]), torch.zeros(2, 4, dtype=torch.long)
        w = torch.tensor([[2**62, 2**62, 2**63 - 1, 0], [1, 1, 1, 1]])
        bad = [
            lambda: ops.hamming_forward(u, a, s, s, lengths, target, w, 4),
            lambda: ops.hamming_forward(u, a, s, s, lengths, target, -torch.ones(2, 4, dtype=torch.long), 4),
            lambda: ops.hamming_forward(u, a, s, s, lengths, target + 3, torch.ones(2, 4, dtype=torch.long), 4),
            lambda: ops.hamming_forward(u, a, s, s, torch.tensor([5, 4]), target, torch.ones(2, 4, dtype=torch.long), 4),
            lambda: ops.hamming_forward(u, a, s, s, lengths, target, torch.ones(2, 4, dtype=torch.long), 2),
            lambda: ops.viterbi_forward(u, a, s, s, torch.tensor([9, 0])),
            lambda: ops.viterbi_forward(u, torch.zeros(4, 4), s, s, lengths),
            lambda: ops.kbest_forward(u, a, s, s, torch.tensor([9, 0]), 2),
            lambda: ops.kbest_forward(u, a, s, s, lengths, 0),
            lambda: ops.hamming_backtrack(torch.zeros(2, 4, 3, 5, dtype=torch.uint8), lengths, target,
                                          torch.ones(2, 4, dtype=torch.long), torch.tensor([7, 0]), torch.zeros(2, dtype=torch.long)),
        ]
        for i, call in enumerate(bad):
            try:
                call()
            except RuntimeError as exc:
                print(i, str(exc).splitlines()[0])
            else:
                raise SystemExit(f"call {i} did not raise")
    """)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(proc.stdout.strip().splitlines()) == 10
    assert "weights in row 0" in proc.stdout and "lengths[0] = 9" in proc.stdout and "k[0] = 7" in proc.stdout


@pytest.mark.skipif(chain_ops() is None, reason="compiled kernels unavailable")
def test_fuzzing_the_kernels():
    """Arbitrary shapes, counts and indices straight into every compiled kernel, in a subprocess."""
    proc = subprocess.run([sys.executable, str(HERE / "fuzz_kernels.py"), "150"], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, f"return code {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"


def test_public_api_contract():
    """fuzz_api.py under pytest in a subprocess: bad arguments are named, extremes are exact or an
    overflow error."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x",
                           str(HERE / "fuzz_api.py")], capture_output=True, text=True, timeout=900,
                          cwd=HERE.parent)
    assert proc.returncode == 0, f"return code {proc.returncode}\n{proc.stdout[-5000:]}\n{proc.stderr[-2000:]}"
    assert " passed" in proc.stdout and "failed" not in proc.stdout


def test_semimarkov_default_length_scores_do_not_grow_with_max_len():
    """Defect 5: max_len=10**9 allocated a (B, max_len, N) default (24 GB) before clamping to T."""
    content, trans = torch.randn(2, 6, 3), torch.randn(3, 3)
    score, labels, _ = st.semimarkov_viterbi(content, trans, max_len=10**9)
    ref, ref_labels, _ = st.semimarkov_viterbi(content, trans, max_len=6)
    assert torch.equal(score, ref) and torch.equal(labels, ref_labels)
    logz = st.semimarkov_log_partition(content, trans, max_len=10**9)
    assert torch.allclose(logz, st.semimarkov_log_partition(content, trans, max_len=6))


def test_overflow_near_float64_limit_is_an_error():
    """Defect 6: log_partition returned -inf (read as infeasible), viterbi +inf."""
    u = torch.full((1, 5, 3), 1.7e308, dtype=torch.float64)
    a = torch.zeros(3, 3, dtype=torch.float64)
    with pytest.raises(ValueError, match="the log-partition overflows torch.float64"):
        st.log_partition(u, a)
    with pytest.raises(ValueError, match="the Viterbi score overflows torch.float64"):
        st.viterbi(u, a)


def test_large_but_representable_scores_and_finfo_masks_still_work():
    """The overflow guard must not reject what is representable: finfo.min used as a mask, or
    scores near the limit whose sums stay below it; nor call an infeasible row an overflow."""
    a = torch.zeros(3, 3, dtype=torch.float64)
    masked = torch.zeros(1, 5, 3, dtype=torch.float64)
    masked[0, 2:4, 1:] = torch.finfo(torch.float64).min
    score, path = st.viterbi(masked, a)
    assert score.item() == 0.0 and path[0, 2:4].tolist() == [0, 0]
    assert st.log_partition(masked, a).item() == pytest.approx(3 * torch.tensor(3.0).log().item())
    big = torch.full((1, 5, 3), 3e307, dtype=torch.float64)
    assert st.viterbi(big, a)[0].item() == pytest.approx(1.5e308)
    infeasible = big.clone()
    infeasible[0, 2] = float("-inf")
    assert st.viterbi(infeasible, a)[0].item() == float("-inf")
    assert st.log_partition(infeasible, a).item() == float("-inf")


@pytest.mark.parametrize("high", [5e-324, 1e-40])
def test_plif_support_with_underflowing_spacing_is_rejected(high):
    """Defect 7: PLiF(4, 0.0, 5e-324) was accepted; interpolation indices came from NaN."""
    with pytest.raises(ValueError, match="too narrow for 4 points"):
        st.PLiF(4, 0.0, high)
    with pytest.raises(ValueError, match="too narrow"):
        st.plif_interpolate(torch.zeros(2, 1), torch.zeros(1, 4), 0.0, high)
    plif = st.SegmentPLiF(torch.zeros(1, 3, 2), torch.zeros(2, 4), 0.0, high)
    with pytest.raises(ValueError, match="segment_plif: the support"):
        st.semimarkov_viterbi(torch.zeros(1, 3, 2), torch.zeros(2, 2), max_len=2, segment_plif=plif)


def test_plif_support_beyond_float32_is_rejected():
    with pytest.raises(ValueError, match="low and high must lie within"):
        st.PLiF(4, -1e308, 1e308)


def test_window_with_empty_batch_and_length():
    """Defect 9: window_viterbi(torch.zeros(0, 0, 3, 3)) failed in a reshape."""
    score, path = st.window_viterbi(torch.zeros(0, 0, 3, 3))
    assert score.shape == (0,) and path.shape == (0, 0)
    score, path = st.window_viterbi(torch.zeros(2, 0, 3, 3))
    assert score.tolist() == [0.0, 0.0] and path.shape == (2, 0)


@pytest.mark.parametrize("kwargs, exc, message", [
    ({"num_sequences": 0}, ValueError, "num_sequences must be an int >= 1"),
    ({"num_sequences": 4, "num_labels": 0}, ValueError, "num_labels must be an int >= 1"),
    ({"num_sequences": 4, "p_stay": 2}, ValueError, r"p_stay must be a finite number in \[0, 1\]"),
    ({"num_sequences": 4, "noise": float("nan")}, ValueError, "noise must be a finite number"),
    ({"num_sequences": 4, "noise": -1.0}, ValueError, "noise must be a finite number"),
    ({"num_sequences": 2.5}, TypeError, "num_sequences must be an int"),
])
def test_tagging_data_arguments(kwargs, exc, message):
    """Defect 10: make_tagging_data(0), num_labels=0, p_stay=2, noise=nan were accepted."""
    with pytest.raises(exc, match=message):
        st.data.make_tagging_data(**kwargs)


@pytest.mark.parametrize("kwargs, message", [
    ({"n": 0}, "n must be an int >= 1"),
    ({"n": 2, "noise": float("nan")}, "noise must be a finite number"),
    ({"n": 2, "H": 1}, "H must be an int >= 2"),
])
def test_object_data_arguments(kwargs, message):
    from structtorch.data.objects import synthetic_objects

    with pytest.raises(ValueError, match=message):
        synthetic_objects(**kwargs)


def test_bauer_data_sigma_nan():
    from structtorch.data.bauer import bauer_synthetic

    with pytest.raises(ValueError, match="sigma must be a finite number"):
        bauer_synthetic(4, sigma=float("nan"))
    with pytest.raises(ValueError, match=r"T must be an int >= 3"):
        bauer_synthetic(4, 1.0, T=2)


def test_linear_chain_potentials_dtype_and_labels():
    """Defect 10: float64 input failed inside nn.Linear; num_labels=0 was accepted."""
    model = st.LinearChainPotentials(3, 2)
    with pytest.raises(TypeError, match="x has dtype torch.float64 but the model's parameters are torch.float32"):
        model(torch.zeros(1, 4, 3, dtype=torch.float64))
    unary, _ = model.double()(torch.zeros(1, 4, 3, dtype=torch.float64))
    assert unary.dtype == torch.float64
    with pytest.raises(ValueError, match="num_labels must be an int >= 1"):
        st.LinearChainPotentials(3, 0)
    with pytest.raises(ValueError, match="num_labels must be a positive int"):
        st.LinearChainCRF(0)


def test_float32_marginals_of_scores_whose_log_partition_exceeds_float32():
    """Review finding: logZ (1.5e39) exceeds float32 but the marginals (0.5) are representable; the
    compiled path checked the float32-cast logZ and raised."""
    u, a = torch.full((1, 4, 2), 1e38), torch.zeros(2, 2)
    for x in (u, u.clone().requires_grad_()):
        assert torch.allclose(st.marginals(x, a), torch.full((1, 4, 2), 0.5))
    assert torch.allclose(st.LinearChainCRF(2).marginals(u), torch.full((1, 4, 2), 0.5), atol=0.1)


def test_kbest_scores_that_overflow_raise_instead_of_minus_inf():
    """Review finding: lower k-best scores overflowed float32 to -inf next to a real path."""
    u, a = torch.tensor([[[1e38, -2e38], [1e38, -2e38]]]), torch.zeros(2, 2)
    with pytest.raises(ValueError, match="a k-best score overflows torch.float32"):
        st.kbest(u, a, 4)
    scores, paths = st.kbest(torch.randn(2, 2, 2), a, 6)  # fewer than k labelings: -inf with path -1
    assert (scores[:, 4:] == float("-inf")).all() and (paths[:, 4:] == -1).all()
    assert torch.isfinite(scores[:, :4]).all()


def test_scoring_functions_overflow_is_an_error():
    """Review finding: path_score, window_score and the CRF loss returned inf silently."""
    u, a = torch.tensor([[[2e38, 0.0], [2e38, 0.0]]]), torch.zeros(2, 2)
    with pytest.raises(ValueError, match="the path score overflows"):
        st.path_score(u, a, torch.tensor([[0, 0]]))
    assert st.path_score(u, a, torch.tensor([[1, 1]])).item() == 0.0
    with pytest.raises(ValueError, match="the window score overflows"):
        st.window_score(u, torch.tensor([[0, 0]]), torch.tensor([2]))
    assert st.window_score(u, torch.tensor([[-1, -1]])).item() == float("-inf")  # no labeling
    crf = st.LinearChainCRF(2)
    crf.transitions.data.zero_()
    with pytest.raises(ValueError, match="the negative log-likelihood overflows"):
        crf(torch.tensor([[[2e38, -2e38], [2e38, -2e38]]]), torch.tensor([[1, 1]]))
    forbidden = torch.tensor([[[0.0, float("-inf")], [0.0, 0.0]]])
    assert crf(forbidden, torch.tensor([[1, 1]])).item() == float("inf")  # probability 0: a real +inf


def test_window_score_validates_its_arguments():
    with pytest.raises(ValueError, match=r"path must lie in \[0, N\) = \[0, 2\)"):
        st.window_score(torch.zeros(1, 2, 2, 2), torch.tensor([[5, 1]]))
    with pytest.raises(TypeError, match="scores must be a torch.Tensor"):
        st.window_score([[0.0]], torch.tensor([[0]]))
    with pytest.raises(ValueError, match="lengths must lie in"):
        st.window_score(torch.zeros(1, 2, 2, 2), torch.tensor([[0, 1]]), torch.tensor([3]))


def test_float32_finfo_min_masks_crossed_twice_name_the_remedy():
    """Two finfo(float32).min entries on every path sum beyond float32: an overflow error that says
    to use -inf to forbid entries (it used to come back as -inf with a real path)."""
    u = torch.zeros(1, 4, 2)
    u[0, 1:3] = torch.finfo(torch.float32).min
    with pytest.raises(ValueError, match="use -inf rather than a huge finite number"):
        st.viterbi(u, torch.zeros(2, 2))
    u[0, 1:3] = float("-inf")
    assert st.viterbi(u, torch.zeros(2, 2))[0].item() == float("-inf")


def test_loss_augmented_count_stays_int64_for_large_integer_weights():
    """Review finding: integer weights summing beyond the count table came back as float64 counts."""
    u, t = torch.randn(1, 3, 2), torch.zeros(1, 3, dtype=torch.long)
    _, path, count = st.loss_augmented(u, torch.zeros(2, 2), t, weights=torch.tensor([[10**6, 10**6, 1]]))
    assert count.dtype == torch.int64 and count.item() == int(((path != t) * torch.tensor([10**6, 10**6, 1])).sum())


def test_semimarkov_log_partition_of_empty_sequences_is_connected():
    c = torch.zeros(2, 0, 3, requires_grad=True)
    logz = st.semimarkov_log_partition(c, torch.zeros(3, 3), max_len=2)
    logz.sum().backward()
    assert logz.tolist() == [0.0, 0.0] and c.grad.shape == (2, 0, 3)


def test_stability_needs_a_converged_result():
    from structtorch import lp

    u = torch.tensor([[[0, 1], [0, -0.5], [0, -0.5], [0, -0.5], [0, 1.0]]], dtype=torch.float64)
    res = lp.map_lp(u, torch.zeros(4, 2, 2, dtype=torch.float64), lp.grid_edges(1, 5), connected=[1], max_iter=1)
    assert not bool(res.converged[0])
    d = torch.zeros(res.cost.shape[1], dtype=torch.float64)
    d[0] = 1.0
    with pytest.raises(ValueError, match="converged"):
        lp.stability_range(res, d)
