"""torch.export and AOTInductor (issue 52, item 4): decoders, losses, log-partitions and marginals
exported with a dynamic batch size and length give eager's results on other shapes and masks, and
an AOTInductor package of a BIO tagger runs outside the exporting process's Python graph."""

from __future__ import annotations

import pytest
import torch

import structtorch as st

N, F = 4, 8
TAGS = ["O", "B-X", "I-X", "B-Y"]


class Model(torch.nn.Module):
    """A linear encoder and one structured head, called as ``kind`` says."""

    def __init__(self, kind: str):
        super().__init__()
        self.kind = kind
        self.encoder = torch.nn.Linear(F, N)
        self.crf = st.LinearChainCRF(N, constraints=st.allowed_transitions("BIO", TAGS))
        self.semi = st.SemiMarkovCRF(N, 3)

    def forward(self, x, mask, tags):
        e = self.encoder(x)
        if self.kind == "decode":
            return self.crf.decode(e, mask)
        if self.kind == "nll":
            return self.crf(e, tags, mask, reduction="mean")
        if self.kind == "log_partition":
            return self.crf.log_partition(e, mask)
        if self.kind == "marginals":
            return self.crf.marginals(e, mask)
        return self.semi.decode(e, mask)


def inputs(B, T, seed):
    g = torch.Generator().manual_seed(seed)
    mask = torch.ones(B, T, dtype=torch.bool)
    if B > 1:
        mask[1, T - 2:] = False  # a shorter row
    if B > 2:
        mask[2, :2] = False  # left padding
        mask[-1, T // 2] = False  # a gap (compacted in order: counted, not sorted, in a traced graph)
    return torch.randn(B, T, F, generator=g), mask, torch.randint(0, N, (B, T), generator=g)


def export(model):
    batch, length = torch.export.Dim("batch", min=1), torch.export.Dim("length", min=2)
    dims = {0: batch, 1: length}
    return torch.export.export(model, inputs(2, 7, 0), dynamic_shapes=(dims, dims, dims))


def assert_same(got, want):
    got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
    for a, b in zip(got, want, strict=True):
        if a.dtype.is_floating_point:
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
        else:
            assert torch.equal(a, b)


@pytest.mark.parametrize("kind", ["decode", "nll", "log_partition", "marginals", "semimarkov decode"])
def test_exported_heads_answer_as_eager_on_other_shapes(kind):
    torch.manual_seed(0)
    model = Model(kind).eval()
    program = export(model).module()
    for B, T, seed in ((3, 9, 1), (1, 4, 2), (5, 12, 3)):
        args = inputs(B, T, seed)
        assert_same(program(*args), model(*args))


def test_an_aotinductor_package_decodes_as_eager(tmp_path):
    """The tagger compiled ahead of time (about 20 s) and loaded back: eager's paths and scores."""
    torch.manual_seed(0)
    model = Model("decode").eval()
    path = torch._inductor.aoti_compile_and_package(export(model), package_path=str(tmp_path / "tagger.pt2"))
    loaded = torch._inductor.aoti_load_package(path)
    for B, T, seed in ((3, 9, 1), (1, 4, 2)):
        args = inputs(B, T, seed)
        assert_same(tuple(loaded(*args)), model(*args))


class Expectation(torch.nn.Module):
    """A distribution's quantity taken as a gradient of its log-partition inside the call."""

    def __init__(self, which: str):
        super().__init__()
        self.which = which
        self.transitions = torch.nn.Parameter(torch.randn(3, 3))

    def forward(self, x, lengths):
        if self.which == "chain entropy":
            return st.ChainDistribution(x, self.transitions, lengths=lengths).entropy
        return st.SemiMarkovDistribution(x, self.transitions, max_len=2, lengths=lengths).marginals.positions


@pytest.mark.parametrize("which", ["chain entropy", "semi-Markov marginals"])
def test_gradients_taken_inside_the_call_refuse_export_naming_what_exports(which):
    example = (torch.randn(2, 5, 3), torch.tensor([5, 3]))
    with pytest.raises(NotImplementedError, match="torch.export cannot trace the gradient.*export the log-partition"):
        torch.export.export(Expectation(which), example)
