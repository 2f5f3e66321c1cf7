"""A CRF head for token classification on any encoder, in Hugging Face's conventions.

:class:`CRFForTokenClassification` wraps an encoder (``transformers.AutoModel``, or any module
that returns hidden states), adds dropout, a linear layer to the tag scores and a
:class:`structtorch.LinearChainCRF`, and returns a ``TokenClassifierOutput`` (``loss``,
``logits``, and ``predictions`` outside training), so it trains under ``transformers.Trainer``
as under a plain loop. The chain runs over the words: each word's first sub-token, given as
``word_mask`` (:func:`structtorch.word_mask`; :class:`DataCollatorWithWordMask` pads it in a
batch), or, as the Hugging Face token-classification examples label them, the positions whose
label is not -100. Without either it runs over every attended token, which suits encoders whose
tokens are the words, not sub-word tokenizers: predict with ``word_mask`` (or labels) as the model
was trained.

Partial labels (unlabeled words) need ``word_mask``: inside it, -100 marks a word whose tag is
unknown. Without it, -100 takes the word out of the chain, so its neighbours become adjacent; under
BIO constraints a hidden ``B-X`` then leaves ``O, I-X``, an impossible sequence (an infinite loss,
no gradient from that row).

This module imports ``transformers`` (``pip install structtorch[hf]``); nothing else in
structtorch does.

Examples
--------
>>> from transformers import BertConfig, BertModel
>>> encoder = BertModel(BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1,
...                                num_attention_heads=2, intermediate_size=64))
>>> model = CRFForTokenClassification(encoder, num_labels=3)
>>> ids = torch.randint(100, (2, 6))
>>> labels = torch.tensor([[-100, 0, 1, -100, 2, -100], [-100, 1, 1, 0, -100, -100]])
>>> out = model(input_ids=ids, labels=labels)  # the chain runs where labels != -100
>>> out.loss.shape, out.logits.shape
(torch.Size([]), torch.Size([2, 6, 3]))
>>> model.decode(input_ids=ids, word_mask=labels != -100).shape  # word-level tags (B, W)
torch.Size([2, 3])
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

try:
    from transformers import DataCollatorForTokenClassification
    from transformers.modeling_outputs import TokenClassifierOutput
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise ImportError("structtorch.nn.token_classification needs the transformers package: "
                      "pip install 'structtorch[hf]' (or pip install transformers)") from error

from .._checks import (
    check_ignore_index,
    check_labels,
    check_that,
    on_host,
    plain,
    require,
    validation_enabled,
)
from .._library import NotScriptable
from .._numerics import reduce_batch
from .crf import REDUCTIONS, Constraints, LinearChainCRF
from .words import tokens_to_words

__all__ = ["CRFForTokenClassification", "CRFTokenClassifierOutput", "DataCollatorWithWordMask"]

ENCODER_INPUTS = ("input_ids", "attention_mask", "token_type_ids", "position_ids", "inputs_embeds")


@dataclass
class CRFTokenClassifierOutput(TokenClassifierOutput):
    """``TokenClassifierOutput`` (``loss``, ``logits`` (B, T, N), ``hidden_states``, ``attentions``)
    with ``predictions`` (B, T) int64: the decoded tag at each word position and ``ignore_index``
    (-100) elsewhere, the labels' convention, so that a ``compute_metrics`` filters both alike (-1
    at the words of a row with no labeling the constraints allow); set when the model is not
    training."""

    predictions: Tensor | None = None


@dataclass
class DataCollatorWithWordMask(DataCollatorForTokenClassification):
    """``transformers.DataCollatorForTokenClassification`` that also pads each example's
    ``word_mask`` (a list or tensor of T bools, e.g. ``st.word_mask([encoding.word_ids()])[0]``)
    with False, on the tokenizer's padding side, so that the word mask (and with it partial labels
    and word-level prediction) goes through ``Trainer`` batches.

    A ``word_mask`` must have one entry per token of its example's ``input_ids`` (padded on the
    padding side, a mask of another length would land on the wrong tokens), and either every
    example of a batch carries one or none does (there is no default word mask: a mask over every
    token is the wrong chain for sub-word tokens); both are ValueErrors naming the examples."""

    def torch_call(self, features: list[dict]) -> dict:
        carried = [i for i, f in enumerate(features) if "word_mask" in f]
        if not carried:
            return super().torch_call(features)
        if len(carried) < len(features):
            missing = [i for i in range(len(features)) if i not in carried]
            raise ValueError(f"word_mask is given for examples {_listed(carried)} but not for "
                             f"{_listed(missing)}: give every example of a batch a word_mask, or none")
        masks = [_example_mask(i, f["word_mask"]) for i, f in enumerate(features)]
        for i, (f, mask) in enumerate(zip(features, masks, strict=True)):
            tokens = f.get("input_ids")
            if tokens is not None and len(mask) != len(tokens):
                raise ValueError(f"word_mask of example {i} has {len(mask)} entries but its input_ids has "
                                 f"{len(tokens)} tokens: one entry per token")
        batch = super().torch_call([{k: v for k, v in f.items() if k != "word_mask"} for f in features])
        T = batch["input_ids"].shape[1]
        padded = torch.zeros(len(masks), T, dtype=torch.bool)
        for i, mask in enumerate(masks):
            if len(mask) > T:
                raise ValueError(f"word_mask of example {i} has {len(mask)} entries, more than its "
                                 f"{T} padded tokens")
            if self.tokenizer.padding_side == "left":
                padded[i, T - len(mask):] = mask
            else:
                padded[i, :len(mask)] = mask
        batch["word_mask"] = padded
        return batch


def _example_mask(i: int, mask: object) -> Tensor:
    """Example ``i``'s ``word_mask`` (a list or tensor of T bools or 0/1 ints; (1, T) too) as a (T,)
    bool tensor, or a TypeError/ValueError naming the example (it was cast with ``bool()``: 2, 0.5
    or a float tensor read as True, strings or None gave torch's own errors)."""
    try:
        tensor = torch.as_tensor(mask)
    except (TypeError, ValueError, RuntimeError):
        tensor = None
    if tensor is None or tensor.is_floating_point() or tensor.is_complex():
        got = type(mask).__name__ if tensor is None else str(tensor.dtype)
        raise TypeError(f"word_mask of example {i} must be a list or tensor of bools (or 0/1 ints), "
                        f"got {got}")
    if tensor.dim() == 2 and tensor.shape[0] == 1:
        tensor = tensor[0]
    if tensor.dim() != 1:
        raise ValueError(f"word_mask of example {i} must have one dimension, one entry per token, got shape "
                         f"{tuple(tensor.shape)}")
    if tensor.dtype != torch.bool:
        _check_binary(f"word_mask of example {i}", tensor)
    return tensor.bool()


def _check_binary(name: str, mask: Tensor) -> None:
    """A value check: an integer mask holds only 0 and 1 (another value would be read as True here
    while an encoder reads its attention mask as a number)."""
    check_that(lambda: (mask == 0) | (mask == 1), f"{name} must hold only 0 and 1 (or be a bool tensor)")


def _listed(indices: list[int], most: int = 5) -> str:
    """``[0, 2, 5]``, or its first ``most`` and how many more."""
    shown = ", ".join(map(str, indices[:most]))
    return f"[{shown}]" if len(indices) <= most else f"[{shown}, ... ({len(indices) - most} more)]"


class CRFForTokenClassification(NotScriptable, nn.Module):
    """Encoder -> dropout -> linear -> linear-chain CRF over the words of each sequence.

    Parameters
    ----------
    encoder : nn.Module
        Called with the encoder inputs that ``forward`` receives (those not None among
        ``input_ids``, ``attention_mask``, ``token_type_ids``, ``position_ids``,
        ``inputs_embeds``) plus ``output_hidden_states``/``output_attentions`` when they are given.
        It returns hidden states (B, T, H): a tensor, a tuple whose first element they are, or an
        object with ``last_hidden_state`` (a Hugging Face model output).
    num_labels : int
        N, the number of tags.
    hidden_size : int, optional
        H (default: ``encoder.config.hidden_size``).
    dropout : float, optional
        On the hidden states (default: ``encoder.config.hidden_dropout_prob``, else 0.1).
    crf : bool
        True (default): the CRF head. False: a softmax head with the same interface (per-word
        cross-entropy, per-word argmax), the usual baseline.
    constraints : optional
        Allowed transitions of the CRF, e.g. ``allowed_transitions("BIO", tags)``; decoding obeys
        them (the softmax head ignores them).
    ignore_index : int
        The label of positions outside the words (default -100, Hugging Face's) and, inside an
        explicit ``word_mask``, of unlabeled words (partial labels).
    reduction : {"mean", "sum", "token_mean", "none"}
        Of the per-sequence loss (the NLL summed over the words): averaged over sequences
        (default), summed, divided by the number of words, or per sequence (B,).

    Attributes
    ----------
    encoder : nn.Module
    classifier : nn.Linear (H -> N)
    crf : LinearChainCRF, or None for the softmax head
    """

    accepts_loss_kwargs = False  # the loss is a per-batch reduction: Trainer scales it itself

    def __init__(self, encoder: nn.Module, num_labels: int, *, hidden_size: int | None = None,
                 dropout: float | None = None, crf: bool = True, constraints: Constraints = None,
                 ignore_index: int = -100, reduction: str = "mean") -> None:
        super().__init__()
        if not isinstance(encoder, nn.Module):
            raise TypeError(f"encoder must be an nn.Module, got {type(encoder).__name__}")
        config = getattr(encoder, "config", None)
        hidden_size = hidden_size if hidden_size is not None else getattr(config, "hidden_size", None)
        if not isinstance(hidden_size, int) or hidden_size < 1:
            raise ValueError("hidden_size must be given (a positive int) when the encoder has no "
                             f"config.hidden_size, got {hidden_size!r}")
        if dropout is None:
            dropout = getattr(config, "hidden_dropout_prob", 0.1)
        if reduction not in REDUCTIONS:
            raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
        if ignore_index is None:
            raise TypeError("ignore_index must be an int, got None")
        check_ignore_index(ignore_index, num_labels)
        self.encoder = encoder
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(hidden_size, num_labels)
        self.crf = (LinearChainCRF(num_labels, constraints=constraints, ignore_index=ignore_index)
                    if crf else None)
        self.num_labels, self.ignore_index, self.reduction = num_labels, ignore_index, reduction

    @classmethod
    def from_pretrained_encoder(cls, path: str, num_labels: int, **kwargs) -> CRFForTokenClassification:
        """A new head on ``transformers.AutoModel.from_pretrained(path)`` (a local directory or a
        hub name); ``kwargs`` go to the constructor. A trained model (a ``Trainer`` checkpoint
        holds its state dict) is reloaded by building it again and ``load_state_dict``."""
        from transformers import AutoModel

        return cls(AutoModel.from_pretrained(path), num_labels, **kwargs)

    def extra_repr(self) -> str:
        return f"num_labels={self.num_labels}, head={'crf' if self.crf is not None else 'softmax'}"

    # -- forward ----------------------------------------------------------------------------------

    def forward(self, input_ids: Tensor | None = None, attention_mask: Tensor | None = None,
                token_type_ids: Tensor | None = None, position_ids: Tensor | None = None,
                inputs_embeds: Tensor | None = None, labels: Tensor | None = None,
                word_mask: Tensor | None = None, output_attentions: bool | None = None,
                output_hidden_states: bool | None = None,
                return_dict: bool | None = None) -> CRFTokenClassifierOutput | tuple:
        """Tag scores, and the loss when ``labels`` are given.

        Parameters
        ----------
        input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds : Tensor, optional
            The encoder's inputs, (B, T) (``inputs_embeds`` (B, T, E)).
        labels : Tensor (B, T) integer, or (B, T, N) bool, optional
            A tag per word position; ``ignore_index`` elsewhere, and, inside an explicit
            ``word_mask``, at unlabeled words. Or the set of allowed tags per position (needs
            ``word_mask``). Partial targets are trained on the total probability of the
            labelings consistent with them (see :class:`structtorch.LinearChainCRF`). A labeled
            position (inside ``word_mask``, or any label other than ``ignore_index`` without it)
            where ``attention_mask`` is 0 is an error (a value check, see
            :class:`structtorch.set_validation`): the loss would drop it.
        word_mask : Tensor (B, T) bool, optional
            The positions the chain runs over, in order (:func:`structtorch.word_mask`). Default:
            ``labels != ignore_index`` when integer labels are given, else ``attention_mask`` (every
            token: pass ``word_mask`` to predict per word as the model was trained).
        return_dict : bool, optional
            False: the output's fields as a tuple, without the None entries (``(loss, logits,
            hidden_states, attentions, predictions)`` at most).

        Returns
        -------
        CRFTokenClassifierOutput
            ``loss`` (scalar, or (B,) with ``reduction="none"``; None without labels), ``logits``
            (B, T, N) the per-token tag scores, ``predictions`` (B, T) outside training.
        """
        inputs = dict(zip(ENCODER_INPUTS, (input_ids, attention_mask, token_type_ids, position_ids,
                                           inputs_embeds), strict=True))
        extra = {"output_attentions": output_attentions, "output_hidden_states": output_hidden_states}
        given, attended = input_ids if isinstance(input_ids, Tensor) else inputs_embeds, attention_mask
        if attention_mask is not None and isinstance(given, Tensor) and given.dim() >= 2:
            # checked before the encoder, which may fail on it with an error of its own
            attended = _position_mask("attention_mask", attention_mask, tuple(given.shape[:2]))
        encoded = self.encoder(**{k: v for k, v in {**inputs, **extra}.items() if v is not None})
        logits = self.classifier(self.dropout(_hidden_states(encoded)))
        mask = self._mask(logits, labels, word_mask, attended)
        loss = None if labels is None else self.loss(logits, labels, mask)
        predictions = None if self.training else self._predict(logits, mask)
        out = CRFTokenClassifierOutput(loss=loss, logits=logits, predictions=predictions,
                                       hidden_states=getattr(encoded, "hidden_states", None),
                                       attentions=getattr(encoded, "attentions", None))
        return out if return_dict is not False else out.to_tuple()

    def _mask(self, logits: Tensor, labels: Tensor | None, word_mask: Tensor | None,
              attention_mask: Tensor | None) -> Tensor:
        B, T, N = logits.shape
        _check_labels(labels, (B, T, N))
        if word_mask is not None:
            mask = _position_mask("word_mask", word_mask, (B, T)).to(logits.device)
        elif labels is not None and labels.dim() == 2:
            mask = labels.to(logits.device) != self.ignore_index
        elif labels is not None:
            raise ValueError("labels given as (B, T, N) sets of allowed tags need word_mask")
        else:
            mask = torch.ones(B, T, dtype=torch.bool, device=logits.device)
        if attention_mask is not None:
            attended = _position_mask("attention_mask", attention_mask, (B, T)).to(logits.device)
            if labels is not None and validation_enabled():
                labeled = mask if labels.dtype == torch.bool else (
                    mask & (labels.to(mask.device) != self.ignore_index))
                _check_attended(labeled & ~attended, self.ignore_index)
            mask = mask & attended
        return mask

    def loss(self, logits: Tensor, labels: Tensor, mask: Tensor) -> Tensor:
        """The loss of tag scores (B, T, N) against ``labels`` over the positions of ``mask`` (B, T):
        the CRF's NLL (or the softmax head's summed cross-entropy) per sequence, reduced."""
        _check_labels(labels, tuple(logits.shape))
        labels = labels.to(logits.device)
        known = None if labels.dtype == torch.bool else mask & (labels != self.ignore_index)
        if known is not None:  # checked here, so that an error names `labels`
            check_labels(labels, known, self.num_labels)
        if self.crf is not None:
            return self.crf(logits, labels, mask, reduction=self.reduction)
        allowed = labels if known is None else _allowed(labels, known, self.num_labels)
        scores = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
        nll = scores.logsumexp(-1) - scores.masked_fill(~allowed, float("-inf")).logsumexp(-1)
        per_sequence = torch.where(mask, nll, 0.0).sum(1)
        if self.reduction == "token_mean":
            return per_sequence.sum() / mask.sum().clamp(min=1)
        return reduce_batch(per_sequence, self.reduction)

    # -- decoding ---------------------------------------------------------------------------------

    def _predict(self, logits: Tensor, mask: Tensor) -> Tensor:
        """The decoded tag at each mask position, ``ignore_index`` elsewhere (B, T)."""
        with torch.no_grad():
            if self.crf is None:
                path = logits.argmax(-1)
            else:
                path = self.crf.decode(logits, mask)[1]
            return torch.where(mask, path, self.ignore_index)

    @torch.no_grad()
    def decode(self, *, word_mask: Tensor, **inputs: Tensor) -> Tensor:
        """Word-level tags (B, W): the best labeling of each sequence's words (Viterbi under the
        constraints; the softmax head: per-word argmax), -1 beyond each row's words.

        Parameters
        ----------
        word_mask : Tensor (B, T) bool
            Each word's first sub-token (:func:`structtorch.word_mask`).
        **inputs : Tensor
            The encoder's inputs (``input_ids``, ``attention_mask``, ...).
        """
        unknown = set(inputs) - set(ENCODER_INPUTS)
        if unknown:
            raise TypeError(f"decode takes the encoder inputs {ENCODER_INPUTS} and word_mask, got "
                            f"{sorted(unknown)}")
        training = self.training
        self.eval()
        try:
            predictions = self.forward(**inputs, word_mask=word_mask).predictions
        finally:
            self.train(training)
        mask = word_mask.to(predictions.device).bool()
        if inputs.get("attention_mask") is not None:
            mask = mask & inputs["attention_mask"].to(mask.device).bool()
        return tokens_to_words(predictions, mask, fill=-1)


def _hidden_states(encoded: object) -> Tensor:
    if isinstance(encoded, Tensor):
        return encoded
    hidden = getattr(encoded, "last_hidden_state", None)
    if hidden is None and isinstance(encoded, (tuple, list)) and encoded:
        hidden = encoded[0]
    if not isinstance(hidden, Tensor) or hidden.dim() != 3:
        raise TypeError("the encoder must return hidden states (B, T, H): a tensor, a tuple starting with "
                        f"one, or an object with last_hidden_state; got {type(encoded).__name__}")
    return hidden


def _check_labels(labels: object, shape: tuple[int, int, int]) -> None:
    """``labels``: None, (B, T) integer, or (B, T, N) bool."""
    if labels is None:
        return
    B, T, N = shape
    if not isinstance(labels, Tensor):
        raise TypeError("labels must be a tensor, (B, T) integer or (B, T, N) bool, got "
                        f"{type(labels).__name__}")
    if labels.dtype == torch.bool:
        if labels.shape != (B, T, N):
            raise ValueError("labels as sets of allowed tags must have shape (B, T, N) = "
                             f"{(B, T, N)}, got {tuple(labels.shape)}")
    elif labels.is_floating_point() or labels.is_complex() or labels.shape != (B, T):
        raise ValueError(f"labels must be an integer tensor of shape (B, T) = {(B, T)} or a bool tensor of "
                         f"shape (B, T, N) = {(B, T, N)}, got {labels.dtype} {tuple(labels.shape)}")


def _position_mask(name: str, mask: object, shape: tuple[int, int]) -> Tensor:
    """A (B, T) bool or integer (0/1) mask, as bool."""
    if not isinstance(mask, Tensor) or mask.shape != shape or mask.is_floating_point() or mask.is_complex():
        described = f"{mask.dtype} {tuple(mask.shape)}" if isinstance(mask, Tensor) else type(mask).__name__
        raise ValueError(f"{name} must be a bool or integer tensor of shape (B, T) = {shape}, "
                         f"got {described}")
    if mask.dtype != torch.bool:
        _check_binary(name, mask)
    return mask.bool()


def _check_attended(dropped: Tensor, ignore_index: int) -> None:
    """A value check: no labeled position (B, T) has ``attention_mask`` 0 (its label would be
    dropped without a word: a wrong attention mask trains on nothing). On the host a ValueError
    listing the positions; elsewhere an asynchronous device assertion (no host sync)."""
    if not on_host(dropped):
        require(~dropped, "labels are given at positions where attention_mask is 0")
        return
    dropped = plain(dropped)
    if bool(dropped.any()):
        where = [tuple(p) for p in dropped.nonzero().tolist()]
        raise ValueError(f"labels are given at {len(where)} (row, position) pairs where attention_mask is "
                         f"0, which the loss would drop: {_listed(where)}; give those positions the label "
                         f"ignore_index = {ignore_index} (or leave them out of word_mask), or fix "
                         "attention_mask")


def _allowed(labels: Tensor, known: Tensor, N: int) -> Tensor:
    """(B, T, N) bool: the label's one-hot where ``known``, every label elsewhere."""
    one_hot = torch.nn.functional.one_hot(torch.where(known, labels, 0).long(), N).bool()
    return one_hot | ~known.unsqueeze(-1)
