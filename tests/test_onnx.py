"""ONNX export of the chain decoders (issue 52, item 1, in part): ``torch.onnx.export(...,
dynamo=True, custom_translation_table=structtorch.onnx_translation_table())`` gives models whose
onnxruntime paths equal PyTorch's and whose scores agree within 1e-5, on batch sizes, lengths and
masks other than the exported ones, with and without BIO constraints."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import structtorch as st

pytest.importorskip("onnxscript")
ort = pytest.importorskip("onnxruntime")

N, F = 4, 8
TAGS = ["O", "B-X", "I-X", "B-Y"]


class Tagger(torch.nn.Module):
    def __init__(self, constrained: bool):
        super().__init__()
        self.encoder = torch.nn.Linear(F, N)
        self.crf = st.LinearChainCRF(N, constraints=st.allowed_transitions("BIO", TAGS) if constrained else None)

    def forward(self, x, mask):
        return self.crf.decode(self.encoder(x), mask)


class Lengths(torch.nn.Module):
    """st.viterbi with lengths and learned transitions."""

    def __init__(self):
        super().__init__()
        self.transitions = torch.nn.Parameter(torch.randn(N, N))

    def forward(self, unary, lengths):
        return st.viterbi(unary, self.transitions, lengths=lengths)


def run_onnx(model, example, path, names):
    batch, length = torch.export.Dim("batch", min=1), torch.export.Dim("length", min=2)
    dims = tuple({0: batch, 1: length} if x.dim() > 1 else {0: batch} for x in example)
    program = torch.onnx.export(model, example, dynamic_shapes=dims, dynamo=True,
                                custom_translation_table=st.onnx_translation_table())
    program.save(str(path))
    session = ort.InferenceSession(str(path))
    return lambda *xs: session.run(None, dict(zip(names, (x.numpy() for x in xs), strict=True)))


def assert_same(got, want):
    score, path = (w.detach().numpy() for w in want)
    assert np.array_equal(got[1], path)
    np.testing.assert_allclose(got[0], score, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("constrained", [False, True])
def test_the_crf_tagger_decodes_in_onnxruntime_as_in_pytorch(tmp_path, constrained):
    torch.manual_seed(0)
    model = Tagger(constrained).eval()
    example = (torch.randn(2, 7, F), torch.ones(2, 7, dtype=torch.bool))
    run = run_onnx(model, example, tmp_path / "tagger.onnx", ["x", "mask"])
    g = torch.Generator().manual_seed(1)
    for B, T in ((3, 9), (1, 4), (6, 15)):
        x, mask = torch.randn(B, T, F, generator=g), torch.ones(B, T, dtype=torch.bool)
        if B > 1:
            mask[1, T - 3:] = False  # padding
            mask[0, 1] = False  # a gap
            mask[-1] = False  # an empty row
        assert_same(run(x, mask), model(x, mask))


def test_viterbi_with_lengths_runs_in_onnxruntime(tmp_path):
    torch.manual_seed(0)
    model = Lengths().eval()
    example = (torch.randn(2, 6, N), torch.tensor([6, 4]))
    run = run_onnx(model, example, tmp_path / "viterbi.onnx", ["unary", "lengths"])
    g = torch.Generator().manual_seed(2)
    for B, T in ((4, 8), (1, 3)):
        unary, lengths = torch.randn(B, T, N, generator=g), torch.randint(0, T + 1, (B,), generator=g)
        assert_same(run(unary, lengths), model(unary, lengths))


class Confidence(torch.nn.Module):
    """Per-token confidence: the CRF's node marginals."""

    def __init__(self):
        super().__init__()
        self.encoder = torch.nn.Linear(F, N)
        self.crf = st.LinearChainCRF(N, constraints=st.allowed_transitions("BIO", TAGS))

    def forward(self, x, mask):
        return self.crf.marginals(self.encoder(x), mask)


def test_marginals_run_in_onnxruntime_within_1e5(tmp_path):
    torch.manual_seed(0)
    model = Confidence().eval()
    example = (torch.randn(2, 7, F), torch.ones(2, 7, dtype=torch.bool))
    batch, length = torch.export.Dim("batch", min=1), torch.export.Dim("length", min=2)
    program = torch.onnx.export(model, example, dynamic_shapes=({0: batch, 1: length},) * 2, dynamo=True,
                                custom_translation_table=st.onnx_translation_table())
    program.save(str(tmp_path / "confidence.onnx"))
    session = ort.InferenceSession(str(tmp_path / "confidence.onnx"))
    g = torch.Generator().manual_seed(3)
    for B, T in ((3, 9), (1, 4)):
        x, mask = torch.randn(B, T, F, generator=g), torch.ones(B, T, dtype=torch.bool)
        if B > 1:
            mask[1, T - 3:] = False
            mask[2, 2] = False
        (got,) = session.run(None, {"x": x.numpy(), "mask": mask.numpy()})
        want = model(x, mask).detach().numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got.sum(-1), mask.numpy().astype(np.float32), atol=1e-5)


class Loss(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.crf = st.LinearChainCRF(N)

    def forward(self, emissions, tags, mask):
        return self.crf(emissions, tags, mask, reduction="mean")


class Segments(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.semi = st.SemiMarkovCRF(N, 3)

    def forward(self, content, mask):
        return self.semi.decode(content, mask)


@pytest.mark.parametrize("model, example, match", [
    (Loss, (torch.randn(2, 5, N), torch.zeros(2, 5, dtype=torch.long), torch.ones(2, 5, dtype=torch.bool)),
     "structtorch::chain_nll serves training.*export the decoder"),
    (Segments, (torch.randn(2, 5, N), torch.ones(2, 5, dtype=torch.bool)),
     "structtorch::semimarkov_viterbi has no ONNX translation yet.*AOTInductor"),
], ids=["the CRF loss", "the semi-Markov decoder"])
def test_operators_without_a_translation_fail_the_export_naming_them(model, example, match):
    with pytest.raises(Exception, match=match):
        torch.onnx.export(model().eval(), example, dynamo=True, custom_translation_table=st.onnx_translation_table())
