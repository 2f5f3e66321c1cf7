"""The Triton kernels (in Triton's interpreter on CPU tensors; compiled on CUDA): launches per call,
tiling over labels, agreement with the compiled CPU kernels. The brute-force suites run them too,
through the ``backend`` fixture. Every backend is chosen by conftest's ``use_backend`` (which skips
where one cannot run, and fails instead under STRUCTTORCH_REQUIRE_TRITON); launches are counted by
the profiler ranges the kernels run in, never by patching them."""

from __future__ import annotations

import ast
import collections
import os
import re

import pytest
import torch
from conftest import use_backend

import structtorch as st
from structtorch import _backend
from structtorch.profiling import device_ops


def _chain(B, T, N, shared=True, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(B, T, N, generator=g, dtype=dtype)
    a = torch.randn(*((N, N) if shared else (B, max(T - 1, 0), N, N)), generator=g, dtype=dtype)
    u[0, min(1, T - 1)] = float("-inf")  # row 0 infeasible
    a.view(-1)[:: 7] = float("-inf")
    lengths = torch.randint(0, T + 1, (B,), generator=g)
    lengths[0] = T
    return u, a, lengths


@pytest.mark.parametrize("shared", [True, False])
@pytest.mark.parametrize("N", [1, 5, 70])  # 70 > one 64-label tile
def test_triton_matches_compiled(shared, N):
    u, a, lengths = _chain(4, 6, N, shared)
    start, end = torch.randn(N, dtype=torch.float64), torch.randn(4, N, dtype=torch.float64)
    kw = dict(start=start, end=end, lengths=lengths)
    out = {}
    for name in ("compiled", "triton"):
        with use_backend(name):
            uu, aa = u.clone().requires_grad_(), a.clone().requires_grad_()
            score, path = st.viterbi(u, a, **kw)
            logz = st.log_partition(uu, aa, **kw)
            grads = torch.autograd.grad(torch.where(torch.isfinite(logz), logz, 0).sum(), (uu, aa))
            out[name] = (score, path, logz, *grads, st.marginals(u, a, **kw))
    for got, ref in zip(out["triton"], out["compiled"], strict=True):
        if got.is_floating_point():
            torch.testing.assert_close(got, ref, atol=1e-10, rtol=1e-10)
        else:
            assert torch.equal(got, ref)
    assert out["triton"][0][0] == float("-inf") and (out["triton"][1][0] == -1).all()


def test_float32_inputs_accumulate_in_float64():
    u, a, lengths = _chain(3, 8, 4, dtype=torch.float32, seed=1)
    u = u + 1e5
    with use_backend("triton"):
        score, path = st.viterbi(u, a, lengths=lengths)
        logz = st.log_partition(u, a, lengths=lengths)
    ref_score, ref_path = st.viterbi(u.double(), a.double(), lengths=lengths)
    assert score.dtype == torch.float32 and torch.equal(path, ref_path)
    torch.testing.assert_close(logz.double(), st.log_partition(u.double(), a.double(), lengths=lengths))


def launches(fn) -> collections.Counter:
    """The dynamic programs' Triton launches of ``fn()``, by kernel ("chain_viterbi",
    "semimarkov_backward", ...), as :func:`structtorch.profiling.device_ops` counts them (the value
    checks' own launches, "check_values", aside: test_launch_budget counts everything)."""
    kernels = device_ops(fn).kernels
    del kernels["check_values"]
    return kernels


@pytest.mark.parametrize("T", [3, 12])
def test_launches_per_call_do_not_grow_with_T(T):
    u, a, lengths = _chain(2, T, 3)
    expected = {"viterbi": {"chain_viterbi": 1}, "log_partition": {"chain_log_partition": 1},
                "log_partition + backward": {"chain_log_partition": 1, "chain_backward": 1},
                "marginals": {"chain_log_partition": 1, "chain_backward": 1},
                "marginals + backward": {"chain_log_partition": 2, "chain_backward": 1, "chain_marginals_backward": 1}}
    with use_backend("triton"):
        for name, fn in {
            "viterbi": lambda: st.viterbi(u, a),
            "log_partition": lambda: st.log_partition(u, a),
            "log_partition + backward": lambda: st.log_partition(u.clone().requires_grad_(), a).sum().backward(),
            "marginals": lambda: st.marginals(u, a),
            "marginals + backward": lambda: (st.marginals(u.clone().requires_grad_(), a) * u).sum().backward(),
        }.items():
            counts = launches(fn)
            assert counts == expected[name], (name, counts)


@pytest.mark.parametrize("T", [3, 12])
def test_kbest_sample_and_windows_are_one_kernel_each(T):
    """k-best and order-l windows: one launch; sampling: the log-partition's forward and the sampler."""
    u, a, lengths = _chain(2, T, 3)
    windows = torch.randn(2, T, 3, 3, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(T))
    with use_backend("triton"):
        assert launches(lambda: st.kbest(u, a, 4, lengths=lengths)) == {"chain_kbest": 1}
        assert launches(lambda: st.sample(u, a, 3, lengths=lengths)) == {"chain_log_partition": 1, "chain_sample": 1}
        assert launches(lambda: st.window_viterbi(windows, lengths=lengths)) == {"chain_window_viterbi": 1}


def _semimarkov(B, T, N, S, seed=0, segment=False, plif=False):
    g = torch.Generator().manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    content = randn(B, T, N)
    content[0, 1, 0] = float("-inf")
    trans = randn(N, N)
    trans[0, -1] = float("-inf")
    kw = dict(max_len=S, length_scores=randn(S, N), boundary=randn(B, T, N), start=randn(N), end=randn(B, N),
              lengths=torch.randint(0, T + 1, (B,), generator=g).index_fill_(0, torch.tensor([0]), T))
    kw["boundary"][0, T // 2, :1] = float("-inf")
    if segment:
        kw["segment_scores"] = randn(B, T, S, N)
    if plif:
        kw["segment_plif"] = st.SegmentPLiF(randn(B, T, N), randn(N, 6), -1.0, 1.0)
    return content, trans, kw


@pytest.mark.parametrize("B, T, N, S, segment, plif", [
    (3, 7, 3, 3, False, False), (3, 9, 2, 4, True, False), (2, 8, 3, 20, False, True),
    (4, 6, 20, 3, True, False), (2, 5, 40, 2, False, False), (2, 36, 2, 36, False, False)])  # > 2 tiles of 16
def test_semimarkov_triton_matches_compiled(B, T, N, S, segment, plif):
    content, trans, kw = _semimarkov(B, T, N, S, segment=segment, plif=plif)
    out = {}
    for name in ("compiled", "triton"):
        with use_backend(name):
            score, labels, starts = st.semimarkov_viterbi(content, trans, **kw)
            no_plif = {k: v for k, v in kw.items() if k != "segment_plif"}
            inputs = [content.clone().requires_grad_(), trans.clone().requires_grad_()]
            extra = {k: no_plif[k].clone().requires_grad_() for k in ("length_scores", "boundary", "start", "end")}
            if segment:
                extra["segment_scores"] = no_plif["segment_scores"].clone().requires_grad_()
            logz = st.semimarkov_log_partition(*inputs, **{**no_plif, **extra})
            grads = torch.autograd.grad(torch.where(torch.isfinite(logz), logz, 0).sum(), [*inputs, *extra.values()])
            out[name] = (score, labels, starts, logz, *grads)
    for got, ref in zip(out["triton"], out["compiled"], strict=True):
        if got.is_floating_point():
            torch.testing.assert_close(got, ref, atol=1e-10, rtol=1e-10)
        else:
            assert torch.equal(got, ref)


def test_semimarkov_log_partition_with_segment_plif():
    """The Triton log-partition carries segment PLiFs: value and gradients w.r.t. content, transitions, tracks and ordinates match the reference."""
    content, trans, kw = _semimarkov(3, 9, 3, 4, seed=3, plif=True)
    plif = kw.pop("segment_plif")
    out = {}
    for name in ("torch", "triton"):
        inputs = [x.clone().requires_grad_() for x in (content, trans, plif.tracks, plif.ordinates)]
        with use_backend(name):
            logz = st.semimarkov_log_partition(*inputs[:2], segment_plif=st.SegmentPLiF(*inputs[2:], -1.0, 1.0),
                                               **kw)
            out[name] = (logz, *torch.autograd.grad(torch.where(torch.isfinite(logz), logz, 0).sum(), inputs))
    for got, ref in zip(out["triton"], out["torch"], strict=True):
        torch.testing.assert_close(got, ref, atol=1e-10, rtol=1e-10)


def test_semimarkov_launches_per_call_do_not_grow_with_T():
    for T in (4, 16):
        content, trans, kw = _semimarkov(2, T, 3, 3)
        with use_backend("triton"):
            def viterbi(content=content, trans=trans, kw=kw):
                return st.semimarkov_viterbi(content, trans, **kw)

            def log_partition(content=content, trans=trans, kw=kw):
                st.semimarkov_log_partition(content.clone().requires_grad_(), trans, **kw).sum().backward()

            assert launches(viterbi) == {"semimarkov_viterbi": 1}
            counts = launches(log_partition)
            assert counts == {"semimarkov_log_partition": 1, "semimarkov_backward_zero": 1, "semimarkov_backward": 1}


@pytest.mark.parametrize("shared", [True, False])
@pytest.mark.parametrize("rescaling, h, weighted", [
    ("slack", None, False), ("margin", "square", False), ("slack", "negative", False), ("slack", None, True),
    ("margin", None, True)])
def test_hamming_tables_match_compiled(shared, rescaling, h, weighted):
    u, a, lengths = _chain(3, 7, 4, shared, seed=5)
    u[0] = u[0].clamp(min=-5)  # a feasible target in every row
    a = a.clamp(min=-5)
    g = torch.Generator().manual_seed(6)
    target = torch.randint(0, 4, (3, 7), generator=g)
    weights = torch.randint(0, 3, (3, 7), generator=g) if weighted else None
    hfun = {None: None, "square": lambda k: k**2, "negative": lambda k: 2 - k}[h]
    kw = dict(h=hfun, rescaling=rescaling, lengths=lengths, weights=weights, algorithm="hamming")
    with use_backend("compiled"):
        ref = st.loss_augmented(u, a, target, **kw)
    got = []
    with use_backend("triton"):
        counts = launches(lambda: got.extend(st.loss_augmented(u, a, target, **kw)))
    assert counts["hamming_table"] >= 1  # the Triton tables ran (twice for a negative slack h: the minimum table)
    assert torch.equal(got[1], ref[1]) and torch.equal(got[2], ref[2])
    torch.testing.assert_close(got[0], ref[0])


COMPILE_PROCESSES = 2


def test_kernels_compile_for_a_gpu():
    """The interpreter forgives what the compiler does not (non-constexpr globals, loop-carried types
    that change): compile every kernel ahead of time for a Hopper GPU (sm_90), no GPU needed, in a
    process without TRITON_INTERPRET (see compile_kernels.py). Variants whose kernel source,
    signature, launch settings and Triton release are those of the manifest (tests/data/
    compiled_kernels.json, written by ``compile_kernels.py --record``) compiled without error or
    spill before and are skipped: a cold compile of all 471 took 145-283 s of the suite."""
    if not _backend.triton_installed():
        if os.environ.get("STRUCTTORCH_REQUIRE_TRITON"):
            raise AssertionError("Triton is not installed")
        pytest.skip("Triton is not installed")
    import subprocess
    import sys
    from pathlib import Path

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    script = Path(__file__).parent / "compile_kernels.py"
    parts = COMPILE_PROCESSES  # the variants to compile split over processes
    procs = [subprocess.Popen([sys.executable, str(script), f"{k}/{parts}", "--skip-known"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for k in range(parts)]
    outputs = [proc.communicate(timeout=900) for proc in procs]
    if any(proc.returncode == 3 for proc in procs):
        pytest.skip(outputs[0][0].strip())
    for proc, (out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, out[-6000:] + err[-3000:]
        # register spills (stack or local memory per thread, read from the cubins): none; a kernel
        # that starts spilling fails here
        spilling = next(line for line in out.splitlines() if line.startswith("spills:"))
        assert not ast.literal_eval(spilling.split(" variants ", 1)[1]), spilling
    compiled = sum(out.count("\nok  ") + out.startswith("ok  ") for out, _ in outputs)
    known = sum(int(re.search(r"known: (\d+)", out).group(1)) for out, _ in outputs)
    assert compiled + known >= 400, f"only {compiled} kernel variants compiled and {known} known"
