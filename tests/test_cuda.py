"""The DPs on CUDA match the CPU results (skipped without a GPU)."""

from __future__ import annotations

import pytest
import torch
from conftest import requires_cuda

import structtorch as st

pytestmark = [requires_cuda, pytest.mark.cuda]


@pytest.mark.parametrize("backend", ["triton", "torch"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shared", [True, False])
@pytest.mark.parametrize("N", [6, 70])
def test_chain_on_cuda_matches_cpu(backend, dtype, shared, N):
    """Every chain DP on CUDA (Triton kernels or PyTorch loops) against the compiled CPU kernels."""
    torch.manual_seed(0)
    B, T = 5, 17
    u = torch.randn(B, T, N, dtype=torch.float64)
    A = torch.randn(*((N, N) if shared else (B, T - 1, N, N)), dtype=torch.float64)
    A[..., 0, 1] = float("-inf")
    lengths = torch.tensor([17, 9, 1, 0, 4])
    cpu = [x.to(dtype) for x in (u, A)]
    s_cpu, p_cpu = st.viterbi(*cpu, lengths=lengths)
    logz_cpu = st.log_partition(*cpu, lengths=lengths)
    marg_cpu = st.marginals(*cpu, lengths=lengths)
    cpu_grad = [x.clone().requires_grad_() for x in cpu]
    st.log_partition(*cpu_grad, lengths=lengths).sum().backward()
    gpu = [x.to(dtype).cuda().requires_grad_() for x in (u, A)]
    tol = dict(atol=1e-4, rtol=1e-4) if dtype == torch.float32 else {}
    with st.use_backend(backend):
        s_gpu, p_gpu = st.viterbi(*gpu, lengths=lengths.cuda())
        logz = st.log_partition(*gpu, lengths=lengths.cuda())
        logz.sum().backward()
        marg = st.marginals(*[x.detach() for x in gpu], lengths=lengths.cuda())
    assert s_gpu.device.type == "cuda" and p_gpu.device.type == "cuda"
    assert torch.equal(p_gpu.cpu(), p_cpu)
    torch.testing.assert_close(s_gpu.detach().cpu(), s_cpu, **tol)
    torch.testing.assert_close(logz.detach().cpu(), logz_cpu, **tol)
    torch.testing.assert_close(gpu[0].grad.cpu(), cpu_grad[0].grad, **tol)
    torch.testing.assert_close(gpu[1].grad.cpu(), cpu_grad[1].grad, **tol)
    torch.testing.assert_close(marg.cpu(), marg_cpu, **tol)
    scores, paths = st.kbest(*[x.detach() for x in gpu], 3, lengths=lengths.cuda())
    assert torch.equal(paths.cpu(), st.kbest(*cpu, 3, lengths=lengths)[1])


def test_cuda_defaults_to_triton_when_installed():
    from structtorch import _backend

    x = torch.zeros(1, device="cuda")
    assert _backend.backend_for(x) == ("triton" if _backend.triton_installed() else "torch")


def test_crf_module_on_cuda():
    crf = st.LinearChainCRF(4).cuda()
    u = torch.randn(3, 6, 4, device="cuda")
    labels = torch.randint(0, 4, (3, 6), device="cuda")
    nll = crf(u, labels, lengths=torch.tensor([6, 3, 1], device="cuda"))
    nll.sum().backward()
    assert nll.device.type == "cuda" and crf.transitions.grad.device.type == "cuda"


def test_window_on_cuda():
    g = torch.randn(2, 5, 3, 3, 3, device="cuda")
    s_gpu, p_gpu = st.window_viterbi(g)
    s_cpu, p_cpu = st.window_viterbi(g.cpu())
    assert torch.equal(p_gpu.cpu(), p_cpu)
    torch.testing.assert_close(s_gpu.cpu(), s_cpu)


@pytest.mark.parametrize("validate", [True, False])
def test_chain_hot_path_does_not_synchronize(validate):
    """Viterbi, log-partition forward and backward and marginals on the triton backend, with value
    checks on (asynchronous assertions) and off, never synchronize with the host."""
    from structtorch import _backend

    if not _backend.triton_installed():
        pytest.skip("Triton is not installed")
    u = torch.randn(8, 50, 16, device="cuda", requires_grad=True)
    a = torch.randn(16, 16, device="cuda", requires_grad=True)
    lengths = torch.randint(1, 51, (8,), device="cuda")

    def run():
        st.viterbi(u, a, lengths=lengths)
        st.log_partition(u, a, lengths=lengths).sum().backward()
        st.marginals(u.detach(), a.detach(), lengths=lengths)

    with st.use_backend("triton"):
        run()  # compiles the kernels
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            with st.set_validation(validate):
                run()
        finally:
            torch.cuda.set_sync_debug_mode(0)


@pytest.mark.parametrize("backend", ["triton", "torch"])
@pytest.mark.parametrize("segment", [False, True])
def test_semimarkov_on_cuda_matches_cpu(backend, segment):
    torch.manual_seed(1)
    B, T, S, N = 4, 30, 6, 5
    content = torch.randn(B, T, N, dtype=torch.float64)
    content[0, 3, 1] = float("-inf")
    trans = torch.randn(N, N, dtype=torch.float64)
    kw = dict(max_len=S, length_scores=torch.randn(S, N, dtype=torch.float64),
              boundary=torch.randn(B, T, N, dtype=torch.float64), lengths=torch.tensor([30, 17, 1, 0]))
    if segment:
        kw["segment_scores"] = torch.randn(B, T, S, N, dtype=torch.float64)
    plif = st.SegmentPLiF(torch.randn(B, T, N, dtype=torch.float64), torch.randn(N, 5, dtype=torch.float64), -1.0, 1.0)
    ref = st.semimarkov_viterbi(content, trans, segment_plif=plif, **kw)
    c = content.clone().requires_grad_()
    ref_logz = st.semimarkov_log_partition(c, trans, **kw)
    (ref_grad,) = torch.autograd.grad(ref_logz.sum(), c)
    gpu = {k: v.cuda() if isinstance(v, torch.Tensor) else v for k, v in kw.items()}
    gplif = st.SegmentPLiF(plif.tracks.cuda(), plif.ordinates.cuda(), -1.0, 1.0)
    with st.use_backend(backend):
        got = st.semimarkov_viterbi(content.cuda(), trans.cuda(), segment_plif=gplif, **gpu)
        c = content.cuda().requires_grad_()
        logz = st.semimarkov_log_partition(c, trans.cuda(), **gpu)
        (grad,) = torch.autograd.grad(logz.sum(), c)
    assert torch.equal(got[1].cpu(), ref[1]) and torch.equal(got[2].cpu(), ref[2])
    torch.testing.assert_close(got[0].cpu(), ref[0])
    torch.testing.assert_close(logz.detach().cpu(), ref_logz.detach())
    torch.testing.assert_close(grad.cpu(), ref_grad)


@pytest.mark.parametrize("backend", ["triton", "torch"])
@pytest.mark.parametrize("rescaling, h", [("slack", None), ("margin", lambda k: k**2), ("slack", lambda k: 3 - k)])
def test_loss_augmented_on_cuda_matches_cpu(backend, rescaling, h):
    torch.manual_seed(2)
    B, T, N = 5, 20, 4
    u, a = torch.randn(B, T, N), torch.randn(N, N)
    y, lengths = torch.randint(0, N, (B, T)), torch.tensor([20, 11, 3, 1, 0])
    ref = st.loss_augmented(u, a, y, h=h, rescaling=rescaling, lengths=lengths)
    with st.use_backend(backend):
        got = st.loss_augmented(u.cuda(), a.cuda(), y.cuda(), h=h, rescaling=rescaling, lengths=lengths.cuda())
    assert torch.equal(got[1].cpu(), ref[1]) and torch.equal(got[2].cpu(), ref[2])
    torch.testing.assert_close(got[0].cpu(), ref[0])


def test_autocast_and_compile_on_cuda():
    """A CRF tagger step under CUDA autocast (bf16 emissions, float32 parameters) compiled whole with
    inductor equals the eager float32 step on the emissions it produced."""
    torch.manual_seed(3)
    encoder = torch.nn.Linear(6, 5).cuda()
    crf = st.LinearChainCRF(5).cuda()
    x, y = torch.randn(4, 9, 6, device="cuda"), torch.randint(0, 5, (4, 9), device="cuda")
    lengths = torch.tensor([9, 5, 1, 7], device="cuda")

    def step(x):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            emissions = encoder(x)
            return crf(emissions, y, lengths=lengths), emissions

    nll, emissions = torch.compile(step, fullgraph=True)(x)
    assert emissions.dtype == torch.bfloat16 and nll.dtype == torch.float32
    torch.testing.assert_close(nll, crf(emissions.float(), y, lengths=lengths), rtol=1e-5, atol=1e-4)
    nll.sum().backward()
    assert torch.isfinite(encoder.weight.grad).all() and encoder.weight.grad.abs().sum() > 0


def test_semisup_on_cuda_matches_cpu():
    import functools

    from structtorch.semisup import GraphRegularizedKernel, knn_graph, laplacian_penalty, rbf_kernel

    x = torch.randn(300, 8, dtype=torch.float64)
    W, Wc = knn_graph(x, 5, chunk=64), knn_graph(x.cuda(), 5, chunk=64)
    assert Wc.device.type == "cuda"
    torch.testing.assert_close(Wc.to_dense().cpu(), W.to_dense())
    f = torch.randn(300, 3, dtype=torch.float64)
    torch.testing.assert_close(laplacian_penalty(f.cuda(), Wc).cpu(), laplacian_penalty(f, W))
    k = functools.partial(rbf_kernel, gamma=0.2)
    for method in ("dense", "cg"):
        kc = GraphRegularizedKernel(k, x.cuda(), Wc, 0.1, 0.9, method=method)(x[:20].cuda(), x[:30].cuda())
        torch.testing.assert_close(kc.cpu(), GraphRegularizedKernel(k, x, W, 0.1, 0.9)(x[:20], x[:30]))


def _training_step(loss_name: str):
    """A tagger (linear layer + structured loss) and one training step on static CUDA tensors."""
    torch.manual_seed(0)
    B, T, F, N = 4, 9, 8, 5
    x = torch.randn(B, T, F, device="cuda")
    tags = torch.randint(0, N, (B, T), device="cuda")
    lengths = torch.tensor([9, 7, 3, 1], device="cuda")
    mask = torch.arange(T, device="cuda") < lengths[:, None]
    emit = torch.nn.Linear(F, N).cuda()
    if loss_name == "crf":
        head = st.LinearChainCRF(N).cuda()

        def loss_fn():
            return head(emit(x), tags, mask, reduction="mean")
    else:
        head = torch.nn.Parameter(torch.zeros(N, N, device="cuda"))
        hinge = st.StructuredHingeLoss(rescaling="slack")

        def loss_fn():
            return hinge(emit(x), head, tags, lengths=lengths).mean()
    params = [*emit.parameters(), *(head.parameters() if isinstance(head, torch.nn.Module) else [head])]
    opt = torch.optim.Adam(params, lr=0.1, capturable=True)

    def step():
        opt.zero_grad(set_to_none=False)
        loss = loss_fn()
        loss.backward()
        opt.step()
        return loss

    return step, params


@pytest.mark.parametrize("loss_name", ["crf", "hinge"])
def test_training_step_replays_in_a_cuda_graph(loss_name):
    """A whole training step (forward, structured loss, backward, optimizer step) has no host
    sync with validation off, so it is captured in a CUDA graph; replays equal eager steps."""
    with st.set_validation(False):
        eager_step, eager_params = _training_step(loss_name)
        eager = [float(eager_step().detach()) for _ in range(4)]
        graph_step, graph_params = _training_step(loss_name)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm up on a side stream (kernels compiled, state allocated)
            first = graph_step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_loss = graph_step()
        replayed = [float(first)]
        for _ in range(3):
            graph.replay()
            replayed.append(float(static_loss))
    torch.testing.assert_close(torch.tensor(replayed), torch.tensor(eager), rtol=1e-5, atol=1e-6)
    for a, b in zip(graph_params, eager_params, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
