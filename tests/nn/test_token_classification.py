"""CRFForTokenClassification: the CRF (or softmax) head on an encoder, in Hugging Face's conventions."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch import nn

import structtorch as st

transformers = pytest.importorskip("transformers")
from structtorch.nn.token_classification import (  # noqa: E402
    CRFForTokenClassification,
    DataCollatorWithWordMask,
)

N, V, H = 3, 50, 16


def bert(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    config = transformers.BertConfig(vocab_size=V, hidden_size=H, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=32, max_position_embeddings=32)
    return transformers.BertModel(config)


class Embedder(nn.Module):
    """A plain encoder: token embeddings, returned as a tensor."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(V, H)

    def forward(self, input_ids, attention_mask=None):
        return self.embed(input_ids)


# [CLS] w0 w0' w1 w2 [SEP] pad | [CLS] w0 w1 w1' [SEP] pad pad
WORD_IDS = [[None, 0, 0, 1, 2, None, None], [None, 0, 1, 1, None, None, None]]
ATTENTION = torch.tensor([[1, 1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 0, 0]])
LABELS = torch.tensor([[-100, 0, -100, 1, 2, -100, -100], [-100, 1, 2, -100, -100, -100, -100]])


def batch(**extra):
    g = torch.Generator().manual_seed(1)
    return {"input_ids": torch.randint(V, (2, 7), generator=g), "attention_mask": ATTENTION, **extra}


def test_loss_is_the_crf_nll_over_the_labelled_positions():
    model = CRFForTokenClassification(bert(), N, dropout=0.0).eval()
    out = model(**batch(labels=LABELS))
    assert out.logits.shape == (2, 7, N)
    expected = model.crf(out.logits, LABELS, LABELS != -100, reduction="mean")
    torch.testing.assert_close(out.loss, expected)
    # by enumeration over the words' labelings: -log p(gold)
    trans, start, end = model.crf.scores()
    nlls = []
    for b in range(2):
        pos = (LABELS[b] != -100).nonzero().flatten()
        em = out.logits[b, pos]

        def score(y, em=em):
            return start[y[0]] + end[y[-1]] + em[torch.arange(len(y)), list(y)].sum() + sum(
                trans[y[i], y[i + 1]] for i in range(len(y) - 1))

        logz = torch.logsumexp(torch.stack([score(y) for y in itertools.product(range(N), repeat=len(pos))]), 0)
        nlls.append(logz - score(LABELS[b, pos].tolist()))
    torch.testing.assert_close(out.loss, torch.stack(nlls).mean())


def test_word_mask_partial_labels_and_predictions():
    model = CRFForTokenClassification(bert(), N, dropout=0.0, reduction="none").eval()
    mask = st.word_mask(WORD_IDS)
    partial = LABELS.clone()
    partial[0, 3] = -100  # word 1 of row 0 unlabeled: inside the word mask
    out = model(**batch(labels=partial, word_mask=mask))
    crf = st.LinearChainCRF(N, ignore_index=-100)
    crf.load_state_dict(model.crf.state_dict())
    torch.testing.assert_close(out.loss, crf(out.logits, partial, mask))
    # the partial loss is below the full one: more labelings are consistent
    full = model(**batch(labels=LABELS, word_mask=mask)).loss
    assert out.loss[0] < full[0] and torch.isclose(out.loss[1], full[1])
    # predictions: the Viterbi tags at the word positions, -100 elsewhere
    path = model.crf.decode(out.logits, mask)[1]
    torch.testing.assert_close(out.predictions, torch.where(mask, path, -100))
    words = model.decode(**batch(), word_mask=mask)
    assert words.shape == (2, 3)
    torch.testing.assert_close(words, st.tokens_to_words(path, mask, fill=-1))
    assert words[1, 2] == -1  # row 1 has two words


def test_allowed_label_sets_equal_ignore_index():
    model = CRFForTokenClassification(bert(), N, dropout=0.0, reduction="none").eval()
    mask = st.word_mask(WORD_IDS)
    partial = LABELS.clone()
    partial[1, 2] = -100
    sets = torch.ones(2, 7, N, dtype=torch.bool)
    known = mask & (partial != -100)
    sets[known] = torch.nn.functional.one_hot(partial[known], N).bool()
    by_index = model(**batch(labels=partial, word_mask=mask)).loss
    torch.testing.assert_close(model(**batch(labels=sets, word_mask=mask)).loss, by_index)
    with pytest.raises(ValueError, match="need word_mask"):
        model(**batch(labels=sets))
    with pytest.raises(ValueError, match="labels as sets"):
        model(**batch(labels=sets[..., :2], word_mask=mask))


