"""
Token classification with a CRF head on a transformer
=====================================================

This is the Hugging Face `token classification task guide
<https://huggingface.co/docs/transformers/tasks/token_classification>`_ with a linear-chain CRF
in place of the softmax head: the same preprocessing, collator, ``compute_metrics`` and
``Trainer``, and three things the softmax head cannot do:

- the CRF scores whole tag sequences, and with the BIO constraints its Viterbi decoding never
  predicts an ``I-NP`` after an ``O``;
- it runs over the *words* (each word's first sub-token, ``st.word_mask``), so neighbouring
  words are neighbours in the chain even when a tokenizer splits them into pieces;
- it trains on *partial labels*: a word whose tag is unknown (``-100`` inside the word mask)
  is summed over, so the loss is ``-log p(the tags that are known)``.

Everything runs offline and in seconds: the data are :func:`structtorch.data.synthetic_chunking`'s
CoNLL-2000-style sentences, the tokenizer is a WordPiece vocabulary learned here with the
``tokenizers`` library, and the encoder a one-layer BERT built from a config with random weights.
With a real checkpoint, replace the last two by ``AutoTokenizer.from_pretrained(path)`` and
``AutoModel.from_pretrained(path)``; nothing else changes.
"""

# %%
# Requirements
# ------------
# ``transformers``, ``tokenizers`` and ``accelerate`` (for ``Trainer``) are the ``hf`` extra:
# ``pip install 'structtorch[hf]'``. Only :mod:`structtorch.nn.token_classification` imports them.
import importlib.util
import sys

if importlib.util.find_spec("transformers") is None or importlib.util.find_spec("tokenizers") is None:
    message = "This tutorial needs transformers and tokenizers: pip install 'structtorch[hf]'"
    if "sphinx_gallery" in sys.modules:  # a docs build without them is misconfigured: fail loudly
        raise ImportError(message)
    print(message)
    sys.exit(0)

# %%
# Load the data
# -------------
# Each example is a sentence of words with one chunk tag per word, as in the Hugging Face
# datasets (``tokens`` and ``ner_tags``). 30% of the training tags are hidden (``-100``): as if
# an annotator had tagged only part of each sentence.
import random
import tempfile
import time

import numpy as np
import torch
import transformers
from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers

import structtorch as st
from structtorch.data import synthetic_chunking
from structtorch.nn.token_classification import CRFForTokenClassification, DataCollatorWithWordMask

transformers.logging.set_verbosity_error()
transformers.set_seed(0)


def as_examples(sentences, hide=0.0, seed=0):
    rng = random.Random(seed)
    return [{"tokens": words, "ner_tags": [-100 if rng.random() < hide else label2id[t] for t in tags]}
            for words, _, tags in sentences]


raw_train = synthetic_chunking(800, seed=0)
raw_test = synthetic_chunking(100, seed=1, unknown=0.1)  # 10% of open-class words unseen
label_list = sorted({t for s in raw_train + raw_test for t in s[2]}, key=lambda t: (t != "O", t[2:], t))
label2id = {t: i for i, t in enumerate(label_list)}
id2label = dict(enumerate(label_list))
train_examples = as_examples(raw_train, hide=0.3)
test_examples = as_examples(raw_test)
print(label_list)
print(train_examples[0])

# %%
# A tokenizer
# -----------
# A WordPiece vocabulary of 300 pieces learned on the training words, small enough that most
# words are split, wrapped as a Hugging Face fast tokenizer (which is what gives ``word_ids()``).
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
wordpiece = Tokenizer(models.WordPiece(unk_token="[UNK]"))
wordpiece.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
wordpiece.train_from_iterator((" ".join(e["tokens"]) for e in train_examples),
                              trainers.WordPieceTrainer(vocab_size=300, special_tokens=SPECIAL,
                                                                        show_progress=False))
