"""
Chunking with hand-written features, in the sklearn-crfsuite style
==================================================================

The `sklearn-crfsuite tutorial <https://sklearn-crfsuite.readthedocs.io/en/latest/tutorial.html>`_
trains a linear-chain CRF on named entities in five steps: data, features as dicts, training,
evaluation, and a look at the learned weights. This page takes the same five steps with
structtorch on CoNLL-2000-style chunking, with real tag names (``B-NP``, ``I-NP``, ``B-VP``, ...,
``O``). The differences from crfsuite are small and explicit:

- crfsuite hashes feature dicts internally; here the dicts become strings (``"word.lower()=the"``)
  and the strings ids, and :class:`structtorch.SparseFeaturePotentials` sums one weight row per
  id: a linear model over millions of indicator features costs memory only for the active ones;
- the CRF is :class:`structtorch.LinearChainCRF`, with the BIO constraints applied in training and
  decoding (a prediction can never hold an ``I-NP`` after an ``O``);
- L-BFGS is PyTorch's, run by :func:`structtorch.train.fit`; ``l2`` plays crfsuite's ``c2``.

The data come from :func:`structtorch.data.synthetic_chunking`, a toy English grammar with
CoNLL-2000 POS and chunk tags, ambiguous words and unseen test words; :func:`structtorch.data.read_conll`
reads the real CoNLL-2000 files in the same form.
"""

# %%
# Data
# ----
# A sentence is a tuple of three equally long lists: words, POS tags and chunk tags (the form
# :func:`~structtorch.data.read_conll` returns for ``word POS chunk`` files). The test sentences
# draw 10% of their open-class words from forms never seen in training.
import time
from collections import Counter

import torch
from torch import nn

import structtorch as st
from structtorch.data import decode_tags, encode_tags, synthetic_chunking

torch.manual_seed(0)
train_sents = synthetic_chunking(400, seed=0)
test_sents = synthetic_chunking(150, seed=1, unknown=0.1)
words, pos, chunks = train_sents[0]
for w, p, c in zip(words, pos, chunks, strict=True):
    print(f"{w:<14} {p:<5} {c}")
print(f"{len(train_sents)} training and {len(test_sents)} test sentences")

# %%
# Features
# --------
# The feature function is sklearn-crfsuite's ``word2features``, unchanged in spirit: a dict per
# token, with the token's own attributes and those of its neighbours. String values become
# indicator features ``name=value``; a ``True`` boolean is the indicator ``name`` (a ``False`` one
# is absent), which is what crfsuite does with them.


def word2features(sent, i):
    words, pos = sent[0], sent[1]
    word, tag = words[i], pos[i]
    features = {
        "bias": True,
        "word.lower()": word.lower(),
        "word[-3:]": word[-3:],
        "word[-2:]": word[-2:],
        "word.istitle()": word.istitle(),
        "word.isdigit()": word.isdigit(),
        "postag": tag,
        "postag[:2]": tag[:2],
    }
    if i > 0:
        features.update({
            "-1:word.lower()": words[i - 1].lower(),
            "-1:postag": pos[i - 1],
            "-1:postag|postag": f"{pos[i - 1]}|{tag}",
        })
    else:
        features["BOS"] = True
    if i < len(words) - 1:
        features.update({
            "+1:word.lower()": words[i + 1].lower(),
            "+1:postag": pos[i + 1],
            "postag|+1:postag": f"{tag}|{pos[i + 1]}",
        })
    else:
        features["EOS"] = True
    return features


def sent2features(sent):
    return [word2features(sent, i) for i in range(len(sent[0]))]


def as_strings(features):
    """crfsuite's reading of a feature dict: ``name=value`` for strings, ``name`` for True."""
    return [k if v is True else f"{k}={v}" for k, v in features.items() if v is not False]


print(word2features(train_sents[0], 1))

# %%
# The strings get ids from a vocabulary built on the training set (test features outside it are
# dropped, as crfsuite drops unseen attributes). Each sentence becomes a ``(T, K)`` block of ids,
# padded with -1, the input :class:`~structtorch.SparseFeaturePotentials` reads; the chunk tags
# become label ids with :func:`~structtorch.data.encode_tags`.


