"""The validation switch: value checks raise on CPU, become asynchronous device assertions on other
devices (exercised here by treating CPU tensors as device tensors), and can be switched off."""

from __future__ import annotations

import pytest
import torch
from conftest import use_backend

import structtorch as st
from structtorch import _checks


@pytest.fixture
def as_device(monkeypatch):
    """Run the value checks as they run on a GPU: asynchronous assertions, no host reads."""
    monkeypatch.setattr(_checks, "on_host", lambda x: False)


def _bad_inputs():
    u, a = torch.randn(2, 3, 4), torch.zeros(4, 4)
    nan = u.clone()
    nan[1, 2, 3] = float("nan")
    y = torch.tensor([[0, 1, 0], [2, 2, 3]])
    w_nan = torch.ones(2, 3)
    w_nan[0, 1] = float("nan")
    a_forbid = torch.zeros(4, 4)
    a_forbid[0, 1] = float("-inf")  # the first target uses it
    return {
        "unary NaN": (lambda: st.viterbi(nan, a), "unary contains NaN or \\+inf"),
        "lengths": (lambda: st.log_partition(u, a, lengths=torch.tensor([4, 1])), r"lengths must lie in \[0, T\]"),
        "labels": (lambda: st.path_score(u, a, torch.tensor([[0, 4, 0], [0, 0, 0]])), r"labels must lie in \[0, N\)"),
        "overflow": (lambda: st.viterbi(torch.full((1, 3, 2), 2e38), torch.zeros(2, 2)), "the Viterbi score overflows"),
        # issue 21 item 13: the loss-augmented solvers' own value checks follow the switch too
        "weights NaN": (lambda: st.loss_augmented(u, a, y, weights=w_nan), "weights must be finite"),
        "cost NaN": (lambda: st.loss_augmented(u, a, y, cost=torch.full((4, 4), float("nan"))),
                     "cost must be finite"),
        "h NaN": (lambda: st.loss_augmented(u, a, y, h=lambda k: k.sqrt() * float("nan")), "h must be finite"),
        "h inf, slack": (lambda: st.loss_augmented(u, a, y, h=1 / (2 - torch.arange(4.0)), rescaling="slack"),
                         "h must be finite"),
        "target -inf": (lambda: st.loss_augmented(u, a_forbid, y, rescaling="slack"), "target has score -inf"),
        "semimarkov target -inf": (lambda: st.semimarkov_loss_augmented(
            u, a_forbid, y, torch.ones(2, 3, dtype=torch.bool), max_len=1), "target has score -inf"),
        "PLiF x NaN": (lambda: st.PLiF(3, 0.0, 1.0)(torch.tensor([0.5, float("nan")])), "x contains NaN"),
    }


@pytest.mark.parametrize("case", list(_bad_inputs()))
def test_device_checks_are_async_assertions(as_device, case):
    call, message = _bad_inputs()[case]
    with pytest.raises(RuntimeError, match="structtorch: " + message):  # _assert_async raises at once on CPU
        call()


@pytest.mark.parametrize("case", list(_bad_inputs()))
def test_triton_backend_checks_as_on_a_gpu(case):
    """On the triton backend (Triton's interpreter here) the checks take the GPU's path: the bad
    entries of each checked tensor are counted on the device and one assertion, listing the
    checks made, ends the call."""
    call, message = _bad_inputs()[case]
    with use_backend("triton"), pytest.raises(RuntimeError, match=message):
        call()


@pytest.mark.parametrize("case", list(_bad_inputs()))
def test_value_checks_can_be_switched_off(as_device, case):
    call, _ = _bad_inputs()[case]
    with st.set_validation(False):
        assert not st.validation_enabled()
        try:
            call()
        except (IndexError, RuntimeError) as exc:  # only PyTorch's own bounds checks remain
            assert "structtorch" not in str(exc)
    assert st.validation_enabled()


def test_cpu_checks_name_the_entry_and_respect_the_switch():
    u = torch.randn(2, 3, 4)
    u[1, 2, 3] = float("nan")
    with pytest.raises(ValueError, match=r"unary contains NaN at index \(1, 2, 3\)"):
        st.viterbi(u, torch.zeros(4, 4))
    st.set_validation(False)  # a plain call sets it for the process
    try:
        st.viterbi(u, torch.zeros(4, 4))
    finally:
        st.set_validation(True)
    with pytest.raises(TypeError, match="enabled must be a bool"):
        st.set_validation("no")


@pytest.mark.parametrize("case", [c for c in _bad_inputs() if c not in ("lengths", "labels")])
def test_cpu_value_checks_can_be_switched_off(case):
    """On CPU (host checks) too: no structtorch ValueError with value checks off."""
    call, message = _bad_inputs()[case]
    with pytest.raises(ValueError, match=message.split(" ")[0]):
        call()
    with st.set_validation(False):
        try:
            call()
        except (IndexError, RuntimeError) as exc:
            assert "structtorch" not in str(exc)


