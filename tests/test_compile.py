"""torch.compile (fullgraph, no graph breaks) and torch.func on the structured layers: the kernels
are torch.library operators with fake implementations (chain/_ops.py, semimarkov/_ops.py,
lossaug/_ops.py); value checks become asynchronous assertions inside a compiled graph.

``ENTRY_POINTS`` holds one entry per (function, option set), so that every optional argument of
every dynamic program, in each shape it accepts, is compiled at least once: each entry compiles
whole (``fullgraph``, one graph) and matches eager in values and gradients."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo
from torch._dynamo.exc import UserError
from torch._dynamo.testing import CompileCounterWithBackend

import structtorch as st

B, T, N = 3, 6, 4
S, P = 3, 5  # the semi-Markov max_len, the segment PLiF's support points


def _inputs(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    unary = torch.randn(B, T, N, generator=g, dtype=torch.float64, requires_grad=True)
    trans = torch.randn(N, N, generator=g, dtype=torch.float64, requires_grad=True)
    labels = torch.randint(0, N, (B, T), generator=g)
    return unary, trans, labels, torch.tensor([6, 4, 1])


def _potentials(requires_grad: bool = True) -> dict:
    """Every potential an entry point accepts as float64 leaves, named by the option they feed
    (``_b``: the batched shape), and the integer and boolean arguments beside them."""
    g = torch.Generator().manual_seed(11)
    shapes = {
        "unary": (B, T, N), "transitions": (N, N), "per_position": (B, T - 1, N, N),
        "start": (N,), "end": (N,), "start_b": (B, N), "end_b": (B, N),
        "length_scores": (S, N), "length_scores_b": (B, S, N), "long_length_scores": (T + 2, N),
        "boundary": (B, T, N), "segment_scores": (B, T, S, N), "tracks": (B, T, N), "ordinates": (N, P),
        "window1": (B, T, N, N), "window2": (B, T, N, N, N), "cost": (N, N), "cost_b": (B, T, N),
        "signals": (B, T, 2), "contents": (B, T, 2),
    }
    x = {k: torch.randn(*s, generator=g, dtype=torch.float64).requires_grad_(requires_grad)
         for k, s in shapes.items()}
    t = torch.arange(T)
    x.update(
        lengths=torch.tensor([6, 4, 1]),
        labels=torch.randint(0, N, (B, T), generator=g),
        # a target segmentation: segments of length 2 (<= S), one label each
        seg_labels=torch.randint(0, N, (B, T), generator=g).gather(1, (t // 2 * 2).expand(B, T)),
        seg_starts=(t % 2 == 0).expand(B, T).clone(),
        # one the hidden semi-Markov SVM's grammar allows (see _hsm: starts in {0, 1, 2}, ends in
        # {1, 2, 3}, no label follows itself) inside the lengths 6, 4 and 1
        hsm_labels=torch.tensor([[1, 1, 2, 2, 1, 1], [2, 2, 1, 1, 0, 0], [1, 1, 0, 0, 3, 3]]),
        int_weights=torch.randint(0, 3, (B, T), generator=g),
        real_weights=torch.rand(B, T, generator=g, dtype=torch.float64) * 2,
        h_table=torch.linspace(0, 2, T + 1, dtype=torch.float64).sqrt(),
    )
    return x


def _options(x: dict, mapping: dict) -> dict:
    """Keyword arguments from ``mapping`` (keyword -> name in ``x``, or a literal such as
    "slack"); the semi-Markov ``segment_plif`` is built from the tracks and ordinates."""
    kw = {k: x[v] if isinstance(v, str) and v in x else v for k, v in mapping.items() if k != "segment_plif"}
    if "segment_plif" in mapping:
        kw["segment_plif"] = st.SegmentPLiF(x["tracks"], x["ordinates"], -1.5, 2.0)
    return kw


# chain option sets: label -> (transitions, keyword arguments)
CHAIN = {
    "defaults": ("transitions", {}),
    "start, end, lengths": ("transitions", {"start": "start", "end": "end", "lengths": "lengths"}),
    "per_position, start_b, end_b, lengths": (
        "per_position", {"start": "start_b", "end": "end_b", "lengths": "lengths"}),
}
# semi-Markov option sets (max_len S unless given; "all": length_scores, boundary, segment_scores,
# start, end, lengths and segment_plif)
SEMIMARKOV = {
    "length_scores": {"length_scores": "length_scores"},
    "all but segment_plif": {
        "length_scores": "length_scores_b", "boundary": "boundary", "segment_scores": "segment_scores",
        "start": "start", "end": "end", "lengths": "lengths"},
    "segment_plif, start_b, end_b, lengths": {
        "segment_plif": True, "start": "start_b", "end": "end_b", "lengths": "lengths"},
    # HiddenSemiMarkovSVM's potentials: all but segment_scores, max_len beyond T
    "max_len > T, all but segment_scores": {
        "max_len": T + 2, "length_scores": "long_length_scores", "boundary": "boundary", "start": "start",
        "end": "end", "segment_plif": True, "lengths": "lengths"},
}
# loss options of the loss-augmented decoders: label -> (potentials' option set, loss keywords)
CHAIN_LOSSES = {
    "margin": ("defaults", {}),
    "margin, cost": ("start, end, lengths", {"cost": "cost"}),
    "margin, cost_b": ("per_position, start_b, end_b, lengths", {"cost": "cost_b"}),
    "margin, real_weights, viterbi": ("start, end, lengths", {"weights": "real_weights", "algorithm": "viterbi"}),
    "margin, sqrt h, hamming": ("per_position, start_b, end_b, lengths", {"h": torch.sqrt, "algorithm": "hamming"}),
    "slack, h_table": ("start, end, lengths", {"rescaling": "slack", "h": "h_table"}),
    "slack, sqrt h, int_weights": ("defaults", {"rescaling": "slack", "h": torch.sqrt, "weights": "int_weights"}),
}
SEMIMARKOV_LOSSES = {
    "margin": ("length_scores", {}),
    "slack, h_table": ("all but segment_plif", {"rescaling": "slack", "h": "h_table"}),
    "slack, sqrt h, int_weights": ("length_scores", {"rescaling": "slack", "h": torch.sqrt, "weights": "int_weights"}),
    "margin, sqrt h, hamming": ("segment_plif, start_b, end_b, lengths", {"h": torch.sqrt, "algorithm": "hamming"}),
    "margin, real_weights": ("max_len > T, all but segment_scores", {"weights": "real_weights"}),
}
WINDOW_LOSSES = {  # label -> (scores, loss keywords)
    "margin, lengths": ("window1", {"lengths": "lengths"}),
    "margin, cost": ("window2", {"cost": "cost"}),
    "slack, h_table, lengths": ("window1", {"rescaling": "slack", "h": "h_table", "lengths": "lengths"}),
    "margin, sqrt h, int_weights": ("window2", {"h": torch.sqrt, "weights": "int_weights"}),
}


def _chain_entries() -> dict:
    entries = {}
    for label, (trans, mapping) in CHAIN.items():
        def call(f, *extra, trans=trans, mapping=mapping):  # extra: names in x, or literals
            return lambda x: f(x["unary"], x[trans], *(x[e] if isinstance(e, str) else e for e in extra),
                               **_options(x, mapping))

        entries[f"log_partition[{label}]"] = call(st.log_partition)
        entries[f"viterbi[{label}]"] = call(st.viterbi)
        entries[f"marginals[{label}]"] = call(st.marginals)
        entries[f"path_score[{label}]"] = call(st.path_score, "labels")
        entries[f"kbest[{label}]"] = call(st.kbest, 3)
    for loss, (label, loss_mapping) in CHAIN_LOSSES.items():
        trans, mapping = CHAIN[label]
        entries[f"loss_augmented[{loss}; {label}]"] = (
            lambda x, trans=trans, mapping={**mapping, **loss_mapping}: st.loss_augmented(
                x["unary"], x[trans], x["labels"], **_options(x, mapping)))
    return entries


def _window_entries() -> dict:
    entries = {
        "window_viterbi[window1, lengths]": lambda x: st.window_viterbi(x["window1"], lengths=x["lengths"]),
        "window_viterbi[window2]": lambda x: st.window_viterbi(x["window2"]),
        "window_score[window1]": lambda x: st.window_score(x["window1"], x["labels"]),
        "window_score[window2, lengths]": lambda x: st.window_score(x["window2"], x["labels"], x["lengths"]),
    }
    for loss, (scores, mapping) in WINDOW_LOSSES.items():
        entries[f"window_loss_augmented[{loss}]"] = (
            lambda x, scores=scores, mapping=mapping: st.window_loss_augmented(
                x[scores], x["labels"], **_options(x, mapping)))
    return entries


def _semimarkov_entries() -> dict:
    entries = {}
    for label, mapping in SEMIMARKOV.items():
        mapping = {"max_len": S, **mapping}

        def call(f, *extra, mapping=mapping):
            return lambda x: f(x["unary"], x["transitions"], *(x[e] for e in extra), **_options(x, mapping))

        entries[f"semimarkov_log_partition[{label}]"] = call(st.semimarkov_log_partition)
        entries[f"semimarkov_viterbi[{label}]"] = call(st.semimarkov_viterbi)
        entries[f"semimarkov_score[{label}]"] = call(st.semimarkov_score, "seg_labels", "seg_starts")
    for loss, (label, loss_mapping) in SEMIMARKOV_LOSSES.items():
        entries[f"semimarkov_loss_augmented[{loss}; {label}]"] = (
            lambda x, mapping={"max_len": S, **SEMIMARKOV[label], **loss_mapping}: st.semimarkov_loss_augmented(
                x["unary"], x["transitions"], x["seg_labels"], x["seg_starts"], **_options(x, mapping)))
    return entries


def _hsm() -> st.HiddenSemiMarkovSVM:
    """A hidden semi-Markov SVM with every kind of potential: signal PLiFs at segment ends,
    content PLiFs of segment means, length PLiFs, a grammar and start/end labels."""
    allowed = ~torch.eye(N, dtype=torch.bool)
    hsm = st.HiddenSemiMarkovSVM(allowed, S, signal_of=[0, -1, 1, 0], content_of=[1, 0, -1, 0],
                                 start_labels=[0, 1, 2], end_labels=[1, 2, 3], num_points=6).double()
    g = torch.Generator().manual_seed(12)
    with torch.no_grad():
        for p in hsm.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype))
    return hsm


CRF = st.LinearChainCRF(N).double()
HSM = _hsm()
ENTRY_POINTS = {
    **_chain_entries(),
    **_window_entries(),
    **_semimarkov_entries(),
    "LinearChainCRF": lambda x: CRF(x["unary"], x["labels"], lengths=x["lengths"]) + CRF.decode(
        x["unary"], lengths=x["lengths"])[0],
    "StructuredHingeLoss[margin]": lambda x: st.StructuredHingeLoss(reduction="none")(
        x["unary"], x["transitions"], x["labels"], lengths=x["lengths"]),
    "StructuredHingeLoss[slack]": lambda x: st.StructuredHingeLoss("slack", reduction="none")(
        x["unary"], x["transitions"], x["labels"], lengths=x["lengths"]),
    "HiddenSemiMarkovSVM.decode": lambda x: HSM.decode(x["signals"], x["contents"], x["lengths"]),
    "semimarkov_log_partition[**HiddenSemiMarkovSVM()]": lambda x: st.semimarkov_log_partition(
        **HSM(x["signals"], x["contents"], x["lengths"])),
    "HiddenSemiMarkovSVM.loss": lambda x: HSM.loss(x["signals"], x["contents"], x["hsm_labels"], x["seg_starts"],
                                                   x["lengths"], reduction="none"),
}

# Known failures, all in structtorch/lossaug/spec.py resolve_loss: the loss-augmented searches run
# inside operators (lossaug/_ops.py), but a table sized by the weights' values reads them in Python
# before them (a guard on a data-dependent value: torch._dynamo.exc.UserError). ``max_count=``
# sizes the table instead; folded weights read nothing (the count's dtype follows theirs).
_TABLE_SIZE = "table size from weights' values (pass max_count to size it without reading them)"
LOSSAUG_BREAKS = {
    "loss_augmented[slack, sqrt h, int_weights; defaults]": _TABLE_SIZE,
    "window_loss_augmented[margin, sqrt h, int_weights]": _TABLE_SIZE,
    "semimarkov_loss_augmented[slack, sqrt h, int_weights; length_scores]": _TABLE_SIZE,
}


def _params(names) -> list:
    """pytest parameters of entry points, the known lossaug failures marked as such (strict)."""
    return [pytest.param(name, marks=pytest.mark.xfail(raises=UserError, strict=True,
                                                       reason=LOSSAUG_BREAKS[name]))
            if name in LOSSAUG_BREAKS else name for name in names]


def _tensors(out) -> tuple:
    return tuple(out) if isinstance(out, tuple) else (out,)


def _weighted_sum(outputs: tuple):
    """A fixed, unequal weighting of the differentiable outputs (a plain sum would hide errors that
    cancel, as in marginals summing to one)."""
    total = 0.0
    for out in outputs:
        if out.requires_grad:
            w = torch.cos(torch.arange(out.numel(), dtype=out.dtype)).view(out.shape) + 1.5
            total = total + (torch.where(torch.isfinite(out), out, 0.0) * w).sum()
    return total


def _compiled(fn, x: dict):
    """``fn(x)`` compiled whole (a graph break raises) into exactly one graph."""
    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    out = torch.compile(fn, fullgraph=True, backend=counter)(x)
    assert counter.frame_count == 1
    return _tensors(out)


def _assert_same(got: tuple, want: tuple):
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12, equal_nan=True)


@pytest.mark.parametrize("name", _params(ENTRY_POINTS))
def test_no_graph_breaks_and_compiled_equals_eager(name):
    fn = ENTRY_POINTS[name]
    x = _potentials()
    leaves = [v for v in x.values() if v.requires_grad]
    out = _compiled(fn, x)
    eager = _tensors(fn(x))
    _assert_same(out, eager)
    got, want = (torch.autograd.grad(_weighted_sum(o), leaves, allow_unused=True) for o in (out, eager))
    assert any(w is not None for w in want)
    for g, w in zip(got, want, strict=True):
        assert (g is None) == (w is None)
        if w is not None:
            torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)


# Entry points whose gradients run through an autograd Function: when no input needs a gradient,
# dynamo inlines the Function's forward rather than tracing it whole.
NO_GRADIENT = [name for name in ENTRY_POINTS if name.startswith(
    ("log_partition", "marginals", "semimarkov_log_partition", "LinearChainCRF"))]


@pytest.mark.parametrize("name", NO_GRADIENT)
def test_compiles_when_no_input_needs_a_gradient(name):
    fn = ENTRY_POINTS[name]
    x = _potentials(requires_grad=False)
    with torch.no_grad():  # the module's parameters too
        _assert_same(_compiled(fn, x), _tensors(fn(x)))


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_compiled_log_partition_on_other_backends(backend):
    from conftest import use_backend

    u, a, _, L = _inputs(1)
    with use_backend(backend):
        eager = st.log_partition(u, a, lengths=L)
        torch._dynamo.reset()
        out = torch.compile(lambda u, a: st.log_partition(u, a, lengths=L), fullgraph=True, backend="aot_eager")(u, a)
        torch.testing.assert_close(out, eager, rtol=1e-12, atol=1e-12)
        (gu,) = torch.autograd.grad(out.sum(), u)
    torch.testing.assert_close(gu, st.marginals(u.detach(), a.detach(), lengths=L), rtol=0, atol=1e-10)


def test_value_checks_stay_in_the_compiled_graph():
    u, a, y, L = _inputs(2)
    torch._dynamo.reset()
    compiled = torch.compile(lambda u, a: st.log_partition(u, a, lengths=L), fullgraph=True, backend="aot_eager")
    compiled(u, a)
    bad = u.detach().clone()
    bad[0, 0, 0] = float("nan")
    with pytest.raises(RuntimeError, match="unary contains NaN or \\+inf"):
        compiled(bad, a)


def test_a_model_compiles_whole_and_trains():
    torch.manual_seed(3)
    encoder = torch.nn.Linear(5, N)
    crf = st.LinearChainCRF(N)
    hinge = st.StructuredHingeLoss("slack")

    def step(x, y, lengths):
        emissions = encoder(x)
        loss = crf(emissions, y, lengths=lengths).mean() + hinge(emissions, crf.transitions, y, lengths=lengths)
        sm = st.semimarkov_log_partition(emissions, crf.transitions, max_len=2, lengths=lengths)
        return loss + 0.0 * sm.sum(), crf.decode(emissions, lengths=lengths)[1]

    x, y, L = torch.randn(B, T, 5), torch.randint(0, N, (B, T)), torch.tensor([6, 3, 5])
    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    loss, path = compiled(x, y, L)
    ref_loss, ref_path = step(x, y, L)
    torch.testing.assert_close(loss, ref_loss)
    assert torch.equal(path, ref_path)
    loss.backward()
    assert encoder.weight.grad.abs().sum() > 0 and crf.transitions.grad.abs().sum() > 0


def test_inductor_compiles_the_crf():
    x = _potentials()
    fn = ENTRY_POINTS["LinearChainCRF"]
    torch._dynamo.reset()
    out = torch.compile(fn, fullgraph=True)(x)
    torch.testing.assert_close(out, fn(x))


def test_func_grad_of_log_partition_is_the_marginals_and_of_viterbi_the_path():
    u, a, _, L = _inputs(5)
    u, a = u.detach(), a.detach()
    gu = torch.func.grad(lambda u: st.log_partition(u, a, lengths=L).sum())(u)
    torch.testing.assert_close(gu, st.marginals(u, a, lengths=L), rtol=0, atol=1e-10)
    gu = torch.func.grad(lambda u: st.viterbi(u, a, lengths=L)[0].sum())(u)
    path = st.viterbi(u, a, lengths=L)[1]
    onehot = torch.nn.functional.one_hot(path.clamp(min=0), N) * (path >= 0).unsqueeze(-1)
    assert torch.equal(gu, onehot.double())


def test_vmap_over_log_partition_and_viterbi():
    g = torch.Generator().manual_seed(6)
    us = torch.randn(5, B, T, N, generator=g, dtype=torch.float64)
    a_s = torch.randn(5, N, N, generator=g, dtype=torch.float64)
    L = torch.tensor([6, 4, 1])
    for a_dim, a in ((None, a_s[0]), (0, a_s)):
        logz = torch.func.vmap(lambda u, a: st.log_partition(u, a, lengths=L), in_dims=(0, a_dim))(us, a)
        score, path = torch.func.vmap(lambda u, a: st.viterbi(u, a, lengths=L), in_dims=(0, a_dim))(us, a)
        for v in range(5):
            a_v = a if a_dim is None else a[v]
            torch.testing.assert_close(logz[v], st.log_partition(us[v], a_v, lengths=L))
            ref_score, ref_path = st.viterbi(us[v], a_v, lengths=L)
            torch.testing.assert_close(score[v], ref_score)
            assert torch.equal(path[v], ref_path)


def test_per_sample_gradients_with_vmap_of_grad():
    g = torch.Generator().manual_seed(7)
    us = torch.randn(4, 1, T, N, generator=g, dtype=torch.float64)
    a = torch.randn(N, N, generator=g, dtype=torch.float64)
    grads = torch.func.vmap(torch.func.grad(lambda a, u: st.log_partition(u, a).sum()), in_dims=(None, 0))(a, us)
    for v in range(4):
        a_v = a.clone().requires_grad_()
        (want,) = torch.autograd.grad(st.log_partition(us[v], a_v).sum(), a_v)
        torch.testing.assert_close(grads[v], want)


def test_a_second_call_does_not_recompile():
    """The thread-local state the checks and the thread choice read exists from the start in every
    thread: the guards of the first compile hold on the second call (it recompiled once, 0.65 s)."""
    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    crf = st.LinearChainCRF(4)
    step = torch.compile(lambda e, t: crf(e, t), backend=counter, fullgraph=True)
    e, t = torch.randn(2, 5, 4), torch.randint(0, 4, (2, 5))
    for _ in range(3):
        step(e, t)
    assert counter.frame_count == 1


SHAPES = [(3, 7), (5, 9), (2, 12), (6, 5), (3, 8), (7, 16), (4, 3), (9, 11), (2, 4), (5, 20), (8, 6), (3, 13)]
"""Twelve (B, T) with B >= 2 and T >= 3: PyTorch specializes sizes 0 and 1 (a batch of one
sequence, or T = 2, whose T - 1 transitions are one, compiles its own graph, unless marked with
``torch._dynamo.mark_unbacked``), and the first batch size is not N (duck sizing would give B and N
one symbol, which the parameters' N specializes)."""


def _step(kind: str, encoder, crf, semi, hinge):
    """A training step's forward of each kind: (x (B, T, 5), y, lengths, mask) -> scalar loss."""
    def chain(x, y, lengths, mask):
        emissions = encoder(x)
        if kind == "crf, lengths":
            return crf(emissions, y, lengths=lengths).mean() + crf.decode(emissions, lengths=lengths)[0].sum() * 0
        if kind == "crf, mask":
            return crf(emissions, y, mask, reduction="token_mean") + crf.marginals(emissions, mask).sum() * 0
        if kind == "crf, all positions":
            return crf(emissions, y).mean()
        if kind == "hinge":
            return hinge(emissions, crf.transitions, y, lengths=lengths)
        starts = (torch.arange(y.shape[1]) % 2 == 0).expand_as(y)
        labels = starts.long().cumsum(1) % N
        if kind == "semi-Markov hinge":
            return hinge(emissions, crf.transitions, labels, max_len=3, target_starts=starts, lengths=lengths)
        score = semi.decode(emissions, mask)[0].sum() * 0
        return semi(emissions, labels, starts, mask, reduction="mean") + score

    return chain


@pytest.mark.parametrize("kind, backend", [("crf, lengths", "inductor"), ("crf, mask", "aot_eager"),
                                           ("crf, all positions", "aot_eager"), ("hinge", "aot_eager"),
                                           ("semi-Markov, mask", "aot_eager"),
                                           ("semi-Markov hinge", "aot_eager")])
def test_a_training_step_compiles_once_for_every_batch_size_and_length(kind, backend):
    """Issue 54, item 1: torch.compile(step, dynamic=True, fullgraph=True) recompiled for every new
    length (a Python int read from a shape: a message formatted with T, a cache keyed on the
    inference mode). Twelve (B, T) now run on the first graph: a recompile fails the call."""
    torch.manual_seed(0)
    encoder, crf, semi, hinge = torch.nn.Linear(5, N), st.LinearChainCRF(N), st.SemiMarkovCRF(N, 3), \
        st.StructuredHingeLoss("margin")
    step = _step(kind, encoder, crf, semi, hinge)
    torch._dynamo.reset()
    compiled = torch.compile(step, dynamic=True, fullgraph=True, backend=backend)
    g = torch.Generator().manual_seed(1)
    for i, (B_, T_) in enumerate(SHAPES):
        x, y = torch.randn(B_, T_, 5, generator=g), torch.randint(0, N, (B_, T_), generator=g)
        lengths = torch.randint(1, T_ + 1, (B_,), generator=g)
        mask = torch.arange(T_) < lengths[:, None]
        with torch.compiler.set_stance("fail_on_recompile" if i else "default"):
            loss = compiled(x, y, lengths, mask)
        want = step(x, y, lengths, mask)
        torch.testing.assert_close(loss, want, rtol=1e-5, atol=1e-5)
        loss.backward()  # outside the compiled step, as the speed page shows
