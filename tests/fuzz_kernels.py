"""Fuzzing of the compiled CPU kernels with arbitrary shapes, counts and indices.

Not collected by pytest on its own: ``test_robustness.py`` runs it in a subprocess, so that a crash
(SIGSEGV) fails one test instead of killing the suite. Every call with a bad argument must raise a
RuntimeError (the kernels' own checks); nothing a caller passes may touch memory out of bounds.
Every call whose arguments are all valid must succeed (the checks are not too strict), and the
semi-Markov kernels get real ``forb`` tables (from content with -inf entries).

Run directly: ``python tests/fuzz_kernels.py [max_examples]``.
"""

from __future__ import annotations

import sys

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from structtorch._extension import chain_ops
from structtorch.semimarkov._cpu import last_forbidden

OPS = chain_ops()
HUGE = [2**62, 2**63 - 1, -(2**63), -1, 10**6]


def ints(lo: int, hi: int):
    """Integers in [lo, hi], sometimes far outside."""
    return st.one_of(st.integers(lo, hi), st.integers(lo, hi), st.integers(lo - 3, hi + 3),
                     st.sampled_from(HUGE))


def int_tensor(data, shape: tuple[int, ...], lo: int, hi: int, valid: torch.Tensor | None = None):
    """(tensor, ok): entries in [lo, hi] (or ``valid``), one of them corrupted half of the time;
    ``ok`` says whether every entry still lies in [lo, hi]."""
    n = 1
    for s in shape:
        n *= s
    if valid is None:
        x = torch.tensor(data.draw(st.lists(st.integers(lo, max(lo, hi)), min_size=n, max_size=n)),
                         dtype=torch.long)
    else:
        x = valid.clone().reshape(-1)
    ok = True
    if n and data.draw(st.booleans()):
        bad = data.draw(ints(lo, hi))
        x[data.draw(st.integers(0, n - 1))] = bad
        ok = valid is None and lo <= bad <= hi
    return x.view(shape), ok


def _call(fn, *args, valid: bool = False):
    """Call a kernel: a RuntimeError is the expected answer to bad input, never to valid input."""
    try:
        return fn(*args)
    except RuntimeError:
        if valid:
            raise
        return None


MUTATIONS = ["none"] * 6 + ["trans", "start", "end", "dtype", "lengths_shape"]


@st.composite
def chain_args(draw):
    B, T, N = draw(st.integers(0, 3)), draw(st.integers(0, 5)), draw(st.integers(1, 4))
    dtype = draw(st.sampled_from([torch.float32, torch.float64]))
    shared = draw(st.booleans())
    shape_of = {"unary": (B, T, N), "trans": (N, N) if shared else (B, max(T - 1, 0), N, N),
                "start": (B, N), "end": (B, N)}
    mutation = draw(st.sampled_from(MUTATIONS))
    bad_shapes = {"trans": [(N + 1, N), (B, T, N, N), (N,)], "start": [(N,), (B, N + 1)], "end": [(B + 1, N)]}
    if mutation in bad_shapes:
        shape_of[mutation] = draw(st.sampled_from(bad_shapes[mutation]))
    tensors = {k: torch.randn(*s, dtype=dtype) for k, s in shape_of.items()}
    if mutation == "dtype":
        other = torch.float64 if dtype == torch.float32 else torch.float32
        key = draw(st.sampled_from(sorted(tensors)))
        tensors[key] = tensors[key].to(draw(st.sampled_from([other, torch.long])))
    lengths, ok = int_tensor(draw(st.data()), (B,), 0, T)
    if mutation == "lengths_shape":
        lengths = torch.zeros(B + 1, dtype=torch.long)
    # a start of shape (N,) is (B, N) when B = 1; so is an unchanged tensor of the right shape
    valid = ok and (mutation == "none" or (mutation in ("start", "end") and shape_of[mutation] == (B, N)))
    return B, T, N, tensors, lengths, valid


def normalized(trans: torch.Tensor):
    a = trans.double()
    r = a.amax(-1) if a.numel() else a.sum(-1)
    return r.contiguous(), torch.exp(a - r.nan_to_num(0, 0, 0).unsqueeze(-1)).contiguous()


