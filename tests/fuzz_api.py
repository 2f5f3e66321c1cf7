"""Property tests of the public DP entry points against bad and extreme input.

Not collected on its own: ``test_robustness.py`` runs this file under pytest in a subprocess, so a
crash in a kernel fails one test instead of killing the suite. The contract, for every entry point
and every argument: a bad value raises ValueError or TypeError whose message names the argument;
extreme but valid values give the float64 result (or a ValueError saying the result overflows).
The APIs of the later rounds run against oracles: enumeration (partial labels, pair costs, the
segment, boundary and 0-1 losses; the CRF head on a tiny BERT over its word positions), dense
references, round trips (the word maps; the collator against manual padding), and for the exact
solvers the primal recomputed at their weights and a brute-force QP over every labeling (cvxpy).
"""

from __future__ import annotations

import math
import os
import re

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
        yield value[(None,) * 3], ValueError  # three more dimensions: no argument takes that shape
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


# ------------------------------------------------------------------------------------------------
# The APIs added since the first rounds (issue 41): word masks and the word <-> token maps, partial
# labels and pair costs against enumeration, SparseFeaturePotentials, SemiMarkovCRF's arguments, and
# bad input (NaN/inf, wrong dtypes, empty batches, options of the wrong type) named in the error.

SMALL = settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", 25)), deadline=None, database=None)


@hst.composite
def tokenized_rows(draw):
    """word_ids rows as a fast tokenizer writes them (None for specials and padding), some as numpy
    ints, and the (B, T) tensor with -1 there."""
    import numpy as np

    rows = []
    for _ in range(draw(hst.integers(0, 3))):
        row = [None] * draw(hst.integers(0, 1))
        for w in range(draw(hst.integers(0, 4))):
            row += [w] * draw(hst.integers(1, 3))
        rows.append(row + [None] * draw(hst.integers(0, 2)))
    if draw(hst.booleans()):
        rows = [[None if w is None else np.int64(w) for w in r] for r in rows]
    T = max((len(r) for r in rows), default=0)
    tensor = torch.full((len(rows), T), -1, dtype=torch.long)
    for b, r in enumerate(rows):
        tensor[b, :len(r)] = torch.tensor([-1 if w is None else int(w) for w in r], dtype=torch.long)
    return rows, tensor


@SMALL
@given(tokenized_rows(), hst.integers(0, 2**16), hst.booleans(), hst.sampled_from([(), (2,)]))
def test_word_maps_round_trip(case, seed, left, trailing):
    """word_mask of lists, numpy ints and tensors agree and mark each word's first piece;
    tokens_to_words gathers the mask's positions in order (a loop as the oracle), words_to_tokens puts
    them back, with left padding (rows shifted right) as with right padding."""
    rows, tensor = case
    mask = st.word_mask(rows)
    assert torch.equal(mask, st.word_mask(tensor)) and mask.dtype == torch.bool
    for b, r in enumerate(rows):  # the oracle: a word's first piece, in order
        want = [w is not None and (t == 0 or r[t - 1] != w) for t, w in enumerate(r)]
        assert mask[b, :len(r)].tolist() == want and not mask[b, len(r):].any()
    B, T = mask.shape
    if left:  # the same rows padded on the left
        shift = T - torch.tensor([len(r) for r in rows], dtype=torch.long).reshape(B)
        idx = (torch.arange(T) - shift[:, None]) % max(T, 1) if B else torch.zeros(0, T, dtype=torch.long)
        mask = mask.gather(1, idx)
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 50, (B, T, *trailing), generator=g)
    words = st.tokens_to_words(x, mask)
    W = words.shape[1]
    for b in range(B):
        got = x[b][mask[b]]
        assert torch.equal(words[b, :len(got)], got) and (words[b, len(got):] == -1).all()
    assert W == int(mask.sum(1).max()) if B else W == 0
    back = st.words_to_tokens(words, mask, fill=-7)
    assert torch.equal(back[mask], x[mask]) and (back[~mask] == -7).all()
    beyond = (torch.arange(W) >= mask.sum(1, keepdim=True)).reshape(B, W, *[1] * len(trailing)).expand_as(words)
    floats = st.tokens_to_words(x.double(), mask, fill=0.5)  # a fill that integers would truncate: fine here
    assert torch.equal(floats, torch.where(beyond, 0.5, words.double()))


def _brute_partial_nll(u, a, s, e, y, ignore):
    """-log of the probability of the labelings consistent with y (ignore: any label), by enumeration."""
    import itertools

    B, T, N = u.shape
    out = []
    for b in range(B):
        def score(lab, b=b):
            return (s[lab[0]] + e[lab[-1]] + sum(u[b, t, lab[t]] for t in range(T))
                    + sum(a[lab[t], lab[t + 1]] for t in range(T - 1)))
        scores = {lab: float(score(lab)) for lab in itertools.product(range(N), repeat=T)}
        ok = [v for lab, v in scores.items() if all(y[b, t] == ignore or y[b, t] == lab[t] for t in range(T))]
        out.append(torch.tensor(list(scores.values()), dtype=torch.float64).logsumexp(0)
                   - torch.tensor(ok, dtype=torch.float64).logsumexp(0))
    return torch.stack(out)


@SMALL
@given(hst.integers(1, 2), hst.integers(1, 4), hst.integers(1, 3), hst.integers(0, 2**16))
def test_partial_labels_match_enumeration(B_, T_, N_, seed):
    """LinearChainCRF with ignore_index at random positions (some rows wholly unlabeled) is -log of the
    consistent labelings' total probability; the label-set form (B, T, N) bool gives the same."""
    g = torch.Generator().manual_seed(seed)
    crf = st.LinearChainCRF(N_, ignore_index=-100).double()
    u = torch.randn(B_, T_, N_, generator=g, dtype=torch.float64)
    y = torch.randint(0, N_, (B_, T_), generator=g)
    y[torch.rand(B_, T_, generator=g) < 0.4] = -100
    trans, s, e = crf.scores()
    ref = _brute_partial_nll(u, trans.detach(), s.detach(), e.detach(), y, -100)
    torch.testing.assert_close(crf(u, y), ref.to(u.dtype), rtol=1e-9, atol=1e-9)
    sets = (y.unsqueeze(2) == torch.arange(N_)) | (y == -100).unsqueeze(2)
    torch.testing.assert_close(crf(u, sets), ref, rtol=1e-9, atol=1e-9)


@SMALL
@given(hst.integers(1, 2), hst.integers(1, 4), hst.integers(1, 3), hst.integers(0, 2**16),
       hst.sampled_from(["margin", "slack"]), hst.sampled_from([torch.int64, torch.int32, torch.float64]))
