"""Hidden semi-Markov SVM: score = <w, Psi>, decoding against enumeration, Danskin gradients,
segment-mean PLiFs in the DPs, and bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from brute import all_segmentations
from hypothesis import given, settings
from hypothesis import strategies as st_

import structtorch as st

ALLOWED = torch.tensor([[0, 1, 1], [1, 0, 1], [1, 1, 1]], dtype=torch.bool)


def make_model(seed: int, *, content_sums: bool = True, monotone=None) -> st.HiddenSemiMarkovSVM:
    torch.manual_seed(seed)
    model = st.HiddenSemiMarkovSVM(ALLOWED, 3, signal_of=[0, -1, 1], content_of=[1, 0, -1], start_labels=[0, 1],
                                   end_labels=[1, 2], num_points=4, signal_range=(-1.0, 1.0),
                                   content_range=(-1.0, 0.5), length_range=(1.0, 3.0), monotone=monotone,
                                   content_sums=content_sums).double()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_()
    return model


def feasible(model, signals, labels, starts, L):
    """Grammar, start/end labels and finite signals at the segment ends."""
    lab = labels[:L].tolist()
    bounds = starts[:L].nonzero().squeeze(1).tolist() + [L]
    segs = [lab[s] for s in bounds[:-1]]
    if not model.start_mask[segs[0]] or not model.end_mask[segs[-1]]:
        return False
    if any(not model.allowed[a, b] for a, b in zip(segs[:-1], segs[1:], strict=True)):
        return False
    for s, e in zip(bounds[:-1], bounds[1:], strict=True):
        k = model.signal_of[lab[s]]
        if k >= 0 and signals[e - 1, k] == float("-inf"):
            return False
    return True


@settings(max_examples=25, deadline=None)
@given(seed=st_.integers(0, 2**31 - 1), L=st_.integers(1, 6), p_inf=st_.sampled_from([0.0, 0.3]),
       content_sums=st_.booleans())
def test_score_is_feature_map_dot_weights_and_decode_is_the_max(seed, L, p_inf, content_sums):
    model = make_model(seed % 1000, content_sums=content_sums)
    g = torch.Generator().manual_seed(seed)
    T = 6
    signals = 1.5 * torch.randn(1, T, 2, generator=g, dtype=torch.float64)
    signals[torch.rand(1, T, 2, generator=g) < p_inf] = float("-inf")
    contents = torch.randn(1, T, 2, generator=g, dtype=torch.float64)
    labels, starts = all_segmentations(L, T, 3, 3)
    M = labels.shape[0]
    rows = [i for i in range(M) if feasible(model, signals[0], labels[i], starts[i], L)]
    score, best_labels, best_starts = model.decode(signals, contents, lengths=torch.tensor([L]))
    if not rows:
        assert score.item() == float("-inf") and (best_labels == -1).all()
        return
    sig, con = signals.expand(len(rows), T, 2), contents.expand(len(rows), T, 2)
    lengths = torch.full((len(rows),), L)
    with torch.no_grad():
        by_dp = model.score(sig, con, labels[rows], starts[rows], lengths)
        by_psi = model.feature_map(sig, con, labels[rows], starts[rows], lengths) @ model.weights()
    torch.testing.assert_close(by_dp, by_psi, rtol=1e-10, atol=1e-10)
    assert np.isclose(score.item(), float(by_psi.max()), atol=1e-9)
    # the decoded segmentation's feature map reproduces the decoded score
    psi = model.feature_map(signals, contents, best_labels, best_starts, torch.tensor([L]))[0]
    assert np.isclose(float((psi @ model.weights()).detach()), score.item(), atol=1e-9)


def test_parameter_gradients_are_the_feature_map():
    """d score / d ordinates = Psi (the score is linear in the ordinates)."""
    model = make_model(3, monotone=None)
    g = torch.Generator().manual_seed(0)
    signals = torch.randn(2, 6, 2, generator=g, dtype=torch.float64)
    contents = torch.randn(2, 6, 2, generator=g, dtype=torch.float64)
    score, labels, starts = model.decode(signals, contents)
    score.sum().backward()
    psi = model.feature_map(signals, contents, labels, starts).sum(0)
    grads = [model.transition_bias.grad[model.allowed], model.signal_plif.raw.grad.reshape(-1),
             model.content_plif.raw.grad.reshape(-1), model.length_plif.raw.grad.reshape(-1),
             model.content_weight.grad]
    torch.testing.assert_close(torch.cat(grads), psi)


def test_margin_training_separates_a_small_problem():
    """A few Adam steps on the hinge drive the training loss down and decode the targets."""
    model = make_model(5, monotone="increasing")
    g = torch.Generator().manual_seed(1)
    B, T = 8, 6
    signals = torch.randn(B, T, 2, generator=g, dtype=torch.float64)
    contents = torch.randn(B, T, 2, generator=g, dtype=torch.float64)
    with torch.no_grad():
        teacher = make_model(11, monotone=None)
        _, labels, starts = teacher.decode(signals, contents)
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    first = None
    for _ in range(150):
        loss = model.loss(signals, contents, labels.clamp(min=0), starts)
        first = float(loss.detach()) if first is None else first
        opt.zero_grad()
        (loss + 1e-3 * model.smoothness()).backward()
        opt.step()
    assert float(loss.detach()) < 0.5 * first
    _, pred, _ = model.decode(signals, contents)
    assert float((pred == labels).double().mean()) > 0.8


def test_slack_rescaling_matches_enumeration():
    model = make_model(7)
    g = torch.Generator().manual_seed(2)
    T = 5
    signals = torch.randn(1, T, 2, generator=g, dtype=torch.float64)
    contents = torch.randn(1, T, 2, generator=g, dtype=torch.float64)
    labels, starts = all_segmentations(T, T, 3, 3)
    rows = [i for i in range(labels.shape[0]) if feasible(model, signals[0], labels[i], starts[i], T)]
    labels, starts = labels[rows], starts[rows]
    with torch.no_grad():
        scores = model.score(signals.expand(len(rows), T, 2), contents.expand(len(rows), T, 2), labels, starts)
    target = int(scores.argmin())
    hamming = (labels != labels[target]).sum(1).double()
    expected = (hamming * (1 + scores - scores[target])).max().clamp(min=0)
    got = model.loss(signals, contents, labels[target:target + 1], starts[target:target + 1], rescaling="slack")
    assert np.isclose(got.item(), expected.item(), atol=1e-9)


def test_log_partition_with_segment_plif_gradcheck():
    g = torch.Generator().manual_seed(4)
    content = torch.randn(2, 5, 2, generator=g, dtype=torch.float64)
    trans = torch.randn(2, 2, generator=g, dtype=torch.float64)
    tracks = torch.randn(2, 5, 2, generator=g, dtype=torch.float64, requires_grad=True)
    ordinates = torch.randn(2, 4, generator=g, dtype=torch.float64, requires_grad=True)

    def f(tracks, ordinates):
        plif = st.SegmentPLiF(tracks, ordinates, -3.0, 3.0)
        return st.semimarkov_log_partition(content, trans, max_len=3, segment_plif=plif,
                                           lengths=torch.tensor([5, 3]))

    assert torch.autograd.gradcheck(f, (tracks, ordinates))


def test_plif_basis_reproduces_the_plif():
    plif = st.PLiF(5, -1.0, 2.0, num_functions=1).double()
    with torch.no_grad():
        plif.raw.normal_()
    x = torch.linspace(-2, 3, 41, dtype=torch.float64)
    phi = st.plif_basis(x, 5, -1.0, 2.0)
    torch.testing.assert_close(phi @ plif.ordinates[0], plif(x))
    assert torch.allclose(phi.sum(1), torch.ones(41, dtype=torch.float64))


@pytest.mark.parametrize(
    "plif, message",
    [
        ("nope", "segment_plif must be a SegmentPLiF"),
        (st.SegmentPLiF(torch.zeros(2, 4, 3), torch.zeros(3, 4), 0.0, 1.0), r"tracks must have shape \(B, T, N\) = \(1, 4, 3\)"),
        (st.SegmentPLiF(torch.full((1, 4, 3), float("nan")), torch.zeros(3, 4), 0.0, 1.0), "contains NaN"),
        (st.SegmentPLiF(torch.full((1, 4, 3), float("-inf")), torch.zeros(3, 4), 0.0, 1.0), "tracks must be finite"),
        (st.SegmentPLiF(torch.zeros(1, 4, 3), torch.zeros(2, 4), 0.0, 1.0), r"ordinates must have shape \(N, P\) = \(3, P\)"),
        (st.SegmentPLiF(torch.zeros(1, 4, 3), torch.zeros(3, 1), 0.0, 1.0), "P >= 2"),
        (st.SegmentPLiF(torch.zeros(1, 4, 3), torch.zeros(3, 4), 1.0, 1.0), "finite low < high"),
    ],
)
def test_segment_plif_bad_input(plif, message):
    with pytest.raises((TypeError, ValueError), match=message):
        st.semimarkov_viterbi(torch.zeros(1, 4, 3), torch.zeros(3, 3), max_len=2, segment_plif=plif)


def test_hsm_bad_input():
    with pytest.raises(ValueError, match="max_len must be an int >= 1"):
        st.HiddenSemiMarkovSVM(ALLOWED, 0)
    with pytest.raises(TypeError, match=r"allowed must be a bool tensor of shape \(N, N\)"):
        st.HiddenSemiMarkovSVM(ALLOWED.long(), 3)
    with pytest.raises(ValueError, match=r"signal_of must give one index per label \(N = 3\)"):
        st.HiddenSemiMarkovSVM(ALLOWED, 3, signal_of=[0, 1])
    with pytest.raises(ValueError, match="start_labels must hold labels in"):
        st.HiddenSemiMarkovSVM(ALLOWED, 3, start_labels=[3])
    with pytest.raises(ValueError, match="need finite low < high"):
        st.HiddenSemiMarkovSVM(ALLOWED, 3, signal_of=[0, 0, 0], signal_range=(1.0, 1.0))
    model = make_model(0)
    signals, contents = torch.zeros(1, 4, 2, dtype=torch.float64), torch.zeros(1, 4, 2, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"signals must have shape \(B, T, K\) with K >= 2"):
        model.decode(signals[:, :, :1], contents)
    with pytest.raises(ValueError, match="contents is needed"):
        model.decode(signals, None)
    with pytest.raises(ValueError, match="signals and contents must share"):
        model.decode(signals, contents[:, :3])
    labels = torch.tensor([[0, 0, 0, 0]])
    long_segment = torch.tensor([[True, False, False, False]])
    with pytest.raises(ValueError, match="longer than max_len = 3"):
        model.loss(signals, contents, labels, long_segment)
    bad_grammar = torch.tensor([[0, 0, 0, 1]]), torch.tensor([[True, False, True, True]])  # 0 -> 0 forbidden
    with pytest.raises(ValueError, match="forbidden"):
        model.loss(signals, contents, *bad_grammar)


def test_feature_map_and_score_validate_the_segmentation():
    model = make_model(0)
    signals, contents = torch.zeros(1, 4, 2, dtype=torch.float64), torch.zeros(1, 4, 2, dtype=torch.float64)
    bad_grammar = torch.tensor([[0, 0, 0, 1]]), torch.tensor([[True, False, True, True]])
    for method in (model.score, model.feature_map):
        with pytest.raises(ValueError, match="row 0 is infeasible"):
            method(signals, contents, *bad_grammar)
        with pytest.raises(ValueError, match="longer than max_len = 3"):
            method(signals, contents, torch.tensor([[1, 1, 1, 1]]), torch.tensor([[True, False, False, False]]))
        with pytest.raises(ValueError, match="target_labels"):
            method(signals, contents, torch.tensor([[7, 7, 1, 1]]), torch.tensor([[True, False, True, False]]))
    blocked = signals.clone()
    blocked[0, 1, 0] = float("-inf")  # label 0 uses signal 0: no label-0 segment may end at position 1
    with pytest.raises(ValueError, match="infeasible"):
        model.score(blocked, contents, torch.tensor([[0, 0, 1, 1]]), torch.tensor([[True, False, True, False]]))
    with pytest.raises(TypeError, match="contents has dtype torch.float32 but signals has dtype torch.float64"):
        model.decode(signals, contents.float())
    psi = model.feature_map(signals.float(), contents.float(), torch.tensor([[1, 1, 2, 2]]),
                            torch.tensor([[True, False, True, False]]))
    assert psi.dtype == torch.float64 and psi.shape == (1, model.weights().numel())
