"""ONNX translations of structtorch's operators, for ``torch.onnx.export(..., dynamo=True)``.

:func:`translation_table` gives ``custom_translation_table=``: each operator as an onnxscript
function over ONNX ``Loop`` (the dynamic program's recursion over positions, the backtracking in
reverse), in float64 as the compiled kernels accumulate. Nothing imports this module at
``import structtorch``: onnxscript (the ``export`` extra) loads with it.
"""

from typing import TypeVar, Union

import torch
from onnxscript import BFLOAT16, DOUBLE, FLOAT, FLOAT16, INT64, script
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
    return table
