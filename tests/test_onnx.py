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


def run_onnx(model, example, path, names, special=None):
    """An onnxruntime runner of ``model`` exported with a dynamic batch (dim 0) and length (dim 1 of
    the inputs with two dimensions or more), except for the inputs named in ``special``, whose
    dynamic dimensions it gives as functions of the batch and length dimensions."""
    batch, length = torch.export.Dim("batch", min=1), torch.export.Dim("length", min=2)
    special = special or {}
    dims = tuple(special[name](batch, length) if name in special else {0: batch, 1: length} if x.dim() > 1
                 else {0: batch} for x, name in zip(example, names, strict=True))
    program = torch.onnx.export(model, example, dynamic_shapes=dims, dynamo=True,
                                custom_translation_table=st.onnx_translation_table())
    program.save(str(path))
    session = ort.InferenceSession(str(path))
    return lambda *xs: session.run(None, dict(zip(names, (x.numpy() for x in xs), strict=True)))


def _mask(B: int, T: int) -> torch.Tensor:
    """All positions, and with B > 1 right padding in row 1, a gap in row 0 and an empty last row."""
    mask = torch.ones(B, T, dtype=torch.bool)
    if B > 1:
        mask[1, T - 2:] = False  # padding
        mask[0, 1] = False  # a gap
        mask[-1] = False  # an empty row
    return mask


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
        x, mask = torch.randn(B, T, F, generator=g), _mask(B, T)
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


class PerStep(torch.nn.Module):
    """st.viterbi, st.kbest and st.marginals with per-step transitions (B, T - 1, N, N), a mask,
    start and end scores: every input of the chain translations."""

    def __init__(self, k: int = 3):
        super().__init__()
        self.k = k
        self.start, self.end = torch.nn.Parameter(torch.randn(N)), torch.nn.Parameter(torch.randn(N))

    def forward(self, unary, transitions, mask):
        chain = dict(start=self.start, end=self.end, mask=mask)
        return (*st.viterbi(unary, transitions, **chain), *st.kbest(unary, transitions, self.k, **chain),
                st.marginals(unary, transitions, **chain))


def test_chains_with_per_step_transitions_run_in_onnxruntime(tmp_path):
    """Viterbi, k-best (ties: integer scores; fewer than k labelings: a row of length 1 and
    -inf transitions) and marginals on per-step transitions."""
    torch.manual_seed(0)
    model = PerStep()
    g = torch.Generator().manual_seed(7)

    def inputs(B, T, integer=False):
        draw = (lambda *shape: torch.randint(-1, 2, shape, generator=g).float()) if integer else (
            lambda *shape: torch.randn(*shape, generator=g))
        mask = torch.ones(B, T, dtype=torch.bool)
        if B > 2:
            mask[1, 1:] = False  # one position: N labelings
            mask[2, 0] = False  # a gap
            mask[-1] = False  # an empty row
        return draw(B, T, N), draw(B, T - 1, N, N), mask

    run = run_onnx(model, inputs(2, 6), tmp_path / "steps.onnx", ["unary", "transitions", "mask"],
                   special={"transitions": lambda batch, length: {0: batch, 1: length - 1}})
    for B, T, integer in ((4, 7, False), (5, 9, True), (1, 2, False)):
        x = inputs(B, T, integer)
        x[1][0] = float("-inf")  # the first row has one labeling (all 0): k - 1 missing entries
        x[1][0, :, :, 0] = 0.0
        got, want = run(*x), [w.detach().numpy() for w in model(*x)]
        for index in (1, 3):  # the paths
            assert np.array_equal(got[index], want[index])
        for index in (0, 2, 4):  # the scores and marginals
            np.testing.assert_allclose(got[index], want[index], rtol=1e-5, atol=1e-5)


class Window(torch.nn.Module):
    def forward(self, scores, lengths):
        return st.window_viterbi(scores, lengths=lengths)


