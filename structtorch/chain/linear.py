"""Linear-chain dynamic programs: Viterbi, log-partition, marginals, path scores and k-best.

Shapes: B batch, T max length, N labels. Scores are maximized. ``transitions[..., i, j]`` scores
label i at position t followed by label j at t + 1; it is (N, N) shared by all positions or
(B, T-1, N, N) per position. ``start``/``end`` are (N,) or (B, N); ``lengths`` is (B,) with
0 <= length <= T (None: all T). Entries may be -inf (forbidden); NaN and +inf are rejected.

:mod:`structtorch._backend` picks the implementation per call: on CPU tensors the compiled kernels
(``csrc/chain.cpp``, built on first use, glue in ``_cpu.py``), on CUDA tensors the Triton kernels
(``_triton.py``); on the "torch" backend, elsewhere or without a compiler, the batched PyTorch
loops of ``_torch.py``. On CPU every path accumulates in
float64 whatever the input dtype; results come back in the input dtype, and a result beyond its
range raises a ValueError (see :func:`structtorch._checks.guard_overflow`). ``kbest`` is one
Triton kernel on the triton backend and the k-list recursion of ``_torch.py`` on the others.

Tie-breaking of :func:`viterbi`: among optimal labelings the returned one is the smallest in
reverse lexicographic order: the smallest possible last label, then the smallest possible label
before it, and so on (every backpointer takes the first maximal index). :func:`kbest` ranks the
candidates of each step and the final list by score, then by (label, rank) of the predecessor,
the smallest first (see :func:`structtorch.chain._torch.kbest`): where sums are exact, labelings
of equal score come in the same reverse lexicographic order, the first being :func:`viterbi`'s.
Its scores are the DP's own sums, so they are sorted exactly, on every backend alike.
"""

from __future__ import annotations

import numbers

import torch
from torch import Tensor, nn

from .. import _expectations
from .._checks import (
    LengthsLike,
    all_finite,
    cast_checked,
    check_ignore_index,
    check_label_tensor,
    check_label_values,
    check_labels,
    forbidden_pattern,
    on_host,
    plain,
    validation_enabled,
)
from .._library import NotScriptable, transformed
from .._numerics import NEG_INF, accumulate, negative_log_likelihood
from .._precision import mixed_precision
from . import _ops, _quick, _torch
from .layout import Chain, labeling_score
from .masking import masked_chain

__all__ = ["viterbi", "log_partition", "marginals", "path_score", "kbest", "Viterbi"]

quick_viterbi = _quick.viterbi  # the small-call lanes, for the layers above (LinearChainCRF)
quick_nll = _quick.nll

def log_partition_chain(chain: Chain, *, accumulated: bool = False) -> Tensor:
    """:func:`log_partition` of a validated :class:`Chain`; with ``accumulated`` in the accumulation
    dtype (float64 on CPU), not cast back."""
    logz = _ops.log_partition(chain)
    if not accumulated:
        logz = logz.to(chain.unary.dtype)
    return _torch.guard(chain, logz, "the log-partition")


def log_prob_chain(chain: Chain, labels: Tensor, logz: Tensor, name: str = "labels") -> Tensor:
    """(B,) log-probability score(labels) - logZ of a validated :class:`Chain`, taken in the
    accumulation dtype and cast once; ``logz`` is :func:`log_partition_chain` with ``accumulated``
    (computed once by the caller), ``labels`` are checked here, as ``name``."""
    labels = check_labels(labels, chain.mask(), chain.shape[2], name=name)
    return _expectations.log_prob(labeling_score(chain, labels), logz, chain.unary.dtype, chain.potentials)


