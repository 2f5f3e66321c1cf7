"""The DPs on CUDA match the CPU results (skipped without a GPU)."""

from __future__ import annotations

import pytest
import torch
from conftest import requires_cuda

import structtorch as st

pytestmark = [requires_cuda, pytest.mark.cuda]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shared", [True, False])
def test_chain_on_cuda_matches_cpu(dtype, shared):
    torch.manual_seed(0)
    B, T, N = 5, 17, 6
    u = torch.randn(B, T, N, dtype=torch.float64)
    A = torch.randn(*((N, N) if shared else (B, T - 1, N, N)), dtype=torch.float64)
    A[..., 0, 1] = float("-inf")
    lengths = torch.tensor([17, 9, 1, 0, 4])
    cpu = [x.to(dtype) for x in (u, A)]
    gpu = [x.to(dtype).cuda().requires_grad_() for x in (u, A)]
    s_cpu, p_cpu = st.viterbi(*cpu, lengths=lengths)
    s_gpu, p_gpu = st.viterbi(*gpu, lengths=lengths.cuda())
    assert s_gpu.device.type == "cuda" and p_gpu.device.type == "cuda"
    assert torch.equal(p_gpu.cpu(), p_cpu)
    torch.testing.assert_close(s_gpu.detach().cpu(), s_cpu)
    logz = st.log_partition(*gpu, lengths=lengths.cuda())
    torch.testing.assert_close(logz.detach().cpu(), st.log_partition(*cpu, lengths=lengths))
    logz.sum().backward()
    torch.testing.assert_close(gpu[0].grad.cpu(), st.marginals(*cpu, lengths=lengths))
    scores, paths = st.kbest(*[x.detach() for x in gpu], 3, lengths=lengths.cuda())
    assert torch.equal(paths.cpu(), st.kbest(*cpu, 3, lengths=lengths)[1])


def test_crf_module_on_cuda():
    crf = st.LinearChainCRF(4).cuda()
    u = torch.randn(3, 6, 4, device="cuda")
    labels = torch.randint(0, 4, (3, 6), device="cuda")
    nll = crf(u, labels, torch.tensor([6, 3, 1], device="cuda"))
    nll.sum().backward()
    assert nll.device.type == "cuda" and crf.transitions.grad.device.type == "cuda"


def test_window_on_cuda():
    g = torch.randn(2, 5, 3, 3, 3, device="cuda")
    s_gpu, p_gpu = st.viterbi_window(g)
    s_cpu, p_cpu = st.viterbi_window(g.cpu())
    assert torch.equal(p_gpu.cpu(), p_cpu)
    torch.testing.assert_close(s_gpu.cpu(), s_cpu)
