"""ONNX translations of structtorch's operators, for ``torch.onnx.export(..., dynamo=True)``.

:func:`translation_table` gives ``custom_translation_table=``. Each translated operator is a
traced Python function (the exporter calls it with symbolic values: it casts the potentials to
float64, as the compiled kernels accumulate, fills absent optional potentials and fixes the
static parts, such as a window chain's state order) around onnxscript functions that hold the
dynamic programs as ONNX ``Loop``s over positions (the recursion forward, the backtracking in
reverse). Ties are broken as the PyTorch reference breaks them, so paths are equal, not merely
as good.

Three rules of onnxscript (0.7) the script functions follow: a multi-output function annotates
its outputs ``TYPE[...]`` (a bare ``TYPE`` declares a scalar); a loop carries at most four
variables (beyond four, the converter can order the Loop's outputs unlike its inputs); and script
functions are called from the traced ones, never from inside a loop (the exporter registers only
the functions it sees called).

Nothing imports this module at ``import structtorch``: onnxscript (the ``export`` extra) loads
with it.
"""

import numpy as np
import torch
from onnx.numpy_helper import from_array as onnx_tensor
from onnxscript import BOOL, DOUBLE, INT64, script
from onnxscript import opset18 as op

# -- building blocks, traced: constants, float64, -inf-safe log-sum-exp


def _constant(value, dtype=np.float64):
    return op.Constant(value=onnx_tensor(np.array(value, dtype=dtype)))


def _double(x):
    return op.Cast(x, to=DOUBLE.dtype)


def _logsumexp(x, axis: int):
    """log sum exp of x over ``axis`` (kept), -inf-safe (-inf where every term is -inf)."""
    axes = _constant([axis], np.int64)
    peak = op.ReduceMax(x, axes, keepdims=1)
    peak = op.Where(op.IsInf(peak, detect_positive=0), _constant(0.0), peak)
    return op.Add(op.Log(op.ReduceSum(op.Exp(op.Sub(x, peak)), axes, keepdims=1)), peak)


def _nonempty(logz, lengths):
    """log Z (B,), 0 on the empty rows."""
    return op.Where(op.Greater(lengths, _constant(0, np.int64)), logz, _constant(0.0))


def _blocks(transitions):
    """Transitions (N, N) or per step (B, T - 1, N, N) as float64 blocks (1, 1, N, N) or (B, T, N, N)
    (a zero block after the last step, so that none is empty), read at step min(t - 1, last)."""
    w = _double(transitions)
    if len(transitions.shape) == 2:
        return op.Unsqueeze(w, _constant([0, 1], np.int64))
    shape = op.Concat(op.Shape(w, start=0, end=1), _constant([1], np.int64), op.Shape(w, start=2), axis=0)
    return op.Concat(w, op.Expand(_constant(0.0), shape), axis=1)


def _front_padded(x, S):
    """x (B, T, N) after S zeros along axis 1: (B, S + T, N)."""
    shape = op.Concat(op.Shape(x, start=0, end=1), S, op.Shape(x, start=2, end=3), axis=0)
    return op.Concat(op.Expand(_constant(0.0), shape), x, axis=1)


def _reversed(x, axis: int):
    return op.Slice(x, _constant([-1], np.int64), _constant([-(2**63) + 1], np.int64),
                    _constant([axis], np.int64), _constant([-1], np.int64))


# -- chains: the k-list Viterbi (the Viterbi is its 1-best list), forward and backward recursions


