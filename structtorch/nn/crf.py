"""Linear-chain conditional random field layer with learnable transition, start and end scores.

A drop-in for pytorch-crf's ``CRF`` with explicit conventions: ``forward`` returns the negative
log-likelihood (a loss, positive), :meth:`LinearChainCRF.log_likelihood` its negative (pytorch-crf's
``forward``). Sequences are given by any (B, T) ``mask`` (the chain runs over each row's masked-in
positions in order, as if compacted to the left: left or right padding, or a tokenizer's
first-sub-token mask; see :mod:`structtorch.chain.masking`) or by ``lengths`` (left-aligned).
Transition constraints (a tagging scheme's, see :func:`structtorch.allowed_transitions`) become
-inf scores in training and decoding.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from .._checks import (
    LengthsLike,
    _fmt,
    check_device,
    check_float,
    check_ignore_index,
    check_int,
    check_lengths,
    not_a_tensor,
    one_assertion,
    warn_infinite_loss,
)
from .._library import NotScriptable
from .._numerics import NEG_INF, reduce_batch
from .._precision import mixed_precision
from ..chain.layout import check_chain
from ..chain.linear import (
    chain_loss,
    kbest_chain,
    log_partition_chain,
    marginals_chain,
    quick_nll,
    quick_viterbi,
    viterbi_chain,
)
from ..chain.masking import Compaction, compaction

if TYPE_CHECKING:
    from ..distributions import ChainDistribution

__all__ = ["LinearChainCRF"]

REDUCTIONS = ("none", "sum", "mean", "token_mean")
Constraints = Tensor | tuple[Tensor, Tensor, Tensor] | Sequence[Tensor] | None


@dataclass
class _Batch:
    """Emissions (B, T, N) with each sequence's positions moved to the front (``moved``, a
    :class:`structtorch.chain.masking.Compaction`, moves per-position results back)."""

    emissions: Tensor
    moved: Compaction
    tags: Tensor | None = None

    @property
    def lengths(self) -> Tensor:
        return self.moved.lengths

    def align(self, x: Tensor, fill: float | int) -> Tensor:
        """Per-position results (B, T, ...) back at the rows' original positions (``fill`` elsewhere)."""
        return self.moved.put(x, fill)


