"""ONNX translations of structtorch's operators, for ``torch.onnx.export(..., dynamo=True)``.

:func:`translation_table` gives ``custom_translation_table=``: each operator as an onnxscript
function over ONNX ``Loop`` (the dynamic program's recursion over positions, the backtracking in
reverse), in float64 as the compiled kernels accumulate. Nothing imports this module at
``import structtorch``: onnxscript (the ``export`` extra) loads with it.
"""

from typing import TypeVar, Union

import numpy as np
import torch
from onnx.numpy_helper import from_array as onnx_tensor
from onnxscript import BFLOAT16, BOOL, DOUBLE, FLOAT, FLOAT16, INT64, script
from onnxscript import opset18 as op

TFloat = TypeVar("TFloat", bound=Union[FLOAT16, FLOAT, DOUBLE, BFLOAT16])  # noqa: UP007 - onnxscript reads it

__all__ = ["translation_table"]


@script(default_opset=op)
def chain_viterbi(unary, transitions, start, end, lengths: INT64, backend: str) -> tuple[DOUBLE, INT64]:
    """structtorch::chain_viterbi: (score (B,) float64, path (B, T) int64), -1 beyond each
    length and on infeasible rows, score 0 on empty rows."""
    u = op.Cast(unary, to=11)
    w = op.Unsqueeze(op.Cast(transitions, to=11), [0])
    T = op.Squeeze(op.Shape(unary, start=1, end=2))
    B = op.Shape(unary, start=0, end=1)
    N = op.Shape(unary, start=2, end=3)
    alpha = op.Add(op.Cast(start, to=11), op.Gather(u, op.Constant(value_int=0), axis=1))
    pointers = op.Cast(op.ConstantOfShape(op.Concat(op.Constant(value_ints=[0]), B, N, axis=0)), to=7)
    for i in range(T - 1):
        step = i + 1
        scores = op.Add(op.Unsqueeze(alpha, [2]), w)  # (B, previous, next)
        moved = op.Add(op.ReduceMax(scores, [1], keepdims=0), op.Gather(u, step, axis=1))
        alpha = op.Where(op.Unsqueeze(op.Less(step, lengths), [1]), moved, alpha)
        pointers = op.Concat(pointers, op.Unsqueeze(op.ArgMax(scores, axis=1, keepdims=0), [0]), axis=0)
    final = op.Add(alpha, op.Cast(end, to=11))
    score = op.ReduceMax(final, [1], keepdims=0)
    last = op.ArgMax(final, axis=1, keepdims=0)
    minus = op.Constant(value_int=-1)
    zero = op.Constant(value_int=0)
    current = last
    reversed_path = op.Cast(op.ConstantOfShape(op.Concat(op.Constant(value_ints=[0]), B, axis=0)), to=7)
    for k in range(T):
        t = T - 1 - k
        label = op.Where(op.Equal(t, op.Sub(lengths, 1)), last, current)
        kept = op.Where(op.Less(t, lengths), label, minus)
        reversed_path = op.Concat(reversed_path, op.Unsqueeze(kept, [0]), axis=0)
        back = op.Gather(pointers, op.Max(op.Sub(t, 1), zero), axis=0)  # (B, N): into t from t - 1
        current = op.Squeeze(op.GatherElements(back, op.Unsqueeze(op.Max(label, zero), [1]), axis=1), [1])
    path = op.Transpose(op.Slice(reversed_path, op.Constant(value_ints=[-1]),
                                 op.Constant(value_ints=[-9223372036854775807]), op.Constant(value_ints=[0]),
                                 op.Constant(value_ints=[-1])), perm=[1, 0])
    feasible = op.Not(op.IsInf(score, detect_positive=0))
    empty = op.Equal(lengths, zero)
    path = op.Where(op.Unsqueeze(op.And(feasible, op.Not(empty)), [1]), path, minus)
    score = op.Where(empty, op.Cast(zero, to=11), score)
    return score, path




