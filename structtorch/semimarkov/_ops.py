"""The semi-Markov kernels as PyTorch operators, as ``chain/_ops.py`` does for chains: one schema
per dynamic program (``structtorch::semimarkov_viterbi``, ``structtorch::semimarkov_log_partition``
and its backward), one implementation per backend named by the caller, fake implementations for
``torch.compile``, and :class:`LogPartition`, an autograd Function with ``setup_context`` (so
``torch.func.grad`` works; double backward and transforms differentiate the PyTorch reference).

Optional potentials (``segment_scores``, the segment PLiF's tracks and ordinates) are passed as
``None``; the PLiF support ``low``/``high`` as floats.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .. import _backend
from .._library import apply, operator, save_for_backward
from .._numerics import NEG_INF, grads_through
from . import _torch
from .layout import SemiMarkov, semimarkov_score
from .plif import SegmentPLiF

Opt = Tensor | None


def _module(backend: str):
    """The semi-Markov kernel module for ``backend`` (None for "torch"), see
    :func:`structtorch._backend.kernel_module`."""
    return _backend.kernel_module(backend, __package__)


def backend_of(sm: SemiMarkov) -> str:
    """:func:`structtorch._backend.backend_for` with the semi-Markov veto: "torch" for empty
    sequences and for transitions per row and position (the kernels take (N, N) ones)."""
    if sm.shape[1] == 0 or sm.per_position:  # per-position transitions: the PyTorch references
        return "torch"
    return _backend.backend_for(sm.content)


OPTIONAL = {"score": ("triton",), "kbest": ("triton",), "sample": ("triton",), "loss_augmented": ("triton",)}
"""The backends whose kernel modules have each optional algorithm (elsewhere the PyTorch code
runs); a name, not a module lookup, so that ``torch.compile`` traces the choice."""


def has_kernel(sm: SemiMarkov, name: str) -> bool:
    """Whether the backend that runs ``sm`` has a kernel for the optional algorithm ``name``."""
    return backend_of(sm) in OPTIONAL[name]


def _model(content, length, boundary, segment, transitions, start, end, lengths, tracks, ordinates,
           low, high) -> SemiMarkov:
    plif = None if tracks is None else SegmentPLiF(tracks, ordinates, low, high)
    return SemiMarkov(content, transitions, length, boundary, segment, start, end, lengths, plif)


def _args(sm: SemiMarkov) -> tuple:
    """The operators' arguments for ``sm`` (contiguous tensors, None where absent)."""
    plif = sm.segment_plif
    tensors = (sm.content, sm.length_scores, sm.boundary, sm.segment_scores, sm.transitions, sm.start, sm.end,
               sm.lengths, None if plif is None else plif.tracks, None if plif is None else plif.ordinates)
    low, high = (0.0, 1.0) if plif is None else (float(plif.low), float(plif.high))
    return (*(None if x is None else x.contiguous() for x in tensors), low, high)


def _viterbi_op_fake(content, *rest):
    B, T, _ = content.shape
    return (content.new_empty(B, dtype=torch.float64), content.new_empty((B, T), dtype=torch.long),
            content.new_empty((B, T), dtype=torch.bool))


def _forward_op_fake(content, *rest):
    backend = rest[-1]
    B, T, N = content.shape
    shape = (B, T + 1, N)
    state = [] if backend == "torch" else [content.new_empty(shape, dtype=torch.float64) for _ in range(2)]
    return content.new_empty(B, dtype=torch.float64), state


def _differentiable(args: tuple) -> tuple:
    """content, length, boundary, segment, transitions, start, end, tracks and ordinates of the
    operators' arguments (``lengths`` and the scalars dropped)."""
    return (*args[:7], *args[8:10])


def _backward_op_fake(grad, *args):
    content = args[0]
    return [content.new_empty(0) if x is None else torch.empty_like(x) for x in _differentiable(args)]


@operator("semimarkov_viterbi", _viterbi_op_fake)
def viterbi_op(content: Tensor, length: Tensor, boundary: Tensor, segment: Opt, transitions: Tensor,
               start: Tensor, end: Tensor, lengths: Tensor, tracks: Opt, ordinates: Opt, low: float,
               high: float, backend: str) -> tuple[Tensor, Tensor, Tensor]:
    """best (B,) float64, labels (B, T) int64, starts (B, T) bool."""
    sm = _model(content, length, boundary, segment, transitions, start, end, lengths, tracks, ordinates, low,
                high)
    best, labels, starts = (_module(backend) or _torch).viterbi_segmentation(sm)
    return best.double(), labels, starts