@pytest.mark.parametrize("reduction", ["mean", "sum", "token_mean", "none"])
def test_softmax_head_is_the_per_word_cross_entropy(reduction):
    model = CRFForTokenClassification(bert(), N, dropout=0.0, crf=False, reduction=reduction).eval()
    assert model.crf is None
    out = model(**batch(labels=LABELS))
    logp = out.logits.log_softmax(-1)
    known = LABELS != -100
    per_word = torch.where(known, -logp.gather(-1, LABELS.clamp(min=0).unsqueeze(-1))[..., 0], 0.0)
    per_sequence = per_word.sum(1)
    expected = {"mean": per_sequence.mean(), "sum": per_sequence.sum(), "none": per_sequence,
                "token_mean": per_sequence.sum() / known.sum()}[reduction]
    torch.testing.assert_close(out.loss, expected)
    torch.testing.assert_close(out.predictions, torch.where(known, out.logits.argmax(-1), -100))
    # partial: an unlabeled word inside the word mask costs nothing; a set costs -log p(set)
    mask = st.word_mask(WORD_IDS)
    sets = torch.zeros(2, 7, N, dtype=torch.bool)
    sets[mask] = torch.nn.functional.one_hot(LABELS[mask].clamp(min=0), N).bool()
    sets[0, 4] = torch.tensor([True, True, False])  # word 2 of row 0: tag 0 or 1
    sets[1, 2] = True  # word 1 of row 1: unknown
    model.reduction = "none"
    loss = model(**batch(labels=sets, word_mask=mask)).loss
    row0 = -logp[0, 1, 0] - logp[0, 3, 1] - torch.logsumexp(logp[0, 4, :2], 0)
    torch.testing.assert_close(loss, torch.stack([row0, -logp[1, 1, 1]]))


def test_any_encoder_module_and_gradients():
    model = CRFForTokenClassification(Embedder(), N, hidden_size=H)
    out = model(input_ids=batch()["input_ids"], labels=LABELS)
    out.loss.backward()
    for p in (model.encoder.embed.weight, model.classifier.weight, model.crf.transitions):
        assert p.grad is not None and p.grad.abs().sum() > 0
    assert out.predictions is None  # training mode: no decoding
    loss, logits = model(input_ids=batch()["input_ids"], labels=LABELS, return_dict=False)
    assert loss.dim() == 0 and logits.shape == (2, 7, N)


def test_errors_name_the_argument():
    with pytest.raises(ValueError, match="hidden_size"):
        CRFForTokenClassification(Embedder(), N)
    with pytest.raises(TypeError, match="encoder"):
        CRFForTokenClassification(lambda x: x, N, hidden_size=H)
    with pytest.raises(ValueError, match="reduction"):
        CRFForTokenClassification(bert(), N, reduction="avg")
    model = CRFForTokenClassification(bert(), N)
    with pytest.raises(ValueError, match="word_mask"):
        model(**batch(word_mask=torch.ones(2, 5, dtype=torch.bool)))
    with pytest.raises(ValueError, match="labels"):
        model(**batch(labels=torch.where(LABELS == 2, 7, LABELS)))
    with pytest.raises(TypeError, match="labels must be a tensor"):
        model(**batch(labels=LABELS.tolist()))
    for bad in (LABELS[:, :5], LABELS.float(), torch.zeros(2, 7, N, dtype=torch.long)):
        with pytest.raises(ValueError, match="labels must be an integer tensor of shape"):
            model(**batch(labels=bad))
    with pytest.raises(ValueError, match="attention_mask must be"):
        plain = CRFForTokenClassification(Embedder(), N, hidden_size=H)  # an encoder that ignores the mask
        plain(input_ids=batch()["input_ids"], labels=LABELS, attention_mask=ATTENTION[:, :5])
    with pytest.raises(ValueError, match="word_mask must be a bool or integer"):
        model(**batch(word_mask=st.word_mask(WORD_IDS).float()))
    with pytest.raises(TypeError, match="decode takes"):
        model.decode(input_ids=batch()["input_ids"], word_mask=st.word_mask(WORD_IDS), labels=LABELS)


