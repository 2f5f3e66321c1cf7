"""The chunked (parallel-in-time) chain kernels of ``structtorch/chain/_triton_scan.py``: exact
against brute force, and equal to the serial Triton kernels to rounding, in Triton's interpreter
(conftest sets TRITON_INTERPRET on machines without CUDA). Small shapes with forced short chunks, so
that several chunks, a partial last chunk, lengths ending inside or at the edge of a chunk, empty
and infeasible rows all occur."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from brute import Instance, brute_best, brute_edge_marginals, brute_logsumexp, enumerate_row, instances, pad
from hypothesis import given, settings
from hypothesis import strategies as hs

from structtorch import _backend
from structtorch.chain.layout import Chain, check_chain

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
INF = float("-inf")


@pytest.fixture(scope="module")
def kernels():
    """(serial, scan): the two kernel modules; skips where the triton backend cannot run."""
    reason = _backend._triton_reason(torch.zeros((), device=DEVICE))
    if reason is not None:
        pytest.skip(reason)
    from structtorch.chain import _triton, _triton_scan

    return _triton, _triton_scan


def _chain(inst: Instance) -> Chain:
    def dev(x):
        return None if x is None else x.to(DEVICE)

    return check_chain(dev(inst.unary), dev(inst.transitions), dev(inst.start), dev(inst.end), dev(inst.lengths))


def _close(got: torch.Tensor, ref, atol: float) -> None:
    """Equal where infinite, within atol elsewhere."""
    ref = torch.as_tensor(np.asarray(ref), dtype=torch.float64)
    got = got.double().cpu()
    assert torch.equal(torch.isinf(got), torch.isinf(ref)), (got, ref)
    torch.testing.assert_close(got[~torch.isinf(ref)], ref[~torch.isinf(ref)], atol=atol, rtol=0)


def _brute_gradients(inst: Instance, g: torch.Tensor):
    """(unary, transitions, start, end) gradients of sum_b g[b] logZ_b by enumeration (float64)."""
    B, T, N = inst.unary.shape
    gu, gs, ge = np.zeros((B, T, N)), np.zeros((B, N)), np.zeros((B, N))
    edges = np.zeros((B, max(T - 1, 0), N, N))
    for b in range(B):
        node, edge = brute_edge_marginals(inst, b)
        L = int(inst.lengths[b])
        gu[b] = g[b].item() * node
        edges[b] = g[b].item() * edge
        if L > 0:
            gs[b], ge[b] = gu[b, 0], gu[b, L - 1]
    return gu, edges.sum((0, 1)) if inst.transitions.dim() == 2 else edges, gs, ge


def check(inst: Instance, chunk: int, kernels) -> None:
    """Every chunked kernel against brute force and against the serial kernels."""
    serial, scan = kernels
    chain = _chain(inst)
    B, T, N = chain.shape
    mask = chain.mask()
    rows = [enumerate_row(inst, b) for b in range(B)]
    # the log-partition and alpha
    logz, (alpha,) = scan.log_partition_forward(chain, chunk=chunk)
    ref_logz, (ref_alpha,) = serial.log_partition_forward(chain)
    _close(logz, [brute_logsumexp([s for _, s in r]) if int(inst.lengths[b]) else 0.0 for b, r in enumerate(rows)],
           inst.tol)
    _close(logz, ref_logz, 1e-9)
    _close(alpha[mask], ref_alpha[mask].cpu(), 1e-9)  # rows past each length: unused
    # Viterbi
    best, path = scan.viterbi(chain, chunk=chunk)
    ref_best, ref_path = serial.viterbi(chain)
    expected = [brute_best(r) for r in rows]
    _close(best, [s for s, _ in expected], inst.tol)
    _close(best, ref_best, 1e-9)
    assert path.dtype == torch.long
    assert path.cpu().tolist() == [pad(y if y is not None else (), T) for _, y in expected]
    assert torch.equal(path, ref_path)
    # the backward: chunked, and the serial one fed with the chunked alpha
    g = torch.linspace(0.5, 2.0, B, dtype=torch.float64, device=DEVICE)
    grads = scan.log_partition_backward(chain, logz, (alpha,), g, chunk=chunk)
    ref_grads = serial.log_partition_backward(chain, ref_logz, (ref_alpha,), g)
    fed = serial.log_partition_backward(chain, logz, (alpha,), g)
    atol = 1e-9 if chain.unary.dtype == torch.float64 else 1e-6
    for got, ref, other, brute in zip(grads, ref_grads, fed, _brute_gradients(inst, g.cpu()), strict=True):
        assert got.dtype == chain.unary.dtype and got.shape == ref.shape
        _close(got, ref.cpu(), atol)
        _close(other, ref.cpu(), atol)
        _close(got, brute, 1e-9 if chain.unary.dtype == torch.float64 else 1e-5)
    check_nll(inst, chain, chunk, kernels, g, atol)


def check_nll(inst: Instance, chain: Chain, chunk: int | None, kernels, g: torch.Tensor, atol: float) -> None:
    """The CRF loss logZ - score(labels) and its gradients, and the node marginals, against the
    serial kernels (and the loss against brute force)."""
    serial, scan = kernels
    B, T, N = chain.shape
    labels = torch.randint(0, N, (B, T), generator=torch.Generator().manual_seed(T)).to(DEVICE)
    nll, logz, (alpha,) = scan.nll_forward(chain, labels, chunk=chunk)
    ref_nll, ref_logz, (ref_alpha,) = serial.nll_forward(chain, labels)
    _close(nll, ref_nll.cpu(), 1e-9)
    expected = []
    for b in range(B):
        rows = dict(enumerate_row(inst, b))
        L = int(inst.lengths[b])
        z, score = brute_logsumexp(list(rows.values())), rows[tuple(labels[b, :L].tolist())]
        expected.append(float("inf") if z == INF else z - score)
    _close(nll, expected, inst.tol)
    grads = scan.nll_backward(chain, labels, logz, (alpha,), g, chunk=chunk)
    for got, ref in zip(grads, serial.nll_backward(chain, labels, ref_logz, (ref_alpha,), g), strict=True):
        assert got.dtype == ref.dtype and got.shape == ref.shape
        _close(got, ref.cpu(), atol)
    _close(scan.node_marginals(chain, chunk=chunk), serial.node_marginals(chain).cpu(), atol)


def _instance(B, T, N, lengths, shared, dtype=torch.float64, seed=0, p_inf=0.0, edit=None) -> Instance:
    """A random instance (integer-valued in float32, so that its sums are exact)."""
    g = torch.Generator().manual_seed(seed)

    def make(*shape):
        x = torch.randn(*shape, generator=g, dtype=torch.float64)
        x = x.mul(2).round() if dtype == torch.float32 else x
        x[torch.rand(shape, generator=g) < p_inf] = INF
        return x.to(dtype)

    inst = Instance(make(B, T, N), make(N, N) if shared else make(B, max(T - 1, 0), N, N), make(B, N), make(B, N),
                    torch.tensor(lengths))
    if edit is not None:
        edit(inst)
    return inst


def _infeasible_row(inst: Instance) -> None:
    inst.unary[0, 2] = INF  # no label at position 2 of row 0


def _cut_row(inst: Instance) -> None:
    """Row 0: every transition into position 5 forbidden (per-position transitions)."""
    inst.transitions[0, 4] = INF


CASES = {  # (B, T, N, lengths, shared, dtype, chunk, p_inf, edit)
    "partial-last-chunk": (3, 9, 3, [9, 4, 0], True, torch.float64, 2, 0.2, None),
    "edges-float32": (3, 8, 2, [8, 6, 5], False, torch.float32, 3, 0.2, None),
    "infeasible-row": (2, 7, 3, [7, 1], True, torch.float64, 3, 0.3, _infeasible_row),
    "one-label": (2, 6, 1, [6, 3], False, torch.float64, 2, 0.0, None),
    "cut-row": (3, 9, 3, [9, 8, 2], False, torch.float64, 4, 0.1, _cut_row),
    "chunk-of-one": (2, 5, 2, [5, 4], True, torch.float32, 1, 0.2, None),
    "default-chunk": (2, 5, 3, [5, 0], False, torch.float64, None, 0.2, None),
}


@pytest.mark.parametrize("case", list(CASES))
def test_scan_cases(case, kernels):
    B, T, N, lengths, shared, dtype, chunk, p_inf, edit = CASES[case]
    check(_instance(B, T, N, lengths, shared, dtype, seed=len(case), p_inf=p_inf, edit=edit), chunk, kernels)


@settings(max_examples=6)
@given(inst=instances(max_t=7, max_n=3, max_b=3), chunk=hs.sampled_from([2, 3]))
def test_scan_random(inst, chunk, kernels):
    check(inst, chunk, kernels)


def test_plan():
    from structtorch.chain import _triton_scan as scan  # Triton-free host arithmetic

    assert scan.chunk_length(1, 8) == scan.MIN_CHUNK and scan.chunk_length(100000, 8) ** 2 >= 100000
    assert scan.chunk_length(100000, 8) < 400
    assert scan.use_scan(1, 100000, 8) and not scan.use_scan(256, 100000, 8) and not scan.use_scan(1, 100, 8)


def test_public_calls_take_the_scan_for_few_long_sequences(kernels, monkeypatch):
    """The dispatch: where ``use_scan`` says so, viterbi, the log-partition with its gradients and
    the CRF loss run the chunked kernels (chunks of 2 here) and equal the torch backend."""
    from conftest import use_backend

    import structtorch as st

    _, scan = kernels
    calls = []
    monkeypatch.setattr(scan, "use_scan", lambda B, T, N: calls.append((B, T, N)) or True)
    monkeypatch.setattr(scan, "chunk_length", lambda T, N: 2)
    g = torch.Generator().manual_seed(3)
    u = torch.randn(2, 7, 3, generator=g, dtype=torch.float64, requires_grad=True)
    a = torch.randn(3, 3, generator=g, dtype=torch.float64, requires_grad=True)
    lengths = torch.tensor([7, 4])
    tags = torch.randint(0, 3, (2, 7), generator=g)
    crf = st.LinearChainCRF(3).double()
    results = {}
    for backend in ("triton", "torch"):
        with use_backend(backend):
            score, path = st.viterbi(u, a, lengths=lengths)
            logz = st.log_partition(u, a, lengths=lengths)
            nll = crf(u, tags, lengths=lengths)
            grads = torch.autograd.grad(logz.sum() + nll.sum(), (u, a))
            results[backend] = (score, path, logz, nll, *grads)
    assert calls  # the chunked kernels ran
    for got, want in zip(results["triton"], results["torch"], strict=True):
        torch.testing.assert_close(got, want)