def featurize(sents, vocab=None):
    """Sentences -> padded ids (B, T, K) int64 (-1 = no feature), lengths (B,), the vocabulary."""
    strings = [[as_strings(f) for f in sent2features(s)] for s in sents]
    if vocab is None:
        vocab = {}
        for sent in strings:
            for token in sent:
                for name in token:
                    vocab.setdefault(name, len(vocab))
    T = max(len(s) for s in strings)
    K = max(len(token) for sent in strings for token in sent)
    ids = torch.full((len(sents), T, K), -1, dtype=torch.long)
    for b, sent in enumerate(strings):
        for t, token in enumerate(sent):
            known = [vocab[name] for name in token if name in vocab]
            ids[b, t, :len(known)] = torch.tensor(known, dtype=torch.long)
    lengths = torch.tensor([len(s) for s in strings])
    return ids, lengths, vocab


x_train, len_train, vocab = featurize(train_sents)
x_test, len_test, _ = featurize(test_sents, vocab)
y_train, _, tag_names = encode_tags([s[2] for s in train_sents])
y_test, _, _ = encode_tags([s[2] for s in test_sents], tag_names)
train = st.SequenceData(x_train, y_train, len_train)
test = st.SequenceData(x_test, y_test, len_test)
print(f"{len(vocab):,} distinct features, at most {x_train.shape[-1]} per token")
print("tags:", tag_names)

# %%
# Training
# --------
# The model scores each token by the weights of its features (the "state features" of crfsuite)
# and each pair of neighbouring tags by a transition score held by the CRF. ``constraints`` forbids
# the transitions BIO rules out (``O -> I-NP``, ``B-NP -> I-VP``, starting with ``I-``...), in the
# loss as in decoding. Full-batch L-BFGS with an L2 penalty is crfsuite's default algorithm.


class StateFeatures(nn.Module):
    """Feature ids (B, T, K) -> unary scores (B, T, N); the CRF holds the transitions."""

    def __init__(self, num_features, num_labels):
        super().__init__()
        self.features = st.SparseFeaturePotentials(num_features, num_labels)
        self.features.transitions.requires_grad_(False)  # unused: the CRF's are trained

    def forward(self, ids):
        return self.features(ids)[0]


model = StateFeatures(len(vocab), len(tag_names))
crf = st.LinearChainCRF(len(tag_names), constraints=st.allowed_transitions("BIO", tag_names))
params = [p for p in (*model.parameters(), *crf.parameters()) if p.requires_grad]
lbfgs = torch.optim.LBFGS(params, max_iter=20, history_size=20, line_search_fn="strong_wolfe")
began = time.perf_counter()
history = st.train.fit(model, train, crf, optimizer=lbfgs, epochs=3, l2=1e-3, batch_size=len(train),
                       progress=False)
print(f"trained in {time.perf_counter() - began:.1f} s; objective by epoch (20 L-BFGS iterations each):",
      [round(v, 3) for v in history["objective"]])

# %%
# Evaluation
# ----------
# Decode the test sentences (Viterbi under the BIO constraints) and turn the label ids back into
# tag names. First the per-tag report of sklearn-crfsuite's ``flat_classification_report``
# (each token counted on its own, ``O`` left out as in their tutorial), then what chunkers are
# judged by: chunk precision, recall and F1 with conlleval's rules (:func:`structtorch.chunk_f1`),
# where a chunk counts only if its type and both its ends are right.
with torch.no_grad():
    _, paths = crf.decode(model(test.x), lengths=test.lengths)
predicted = decode_tags(paths, test.lengths, tag_names)
gold = [s[2] for s in test_sents]

counts = {tag: Counter() for tag in tag_names}
for p_sent, g_sent in zip(predicted, gold, strict=True):
    for p, g in zip(p_sent, g_sent, strict=True):
        counts[p]["predicted"] += 1
        counts[g]["support"] += 1
        counts[g]["correct"] += p == g