@pytest.mark.parametrize("order", [0, 2])
def test_window_chains_run_in_onnxruntime(tmp_path, order):
    """st.window_viterbi of orders 0 and 2 with lengths, ties (integer scores), -inf windows and
    an infeasible row."""
    g = torch.Generator().manual_seed(8)

    def inputs(B, T, integer=False):
        shape = (B, T) + (N,) * (order + 1)
        scores = torch.randint(-1, 2, shape, generator=g).float() if integer else torch.randn(shape, generator=g)
        return scores, torch.randint(0, T + 1, (B,), generator=g)

    run = run_onnx(Window(), inputs(2, 6), tmp_path / "window.onnx", ["scores", "lengths"])
    for B, T, integer in ((4, 7, False), (6, 8, True), (1, 2, False)):
        scores, lengths = inputs(B, T, integer)
        scores[0, 1, ..., 1:] = float("-inf")  # label 0 at position 1 in the first row
        if B > 2:
            scores[2, 1] = float("-inf")  # the third row is infeasible when it reaches position 1
            lengths[2] = T
        assert_same(run(scores, lengths), Window()(scores, lengths))


class Confidence(torch.nn.Module):
    """Confidence: the CRF's log-partition and node marginals."""

    def __init__(self):
        super().__init__()
        self.encoder = torch.nn.Linear(F, N)
        self.crf = st.LinearChainCRF(N, constraints=st.allowed_transitions("BIO", TAGS))

    def forward(self, x, mask):
        scores = self.encoder(x)
        return self.crf.log_partition(scores, mask), self.crf.marginals(scores, mask)


def test_log_partition_and_marginals_run_in_onnxruntime_within_1e5(tmp_path):
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
        logz, got = session.run(None, {"x": x.numpy(), "mask": mask.numpy()})
        want_logz, want = (w.detach().numpy() for w in model(x, mask))
        np.testing.assert_allclose(logz, want_logz, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got.sum(-1), mask.numpy().astype(np.float32), atol=1e-5)


class SegmentsPerPosition(torch.nn.Module):
    """st.semimarkov_viterbi and the log-partition with transitions per row and position."""

    def forward(self, content, transitions, lengths):
        kw = dict(max_len=3, lengths=lengths)
        return (*st.semimarkov_viterbi(content, transitions, **kw), st.semimarkov_log_partition(content, transitions, **kw))


def test_semimarkov_per_position_transitions_run_in_onnxruntime(tmp_path):
    g = torch.Generator().manual_seed(10)

    def inputs(B, T):
        return (torch.randn(B, T, N, generator=g), torch.randn(B, T - 1, N, N, generator=g),
                torch.randint(0, T + 1, (B,), generator=g))

    run = run_onnx(SegmentsPerPosition(), inputs(2, 7), tmp_path / "steps.onnx", ["content", "transitions", "lengths"],
                   special={"transitions": lambda batch, length: {0: batch, 1: length - 1}})
    for B, T in ((3, 9), (1, 4)):
        x = inputs(B, T)
        got, want = run(*x), SegmentsPerPosition()(*x)
        assert_same_segmentation(got[:3], want[:3])
        np.testing.assert_allclose(got[3], want[3].numpy(), rtol=1e-5, atol=1e-5)


class GeneFinder(torch.nn.Module):
    """HiddenSemiMarkovSVM.decode: PLiFs of signals, contents and lengths, a grammar, start and end
    labels."""

    def __init__(self):
        super().__init__()
        allowed = torch.tensor([[0, 1, 1], [1, 0, 1], [1, 1, 1]], dtype=torch.bool)
        self.svm = st.HiddenSemiMarkovSVM(allowed, 3, signal_of=[0, -1, 1], content_of=[1, 0, -1],
                                          start_labels=[0, 1], num_points=5, content_sums=True)
        with torch.no_grad():
            for p in self.svm.parameters():
                p.normal_()

    def forward(self, signals, contents, lengths):
        return self.svm.decode(signals, contents, lengths)