def test_pair_costs_match_enumeration(B_, T_, N_, seed, rescaling, dtype):
    """loss_augmented with pair_cost (integer or float, non-negative integers) and lengths: the value and
    the cost of the labeling found are those of enumeration."""
    import itertools

    g = torch.Generator().manual_seed(seed)
    u, a = torch.randn(B_, T_, N_, generator=g, dtype=torch.float64), torch.randn(N_, N_, generator=g, dtype=torch.float64)
    target = torch.randint(0, N_, (B_, T_), generator=g)
    pair = torch.randint(0, 3, (B_, max(T_ - 1, 0), N_, N_), generator=g)
    lengths = torch.randint(0, T_ + 1, (B_,), generator=g)
    value, path, count = st.loss_augmented(u, a, target, pair_cost=pair.to(dtype), rescaling=rescaling,
                                           lengths=lengths)
    for b in range(B_):
        L = int(lengths[b])

        def score(lab, b=b):
            return sum(float(u[b, t, lab[t]]) for t in range(len(lab))) + sum(
                float(a[lab[t], lab[t + 1]]) for t in range(len(lab) - 1))

        gold = score(target[b, :L].tolist())
        best = max((score(lab) + cost - gold if rescaling == "margin" else cost * (1 + score(lab) - gold), cost)
                   for lab in itertools.product(range(N_), repeat=L)
                   for cost in [sum(int(pair[b, t, lab[t], lab[t + 1]]) for t in range(L - 1))])
        assert value[b].item() == pytest.approx(best[0], abs=1e-9)
        found = path[b, :L].tolist()
        assert count[b].item() == sum(int(pair[b, t, found[t], found[t + 1]]) for t in range(L - 1))


@SMALL
@given(hst.integers(0, 2), hst.integers(0, 3), hst.integers(0, 3), hst.integers(0, 2**16), hst.booleans())
def test_sparse_features_equal_dense_one_hots(B_, T_, K, seed, sparse_grad):
    """SparseFeaturePotentials (padded and offsets forms, K = 0 slots, empty batches, sparse_grad) equals
    the dense one-hot product plus the bias."""
    g = torch.Generator().manual_seed(seed)
    F, N_ = 5, 3
    model = st.SparseFeaturePotentials(F, N_, sparse_grad=sparse_grad).double()
    torch.nn.init.normal_(model.emission.weight, generator=g)
    torch.nn.init.normal_(model.bias, generator=g)
    ids = torch.randint(-1, F, (B_, T_, K), generator=g)
    dense = torch.nn.functional.one_hot(ids.clamp(min=0), F).double() * (ids >= 0).unsqueeze(-1)
    want = dense.sum(2) @ model.emission.weight.detach() + model.bias.detach()
    torch.testing.assert_close(model(ids)[0], want)
    flat = ids.reshape(-1, K) if K else ids.reshape(B_ * T_, 0)
    counts = (flat >= 0).sum(1)
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), counts.cumsum(0)[:-1]]) if B_ * T_ else counts
    got = model(flat[flat >= 0], offsets, shape=(B_, T_))[0]
    torch.testing.assert_close(got, want)


def _sparse(kw):
    return st.SparseFeaturePotentials(5, 3)(**kw)


def _semimarkov_crf(kw):
    return st.SemiMarkovCRF(3, 2)(**kw)


def _smcrf_args():
    starts = torch.zeros(2, 4, dtype=torch.bool)
    starts[:, ::2] = True
    return {"content": torch.randn(2, 4, 3), "labels": torch.zeros(2, 4, dtype=torch.long), "starts": starts}


U3, A3, Y3 = torch.randn(2, 4, 3), torch.randn(3, 3), torch.randint(0, 3, (2, 4))


def _sm_target():
    return {"target_labels": torch.tensor([[0, 0, 1, 1], [2, 2, 0, 1]]),
            "target_starts": torch.tensor([[True, False, True, False], [True, False, True, True]])}
def _pytorch_crf(N: int = 3, **scores):
    """An object with a torchcrf.CRF's attributes, ``scores`` replacing its parameters."""
    import types

    crf = types.SimpleNamespace(num_tags=N, batch_first=True, transitions=torch.randn(N, N),
                                start_transitions=torch.randn(N), end_transitions=torch.randn(N))
    return vars(crf).update(scores) or crf


def _from_pytorch_crf_bad() -> list:
    """Issue 53, items 4 and 5: every parameter of a wrong shape (broadcastable ones were copied
    silently, the others raised PyTorch's size mismatch) or dtype, and num_tags disagreeing."""
    cases = []
    for name, good in (("transitions", (3, 3)), ("start_transitions", (3,)), ("end_transitions", (3,))):
        wrong = {(1, 3), (3, 1), (4, 4), (2, 2), (3,), (3, 3, 1)} if len(good) == 2 else {(1,), (4,), (2,), (3, 1), ()}
        for shape in sorted(wrong, key=str):
            cases.append((lambda n=name, sh=shape: st.LinearChainCRF.from_pytorch_crf(
                _pytorch_crf(**{n: torch.zeros(sh)})), ValueError, f"crf.{name}"))
        for dtype in (torch.long, torch.bool, torch.float16, torch.complex64):
            cases.append((lambda n=name, sh=good, dt=dtype: st.LinearChainCRF.from_pytorch_crf(
                _pytorch_crf(**{n: torch.zeros(sh, dtype=dt)})), TypeError, f"crf.{name}"))
        cases.append((lambda n=name, sh=good: st.LinearChainCRF.from_pytorch_crf(
            _pytorch_crf(**{n: torch.full(sh, math.nan)})), ValueError, f"crf.{name}"))
    for N_ in (2, 4):
        cases.append((lambda k=N_: st.LinearChainCRF.from_pytorch_crf(_pytorch_crf(**{"num_tags": k})), ValueError,
                      "crf.transitions"))
    cases.append((lambda: st.LinearChainCRF.from_pytorch_crf(_pytorch_crf(**{"num_tags": 3.0})), TypeError,
                  "crf.num_tags"))
    return cases


def _semimarkov_crf_bad_masks() -> list:
    """Issue 53, item 7: masks as (nested) lists, tensors of each non-mask dtype, shapes off by one."""
    mask = torch.ones(2, 4, dtype=torch.bool)
    cases = [(lambda m=m: _semimarkov_crf({**_smcrf_args(), "mask": m}), TypeError, "mask")
             for m in (mask.tolist(), [tuple(r) for r in mask.tolist()], [torch.ones(4, dtype=torch.bool)] * 2)]
    cases += [(lambda dt=dt: _semimarkov_crf({**_smcrf_args(), "mask": mask.to(dt)}), TypeError, "mask")
              for dt in (torch.float32, torch.float64, torch.int64, torch.int32, torch.int8)]
    cases += [(lambda sh=sh: _semimarkov_crf({**_smcrf_args(), "mask": torch.ones(sh, dtype=torch.bool)}),
               ValueError, "mask") for sh in ((2, 3), (2, 5), (1, 4), (3, 4), (2, 4, 1), (2, 2, 2))]
    return cases