@script(default_opset=op)
def chain_marginals(unary: TFloat, transitions, start, end, lengths: INT64, backend: str) -> TFloat:
    """structtorch::chain_marginals: node marginals (B, T, N) in the dtype of ``unary``, by the
    forward and backward recursions in log space (float64), 0 beyond each length."""
    u = op.Cast(unary, to=11)
    w = op.Unsqueeze(op.Cast(transitions, to=11), [0])  # (1, previous, next)
    e = op.Cast(end, to=11)
    one = op.Constant(value_ints=[1])
    two = op.Constant(value_ints=[2])
    zero = op.CastLike(op.Constant(value_float=0.0), u)
    T = op.Squeeze(op.Shape(unary, start=1, end=2))
    alpha = op.Add(op.Cast(start, to=11), op.Gather(u, op.Constant(value_int=0), axis=1))
    alphas = op.Unsqueeze(alpha, [0])
    for i in range(T - 1):
        step = i + 1
        x = op.Add(op.Unsqueeze(alpha, [2]), w)  # log sum exp over the previous labels, -inf-safe:
        peak = op.ReduceMax(x, one, keepdims=1)
        peak = op.Where(op.IsInf(peak, detect_positive=0), zero, peak)
        total = op.Add(op.Log(op.ReduceSum(op.Exp(op.Sub(x, peak)), one, keepdims=1)), peak)
        moved = op.Add(op.Squeeze(total, one), op.Gather(u, step, axis=1))
        alpha = op.Where(op.Unsqueeze(op.Less(step, lengths), [1]), moved, alpha)
        alphas = op.Concat(alphas, op.Unsqueeze(alpha, [0]), axis=0)
    final = op.Add(alpha, e)
    peak = op.ReduceMax(final, one, keepdims=1)
    peak = op.Where(op.IsInf(peak, detect_positive=0), zero, peak)
    logz = op.Add(op.Log(op.ReduceSum(op.Exp(op.Sub(final, peak)), one, keepdims=1)), peak)  # (B, 1)
    beta = e
    reversed_marginals = op.Unsqueeze(op.Mul(alpha, zero), [0])  # a (1, B, N) placeholder, dropped
    last = op.Sub(T, 1)
    for k in range(T):
        t = op.Sub(last, k)
        following = op.Add(op.Gather(u, op.Min(op.Add(t, 1), last), axis=1), beta)  # (B, next)
        x = op.Add(w, op.Unsqueeze(following, [1]))  # (B, previous, next): over the next labels
        peak = op.ReduceMax(x, two, keepdims=1)
        peak = op.Where(op.IsInf(peak, detect_positive=0), zero, peak)
        total = op.Add(op.Log(op.ReduceSum(op.Exp(op.Sub(x, peak)), two, keepdims=1)), peak)
        recursed = op.Squeeze(total, two)
        ends_here = op.Unsqueeze(op.GreaterOrEqual(t, op.Sub(lengths, 1)), [1])
        beta = op.Where(ends_here, e, recursed)
        inside = op.Unsqueeze(op.Less(t, lengths), [1])
        value = op.Exp(op.Sub(op.Add(op.Gather(alphas, t, axis=0), beta), logz))
        kept = op.Unsqueeze(op.Where(inside, value, zero), [0])
        reversed_marginals = op.Concat(reversed_marginals, kept, axis=0)
    ordered = op.Slice(reversed_marginals, op.Constant(value_ints=[-1]), op.Constant(value_ints=[0]),
                       op.Constant(value_ints=[0]), op.Constant(value_ints=[-1]))  # drops the placeholder
    return op.CastLike(op.Transpose(ordered, perm=[1, 0, 2]), unary)


def _constant(value, dtype=np.float64):
    return op.Constant(value=onnx_tensor(np.array(value, dtype=dtype)))


def _double(x):
    return op.Cast(x, to=DOUBLE.dtype)


def _front_padded(x, S):
    """x (B, T, N) after S zeros along axis 1: (B, S + T, N)."""
    shape = op.Concat(op.Shape(x, start=0, end=1), S, op.Shape(x, start=2, end=3), axis=0)
    return op.Concat(op.Expand(_constant(0.0), shape), x, axis=1)


def _reversed(x, axis: int):
    return op.Slice(x, _constant([-1], np.int64), _constant([-(2**63) + 1], np.int64),
                    _constant([axis], np.int64), _constant([-1], np.int64))


def semimarkov_viterbi(content, length, boundary, segment, transitions, start, end, lengths, tracks,
                       ordinates, low: float, high: float, backend: str):
    """structtorch::semimarkov_viterbi: (best (B,) float64, labels (B, T) int64, starts (B, T) bool),
    labels -1 and starts False beyond each length and on infeasible rows, best 0 on empty rows.

    The segments ending at e are read in the order d = S, ..., 1 (windows of S positions before
    e, padded with S zeros in front), so that the last maximal one is the shortest (the reference's
    tie). An absent segment score or segment PLiF is zeros of size 1, read at clamped positions."""
    S = op.Shape(length, start=1, end=2)  # (1,): the longest segment, clamped to T
    u = _double(content)
    forbidden = op.IsInf(u, detect_positive=0)
    if segment is None:
        segment = _constant(np.zeros((1, 1, 1, 1)))
    if tracks is None:
        tracks, ordinates = _constant(np.zeros((1, 1, 1))), _constant(np.zeros((1, 2)))
    plif = _plif_constants(_double(ordinates), low, high)
    alphas, best_len, came_from = _semimarkov_forward(
        _front_padded(op.Where(forbidden, _constant(0.0), u), S), _front_padded(_double(forbidden), S),
        _reversed(_double(length), 1), _double(boundary), _reversed(_double(segment), 2),
        _front_padded(_double(tracks), S), *plif, _double(start), _double(transitions))
    flat = op.Concat(op.Shape(content, start=0, end=1), _constant([-1], np.int64), axis=0)
    alphas, best_len, came_from = (op.Reshape(op.Transpose(x, perm=[1, 0, 2]), flat)  # (B, (T + 1) N)
                                   for x in (alphas, best_len, came_from))
    N = op.Shape(content, start=2, end=3)
    at_length = op.Add(op.Mul(op.Unsqueeze(lengths, [1]), N),
                       op.Range(_constant(0, np.int64), op.Squeeze(N), _constant(1, np.int64)))
    final = op.Add(op.GatherElements(alphas, at_length, axis=1), _double(end))
    top = op.ReduceMax(final, _constant([1], np.int64), keepdims=0)
    best = op.Where(op.Greater(lengths, _constant(0, np.int64)), top, _constant(0.0))
    stop = op.Where(op.IsInf(top, detect_positive=0), _constant(0, np.int64), lengths)
    labels, starts = _semimarkov_backtrack(best_len, came_from, stop, op.ArgMax(final, axis=1, keepdims=0),
                                           op.Shape(content, start=1, end=2))
    return best, labels, starts