def test_the_hidden_semimarkov_svm_decodes_in_onnxruntime_as_in_pytorch(tmp_path):
    torch.manual_seed(0)
    model = GeneFinder().eval()
    g = torch.Generator().manual_seed(9)

    def inputs(B, T):
        return (3 * torch.randn(B, T, 2, generator=g), 3 * torch.randn(B, T, 2, generator=g),
                torch.randint(0, T + 1, (B,), generator=g))

    run = run_onnx(model, inputs(2, 7), tmp_path / "hsm.onnx", ["signals", "contents", "lengths"])
    for B, T in ((3, 10), (1, 4)):
        x = inputs(B, T)
        assert_same_segmentation(run(*x), model(*x))


class Head(torch.nn.Module):
    """CRFForTokenClassification on a small BERT: the forward pass's tag scores and token-level
    predictions, and decode's word-level tags (B, W), W read from the word mask."""

    def __init__(self):
        super().__init__()
        transformers = pytest.importorskip("transformers")
        from structtorch.nn.token_classification import CRFForTokenClassification

        config = transformers.BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                         intermediate_size=32)
        self.head = CRFForTokenClassification(transformers.BertModel(config), num_labels=N,
                                              constraints=st.allowed_transitions("BIO", TAGS))

    def forward(self, input_ids, attention_mask, word_mask):
        out = self.head(input_ids=input_ids, attention_mask=attention_mask, word_mask=word_mask)
        words = self.head.decode(input_ids=input_ids, attention_mask=attention_mask, word_mask=word_mask)
        return out.logits, out.predictions, words


def test_the_transformer_crf_head_predicts_in_onnxruntime_as_in_pytorch(tmp_path):
    torch.manual_seed(0)
    model = Head().eval()
    g = torch.Generator().manual_seed(6)

    def inputs(B, T):
        ids, attended = torch.randint(50, (B, T), generator=g), torch.ones(B, T, dtype=torch.long)
        words = torch.rand(B, T, generator=g) < 0.7
        words[:, 0] = True
        if B > 1:
            attended[1, T - 3:] = 0  # padding
            words[-1] = False  # no word
        return ids, attended, words

    run = run_onnx(model, inputs(2, 8), tmp_path / "head.onnx", ["input_ids", "attention_mask", "word_mask"])
    for B, T in ((3, 11), (1, 5), (4, 9)):
        x = inputs(B, T)
        (logits, predictions, words), want = run(*x), model(*x)
        np.testing.assert_allclose(logits, want[0].detach().numpy(), rtol=1e-5, atol=1e-5)
        assert np.array_equal(predictions, want[1].numpy())
        assert words.shape == want[2].shape and np.array_equal(words, want[2].numpy())


