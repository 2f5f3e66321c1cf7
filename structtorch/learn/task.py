"""The model with its loss, as every solver and :func:`structtorch.train.fit` see it: the batch
loss, the decoding, the regularizer, the parameters trained and their snapshots.

The model/loss pairs (the loss protocol of :mod:`structtorch.learn.train`):

* the model returns chain potentials ``(unary, transitions[, start, end])`` and the loss is
  ``loss(unary, transitions, labels, lengths=, start=, end=)``; decoding is Viterbi;
* the model's ``forward`` takes ``lengths`` and returns a structure (anything with
  ``loss_augmented`` and ``argmax``): the loss is ``loss(structure, labels)`` (``(labels, starts)``
  for data with segment ``starts``), decoding its argmax (in the labels' form through the
  structure's ``as_target`` where it has one: a segmentation's labels; a dependency tree's words'
  heads, the labels of tree data being the head of each word, 0 for the root);
* the loss is a :class:`structtorch.LinearChainCRF`: the model returns the unary scores alone, the
  loss is the CRF's mean NLL, decoding the CRF's, and the CRF's parameters are trained too.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Mapping

import torch
from torch import Tensor, nn

from ..chain import viterbi
from ..metrics import Metric
from ..nn.crf import LinearChainCRF
from ..sequence_data import SequenceData

__all__ = ["Task"]


def _as_potentials(out: object) -> dict[str, Tensor]:
    if isinstance(out, Tensor):
        raise TypeError("the model must return (unary, transitions) or (unary, transitions, start, end); "
                        "it returned one tensor, which fits only a LinearChainCRF as the loss (the CRF "
                        "holds the transitions)")
    if not isinstance(out, (tuple, list)) or len(out) not in (2, 4):
        raise TypeError("the model must return (unary, transitions) or (unary, transitions, start, end)")
    return dict(zip(("unary", "transitions", "start", "end"), out, strict=False))


def _is_structure(out: object) -> bool:
    """Whether a model output is a structure (a :class:`structtorch.ChainDistribution`, ...): it
    carries loss-augmented inference and a best structure."""
    return hasattr(out, "loss_augmented") and hasattr(out, "argmax")


def _scalar(value: object) -> Tensor:
    if not isinstance(value, Tensor):
        raise TypeError(f"the loss must return a scalar tensor (the mean over the batch), got "
                        f"{type(value).__name__}")
    if value.numel() != 1:
        raise ValueError(f"the loss must return a scalar tensor (the mean over the batch), got shape "
                         f"{tuple(value.shape)}: use reduction='mean' (a LinearChainCRF is taken as the loss "
                         "directly: fit(model, data, crf))")
    return value.reshape(())


def _takes_lengths(model: nn.Module) -> bool:
    try:
        return "lengths" in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):  # no introspectable signature
        return False


class _SquaredNorm(torch.autograd.Function):
    """||p||^2 as one dot product, with the gradient 2 g p in one pass (``p.pow(2).sum()`` makes
    three passes over p backward: a cost with millions of weights, e.g. sparse features)."""

    @staticmethod
    def forward(ctx, p: Tensor) -> Tensor:
        ctx.save_for_backward(p)
        flat = p.reshape(-1)
        return torch.dot(flat, flat)

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        (p,) = ctx.saved_tensors
        return p * (2 * grad)


class Task:
    """The model with its loss: the batch loss, the decoding and the parameters trained.

    Parameters
    ----------
    model : nn.Module
    loss : callable or LinearChainCRF
        The loss protocol (see the module docstring).
    """

    def __init__(self, model: nn.Module, loss: object) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
        self.model = model
        self.crf = loss if isinstance(loss, LinearChainCRF) else None
        if self.crf is None and not callable(loss):
            raise TypeError(f"loss must be callable (the loss protocol: see structtorch.learn.train), got "
                            f"{type(loss).__name__}")
        self.loss = loss
        self.modules = [model] if self.crf is None else [model, self.crf]
        seen: dict[int, nn.Parameter] = {}
        for m in self.modules:
            for p in m.parameters():
                seen.setdefault(id(p), p)
        self.parameters = list(seen.values())
        self.takes_lengths = _takes_lengths(model)

    # -- the model's outputs ---------------------------------------------------------------------

    def _unary(self, x: Tensor) -> Tensor:
        out = self.model(x)
        if not isinstance(out, Tensor):
            raise TypeError("with a LinearChainCRF as the loss the model must return the unary scores "
                            "(B, T, N) alone: the CRF holds the transition, start and end scores (to "
                            "train the model's own transitions with the CRF likelihood, pass "
                            "loss=st.train.chain_nll)")
        return out

    def _output(self, batch: SequenceData) -> object:
        """The model's output: ``model(x, lengths=lengths)`` when its forward takes ``lengths`` (so it
        can return a structure), else ``model(x)``."""
        if self.takes_lengths:
            return self.model(batch.x, lengths=batch.lengths)
        return self.model(batch.x)

    def batch_loss(self, batch: SequenceData) -> Tensor:
        """The loss's mean over ``batch`` (a scalar with autograd)."""
        if self.crf is not None:
            nll = self.crf(self._unary(batch.x), batch.labels, lengths=batch.lengths)
            return nll.sum() / max(len(batch), 1) if nll.dim() else nll
        return _scalar(self._apply(self.loss, batch))

    def _apply(self, loss: object, batch: SequenceData) -> Tensor:
        """``loss`` on the model's output for ``batch``: ``loss(structure, target)`` (target
        ``(labels, starts)`` for segment data), else ``loss(unary, transitions, labels, ...)``, with
        ``cost=`` the batch's costs where the data has them."""
        out = self._output(batch)
        cost = {} if batch.cost is None else {"cost": batch.cost}  # the data's costs (SequenceData.cost)
        if _is_structure(out):  # loss(structure, target), e.g. StructuredHingeLoss
            target = batch.labels if batch.starts is None else (batch.labels, batch.starts)
            return loss(out, target, **cost)
        pot = _as_potentials(out)
        unary, transitions = pot.pop("unary"), pot.pop("transitions")
        return loss(unary, transitions, batch.labels, lengths=batch.lengths, **pot, **cost)

    @torch.no_grad()
    def returns_structure(self, batch: SequenceData) -> bool:
        """Whether the model returns a structure (rather than chain potentials) on ``batch``."""
        return self.crf is None and _is_structure(self._output(batch))

    def sequence_losses(self, batch: SequenceData) -> Tensor:
        """The loss of each sequence of ``batch`` (B,), for a loss with a ``reduction`` attribute (a
        :class:`structtorch.StructuredHingeLoss`): the same loss with reduction "none"."""
        if self.crf is not None or not hasattr(self.loss, "reduction"):
            raise TypeError("per-sequence losses need a loss with a reduction attribute "
                            "(a StructuredHingeLoss)")
        loss = copy.copy(self.loss)
        loss.reduction = "none"
        return self._apply(loss, batch)

    @torch.no_grad()
    def decode(self, batch: SequenceData) -> Tensor:
        """The best labels (B, T) of ``batch``, -1 beyond each length."""
        if self.crf is not None:
            return self.crf.decode(self._unary(batch.x), lengths=batch.lengths)[1]
        out = self._output(batch)
        if _is_structure(out):  # in the labels' form: a segmentation's labels, a tree's words' heads
            best = out.argmax
            return out.as_target(best) if hasattr(out, "as_target") else best
        pot = _as_potentials(out)
        return viterbi(pot.pop("unary"), pot.pop("transitions"), lengths=batch.lengths, **pot)[1]

    # -- whole data sets -------------------------------------------------------------------------

    def decode_all(self, data: SequenceData, batch_size: int) -> Tensor:
        paths = [self.decode(data.batch(idx)) for idx in torch.arange(len(data)).split(batch_size)]
        return torch.cat(paths) if paths else data.labels

    def score(self, data: SequenceData, metrics: Mapping[str, Metric], batch_size: int) -> dict[str, float]:
        """``{name: fn(paths, labels, lengths)}`` over the whole of ``data``, decoded in eval mode
        (each module's mode is restored)."""
        was = [m.training for m in self.modules]
        self.train(False)
        try:
            path = self.decode_all(data, batch_size)
        finally:
            for m, mode in zip(self.modules, was, strict=True):
                m.train(mode)
        return {name: float(fn(path, data.labels, data.lengths)) for name, fn in metrics.items()}

    def penalty(self, lam: float) -> Tensor | float:
        """``lam / 2`` times the squared norm of the trained parameters; a model with a
        ``regularizer()`` method (e.g. a kernel model's ``beta^T K beta``) gives its own term for its
        parameters instead."""
        if lam == 0.0:
            return 0.0
        own = getattr(self.model, "regularizer", None)
        if callable(own):
            mine = {id(p) for p in self.model.parameters()}
            rest = [p for p in self.parameters if p.requires_grad and id(p) not in mine]
            return 0.5 * lam * (own() + sum(_SquaredNorm.apply(p) for p in rest))
        return 0.5 * lam * sum(_SquaredNorm.apply(p) for p in self.parameters if p.requires_grad)

    @torch.no_grad()
    def objective(self, data: SequenceData, lam: float, batch_size: int) -> float:
        """Mean loss over ``data`` plus :meth:`penalty`: the scaled primal."""
        total = 0.0
        for idx in torch.arange(len(data)).split(batch_size):
            total += float(self.batch_loss(data.batch(idx))) * len(idx)
        return total / max(len(data), 1) + float(self.penalty(lam))

    # -- modes and snapshots ---------------------------------------------------------------------

    def train(self, mode: bool) -> None:
        for m in self.modules:
            m.train(mode)

    def state(self) -> list[dict[str, Tensor]]:
        return [copy.deepcopy(m.state_dict()) for m in self.modules]

    def load(self, state: list[dict[str, Tensor]]) -> None:
        for m, s in zip(self.modules, state, strict=True):
            m.load_state_dict(s)
