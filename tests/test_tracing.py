"""TorchScript and FX against structtorch (issue 52, item 3): a traced or scripted model is right or
refused, never silently other. ``torch.jit.trace`` used to record only the ``-1`` fill of the
small-call lane (the kernel ran outside the dispatcher) and returned -1 paths; now every dynamic
program refuses tracing with an error that names ``torch.export``, ``torch.jit.script`` refuses
structtorch's modules the same way, and FX's proxies get a TypeError that says what to use."""

from __future__ import annotations

import warnings

import pytest
import torch

import structtorch as st

B, T, N = 2, 6, 4


def chain_inputs():
    g = torch.Generator().manual_seed(0)
    return torch.randn(B, T, N, generator=g), torch.randn(N, N, generator=g)


def segment_inputs():
    g = torch.Generator().manual_seed(1)
    return torch.randn(B, T, N, generator=g), torch.randn(N, N, generator=g)


CALLS = {  # public entry points over the chain and segment dynamic programs
    "viterbi": lambda u, w: st.viterbi(u, w)[1],
    "viterbi with lengths": lambda u, w: st.viterbi(u, w, lengths=torch.tensor([T, T - 2]))[1],
    "log_partition": lambda u, w: st.log_partition(u, w),
    "marginals": lambda u, w: st.marginals(u, w),
    "kbest": lambda u, w: st.kbest(u, w, 2)[1],
    "path_score": lambda u, w: st.path_score(u, w, torch.zeros(B, T, dtype=torch.long)),
    "loss_augmented": lambda u, w: st.loss_augmented(u, w, torch.zeros(B, T, dtype=torch.long))[1],
}
SEGMENT_CALLS = {
    "semimarkov_viterbi": lambda c, w: st.semimarkov_viterbi(c, w, max_len=3)[0],
    "semimarkov_log_partition": lambda c, w: st.semimarkov_log_partition(c, w, max_len=3),
}


class Wrap(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x, w):
        return self.fn(x, w)


def trace(fn, inputs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TracerWarnings
        return torch.jit.trace(Wrap(fn), inputs, check_trace=False)


@pytest.mark.parametrize("backend", ["compiled", "torch"])
@pytest.mark.parametrize("name", [*CALLS, *SEGMENT_CALLS])
def test_jit_trace_refuses_every_dynamic_program(name, backend):
    fn, inputs = (CALLS[name], chain_inputs()) if name in CALLS else (SEGMENT_CALLS[name], segment_inputs())
    with st.use_backend(backend), pytest.raises(RuntimeError, match="torch.jit.trace cannot.*torch.export"):
        trace(fn, inputs)


class Tagger(torch.nn.Module):
    """The model of the issue's report: a linear encoder and a CRF's decode."""

    def __init__(self):
        super().__init__()
        self.encoder = torch.nn.Linear(8, N)
        self.crf = st.LinearChainCRF(N, constraints=st.allowed_transitions("BIO", ["O", "B-X", "I-X", "B-Y"]))

    def forward(self, x, mask):
        return self.crf.decode(self.encoder(x), mask)


def test_a_traced_tagger_is_refused_not_wrong():
    model = Tagger().eval()
    x, mask = torch.randn(2, 7, 8), torch.ones(2, 7, dtype=torch.bool)
    with pytest.raises(RuntimeError, match="torch.export.export"):
        trace(model, (x, mask))
    assert model(x, mask)[1].min() >= 0  # eager stays as it was


@pytest.mark.parametrize("module", [
    lambda: st.LinearChainCRF(N), lambda: st.SemiMarkovCRF(N, 3), lambda: st.Viterbi(),
    lambda: st.StructuredHingeLoss(), lambda: st.lp.MAPRelaxation(st.lp.grid_edges(2, 2), 2),
    lambda: st.lp.RelaxedHingeLoss(st.lp.grid_edges(2, 2)), lambda: Tagger(),
], ids=["LinearChainCRF", "SemiMarkovCRF", "Viterbi", "StructuredHingeLoss", "MAPRelaxation",
        "RelaxedHingeLoss", "a model holding a CRF"])
def test_jit_script_refuses_structtorch_modules_clearly(module):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit.script's deprecation
        with pytest.raises(RuntimeError, match="torch.jit.script cannot compile structtorch.*torch.export"):
            torch.jit.script(module())


def test_fx_symbolic_trace_says_what_to_use():
    with pytest.raises(TypeError, match="torch.fx.symbolic_trace cannot.*torch.export.export"):
        torch.fx.symbolic_trace(Tagger())
    with pytest.raises(TypeError, match="torch.fx.symbolic_trace cannot"):
        torch.fx.symbolic_trace(Wrap(lambda u, w: st.viterbi(u, w)[1]))