FROM_PYTORCH_CRF_BAD = _from_pytorch_crf_bad()
SEMIMARKOV_CRF_BAD_MASKS = _semimarkov_crf_bad_masks()
NEW_BAD_INPUTS = [  # (call, exception, the argument its message names)
    (lambda: st.word_mask([[None, -2, 0]]), ValueError, "word_ids"),
    (lambda: st.word_mask([[None, 0.0, 0]]), TypeError, "word_ids"),
    (lambda: st.word_mask([[0, 1]], length=-1), ValueError, "length"),
    (lambda: st.word_mask(torch.tensor([[0, 1]]), length=2.0), TypeError, "length"),
    (lambda: st.word_mask(torch.zeros(1, 2)), TypeError, "word_ids"),
    (lambda: st.tokens_to_words(Y3, Y3 > 0, num_words=-1), ValueError, "num_words"),
    (lambda: st.tokens_to_words(Y3, Y3 > 0, num_words=1.0), TypeError, "num_words"),
    (lambda: st.tokens_to_words(Y3, Y3 > 0, fill=0.5), ValueError, "fill"),
    (lambda: st.tokens_to_words(Y3, (Y3 > 0).float()), TypeError, "mask"),
    (lambda: st.tokens_to_words(Y3, (Y3 > 0).long()), TypeError, "mask"),
    (lambda: st.tokens_to_words(Y3, (Y3 > 0)[:, :3]), ValueError, "mask"),
    (lambda: st.words_to_tokens(Y3, Y3 > 0, fill=math.nan), ValueError, "fill"),
    (lambda: st.words_to_tokens(Y3[:, :1], torch.ones(2, 4, dtype=torch.bool)), ValueError, "mask"),
    (lambda: st.LinearChainCRF(3, ignore_index=0), ValueError, "ignore_index"),
    (lambda: st.LinearChainCRF(3, ignore_index="-100"), TypeError, "ignore_index"),
    (lambda: st.loss_augmented(U3, A3, Y3, ignore_index=2), ValueError, "ignore_index"),
    (lambda: st.LinearChainCRF(3)(U3, torch.full_like(Y3, -100)), ValueError, "ignore_index=-100"),
    (lambda: st.LinearChainCRF(3)(U3, Y3, reduction="avg"), ValueError, "reduction"),
    (lambda: st.LinearChainCRF(3)(U3.index_fill(1, torch.tensor([1]), math.nan), Y3), ValueError, "emissions"),
    (lambda: st.LinearChainCRF(3)(U3.index_fill(1, torch.tensor([1]), math.inf), Y3), ValueError, "emissions"),
    (lambda: st.loss_augmented(U3, A3, Y3, pair_cost=torch.full((2, 3, 3, 3), math.nan)), ValueError, "pair_cost"),
    (lambda: st.loss_augmented(U3, A3, Y3, pair_cost=torch.full((2, 3, 3, 3), math.inf)), ValueError, "pair_cost"),
    (lambda: st.loss_augmented(U3, A3, Y3, pair_cost=torch.ones(2, 3, 3, 3, dtype=torch.bool)), TypeError, "pair_cost"),
    (lambda: st.loss_augmented(U3, A3, Y3, pair_cost=torch.ones(2, 3, 3, 3, dtype=torch.complex64)), TypeError,
     "pair_cost"),
    (lambda: st.loss_augmented(U3, A3, Y3, pair_cost=torch.ones(2, 4, 3, 3)), ValueError, "pair_cost"),
    (lambda: st.loss_augmented(U3, A3, Y3, pair_cost=-torch.ones(2, 3, 3, 3, dtype=torch.long), rescaling="slack"),
     ValueError, "pair_cost"),
    (lambda: _sparse({"ids": torch.zeros(2, 3, 1)}), TypeError, "ids"),
    (lambda: _sparse({"ids": torch.full((2, 3, 1), 5)}), ValueError, "ids"),
    (lambda: _sparse({"ids": torch.full((2, 3, 1), -2)}), ValueError, "ids"),
    (lambda: _sparse({"ids": torch.tensor([1, 2]), "offsets": torch.tensor([0.0, 1.0]), "shape": (1, 2)}), TypeError,
     "offsets"),
    (lambda: _sparse({"ids": torch.tensor([1, 2]), "offsets": torch.tensor([0, 1, 2]), "shape": (1, 2)}), ValueError,
     "offsets"),
    (lambda: _sparse({"ids": torch.zeros(2, 3, 1, dtype=torch.long), "values": torch.ones(2, 3)}), ValueError,
     "values"),
    (lambda: _semimarkov_crf({**_smcrf_args(), "reduction": "avg"}), ValueError, "reduction"),
    (lambda: _semimarkov_crf({**_smcrf_args(), "mask": torch.ones(2, 4)}), TypeError, "mask"),
    (lambda: _semimarkov_crf({**_smcrf_args(), "mask": torch.ones(2, 3, dtype=torch.bool)}), ValueError, "mask"),
    (lambda: _semimarkov_crf({**_smcrf_args(), "mask": torch.ones(2, 4, dtype=torch.bool),
                              "lengths": torch.tensor([4, 4])}), ValueError, "lengths"),
    (lambda: _semimarkov_crf({**_smcrf_args(), "lengths": torch.tensor([5, 4])}), ValueError, "lengths"),
    (lambda: st.LinearChainCRF.from_pytorch_crf(object()), TypeError, "crf"),
    *FROM_PYTORCH_CRF_BAD,
    *SEMIMARKOV_CRF_BAD_MASKS,
    (lambda: st.allowed_transitions("BIOX", ["O"]), ValueError, "scheme"),
    (lambda: st.set_validation("False"), TypeError, "enabled"),
    (lambda: st.set_adaptive_threads("0"), TypeError, "enabled"),
    # max_count was checked only where a count table is built: the fused chain path (margin, h=None)
    # and the semi-Markov segment losses took -1, 1.5 or "3" silently
    (lambda: st.loss_augmented(U3, A3, Y3, max_count=-1), ValueError, "max_count"),
    (lambda: st.loss_augmented(U3, A3, Y3, max_count=1.5), TypeError, "max_count"),
    (lambda: st.semimarkov_loss_augmented(U3, A3, **_sm_target(), max_len=2, loss="segment", max_count=-1),
     ValueError, "max_count"),
    (lambda: st.semimarkov_loss_augmented(U3, A3, **_sm_target(), max_len=2, loss="zero_one", rescaling="slack",
                                          max_count="3"), TypeError, "max_count"),
]


def _names_the_argument(call, exc, name) -> None:
    with pytest.raises(exc) as info:
        call()
    assert name in str(info.value), f"{info.value!r} does not name {name!r}"


@pytest.mark.parametrize("i", range(len(NEW_BAD_INPUTS)))
def test_new_apis_name_the_bad_argument(i):
    _names_the_argument(*NEW_BAD_INPUTS[i])


@pytest.mark.parametrize("backend", ["compiled", "torch", "triton"])
@pytest.mark.parametrize("i", [i for i, (_, exc, _) in enumerate(NEW_BAD_INPUTS) if exc is ValueError])
def test_the_same_error_on_every_backend(backend, i):
    """The value checks give the same error whichever backend runs the call (on CPU tensors; "triton"
    is Triton's interpreter, whose checks are device assertions when it runs as on a GPU: skipped)."""
    from structtorch import _backend

    if backend == "triton" and _backend.triton_interpreted():
        pytest.skip("the interpreter takes the GPU's path: device assertions, not ValueErrors")
    call, exc, name = NEW_BAD_INPUTS[i]
    with st.use_backend(backend), pytest.raises(exc, match=re.escape(name)):
        call()


