"""The backend switch: use_backend (context manager and plain call), STRUCTTORCH_BACKEND, fallbacks."""

from __future__ import annotations

import warnings
from unittest import mock

import pytest
import torch

import structtorch as st
from structtorch import _backend
from structtorch._extension import chain_ops

X = torch.zeros(1, 2, 2)


@pytest.fixture(autouse=True)
def clean_state(monkeypatch):
    monkeypatch.delenv(_backend.ENV, raising=False)
    monkeypatch.setitem(_backend._state, "name", None)
    monkeypatch.setattr(_backend, "_warned", set())


def test_defaults_follow_the_device():
    expected = "compiled" if chain_ops() is not None else "torch"
    assert _backend.backend_for(X) == expected
    meta = torch.empty(1, 2, 2, device="meta")
    assert _backend.backend_for(meta) == "torch"


def test_context_manager_restores_and_plain_call_persists():
    with st.use_backend("torch"):
        assert _backend.backend_for(X) == "torch"
        with st.use_backend("auto"):
            assert _backend.requested() is None
        assert _backend.backend_for(X) == "torch"
    assert _backend.requested() is None
    st.use_backend("torch")  # a plain call sets it for the process
    assert _backend.backend_for(X) == "torch"
    st.use_backend(None)
    assert _backend.requested() is None


def test_environment_variable_and_precedence(monkeypatch):
    monkeypatch.setenv(_backend.ENV, "torch")
    assert _backend.backend_for(X) == "torch"
    if chain_ops() is not None:
        with st.use_backend("compiled"):  # use_backend wins over the variable
            assert _backend.backend_for(X) == "compiled"
    monkeypatch.setenv(_backend.ENV, "fast")
    with pytest.raises(ValueError, match="STRUCTTORCH_BACKEND must be one of"):
        _backend.backend_for(X)


def test_bad_names_are_refused():
    with pytest.raises(ValueError, match=r"backend must be one of \('compiled', 'triton', 'torch'\)"):
        st.use_backend("cuda")


def test_unavailable_backends_fall_back_to_torch_with_one_warning():
    meta = torch.empty(1, 2, 2, device="meta")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with st.use_backend("triton"):
            assert _backend.backend_for(meta) == "torch" and _backend.backend_for(meta) == "torch"
        with st.use_backend("compiled"):
            assert _backend.backend_for(meta) == "torch"
            assert _backend.backend_for(meta) == "torch"
    messages = [str(w.message) for w in caught]
    assert len(messages) == 2
    expected = "Triton is not installed" if not _backend.triton_installed() else "need CUDA tensors"
    assert expected in messages[0] and "CPU tensors only" in messages[1]


def test_triton_on_cpu_tensors_needs_the_interpreter(monkeypatch):
    if not _backend.triton_installed():
        pytest.skip("Triton is not installed")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    with st.use_backend("triton"):
        assert _backend.backend_for(X) == "triton"
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with warnings.catch_warnings(record=True) as caught, st.use_backend("triton"):
        warnings.simplefilter("always")
        assert _backend.backend_for(X) == "torch"
    assert "TRITON_INTERPRET=1" in str(caught[0].message)
    assert _backend.backend_for(X) in ("compiled", "torch")  # CPU tensors never default to triton


def test_one_lookup_and_the_structures_vetoes():
    """kernel_module finds every structure's _cpu (and _triton; None for "torch"); the structures
    only veto, to "torch": empty sequences and N > 32767 on the compiled chain kernels (int16
    backpointers)."""
    import dataclasses
    import importlib

    from structtorch.chain import _ops as chain
    from structtorch.chain.layout import Chain
    from structtorch.semimarkov import _ops as semimarkov
    from structtorch.semimarkov.layout import SemiMarkov

    for package in ("structtorch.chain", "structtorch.semimarkov", "structtorch.lossaug"):
        assert _backend.kernel_module("compiled", package) is importlib.import_module(package + "._cpu")
        assert _backend.kernel_module("torch", package) is None
    assert chain.kernel_module("compiled") is _backend.kernel_module("compiled", "structtorch.chain")
    if chain_ops() is None:
        pytest.skip("compiled kernels unavailable")
    z = torch.zeros(1, 2, 3)
    small = Chain(z, torch.zeros(3, 3), z[:, 0], z[:, 0], torch.tensor([2]))
    wide = Chain(torch.zeros(1, 2, 32768), torch.zeros(1, 1), z[:, 0], z[:, 0], torch.tensor([2]))
    sm = SemiMarkov(z, torch.zeros(3, 3), z, z, None, z[:, 0], z[:, 0], torch.tensor([2]))
    for name, on_wide in (("compiled", "torch"), ("torch", "torch"), ("triton", "triton")):
        if name == "triton" and _backend._triton_reason(z) is not None:
            continue
        with st.use_backend(name):
            assert chain.backend_of(small) == semimarkov.backend_of(sm) == name
            assert chain.backend_of(dataclasses.replace(small, unary=z[:, :0])) == "torch"
            assert semimarkov.backend_of(dataclasses.replace(sm, content=z[:, :0])) == "torch"
            assert chain.backend_of(wide) == on_wide