@script(default_opset=op)
def _chain_kbest(u, w, top, end, live, ends, moves, k: INT64) -> tuple[DOUBLE[...], INT64[...]]:
    """The k-list Viterbi of :func:`structtorch.chain._torch.kbest` on the inputs :func:`_kbest`
    prepares: the DP's k best scores (B, k) and labelings (B, k, T) (-1 beyond each length; rows and
    entries left to the caller). ONNX's TopK orders equal values by index, as the reference's
    stable sort of the candidates by code i * k + r."""
    T = op.Squeeze(op.Shape(u, start=1, end=2))
    B = op.Shape(u, start=0, end=1)
    N = op.Shape(u, start=2, end=3)
    last_block = op.Sub(op.Squeeze(op.Shape(w, start=1, end=2)), 1)
    codes = op.Concat(B, N, op.Mul(N, k), axis=0)
    flat = op.Concat(B, op.Mul(N, k), axis=0)
    pointers = op.Cast(op.ConstantOfShape(op.Concat(op.Constant(value_ints=[1]), flat, axis=0)), to=7)
    for i in range(T - 1):  # pointers[t]: into t from t - 1 (pointers[0] unused)
        step = i + 1
        cand = op.Add(op.Unsqueeze(top, [1]), op.Gather(w, op.Min(i, last_block), axis=1))  # (B, next, i, r)
        vals, came = op.TopK(op.Reshape(cand, codes), k, axis=2)  # by code i * k + r
        moved = op.Add(vals, op.Gather(u, step, axis=1))
        top = op.Where(op.Unsqueeze(op.Gather(live, step, axis=0), [2]), moved, top)
        pointers = op.Concat(pointers, op.Unsqueeze(op.Reshape(came, flat), [0]), axis=0)
    best, code = op.TopK(op.Reshape(op.Add(top, end), flat), k, axis=1)  # code = label * k + rank
    minus = op.Constant(value_int=-1)
    current = code
    paths = op.Cast(op.ConstantOfShape(op.Concat(op.Constant(value_ints=[0]), B, k, axis=0)), to=7)
    last = op.Sub(T, 1)
    for r in range(T):
        t = op.Sub(last, r)
        current = op.Where(op.Gather(ends, t, axis=0), code, current)
        label = op.Where(op.Gather(live, t, axis=0), op.Div(current, k), minus)
        paths = op.Concat(op.Unsqueeze(label, [0]), paths, axis=0)  # (T - t, B, k): positions t, ..., T - 1
        earlier = op.GatherElements(op.Gather(pointers, t, axis=0), current, axis=1)
        current = op.Where(op.Gather(moves, t, axis=0), earlier, current)
    return best, op.Transpose(paths, perm=[1, 2, 0])


def _kbest(unary, transitions, start, end, lengths, k: int) -> tuple:
    """The k best scores (B, k) float64 (0 then -inf on empty rows, -inf in missing entries) and
    labelings (B, k, T) int64 (-1 beyond each length and in missing entries).

    What the loops read at each step is laid out here, once: unary scores (B, T, N, 1), the
    transition blocks transposed to (B or 1, T or 1, next, previous, 1), the lists of position 0
    (B, N, k), and per position (T, B, 1) whether it is inside the row, its last, and inside after
    the first."""
    u = op.Unsqueeze(_double(unary), _constant([3], np.int64))
    w = op.Unsqueeze(op.Transpose(_blocks(transitions), perm=[0, 1, 3, 2]), _constant([4], np.int64))
    first = op.Add(op.Unsqueeze(_double(start), _constant([2], np.int64)),
                   op.Gather(u, _constant(0, np.int64), axis=1))  # (B, N, 1)
    shape = op.Concat(op.Shape(first, start=0, end=2), _constant([k - 1], np.int64), axis=0)
    top = op.Concat(first, op.Expand(_constant(float("-inf")), shape), axis=2)
    t = op.Unsqueeze(op.Range(_constant(0, np.int64), op.Squeeze(op.Shape(u, start=1, end=2)),
                              _constant(1, np.int64)), _constant([1], np.int64))  # (T, 1)
    after = _constant([2], np.int64)
    live = op.Unsqueeze(op.Less(t, lengths), after)  # (T, B, 1)
    ends = op.Unsqueeze(op.Equal(t, op.Sub(lengths, _constant(1, np.int64))), after)
    moves = op.And(live, op.Unsqueeze(op.Greater(t, _constant(0, np.int64)), after))
    best, paths = _chain_kbest(u, w, top, op.Unsqueeze(_double(end), after), live, ends, moves,
                               _constant([k], np.int64))
    is_first = _constant(np.arange(k) == 0, np.bool_)
    empty = op.Unsqueeze(op.Equal(lengths, _constant(0, np.int64)), _constant([1], np.int64))
    valid = op.Or(op.And(empty, is_first), op.And(op.Not(empty), op.Not(op.IsInf(best, detect_positive=0))))
    ninf = _constant(float("-inf"))
    scores = op.Where(valid, op.Where(empty, op.Where(is_first, _constant(0.0), ninf), best), ninf)
    return scores, op.Where(op.Unsqueeze(valid, _constant([2], np.int64)), paths, _constant(-1, np.int64))