FUZZ = settings(max_examples=int(sys.argv[1]) if len(sys.argv) > 1 else 150, deadline=None,
                suppress_health_check=list(HealthCheck), database=None)


@FUZZ
@given(chain_args(), st.data())
def fuzz_chain(args, data):
    B, T, N, x, lengths, valid = args
    _call(OPS.viterbi_forward, x["unary"], x["trans"], x["start"], x["end"], lengths, valid=valid)
    _call(OPS.kbest_forward, x["unary"], x["trans"], x["start"], x["end"], lengths, 2, valid=valid)
    r, f = normalized(x["trans"])
    target, target_ok = int_tensor(data, (B, T), 0, N - 1)
    inside = torch.arange(T) < lengths.clamp(0, T)[:, None] if valid else None
    # only the positions inside each length are read: a corrupted entry beyond them is fine
    target_ok = target_ok or (valid and bool(((target >= 0) & (target < N) | ~inside).all()))
    gold = data.draw(st.sampled_from([target, target.new_empty(0)]))
    gold_ok = gold.numel() == 0 or target_ok
    _call(OPS.logz_forward, x["unary"], x["trans"], r, f, x["start"], x["end"], lengths, gold,
          valid=valid and gold_ok)
    double = valid and x["unary"].dtype == torch.float64  # the fold takes float64 potentials
    costs = data.draw(st.sampled_from([None, torch.rand(B, T, N, dtype=torch.float64), torch.rand(B, T, N)]))
    _call(OPS.fold_forward, x["unary"], x["trans"], x["start"], x["end"], lengths, target, costs, None,
          valid=double and target_ok and (costs is None or costs.dtype == torch.float64))
    d = torch.float64
    g = torch.ones(B, dtype=d)
    alpha, p, m = torch.zeros(B, T, N, dtype=d), torch.zeros(B, T, N, dtype=d), torch.zeros(B, T, dtype=d)
    ft = f.transpose(-1, -2).contiguous() if f.dim() >= 2 else f
    _call(OPS.logz_backward, g, x["unary"], x["trans"], r, f, ft, x["end"], lengths, g.clone(), alpha, p, m,
          gold, data.draw(st.booleans()), valid=valid and gold_ok)
    weights, weights_ok = int_tensor(data, (B, T), 0, 2)
    K = data.draw(st.one_of(st.integers(2 * T, 2 * T + 2), st.integers(-2, 2 * T + 2),
                            st.sampled_from([2**62, 2**63 - 2])))
    fits = valid and K <= 2 * T + 2 and bool(((weights * inside).sum(1) <= K).all()) and K >= 0
    weights_ok = weights_ok or (valid and bool(((weights >= 0) & (weights <= 2) | ~inside).all()))
    forward_ok = fits and target_ok and weights_ok
    out = _call(OPS.hamming_forward, x["unary"], x["trans"], x["start"], x["end"], lengths, target, weights, K,
                valid=forward_ok)
    if out is None:
        bp = torch.zeros(max(B, 0), T, N, max(min(K, 8), 0) + 1, dtype=torch.uint8)
    else:
        bp = out[2]
    k, k_ok = int_tensor(data, (B,), -1, bp.shape[3] - 1)
    end_label, end_ok = int_tensor(data, (B,), 0, N - 1)
    _call(OPS.hamming_backtrack, bp, lengths, target, weights, k, end_label,
          valid=forward_ok and out is not None and k_ok and end_ok)