@operator("semimarkov_log_partition", _forward_op_fake)
def forward_op(content: Tensor, length: Tensor, boundary: Tensor, segment: Opt, transitions: Tensor,
               start: Tensor, end: Tensor, lengths: Tensor, tracks: Opt, ordinates: Opt, low: float,
               high: float, backend: str) -> tuple[Tensor, list[Tensor]]:
    """logZ (B,) float64 and the backend's saved factors."""
    sm = _model(content, length, boundary, segment, transitions, start, end, lengths, tracks, ordinates, low,
                high)
    if backend == "torch":
        return _torch.log_partition(sm).double(), []
    logz, state = _module(backend).log_partition_forward(sm)
    return logz, list(state)


@operator("semimarkov_log_partition_backward", _backward_op_fake)
def backward_op(grad: Tensor, content: Tensor, length: Tensor, boundary: Tensor, segment: Opt,
                transitions: Tensor, start: Tensor, end: Tensor, lengths: Tensor, tracks: Opt, ordinates: Opt,
                low: float, high: float, logz: Tensor, state: list[Tensor], backend: str) -> list[Tensor]:
    """Gradients w.r.t. the nine differentiable inputs (an empty tensor for an absent one)."""
    args = (content, length, boundary, segment, transitions, start, end, lengths, tracks, ordinates, low,
            high)
    if backend == "torch":
        inputs = [None if x is None else x.detach().requires_grad_() for x in _differentiable(args)]
        with torch.enable_grad():
            sm = _model(*inputs[:7], lengths, *inputs[7:], low, high)
            wanted = [x for x in inputs if x is not None]
            got = iter(torch.autograd.grad(_torch.log_partition(sm), wanted, grad, allow_unused=True))
        grads = [None if x is None else next(got) for x in inputs]
        grads = [None if g is None else g.to(content.dtype) for g in grads]
    else:
        g = grad.double().contiguous()
        grads = list(_module(backend).log_partition_backward(_model(*args), logz, state, g))
        grads += [None] * (9 - len(grads))  # without a segment PLiF: no track or ordinate gradients
    return [content.new_empty(0) if x is None else (torch.zeros_like(x) if g is None else g)
            for g, x in zip(grads, _differentiable(args), strict=True)]


class LogPartition(torch.autograd.Function):
    """Differentiable semi-Markov log-partition (float64 (B,)) on the operators above."""

    setup_context = staticmethod(save_for_backward)

    @staticmethod
    def reference(*args):
        """(logZ,) by the PyTorch recursion: the path under ``torch.func`` transforms (the
        arguments of :meth:`forward`)."""
        return (_torch.log_partition(_model(*args[:-1])).double(),)

    @staticmethod
    def forward(content, length, boundary, segment, transitions, start, end, lengths, tracks, ordinates, low,
                high, backend):
        # named parameters, not *args: when no input needs a gradient, dynamo inlines ``forward``
        # and passes the context first unless the parameters match the arguments one for one
        logz, state = forward_op(content, length, boundary, segment, transitions, start, end, lengths, tracks,
                                 ordinates, low, high, backend)
        return logz, *state

    @staticmethod
    def backward(ctx, grad, *_):
        if grad is None:
            return (None,) * 13
        saved = ctx.saved_tensors
        tensors, logz, state = saved[:10], saved[10], list(saved[11:])
        low, high, backend = ctx.options
        args = (*tensors, low, high)
        needs = _differentiable(ctx.needs_input_grad)
        if torch.is_grad_enabled():  # double backward, torch.func: differentiate the reference
            present = [x if x is not None else torch.zeros(0) for x in _differentiable(args)]
            wanted = tuple(n and x is not None for n, x in zip(needs, _differentiable(args), strict=True))
            grads = grads_through(_torch.log_partition(_model(*args)), tuple(present), wanted, grad)
        else:
            grads = backward_op(grad, *args, logz, state, backend)
        grads = [g if need else None for g, need in zip(grads, needs, strict=True)]
        return (*grads[:7], None, *grads[7:], None, None, None)


def log_partition(sm: SemiMarkov) -> Tensor:
    """(B,) float64 log-partition of canonical potentials, differentiable."""
    return apply(LogPartition, *_args(sm), backend_of(sm))[0]


_SHARED = (4, 9)  # transitions and ordinates among the tensors of _args: not per sequence