def chain_kbest(unary, transitions, start, end, lengths, k: int, backend: str):
    """structtorch::chain_kbest: see :func:`_kbest`."""
    return _kbest(unary, transitions, start, end, lengths, k)


def chain_viterbi(unary, transitions, start, end, lengths, backend: str):
    """structtorch::chain_viterbi: (score (B,) float64, path (B, T) int64), -1 beyond each length
    and on infeasible rows, score 0 on empty rows: the 1-best list."""
    scores, paths = _kbest(unary, transitions, start, end, lengths, 1)
    return op.Squeeze(scores, _constant([1], np.int64)), op.Squeeze(paths, _constant([1], np.int64))


@script(default_opset=op)
def _chain_alphas(u, w, alpha, lengths: INT64) -> DOUBLE[...]:
    """The forward recursion of a chain in log space: alpha (T, B, N) from the unary scores
    u (B, T, N), transition blocks w (see :func:`_blocks`) and alpha at position 0 (B, N), kept
    beyond each length."""
    one = op.Constant(value_ints=[1])
    last_block = op.Sub(op.Squeeze(op.Shape(w, start=1, end=2)), 1)
    zero = op.Cast(op.Constant(value_float=0.0), to=11)
    alphas = op.Unsqueeze(alpha, [0])
    for i in range(op.Sub(op.Squeeze(op.Shape(u, start=1, end=2)), 1)):
        step = i + 1
        x = op.Add(op.Unsqueeze(alpha, [2]), op.Gather(w, op.Min(i, last_block), axis=1))  # over the previous
        # labels, -inf-safe:
        peak = op.ReduceMax(x, one, keepdims=1)
        peak = op.Where(op.IsInf(peak, detect_positive=0), zero, peak)
        total = op.Add(op.Log(op.ReduceSum(op.Exp(op.Sub(x, peak)), one, keepdims=1)), peak)
        moved = op.Add(op.Squeeze(total, one), op.Gather(u, step, axis=1))
        alpha = op.Where(op.Unsqueeze(op.Less(step, lengths), [1]), moved, alpha)
        alphas = op.Concat(alphas, op.Unsqueeze(alpha, [0]), axis=0)
    return alphas


@script(default_opset=op)
def _chain_node_marginals(u, w, e, alphas, logz, lengths: INT64) -> DOUBLE[...]:
    """Node marginals (T, B, N) by the backward recursion from the forward one's ``alphas``
    (T, B, N) and log Z (B, 1); 0 beyond each length."""
    two = op.Constant(value_ints=[2])
    zero = op.Cast(op.Constant(value_float=0.0), to=11)
    T = op.Squeeze(op.Shape(u, start=1, end=2))
    last_block = op.Sub(op.Squeeze(op.Shape(w, start=1, end=2)), 1)
    beta = e
    marginals = op.ConstantOfShape(op.Concat(op.Constant(value_ints=[0]), op.Shape(e), axis=0))
    marginals = op.Cast(marginals, to=11)  # (0, B, N)
    last = op.Sub(T, 1)
    for k in range(T):
        t = op.Sub(last, k)
        following = op.Add(op.Gather(u, op.Min(op.Add(t, 1), last), axis=1), beta)  # (B, next)
        block = op.Gather(w, op.Min(t, last_block), axis=1)  # from t to t + 1
        x = op.Add(block, op.Unsqueeze(following, [1]))  # (B, previous, next): over the next labels
        peak = op.ReduceMax(x, two, keepdims=1)
        peak = op.Where(op.IsInf(peak, detect_positive=0), zero, peak)
        total = op.Add(op.Log(op.ReduceSum(op.Exp(op.Sub(x, peak)), two, keepdims=1)), peak)
        ends_here = op.Unsqueeze(op.GreaterOrEqual(t, op.Sub(lengths, 1)), [1])
        beta = op.Where(ends_here, e, op.Squeeze(total, two))
        inside = op.Unsqueeze(op.Less(t, lengths), [1])
        value = op.Exp(op.Sub(op.Add(op.Gather(alphas, t, axis=0), beta), logz))
        kept = op.Unsqueeze(op.Where(inside, value, zero), [0])
        marginals = op.Concat(kept, marginals, axis=0)  # (T - t, B, N): positions t, ..., T - 1
    return marginals