print(f"{'tag':>7} {'precision':>9} {'recall':>7} {'f1':>6} {'support':>8}")
for tag in sorted((t for t in tag_names if t != "O"), key=lambda t: (t[2:], t[0])):
    c = counts[tag]
    if not c["support"] and not c["predicted"]:
        continue  # a tag of the label set that this data never uses (I-PP)
    p = c["correct"] / max(c["predicted"], 1)
    r = c["correct"] / max(c["support"], 1)
    f = 2 * p * r / max(p + r, 1e-12)
    print(f"{tag:>7} {p:9.3f} {r:7.3f} {f:6.3f} {c['support']:8d}")

scores = st.chunk_f1(predicted, gold)
print(f"\nchunks: precision {scores.precision:.3f}, recall {scores.recall:.3f}, F1 {scores.f1:.3f} "
      f"({scores.num_correct} of {scores.num_gold} gold chunks found)")
for kind, s in scores.per_type.items():
    print(f"{kind:>5}: precision {s['precision']:.3f}, recall {s['recall']:.3f}, F1 {s['f1']:.3f}, "
          f"support {s['support']}")

# %%
# The same F1 comes from label ids, without decoding to names, which is how
# :func:`structtorch.train.fit` can use it as a validation metric
# (``metrics={"f1": functools.partial(st.chunk_f1, labels=tag_names)}``):
print(float(st.chunk_f1(paths, test.labels, test.lengths, tag_names)))

# %%
# Inspecting the weights
# ----------------------
# Transitions: :meth:`~structtorch.LinearChainCRF.scores` gives the learned transition scores
# with ``-inf`` where the constraints forbid a pair, so only allowed pairs are ranked.
# ``transitions[i, j]`` scores tag ``i`` followed by tag ``j``.
transitions, start, end = (s.detach() for s in crf.scores())
allowed = torch.isfinite(transitions)
pairs = sorted(((float(transitions[i, j]), tag_names[i], tag_names[j])
                for i, j in allowed.nonzero().tolist()), reverse=True)
print("Top likely transitions:")
for score, a, b in pairs[:8]:
    print(f"  {a:>7} -> {b:<7} {score:8.3f}")
print("Top unlikely transitions (among the allowed):")
for score, a, b in pairs[-6:]:
    print(f"  {a:>7} -> {b:<7} {score:8.3f}")
print(f"forbidden by BIO: {int((~allowed).sum())} of {allowed.numel()} pairs")

# %%
# State features: row ``f`` of ``emission.weight`` (F, N) holds feature ``f``'s score for every
# tag. The largest entries per tag are what the model learned to look for.
weights = model.features.emission.weight.detach()
names = list(vocab)  # ids were given in insertion order
for tag in ("B-NP", "I-NP", "B-VP", "B-PP", "O"):
    j = tag_names.index(tag)
    top = weights[:, j].topk(5)
    shown = ", ".join(f"{names[f]} ({w:+.2f})" for w, f in zip(top.values.tolist(), top.indices.tolist(),
                                                                strict=True))
    print(f"{tag:>5}: {shown}")

# %%
# And the strongest negative evidence overall (a feature that rules a tag out):
flat = weights.flatten().topk(6, largest=False)
for w, k in zip(flat.values.tolist(), flat.indices.tolist(), strict=True):
    f, j = divmod(k, len(tag_names))
    print(f"  {w:+.3f}  {names[f]:<28} against {tag_names[j]}")

# %%
# Where to go next
# ----------------
# - :func:`structtorch.data.window_features` builds a richer template set (words, POS, shapes
#   and suffixes at offsets -2..+2, POS n-grams) straight to ids, and
#   :func:`structtorch.data.conll_sequence_data` the whole :class:`~structtorch.SequenceData`;
#   ``examples/chunking.py`` trains on it at CoNLL-2000 size, against a structural SVM.
# - The same features train a structural SVM with a duality-gap certificate:
#   ``st.SparseFeaturePotentials(len(vocab), len(tag_names), boundary=True)`` with
#   ``st.train.fit(..., None, solver="bcfw", C=...)``.