def _plif_constants(ordinates, low: float, high: float) -> tuple:
    """The segment PLiF's flattened ordinates (K P,), row offsets k P (K,), P - 2, the support
    (low, high) and the slope (P - 1) / (high - low), as :func:`structtorch.plif_interpolate`
    reads them."""
    P = op.Shape(ordinates, start=1, end=2)
    K = op.Squeeze(op.Shape(ordinates, start=0, end=1))
    rows = op.Mul(op.Range(_constant(0, np.int64), K, _constant(1, np.int64)), P)
    last = _double(op.Sub(P, _constant([2], np.int64)))
    low, high = _constant(low), _constant(high)
    scale = op.Div(_double(op.Sub(P, _constant([1], np.int64))), op.Sub(high, low))
    return op.Reshape(ordinates, _constant([-1], np.int64)), rows, last, low, high, scale


@script(default_opset=op)
def _semimarkov_forward(content, forbidden, length, boundary, segment, tracks, ordinates, rows: INT64, last,
                        low, high, scale, start, transitions) -> tuple[DOUBLE[...], INT64[...], INT64[...]]:
    """Max-plus over segment ends e = 1..T of the inputs :func:`semimarkov_viterbi` prepares:
    alpha[e] (T + 1, B, N), the best last segment's length and the previous label (T + 1, B, N)."""
    S = op.Shape(length, start=1, end=2)
    B = op.Shape(content, start=0, end=1)
    N = op.Shape(content, start=2, end=3)
    T = op.Sub(op.Squeeze(op.Shape(content, start=1, end=2)), op.Squeeze(S))
    one = op.Constant(value_ints=[1])
    ninf = op.Cast(op.Constant(value_float=float("-inf")), to=11)
    d = op.Range(op.Squeeze(S), op.Constant(value_int=0), op.Constant(value_int=-1))
    d = op.Unsqueeze(op.Cast(d, to=11), [0, 2])  # the length of window entry j: S - j
    last_segment = op.Squeeze(op.Sub(op.Shape(segment, start=1, end=2), one))
    last_track = op.Sub(op.Shape(tracks, start=1, end=2), S)
    alphas = op.Unsqueeze(op.Expand(ninf, op.Concat(B, N, axis=0)), [0])
    incoming = op.Concat(op.Expand(ninf, op.Concat(S, B, N, axis=0)), op.Unsqueeze(start, [0]),
                         axis=0)  # (S + 1, B, N): -inf before position 0
    best_len = op.Cast(op.Expand(op.Constant(value_int=0), op.Concat(one, B, N, axis=0)), to=7)
    came_from = best_len
    for i in range(T):  # at most four carried variables (see _semimarkov_backtrack)
        at = op.Unsqueeze(op.Add(i, 1), [0])
        terms = op.Add(op.CumSum(op.Slice(content, at, op.Add(at, S), one), one, reverse=1), length)
        terms = op.Add(terms, op.Gather(boundary, op.Unsqueeze(i, [0]), axis=1))
        terms = op.Add(terms, op.Gather(segment, op.Min(i, last_segment), axis=1))
        track_at = op.Min(at, last_track)
        means = op.Div(op.CumSum(op.Slice(tracks, track_at, op.Add(track_at, S), one), one, reverse=1), d)
        x = op.Mul(op.Sub(op.Clip(means, low, high), low), scale)  # the segment PLiF
        left = op.Min(op.Floor(x), last)
        index = op.Add(op.Cast(left, to=7), rows)
        y0 = op.Gather(ordinates, index)
        y1 = op.Gather(ordinates, op.Add(index, 1))
        terms = op.Add(terms, op.Add(y0, op.Mul(op.Sub(x, left), op.Sub(y1, y0))))
        blocked = op.Greater(op.CumSum(op.Slice(forbidden, at, op.Add(at, S), one), one, reverse=1),
                             op.Cast(op.Constant(value_float=0.0), to=11))
        before = op.Transpose(op.Slice(incoming, op.Neg(S), op.Constant(value_ints=[9223372036854775807]),
                                       op.Constant(value_ints=[0])), perm=[1, 0, 2])
        terms = op.Add(op.Where(blocked, ninf, terms), before)
        alpha = op.ReduceMax(terms, one, keepdims=0)
        chosen = op.ArgMax(terms, axis=1, keepdims=0, select_last_index=1)
        cand = op.Add(op.Unsqueeze(alpha, [2]), op.Unsqueeze(transitions, [0]))
        alphas = op.Concat(alphas, op.Unsqueeze(alpha, [0]), axis=0)
        incoming = op.Concat(incoming, op.Unsqueeze(op.ReduceMax(cand, one, keepdims=0), [0]), axis=0)
        best_len = op.Concat(best_len, op.Unsqueeze(op.Sub(S, chosen), [0]), axis=0)
        came_from = op.Concat(came_from, op.Unsqueeze(op.ArgMax(cand, axis=1, keepdims=0), [0]), axis=0)
    return alphas, best_len, came_from