@FUZZ
@given(st.integers(0, 3), st.integers(0, 5), st.integers(1, 3), st.integers(0, 4), st.data())
def fuzz_semimarkov(B, T, N, S, data):
    d = data.draw(st.sampled_from([torch.float32, torch.float64]))
    content = torch.randn(B, T, N, dtype=d)
    content[torch.rand(B, T, N) < data.draw(st.sampled_from([0.0, 0.2, 0.5]))] = float("-inf")
    forb, forb_ok = int_tensor(data, (B, T + 1, N), -1, T - 1, valid=last_forbidden(content))
    length = torch.randn(B, S, N, dtype=d)
    boundary = torch.randn(B, T, N, dtype=d)
    segments = [content.new_empty(0)] * 2 + [torch.randn(B, T, S, N, dtype=d), torch.randn(B, T, S + 1, N, dtype=d)]
    segment_index = data.draw(st.integers(0, 3))
    trans_shape = data.draw(st.sampled_from([(N, N)] * 3 + [(N, N + 1)]))
    trans = torch.randn(*trans_shape, dtype=d)
    start, end = torch.randn(B, N, dtype=d), torch.randn(B, N, dtype=d)
    lengths, lengths_ok = int_tensor(data, (B,), 0, T)
    valid = forb_ok and lengths_ok and trans_shape == (N, N) and (segment_index < 3 or B * T * N == 0)
    args = (content, forb, length, boundary, segments[segment_index], trans, start, end, lengths)
    P = data.draw(st.integers(0, 3))
    support = data.draw(st.sampled_from([(0.0, 1.0)] * 4 + [(0.0, 5e-324), (1.0, 0.0), (-1e308, 1e308),
                                                            (0.0, float("nan"))]))
    with_tracks = data.draw(st.booleans())
    tracks = torch.randn(B, T, N, dtype=d) if with_tracks else content.new_empty(0)
    if with_tracks:  # non-finite tracks (the Python checks off) must not steer an index out of bounds
        tracks[torch.rand(B, T, N) < data.draw(st.sampled_from([0.0, 0.3]))] = data.draw(
            st.sampled_from([float("nan"), float("inf"), float("-inf")]))
    plif_ok = not with_tracks or (P >= 2 and support == (0.0, 1.0)) or B * T * N == 0
    plif = (tracks, torch.randn(N, P, dtype=d), *support)
    _call(OPS.semimarkov_viterbi_forward, *args, *plif, valid=valid and plif_ok)
    _call(OPS.semimarkov_logz_forward, *args, *plif, valid=valid and plif_ok)
    g = torch.ones(B, dtype=torch.float64)
    table = torch.zeros(B, T + 1, N, dtype=torch.float64)
    _call(OPS.semimarkov_logz_backward, g, g.clone(), table, table.clone(), *args, *plif, valid=valid and plif_ok)
    fuzz_semimarkov_table(data, args, plif, valid and plif_ok)


def fuzz_semimarkov_table(data, args, plif, valid):
    """The count tables and their backtrack: any count inputs within +-2^40 are valid (tend and
    tlabel only compare), and so is any k in [-1, K] of the tables just built."""
    B, T, N = args[0].shape
    prefix, prefix_ok = int_tensor(data, (B, T + 1, N), -3, 3)
    first, first_ok = int_tensor(data, (B, T + 1, N), -3, 3)
    tend, tlabel = int_tensor(data, (B, T + 1), -1, T)[0], int_tensor(data, (B, T + 1), 0, N - 1)[0]
    offset = int_tensor(data, (B,), 0, 3)[0]
    K = data.draw(st.one_of(st.integers(-2, 8), st.sampled_from([2**31, 2**62])))
    counts = (prefix, first, tend, tlabel, data.draw(st.sampled_from([0, -2, 2**62])))
    ok = valid and prefix_ok and first_ok and 0 <= K <= 8 and abs(counts[4]) <= 2
    out = _call(OPS.semimarkov_table_forward, *args, *plif, *counts, offset, K, valid=ok)
    if out is None:
        bp = torch.zeros(B, T + 1, N, max(min(K, 8), 0) + 1, dtype=torch.int32)
        out = (None, torch.zeros(B, bp.shape[3], dtype=torch.long), bp, bp.clone())
    k = int_tensor(data, (B,), -1, out[2].shape[3] - 1)[0]  # unreached counts may be refused
    _call(OPS.semimarkov_table_backtrack, out[2], out[3], out[1], args[8], *counts, k, valid=False)


if __name__ == "__main__":
    assert OPS is not None, "the compiled kernels did not build"
    fuzz_chain()
    fuzz_semimarkov()
    print("kernels survived fuzzing")