def test_empty_batches_of_the_new_apis():
    """B = 0 everywhere: empty results, no error."""
    B_ = 0
    empty_ids = torch.zeros(B_, 3, 2, dtype=torch.long)
    assert st.word_mask([]).shape == (0, 0)
    assert st.tokens_to_words(torch.zeros(B_, 4), torch.zeros(B_, 4, dtype=torch.bool)).shape == (0, 0)
    assert st.words_to_tokens(torch.zeros(B_, 2), torch.zeros(B_, 4, dtype=torch.bool)).shape == (0, 4)
    assert st.SparseFeaturePotentials(5, 3, sparse_grad=True)(empty_ids)[0].shape == (0, 3, 3)
    crf = st.LinearChainCRF(3, ignore_index=-100)
    assert crf(torch.zeros(B_, 4, 3), torch.zeros(B_, 4, dtype=torch.long), reduction="mean").item() == 0.0
    value = st.loss_augmented(torch.zeros(B_, 4, 3), torch.zeros(3, 3), torch.zeros(B_, 4, dtype=torch.long),
                              pair_cost=torch.zeros(B_, 3, 3, 3, dtype=torch.long), rescaling="slack")[0]
    assert value.shape == (0,)
    sm = st.SemiMarkovCRF(3, 2)
    assert sm(torch.zeros(B_, 4, 3), torch.zeros(B_, 4, dtype=torch.long), torch.zeros(B_, 4, dtype=torch.bool),
              torch.zeros(B_, 4, dtype=torch.bool), reduction="sum").item() == 0.0


# ------------------------------------------------------------------------------------------------
# The segment-level losses of semi-Markov loss-augmented inference and of StructuredHingeLoss, and the
# exact solvers' certificates, against enumeration and a brute-force QP (issue 41).

def _segment_count(kind: str, lab: tuple, sts: tuple, y: tuple, ys: tuple) -> int:
    """H(target, z) of two segmentations of [0, L) given as label and start tuples."""
    def segments(labels, starts):
        begins = [t for t in range(len(labels)) if starts[t]]
        return {(s, e, labels[s]) for s, e in zip(begins, begins[1:] + [len(labels)][:len(begins)], strict=True)}

    if kind == "hamming":
        return sum(a != b for a, b in zip(lab, y, strict=True))
    if kind == "boundary":
        return sum(a != b for a, b in zip(sts, ys, strict=True))
    diff = len(segments(lab, sts) ^ segments(y, ys))
    return min(diff, 1) if kind == "zero_one" else diff


@SMALL
@given(hst.integers(1, 2), hst.integers(0, 3), hst.integers(1, 2), hst.integers(1, 3), hst.integers(0, 2**16),
       hst.sampled_from(["margin", "slack"]), hst.sampled_from(["segment", "boundary", "zero_one", "hamming"]),
       hst.sampled_from(["identity", "square"]), hst.sampled_from(["none", "mean", "sum"]),
       hst.sampled_from(["compiled", "torch"]))
def test_segment_losses_of_the_hinge_match_enumeration(B_, T_, N_, S_, seed, rescaling, kind, h_kind, reduction,
                                                       backend):
    """semimarkov_loss_augmented and StructuredHingeLoss(loss=...) (keyword and structure forms, every
    reduction) with the segment, boundary, 0-1 and Hamming losses, variable lengths (0 included), the
    identity and a convex h: the value, the count and the found segmentation against every segmentation
    of every row; the hinge's gradient w.r.t. the content is that of the found minus the target's score
    (margin rescaling), or h(H) times it (slack)."""
    import numpy as np
    from brute import brute, compositions

    g = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    p = {"content": randn(B_, T_, N_), "trans": randn(N_, N_), "length": randn(S_, N_),
         "boundary": randn(B_, T_, N_), "start": randn(N_), "end": randn(N_)}
    lengths = torch.randint(0, T_ + 1, (B_,), generator=g)
    labels = torch.randint(0, N_, (B_, T_), generator=g)  # garbage beyond each length: ignored
    starts = torch.rand(B_, T_, generator=g) < 0.5
    targets = []
    for b in range(B_):
        L = int(lengths[b])
        parts = list(compositions(L, S_))
        parts = parts[rng.integers(len(parts))]
        pos, lab, sts = 0, [], []
        for d in parts:
            n = int(rng.integers(N_))
            labels[b, pos:pos + d], starts[b, pos:pos + d] = n, False
            starts[b, pos] = True
            lab, sts, pos = lab + [n] * d, sts + [True] + [False] * (d - 1), pos + d
        targets.append((tuple(lab), tuple(sts)))
    h, h_np = ((None, lambda k: k) if h_kind == "identity" else (lambda k: k * k / 2, lambda k: k * k / 2))
    np_p = {k: v.numpy() for k, v in p.items()}
    np_p = {**np_p, "length": np_p["length"][None].repeat(B_, 0), "start": np_p["start"][None].repeat(B_, 0),
            "end": np_p["end"][None].repeat(B_, 0), "segment": None, "plif": None}
    content = p["content"].clone().requires_grad_(True)
    kw = {"max_len": S_, "length_scores": p["length"], "boundary": p["boundary"], "start": p["start"],
          "end": p["end"], "lengths": lengths}
    with st.use_backend(backend):
        value, out_labels, out_starts, count = st.semimarkov_loss_augmented(
            content, p["trans"], labels, starts, h=h, rescaling=rescaling, loss=kind, **kw)
        hinge = st.StructuredHingeLoss(rescaling, h=h, reduction=reduction, loss=kind)
        reduced = hinge(content, p["trans"], labels, target_starts=starts, **kw)
        structure = st.SemiMarkovDistribution(content, p["trans"], **kw)
        assert torch.allclose(hinge(structure, (labels, starts)), reduced, rtol=1e-12, atol=1e-12)
    per_row = []
    for b in range(B_):
        L = int(lengths[b])
        rows = brute(np_p, b, L, S_, N_)
        y, ys = targets[b]
        gold = next(s for lab, sts, s in rows if (lab, sts) == (y, ys))

        def augmented(lab, sts, s, y=y, ys=ys, gold=gold):
            k = _segment_count(kind, lab, sts, y, ys)
            return s + h_np(k) - gold if rescaling == "margin" else h_np(k) * (1 + s - gold)

        best = max(augmented(*row) for row in rows)
        assert value[b].item() == pytest.approx(best, abs=1e-9), (b, value[b].item(), best)
        found = (tuple(out_labels[b, :L].tolist()), tuple(out_starts[b, :L].tolist()))
        score = dict(((lab, sts), s) for lab, sts, s in rows)[found]
        assert augmented(*found, score) == pytest.approx(best, abs=1e-9)
        assert count[b].item() == _segment_count(kind, *found, y, ys)
        assert (out_labels[b, L:] == -1).all() and not out_starts[b, L:].any()
        per_row.append(max(best, 0.0))
    want = torch.tensor(per_row, dtype=torch.float64)
    want = want if reduction == "none" else want.sum() if reduction == "sum" else want.mean()
    torch.testing.assert_close(reduced, want, rtol=1e-9, atol=1e-9)
    # the subgradient: d value / d content = weight * (indicator of the found - of the target)
    (grad,) = torch.autograd.grad(reduced.sum(), content)
    want_grad = torch.zeros(B_, T_, N_, dtype=torch.float64)
    for b in range(B_):
        L = int(lengths[b])
        if per_row[b] <= 0:
            continue  # the hinge is inactive (or at its kink): zero, or the found equals the target
        k = float(count[b])
        weight = 1.0 if rescaling == "margin" else h_np(k)
        weight /= B_ if reduction == "mean" else 1
        for t in range(L):
            want_grad[b, t, int(out_labels[b, t])] += weight
            want_grad[b, t, int(labels[b, t])] -= weight
    torch.testing.assert_close(grad, want_grad, rtol=1e-9, atol=1e-9)


