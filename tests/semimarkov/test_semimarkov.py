"""Semi-Markov DPs against brute-force enumeration of all segmentations."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from brute import PLIF_HIGH, PLIF_LOW, brute, check_kbest, problems, tensors
from conftest import use_backend
from hypothesis import assume, given
from hypothesis import strategies as st_

import structtorch as st
from structtorch._backend import backend_for
from structtorch.lossaug import structures
from structtorch.semimarkov.layout import check_semimarkov
from structtorch.semimarkov.layout import semimarkov_score as reference_score


def call(fn, p, S, lengths):
    content, trans, kw = tensors(p)
    return fn(content, trans, max_len=S, lengths=lengths, **kw)


@given(problem=problems())
def test_viterbi_and_log_partition_match_enumeration(backend, problem):
    p, S, lengths, integer = problem
    B, T, N = p["content"].shape
    score, labels, starts = call(st.semimarkov_viterbi, p, S, lengths)
    logz = call(st.semimarkov_log_partition, p, S, lengths)
    assert labels.shape == (B, T) and starts.dtype == torch.bool
    for b in range(B):
        L = int(lengths[b])
        rows = brute(p, b, L, S, N)
        scores = np.array([r[2] for r in rows])
        best = scores.max()
        finite = scores[scores > -np.inf]
        expected_logz = -np.inf if len(finite) == 0 else np.log(np.exp(finite - finite.max()).sum()) + finite.max()
        if best == -np.inf:
            assert score[b] == float("-inf") and (labels[b] == -1).all() and not starts[b].any()
            assert logz[b] == float("-inf")
            continue
        assert np.isclose(score[b].item(), best, atol=1e-9)
        assert np.isclose(logz[b].item(), expected_logz, atol=1e-9)
        got = (tuple(labels[b, :L].tolist()), tuple(starts[b, :L].tolist()))
        assert got in {(r[0], r[1]) for r in rows if r[2] == best} or integer is False and np.isclose(
            dict(((r[0], r[1]), r[2]) for r in rows)[got], best)
        assert (labels[b, L:] == -1).all() and not starts[b, L:].any()


@given(problem=problems())
def test_gradients(problem):
    """Viterbi: the segmentation indicator; log-partition: the position marginals."""
    p, S, lengths, _ = problem
    B, T, N = p["content"].shape
    content, trans, kw = tensors(p)
    content.requires_grad_()
    logz = st.semimarkov_log_partition(content, trans, max_len=S, lengths=lengths, **kw)
    finite = torch.isfinite(logz)
    assume(T > 0 and bool(finite.any()))
    (grad,) = torch.autograd.grad(logz[finite].sum(), content)
    for b in range(B):
        if not finite[b]:
            assert (grad[b] == 0).all()
            continue
        L = int(lengths[b])
        rows = brute(p, b, L, S, N)
        scores = np.array([r[2] for r in rows])
        w = np.exp(scores - logz[b].item())
        marg = np.zeros((T, N))
        for (labels, _, _), wi in zip(rows, w, strict=True):
            for pos, n in enumerate(labels):
                marg[pos, n] += wi
        np.testing.assert_allclose(grad[b].numpy(), marg, atol=1e-9)


def test_max_len_one_equals_the_chain():
    torch.manual_seed(0)
    B, T, N = 3, 7, 4
    content, boundary = torch.randn(B, T, N, dtype=torch.float64), torch.randn(B, T, N, dtype=torch.float64)
    length, A = torch.randn(1, N, dtype=torch.float64), torch.randn(N, N, dtype=torch.float64)
    start, end = torch.randn(N, dtype=torch.float64), torch.randn(N, dtype=torch.float64)
    lengths = torch.tensor([7, 3, 0])
    kw = {"max_len": 1, "length_scores": length, "boundary": boundary, "start": start, "end": end, "lengths": lengths}
    unary = content + boundary + length
    s1, labels, starts = st.semimarkov_viterbi(content, A, **kw)
    s2, path = st.viterbi(unary, A, start=start, end=end, lengths=lengths)
    assert torch.equal(labels, path) and torch.equal(starts, path >= 0)
    torch.testing.assert_close(s1, s2)
    torch.testing.assert_close(st.semimarkov_log_partition(content, A, **kw),
                               st.log_partition(unary, A, start=start, end=end, lengths=lengths))


def test_viterbi_gradient_is_segment_indicator():
    torch.manual_seed(1)
    content = torch.randn(1, 8, 2, dtype=torch.float64, requires_grad=True)
    length = torch.randn(3, 2, dtype=torch.float64, requires_grad=True)
    A = torch.randn(2, 2, dtype=torch.float64, requires_grad=True)
    score, labels, starts = st.semimarkov_viterbi(content, A, max_len=3, length_scores=length)
    score.sum().backward()
    expected_content = torch.nn.functional.one_hot(labels[0], 2).double().unsqueeze(0)
    torch.testing.assert_close(content.grad, expected_content)
    seg_starts = starts[0].nonzero().squeeze(1).tolist() + [8]
    expected_len = torch.zeros(3, 2, dtype=torch.float64)
    for s, e in zip(seg_starts[:-1], seg_starts[1:], strict=True):
        expected_len[e - s - 1, labels[0, s]] += 1
    torch.testing.assert_close(length.grad, expected_len)


@given(problem=problems())
def test_viterbi_gradient_is_the_score_gradient_of_its_segmentation(backend, problem):
    """Every input, segment PLiF included: the kernel's score differentiates as the score of the
    segmentation it returns (zero on infeasible rows)."""
    p, S, lengths, _ = problem
    content, trans, kw = tensors(p)
    plif = kw["segment_plif"]
    inputs = [x for x in (content, trans, *(kw[k] for k in ("length_scores", "boundary", "segment_scores",
                                                              "start", "end")),
                          *(() if plif is None else (plif.tracks, plif.ordinates))) if x is not None]
    for x in inputs:
        x.requires_grad_()
    score, labels, starts = st.semimarkov_viterbi(content, trans, max_len=S, lengths=lengths, **kw)
    weights = torch.arange(1.0, len(lengths) + 1, dtype=torch.float64)
    got = torch.autograd.grad((score.nan_to_num(neginf=0.0) * weights).sum(), inputs, allow_unused=True)
    feasible = score > float("-inf")
    sm = check_semimarkov(content, trans, S, kw["length_scores"], kw["boundary"], kw["segment_scores"],
                          kw["start"], kw["end"], torch.where(feasible, lengths, 0), plif)
    # the PyTorch reference differentiated by autograd (st.semimarkov_score uses the same indicator
    # code as the Viterbi on the triton backend)
    reference = reference_score(sm, torch.where(feasible[:, None], labels, 0).clamp(min=0), starts)
    want = torch.autograd.grad((reference * weights).sum(), inputs, allow_unused=True)
    for g, w, x in zip(got, want, inputs, strict=True):
        torch.testing.assert_close(torch.zeros_like(x) if g is None else g,
                                   torch.zeros_like(x) if w is None else w)


@given(problem=problems(), k=st_.integers(1, 4))
def test_kbest_matches_enumeration(backend, problem, k):
    """Scores, distinct segmentations, -1/False padding, and each score's gradient: the indicator
    of its segmentation."""
    p, S, lengths, _ = problem
    p = {**p, "plif": None}  # no segment PLiFs in the k-best
    content, trans, kw = tensors(p)
    kw.pop("segment_plif")
    B, T, N = content.shape
    content.requires_grad_()
    scores, labels, starts = st.semimarkov_kbest(content, trans, k, max_len=S, lengths=lengths, **kw)
    assert scores.shape == (B, k) and labels.shape == starts.shape == (B, k, T)
    for b in range(B):
        L = int(lengths[b])
        rows = brute(p, b, L, S, N)
        check_kbest(scores[b].tolist(), [(tuple(x[:L].tolist()), tuple(y[:L].tolist()))
                                         for x, y in zip(labels[b], starts[b], strict=True)],
                    {(r[0], r[1]): r[2] for r in rows}, k, 1e-8)
        assert (labels[b, :, L:] == -1).all() and not starts[b, :, L:].any()
        missing = scores[b] == float("-inf")
        assert (labels[b, missing] == -1).all() and not starts[b, missing].any()
    weights = torch.rand(B, k, dtype=torch.float64)
    (grad,) = torch.autograd.grad((scores.nan_to_num(neginf=0.0) * weights).sum(), content, allow_unused=True)
    one_hot = torch.nn.functional.one_hot(labels.clamp(min=0), N).double() * (labels >= 0).unsqueeze(3)
    want = (one_hot * torch.where(scores > float("-inf"), weights, 0.0)[:, :, None, None]).sum(1)
    torch.testing.assert_close(torch.zeros_like(content) if grad is None else grad, want)


@given(problem=problems(), seed=st_.integers(0, 2**31))
def test_samples_are_the_same_on_every_backend(backend, problem, seed):
    """Every backend maps the generator's uniforms to the same segmentations (the torch backend's
    frequencies are tested against enumeration in test_distributions.py)."""
    p, S, lengths, _ = problem
    content, trans, kw = tensors({**p, "plif": None})
    kw.pop("segment_plif")
    got = st.semimarkov_sample(content, trans, 3, max_len=S, lengths=lengths, **kw,
                               generator=torch.Generator().manual_seed(seed))
    with use_backend("torch"):
        want = st.semimarkov_sample(content, trans, 3, max_len=S, lengths=lengths, **kw,
                                    generator=torch.Generator().manual_seed(seed))
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


@pytest.mark.parametrize(
    "kwargs, exc, message",
    [
        ({"max_len": 0}, ValueError, "max_len must be an int >= 1, got 0"),
        ({"max_len": 2, "length_scores": torch.zeros(3, 3)}, ValueError, r"length_scores must have shape \(2, 3\) or \(2, 2, 3\)"),
        ({"max_len": 2, "boundary": torch.zeros(2, 5, 3)}, ValueError, r"boundary must have shape \(2, 4, 3\)"),
        ({"max_len": 2, "segment_scores": torch.zeros(2, 4, 3, 3)}, ValueError, r"segment_scores must have shape \(B, T, max_len, N\) = \(2, 4, 2, 3\)"),
    ],
)
def test_bad_input(kwargs, exc, message):
    with pytest.raises(exc, match=message):
        st.semimarkov_viterbi(torch.zeros(2, 4, 3), torch.zeros(3, 3), **kwargs)


@given(problem=problems())
def test_compiled_and_torch_viterbi_agree(problem):
    from conftest import use_backend

    p, S, lengths, _ = problem
    out = []
    for name in ("compiled", "torch"):
        with use_backend(name):
            out.append(call(st.semimarkov_viterbi, p, S, lengths))
    torch.testing.assert_close(out[0][0], out[1][0])
    assert torch.equal(out[0][1], out[1][1]) and torch.equal(out[0][2], out[1][2])


@given(problem=problems())
def test_compiled_log_partition_gradients_match_torch(problem):
    from conftest import use_backend

    p, S, lengths, _ = problem
    plif = p.get("plif") or (None, None)
    p = {**{k: v for k, v in p.items() if k != "plif"}, "tracks": plif[0], "ordinates": plif[1]}
    grads, values = [], []
    for name in ("compiled", "torch"):
        with use_backend(name):
            t = {k: None if v is None else torch.tensor(v, requires_grad=True) for k, v in p.items()}
            plif = None if t["tracks"] is None else st.SegmentPLiF(t["tracks"], t["ordinates"], PLIF_LOW, PLIF_HIGH)
            logz = st.semimarkov_log_partition(t["content"], t["trans"], max_len=S, length_scores=t["length"],
                                               boundary=t["boundary"], segment_scores=t["segment"],
                                               start=t["start"], end=t["end"], lengths=lengths, segment_plif=plif)
            values.append(logz.detach())
            finite = torch.isfinite(logz)
            (logz[finite] * torch.arange(1.0, 1 + int(finite.sum()), dtype=torch.float64)).sum().backward()
            grads.append({k: torch.zeros_like(v) if v.grad is None else v.grad for k, v in t.items() if v is not None})
    torch.testing.assert_close(values[0], values[1])
    for k in grads[0]:
        torch.testing.assert_close(grads[0][k], grads[1][k], msg=k)


def test_gradcheck_compiled_log_partition():
    torch.manual_seed(3)
    c = torch.randn(2, 6, 3, dtype=torch.float64, requires_grad=True)
    L = torch.randn(3, 3, dtype=torch.float64, requires_grad=True)
    A = torch.randn(3, 3, dtype=torch.float64, requires_grad=True)
    seg = torch.randn(2, 6, 3, 3, dtype=torch.float64, requires_grad=True)
    f = lambda c, L, A, seg: st.semimarkov_log_partition(c, A, max_len=3, length_scores=L, segment_scores=seg,  # noqa: E731
                                                         lengths=torch.tensor([6, 4]))
    assert torch.autograd.gradcheck(f, (c, L, A, seg))
    assert torch.autograd.gradgradcheck(lambda c: st.semimarkov_log_partition(c, A.detach(), max_len=3), (c,))


def test_gradcheck_compiled_log_partition_with_segment_plif():
    """The compiled backward's track and ordinate gradients, also at means outside the support
    (clamped: no track gradient there)."""
    torch.manual_seed(4)
    c = torch.randn(2, 7, 3, dtype=torch.float64, requires_grad=True)
    A = torch.randn(3, 3, dtype=torch.float64)
    tracks = (3 * torch.randn(2, 7, 3, dtype=torch.float64)).requires_grad_()
    ordinates = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)

    def f(c, tracks, ordinates):
        return st.semimarkov_log_partition(c, A, max_len=3, lengths=torch.tensor([7, 5]),
                                           segment_plif=st.SegmentPLiF(tracks, ordinates, -2.0, 2.0))

    assert backend_for(c) == "compiled"
    assert torch.autograd.gradcheck(f, (c, tracks, ordinates))


def test_compiled_segment_plif_with_nan_tracks_stays_in_bounds():
    """A NaN track (its check switched off) makes a NaN mean: the interpolation index must stay
    in bounds (a NaN cast to an integer is undefined; the run itself is the test)."""
    c = torch.randn(2, 5, 3, dtype=torch.float64, requires_grad=True)
    tracks = torch.randn(2, 5, 3, dtype=torch.float64)
    tracks[0, 2, 1] = float("nan")
    plif = st.SegmentPLiF(tracks.requires_grad_(), torch.randn(3, 4, dtype=torch.float64), -1.0, 1.0)
    assert backend_for(c) == "compiled"
    with st.set_validation(False):
        logz = st.semimarkov_log_partition(c, torch.zeros(3, 3, dtype=torch.float64), max_len=3,
                                           segment_plif=plif)
        logz.sum().backward()
    assert torch.isfinite(logz[1]) and torch.isfinite(tracks.grad[1]).all()


def _random_targets(p, S, lengths, rng):
    """A feasible target segmentation per row, drawn from the enumeration: ([(labels, starts,
    score)], labels (B, T), starts (B, T)); hypothesis rejects problems with an infeasible row."""
    B, T, N = p["content"].shape
    targets = []
    for b in range(B):
        feasible = [r for r in brute(p, b, int(lengths[b]), S, N) if r[2] > -np.inf]
        assume(len(feasible) > 0)
        targets.append(feasible[rng.integers(len(feasible))])
    labels = torch.full((B, T), 0, dtype=torch.long)
    starts = torch.zeros(B, T, dtype=torch.bool)
    for b, (lab, sts, _) in enumerate(targets):
        labels[b, : len(lab)] = torch.tensor(lab, dtype=torch.long)
        starts[b, : len(sts)] = torch.tensor(sts, dtype=torch.bool)
    return targets, labels, starts


def _position_weights(kind: str, rescaling: str, h_kind: str, shape: tuple, rng) -> tuple:
    """(weights or None, max_count) of a weighting ``kind``: integers (sized by ``max_count``),
    halves (a common scale, read on the host) or reals (margin rescaling with h the identity only,
    else halves)."""
    if kind == "none":
        return None, None
    if kind == "int":
        return torch.from_numpy(rng.integers(0, 3, size=shape)), 2 * shape[1]
    if kind == "real" and rescaling == "margin" and h_kind == "id":
        return torch.from_numpy(rng.uniform(0, 2, size=shape)), None
    return torch.from_numpy(rng.integers(0, 4, size=shape) / 2), None


@given(problem=problems(), rescaling=st_.sampled_from(["margin", "slack"]), h_kind=st_.sampled_from(["id", "table"]),
       weighting=st_.sampled_from(["none", "int", "half", "real"]), seed=st_.integers(0, 2**31))
def test_loss_augmented_matches_enumeration(backend, problem, rescaling, h_kind, weighting, seed):
    """Value, segmentation and count against enumeration on every backend, unweighted and with
    position weights (integers with ``max_count``, halves, reals); the value's gradient is h(H)
    (1 for margin rescaling) times the found segmentation's indicators minus the target's."""
    p, S, lengths, integer = problem
    B, T, N = p["content"].shape
    rng = np.random.default_rng(seed)
    targets, labels, starts = _random_targets(p, S, lengths, rng)
    weights, max_count = _position_weights(weighting, rescaling, h_kind, (B, T), rng)
    table = rng.integers(-3, 4, size=T + 1).astype(float)
    if h_kind == "id":
        h, h_fn = None, (lambda k: k)
    elif weights is None:
        h, h_fn = torch.tensor(table), (lambda k: table[int(k)])
    else:  # a table indexes integer counts: a callable h for weighted ones
        h, h_fn = (lambda k: 2 * torch.sin(k + 0.5)), (lambda k: 2 * np.sin(k + 0.5))
    content, trans, kw = tensors(p)
    content.requires_grad_()
    value, out_labels, out_starts, hamming = st.semimarkov_loss_augmented(
        content, trans, labels, starts, max_len=S, h=h, rescaling=rescaling, lengths=lengths, weights=weights,
        max_count=max_count, **kw)
    sm = check_semimarkov(content, trans, S, kw["length_scores"], kw["boundary"], kw["segment_scores"],
                          kw["start"], kw["end"], lengths, kw["segment_plif"])
    weight = torch.ones(B, dtype=torch.float64) if rescaling == "margin" else torch.tensor(
        [float(h_fn(float(k))) for k in hamming])
    reference = weight * (reference_score(sm, out_labels.clamp(min=0), out_starts)
                          - reference_score(sm, labels, starts))
    (got,) = torch.autograd.grad(value.sum(), content)
    (want,) = torch.autograd.grad(reference.sum(), content)
    torch.testing.assert_close(got, want)
    w = np.ones((B, T)) if weights is None else weights.numpy()
    for b in range(B):
        L = int(lengths[b])
        rows = brute(p, b, L, S, N)
        y, gold = targets[b][0], targets[b][2]
        best = -np.inf
        for lab, _, s in rows:
            if s == -np.inf:
                continue
            k = sum(w[b, i] for i in range(L) if lab[i] != y[i])
            best = max(best, s + h_fn(k) - gold if rescaling == "margin" else h_fn(k) * (1 + s - gold))
        assert np.isclose(value[b].item(), best, atol=1e-8)
        got = tuple(out_labels[b, :L].tolist())
        assert np.isclose(hamming[b].item(), sum(w[b, i] for i in range(L) if got[i] != y[i]))
        assert (out_labels[b, L:] == -1).all() and not out_starts[b, L:].any()
    # integer weights count in int64, real ones in float64; integral floating ones in either (by their
    # values on the host, by their dtype where nothing is read back: the triton backend's fold)
    inside = w * (np.arange(T) < lengths.numpy()[:, None])
    if weights is None or not weights.dtype.is_floating_point:
        assert hamming.dtype == torch.long
    elif not (inside == inside.round()).all():
        assert hamming.dtype == torch.float64


def _segments(labels, starts):
    """The set of (start, end, label) triples of a segmentation given as tuples over [0, L)."""
    L = len(labels)
    begins = [t for t in range(L) if starts[t]]
    return {(s, e, labels[s]) for s, e in zip(begins, begins[1:] + [L] if begins else [], strict=True)}


def _segment_loss(kind, lab, sts, y, ys):
    if kind == "boundary":
        return sum(a != b for a, b in zip(sts, ys, strict=True))
    diff = len(_segments(lab, sts) ^ _segments(y, ys))
    return min(diff, 1) if kind == "zero_one" else diff


@given(problem=problems(), rescaling=st_.sampled_from(["margin", "slack"]),
       kind=st_.sampled_from(["segment", "boundary", "zero_one"]), h_kind=st_.sampled_from(["id", "sin"]),
       seed=st_.integers(0, 2**31))
def test_segment_losses_match_enumeration(backend, problem, rescaling, kind, h_kind, seed):
    """The segment-level losses (segments in the symmetric difference, boundaries, 0/1), both
    rescalings, the identity and a sign-changing h: value and count against enumeration, and the
    found segmentation attains the value."""
    p, S, lengths, integer = problem
    B, T, N = p["content"].shape
    rng = np.random.default_rng(seed)
    targets, labels, starts = _random_targets(p, S, lengths, rng)
    h_fn = (lambda k: k) if h_kind == "id" else (lambda k: 2 * np.sin(k + 0.5))
    h = None if h_kind == "id" else (lambda k: 2 * torch.sin(k + 0.5))
    content, trans, kw = tensors(p)
    value, out_labels, out_starts, count = st.semimarkov_loss_augmented(
        content, trans, labels, starts, max_len=S, h=h, rescaling=rescaling, lengths=lengths, loss=kind, **kw)
    for b in range(B):
        L = int(lengths[b])
        rows = brute(p, b, L, S, N)
        y, ys, gold = targets[b]
        best = -np.inf
        for lab, sts, s in rows:
            if s == -np.inf:
                continue
            k = _segment_loss(kind, lab, sts, y, ys)
            best = max(best, s + h_fn(k) - gold if rescaling == "margin" else h_fn(k) * (1 + s - gold))
        assert np.isclose(value[b].item(), best, atol=1e-8), (b, value[b].item(), best)
        found = (tuple(out_labels[b, :L].tolist()), tuple(out_starts[b, :L].tolist()))
        k = _segment_loss(kind, *found, y, ys)
        assert count[b].item() == k
        s = dict(((lab, sts), sc) for lab, sts, sc in rows)[found]
        attained = s + h_fn(k) - gold if rescaling == "margin" else h_fn(k) * (1 + s - gold)
        assert np.isclose(attained, best, atol=1e-8)
        assert (out_labels[b, L:] == -1).all() and not out_starts[b, L:].any()


@given(problem=problems(), kind=st_.sampled_from(["hamming", "segment", "boundary"]), negate=st_.booleans(),
       seed=st_.integers(0, 2**31))
def test_compiled_tables_match_the_reference(problem, kind, negate, seed):
    """The compiled count tables (``csrc/semimarkov.cpp``) against the PyTorch loop: the same best
    score for every count (-inf included; bit for bit but for the segment PLiF's interpolation,
    which the compiler may fuse into one rounding) and the same backtracked segmentation for every
    count (-1 rows where unreached); weighted position losses, segment PLiFs and -inf included."""
    from structtorch.lossaug import _cpu, _torch

    if _cpu.chain_ops() is None:
        pytest.skip("compiled kernels unavailable")
    p, S, lengths, _ = problem
    B, T, N = p["content"].shape
    rng = np.random.default_rng(seed)
    _, labels, starts = _random_targets(p, S, lengths, rng)
    content, trans, kw = tensors(p)
    sm = check_semimarkov(content, trans, S, kw["length_scores"], kw["boundary"], kw["segment_scores"],
                          kw["start"], kw["end"], lengths, kw["segment_plif"])
    mask = torch.arange(T) < lengths[:, None]
    model = structures._SemiMarkovStructure(sm, labels, starts, mask)
    if kind == "hamming":
        weights = torch.from_numpy(rng.integers(0, 3, size=(B, T)))
        terms = _torch.unit_terms(weights.unsqueeze(2) * (torch.arange(N) != labels.unsqueeze(2)))
        offset, K = lengths.new_zeros(B), max(int(weights.sum(1).max()) if B else 0, 0)
    else:
        counts = model.segments(kind)
        terms, offset, K = counts.terms, counts.offset, model.bound(kind)
    if negate:  # the min table of a sign-changing h
        sm = sm.replace(content=_torch.negate_scores(sm.content), transitions=_torch.negate_scores(sm.transitions))
    got, want = _cpu.semimarkov_tables(sm, terms, offset, K), _torch.semimarkov_tables(sm, terms, offset, K)
    torch.testing.assert_close(got.best, want.best, rtol=1e-13, atol=1e-13)
    assert p.get("plif") is not None or torch.equal(got.best, want.best)
    for k in range(-1, K + 1):  # unreached counts (and -1) give -1 rows
        ks = torch.full((B,), k)
        assert torch.equal(got.backtrack(ks), want.backtrack(ks))


@pytest.mark.parametrize("kind", ["boundary", "segment"])
def test_segment_losses_fold_like_the_table(backend, kind, monkeypatch):
    """Margin rescaling of the boundary (segment) loss runs one Viterbi on folded boundary
    (segment) scores: the same value and count as the count table (algorithm="hamming"), and the
    gradient of the value. The segment bonus is built two batch rows at a time. (On the triton
    backend "auto" takes the fused count table, a constant number of device ops, and
    ``algorithm="viterbi"`` asks for the fold.)"""
    monkeypatch.setattr(structures, "FOLD_ELEMENTS", 2 * 14 * 4 * 3)
    folds = []
    fold = structures._SemiMarkovStructure.fold
    monkeypatch.setattr(structures._SemiMarkovStructure, "fold", lambda self, k: folds.append(k) or fold(self, k))
    g = torch.Generator().manual_seed(3)
    B, T, N, S = 6, 14, 3, 4
    content = torch.randn(B, T, N, generator=g, dtype=torch.float64, requires_grad=True)
    trans = torch.randn(N, N, generator=g, dtype=torch.float64)
    lengths = torch.tensor([14, 9, 1, 0, 5, 12])
    _, labels, starts = st.semimarkov_viterbi(torch.randn(B, T, N, generator=g), trans.float(), max_len=S,
                                              lengths=lengths)
    with use_backend(backend):
        args = (content, trans, labels.clamp(min=0), starts)
        kw = dict(max_len=S, lengths=lengths, loss=kind)
        folded = st.semimarkov_loss_augmented(*args, algorithm="viterbi" if backend == "triton" else "auto", **kw)
        table = st.semimarkov_loss_augmented(*args, algorithm="hamming", **kw)
    assert folds == [kind]  # the first call folded, the table did not
    assert torch.allclose(folded[0], table[0]) and torch.equal(folded[3], table[3])
    folded[0].sum().backward()
    found = torch.nn.functional.one_hot(folded[1].clamp(min=0), N) * (folded[1] >= 0).unsqueeze(2)
    gold = torch.nn.functional.one_hot(labels.clamp(min=0), N) * (labels >= 0).unsqueeze(2)
    assert torch.equal(content.grad, (found - gold).double())


def test_segment_loss_errors():
    c, A = torch.zeros(1, 4, 2), torch.zeros(2, 2)
    labels, starts = torch.zeros(1, 4, dtype=torch.long), torch.tensor([[True, False, True, False]])
    with pytest.raises(ValueError, match="loss must be one of"):
        st.semimarkov_loss_augmented(c, A, labels, starts, max_len=2, loss="exon")
    with pytest.raises(ValueError, match="weights weight positions"):
        st.semimarkov_loss_augmented(c, A, labels, starts, max_len=2, loss="segment", weights=torch.ones(1, 4))
    with pytest.raises(ValueError, match="algorithm='viterbi' needs a loss that folds"):
        st.semimarkov_loss_augmented(c, A, labels, starts, max_len=2, loss="zero_one", algorithm="viterbi")
    c = torch.randn(1, 4, 2, generator=torch.Generator().manual_seed(0))
    hinge = st.StructuredHingeLoss("slack", loss="segment", reduction="none")  # the module passes loss=
    value = hinge(st.SemiMarkovDistribution(c, A, max_len=2), (labels, starts))
    want = st.semimarkov_loss_augmented(c, A, labels, starts, max_len=2, loss="segment", rescaling="slack")[0]
    torch.testing.assert_close(value, want.clamp(min=0))
    assert want.item() > 0  # a differing segmentation has a positive slack-rescaled value here


def test_loss_augmented_target_errors():
    c, A = torch.zeros(1, 4, 2), torch.zeros(2, 2)
    starts = torch.tensor([[True, False, False, False]])
    with pytest.raises(ValueError, match="target has a segment longer than max_len = 2"):
        st.semimarkov_loss_augmented(c, A, torch.zeros(1, 4, dtype=torch.long), starts, max_len=2)
    with pytest.raises(ValueError, match=r"target_labels change inside a segment at \[0, 2\]"):
        st.semimarkov_loss_augmented(c, A, torch.tensor([[0, 0, 1, 1]]), starts, max_len=4)
    with pytest.raises(TypeError, match=r"target_starts must be a bool tensor of shape \(B, T\) = \(1, 4\)"):
        st.semimarkov_loss_augmented(c, A, torch.zeros(1, 4, dtype=torch.long), starts.long(), max_len=4)


def test_hinge_trains_a_semimarkov_model():
    """Label-1 segments always have length 3; the noisy content alone is ambiguous. Training the
    content scale, length scores and transitions with the slack hinge recovers the segmentation."""
    torch.manual_seed(0)
    B, N, S = 32, 2, 4
    labels = torch.tensor([[0, 1, 1, 1, 0, 0, 1, 1, 1, 0, 1, 1, 1]]).repeat(B, 1)
    T = labels.shape[1]
    starts = torch.cat([torch.ones(B, 1, dtype=torch.bool), labels[:, 1:] != labels[:, :-1]], 1)
    starts[:, 5] = True  # two label-0 segments of length 1
    signal = torch.nn.functional.one_hot(labels, N).float() * 2 - 1
    content = signal + 1.0 * torch.randn(B, T, N)
    scale = torch.ones((), requires_grad=True)
    length = torch.zeros(S, N, requires_grad=True)
    A = torch.zeros(N, N, requires_grad=True)
    opt = torch.optim.Adam([scale, length, A], lr=0.1)
    loss = st.StructuredHingeLoss(rescaling="slack")
    first = None
    for _ in range(80):
        value = loss(scale * content, A, labels, max_len=S, target_starts=starts, length_scores=length)
        first = value.item() if first is None else first
        opt.zero_grad()
        value.backward()
        opt.step()
    assert value.item() < 0.5 * first
    _, got, _ = st.semimarkov_viterbi(scale.detach() * content, A.detach(), max_len=S, length_scores=length.detach())
    _, local = (scale.detach() * content).max(-1)
    assert (got == labels).float().mean() > (local == labels).float().mean() + 0.05


def test_huge_magnitude_content_does_not_spoil_later_segments(backend):
    """A -1e20 soft mask at position 0 must not cost precision anywhere else (no prefix sums)."""
    torch.manual_seed(0)
    c = torch.randn(1, 6, 2, dtype=torch.float64)
    c[0, 0, 0] = -1e20
    A = torch.zeros(2, 2, dtype=torch.float64)
    p = {"content": c.numpy(), "trans": A.numpy(), "length": np.zeros((1, 3, 2)), "boundary": np.zeros((1, 6, 2)),
         "start": np.zeros((1, 2)), "end": np.zeros((1, 2)), "segment": None}
    rows = brute(p, 0, 6, 3, 2)
    scores = np.array([r[2] for r in rows])
    score, labels, starts = st.semimarkov_viterbi(c, A, max_len=3)
    assert np.isclose(score.item(), scores.max(), atol=1e-9)
    m = scores.max()
    logz = st.semimarkov_log_partition(c, A, max_len=3)
    assert np.isclose(logz.item(), m + np.log(np.exp(scores - m).sum()), atol=1e-9)


def test_max_len_beyond_t_costs_nothing_extra():
    c, A = torch.randn(2, 5, 3), torch.randn(3, 3)
    a = st.semimarkov_viterbi(c, A, max_len=10**7)
    b = st.semimarkov_viterbi(c, A, max_len=5)
    assert torch.equal(a[1], b[1]) and torch.equal(a[2], b[2])
    torch.testing.assert_close(st.semimarkov_log_partition(c, A, max_len=10**7), st.semimarkov_log_partition(c, A, max_len=5))


def test_semimarkov_arguments_need_max_len():
    c, A, y = torch.zeros(1, 4, 2), torch.zeros(2, 2), torch.zeros(1, 4, dtype=torch.long)
    with pytest.raises(ValueError, match="target_starts, length_scores need max_len"):
        st.structured_hinge(c, A, y, target_starts=torch.ones(1, 4, dtype=torch.bool), length_scores=torch.zeros(2, 2))
    with pytest.raises(TypeError, match="max_len must be an int, got float"):
        st.semimarkov_viterbi(c, A, max_len=2.0)
    with pytest.raises(ValueError, match=r"content must have shape \(B, T, N\)"):
        st.semimarkov_viterbi(torch.zeros(4, 2), A, max_len=2)


@given(problem=problems(), data=st_.data())
def test_public_semimarkov_score_matches_enumeration(backend, problem, data):
    """st.semimarkov_score on raw potentials equals the enumerated score of any segmentation, on
    every backend, and differentiates as the PyTorch reference."""
    p, S, lengths, _ = problem
    B, T, N = p["content"].shape
    labels = torch.zeros(B, T, dtype=torch.long)
    starts = torch.zeros(B, T, dtype=torch.bool)
    expected = []
    for b in range(B):
        L = int(lengths[b])
        rows = brute(p, b, L, S, N)
        lab, sta, score = rows[data.draw(st_.integers(0, len(rows) - 1))]
        labels[b, :L], starts[b, :L] = torch.tensor(lab, dtype=torch.long), torch.tensor(sta, dtype=torch.bool)
        expected.append(score)
    content, trans, kw = tensors(p)
    content.requires_grad_()
    got = st.semimarkov_score(content, trans, labels, starts, max_len=S, lengths=lengths, **kw)
    for b in range(B):
        if expected[b] == -np.inf:
            assert got[b] == float("-inf")
        else:
            assert np.isclose(got[b].item(), expected[b], atol=1e-9)
    finite = torch.isfinite(got)
    assume(bool(finite.any()))
    (grad,) = torch.autograd.grad(got[finite].sum(), content)
    sm = check_semimarkov(content, trans, S, kw["length_scores"], kw["boundary"], kw["segment_scores"],
                          kw["start"], kw["end"], lengths, kw["segment_plif"])
    (want,) = torch.autograd.grad(reference_score(sm, labels, starts)[finite].sum(), content)
    torch.testing.assert_close(grad, want)


def test_public_semimarkov_score_validates_the_segmentation():
    content, trans = torch.randn(1, 4, 2), torch.randn(2, 2)
    labels, starts = torch.tensor([[0, 1, 1, 1]]), torch.tensor([[True, False, False, False]])
    with pytest.raises(ValueError, match=r"labels change inside a segment at \[0, 1\]"):
        st.semimarkov_score(content, trans, labels, starts, max_len=4)
    with pytest.raises(ValueError, match="structure has a segment longer than max_len = 2"):
        st.semimarkov_score(content, trans, torch.zeros(1, 4, dtype=torch.long), starts, max_len=2)
    with pytest.raises(TypeError, match="starts must be a bool tensor"):
        st.semimarkov_score(content, trans, labels, torch.ones(1, 4), max_len=2)


def test_compiled_log_partition_keeps_double_precision():
    """The compiled kernels' vectorized exp (csrc/common.h, exp_nonpositive) against the PyTorch
    reference: log Z to 1e-13 relative and the marginals to 1e-10, with scores of either sign up to
    ~20 and durations up to 40 (many terms far below the largest, some below exp(-708))."""
    g = torch.Generator().manual_seed(3)
    content = (torch.randn(2, 300, 4, generator=g, dtype=torch.float64) * 5).requires_grad_()
    A, length = torch.randn(4, 4, generator=g, dtype=torch.float64), torch.randn(40, 4, generator=g, dtype=torch.float64)
    length[5:9, 1] = -800.0  # terms that underflow against the others
    out = {}
    for name in ("compiled", "torch"):
        with use_backend(name):
            logz = st.semimarkov_log_partition(content, A, max_len=40, length_scores=length)
            out[name] = (logz.detach(), torch.autograd.grad(logz.sum(), content)[0])
    torch.testing.assert_close(out["compiled"][0], out["torch"][0], rtol=1e-13, atol=0)
    torch.testing.assert_close(out["compiled"][1], out["torch"][1], rtol=0, atol=1e-10)