class LinearChainCRF(NotScriptable, nn.Module):
    """Linear-chain CRF over ``num_labels`` labels on top of any (B, T, N) emission scores.

    Parameters
    ----------
    num_labels : int
        N, the number of labels (tags).
    batch_first : bool
        True (default): emissions (B, T, N), tags and mask (B, T). False: (T, B, N) and (T, B), as
        pytorch-crf's default; per-position outputs then come back time-first too.
    constraints : Tensor (N, N) bool or (allowed, allowed_start, allowed_end), optional
        Allowed transitions (and first/last tags), e.g. ``allowed_transitions("BIO", tags)``; the
        others score -inf, so only valid sequences are trained on and decoded. Stored as buffers,
        read once when the module is built and when a state dict is loaded (change them by
        loading a state dict, not in place).
    init_scale : float
        Transition, start and end scores start uniform in [-init_scale, init_scale].
    ignore_index : int, optional
        The tag of unlabeled positions inside a sequence (e.g. -100, Hugging Face's): partial
        targets, trained on the marginal likelihood of the labelings consistent with the known
        tags (see :meth:`forward`). None (default): every position inside the mask is tagged.

    Attributes
    ----------
    transitions : nn.Parameter (N, N)
        ``transitions[i, j]`` scores label i followed by label j.
    start, end : nn.Parameter (N,)
        Scores of the first and the last label.

    Emissions must share the module's device; float16/bfloat16 emissions (autocast) are computed
    in float32 or better (see :mod:`structtorch._precision`).

    Examples
    --------
    >>> crf = LinearChainCRF(3)
    >>> emissions, tags = torch.randn(2, 4, 3), torch.tensor([[0, 1, 2, 1], [2, 2, 0, 0]])
    >>> mask = torch.tensor([[True] * 4, [True, True, False, False]])
    >>> crf(emissions, tags, mask).shape, crf.decode(emissions, mask)[1].shape
    (torch.Size([2]), torch.Size([2, 4]))
    """

    def __init__(self, num_labels: int, *, batch_first: bool = True, constraints: Constraints = None,
                 init_scale: float = 0.1, ignore_index: int | None = None) -> None:
        super().__init__()
        if isinstance(num_labels, bool) or not isinstance(num_labels, int) or num_labels < 1:
            raise ValueError(f"num_labels must be a positive int, got {num_labels!r}")
        if not isinstance(batch_first, bool):
            raise TypeError(f"batch_first must be a bool, got {type(batch_first).__name__}")
        ignore_index = check_ignore_index(ignore_index, num_labels)
        self.num_labels, self.batch_first, self.init_scale = num_labels, batch_first, init_scale
        self.ignore_index = ignore_index
        self.transitions = nn.Parameter(torch.empty(num_labels, num_labels))
        self.start = nn.Parameter(torch.empty(num_labels))
        self.end = nn.Parameter(torch.empty(num_labels))
        allowed, first, last = _check_constraints(constraints, num_labels)
        self.register_buffer("allowed", allowed)
        self.register_buffer("allowed_start", first)
        self.register_buffer("allowed_end", last)
        self._note_constraints()
        self.register_load_state_dict_post_hook(lambda module, _: module._note_constraints())
        self.reset_parameters()

    def _note_constraints(self) -> None:
        """Whether any transition, start or end is forbidden, read once (at construction and when a
        state dict is loaded), so that an unconstrained CRF spends no device op on masking."""
        masks = (self.allowed, self.allowed_start, self.allowed_end)
        self._constrained = not all(bool(b.all()) for b in masks)

    @classmethod
    def from_pytorch_crf(cls, crf: nn.Module, *, batch_first: bool | None = None, **kwargs) -> LinearChainCRF:
        """A LinearChainCRF with the scores of a ``torchcrf.CRF`` (same conventions: ``transitions[i,
        j]`` scores i followed by j; ``start_transitions``/``end_transitions`` become start/end).

        Parameters
        ----------
        crf : torchcrf.CRF
            Or any object with ``num_tags``, ``batch_first``, ``transitions`` (N, N),
            ``start_transitions`` and ``end_transitions`` (N,).
        batch_first : bool, optional
            The layout of the new module's inputs; None (default) takes ``crf.batch_first``.
        **kwargs
            The other arguments of the constructor (``constraints``, ``init_scale``,
            ``ignore_index``).

        Returns
        -------
        LinearChainCRF
            On the device of ``crf.transitions``.
        """
        needed = ("num_tags", "batch_first", "transitions", "start_transitions", "end_transitions")
        missing = [a for a in needed if not hasattr(crf, a)]
        if missing:
            raise TypeError(f"crf must be a torchcrf.CRF ({', '.join(needed)}), got {type(crf).__name__} "
                            f"without {', '.join(missing)}")
        N = check_int("crf.num_tags", crf.num_tags, 1)
        scores = {}
        for name, shape in (("transitions", (N, N)), ("start_transitions", (N,)), ("end_transitions", (N,))):
            x = check_float(f"crf.{name}", getattr(crf, name))
            if x.dim() != len(shape) or tuple(x.shape) != shape:  # never broadcast into the parameters
                raise ValueError(f"crf.{name} must have shape {_fmt(shape)} for crf.num_tags = {N}, got "
                                 f"{_fmt(x.shape)}")
            check_device(f"crf.{name}", x, crf.transitions, "crf.transitions")
            scores[name] = x
        if batch_first is None:
            batch_first = crf.batch_first
        module = cls(N, batch_first=batch_first, **kwargs)
        with torch.no_grad():
            module.transitions.copy_(scores["transitions"])
            module.start.copy_(scores["start_transitions"])
            module.end.copy_(scores["end_transitions"])
        return module.to(crf.transitions.device)

    def reset_parameters(self) -> None:
        for p in (self.transitions, self.start, self.end):
            nn.init.uniform_(p, -self.init_scale, self.init_scale)

    def extra_repr(self) -> str:
        constrained = ", constrained" if self._constrained else ""
        return f"num_labels={self.num_labels}, batch_first={self.batch_first}{constrained}"

    def scores(self) -> tuple[Tensor, Tensor, Tensor]:
        """(transitions (N, N), start (N,), end (N,)) with -inf where the constraints forbid (the
        constraints are read when the module is built or a state dict is loaded)."""
        if not self._constrained:  # the parameters read from their dict (nn.Module's __getattr__ is slow)
            p = self._parameters
            return p["transitions"], p["start"], p["end"]

        def masked(x: Tensor, ok: Tensor) -> Tensor:
            return torch.where(ok, x, torch.full((), NEG_INF, dtype=x.dtype, device=x.device))

        return (masked(self.transitions, self.allowed), masked(self.start, self.allowed_start),
                masked(self.end, self.allowed_end))

    def _scores(self, batch: _Batch, transitions: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
        """:meth:`scores`, with the call's ``transitions`` in place of the module's: (N, N), or per
        example and step (B, T-1, N, N) (broadcast from (T-1, N, N) or (1, T-1, N, N)), -inf where
        the constraints forbid, per-step ones following a mask's positions (batch-first)."""
        trans, start, end = self.scores()
        if transitions is None:
            return trans, start, end
        if not isinstance(transitions, Tensor):
            raise not_a_tensor("transitions", transitions, "(N, N) or (B, T-1, N, N)")
        if self._constrained:
            forbidden = torch.full((), NEG_INF, dtype=transitions.dtype, device=transitions.device)
            transitions = torch.where(self.allowed, transitions, forbidden)
        return batch.moved.take_transitions(transitions), start, end

    # -- inputs ---------------------------------------------------------------------------------

    def _batch(self, emissions: Tensor, tags: Tensor | None, mask: Tensor | None,
               lengths: LengthsLike) -> _Batch:
        """Validate and bring to batch-first, left-aligned form (see :class:`_Batch`)."""
        if not isinstance(emissions, Tensor):
            raise not_a_tensor("emissions", emissions, self._layout("N"))
        if emissions.dim() != 3:
            raise ValueError(f"emissions must have shape {self._layout('N')}, got {_fmt(emissions.shape)}")
        if emissions.shape[2] != self.num_labels:
            raise ValueError(f"emissions must have shape {self._layout(f'num_labels = {self.num_labels}')}, "
                             f"got {_fmt(emissions.shape)}")
        if not emissions.is_floating_point():
            raise TypeError(f"emissions must be a floating tensor, got {emissions.dtype}")
        if not self.batch_first:  # shapes are checked as the caller passed them, then transposed
            for name, x in (("tags", tags), ("mask", mask)):
                if isinstance(x, Tensor) and x.shape[:2] != emissions.shape[:2]:
                    raise ValueError(f"{name} must have shape (T, B) = {_fmt(emissions.shape[:2])}, "
                                     f"got {_fmt(x.shape)}")
            emissions = emissions.transpose(0, 1)
            tags = tags.transpose(0, 1) if isinstance(tags, Tensor) and tags.dim() in (2, 3) else tags
            mask = mask.transpose(0, 1) if isinstance(mask, Tensor) and mask.dim() == 2 else mask
        B, T, _ = emissions.shape
        if mask is None:
            return _Batch(emissions, Compaction(check_lengths(lengths, B, T, emissions.device)), tags)
        if lengths is not None:
            raise ValueError("give mask or lengths, not both")
        moved = compaction(mask, B, T, emissions.device, self._layout())
        tags = moved.take_positions(tags)
        return _Batch(moved.take(emissions), moved, tags)

    def _layout(self, last: str | None = None) -> str:
        dims = "(B, T" if self.batch_first else "(T, B"
        return f"{dims}, {last})" if last else f"{dims})"

    def _out(self, x: Tensor, batch: _Batch, fill: float | int) -> Tensor:
        """Per-position results back in the caller's positions and layout."""
        x = batch.align(x, fill)
        return x if self.batch_first else x.transpose(0, 1)

    # -- the loss -------------------------------------------------------------------------------

    def forward(self, emissions: Tensor, tags: Tensor, mask: Tensor | None = None, *,
                lengths: LengthsLike = None, reduction: str = "none",
                transitions: Tensor | None = None) -> Tensor:
        """Negative log-likelihood -log p(tags | emissions): a loss (>= 0).

        Parameters
        ----------
        emissions : Tensor (B, T, N), or (T, B, N) when ``batch_first=False``
        tags : Tensor (B, T) integer, in [0, N) inside each sequence (anything outside), or partial
            tags: ``ignore_index`` at unlabeled positions, or a (B, T, N) bool tensor of the
            labels allowed at each position. The loss is then -log of the total probability of
            the labelings consistent with them, logZ - logZ(consistent) (the usual NLL when every
            position is tagged); +inf where no consistent labeling exists.
        mask : Tensor (B, T) bool (or uint8), optional
            True on each sequence's positions, any pattern: the chain runs over them in order
            (padding on either side, or interleaved as a first-sub-token mask; an all-False row
            is an empty sequence).
        lengths : Tensor (B,), optional
            Instead of ``mask``: left-aligned sequences of these lengths. Neither: all T.
        reduction : {"none", "sum", "mean", "token_mean"}
            Per sequence (B,), summed, averaged over sequences, or summed and divided by the
            number of tokens.
        transitions : Tensor (N, N) or (B, T-1, N, N), optional
            Transition scores for this call in place of the module's (input-dependent transitions,
            e.g. from a network), per example and step ``transitions[b, t, i, j]`` for label i at t
            followed by j at t + 1 (batch-first in either layout; (T-1, N, N) and (1, T-1, N, N)
            broadcast over the batch); the module's constraints, start and end still apply, and a
            mask moves them with the positions they enter.

        Returns
        -------
        Tensor (B,) or scalar
            In the dtype of ``emissions`` (promoted with the parameters' dtype when one of them is
            float16/bfloat16, as under autocast). On CPU logZ - score is taken in float64, so a small
            NLL keeps its digits when both terms are large. A sequence that breaks the constraints
            has probability 0: NLL +inf; so has any sequence of a row where the constraints forbid
            every labeling (with a zero gradient, never NaN). A reduced loss ("sum", "mean",
            "token_mean") that is +inf comes with a ``RuntimeWarning`` naming those rows (it would
            train on nothing); a value check, so only while :class:`structtorch.set_validation` is
            on and on CPU tensors (on a GPU reading the loss would cost a device sync: check
            ``reduction="none"`` yourself there).
        """
        if reduction not in REDUCTIONS:
            raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
        plain = self.ignore_index is None and transitions is None
        quick = self._quick(quick_nll, emissions, mask, lengths, tags) if plain else None
        if quick is not None:
            return _reduce(quick, reduction, lambda: _tokens(emissions, mask, lengths))
        return self._forward(emissions, tags, mask, lengths, reduction, transitions)

    @one_assertion()  # the general path's (the lanes check on the host, in their C++ call)
    def _forward(self, emissions: Tensor, tags: Tensor, mask: Tensor | None, lengths: LengthsLike,
                 reduction: str, transitions: Tensor | None = None) -> Tensor:
        batch = self._batch(emissions, tags, mask, lengths)
        if not isinstance(batch.tags, Tensor):
            raise TypeError(f"tags must be an integer tensor of shape {self._layout()}")
        nll = _negative_log_likelihood(batch.emissions, *self._scores(batch, transitions), batch.tags,
                                       batch.lengths, self.ignore_index)
        return _reduce(nll, reduction, lambda: batch.lengths.sum())

    def _quick(self, lane, emissions: object, mask: object, lengths: object, *args):
        """``lane`` (``quick_nll`` or ``quick_viterbi`` of :mod:`structtorch.chain.linear`) on the
        CRF's chain: its answer, or None (then the general path: a mask that is not a prefix of
        each row, partial tags, a call the lane declines)."""
        if not isinstance(emissions, Tensor):
            return None
        if not self.batch_first:
            if emissions.dim() != 3 or any(isinstance(x, Tensor) and x.dim() != 2 for x in (mask, *args)):
                return None
            emissions = emissions.transpose(0, 1)
            mask, *args = (x.transpose(0, 1) if isinstance(x, Tensor) else x for x in (mask, *args))
        return lane(emissions, *self.scores(), lengths, mask, *args)

    def log_likelihood(self, emissions: Tensor, tags: Tensor, mask: Tensor | None = None, *,
                       lengths: LengthsLike = None, reduction: str = "none",
                       transitions: Tensor | None = None) -> Tensor:
        """log p(tags | emissions) (<= 0): minus :meth:`forward`, pytorch-crf's ``forward``
        convention (its default reduction is "sum")."""
        return -self.forward(emissions, tags, mask, lengths=lengths, reduction=reduction,
                             transitions=transitions)

    # -- inference ------------------------------------------------------------------------------

    def decode(self, emissions: Tensor, mask: Tensor | None = None, *, lengths: LengthsLike = None,
               k: int | None = None, transitions: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Best labeling (Viterbi), or the k best with ``k``.

        Returns
        -------
        score : Tensor (B,), or (B, k) descending with ``k``
        path : Tensor (B, T) int64, or (B, k, T) with ``k``
            -1 outside each sequence (and on rows with no valid labeling); (T, B) or (T, B, k) when
            ``batch_first=False``.
        """
        plain = k is None and transitions is None
        quick = self._quick(quick_viterbi, emissions, mask, lengths) if plain else None
        if quick is not None:
            return quick[0], quick[1] if self.batch_first else quick[1].t()
        return self._decode(emissions, mask, lengths, k, transitions)

    @one_assertion()
    def _decode(self, emissions: Tensor, mask: Tensor | None, lengths: LengthsLike,
                k: int | None, transitions: Tensor | None = None) -> tuple[Tensor, Tensor]:
        batch = self._batch(emissions, None, mask, lengths)
        trans, start, end = self._scores(batch, transitions)
        if k is None:
            score, path = _on_chain(viterbi_chain, batch.emissions, trans, start, end, batch.lengths)
            return score, self._out(path, batch, -1)
        scores, paths = _on_chain(kbest_chain, batch.emissions, trans, start, end, batch.lengths, k)
        paths = batch.align(paths.transpose(1, 2), -1)  # (B, T, k)
        return scores, paths.transpose(1, 2) if self.batch_first else paths.transpose(0, 1)

    @one_assertion()
    def log_partition(self, emissions: Tensor, mask: Tensor | None = None, *,
                      lengths: LengthsLike = None, transitions: Tensor | None = None) -> Tensor:
        """log Z (B,): log of the sum over all (valid) labelings of exp(score) (``transitions`` as
        for :meth:`forward`)."""
        batch = self._batch(emissions, None, mask, lengths)
        trans, start, end = self._scores(batch, transitions)
        return _on_chain(log_partition_chain, batch.emissions, trans, start, end, batch.lengths)

    @one_assertion()
    def marginals(self, emissions: Tensor, mask: Tensor | None = None, *, lengths: LengthsLike = None,
                  edges: bool = False,
                  transitions: Tensor | None = None) -> Tensor | tuple[Tensor, Tensor]:
        """Node marginals p(y_t = j) (B, T, N), 0 outside each sequence; with ``edges`` also the
        edge marginals p(y_t = i, y_{t+1} = j) (B, T-1, N, N), indexed by the edge's first
        position (0 outside). Time-first when ``batch_first=False``. ``transitions`` as for
        :meth:`forward`."""
        batch = self._batch(emissions, None, mask, lengths)
        if not edges:
            trans, start, end = self._scores(batch, transitions)
            node = _on_chain(marginals_chain, batch.emissions, trans, start, end, batch.lengths)
            return self._out(node, batch, 0)
        dist = self._distribution(batch, transitions)
        edge = batch.moved.put_edges(dist.edge_marginals, 0)
        return self._out(dist.marginals, batch, 0), edge if self.batch_first else edge.transpose(0, 1)

    def distribution(self, emissions: Tensor, mask: Tensor | None = None, *,
                     lengths: LengthsLike = None) -> ChainDistribution:
        """The distribution p(y | emissions) as a :class:`structtorch.ChainDistribution` over the
        compacted, batch-first sequences (its per-position results are not moved back to the
        mask's positions)."""
        return self._distribution(self._batch(emissions, None, mask, lengths))

    def _distribution(self, batch: _Batch, transitions: Tensor | None = None) -> ChainDistribution:
        from ..distributions import ChainDistribution

        trans, start, end = self._scores(batch, transitions)
        return ChainDistribution(batch.emissions, trans, start=start, end=end, lengths=batch.lengths)

    def entropy(self, emissions: Tensor, mask: Tensor | None = None, *,
                lengths: LengthsLike = None) -> Tensor:
        """Entropy of p(y | emissions) (B,), exact; differentiable."""
        return self.distribution(emissions, mask, lengths=lengths).entropy

    def sample(self, emissions: Tensor, n: int, mask: Tensor | None = None, *, lengths: LengthsLike = None,
               generator: torch.Generator | None = None) -> Tensor:
        """``n`` labelings per sequence drawn from p(y | emissions): (n, B, T) int64 (forward
        filtering, backward sampling), -1 outside each sequence; (n, T, B) when ``batch_first=False``."""
        batch = self._batch(emissions, None, mask, lengths)
        draws = self._distribution(batch).sample(n, generator=generator)  # (n, B, T)
        aligned = batch.align(draws.permute(1, 2, 0), -1)  # (B, T, n)
        return aligned.permute(2, 0, 1) if self.batch_first else aligned.permute(2, 1, 0)


def _tokens(emissions: Tensor, mask: Tensor | None, lengths: Tensor | None) -> Tensor | int:
    """The number of tokens of a batch (a mask's count, the lengths' sum, or B T)."""
    if mask is not None:
        return mask.sum()
    return lengths.sum() if lengths is not None else emissions.shape[0] * emissions.shape[1]


def _reduce(nll: Tensor, reduction: str, tokens) -> Tensor:
    """Per-sequence losses reduced; ``tokens()`` (a tensor or an int) counts the tokens for
    "token_mean". A reduction over +inf rows warns naming them (:func:`warn_infinite_loss`)."""
    if reduction == "none":
        return nll
    if reduction != "token_mean":
        reduced = reduce_batch(nll, reduction)
    else:
        count = tokens()
        count = count.clamp(min=1).to(nll.dtype) if isinstance(count, Tensor) else max(count, 1)
        reduced = nll.sum() / count
    return warn_infinite_loss(nll, reduced, "the negative log-likelihood")


def _check_constraints(constraints: Constraints, N: int) -> tuple[Tensor, Tensor, Tensor]:
    ones = torch.ones(N, dtype=torch.bool)
    if constraints is None:
        return torch.ones(N, N, dtype=torch.bool), ones, ones.clone()
    parts = [constraints] if isinstance(constraints, Tensor) else list(constraints)
    if len(parts) == 1:
        parts += [ones, ones.clone()]
    if len(parts) != 3 or not all(isinstance(p, Tensor) for p in parts):
        raise TypeError("constraints must be an (N, N) bool tensor or a tuple (allowed (N, N), allowed_start "
                        "(N,), allowed_end (N,)) of bool tensors, e.g. allowed_transitions('BIO', tags)")
    for name, p, shape in zip(("allowed", "allowed_start", "allowed_end"), parts, ((N, N), (N,), (N,)),
                              strict=True):
        if p.dtype != torch.bool or p.shape != shape:
            raise ValueError(f"constraints: {name} must be a bool tensor of shape {_fmt(shape)}, "
                             f"got {p.dtype} {_fmt(p.shape)}")
    return tuple(p.detach().cpu().clone() for p in parts)


@mixed_precision
def _on_chain(fn, emissions: Tensor, transitions: Tensor, start: Tensor, end: Tensor, lengths: Tensor,
              *args):
    """``fn(chain, *args)`` of the CRF's chain, validated once (errors name ``emissions``)."""
    return fn(check_chain(emissions, transitions, start, end, lengths, name="emissions"), *args)


@mixed_precision
def _negative_log_likelihood(unary: Tensor, transitions: Tensor, start: Tensor, end: Tensor, labels: Tensor,
                             lengths: Tensor, ignore_index: int | None) -> Tensor:
    """(B,) logZ - score(labels) (logZ - logZ(consistent) for partial tags), in the accumulation
    precision, cast once (+inf stays: a labeling with probability 0, or no valid labeling at all)."""
    chain = check_chain(unary, transitions, start, end, lengths, name="emissions")
    return chain_loss(chain, labels, ignore_index, name="tags")