def _chain_forward(unary, transitions, start, end, lengths) -> tuple:
    """Of a chain's potentials: u (B, T, N), blocks w (:func:`_blocks`) and end (B, N) in float64, the forward
    recursion's alphas (T, B, N) and log Z (B, 1) (the DP's value on empty rows: masked by the
    callers)."""
    u, w, e = _double(unary), _blocks(transitions), _double(end)
    alpha = op.Add(_double(start), op.Gather(u, _constant(0, np.int64), axis=1))
    alphas = _chain_alphas(u, w, alpha, lengths)
    last = op.Gather(alphas, op.Sub(op.Squeeze(op.Shape(u, start=1, end=2)), _constant(1, np.int64)), axis=0)
    return u, w, e, alphas, _logsumexp(op.Add(last, e), 1)


def chain_log_partition(unary, transitions, start, end, lengths, backend: str):
    """structtorch::chain_log_partition for inference: log Z (B,) float64 (0 on empty rows), and
    an empty sequence for the saved state (which only the backward pass reads)."""
    logz = op.Squeeze(_chain_forward(unary, transitions, start, end, lengths)[-1], _constant([1], np.int64))
    return _nonempty(logz, lengths), op.SequenceEmpty(dtype=DOUBLE.dtype)


def chain_marginals(unary, transitions, start, end, lengths, backend: str):
    """structtorch::chain_marginals: node marginals (B, T, N) in the dtype of ``unary``, by the
    forward and backward recursions in log space (float64), 0 beyond each length."""
    u, w, e, alphas, logz = _chain_forward(unary, transitions, start, end, lengths)
    marginals = _chain_node_marginals(u, w, e, alphas, logz, lengths)
    return op.CastLike(op.Transpose(marginals, perm=[1, 0, 2]), unary)


# -- window chains (any order)


@script(default_opset=op)
def _window_viterbi(flat, lengths: INT64, newest_first: INT64) -> tuple[DOUBLE[...], INT64[...]]:
    """:func:`structtorch.chain._torch.window_dp` on flat float64 window scores (B, T, S, N),
    S = N^order, states ordered newest label first in ``newest_first`` (S,): the best score (B,)
    (0 on empty rows) and labeling (B, T) (-1 beyond each length and on infeasible rows)."""
    B = op.Shape(flat, start=0, end=1)
    T = op.Squeeze(op.Shape(flat, start=1, end=2))
    S = op.Shape(flat, start=2, end=3)
    N = op.Shape(flat, start=3, end=4)
    rest = op.Div(S, N)  # the states of the younger labels
    zero = op.Constant(value_int=0)
    minus = op.Constant(value_int=-1)
    start = op.Gather(op.Gather(flat, zero, axis=1), zero, axis=1)  # (B, N): labels before 0 read as 0
    ninf = op.Cast(op.Constant(value_float=float("-inf")), to=11)
    never = op.Expand(ninf, op.Concat(B, op.Sub(S, N), axis=0))
    alpha = op.Concat(start, never, axis=1)  # (B, S), oldest label most significant
    pointers = op.Cast(op.ConstantOfShape(op.Concat(op.Constant(value_ints=[0]), B, S, axis=0)), to=7)
    for i in range(T - 1):
        step = i + 1
        cand = op.Add(op.Unsqueeze(alpha, [2]), op.Gather(flat, step, axis=1))  # (B, S, next)
        cand = op.Reshape(cand, op.Concat(B, N, rest, N, axis=0))  # (B, oldest, younger, next)
        moved = op.Reshape(op.ReduceMax(cand, [1], keepdims=0), op.Concat(B, S, axis=0))
        alpha = op.Where(op.Unsqueeze(op.Less(step, lengths), [1]), moved, alpha)
        oldest = op.Reshape(op.ArgMax(cand, axis=1, keepdims=0), op.Concat(B, S, axis=0))
        pointers = op.Concat(pointers, op.Unsqueeze(oldest, [0]), axis=0)
    final = op.Gather(newest_first, op.ArgMax(op.Gather(alpha, newest_first, axis=1), axis=1, keepdims=0))
    best = op.Squeeze(op.GatherElements(alpha, op.Unsqueeze(final, [1]), axis=1), [1])
    current = final
    path = op.Cast(op.ConstantOfShape(op.Concat(op.Constant(value_ints=[0]), B, axis=0)), to=7)
    for r in range(T):
        t = T - 1 - r
        current = op.Where(op.Equal(t, op.Sub(lengths, 1)), final, current)
        inside = op.Less(t, lengths)
        label = op.Unsqueeze(op.Where(inside, op.Mod(current, N), minus), [0])
        path = op.Concat(label, path, axis=0)  # (T - t, B): positions t, ..., T - 1
        back = op.Gather(pointers, op.Max(op.Sub(t, 1), zero), axis=0)  # (B, S): into t from t - 1
        oldest = op.Squeeze(op.GatherElements(back, op.Unsqueeze(current, [1]), axis=1), [1])
        earlier = op.Add(op.Mul(oldest, rest), op.Div(current, N))
        current = op.Where(op.And(inside, op.Greater(t, zero)), earlier, current)
    path = op.Transpose(path, perm=[1, 0])
    best = op.Where(op.Greater(lengths, zero), best, op.Cast(zero, to=11))
    return best, op.Where(op.Unsqueeze(op.IsInf(best, detect_positive=0), [1]), minus, path)


