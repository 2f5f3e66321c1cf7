"""Property tests of the public DP entry points against bad and extreme input.

Not collected on its own: ``test_robustness.py`` runs this file under pytest in a subprocess, so a
crash in a kernel fails one test instead of killing the suite. The contract, for every entry point
and every argument: a bad value raises ValueError or TypeError whose message names the argument;
extreme but valid values give the float64 result (or a ValueError saying the result overflows).
"""

from __future__ import annotations

import math
import os

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as hst

import structtorch as st

B, T, N, S = 2, 4, 3, 3
SETTINGS = settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", 40)), deadline=None, database=None)


class Sizes:
    """Random potentials of one problem size, drawn from one seed."""

    def __init__(self, B: int = B, T: int = T, N: int = N, seed: int = 0):
        self.B, self.T, self.N, self.S = B, T, N, max(1, min(S, T))
        self.g = torch.Generator().manual_seed(seed)

    def randn(self, *shape) -> torch.Tensor:
        return torch.randn(*shape, generator=self.g)

    def lengths(self) -> torch.Tensor:
        return torch.randint(0, self.T + 1, (self.B,), generator=self.g).index_fill_(0, torch.tensor([0]), self.T)

    def labels(self) -> torch.Tensor:
        return torch.randint(0, self.N, (self.B, self.T), generator=self.g)

    def chain(self) -> dict:
        B, T, N = self.B, self.T, self.N
        return {"unary": self.randn(B, T, N), "transitions": self.randn(N, N), "start": self.randn(N),
                "end": self.randn(B, N), "lengths": self.lengths()}

    def segments(self) -> dict:
        """A target segmentation: segments of length <= S, one label each."""
        starts = torch.zeros(self.B, self.T, dtype=torch.bool)
        starts[:, :: self.S] = True
        seg = starts.long().cumsum(1)
        return {"target_labels": seg % self.N, "target_starts": starts}

    def semimarkov(self) -> dict:
        B, T, N = self.B, self.T, self.N
        return {"content": self.randn(B, T, N), "transitions": self.randn(N, N), "max_len": self.S,
                "length_scores": self.randn(self.S, N), "boundary": self.randn(B, T, N),
                "lengths": self.lengths()}


def _hsm(z: Sizes):
    from structtorch.data import gene_grammar

    model = st.HiddenSemiMarkovSVM(gene_grammar(), max_len=4, signal_of=[0, 3, 1, 1, 3, 2],
                                   content_of=[2, 0, 0, 0, 0, 1], start_labels=[0], end_labels=[0],
                                   num_points=5)
    return model, {"signals": z.randn(z.B, z.T, 4), "contents": z.randn(z.B, z.T, 3), "lengths": z.lengths()}