def nll_chain(chain: Chain, labels: Tensor, name: str = "labels") -> Tensor:
    """The CRF loss logZ - score(labels) (B,) of a validated :class:`Chain`, taken in the
    accumulation dtype and cast once; +inf where the labeling or the whole row is infeasible (zero
    gradient on infeasible rows). ``labels`` (B, T) are checked here, as ``name``. On a backend that
    fuses it (Triton) one launch forward and one backward; elsewhere logZ and the labeling's score."""
    if _ops.fuses_nll(chain):
        labels = check_label_tensor(labels, chain.shape[:2], chain.unary.device, name)
        check_label_values(labels, chain.lengths, chain.shape[2], name)  # the kernels clamp what they read
        loss, logz, *_ = _ops.nll(chain, labels)
        out = _plain_cast(loss, chain.unary.dtype)  # a finite loss has a finite logZ
        if out is not None:
            return out
        _torch.guard(chain, logz, "the log-partition")
    else:
        wide = chain.map(accumulate)
        loss = negative_log_likelihood(log_partition_chain(wide), path_score_chain(wide, labels, name=name))
    return cast_checked(loss, chain.unary.dtype, "the negative log-likelihood", chain.potentials)


def allowed_labels(labels: object, chain: Chain, ignore_index: int | None,
                   name: str = "labels") -> Tensor | None:
    """Partial targets as (B, T, N) bool sets of allowed labels, or None for full labels.

    A (B, T, N) bool tensor is the sets themselves. (B, T) integer labels are partial where they
    equal ``ignore_index`` inside a length (any label allowed there; the others are checked to lie
    in [0, N)): on the host only when some are; on a device always, so that nothing is read back.
    Anything else is None (full labels, which their own checks name when they are wrong)."""
    B, T, N = chain.shape
    check_ignore_index(ignore_index, N)
    if isinstance(labels, Tensor) and labels.dtype == torch.bool:
        if labels.shape != (B, T, N):
            raise ValueError(f"{name} as sets of allowed labels must be a bool tensor of shape (B, T, N) = "
                             f"{(B, T, N)}, got {tuple(labels.shape)}")
        if labels.device != chain.unary.device:
            raise ValueError(f"{name} is on {labels.device} but {chain.name} is on {chain.unary.device}")
        return labels
    if (ignore_index is None or not isinstance(labels, Tensor) or labels.shape != (B, T)
            or labels.is_floating_point() or labels.device != chain.unary.device):
        return None
    mask = chain.mask()
    ignored = (labels == ignore_index) & mask
    if on_host(ignored) and not bool(plain(ignored).any()):
        return None
    check_label_tensor(labels, (B, T), chain.unary.device, name)
    if validation_enabled():  # the labels given lie in [0, N) inside each length
        check_labels(torch.where(ignored, 0, labels), mask, N, name=name)
    # a comparison rather than one_hot, which reads the labels' range back on the host; beyond a
    # length the sets are never read
    return ignored.unsqueeze(2) | (labels.unsqueeze(2) == torch.arange(N, device=labels.device))


def consistent_chain(chain: Chain, allowed: Tensor) -> Chain:
    """``chain`` restricted to the labelings consistent with ``allowed`` (B, T, N) bool (-inf unary
    scores elsewhere)."""
    return Chain(torch.where(allowed, chain.unary, NEG_INF), chain.transitions, chain.start, chain.end,
                 chain.lengths, chain.name)


def partial_nll_chain(chain: Chain, allowed: Tensor) -> Tensor:
    """-log of the total probability of the labelings consistent with ``allowed`` (B, T, N) bool,
    logZ - logZ(consistent) (B,), of a validated :class:`Chain`: the CRF loss of partial targets
    (the usual NLL when each set holds one label). In the accumulation dtype, cast once; +inf where
    no consistent labeling exists, as for an infeasible labeling."""
    wide = chain.map(accumulate)
    consistent = log_partition_chain(consistent_chain(wide, allowed))
    loss = negative_log_likelihood(log_partition_chain(wide), consistent)
    return cast_checked(loss, chain.unary.dtype, "the negative log-likelihood", chain.potentials)


def chain_loss(chain: Chain, labels: object, ignore_index: int | None, name: str = "labels") -> Tensor:
    """The CRF loss (B,) of full (:func:`nll_chain`) or partial targets (:func:`allowed_labels`,
    :func:`partial_nll_chain`) on a validated :class:`Chain`."""
    allowed = allowed_labels(labels, chain, ignore_index, name)
    return nll_chain(chain, labels, name=name) if allowed is None else partial_nll_chain(chain, allowed)