def chain_window_viterbi(scores, lengths, backend: str):
    """structtorch::chain_window_viterbi: the best score (B,) float64 and labeling (B, T) int64 of
    window scores (B, T) + (N,) * (l + 1) (order 0 solved as order 1, as the reference does)."""
    order, N = len(scores.shape) - 3, scores.shape[2]
    if not isinstance(N, int):
        raise NotImplementedError("structtorch::chain_window_viterbi translates with a static number of "
                                  "labels")
    flat = _double(scores)
    if order == 0:
        shape = op.Concat(op.Shape(flat, start=0, end=3), _constant([N], np.int64), axis=0)
        flat = op.Expand(op.Unsqueeze(flat, _constant([2], np.int64)), shape)
    else:
        flat = op.Reshape(flat, op.Concat(op.Shape(flat, start=0, end=2), _constant([N**order, N], np.int64),
                                          axis=0))
    order = max(order, 1)
    newest_first = np.arange(N**order).reshape((N,) * order).transpose(*reversed(range(order))).reshape(-1)
    return _window_viterbi(flat, lengths, _constant(newest_first, np.int64))


# -- semi-Markov chains


def _semimarkov_alphas(content, length, boundary, segment, transitions, start, end, lengths, tracks,
                       ordinates, low: float, high: float, summed: bool) -> tuple:
    """The semi-Markov forward recursion over the operators' inputs, max-plus or log-sum-exp
    (``summed``): alpha[e] + end at each row's length, ``final`` (B, N), and the pointers of
    :func:`_semimarkov_forward` as (B, (T + 1) N).

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
        _front_padded(_double(tracks), S), *plif, _double(start), _blocks(transitions),
        _constant(summed, np.bool_))
    flat = op.Concat(op.Shape(content, start=0, end=1), _constant([-1], np.int64), axis=0)
    alphas, best_len, came_from = (op.Reshape(op.Transpose(x, perm=[1, 0, 2]), flat)  # (B, (T + 1) N)
                                   for x in (alphas, best_len, came_from))
    N = op.Shape(content, start=2, end=3)
    at_length = op.Add(op.Mul(op.Unsqueeze(lengths, [1]), N),
                       op.Range(_constant(0, np.int64), op.Squeeze(N), _constant(1, np.int64)))
    return op.Add(op.GatherElements(alphas, at_length, axis=1), _double(end)), best_len, came_from


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
                        low, high, scale, start, transitions, summed: BOOL) -> tuple[DOUBLE[...], INT64[...],
                                                                                      INT64[...]]:
    """Max-plus (log-sum-exp where ``summed``) over segment ends e = 1..T of the inputs
    :func:`_semimarkov_alphas` prepares: alpha[e] (T + 1, B, N), and under max-plus the best last
    segment's length and the previous label (T + 1, B, N)."""
    zero = op.Cast(op.Constant(value_float=0.0), to=11)
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
    last_block = op.Sub(op.Squeeze(op.Shape(transitions, start=1, end=2)), 1)
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
        block = op.Gather(transitions, op.Min(i, last_block), axis=1)  # into a segment starting at i + 1
        if summed:  # the log semiring (-inf-safe log sum exp); no pointers
            peak = op.ReduceMax(terms, one, keepdims=1)
            peak = op.Where(op.IsInf(peak, detect_positive=0), zero, peak)
            alpha = op.Add(op.Log(op.ReduceSum(op.Exp(op.Sub(terms, peak)), one, keepdims=1)), peak)
            alpha = op.Squeeze(alpha, one)
            cand = op.Add(op.Unsqueeze(alpha, [2]), block)
            peak = op.ReduceMax(cand, one, keepdims=1)
            peak = op.Where(op.IsInf(peak, detect_positive=0), zero, peak)
            into = op.Add(op.Log(op.ReduceSum(op.Exp(op.Sub(cand, peak)), one, keepdims=1)), peak)
            into = op.Squeeze(into, one)
            shortest = op.Cast(op.Mul(alpha, zero), to=7)
            back = shortest
        else:
            alpha = op.ReduceMax(terms, one, keepdims=0)
            shortest = op.Sub(S, op.ArgMax(terms, axis=1, keepdims=0, select_last_index=1))
            cand = op.Add(op.Unsqueeze(alpha, [2]), block)
            into = op.ReduceMax(cand, one, keepdims=0)
            back = op.ArgMax(cand, axis=1, keepdims=0)
        alphas = op.Concat(alphas, op.Unsqueeze(alpha, [0]), axis=0)
        incoming = op.Concat(incoming, op.Unsqueeze(into, [0]), axis=0)
        best_len = op.Concat(best_len, op.Unsqueeze(shortest, [0]), axis=0)
        came_from = op.Concat(came_from, op.Unsqueeze(back, [0]), axis=0)
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


