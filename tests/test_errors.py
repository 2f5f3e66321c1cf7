"""Bad input gets a clear error naming the argument and the expected shape."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import structtorch as st

U = torch.zeros(2, 3, 4)
A = torch.zeros(4, 4)
FNS = [st.viterbi, st.log_partition, st.marginals]


@pytest.mark.parametrize("fn", FNS)
@pytest.mark.parametrize(
    "args, kwargs, exc, message",
    [
        ((torch.zeros(3, 4), A), {}, ValueError, r"unary must have shape \(B, T, N\), got \(3, 4\)"),
        ((torch.zeros(2, 3, 0), torch.zeros(0, 0)), {}, ValueError, r"at least one label \(N >= 1\)"),
        ((U.long(), A), {}, TypeError, "unary must be float32 or float64, got torch.int64"),
        (([[0.0]], A), {}, TypeError, "unary must be a torch.Tensor"),
        ((U, torch.zeros(3, 3)), {}, ValueError,
         r"transitions must have shape \(N, N\) = \(4, 4\), or per step \(B, T-1, N, N\) = \(2, 2, 4, 4\), "
         r"\(1, T-1, N, N\) or \(T-1, N, N\), got \(3, 3\)"),
        ((U, torch.zeros(2, 3, 4, 4)), {}, ValueError, r"\(B, T-1, N, N\) = \(2, 2, 4, 4\), .* got \(2, 3, 4, 4\)"),
        ((U, A.double()), {}, TypeError, "transitions has dtype torch.float64 but unary has dtype torch.float32"),
        ((U, A), {"start": torch.zeros(3)}, ValueError, r"start must have shape \(N,\) = \(4,\) or \(B, N\) = \(2, 4\), got \(3,\)"),
        ((U, A), {"end": torch.zeros(1, 4)}, ValueError, r"end must have shape \(N,\) = \(4,\) or \(B, N\) = \(2, 4\), got \(1, 4\)"),
        ((U, A), {"lengths": torch.tensor([1, 4])}, ValueError, r"lengths must lie in \[0, T\] = \[0, 3\], got min 1 and max 4"),
        ((U, A), {"lengths": torch.tensor([-1, 2])}, ValueError, r"lengths must lie in \[0, T\] = \[0, 3\]"),
        ((U, A), {"lengths": torch.tensor([1.0, 2.0])}, TypeError, r"lengths must be an integer tensor of shape \(2,\)"),
        ((U, A), {"lengths": torch.tensor([1, 2, 3])}, ValueError, r"lengths must have shape \(B,\) = \(2,\), got \(3,\)"),
    ],
)
def test_bad_shapes_and_types(fn, args, kwargs, exc, message):
    with pytest.raises(exc, match=message):
        fn(*args, **kwargs)


@pytest.mark.parametrize("fn", FNS)
def test_nan_is_located(fn):
    u = U.clone()
    u[1, 2, 3] = float("nan")
    with pytest.raises(ValueError, match=r"unary contains NaN at index \(1, 2, 3\)"):
        fn(u, A)
    a = A.clone()
    a[0, 1] = float("inf")
    with pytest.raises(ValueError, match=r"transitions contains \+inf at index \(0, 1\)"):
        fn(U, a)
    with pytest.raises(ValueError, match=r"start contains NaN at index \(2,\)"):
        fn(U, A, start=torch.tensor([0.0, 0.0, float("nan"), 0.0]))


def test_lengths_may_be_a_list():
    score, path = st.viterbi(U, A, lengths=[3, 1])
    assert path[1].tolist() == [0, -1, -1]


def test_path_score_label_errors():
    with pytest.raises(ValueError, match=r"labels\[1, 0\] = -1"):
        st.path_score(U, A, torch.tensor([[0, 1, 2], [-1, 0, 0]]))
    with pytest.raises(TypeError, match=r"labels must be an integer tensor of shape \(B, T\) = \(2, 3\)"):
        st.path_score(U, A, torch.zeros(2, 3))
    with pytest.raises(ValueError, match=r"labels must have shape \(B, T\) = \(2, 3\), got \(2, 2\)"):
        st.path_score(U, A, torch.zeros(2, 2, dtype=torch.long))
    # beyond the length anything goes
    got = st.path_score(U, A, torch.tensor([[0, 1, 2], [1, 99, -5]]), lengths=torch.tensor([3, 1]))
    assert got.tolist() == [0.0, 0.0]


def test_kbest_k_must_be_a_positive_integer():
    with pytest.raises(ValueError, match="k must be >= 1, got 0"):
        st.kbest(U, A, 0)
    with pytest.raises(TypeError, match="k must be an int, got float"):
        st.kbest(U, A, 2.0)
    assert st.kbest(U, A, np.int64(2))[0].shape == (2, 2)


def test_devices_must_match():
    meta = torch.zeros(4, 4, device="meta")
    with pytest.raises(ValueError, match="transitions is on meta but unary is on cpu"):
        st.viterbi(U, meta)


def test_minus_100_tags_without_ignore_index_say_how_to_pass_it():
    """Issue 41: -100 tags without ignore_index got a good error that did not say ignore_index=-100."""
    tags = torch.tensor([[0, -100, 1, 2]])
    hint = r"tags\[0, 1\] = -100; if -100 marks unlabeled positions \(partial labels\), pass ignore_index=-100"
    with pytest.raises(ValueError, match=hint):
        st.LinearChainCRF(3)(torch.randn(1, 4, 3), tags)
    with pytest.raises(ValueError, match=hint.replace("tags", "target")):
        st.loss_augmented(torch.randn(1, 4, 3), torch.randn(3, 3), tags)
    with pytest.raises(ValueError, match=r"tags\[0, 1\] = -100; .* pass ignore_index=-100"):  # another ignore_index
        st.LinearChainCRF(3, ignore_index=-1)(torch.randn(1, 4, 3), tags)
    with pytest.raises(ValueError, match=r"tags\[0, 1\] = 3\)?$"):  # too large: no hint
        st.LinearChainCRF(3)(torch.randn(1, 4, 3), tags.abs().clamp(max=3))
    assert torch.isfinite(st.LinearChainCRF(3, ignore_index=-100)(torch.randn(1, 4, 3), tags)).all()


def test_ignore_index_equal_to_a_real_label_is_refused():
    """Issue 41 (found by the fuzzing round): ignore_index in [0, N) was taken, so every position with
    that real label silently counted as unlabeled."""
    u, a, y = torch.randn(1, 3, 3), torch.randn(3, 3), torch.tensor([[0, 1, 2]])
    for call in (lambda ii: st.LinearChainCRF(3, ignore_index=ii),
                 lambda ii: st.loss_augmented(u, a, y, ignore_index=ii),
                 lambda ii: st.structured_hinge(u, a, y, ignore_index=ii),
                 lambda ii: st.train.chain_nll(u, a, y, ignore_index=ii)):
        for ii in (0, 2):
            with pytest.raises(ValueError, match=rf"ignore_index = {ii} is a real label \(in \[0, N\) = \[0, 3\)\)"):
                call(ii)
        with pytest.raises(TypeError, match="ignore_index must be an int or None"):
            call(1.0)
        call(3)  # outside the labels: fine
        call(-100)