wordpiece.post_processor = processors.TemplateProcessing(
    single="[CLS] $A [SEP]", special_tokens=[(t, wordpiece.token_to_id(t)) for t in ("[CLS]", "[SEP]")])
tokenizer = transformers.PreTrainedTokenizerFast(
    tokenizer_object=wordpiece, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
    sep_token="[SEP]", mask_token="[MASK]", model_max_length=128)

encoding = tokenizer(train_examples[0]["tokens"], is_split_into_words=True)
print(encoding.tokens())
print(encoding.word_ids())

# %%
# Preprocess: word masks and label alignment
# ------------------------------------------
# The guide's ``tokenize_and_align_labels`` puts each word's tag on its first piece and ``-100``
# on the other pieces and on ``[CLS]``/``[SEP]``. Add one line: the word mask,
# :func:`structtorch.word_mask` of the ``word_ids()``, which marks the first pieces. The CRF runs
# over the positions of the word mask, in order. Inside it, ``-100`` means "this word's tag is
# unknown"; without a word mask the model would take the positions whose label is not ``-100``
# as the words, and a hidden word would silently drop out of the chain.


def tokenize_and_align_labels(example):
    tokenized = tokenizer(example["tokens"], truncation=True, is_split_into_words=True)
    word_ids = tokenized.word_ids()
    mask = st.word_mask([word_ids])[0]
    labels = [example["ner_tags"][w] if first else -100 for w, first in zip(word_ids, mask.tolist(),
                                                                             strict=True)]
    return {**tokenized, "word_mask": mask.tolist(), "labels": labels}


train_dataset = [tokenize_and_align_labels(e) for e in train_examples]
test_dataset = [tokenize_and_align_labels(e) for e in test_examples]
row = train_dataset[0]
for name in ("input_ids", "word_mask", "labels"):
    print(f"{name:>10}: {row[name]}")

# %%
# :class:`~structtorch.nn.token_classification.DataCollatorWithWordMask` is
# ``DataCollatorForTokenClassification`` that also pads the word masks (with ``False``), so they
# reach the model in ``Trainer`` batches.
data_collator = DataCollatorWithWordMask(tokenizer)
batch = data_collator(train_dataset[:2])
print({k: tuple(v.shape) for k, v in batch.items()})

# %%
# Evaluate
# --------
# In evaluation mode the model returns its Viterbi tags as ``predictions`` (the decoded tag at each
# word, ``-100`` elsewhere, like the labels), beside the logits, so ``Trainer`` hands
# ``compute_metrics`` a tuple ``(logits, predictions)``: use the predictions, not
# ``argmax(logits)``, which ignores the transitions. :func:`structtorch.chunk_f1` scores chunks
# with conlleval's rules (seqeval's default mode gives the same numbers).


def compute_metrics(p):
    logits, predictions = p.predictions
    labels = p.label_ids
    true_tags, pred_tags = [], []
    for pred_row, label_row in zip(predictions, labels, strict=True):
        keep = label_row != -100
        true_tags.append([id2label[int(t)] for t in label_row[keep]])
        pred_tags.append([id2label[int(t)] for t in pred_row[keep]])
    scores = st.chunk_f1(pred_tags, true_tags)
    pairs = [(a, b) for p_, t_ in zip(pred_tags, true_tags, strict=True) for a, b in zip(p_, t_, strict=True)]
    correct = sum(a == b for a, b in pairs)
    return {"precision": scores.precision, "recall": scores.recall, "f1": scores.f1,
            "accuracy": correct / len(pairs)}


# %%
# Train
# -----
# The encoder is any Hugging Face model (here a one-layer BERT with random weights, built from a
# config). :class:`~structtorch.nn.token_classification.CRFForTokenClassification` adds dropout, a
# linear layer to the tag scores and :class:`structtorch.LinearChainCRF`, with the BIO constraints
# of the tag names, and returns a ``TokenClassifierOutput``: ``Trainer`` finds the loss and the
# labels as it does for ``AutoModelForTokenClassification``.
config = transformers.BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=1,
                                 num_attention_heads=2, intermediate_size=64, max_position_embeddings=128,
                                 pad_token_id=tokenizer.pad_token_id)