def semimarkov_viterbi(content, length, boundary, segment, transitions, start, end, lengths, tracks,
                       ordinates, low: float, high: float, backend: str):
    """structtorch::semimarkov_viterbi: (best (B,) float64, labels (B, T) int64, starts (B, T) bool),
    labels -1 and starts False beyond each length and on infeasible rows, best 0 on empty rows."""
    final, best_len, came_from = _semimarkov_alphas(content, length, boundary, segment, transitions, start,
                                                    end, lengths, tracks, ordinates, low, high, False)
    top = op.ReduceMax(final, _constant([1], np.int64), keepdims=0)
    best = op.Where(op.Greater(lengths, _constant(0, np.int64)), top, _constant(0.0))
    stop = op.Where(op.IsInf(top, detect_positive=0), _constant(0, np.int64), lengths)
    labels, starts = _semimarkov_backtrack(best_len, came_from, stop, op.ArgMax(final, axis=1, keepdims=0),
                                           op.Shape(content, start=1, end=2))
    return best, labels, starts


def semimarkov_log_partition(content, length, boundary, segment, transitions, start, end, lengths, tracks,
                             ordinates, low: float, high: float, backend: str):
    """structtorch::semimarkov_log_partition for inference: log Z (B,) float64 (0 on empty rows),
    and an empty sequence for the saved state (which only the backward pass reads)."""
    final = _semimarkov_alphas(content, length, boundary, segment, transitions, start, end, lengths, tracks,
                               ordinates, low, high, True)[0]
    logz = op.Squeeze(_logsumexp(final, 1), _constant([1], np.int64))
    return _nonempty(logz, lengths), op.SequenceEmpty(dtype=DOUBLE.dtype)


# -- the table


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
    table[torch.ops.structtorch.chain_kbest.default] = chain_kbest
    table[torch.ops.structtorch.chain_window_viterbi.default] = chain_window_viterbi
    table[torch.ops.structtorch.chain_marginals.default] = chain_marginals
    table[torch.ops.structtorch.chain_log_partition.default] = chain_log_partition
    table[torch.ops.structtorch.semimarkov_log_partition.default] = semimarkov_log_partition
    table[torch.ops.structtorch.semimarkov_viterbi.default] = semimarkov_viterbi
    return table