class Loss(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.crf = st.LinearChainCRF(N)

    def forward(self, emissions, tags, mask):
        return self.crf(emissions, tags, mask, reduction="mean")


class Segments(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.semi = st.SemiMarkovCRF(N, 3, init_scale=1.0)

    def forward(self, content, mask):
        return self.semi.decode(content, mask)


class EveryPotential(torch.nn.Module):
    """st.semimarkov_viterbi and st.semimarkov_log_partition with lengths, boundary, segment scores, per-row length scores and a
    segment PLiF: every input of the operator's translation."""

    def __init__(self, S: int = 3):
        super().__init__()
        self.S = S
        def integers(*shape):  # so that integer inputs tie
            return torch.nn.Parameter(torch.randint(-2, 3, shape).float())

        self.transitions, self.ordinates = integers(N, N), integers(N, 5)
        self.start, self.end = integers(N), integers(N)

    def forward(self, content, boundary, segment, tracks, length, lengths):
        potentials = dict(max_len=self.S, length_scores=length, boundary=boundary, segment_scores=segment,
                          start=self.start, end=self.end, lengths=lengths,
                          segment_plif=st.SegmentPLiF(tracks, self.ordinates, -1.0, 2.0))
        return (*st.semimarkov_viterbi(content, self.transitions, **potentials),
                st.semimarkov_log_partition(content, self.transitions, **potentials))


def assert_same_segmentation(got, want):
    score, labels, starts = (w.detach().numpy() for w in want)
    assert np.array_equal(got[1], labels)
    assert np.array_equal(got[2], starts)
    np.testing.assert_allclose(got[0], score, rtol=1e-5, atol=1e-5)


def test_the_semimarkov_crf_decodes_in_onnxruntime_as_in_pytorch(tmp_path):
    torch.manual_seed(0)
    model = Segments().eval()
    run = run_onnx(model, (torch.randn(2, 7, N), torch.ones(2, 7, dtype=torch.bool)), tmp_path / "semi.onnx",
                   ["content", "mask"])
    g = torch.Generator().manual_seed(4)
    for B, T in ((3, 9), (1, 2), (5, 16)):
        content, mask = torch.randn(B, T, N, generator=g), _mask(B, T)
        assert_same_segmentation(run(content, mask), model(content, mask))


def test_semimarkov_decoder_and_log_partition_with_every_potential_run_in_onnxruntime(tmp_path):
    """Lengths, -inf content, an infeasible row, ties (integer scores), segments longer than some
    rows, every optional potential."""
    torch.manual_seed(0)
    model, S = EveryPotential(), 3
    names = ["content", "boundary", "segment", "tracks", "length", "lengths"]

    def inputs(B, T, g, integer=False):
        draw = (lambda *shape: torch.randint(-2, 3, shape, generator=g).float()) if integer else (
            lambda *shape: torch.randn(*shape, generator=g))
        tracks = torch.full((B, T, N), 0.5) if integer else 2 * torch.rand(B, T, N, generator=g) - 0.5
        return (draw(B, T, N), draw(B, T, N), draw(B, T, S, N), tracks,
                draw(B, S, N), torch.randint(0, T + 1, (B,), generator=g))

    g = torch.Generator().manual_seed(5)
    run = run_onnx(model, inputs(2, 7, g), tmp_path / "every.onnx", names,
                   special={"length": lambda batch, length: {0: batch}})
    for B, T, integer in ((4, 9, False), (8, 12, True), (1, 2, False)):  # integer: ties on every row
        x = inputs(B, T, g, integer)
        x[0][0, 1:3, 1:] = float("-inf")  # -inf content: only label 0 at positions 1 and 2
        if B > 2:
            x[0][2, 1] = float("-inf")  # an infeasible row (when it reaches position 1)
            x[5][2] = T
        got, want = run(*x), model(*x)
        assert_same_segmentation(got[:3], want[:3])
        np.testing.assert_allclose(got[3], want[3].detach().numpy(), rtol=1e-5, atol=1e-5)  # log Z


class Sampler(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.crf = st.LinearChainCRF(N)

    def forward(self, emissions, mask):
        return self.crf.sample(emissions, 2, mask)


@pytest.mark.parametrize("model, example, match", [
    (Loss, (torch.randn(2, 5, N), torch.zeros(2, 5, dtype=torch.long), torch.ones(2, 5, dtype=torch.bool)),
     "structtorch::chain_nll serves training.*export the decoder"),
    (Sampler, (torch.randn(2, 5, N), torch.ones(2, 5, dtype=torch.bool)),
     "structtorch::chain_sample has no ONNX translation yet.*AOTInductor"),
], ids=["the CRF loss", "sampling"])
def test_operators_without_a_translation_fail_the_export_naming_them(model, example, match):
    with pytest.raises(Exception, match=match):
        torch.onnx.export(model().eval(), example, dynamo=True, custom_translation_table=st.onnx_translation_table())