model = CRFForTokenClassification(transformers.BertModel(config), num_labels=len(label_list),
                                  constraints=st.allowed_transitions("BIO", label_list))

output_dir = tempfile.mkdtemp()
training_args = transformers.TrainingArguments(
    output_dir=output_dir,
    learning_rate=1e-2,
    per_device_train_batch_size=16,
    per_device_eval_batch_size=64,
    num_train_epochs=6,
    warmup_steps=10,
    eval_strategy="epoch",
    logging_strategy="epoch",
    save_strategy="no",
    report_to=[],
    use_cpu=True,
    disable_tqdm=True,
    seed=0,
)
trainer = transformers.Trainer(
    model=model,
    args=training_args,
    train_dataset=train_dataset,
    eval_dataset=test_dataset,
    data_collator=data_collator,
    compute_metrics=compute_metrics,
)
began = time.perf_counter()
trainer.train()
print(f"trained in {time.perf_counter() - began:.1f} s")

# %%
# ``trainer.evaluate()`` and ``trainer.predict()`` go through the same ``compute_metrics``:
metrics = trainer.evaluate()
print(f"chunk F1 {metrics['eval_f1']:.3f} (precision {metrics['eval_precision']:.3f}, recall "
      f"{metrics['eval_recall']:.3f}), word accuracy {metrics['eval_accuracy']:.3f}")

# %%
# Inference
# ---------
# For new text, tokenize the words, build the word mask and call
# :meth:`~structtorch.nn.token_classification.CRFForTokenClassification.decode`: it returns one tag
# id per word, ``(B, W)``, -1 beyond each sentence's words. Here on two test sentences, beside
# their gold tags; every predicted sequence is valid BIO.
sentences = [raw_test[3][0], raw_test[7][0]]
inputs = tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
word_mask = st.word_mask([inputs.word_ids(i) for i in range(len(sentences))])
tags = model.decode(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"],
                    word_mask=word_mask)
for i, words in enumerate(sentences):
    print(f"{'word':<14} {'gold':<7} predicted")
    for word, gold, tag in zip(words, raw_test[[3, 7][i]][2], tags[i].tolist(), strict=False):
        print(f"{word:<14} {gold:<7} {id2label[tag]}")
    print()

# %%
# The per-word tags and the sequence-level view side by side: the CRF gives the marginal
# probability of each tag at each word (``model.crf.marginals``), and k-best lists
# (``model.crf.decode(..., k=3)``) from the same logits.
model.eval()
with torch.no_grad():
    logits = model(**{k: inputs[k] for k in ("input_ids", "attention_mask")}).logits
    marginals = model.crf.marginals(logits, word_mask)
    scores, paths = model.crf.decode(logits, word_mask, k=3)
first = word_mask[0].nonzero().flatten()
confidence = marginals[0, first].max(-1).values
print("least certain words of sentence 0:",
      [(sentences[0][w], round(float(confidence[w]), 3)) for w in np.argsort(confidence.numpy())[:3]])
print("3 best labelings' scores:", [round(float(s), 2) for s in scores[0]])

# %%
# Variations
# ----------
# - ``CRFForTokenClassification(encoder, num_labels, crf=False)`` is the softmax head with the same
#   interface (per-word cross-entropy; hidden words cost nothing), the usual baseline.
# - Labels may also be sets of allowed tags per word: a ``(B, T, N)`` bool tensor (with
#   ``word_mask``), e.g. "some NP tag, not sure which".
# - ``examples/transformer_ner.py`` compares both heads with all tags and with 30% hidden, with
#   a plain training loop, and takes ``--model PATH`` for a local checkpoint.