def _indicators(ctx, tensors: list, labels: Tensor, starts: Tensor, weights: Tensor) -> tuple:
    """The gradients w.r.t. the differentiable inputs among ``tensors`` (those of :func:`_args`)
    of the sum over k of weights[:, k] (B, k) times the scores of the segmentations (labels,
    starts) (B, k, T) (:func:`structtorch.semimarkov._torch.indicator_grads`, the k segmentations
    of each sequence scored as a batch of B k), None where not needed."""
    B, k, T = labels.shape
    repeated = [x if x is None or i in _SHARED else x.repeat_interleave(k, 0) for i, x in enumerate(tensors)]
    grads = _torch.indicator_grads(_model(*repeated, *ctx.options[:2]), labels.reshape(B * k, T),
                                   starts.reshape(B * k, T), weights.reshape(B * k))
    out = []
    for g, x, need, i in zip(grads, _differentiable(tensors), _differentiable(ctx.needs_input_grad),
                             _differentiable(range(10)), strict=True):
        if need and g is not None and i not in _SHARED:
            g = g.view(B, k, *g.shape[1:]).sum(1)
        out.append(g.to(x.dtype) if need and g is not None else None)
    return (*out[:7], None, *out[7:])


def _scores_backward(ctx, grad: Tensor) -> tuple:
    """The backward of :class:`Viterbi`, :class:`KBest` and :class:`Score`: the gradient of each
    score is the indicator of its segmentation, zero where the score is -inf."""
    *tensors, scores, labels, starts = ctx.saved_tensors
    B, T = labels.shape[0], labels.shape[-1]
    shape = (B, scores.numel() // max(B, 1), T)
    weights = torch.where(scores > NEG_INF, grad, 0.0).view(shape[:2])
    return _indicators(ctx, tensors, labels.view(shape), starts.view(shape), weights)


def _keep(ctx, inputs: tuple, output: tuple, *saved: Tensor) -> None:
    """The ``setup_context`` of the Functions with a score and structures as outputs: saves the
    potentials (the first ten inputs of :func:`_args`) and ``saved``, keeps the PLiF bounds, and
    marks every output but the score non-differentiable."""
    ctx.save_for_backward(*inputs[:10], *saved)
    ctx.options = inputs[10:12]
    ctx.mark_non_differentiable(*output[1:])
    ctx.set_materialize_grads(False)


class Viterbi(torch.autograd.Function):
    """The best segmentation's score (float64 (B,), from the kernel), labels and starts; the
    score's gradient is the indicator of the segmentation (:func:`_scores_backward`)."""

    @staticmethod
    def forward(content, length, boundary, segment, transitions, start, end, lengths, tracks, ordinates, low,
                high, backend):
        return viterbi_op(content, length, boundary, segment, transitions, start, end, lengths, tracks,
                          ordinates, low, high, backend)

    @staticmethod
    def setup_context(ctx, inputs, output):
        _keep(ctx, inputs, output, *output)

    @staticmethod
    def backward(ctx, grad, *_):
        if grad is None:
            return (None,) * 13
        return (*_scores_backward(ctx, grad), None, None, None)


class KBest(torch.autograd.Function):
    """The k best segmentations' scores (float64 (B, k), from the backend's k-best kernel), labels
    and starts (B, k, T); each score's gradient is the indicator of its segmentation."""

    @staticmethod
    def forward(content, length, boundary, segment, transitions, start, end, lengths, tracks, ordinates, low,
                high, k, backend):
        return _module(backend).kbest(_model(content, length, boundary, segment, transitions, start, end,
                                             lengths, tracks, ordinates, low, high), k)

    setup_context = staticmethod(Viterbi.setup_context)

    @staticmethod
    def backward(ctx, grad, *_):
        if grad is None:
            return (None,) * 14
        return (*_scores_backward(ctx, grad), None, None, None, None)


class Score(torch.autograd.Function):
    """Scores (float64 (B,)) of given segmentations by the backend's score kernel; each score's
    gradient is the indicator of its segmentation (:func:`_scores_backward`)."""

    @staticmethod
    def forward(content, length, boundary, segment, transitions, start, end, lengths, tracks, ordinates, low,
                high, labels, starts, backend):
        model = _model(content, length, boundary, segment, transitions, start, end, lengths, tracks,
                       ordinates, low, high)
        return _module(backend).score(model, labels, starts)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs[:10], output, inputs[12], inputs[13])
        ctx.options = inputs[10:12]
        ctx.set_materialize_grads(False)

    @staticmethod
    def backward(ctx, grad):
        if grad is None:
            return (None,) * 15
        return (*_scores_backward(ctx, grad), None, None, None, None, None)


def score(sm: SemiMarkov, labels: Tensor, starts: Tensor) -> Tensor:
    """Scores (B,) of segmentations (labels, starts) (B, T) (trusted inside each length) of
    canonical potentials, differentiable: the backend's score kernel where it has one (one launch,
    float64), else :func:`structtorch.semimarkov.layout.semimarkov_score` (the accumulation
    dtype)."""
    if not has_kernel(sm, "score"):
        return semimarkov_score(sm, labels, starts)
    *tensors, low, high = _args(sm)
    return apply(Score, *tensors, low, high, labels, starts, backend_of(sm))