def chain_parts(chain: Chain) -> list[Tensor]:
    """The potentials of a chain as its expectations take them: [unary (B, T, N), per-position
    transitions (B, T-1, N, N), start (B, N), end (B, N)]."""
    B, T, N = chain.shape
    trans = chain.transitions
    if chain.shared:
        trans = trans.expand(B, max(T - 1, 0), N, N)
    return [chain.unary, trans, chain.start, chain.end]


def expectations_chain(chain: Chain) -> tuple[Tensor, list[Tensor], list[Tensor]]:
    """(logZ (B,), marginals, potentials) of a validated :class:`Chain` in the accumulation dtype:
    the potentials are [unary (B, T, N), per-position transitions (B, T-1, N, N), start (B, N),
    end (B, N)] and the marginals their gradients d logZ / d potential (node, edge, first- and
    last-label marginals), differentiable when a potential requires grad."""
    chain = chain.map(accumulate)
    parts = chain_parts(chain)

    def logz(u: Tensor, a: Tensor, s: Tensor, e: Tensor) -> Tensor:
        return _ops.log_partition(Chain(u, a.contiguous(), s, e, chain.lengths.clone()))

    value, grads = _expectations.logz_and_grads(logz, parts)
    return value, grads, parts


def _plain_cast(x: Tensor, dtype: torch.dtype) -> Tensor | None:
    """``x`` cast to ``dtype`` where that needs no closer look: value checks off, or every entry of
    the cast finite on the host (one compiled pass: nothing overflowed, no row is infeasible);
    else None, and the caller guards and casts (:func:`structtorch._checks.cast_checked`)."""
    out = x.to(dtype)
    return out if not validation_enabled() or (on_host(x) and all_finite(out)) else None


def _cast_guarded(chain: Chain, scores: Tensor, what: str, feasible=None) -> Tensor:
    """(B,) scores in the accumulation dtype, checked for overflow (see :func:`_torch.guard`)
    and cast to the input dtype."""
    out = _plain_cast(scores, chain.unary.dtype)
    if out is not None:
        return out
    _torch.guard(chain, scores, what, feasible)
    return cast_checked(scores, chain.unary.dtype, what, chain.potentials)