def test_trains_under_the_hugging_face_trainer(tmp_path):
    """Trainer finds the labels and the loss, trains, and hands predictions to compute_metrics."""
    rows = [{"input_ids": batch()["input_ids"][i], "attention_mask": ATTENTION[i], "labels": LABELS[i]}
            for i in range(2)] * 4
    model = CRFForTokenClassification(bert(), N, constraints=st.allowed_transitions("BIO", ["O", "B-X", "I-X"]))
    seen = {}

    def metrics(prediction):
        logits, predictions = prediction.predictions
        seen["predictions"] = torch.as_tensor(predictions)
        known = prediction.label_ids != -100
        return {"agree": float((predictions == prediction.label_ids)[known].mean())}

    args = transformers.TrainingArguments(output_dir=str(tmp_path), max_steps=4, per_device_train_batch_size=4,
                                          per_device_eval_batch_size=4, learning_rate=1e-2, report_to=[],
                                          use_cpu=True, save_strategy="no", logging_strategy="no",
                                          disable_tqdm=True)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=rows, eval_dataset=rows,
                                   compute_metrics=metrics)
    before = model.crf.transitions.detach().clone()
    trainer.train()
    assert not torch.equal(before, model.crf.transitions)
    result = trainer.evaluate()
    model.eval()
    with torch.no_grad():
        own = model(**batch(labels=LABELS))
    # what compute_metrics saw: the model's own Viterbi tags at the labelled positions
    torch.testing.assert_close(seen["predictions"], own.predictions.repeat(4, 1))
    agree = (own.predictions == LABELS)[LABELS != -100].float().mean()
    assert result["eval_agree"] == pytest.approx(float(agree))
    torch.testing.assert_close(torch.tensor(result["eval_loss"]), own.loss)


def test_the_collator_carries_word_masks_through_the_trainer(tmp_path):
    """Variable-length examples with word masks and partial labels: padded by the collator, trained on,
    and predicted without labels over the words (not over every token)."""
    tokenizer = _tokenizer()
    rows, masks = [], []
    for i, words in enumerate([["the", "cat", "sat"], ["a", "dog"], ["cats", "sat", "down", "here"]]):
        enc = tokenizer(words, is_split_into_words=True)
        mask = st.word_mask([enc.word_ids()])[0]
        labels = torch.full((len(mask),), -100)
        labels[mask] = torch.arange(int(mask.sum())) % N
        labels[mask.nonzero()[-1]] = -100 if i == 2 else labels[mask.nonzero()[-1]]  # an unlabeled word
        rows.append({"input_ids": enc["input_ids"], "word_mask": mask.tolist(), "labels": labels.tolist()})
        masks.append(mask)
    collate = DataCollatorWithWordMask(tokenizer)
    padded = collate(rows)
    assert padded["word_mask"].dtype == torch.bool and padded["word_mask"].shape == padded["input_ids"].shape
    for i, mask in enumerate(masks):
        assert torch.equal(padded["word_mask"][i, :len(mask)], mask) and not padded["word_mask"][i, len(mask):].any()
    model = CRFForTokenClassification(bert(), N)
    args = transformers.TrainingArguments(output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=3,
                                          report_to=[], use_cpu=True, save_strategy="no", disable_tqdm=True,
                                          logging_strategy="no")
    unlabeled = [{k: v for k, v in r.items() if k != "labels"} for r in rows]
    trainer = transformers.Trainer(model=model, args=args, train_dataset=rows, data_collator=collate)
    trainer.train()
    _, predictions = trainer.predict(unlabeled).predictions
    words = model.decode(input_ids=padded["input_ids"], attention_mask=padded["attention_mask"],
                         word_mask=padded["word_mask"])
    for i, mask in enumerate(masks):
        row = torch.as_tensor(predictions[i])
        assert (row[len(mask):] == -100).all() and (row[:len(mask)][~mask] == -100).all()
        assert torch.equal(row[:len(mask)][mask], words[i, :int(mask.sum())])


def _tokenizer():
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer(tokenizers.models.WordPiece(unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    tok.train_from_iterator(["the cat sat", "a dog", "cats sat down here"] * 3, tokenizers.trainers.WordPieceTrainer(
        vocab_size=40, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]))
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = tokenizers.processors.TemplateProcessing(single="[CLS] $A [SEP]",
                                                                  special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]",
                                                cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]")