def _labelings_psi(model, data):
    """Per sequence: [(labeling, loss, psi(x, labeling) (d,) float64)] over every labeling of its
    length, the loss being the Hamming count (or the sum of ``data.cost`` at the labeling's labels)
    and psi the gradient of the path score w.r.t. the parameters (a linear model)."""
    import itertools

    import numpy as np

    params = list(model.parameters())
    out = []
    for i in range(len(data)):
        L = int(data.lengths[i])
        x, y = data.x[i:i + 1, :L], data.labels[i, :L]
        rows = []
        for lab in itertools.product(range(2), repeat=L):
            unary, trans = model(x)
            score = st.path_score(unary, trans, torch.tensor([lab], dtype=torch.long))
            grads = torch.autograd.grad(score.sum(), params, allow_unused=True)
            flat = np.concatenate([(torch.zeros_like(p) if gr is None else gr).reshape(-1).double().numpy()
                                   for gr, p in zip(grads, params, strict=True)])
            if data.cost is None:
                loss = int((torch.tensor(lab, dtype=torch.long) != y).sum())
            else:
                loss = float(sum(data.cost[i, t, j] for t, j in enumerate(lab)))
            rows.append((lab, loss, flat))
        out.append((tuple(y.tolist()), rows))
    return out


def _primal(w, lam, rescaling, psis):
    """lam/2 ||w||^2 + the mean hinge at w, each sequence's by enumeration of its labelings."""
    hinges = []
    for y, rows in psis:
        gold = next(f for lab, _, f in rows if lab == y) @ w
        aug = [k + f @ w - gold if rescaling == "margin" else k * (1 + f @ w - gold) for _, k, f in rows]
        hinges.append(max(0.0, *aug))
    return lam / 2 * float(w @ w) + sum(hinges) / len(hinges)


def _qp_optimum(d, lam, rescaling, psis):
    """min lam/2 ||w||^2 + mean xi subject to every labeling's constraint (cvxpy, Clarabel)."""
    import cvxpy as cp

    w, xi = cp.Variable(d), cp.Variable(len(psis))
    constraints = [xi >= 0]
    for i, (y, rows) in enumerate(psis):
        gold = next(f for lab, _, f in rows if lab == y)
        for _, k, f in rows:
            if k:
                margin = (gold - f) @ w
                constraints.append(xi[i] >= (k - margin if rescaling == "margin" else k * (1 - margin)))
    problem = cp.Problem(cp.Minimize(lam / 2 * cp.sum_squares(w) + cp.sum(xi) / len(psis)), constraints)
    problem.solve(solver=cp.CLARABEL)
    return problem.value


SOLVER_CASES = [  # (solver, rescaling, solver_options)
    ("cutting_plane", "margin", {"variant": "one_slack"}),
    ("cutting_plane", "slack", {"variant": "one_slack"}),
    ("cutting_plane", "margin", {"variant": "one_slack", "step": 1.0}),
    ("cutting_plane", "margin", {"variant": "n_slack"}),
    ("cutting_plane", "slack", {"variant": "n_slack"}),
    ("cutting_plane", "slack", {"variant": "n_slack", "margin": 0.0, "batch_size": 1}),
    ("bcfw", "margin", {"averaging": True, "line_search": True}),
    ("bcfw", "margin", {"averaging": False, "line_search": False}),
]


@settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", 10)), deadline=None, database=None)
@given(hst.sampled_from(SOLVER_CASES), hst.integers(1, 3), hst.integers(1, 3), hst.integers(0, 2**16),
       hst.sampled_from([("l2", 0.05), ("l2", 1.0), ("l2", 20.0), ("C", 0.01), ("C", 10.0)]))
def test_exact_solvers_certify_the_brute_force_optimum(case, n, max_length, seed, regularizer):
    """fit(solver="cutting_plane") (one_slack and n_slack, margin and slack rescaling) and
    fit(solver="bcfw") on tiny problems (2 labels, lengths <= 3): every epoch's gap is objective - dual
    and dual <= the QP optimum over every labeling's constraint (cvxpy) <= objective; the last objective
    is the primal lambda/2 ||w||^2 + mean hinge recomputed by enumeration at the returned weights; the
    cutting planes converge to the optimum."""
    import numpy as np

    from structtorch.data import SequenceData, make_tagging_data

    solver, rescaling, options = case
    raw = make_tagging_data(n, seed=seed, min_length=1, max_length=max_length, num_features=2, num_labels=2,
                            noise=1.5)
    data = SequenceData(raw.x.double(), raw.labels, raw.lengths)
    kind, value = regularizer
    lam = value if kind == "l2" else 1 / (n * value)
    tol = 1e-6
    model = st.LinearChainPotentials(2, 2).double()
    epochs = 300 if solver == "cutting_plane" else 40
    history = st.train.fit(model, data, st.StructuredHingeLoss(rescaling), epochs=epochs, **{kind: value},
                           solver=solver, solver_options={**options, "tol": tol}, progress=False)
    psis = _labelings_psi(st.LinearChainPotentials(2, 2).double(), data)
    d = sum(p.numel() for p in model.parameters())
    best = _qp_optimum(d, lam, rescaling, psis)
    objective, dual, gap = (np.array(history[k]) for k in ("objective", "dual", "gap"))
    np.testing.assert_allclose(gap, objective - dual, rtol=0, atol=1e-12)
    slack = 1e-6 * max(1.0, abs(best))  # Clarabel's accuracy
    assert (dual <= best + slack).all(), (dual.max(), best)
    assert (objective >= best - slack).all(), (objective.min(), best)
    w = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).double().numpy()
    assert objective[-1] == pytest.approx(_primal(w, lam, rescaling, psis), rel=1e-9, abs=1e-12)
    if solver == "cutting_plane":
        assert history.converged and gap[-1] <= tol
        assert objective[-1] == pytest.approx(best, abs=tol + slack)


class _ConfusionHinge(st.StructuredHingeLoss):
    """A user's way to a per-position cost before SequenceData.cost: forward adds cost= (issue 53,
    item 9). BCFW, which calls the oracle and not forward, refuses it."""

    def __init__(self, cost):
        super().__init__("margin")
        self.cost = cost

    def forward(self, unary, transitions, target, **kw):
        return super().forward(unary, transitions, target, cost=self.cost, **kw)


@settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", 4)), deadline=None, database=None)
@given(hst.integers(1, 3), hst.integers(1, 3), hst.integers(0, 2**16), hst.sampled_from([0.3, 3.0]))
def test_every_exact_solver_trains_the_data_costs(n, max_length, seed, C):
    """SequenceData.cost (per position and label, 0 at the gold label): BCFW, 1-slack and n-slack
    cutting planes certify the same optimum, the QP over every labeling's constraint with the costs
    as losses (cvxpy), and each reported primal is the one recomputed by enumeration at its weights
    with the costs (not the Hamming count)."""
    import numpy as np

    from structtorch.data import SequenceData, make_tagging_data

    raw = make_tagging_data(n, seed=seed, min_length=1, max_length=max_length, num_features=2, num_labels=2,
                            noise=1.5)
    g = torch.Generator().manual_seed(seed)
    cost = 3 * torch.rand(n, raw.labels.shape[1], 2, generator=g, dtype=torch.float64)
    cost.scatter_(2, raw.labels.unsqueeze(2), 0.0)  # nothing for the gold label
    data = SequenceData(raw.x.double(), raw.labels, raw.lengths, cost=cost)
    lam = 1 / (n * C)
    psis = _labelings_psi(st.LinearChainPotentials(2, 2).double(), data)
    best = _qp_optimum(sum(p.numel() for p in st.LinearChainPotentials(2, 2).parameters()), lam, "margin", psis)
    slack = 1e-6 * max(1.0, abs(best))  # Clarabel's accuracy
    for solver, options, epochs in (("bcfw", {"tol": 1e-2}, 400), ("cutting_plane", {"variant": "one_slack"}, 300),
                                    ("cutting_plane", {"variant": "n_slack"}, 300)):
        model = st.LinearChainPotentials(2, 2).double()
        history = st.train.fit(model, data, st.StructuredHingeLoss("margin"), epochs=epochs, C=C, solver=solver,
                               solver_options={"tol": 1e-7, **options}, progress=False)
        w = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).double().numpy()
        objective, dual, gap = (history[k][-1] for k in ("objective", "dual", "gap"))
        assert objective == pytest.approx(_primal(w, lam, "margin", psis), rel=1e-9, abs=1e-12)
        # the certificate: dual <= optimum <= primal, whatever the gap reached (BCFW converges slowly)
        assert dual - slack <= best <= objective + slack and objective - best <= gap + slack, (solver, options)
        if solver == "cutting_plane":
            assert history.converged and objective == pytest.approx(best, abs=1e-7 + slack)
    with pytest.raises(TypeError, match="solver='bcfw'.*overrides.*SequenceData\\(cost="):
        st.train.fit(st.LinearChainPotentials(2, 2).double(), SequenceData(raw.x.double(), raw.labels, raw.lengths),
                     _ConfusionHinge(cost), epochs=1, C=C, solver="bcfw", progress=False)
    assert np.isfinite(best)


_CHECKPOINTS: dict = {}


def _fit_with_checkpoint(path, epochs: int):
    from structtorch.data import make_tagging_data

    data = make_tagging_data(6, seed=0, min_length=2, max_length=4, num_features=2, num_labels=3)
    return st.train.fit(st.LinearChainPotentials(2, 3), data, st.StructuredHingeLoss(), epochs=epochs, C=1.0,
                        solver="cutting_plane", progress=False, checkpoint=path)


def _checkpoint_bytes() -> bytes:
    """A checkpoint of a cutting-plane run (working set, dual, RNGs, history), written once."""
    import tempfile
    from pathlib import Path

    if "bytes" not in _CHECKPOINTS:
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "fit.pt"
            _fit_with_checkpoint(path, epochs=2)
            _CHECKPOINTS["bytes"] = path.read_bytes()
    return _CHECKPOINTS["bytes"]


@SMALL
@given(hst.floats(0, 1, exclude_max=True), hst.integers(1, 64), hst.sampled_from(["flip", "truncate", "insert"]))
def test_a_damaged_checkpoint_is_a_clear_error_never_a_resumed_run(where, count, damage):
    """Issue 53: random byte flips, truncations and insertions anywhere in a checkpoint of fit: a
    ValueError naming the file, never a run resumed from a corrupt state."""
    import tempfile
    from pathlib import Path

    data = _checkpoint_bytes()
    at = int(where * len(data))
    if damage == "flip":
        bad = bytearray(data)
        for k in range(at, min(at + count, len(data))):
            bad[k] ^= 1 + (k * 37) % 255
    elif damage == "truncate":
        bad = data[:at]
    else:
        bad = data[:at] + bytes(count) + data[at:]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "fit.pt"
        path.write_bytes(bytes(bad))
        with pytest.raises(ValueError, match=re.escape(repr(str(path)))):
            _fit_with_checkpoint(path, epochs=3)


# ------------------------------------------------------------------------------------------------
# The CRF head on a transformer, its collator and profiling.device_ops (issue 41): the head's loss
# and predictions against enumeration over the word positions (left and right padding, word masks,
# partial labels), the collator against manual padding, and bad input named in the error.

HEAD_N = 3


def _transformers():
    return pytest.importorskip("transformers")


_HEAD_CACHE: dict = {}


def _head_encoder():
    """A tiny randomly initialised BERT in float64, built once (offline: no download)."""
    if "encoder" not in _HEAD_CACHE:
        transformers = _transformers()
        with torch.random.fork_rng():
            torch.manual_seed(0)
            config = transformers.BertConfig(vocab_size=30, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                                             intermediate_size=16, max_position_embeddings=32)
            _HEAD_CACHE["encoder"] = transformers.BertModel(config).double().eval()
    return _HEAD_CACHE["encoder"]


def _head(seed: int = 0, **kwargs):
    """CRFForTokenClassification on the cached encoder, its head and CRF drawn from ``seed``."""
    from structtorch.nn.token_classification import CRFForTokenClassification

    model = CRFForTokenClassification(_head_encoder(), HEAD_N, dropout=0.0, **kwargs).double().eval()
    g = torch.Generator().manual_seed(seed)
    for p in [*model.classifier.parameters(), *model.crf.parameters()]:
        torch.nn.init.normal_(p, generator=g)
    return model


def _head_tokenizer():
    """A fast tokenizer without a vocabulary to speak of: the collator reads its pad id and padding side."""
    if "tokenizer" not in _HEAD_CACHE:
        transformers = _transformers()
        tokenizers = pytest.importorskip("tokenizers")
        tok = tokenizers.Tokenizer(tokenizers.models.WordLevel({"[PAD]": 0, "[UNK]": 1}, unk_token="[UNK]"))
        _HEAD_CACHE["tokenizer"] = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]",
                                                                        pad_token="[PAD]")
    return _HEAD_CACHE["tokenizer"]