# name -> (callable taking kwargs, kwargs factory of a Sizes, {argument: kind}); kinds pick mutations
ENTRY_POINTS = {
    "viterbi": (lambda kw: st.viterbi(**kw), Sizes.chain, {}),
    "log_partition": (lambda kw: st.log_partition(**kw), Sizes.chain, {}),
    "marginals": (lambda kw: st.marginals(**kw), Sizes.chain, {}),
    "path_score": (lambda kw: st.path_score(**kw), lambda z: {**z.chain(), "labels": z.labels()},
                   {"labels": "labels"}),
    "kbest": (lambda kw: st.kbest(**kw), lambda z: {**z.chain(), "k": 3}, {"k": "count"}),
    "loss_augmented": (
        lambda kw: st.loss_augmented(**kw),
        lambda z: {**z.chain(), "target": z.labels(), "rescaling": "slack", "weights": torch.ones(z.B, z.T)},
        {"target": "labels", "weights": "weights", "rescaling": "choice"}),
    "structured_hinge": (
        lambda kw: st.structured_hinge(**kw),
        lambda z: {**z.chain(), "target": z.labels(), "rescaling": "margin", "reduction": "sum"},
        {"target": "labels", "rescaling": "choice", "reduction": "choice"}),
    "LinearChainCRF": (
        lambda kw: st.LinearChainCRF(kw["emissions"].shape[-1] if isinstance(kw["emissions"], torch.Tensor) and
                                     kw["emissions"].dim() == 3 else N)(**kw),
        lambda z: {"emissions": z.randn(z.B, z.T, z.N), "tags": z.labels(), "lengths": z.lengths()},
        {"tags": "labels"}),
    "window_viterbi": (lambda kw: st.window_viterbi(**kw),
                       lambda z: {"scores": z.randn(z.B, z.T, z.N, z.N), "lengths": z.lengths()}, {}),
    "window_loss_augmented": (
        lambda kw: st.window_loss_augmented(**kw),
        lambda z: {"scores": z.randn(z.B, z.T, z.N, z.N), "target": z.labels(), "lengths": z.lengths(),
                   "rescaling": "margin", "h": lambda k: k.sqrt()},
        {"target": "labels", "rescaling": "choice"}),
    "semimarkov_viterbi": (lambda kw: st.semimarkov_viterbi(**kw), Sizes.semimarkov, {"max_len": "count"}),
    "semimarkov_log_partition": (lambda kw: st.semimarkov_log_partition(**kw), Sizes.semimarkov,
                                 {"max_len": "count"}),
    "semimarkov_loss_augmented": (
        lambda kw: st.semimarkov_loss_augmented(**kw),
        lambda z: {**z.semimarkov(), **z.segments(), "rescaling": "slack"},
        {"target_labels": "labels", "max_len": "count", "rescaling": "choice"}),
    "HiddenSemiMarkovSVM.decode": (lambda kw: _hsm(Sizes())[0].decode(**kw), lambda z: _hsm(z)[1], {}),
    "plif_interpolate": (
        lambda kw: st.plif_interpolate(**kw),
        lambda z: {"x": z.randn(z.B, z.T, z.N), "ordinates": z.randn(z.N, 5), "low": -1.0, "high": 1.0},
        {"low": "support", "high": "support"}),
}
DEFINES_N = {"unary", "emissions", "scores", "content", "x", "signals", "contents"}
FLOAT_ARGS = {"unary", "emissions", "transitions", "start", "end", "scores", "content", "length_scores", "boundary",
              "signals", "contents", "x", "ordinates"}
SOLE_FLOAT = {"scores", "x", "ordinates", "signals", "contents"}  # no other float argument to disagree with


def kind_of(arg: str, kinds: dict) -> str | None:
    return "float" if arg in FLOAT_ARGS else "lengths" if arg == "lengths" else kinds.get(arg)


def mutations(kind: str, value, T: int = T, N: int = N):
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
        yield torch.tensor([T + 1] + [0] * (len(value) - 1)), ValueError
        yield torch.tensor([-1] + [0] * (len(value) - 1)), ValueError
        yield value.double(), TypeError
        yield torch.zeros(len(value) + 1, dtype=torch.long), ValueError
        yield "abc", TypeError
    elif kind == "labels":
        for bad in (N, -1, 2**62):
            x = value.clone()
            x[0, 0] = bad
            yield x, ValueError
        yield value.double(), TypeError
        yield value[:, :1] if value.shape[1] > 1 else torch.cat([value, value], 1), ValueError
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
        huge = torch.zeros(value.shape, dtype=torch.long)
        huge[0, 0] = 2**63 - 1
        yield huge, ValueError
        yield value[:, :1] if value.shape[1] > 1 else torch.cat([value, value], 1), ValueError
    elif kind == "choice":
        yield "other", ValueError
    elif kind == "support":
        yield math.nan, ValueError
        yield 1e300, ValueError
        yield "a", TypeError


def skipped(arg: str, i: int) -> bool:
    if arg in DEFINES_N and i == 4:  # another N: the other arguments' shapes are then the wrong ones
        return True
    if arg in ("x", "scores") and i == 3:  # (..., K) and (B, T) + (N,) * (l + 1): an axis more can be valid
        return True
    if arg == "x" and i == 6:  # +inf: PLiF inputs are clamped to [low, high], both infinities included
        return True
    return arg in SOLE_FLOAT and i == 7  # the only float argument: any float dtype is fine


def cases():
    for name, (_, make, kinds) in ENTRY_POINTS.items():
        for arg, value in make(Sizes()).items():
            kind = kind_of(arg, kinds)
            if kind is None:
                continue
            for i, (_, exc) in enumerate(mutations(kind, value)):
                if not skipped(arg, i):
                    yield pytest.param(name, arg, i, exc, id=f"{name}-{arg}-{i}")


def check_named(name: str, arg: str, i: int, z: Sizes) -> None:
    fn, make, kinds = ENTRY_POINTS[name]
    kw = make(z)
    bad, exc = list(mutations(kind_of(arg, kinds), kw[arg], z.T, z.N))[i]
    kw[arg] = bad
    with pytest.raises(exc) as info:
        fn(kw)
    assert arg in str(info.value), f"{name}: {info.value!r} does not name {arg!r}"