def test_hidden_tags_without_a_word_mask_leave_the_chain():
    """-100 without word_mask takes a word out of the chain (documented): hiding a B-X under BIO
    constraints leaves an impossible O, I-X (+inf, no gradient); with word_mask the word is unknown."""
    names = ["O", "B-X", "I-X"]
    model = CRFForTokenClassification(bert(), N, dropout=0.0, reduction="none",
                                      constraints=st.allowed_transitions("BIO", names))
    labels = torch.tensor([[-100, 0, 1, 2, -100, -100, -100]] * 2)
    hidden = labels.clone()
    hidden[:, 2] = -100  # the B-X
    without = model(**batch(labels=hidden)).loss
    assert torch.isinf(without).all()
    within = model(**batch(labels=hidden, word_mask=labels != -100)).loss
    assert torch.isfinite(within).all()
    within.sum().backward()
    assert model.classifier.weight.grad.abs().sum() > 0


def test_softmax_head_keeps_the_logits_precision_and_an_empty_batch():
    model = CRFForTokenClassification(Embedder(), N, hidden_size=H, crf=False).double()
    out = model(input_ids=batch()["input_ids"], labels=LABELS)
    assert out.loss.dtype == torch.float64
    empty = model(input_ids=batch()["input_ids"][:0], labels=LABELS[:0]).loss
    assert empty.item() == 0.0  # the mean over no sequences: 0, not NaN


def test_labels_where_attention_mask_is_zero_are_an_error():
    """Issue 41: labels only at positions whose attention_mask is 0 gave a loss of exactly 0, no
    word: a wrong attention mask trained on nothing. The error lists the dropped positions."""
    model = CRFForTokenClassification(bert(), N, dropout=0.0).eval()
    labels = torch.full((2, 7), -100)
    labels[0, 6], labels[1, 5] = 1, 0  # both beyond the attended tokens
    with pytest.raises(ValueError, match=r"labels are given at 2 \(row, position\) pairs where attention_mask is 0"
                                         r".*\[\(0, 6\), \(1, 5\)\].*ignore_index = -100"):
        model(**batch(labels=labels))
    word_mask = torch.zeros(2, 7, dtype=torch.bool)
    word_mask[0, 6] = True
    with pytest.raises(ValueError, match=r"\[\(0, 6\)\]"):  # inside word_mask
        model(**batch(labels=labels, word_mask=word_mask))
    sets = torch.ones(2, 7, N, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"\[\(0, 6\)\]"):  # label sets: every word_mask position is labeled
        model(**batch(labels=sets, word_mask=word_mask))
    word_mask[0, 6] = False  # labels outside word_mask are not read
    assert model(**batch(labels=labels, word_mask=word_mask)).loss.item() == 0.0
    with st.set_validation(False):  # a value check: off with the others
        assert model(**batch(labels=labels)).loss.item() == 0.0
    assert torch.isfinite(model(**batch(labels=LABELS)).loss)  # padding labeled -100: fine


def test_the_collator_refuses_word_masks_of_the_wrong_length_or_missing():
    """Issue 41: a word_mask shorter than its example's input_ids was padded (on the left, the mask
    then marked [SEP] as a word); some examples without word_mask gave a bare KeyError (or, when
    the first had none, the others' masks were dropped)."""
    tokenizer = _tokenizer()
    rows = []
    for words in (["the", "cat"], ["a", "dog", "sat"]):
        enc = tokenizer(words, is_split_into_words=True)
        rows.append({"input_ids": enc["input_ids"], "word_mask": st.word_mask([enc.word_ids()])[0].tolist()})
    collate = DataCollatorWithWordMask(tokenizer)
    assert collate(rows)["word_mask"].shape == (2, 5)
    short = [rows[0], {**rows[1], "word_mask": rows[1]["word_mask"][:-1]}]
    with pytest.raises(ValueError, match="word_mask of example 1 has 4 entries but its input_ids has 5 tokens"):
        collate(short)
    for missing in (0, 1):
        some = [r if i != missing else {k: v for k, v in r.items() if k != "word_mask"} for i, r in enumerate(rows)]
        with pytest.raises(ValueError, match=rf"word_mask is given for examples \[{1 - missing}\] but not for "
                                             rf"\[{missing}\]"):
            collate(some)