class LossAugmented(torch.autograd.Function):
    """(value float64 (B,), labels, starts (B, T), count (B,), the target's score (B,)) of the
    backend's Hamming-loss-augmented search against the target segmentation (margin rescaling,
    the Hamming loss weighted by ``weights`` (B, T) or None, h the identity; see
    :data:`OPTIONAL`); the value's gradient is the indicators of the found segmentation minus the
    target's (zero where the target is kept)."""

    @staticmethod
    def forward(content, length, boundary, segment, transitions, start, end, lengths, tracks, ordinates, low,
                high, target_labels, target_starts, weights, backend):
        model = _model(content, length, boundary, segment, transitions, start, end, lengths, tracks,
                       ordinates, low, high)
        return _module(backend).loss_augmented(model, target_labels, target_starts, weights)

    @staticmethod
    def setup_context(ctx, inputs, output):
        _keep(ctx, inputs, output, output[1], output[2], inputs[12], inputs[13])

    @staticmethod
    def backward(ctx, grad, *_):
        if grad is None:
            return (None,) * 16
        *tensors, found, found_starts, labels, starts = ctx.saved_tensors
        both = torch.stack([found, labels], 1), torch.stack([found_starts, starts], 1)
        grads = _indicators(ctx, tensors, *both, torch.stack([grad, -grad], 1))
        return (*grads, None, None, None, None, None, None)


class LossAugmentedTable(torch.autograd.Function):
    """(value float64 (B,), labels, starts (B, T), count (B,), scale (B,), the target's score (B,))
    of a whole loss-augmented search against the target segmentation (labels, starts), run by
    ``search(model, labels, starts)`` (the count table of :mod:`structtorch.lossaug`: any h, both
    rescalings, the segment losses); the value's gradient is ``scale`` times the indicators of the
    found segmentation minus the target's."""

    @staticmethod
    def forward(content, length, boundary, segment, transitions, start, end, lengths, tracks, ordinates, low,
                high, target_labels, target_starts, search):
        model = _model(content, length, boundary, segment, transitions, start, end, lengths, tracks,
                       ordinates, low, high)
        return search(model, target_labels, target_starts)

    @staticmethod
    def setup_context(ctx, inputs, output):
        _keep(ctx, inputs, output, output[1], output[2], inputs[12], inputs[13], output[4])

    @staticmethod
    def backward(ctx, grad, *_):
        if grad is None:
            return (None,) * 15
        *tensors, found, found_starts, labels, starts, scale = ctx.saved_tensors
        g = grad * scale
        both = torch.stack([found, labels], 1), torch.stack([found_starts, starts], 1)
        grads = _indicators(ctx, tensors, *both, torch.stack([g, -g], 1))
        return (*grads, None, None, None, None, None)


def loss_augmented_table(sm: SemiMarkov, labels: Tensor, starts: Tensor, search) -> tuple[Tensor, ...]:
    """(value (B,) float64, differentiable, labels, starts, count, scale, gold) of
    :class:`LossAugmentedTable` with ``search(model, labels, starts)`` against the checked target
    segmentation (labels, starts) (B, T)."""
    *tensors, low, high = _args(sm)
    return apply(LossAugmentedTable, *tensors, low, high, labels, starts, search)


def loss_augmented(sm: SemiMarkov, labels: Tensor, starts: Tensor,
                   weights: Tensor | None = None) -> tuple[Tensor, ...]:
    """(value (B,) float64, differentiable, labels, starts, count, gold) of :class:`LossAugmented`
    against the checked target segmentation (labels, starts) (B, T), the Hamming loss weighted by
    ``weights`` (B, T) (0 beyond each length) if given."""
    *tensors, low, high = _args(sm)
    return apply(LossAugmented, *tensors, low, high, labels, starts, weights, backend_of(sm))


def kbest(sm: SemiMarkov, k: int) -> tuple[Tensor, Tensor, Tensor]:
    """(scores (B, k) float64, differentiable, labels (B, k, T), starts (B, k, T)) of canonical
    potentials by the backend's k-best kernel (see :data:`OPTIONAL`)."""
    *tensors, low, high = _args(sm)
    return apply(KBest, *tensors, low, high, k, backend_of(sm))


def viterbi(sm: SemiMarkov) -> tuple[Tensor, Tensor, Tensor]:
    """(best (B,) float64, differentiable, labels (B, T), starts (B, T)) of canonical potentials."""
    return apply(Viterbi, *_args(sm), backend_of(sm))


@torch.no_grad()
def sample(sm: SemiMarkov, n: int, generator: torch.Generator | None) -> tuple[Tensor, Tensor]:
    """(labels, starts) (n, B, T) drawn by the backend's sampling kernel (see :data:`OPTIONAL`)."""
    return _module(backend_of(sm)).sample(sm, n, generator)
