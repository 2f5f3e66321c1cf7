"""Property tests of the public DP entry points against bad and extreme input.

Not collected on its own: ``test_robustness.py`` runs this file under pytest in a subprocess, so a
crash in a kernel fails one test instead of killing the suite. The contract, for every entry point
and every argument: a bad value raises ValueError or TypeError whose message names the argument;
extreme but valid values give the float64 result (or a ValueError saying the result overflows).
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as hst

import structtorch as st

B, T, N, S = 2, 4, 3, 3
SETTINGS = settings(max_examples=40, deadline=None, database=None)


def base_chain(dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    return {
        "unary": torch.randn(B, T, N, generator=g).to(dtype),
        "transitions": torch.randn(N, N, generator=g).to(dtype),
        "start": torch.randn(N, generator=g).to(dtype),
        "end": torch.randn(B, N, generator=g).to(dtype),
        "lengths": torch.tensor([T, 2]),
    }


def target():
    return torch.tensor([[0, 1, 2, 0], [1, 1, 0, 0]])


def starts():
    return torch.tensor([[True, False, True, False], [True, True, False, False]])


# name -> (callable taking kwargs, kwargs factory, {argument: kind}); kinds pick the mutations
ENTRY_POINTS = {
    "viterbi": (lambda kw: st.viterbi(**kw), base_chain, {}),
    "log_partition": (lambda kw: st.log_partition(**kw), base_chain, {}),
    "marginals": (lambda kw: st.marginals(**kw), base_chain, {}),
    "path_score": (lambda kw: st.path_score(**kw), lambda: {**base_chain(), "labels": target()},
                   {"labels": "labels"}),
    "kbest": (lambda kw: st.kbest(**kw), lambda: {**base_chain(), "k": 3}, {"k": "count"}),
    "loss_augmented_viterbi": (
        lambda kw: st.loss_augmented_viterbi(**kw),
        lambda: {**base_chain(), "target": target(), "rescaling": "slack", "weights": torch.ones(B, T)},
        {"target": "labels", "weights": "weights", "rescaling": "choice"}),
    "viterbi_window": (lambda kw: st.viterbi_window(**kw),
                       lambda: {"scores": torch.randn(B, T, N, N), "lengths": torch.tensor([T, 1])}, {}),
    "loss_augmented_viterbi_window": (
        lambda kw: st.loss_augmented_viterbi_window(**kw),
        lambda: {"scores": torch.randn(B, T, N, N), "target": target(), "lengths": torch.tensor([T, 3]),
                 "rescaling": "margin", "h": lambda k: k.sqrt()},
        {"target": "labels", "rescaling": "choice"}),
    "semimarkov_viterbi": (
        lambda kw: st.semimarkov_viterbi(**kw),
        lambda: {"content": torch.randn(B, T, N), "transitions": torch.randn(N, N), "max_len": S,
                 "length_scores": torch.randn(S, N), "lengths": torch.tensor([T, 3])},
        {"max_len": "count"}),
    "semimarkov_log_partition": (
        lambda kw: st.semimarkov_log_partition(**kw),
        lambda: {"content": torch.randn(B, T, N), "transitions": torch.randn(N, N), "max_len": S,
                 "boundary": torch.randn(B, T, N), "lengths": torch.tensor([T, 0])},
        {"max_len": "count"}),
    "semimarkov_loss_augmented": (
        lambda kw: st.semimarkov_loss_augmented(**kw),
        lambda: {"content": torch.randn(B, T, N), "transitions": torch.randn(N, N), "max_len": S,
                 "target_labels": torch.tensor([[0, 0, 2, 2], [1, 1, 0, 0]]), "target_starts": starts(),
                 "lengths": torch.tensor([T, 2]), "rescaling": "slack"},
        {"target_labels": "labels", "max_len": "count", "rescaling": "choice"}),
}
DEFINES_N = {"unary", "scores", "content"}
FLOAT_ARGS = {"unary", "transitions", "start", "end", "scores", "content", "length_scores", "boundary"}


def mutations(kind: str, value):
    """(bad value, expected exception type) pairs for an argument of this kind."""
    if kind == "float":
        yield [[0.0]], TypeError
        yield value.long(), TypeError
        yield value.to(torch.complex64), TypeError
        yield value.unsqueeze(0), ValueError
        yield value[..., :1] if value.shape[-1] > 1 else value.expand(*value.shape[:-1], 2), ValueError
        for bad in (math.nan, math.inf):
            x = value.clone()
            x.view(-1)[-1] = bad
            yield x, ValueError
        yield value.double() if value.dtype == torch.float32 else value.float(), TypeError
    elif kind == "lengths":
        yield torch.tensor([T + 1, 0]), ValueError
        yield torch.tensor([-1, 0]), ValueError
        yield torch.tensor([1.0, 2.0]), TypeError
        yield torch.tensor([1, 2, 3]), ValueError
        yield "abc", TypeError
    elif kind == "labels":
        for bad in (N, -1, 2**62):
            x = value.clone()
            x[0, 0] = bad
            yield x, ValueError
        yield value.double(), TypeError
        yield value[:, :2], ValueError
    elif kind == "count":
        yield 0, ValueError
        yield -3, ValueError
        yield 1.5, TypeError
        yield True, TypeError
    elif kind == "weights":
        for bad in (-1.0, math.nan, 1e19, 2.0**63):
            x = value.clone()
            x[0, 0] = bad
            yield x, ValueError
        yield torch.tensor([[2**62, 2**62, 2**63 - 1, 0], [1, 1, 1, 1]]), ValueError
        yield value[:, :2], ValueError
    elif kind == "choice":
        yield "other", ValueError


def cases():
    for name, (_, make, kinds) in ENTRY_POINTS.items():
        base = make()
        for arg, value in base.items():
            kind = "float" if arg in FLOAT_ARGS else "lengths" if arg == "lengths" else kinds.get(arg)
            if kind is None:
                continue
            for i, (_, exc) in enumerate(mutations(kind, value)):
                if arg in DEFINES_N and i == 4:  # another N: the others' shapes are then the wrong ones
                    continue
                if arg == "scores" and i == 7:  # the only float argument: any float dtype is fine
                    continue
                yield pytest.param(name, arg, i, exc, id=f"{name}-{arg}-{i}")


@pytest.mark.parametrize("name, arg, i, exc", list(cases()))
def test_bad_argument_named(name, arg, i, exc):
    fn, make, kinds = ENTRY_POINTS[name]
    kw = make()
    kind = "float" if arg in FLOAT_ARGS else "lengths" if arg == "lengths" else kinds[arg]
    kw[arg] = list(mutations(kind, kw[arg]))[i][0]
    with pytest.raises(exc) as info:
        fn(kw)
    assert arg in str(info.value), f"{info.value!r} does not name {arg!r}"


@SETTINGS
@given(hst.sampled_from(sorted(ENTRY_POINTS)), hst.integers(-1100, 1100))
def test_power_of_two_scaling(name, e):
    """Viterbi-type results scale exactly by 2^e (paths unchanged) or raise an overflow error; a
    log-partition matches float64 or raises the same way. Never a silent inf, NaN or wrong path."""
    fn, make, _ = ENTRY_POINTS[name]
    kw = make()
    ref = fn(kw)
    for arg in FLOAT_ARGS & set(kw):
        kw[arg] = torch.ldexp(kw[arg].double(), torch.tensor(e))
    if name in ("loss_augmented_viterbi", "loss_augmented_viterbi_window", "semimarkov_loss_augmented"):
        return  # scaling the scores but not the loss changes the problem: covered by the overflow tests
    scaled_values = [kw[a] for a in FLOAT_ARGS & set(kw)]
    assume(all(bool(torch.isfinite(x).all()) for x in scaled_values))
    assume(all(bool((x.abs() >= 2.0**-1000).all()) for x in scaled_values))  # no underflow to subnormals
    try:
        out = fn(kw)
    except ValueError as exc:
        assert "overflows" in str(exc)
        assert e > 900, f"spurious overflow at 2^{e}"
        return
    out, ref = (out, ref) if isinstance(out, tuple) else ((out,), (ref,))
    assert all(bool(torch.isfinite(x).all()) for x in out if x.is_floating_point()) or name == "kbest"
    if name in ("log_partition", "marginals", "semimarkov_log_partition"):
        return  # not scale-invariant; finite and no overflow is the contract here
    assert len(out) == 1 or torch.equal(out[1], ref[1])  # same structure
    expected = torch.ldexp(ref[0].double(), torch.tensor(e))
    assert torch.allclose(out[0], expected, rtol=1e-6, atol=0)


@pytest.mark.parametrize("fn", [
    lambda u, t: st.viterbi(u, t),
    lambda u, t: st.log_partition(u, t),
    lambda u, t: st.marginals(u, t),
    lambda u, t: st.kbest(u, t, 2),
    lambda u, t: st.semimarkov_viterbi(u, t, max_len=2),
    lambda u, t: st.semimarkov_log_partition(u, t, max_len=2),
    lambda u, t: st.viterbi_window(u.unsqueeze(3).expand(1, 5, 3, 3)),
])
@pytest.mark.parametrize("dtype, value", [(torch.float64, 1.7e308), (torch.float64, -1.7e308),
                                          (torch.float32, 3e38)])
def test_overflow_is_an_error(fn, dtype, value):
    """Scores beyond the dtype's range raise a clear error, never an inf/-inf read as infeasible."""
    u = torch.full((1, 5, 3), value, dtype=dtype)
    with pytest.raises(ValueError, match="overflows"):
        fn(u, torch.zeros(3, 3, dtype=dtype))


@pytest.mark.parametrize("value", [1.7e308, -1.7e308])
def test_loss_augmented_overflow(value):
    u = torch.full((1, 5, 3), value, dtype=torch.float64)
    u[0, 2, 1] = 0.0
    with pytest.raises(ValueError, match="overflows"):
        st.loss_augmented_viterbi(u, torch.zeros(3, 3, dtype=torch.float64), torch.zeros(1, 5, dtype=torch.long),
                                  rescaling="slack")


def test_loss_augmented_float32_extremes_accumulate_in_double():
    """float32 scores of 3e38 sum beyond float32, but the value (a difference) is representable."""
    u = torch.full((1, 5, 3), 3e38)
    u[0, 2, 1] = 2.9e38
    args = (torch.zeros(1, 5, dtype=torch.long),)
    got = st.loss_augmented_viterbi(u, torch.zeros(3, 3), *args, rescaling="slack")
    ref = st.loss_augmented_viterbi(u.double(), torch.zeros(3, 3, dtype=torch.float64), *args, rescaling="slack")
    assert torch.equal(got[1], ref[1]) and got[0].item() == pytest.approx(ref[0].item(), rel=1e-6)
