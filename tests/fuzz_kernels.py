"""Fuzzing of the compiled CPU kernels with arbitrary shapes, counts and indices.

Not collected by pytest on its own: ``test_robustness.py`` runs it in a subprocess, so that a crash
(SIGSEGV) fails one test instead of killing the suite. Every call must either return or raise a
RuntimeError (the kernels' own checks); nothing a caller passes may touch memory out of bounds.

Run directly: ``python tests/fuzz_kernels.py [max_examples]``.
"""

from __future__ import annotations

import sys

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from structtorch._extension import chain_ops

OPS = chain_ops()
HUGE = [2**62, 2**63 - 1, -(2**63), -1, 10**6]


def ints(lo: int, hi: int):
    """Integers in [lo, hi], sometimes far outside."""
    return st.one_of(st.integers(lo, hi), st.integers(lo, hi), st.integers(lo - 3, hi + 3),
                     st.sampled_from(HUGE))


def int_tensor(data, shape: tuple[int, ...], lo: int, hi: int) -> torch.Tensor:
    """Valid entries in [lo, hi], with one corrupted entry half of the time."""
    n = 1
    for s in shape:
        n *= s
    x = torch.tensor(data.draw(st.lists(st.integers(lo, max(lo, hi)), min_size=n, max_size=n)),
                     dtype=torch.long)
    if n and data.draw(st.booleans()):
        x[data.draw(st.integers(0, n - 1))] = data.draw(ints(lo, hi))
    return x.view(shape)


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
    lengths = int_tensor(draw(st.data()), (B,), 0, T)
    if mutation == "lengths_shape":
        lengths = torch.zeros(B + 1, dtype=torch.long)
    return B, T, N, tensors, lengths


def _call(fn, *args):
    try:
        fn(*args)
    except RuntimeError:
        pass


def normalized(trans: torch.Tensor):
    a = trans.double()
    r = a.amax(-1) if a.numel() else a.sum(-1)
    return r.contiguous(), torch.exp(a - r.nan_to_num(0, 0, 0).unsqueeze(-1)).contiguous()


FUZZ = settings(max_examples=int(sys.argv[1]) if len(sys.argv) > 1 else 150, deadline=None,
                suppress_health_check=list(HealthCheck), database=None)


@FUZZ
@given(chain_args(), st.data())
def fuzz_chain(args, data):
    B, T, N, x, lengths = args
    _call(OPS.viterbi_forward, x["unary"], x["trans"], x["start"], x["end"], lengths)
    r, f = normalized(x["trans"])
    _call(OPS.logz_forward, x["unary"], x["trans"], r, f, x["start"], x["end"], lengths)
    d = torch.float64
    g = torch.ones(B, dtype=d)
    alpha, p, m = torch.zeros(B, T, N, dtype=d), torch.zeros(B, T, N, dtype=d), torch.zeros(B, T, dtype=d)
    ft = f.transpose(-1, -2).contiguous() if f.dim() >= 2 else f
    _call(OPS.logz_backward, g, x["unary"], x["trans"], r, ft, x["end"], lengths,
          g.clone(), alpha, p, m)
    target = int_tensor(data, (B, T), 0, N - 1)
    weights = int_tensor(data, (B, T), 0, 2)
    K = data.draw(st.one_of(st.integers(2 * T, 2 * T + 2), st.integers(-2, 2 * T + 2),
                            st.sampled_from([2**62, 2**63 - 2])))
    try:
        best, last, bp = OPS.hamming_forward(x["unary"], x["trans"], x["start"], x["end"], lengths, target,
                                             weights, K)
    except RuntimeError:
        bp = torch.zeros(max(B, 0), T, N, max(min(K, 8), 0) + 1, dtype=torch.uint8)
        last = torch.zeros(B, bp.shape[3], dtype=torch.long)
    k = int_tensor(data, (B,), -1, bp.shape[3] - 1)
    end_label = int_tensor(data, (B,), 0, N - 1)
    _call(OPS.hamming_backtrack, bp, lengths, target, weights, k, end_label)
    del last


@FUZZ
@given(st.integers(0, 3), st.integers(0, 5), st.integers(1, 3), st.integers(0, 4), st.data())
def fuzz_semimarkov(B, T, N, S, data):
    d = data.draw(st.sampled_from([torch.float32, torch.float64]))
    content = torch.randn(B, T, N, dtype=d)
    forb = int_tensor(data, (B, T + 1, N), -1, -1)
    length = torch.randn(B, S, N, dtype=d)
    boundary = torch.randn(B, T, N, dtype=d)
    segment = data.draw(st.sampled_from([content.new_empty(0)] * 2 + [torch.randn(B, T, S, N, dtype=d),
                                                                     torch.randn(B, T, S + 1, N, dtype=d)]))
    trans = torch.randn(*data.draw(st.sampled_from([(N, N)] * 3 + [(N, N + 1)])), dtype=d)
    start, end = torch.randn(B, N, dtype=d), torch.randn(B, N, dtype=d)
    lengths = int_tensor(data, (B,), 0, T)
    args = (content, forb, length, boundary, segment, trans, start, end, lengths)
    P = data.draw(st.integers(0, 3))
    low, high = data.draw(st.sampled_from([(0.0, 1.0)] * 4 + [(0.0, 5e-324), (1.0, 0.0), (-1e308, 1e308),
                                                              (0.0, float("nan"))]))
    tracks = data.draw(st.sampled_from([content.new_empty(0), torch.randn(B, T, N, dtype=d)]))
    _call(OPS.semimarkov_viterbi_forward, *args, tracks, torch.randn(N, P, dtype=d), low, high)
    _call(OPS.semimarkov_logz_forward, *args)
    g = torch.ones(B, dtype=torch.float64)
    table = torch.zeros(B, T + 1, N, dtype=torch.float64)
    _call(OPS.semimarkov_logz_backward, g, g.clone(), table, table.clone(), *args)


if __name__ == "__main__":
    assert OPS is not None, "the compiled kernels did not build"
    fuzz_chain()
    fuzz_semimarkov()
    print("kernels survived fuzzing")
