"""The Triton kernels (in Triton's interpreter on CPU tensors; compiled on CUDA): launches per call,
tiling over labels, agreement with the compiled CPU kernels. The brute-force suites run them too,
through the ``backend`` fixture."""

from __future__ import annotations

import os

import pytest
import torch

import structtorch as st
from structtorch import _backend

pytestmark = pytest.mark.skipif(
    _backend._triton_reason(torch.zeros(())) is not None and not os.environ.get("STRUCTTORCH_REQUIRE_TRITON"),
    reason="the triton backend cannot run here",
)


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
        with st.use_backend(name):
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
    with st.use_backend("triton"):
        score, path = st.viterbi(u, a, lengths=lengths)
        logz = st.log_partition(u, a, lengths=lengths)
    ref_score, ref_path = st.viterbi(u.double(), a.double(), lengths=lengths)
    assert score.dtype == torch.float32 and torch.equal(path, ref_path)
    torch.testing.assert_close(logz.double(), st.log_partition(u.double(), a.double(), lengths=lengths))


def _count_launches(monkeypatch):
    from structtorch.chain import _triton

    counts = {"n": 0}
    for name in ("_viterbi_kernel", "_logz_kernel", "_backward_kernel"):
        kernel = getattr(_triton, name)

        class Counted:
            def __init__(self, k):
                self.k = k

            def __getitem__(self, grid):
                counts["n"] += 1
                return self.k[grid]

        monkeypatch.setattr(_triton, name, Counted(kernel))
    return counts


@pytest.mark.parametrize("T", [3, 12])
def test_launches_per_call_do_not_grow_with_T(monkeypatch, T):
    counts = _count_launches(monkeypatch)
    u, a, lengths = _chain(2, T, 3)
    expected = {"viterbi": 1, "log_partition": 1, "log_partition + backward": 2, "marginals": 2}
    with st.use_backend("triton"):
        for name, fn in {
            "viterbi": lambda: st.viterbi(u, a),
            "log_partition": lambda: st.log_partition(u, a),
            "log_partition + backward": lambda: st.log_partition(u.clone().requires_grad_(), a).sum().backward(),
            "marginals": lambda: st.marginals(u, a),
        }.items():
            counts["n"] = 0
            fn()
            assert counts["n"] == expected[name], (name, counts["n"])