@script(default_opset=op)
def _semimarkov_backtrack(best_len: INT64, came_from: INT64, stop: INT64, label: INT64,
                          T: INT64) -> tuple[INT64[...], BOOL[...]]:
    """Labels (B, T) and segment starts (B, T) from the ends ``stop`` (B,) (0: nothing) and last
    labels (B,), one segment per step, its label written over [s, e). At most four carried
    variables: onnxscript 0.7 orders a Loop's outputs by a copy of the set of them, whose order
    differs from the set's own beyond four names."""
    zero = op.Constant(value_int=0)
    N = op.Div(op.Shape(best_len, start=1, end=2), op.Add(T, 1))
    steps = op.Squeeze(T)
    positions = op.Unsqueeze(op.Range(zero, steps, op.Constant(value_int=1)), [0])
    shape = op.Concat(op.Shape(stop), T, axis=0)
    labels = op.Cast(op.Expand(op.Constant(value_int=-1), shape), to=7)
    starts = op.Cast(op.Expand(zero, shape), to=9)
    for _ in range(steps):
        active = op.Greater(stop, zero)
        end_at = op.Unsqueeze(stop, [1])
        at = op.Add(op.Mul(end_at, N), op.Unsqueeze(label, [1]))
        s = op.Sub(end_at, op.GatherElements(best_len, at, axis=1))
        on = op.Unsqueeze(active, [1])
        inside = op.And(op.GreaterOrEqual(positions, s), op.Less(positions, end_at))
        labels = op.Where(op.And(on, inside), op.Unsqueeze(label, [1]), labels)
        starts = op.Or(starts, op.And(on, op.Equal(positions, s)))
        back = op.Add(op.Mul(op.Max(s, zero), N), op.Unsqueeze(label, [1]))
        label = op.Where(active, op.Squeeze(op.GatherElements(came_from, back, axis=1), [1]), label)
        stop = op.Where(active, op.Squeeze(s, [1]), stop)
    return labels, starts


TRAINING = ("nll", "backward", "loss_augmented", "hamming")  # operators of training only


def _refusal(name: str):
    """A translation that fails the export naming the operator and what to export instead."""
    if any(word in name for word in TRAINING):
        why = ("serves training (a loss, a gradient or a loss-augmented search): export the decoder "
               "(viterbi, LinearChainCRF.decode) or the marginals instead")
    else:
        why = ("has no ONNX translation yet: serve the model with torch.export.export and an AOTInductor "
               "package, which take every operator, or export viterbi / marginals, which translate")

    def refuse(*args, **kwargs):
        raise NotImplementedError(f"structtorch::{name} {why}")

    return refuse


def translation_table() -> dict:
    """{operator overload: translation} for ``torch.onnx.export(..., dynamo=True,
    custom_translation_table=translation_table())``: onnxscript functions where there is one, and
    for every other structtorch operator a function that fails the export with an error naming
    it and saying what to export instead."""
    from . import chain, lossaug, semimarkov  # noqa: F401 - their operators, registered on import
    from ._library import OPERATORS

    table = {getattr(torch.ops.structtorch, name).default: _refusal(name) for name in OPERATORS}
    table[torch.ops.structtorch.chain_viterbi.default] = chain_viterbi
    table[torch.ops.structtorch.chain_marginals.default] = chain_marginals
    table[torch.ops.structtorch.semimarkov_viterbi.default] = semimarkov_viterbi
    return table