@pytest.mark.parametrize("name, arg, i, exc", list(cases()))
def test_bad_argument_named(name, arg, i, exc):
    check_named(name, arg, i, Sizes())


@settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", 150)), deadline=None, database=None)
@given(hst.sampled_from([c.values[:3] for c in cases()]), hst.integers(1, 3), hst.integers(1, 5),
       hst.integers(1, 4), hst.integers(0, 2**16))
def test_bad_argument_named_at_random_sizes(case, B_, T_, N_, seed):
    """The same contract at hypothesis-drawn sizes and values."""
    name, arg, i = case
    assume(not (arg == "labels" and i == 4 and T_ == 1) and not (name == "kbest" and N_ ** T_ < 3))
    assume(not (i == 3 and B_ == 1 and arg in ("start", "length_scores")))  # (N,) -> (1, N) is (B, N)
    check_named(name, arg, i, Sizes(B_, T_, N_, seed))


HOMOGENEOUS = ["viterbi", "log_partition", "marginals", "path_score", "kbest", "window_viterbi",
               "semimarkov_viterbi", "semimarkov_log_partition"]  # scores scale with the potentials


@SETTINGS
@given(hst.sampled_from(HOMOGENEOUS), hst.integers(-1100, 1100))
def test_power_of_two_scaling(name, e):
    """Viterbi-type results scale exactly by 2^e (paths unchanged) or raise an overflow error; a
    log-partition matches float64 or raises the same way. Never a silent inf, NaN or wrong path."""
    fn, make, _ = ENTRY_POINTS[name]
    kw = make(Sizes())
    ref = fn(kw)
    for arg in FLOAT_ARGS & set(kw):
        kw[arg] = torch.ldexp(kw[arg].double(), torch.tensor(e))
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


def MARGINALS(u, t):  # noqa: N802 - a constant of the list below
    return st.marginals(u, t)


@pytest.mark.parametrize("fn", [
    lambda u, t: st.viterbi(u, t),
    lambda u, t: st.log_partition(u, t),
    MARGINALS,
    lambda u, t: st.kbest(u, t, 2),
    lambda u, t: st.path_score(u, t, torch.zeros(1, 5, dtype=torch.long)),
    lambda u, t: st.window_score(u.unsqueeze(3).expand(1, 5, 3, 3), torch.zeros(1, 5, dtype=torch.long)),
    lambda u, t: st.semimarkov_viterbi(u, t, max_len=2),
    lambda u, t: st.semimarkov_log_partition(u, t, max_len=2),
    lambda u, t: st.window_viterbi(u.unsqueeze(3).expand(1, 5, 3, 3)),
])
@pytest.mark.parametrize("dtype, value", [(torch.float64, 1.7e308), (torch.float64, -1.7e308),
                                          (torch.float32, 3e38)])
def test_overflow_is_an_error(fn, dtype, value):
    """Scores beyond the dtype's range raise a clear error, never an inf/-inf read as infeasible."""
    if dtype == torch.float32 and fn is MARGINALS:
        pytest.skip("float32 marginals are representable (logZ in float64): test_robustness checks them")
    u = torch.full((1, 5, 3), value, dtype=dtype)
    with pytest.raises(ValueError, match="overflows"):
        fn(u, torch.zeros(3, 3, dtype=dtype))


@pytest.mark.parametrize("value", [1.7e308, -1.7e308])
def test_loss_augmented_overflow(value):
    u = torch.full((1, 5, 3), value, dtype=torch.float64)
    u[0, 2, 1] = 0.0
    with pytest.raises(ValueError, match="overflows"):
        st.loss_augmented(u, torch.zeros(3, 3, dtype=torch.float64), torch.zeros(1, 5, dtype=torch.long),
                                  rescaling="slack")


def test_loss_augmented_float32_extremes_accumulate_in_double():
    """float32 scores of 3e38 sum beyond float32, but the value (a difference) is representable."""
    u = torch.full((1, 5, 3), 3e38)
    u[0, 2, 1] = 2.9e38
    args = (torch.zeros(1, 5, dtype=torch.long),)
    got = st.loss_augmented(u, torch.zeros(3, 3), *args, rescaling="slack")
    ref = st.loss_augmented(u.double(), torch.zeros(3, 3, dtype=torch.float64), *args, rescaling="slack")
    assert torch.equal(got[1], ref[1]) and got[0].item() == pytest.approx(ref[0].item(), rel=1e-6)