def test_valid_inputs_pass_the_device_checks(as_device):
    u, a = torch.randn(2, 3, 4), torch.randn(4, 4)
    ref = st.viterbi(u, a)
    torch.testing.assert_close(st.marginals(u, a).sum(-1), torch.ones(2, 3))
    assert torch.equal(st.viterbi(u, a)[1], ref[1])


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_masks_pass_the_device_checks(as_device, backend):
    """Runs anywhere in a row, full and empty rows, on the device path too: the path lies exactly
    at the mask (no check refuses a mask)."""
    crf = st.LinearChainCRF(3)
    u = torch.randn(4, 5, 3)
    mask = torch.tensor([[0, 1, 1, 0, 0], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0], [0, 0, 0, 0, 1]], dtype=torch.bool)
    with use_backend(backend):
        _, paths = crf.decode(u, mask)
    assert torch.equal(paths >= 0, mask)


def test_an_interleaved_mask_takes_the_device_path():
    """On the device path (the triton backend in the interpreter) a mask with two runs is moved
    without a check or a host read: the same path as on the host."""
    crf = st.LinearChainCRF(3)
    mask = torch.tensor([[1, 0, 1], [0, 0, 0]], dtype=torch.bool)
    emissions = torch.randn(2, 3, 3)
    want = crf.decode(emissions, mask)
    with use_backend("triton"):
        got = crf.decode(emissions, mask)
    torch.testing.assert_close(got[0], want[0])
    assert torch.equal(got[1], want[1]) and torch.equal(got[1] >= 0, mask)


def test_segment_plif_checks_follow_the_switch(as_device):
    """Review finding: the PLiF finiteness checks read the tensors on the host whatever the switch."""
    tracks = torch.zeros(1, 3, 2)
    tracks[0, 1, 0] = float("-inf")  # allowed in potentials, not in tracks
    plif = st.SegmentPLiF(tracks, torch.zeros(2, 3), -1.0, 1.0)
    with pytest.raises(RuntimeError, match="structtorch: segment_plif.tracks must be finite"):
        st.semimarkov_viterbi(torch.zeros(1, 3, 2), torch.zeros(2, 2), max_len=2, segment_plif=plif)
    with st.set_validation(False):
        st.semimarkov_viterbi(torch.zeros(1, 3, 2), torch.zeros(2, 2), max_len=2, segment_plif=plif)


@pytest.mark.parametrize("labels, starts, message", [
    ([[0, 1, 1, 1]], [[1, 0, 1, 0]], "change inside a segment"),  # 0 -> 1 without a start
    ([[0, 0, 0, 1]], [[1, 0, 0, 1]], "longer than max_len = 2"),  # a segment of 3
    ([[0, 0, 1, 1]], [[1, 0, 1, 0]], None),  # valid
])
def test_segmentation_checks_are_counted_on_the_device(labels, starts, message):
    """On the triton backend the target segmentation's checks are one count on the device."""
    c, A = torch.zeros(1, 4, 2), torch.zeros(2, 2)
    labels, starts = torch.tensor(labels), torch.tensor(starts, dtype=torch.bool)
    with use_backend("triton"):
        if message is None:
            st.semimarkov_loss_augmented(c, A, labels, starts, max_len=2)
        else:
            with pytest.raises(RuntimeError, match=message):
                st.semimarkov_loss_augmented(c, A, labels, starts, max_len=2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_one_reduction_check_lets_nothing_through(dtype):
    """The host check's fast path (one sum): -inf entries and finite entries whose sum overflows
    pass; a NaN, a +inf, and a +inf beside a -inf (sum NaN) are refused and located."""
    big = torch.finfo(dtype).max
    fine = [torch.tensor([[0.0, float("-inf")], [1.0, 2.0]], dtype=dtype),
            torch.tensor([big, big, -1.0], dtype=dtype)]  # the sum overflows to +inf: looked at, fine
    for x in fine:
        _checks.check_values("unary", x)
    for bad, what in ((float("nan"), "NaN"), (float("inf"), r"\+inf")):
        for other in (0.0, float("-inf")):
            x = torch.tensor([1.0, other, bad, 2.0], dtype=dtype)
            with pytest.raises(ValueError, match=rf"unary contains {what} at index \(2,\)"):
                _checks.check_values("unary", x)
    _checks.check_values("tracks", torch.tensor([float("inf"), 1.0], dtype=dtype), posinf=True)
    _checks.check_values("tracks", torch.tensor([float("inf"), float("-inf")], dtype=dtype), posinf=True)
    with pytest.raises(ValueError, match="NaN"):
        _checks.check_values("tracks", torch.tensor([float("inf"), float("-inf"), float("nan")], dtype=dtype),
                             posinf=True)