@hst.composite
def word_batches(draw):
    """A batch of [CLS] word pieces [SEP] rows padded on one side: word_ids rows (None at specials and
    padding), the attention mask, each word's first piece (the oracle's word positions) and word-level
    labels there (-100 for unlabeled words), -100 elsewhere."""
    B_ = draw(hst.integers(1, 3))
    left = draw(hst.booleans())
    rows = []
    for _ in range(B_):
        row = [None]
        for w in range(draw(hst.integers(0, 4))):
            row += [w] * draw(hst.integers(1, 2))
        rows.append(row + [None])
    T_ = max(len(r) for r in rows) + draw(hst.integers(0, 1))
    word_ids, attention = [], torch.zeros(B_, T_, dtype=torch.long)
    firsts = torch.zeros(B_, T_, dtype=torch.bool)
    labels = torch.full((B_, T_), -100)
    for b, r in enumerate(rows):
        pad = [None] * (T_ - len(r))
        offset = len(pad) if left else 0
        word_ids.append(pad + r if left else r + pad)
        attention[b, offset:offset + len(r)] = 1
        for t, w in enumerate(r):
            if w is not None and r[t - 1] != w:
                firsts[b, offset + t] = True
                labels[b, offset + t] = draw(hst.sampled_from([-100, *range(HEAD_N)]))
    return word_ids, attention, firsts, labels


def _enumerated(u, trans, start, end):
    """Every labeling of the rows of u (W, N) and its score (N^W,), float64."""
    import itertools

    W = u.shape[0]
    labs = torch.tensor(list(itertools.product(range(HEAD_N), repeat=W)), dtype=torch.long).reshape(-1, W)
    score = u[torch.arange(W), labs].sum(1) + start[labs[:, 0]] + end[labs[:, -1]]
    return labs, score + trans[labs[:, :-1], labs[:, 1:]].sum(1)


@settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", 20)), deadline=None, database=None)
@given(word_batches(), hst.sampled_from(["word_mask", "labels", "predict"]),
       hst.sampled_from(["mean", "sum", "none", "token_mean"]), hst.integers(0, 2**16))
def test_crf_head_matches_enumeration_over_the_words(case, mode, reduction, seed):
    """CRFForTokenClassification on a tiny BERT, rows padded left or right: the chain runs over the
    words (an explicit word_mask, inside which -100 is an unknown word; or the labeled positions); the
    loss is the NLL of the consistent labelings by enumeration over those positions' logits, reduced;
    the predictions are the best labeling by enumeration there, -100 elsewhere; decode gives them per
    word. A label where attention_mask is 0 is an error naming attention_mask (and no error with value
    checks off)."""
    word_ids, attention, firsts, labels = case
    model = _head(seed, reduction=reduction)
    B_, T_ = attention.shape
    ids = torch.randint(2, 30, (B_, T_), generator=torch.Generator().manual_seed(seed))
    mask = st.word_mask(word_ids)
    assert torch.equal(mask, firsts)
    kw = {"input_ids": ids, "attention_mask": attention}
    if mode == "word_mask":
        kw |= {"word_mask": mask, "labels": labels}
        chain = firsts
    elif mode == "labels":
        kw |= {"labels": labels}
        chain = labels != -100
    else:
        kw |= {"word_mask": mask}
        chain = firsts
    out = model(**kw)
    logits = out.logits.detach()
    trans, start, end = (x.detach() for x in model.crf.scores())
    nlls = []
    for b in range(B_):
        pos = chain[b].nonzero().flatten()
        want = torch.full((T_,), -100)
        if len(pos) == 0:
            nlls.append(torch.zeros((), dtype=torch.float64))
            assert torch.equal(out.predictions[b], want)
            continue
        labs, score = _enumerated(logits[b, pos], trans, start, end)
        y = labels[b, pos]
        consistent = ((labs == y) | (y == -100)).all(1)
        nlls.append(score.logsumexp(0) - score[consistent].logsumexp(0))
        want[pos] = labs[score.argmax()]
        assert torch.equal(out.predictions[b], want), (b, out.predictions[b], want)
    if mode == "predict":
        assert out.loss is None
        words = model.decode(**kw)
        assert torch.equal(words, st.tokens_to_words(out.predictions, mask, fill=-1))
        return
    nll = torch.stack(nlls)
    want = {"none": nll, "sum": nll.sum(), "mean": nll.mean(),
            "token_mean": nll.sum() / max(int(chain.sum()), 1)}[reduction]
    torch.testing.assert_close(out.loss.detach(), want, rtol=1e-9, atol=1e-9)
    padding = (attention == 0).nonzero()
    if len(padding):
        b, t = padding[seed % len(padding)].tolist()
        bad = labels.clone()
        bad[b, t] = seed % HEAD_N
        wm = {} if mode == "labels" else {"word_mask": mask.index_put((torch.tensor([b]), torch.tensor([t])),
                                                                      torch.tensor(True))}
        with pytest.raises(ValueError, match=re.escape(f"attention_mask is 0, which the loss would drop: [({b}, {t})]")):
            model(**{**kw, **wm, "labels": bad})
        with st.set_validation(False):
            model(**{**kw, **wm, "labels": bad})


def _head_call(**changes):
    """The head on a fixed batch (2, 5) with one change."""
    model = _head(0)
    kw = {"input_ids": torch.tensor([[2, 3, 4, 5, 0], [2, 6, 7, 0, 0]]),
          "attention_mask": torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 0, 0]]),
          "labels": torch.tensor([[-100, 0, 1, -100, -100], [-100, 2, -100, -100, -100]])}
    return model(**{**kw, **changes})


def _collate(features, **kwargs):
    from structtorch.nn.token_classification import DataCollatorWithWordMask

    tokenizer = _head_tokenizer()
    tokenizer.padding_side = kwargs.pop("padding_side", "right")
    return DataCollatorWithWordMask(tokenizer, **kwargs)(features)


def _example(n: int, **changes) -> dict:
    return {"input_ids": list(range(2, 2 + n)), "labels": [-100] + [0] * (n - 1),
            "word_mask": [False] + [True] * (n - 1), **changes}