def viterbi(
    unary: Tensor,
    transitions: Tensor,
    *,
    start: Tensor | None = None,
    end: Tensor | None = None,
    lengths: LengthsLike = None,
    mask: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Highest-scoring labeling of each chain.

    Parameters
    ----------
    unary : Tensor (B, T, N)
        Label scores per position.
    transitions : Tensor (N, N) or (B, T-1, N, N)
        ``transitions[..., i, j]`` scores label i at t followed by label j at t + 1; per step
        (T-1, N, N) or (1, T-1, N, N) are broadcast over the batch.
    start, end : Tensor (N,) or (B, N), optional
        Scores of the first and the last label.
    lengths : Tensor (B,), optional
        Integer lengths in [0, T]; None means all T.
    mask : Tensor (B, T) bool, optional
        Instead of ``lengths``: any pattern of positions; the chain runs over each row's
        masked-in positions in order, as if compacted to the left (:mod:`structtorch.chain.masking`),
        and per-position results come back at those positions.

    Returns
    -------
    score : Tensor (B,)
        Best score; 0 for zero-length rows, -inf for rows with no feasible labeling. Its gradient
        with respect to every potential is the indicator of the returned path.
    path : Tensor (B, T) int64
        Best labeling, -1 at positions >= length (outside the mask) and on infeasible rows. Ties:
        see the module doc.

    Examples
    --------
    >>> import torch, structtorch as st
    >>> unary = torch.tensor([[[2., 0.], [0., 3.], [2., 0.]]])  # (B, T, N) = (1, 3, 2)
    >>> transitions = torch.tensor([[0., -1.], [-1., 0.]])      # a change of label costs 1
    >>> st.viterbi(unary, transitions)
    (tensor([5.]), tensor([[0, 1, 0]]))
    >>> st.viterbi(unary, transitions, lengths=torch.tensor([2]))  # -1 beyond the length
    (tensor([4.]), tensor([[ 0,  1, -1]]))
    """
    quick = _quick.viterbi(unary, transitions, start, end, lengths, mask)
    return quick if quick is not None else _viterbi(unary, transitions, start, end, lengths, mask)


@mixed_precision
def _viterbi(unary: Tensor, transitions: Tensor, start: Tensor | None, end: Tensor | None,
             lengths: LengthsLike, mask: Tensor | None) -> tuple[Tensor, Tensor]:
    """:func:`viterbi` by the general path (the small-call lane declined it)."""
    chain, moved = masked_chain(unary, transitions, start, end, lengths, mask)
    score, path = viterbi_chain(chain)
    return score, moved.put(path, -1)


def viterbi_chain(chain: Chain) -> tuple[Tensor, Tensor]:
    """:func:`viterbi` of a validated :class:`Chain`."""
    score, path = _ops.viterbi(chain)
    return _cast_guarded(chain, score, "the Viterbi score"), path


@mixed_precision
def log_partition(
    unary: Tensor,
    transitions: Tensor,
    *,
    start: Tensor | None = None,
    end: Tensor | None = None,
    lengths: LengthsLike = None,
    mask: Tensor | None = None,
) -> Tensor:
    """Log of the sum over all labelings of exp(score).

    Arguments as for :func:`viterbi`. Returns a (B,) tensor: 0 for zero-length rows and -inf for
    rows with no feasible labeling. Its gradient w.r.t. ``unary`` is the node marginals, w.r.t.
    ``transitions`` the edge marginals (summed over positions when shared), w.r.t. ``start`` and
    ``end`` the marginals of the first and last label. Infeasible rows get zero gradients.

    Examples
    --------
    >>> import math, torch, structtorch as st
    >>> logz = st.log_partition(torch.zeros(1, 3, 2), torch.zeros(2, 2))  # 2**3 labelings of score 0
    >>> round(logz.item(), 4), round(3 * math.log(2), 4)
    (2.0794, 2.0794)
    """
    return log_partition_chain(masked_chain(unary, transitions, start, end, lengths, mask)[0])


@mixed_precision
def marginals(
    unary: Tensor,
    transitions: Tensor,
    *,
    start: Tensor | None = None,
    end: Tensor | None = None,
    lengths: LengthsLike = None,
    mask: Tensor | None = None,
) -> Tensor:
    """Node marginals p(y_t = j) as a (B, T, N) tensor, 0 beyond each length (outside the mask) and
    on infeasible rows.

    Arguments as for :func:`viterbi`. The result is differentiable (double backward through the
    log-partition) when any input requires grad.

    Examples
    --------
    >>> import torch, structtorch as st
    >>> unary = torch.tensor([[[0., 0.], [1., 0.]]])
    >>> st.marginals(unary, torch.zeros(2, 2)).round(decimals=3)  # p(y_t = n), (B, T, N)
    tensor([[[0.5000, 0.5000],
             [0.7310, 0.2690]]])
    """
    chain, moved = masked_chain(unary, transitions, start, end, lengths, mask)
    return moved.put(marginals_chain(chain), 0)


def marginals_chain(chain: Chain) -> Tensor:
    """:func:`marginals` of a validated :class:`Chain`."""
    if transformed():  # torch.func: the PyTorch recursion, differentiated by torch.func.grad
        ref = chain.map(accumulate)

        def logz(unary: Tensor) -> Tensor:
            return _torch.log_partition(Chain(unary, ref.transitions, ref.start, ref.end, ref.lengths))

        return _expectations.logz_and_grads(logz, [ref.unary])[1][0].to(chain.unary.dtype)
    inputs = (chain.unary, chain.transitions, chain.start, chain.end)
    differentiable = torch.is_grad_enabled() and any(x.requires_grad for x in inputs)
    if _ops.backend_of(chain) != "torch":  # the same kernel value with or without autograd
        return _ops.marginals(chain)
    if differentiable:
        with torch.enable_grad():  # marginals as a differentiable function of the inputs
            return _torch.marginals_through(chain).to(chain.unary.dtype)
    with torch.inference_mode(False), torch.enable_grad():  # also works under inference_mode
        parts = (x.detach().clone() for x in inputs)
        marg = _torch.marginals_through(Chain(*parts, chain.lengths.clone()), create_graph=False)
        return marg.to(chain.unary.dtype)


@mixed_precision
def path_score(
    unary: Tensor,
    transitions: Tensor,
    labels: Tensor,
    *,
    start: Tensor | None = None,
    end: Tensor | None = None,
    lengths: LengthsLike = None,
    mask: Tensor | None = None,
) -> Tensor:
    """Score of given labelings.

    Parameters
    ----------
    unary, transitions, start, end, lengths, mask
        As for :func:`viterbi`.
    labels : Tensor (B, T) integer
        Labels in [0, N) within each length (inside the mask); other entries are ignored.

    Returns
    -------
    Tensor (B,)
        Sum of the unary, transition, start and end scores along ``labels``.
    """
    chain, moved = masked_chain(unary, transitions, start, end, lengths, mask)
    same = isinstance(labels, Tensor) and labels.shape == unary.shape[:2]  # else check_labels names it
    return path_score_chain(chain, moved.take(labels) if same else labels)


def path_score_chain(chain: Chain, labels: Tensor, name: str = "labels") -> Tensor:
    """:func:`path_score` of a validated :class:`Chain` (``labels`` are checked here, as ``name``)."""
    labels = check_labels(labels, chain.mask(), chain.shape[2], name=name)

    def feasible() -> Tensor:  # the labeling uses no -inf entry
        return labeling_score(chain.map(forbidden_pattern), labels) > NEG_INF

    return _cast_guarded(chain, labeling_score(chain, labels), "the path score", feasible)


@mixed_precision
def kbest(
    unary: Tensor,
    transitions: Tensor,
    k: int,
    *,
    start: Tensor | None = None,
    end: Tensor | None = None,
    lengths: LengthsLike = None,
    mask: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """The k highest-scoring distinct labelings of each chain.

    Arguments as for :func:`viterbi`, plus ``k >= 1``. Returns ``scores`` (B, k), descending, and
    ``paths`` (B, k, T) int64; where fewer than k feasible labelings exist the remaining scores are
    -inf and paths -1. A zero-length row has exactly one (empty) labeling of score 0. Scores are
    differentiable (the gradient of each is the indicator of its path).
    """
    chain, moved = masked_chain(unary, transitions, start, end, lengths, mask)
    scores, paths = kbest_chain(chain, k)
    return scores, moved.put(paths.transpose(1, 2), -1).transpose(1, 2)


def kbest_chain(chain: Chain, k: int) -> tuple[Tensor, Tensor]:
    """:func:`kbest` of a validated :class:`Chain` (``k`` is checked here)."""
    if isinstance(k, bool) or not isinstance(k, numbers.Integral):
        raise TypeError(f"k must be an int, got {type(k).__name__}")
    k = int(k)
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    scores, paths = _ops.kbest(chain, k)
    _torch.guard(chain, scores[:, 0], "a k-best score")  # the later scores are not above the first
    return cast_checked(scores, chain.unary.dtype, "a k-best score", chain.potentials), paths


class Viterbi(NotScriptable, nn.Module):
    """Parameter-free layer computing :func:`viterbi`; ``forward`` takes the same arguments."""

    def forward(
        self,
        unary: Tensor,
        transitions: Tensor,
        *,
        start: Tensor | None = None,
        end: Tensor | None = None,
        lengths: LengthsLike = None,
        mask: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        return viterbi(unary, transitions, start=start, end=end, lengths=lengths, mask=mask)