def test_the_choice_reaches_every_structure():
    """With "torch" no compiled kernel runs; with "compiled" they do (counted at the op table)."""
    from structtorch._extension import fast_ops

    if chain_ops() is None:
        pytest.skip("compiled kernels unavailable")
    calls = []

    class Counting:
        def __init__(self, ops):
            self.ops = ops

        def __getattr__(self, name):
            calls.append(name)
            return getattr(self.ops, name)

    u, a = torch.randn(2, 5, 3), torch.randn(3, 3)
    y = torch.zeros(2, 5, dtype=torch.long)
    targets = {"structtorch.chain._cpu.fast_ops": fast_ops, "structtorch.chain._quick.fast_ops": fast_ops,
               "structtorch.lossaug._cpu.chain_ops": chain_ops, "structtorch.semimarkov._cpu.chain_ops": chain_ops}
    patches = [mock.patch(t, lambda ops=ops: Counting(ops())) for t, ops in targets.items()]
    for p in patches:
        p.start()
    try:
        for name, expect_calls in (("torch", False), ("compiled", True)):
            calls.clear()
            with st.use_backend(name):
                st.viterbi(u, a)
                st.log_partition(u.clone().requires_grad_(), a).sum().backward()
                st.marginals(u, a)
                st.loss_augmented(u, a, y, rescaling="slack")
                st.semimarkov_viterbi(u, a, max_len=2)
                st.semimarkov_log_partition(u.clone().requires_grad_(), a, max_len=2).sum().backward()
            assert bool(calls) == expect_calls, (name, calls)
        assert {"quick_viterbi_autograd", "logz_forward", "logz_backward", "hamming_forward",
                "semimarkov_viterbi_forward", "semimarkov_logz_forward", "semimarkov_logz_backward"} <= set(calls)
    finally:
        for p in patches:
            p.stop()


def test_import_needs_torch_alone():
    """`import structtorch` loads neither the LP stack nor Triton; `structtorch.lp` loads on use."""
    import subprocess
    import sys

    code = ("import sys, structtorch as st\n"
            "heavy = [m for m in ('scipy', 'highspy', 'cvxpy', 'cvxpylayers', 'triton') if m in sys.modules]\n"
            "assert not heavy, heavy\n"
            "assert st.lp.map_lp and 'highspy' in sys.modules and 'lp' in dir(st)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_first_call_prints_nothing_and_loads_no_dynamo():
    """Import plus a first DP call in a fresh process: nothing on stdout or stderr (torch's
    cpp_extension "No CUDA runtime" log is held back), and torch._dynamo stays unloaded."""
    import subprocess
    import sys

    code = ("import sys, torch, structtorch as st\n"
            "st.log_partition(torch.randn(2, 3, 4), torch.randn(4, 4)).sum()\n"
            "st.viterbi(torch.randn(2, 3, 4), torch.randn(4, 4))\n"
            "assert 'torch._dynamo' not in sys.modules\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout == "" and proc.stderr == "", (proc.stdout, proc.stderr)


def test_a_kernel_build_announces_itself_on_stderr(monkeypatch, capsys, tmp_path):
    """When the kernels must compile (no cached build), one line on stderr says so."""
    import torch.utils.cpp_extension as ce

    from structtorch import _extension

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    assert _extension._needs_build("structtorch_chain_probe_0")
    monkeypatch.setattr(ce, "load", lambda **kw: object())
    assert _extension.fast_ops.__wrapped__() is not None
    err = capsys.readouterr()
    assert err.out == "" and err.err.count("\n") == 1 and "compiling the C++ CPU kernels" in err.err