HEAD_BAD_INPUTS = [  # (call, exception, what its message names)
    (lambda: _head(0, ignore_index=1), ValueError, "ignore_index"),
    (lambda: _head(0, ignore_index=-100.0), TypeError, "ignore_index"),
    (lambda: _head(0, reduction="avg"), ValueError, "reduction"),
    (lambda: _head_call(labels=torch.zeros(2, 5)), ValueError, "labels"),
    (lambda: _head_call(labels=torch.zeros(2, 4, dtype=torch.long)), ValueError, "labels"),
    (lambda: _head_call(labels=torch.zeros(2, 5, dtype=torch.long).tolist()), TypeError, "labels"),
    (lambda: _head_call(labels=torch.full((2, 5), HEAD_N)), ValueError, "labels"),
    (lambda: _head_call(labels=torch.full((2, 5), -1)), ValueError, "labels"),
    (lambda: _head_call(labels=torch.ones(2, 5, HEAD_N, dtype=torch.bool)), ValueError, "word_mask"),
    (lambda: _head_call(labels=torch.zeros(2, 5, dtype=torch.long)), ValueError, "attention_mask"),
    (lambda: _head_call(word_mask=torch.ones(2, 5)), ValueError, "word_mask"),
    (lambda: _head_call(word_mask=torch.ones(2, 4, dtype=torch.bool)), ValueError, "word_mask"),
    (lambda: _head_call(word_mask=torch.full((2, 5), 2)), ValueError, "word_mask"),
    (lambda: _head_call(attention_mask=torch.ones(2, 5)), ValueError, "attention_mask"),
    (lambda: _head_call(attention_mask=torch.ones(2, 4, dtype=torch.long)), ValueError, "attention_mask"),
    (lambda: _head_call(attention_mask=torch.ones(1, 5, dtype=torch.long)), ValueError, "attention_mask"),
    (lambda: _head_call(attention_mask=torch.tensor([[1, 1, 0], [1, 0, 0]])), ValueError, "attention_mask"),
    (lambda: _head_call(attention_mask=torch.tensor([[1, 1, 1, 1, -1], [1, 1, 1, 0, 0]])), ValueError,
     "attention_mask"),
    (lambda: _head_call(attention_mask=torch.tensor([[1, 1, 1, 1, 2], [1, 1, 1, 0, 0]])), ValueError,
     "attention_mask"),
    (lambda: _collate([_example(3), _example(4, word_mask=[True] * 5)]), ValueError, "word_mask of example 1"),
    (lambda: _collate([_example(4, word_mask=[True] * 3), _example(2)], padding_side="left"), ValueError,
     "word_mask of example 0"),
    (lambda: _collate([_example(3), {k: v for k, v in _example(2).items() if k != "word_mask"}]), ValueError,
     "not for [1]"),
    (lambda: _collate([_example(3), _example(2, word_mask=None)]), TypeError, "word_mask of example 1"),
    (lambda: _collate([_example(3), _example(2, word_mask=["a", "b"])]), TypeError, "word_mask of example 1"),
    (lambda: _collate([_example(3), _example(2, word_mask=[0.5, 1.0])]), TypeError, "word_mask of example 1"),
    (lambda: _collate([_example(2, word_mask=[2, 1]), _example(3)]), ValueError, "word_mask of example 0"),
    (lambda: _collate([_example(4, word_mask=[[True, False], [True, False]]), _example(3)]), ValueError,
     "word_mask of example 0 must have one dimension"),
]


@pytest.mark.parametrize("i", range(len(HEAD_BAD_INPUTS)))
def test_the_crf_head_and_its_collator_name_the_bad_argument(i):
    _names_the_argument(*HEAD_BAD_INPUTS[i])


def test_the_crf_head_masks_hold_0_and_1_a_value_check():
    """An integer attention_mask or word_mask of other values than 0 and 1 (read as True by the head,
    as a number by the encoder) is refused by the head and the collator, unless value checks are off."""
    two = torch.tensor([[1, 1, 1, 1, 2], [1, 1, 1, 0, 0]])
    with pytest.raises(ValueError, match="attention_mask must hold only 0 and 1"):
        _head_call(attention_mask=two)
    with pytest.raises(ValueError, match="word_mask must hold only 0 and 1"):
        _head_call(word_mask=two)
    with pytest.raises(ValueError, match="word_mask of example 1 must hold only 0 and 1"):
        _collate([_example(3), _example(2, word_mask=[0, 2])])
    with st.set_validation(False):
        assert torch.isfinite(_head_call(word_mask=two).loss)
        assert _collate([_example(3), _example(2, word_mask=[0, 2])])["word_mask"][1].tolist() == [
            False, True, False]


@SMALL
@given(hst.lists(hst.tuples(hst.integers(1, 5), hst.booleans(), hst.sampled_from(["list", "tensor", "ints"])),
                 min_size=1, max_size=4),
       hst.sampled_from(["left", "right"]), hst.sampled_from([None, 4]), hst.booleans(), hst.integers(0, 2**16))
def test_collator_pads_like_by_hand(rows, side, multiple, with_labels, seed):
    """DataCollatorWithWordMask on examples of mixed lengths (word masks as lists, bool tensors or 0/1
    ints; partial labels -100 inside them), padded left or right (and to a multiple): input_ids,
    attention_mask, labels and word_mask equal the manual padding, each on its example's tokens."""
    g = torch.Generator().manual_seed(seed)
    features, wants = [], []
    for n, _, form in rows:
        ids = torch.randint(2, 30, (n,), generator=g).tolist()
        wm = (torch.rand(n, generator=g) < 0.6).tolist()
        labels = [int(torch.randint(-1, HEAD_N, (), generator=g)) if m else -100 for m in wm]
        labels = [-100 if y < 0 else y for y in labels]
        f = {"input_ids": ids, "word_mask": wm if form == "list" else torch.tensor(wm) if form == "tensor" else
             [int(m) for m in wm]}
        features.append(f | ({"labels": labels} if with_labels else {}))
        wants.append((ids, labels, wm))
    batch = _collate(features, padding_side=side, pad_to_multiple_of=multiple)
    longest = max(n for n, _, _ in rows)
    T_ = longest if multiple is None else -(-longest // multiple) * multiple
    assert batch["input_ids"].shape == batch["word_mask"].shape == (len(rows), T_)
    assert batch["word_mask"].dtype == torch.bool
    assert ("labels" in batch) == with_labels
    for b, (ids, labels, wm) in enumerate(wants):
        k = T_ - len(ids)

        def padded(row, fill, k=k):
            return [fill] * k + row if side == "left" else row + [fill] * k

        assert batch["input_ids"][b].tolist() == padded(ids, 0)
        assert batch["attention_mask"][b].tolist() == padded([1] * len(ids), 0)
        assert batch["word_mask"][b].tolist() == padded(wm, False)
        if with_labels:
            assert batch["labels"][b].tolist() == padded(labels, -100)


@settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", 15)), deadline=None, database=None,
          suppress_health_check=list(__import__("hypothesis").HealthCheck))
@given(hst.integers(0, 3), hst.integers(0, 3), hst.sampled_from(["", "out\n"]), hst.sampled_from(["", "err\n"]))
def test_device_ops_counts_and_prints_nothing_of_its_own(capfd, adds, items, out, err):
    """device_ops counts k adds as k ops and k item() as k syncs, prints nothing of its own (a CUDA
    build without a GPU logs a driver error from the profiler) and passes through what the function
    itself writes; a function that raises raises through it, printing nothing either."""
    import sys

    from structtorch.profiling import device_ops

    x = torch.randn(3)

    def fn():
        for _ in range(adds):
            torch.add(x, x)
        for _ in range(items):
            x[0].item()
        sys.stdout.write(out)
        sys.stderr.write(err)

    capfd.readouterr()
    counts = device_ops(fn)
    assert counts.names["aten::add"] == adds and counts.syncs == items and counts.launches == 0
    assert counts.sync_names["aten::item"] == items
    captured = capfd.readouterr()
    assert (captured.out, captured.err) == (out, err)
    with pytest.raises(ZeroDivisionError):
        device_ops(lambda: 1 / 0)
    assert capfd.readouterr() == ("", "")


@pytest.mark.parametrize("fn", [None, 3, "viterbi", torch.zeros(2), lambda x: x, lambda *, k: k])
def test_device_ops_names_a_bad_fn(fn, capfd):
    from structtorch.profiling import device_ops

    with pytest.raises(TypeError, match="fn must be a callable taking no arguments"):
        device_ops(fn)
    assert capfd.readouterr() == ("", "")
