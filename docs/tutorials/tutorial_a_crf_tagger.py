"""
A CRF tagger from scratch: BIO constraints, chunk F1, and coming from pytorch-crf
=================================================================================

A chunker in a few dozen lines: embeddings of the words, their POS tags and suffixes, a
convolution over a window of neighbours, and a linear-chain CRF on top
(:class:`structtorch.LinearChainCRF`). The CRF scores whole tag sequences: each position's
emission score plus a learned score for every pair of neighbouring tags. With the BIO constraints
(:func:`structtorch.allowed_transitions`) the pairs that cannot occur (``I-NP`` after ``O``, a
sentence that starts with ``I-VP``) score ``-inf``, so the model is trained on valid sequences
only and Viterbi decoding never returns an invalid one. We score chunks with conlleval's F1
(:func:`structtorch.chunk_f1`) and end with the mapping from pytorch-crf's ``torchcrf.CRF``.

The data are :func:`structtorch.data.synthetic_chunking`'s CoNLL-2000-style sentences (a toy
English grammar with ambiguous words, noisy POS tags and, in the test set, unseen words); their
chunk tags are valid BIO. (:func:`structtorch.data.make_tagging_data` is not: its labels move
freely between classes, so pair it with BIO constraints and some rows have probability 0.)
"""

# %%
# The data
# --------
# A sentence is a tuple ``(words, pos, chunks)`` of equally long lists of strings, the form
# :func:`structtorch.data.read_conll` returns for the real CoNLL-2000 files.
# :func:`structtorch.data.encode_tags` turns the chunk tags into padded label ids and returns the
# tag name of each id.
import time

import torch
from torch import nn

import structtorch as st
from structtorch.data import encode_tags, synthetic_chunking

torch.manual_seed(0)
start_time = time.perf_counter()
train_sents = synthetic_chunking(200, seed=0)
test_sents = synthetic_chunking(100, seed=1, unknown=0.1)  # 10% of open-class words unseen
words, pos, chunks = train_sents[1]
print(" ".join(f"{w}/{p}/{c}" for w, p, c in zip(words, pos, chunks, strict=True)))

train_tags, train_lengths, tags = encode_tags([s[2] for s in train_sents])
test_tags, test_lengths, _ = encode_tags([s[2] for s in test_sents], tags)
print(f"{len(tags)} tags: {tags}")
print(f"train tags {tuple(train_tags.shape)} (B, T), lengths {train_lengths[:6].tolist()} ...")

# %%
# Inputs as ids
# -------------
# Three vocabularies built on the training set: words (lower-cased), POS tags and 3-letter
# suffixes, with id 1 for anything unseen and 0 for padding. The suffix carries unseen words: a
# new ``-tion`` word is most likely a noun.


def vocabulary(items):
    vocab = {"<pad>": 0, "<unk>": 1}
    for item in items:
        vocab.setdefault(item, len(vocab))
    return vocab


def as_ids(column, vocab, T):
    ids = torch.zeros(len(column), T, dtype=torch.long)
    for b, seq in enumerate(column):
        ids[b, : len(seq)] = torch.tensor([vocab.get(x, 1) for x in seq])
    return ids


def columns(sents):
    lower = [[w.lower() for w in s[0]] for s in sents]
    return lower, [s[1] for s in sents], [[w[-3:] for w in seq] for seq in lower]


vocabs = [vocabulary(x for seq in col for x in seq) for col in columns(train_sents)]


def encode(sents, T):
    return torch.stack([as_ids(col, v, T) for col, v in zip(columns(sents), vocabs, strict=True)], -1)


x_train = encode(train_sents, train_tags.shape[1])  # (B, T, 3): word, POS, suffix ids
x_test = encode(test_sents, test_tags.shape[1])
print("vocabulary sizes (words, POS, suffixes):", [len(v) for v in vocabs])

# %%
# The model
# ---------
# The encoder maps ``(B, T, 3)`` ids to ``(B, T, N)`` emission scores; the CRF holds the
# transition scores ``transitions[i, j]`` (tag i followed by tag j), the start and end scores,
# and the constraints. ``crf(emissions, tags, mask)`` is the negative log-likelihood, a loss to
# minimize (pytorch-crf returns the log-likelihood: see the end of this page). A sequence is given
# by a ``(B, T)`` bool mask or by ``lengths=``.


class Tagger(nn.Module):
    def __init__(self, sizes, num_tags, constraints=None, dim=32):
        super().__init__()
        self.embed = nn.ModuleList(nn.Embedding(n, dim, padding_idx=0) for n in sizes)
        self.conv = nn.Conv1d(len(sizes) * dim, 64, kernel_size=5, padding=2)
        self.out = nn.Linear(64, num_tags)
        self.crf = st.LinearChainCRF(num_tags, constraints=constraints)

    def emissions(self, x):  # (B, T, 3) -> (B, T, N)
        h = torch.cat([e(x[..., k]) for k, e in enumerate(self.embed)], -1)
        return self.out(torch.relu(self.conv(h.transpose(1, 2))).transpose(1, 2))

    def forward(self, x, tags, mask):
        return self.crf(self.emissions(x), tags, mask, reduction="token_mean")

    @torch.no_grad()
    def predict(self, x, mask):
        return self.crf.decode(self.emissions(x), mask)[1]  # (B, T), -1 outside the mask


constraints = st.allowed_transitions("BIO", tags)  # (allowed (N, N), allowed_start, allowed_end)
allowed, allowed_start, _ = constraints
print(f"BIO: {int((~allowed).sum())} of {allowed.numel()} transitions forbidden; "
      f"may start a sentence: {[t for t, ok in zip(tags, allowed_start.tolist(), strict=True) if ok]}")

# %%
# Training
# --------
# A plain PyTorch loop with Adam (``structtorch.train.fit`` runs the same loop for you, with
# validation metrics, early stopping and checkpoints). We train two taggers with the same seed:
# one with the BIO constraints and one without.

train_mask = torch.arange(x_train.shape[1]) < train_lengths[:, None]  # (B, T) bool
test_mask = torch.arange(x_test.shape[1]) < test_lengths[:, None]


def train(constraints, epochs=4, batch_size=25):
    torch.manual_seed(0)
    model = Tagger([len(v) for v in vocabs], len(tags), constraints)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(0)
    for epoch in range(epochs):
        total = 0.0
        for idx in torch.randperm(len(x_train), generator=g).split(batch_size):
            T = int(train_lengths[idx].max())  # trim the batch to its longest sentence
            loss = model(x_train[idx, :T], train_tags[idx, :T], train_mask[idx, :T])
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item() * len(idx)
        if epoch % 2 == 1:
            print(f"  epoch {epoch + 1}: mean NLL per token {total / len(x_train):.4f}")
    return model


t0 = time.perf_counter()
print("with BIO constraints")
model = train(constraints)
print("without constraints")
free = train(None)
print(f"trained both in {time.perf_counter() - t0:.1f} s")

# %%
# Evaluation: chunk F1
# --------------------
# :func:`structtorch.chunk_f1` reads chunks from the tag ids (through the tag names) with
# conlleval's rules and returns precision, recall, F1 and per-type scores; ``float(scores)`` is
# the F1. Positions at or beyond each length are ignored, so the ``-1`` padding of a Viterbi path
# is fine. We also count BIO violations: an ``I-X`` that does not continue an ``X`` chunk.


def violations(path, lengths):
    ok, first, _ = constraints
    bad = 0
    for row, n in zip(path.tolist(), lengths.tolist(), strict=True):
        seq = row[:n]
        bad += (n > 0 and not first[seq[0]]) + sum(not ok[a, b] for a, b in zip(seq, seq[1:], strict=False))
    return int(bad)


for name, m in (("unconstrained", free), ("constrained", model)):
    path = m.predict(x_test, test_mask)
    scores = st.chunk_f1(path, test_tags, test_lengths, tags)
    print(f"{name:>13}: chunk F1 {float(scores):.3f} (P {scores.precision:.3f}, R {scores.recall:.3f}), "
          f"BIO violations {violations(path, test_lengths)}")
print("F1 per type (constrained):", {k: round(s["f1"], 3) for k, s in scores.per_type.items()})

# %%
# The unconstrained CRF learns most of the grammar from the data (a large negative score for
# ``O -> I-NP``), but nothing stops it from predicting a forbidden pair where the emissions are
# strong enough; the constrained one cannot. Its transition matrix shows the ``-inf`` entries:
trans, start, end = model.crf.scores()  # the scores with the constraints applied
print("after O:", ", ".join(f"{t} {v:.2f}" for t, v in zip(tags, trans[0].tolist(), strict=True)))

# %%
# One test sentence, decoded, beside the gold tags:
i = 3
path = model.predict(x_test[i:i + 1], test_mask[i:i + 1])[0]
for w, gold, p in zip(test_sents[i][0], test_sents[i][2], path.tolist(), strict=False):
    print(f"{w:<14} {gold:<7} {tags[p]:<7} {'' if gold == tags[p] else '<- wrong'}")

# %%
# More from the same CRF
# ----------------------
# The CRF is a distribution over tag sequences: the k best sequences, per-position marginals
# (a confidence per tag), exact entropy, samples.
with torch.no_grad():
    em = model.emissions(x_test[i:i + 1])
    m = test_mask[i:i + 1]
    k_scores, k_paths = model.crf.decode(em, m, k=3)  # (1, 3), (1, 3, T)
    marg = model.crf.marginals(em, m)  # (1, T, N)
    print("3 best sequence scores:", [f"{s:.2f}" for s in k_scores[0].tolist()])
    print("least confident word:", test_sents[i][0][int(marg[0].max(-1).values[m[0]].argmin())],
          f"(max marginal {float(marg[0].max(-1).values[m[0]].min()):.2f})")
    print(f"entropy of the tag sequence: {float(model.crf.entropy(em, m)[0]):.3f} nats")

# %%
# Coming from pytorch-crf
# -----------------------
# ``st.LinearChainCRF`` follows ``torchcrf.CRF``'s conventions (``transitions[i, j]`` is tag i
# then tag j, the third positional argument is the mask) with these differences:
#
# ===================================================  ==========================================================
# pytorch-crf (``from torchcrf import CRF``)           structtorch (``import structtorch as st``)
# ===================================================  ==========================================================
# ``CRF(N)``: time-first ``(T, B, N)`` by default      ``st.LinearChainCRF(N)``: batch-first by default;
#                                                      ``batch_first=False`` for ``(T, B, N)``
# ``crf(em, tags, mask)``: log-likelihood, summed      ``crf(em, tags, mask)``: the *negative* log-likelihood,
#                                                      per sequence (``reduction="none"``)
# ``crf(em, tags, mask, reduction="mean")``            ``crf.log_likelihood(em, tags, mask, reduction="mean")``
# ``crf.decode(em, mask)``: a list of lists            ``score, path = crf.decode(em, mask)``: tensors,
#                                                      ``path`` ``-1`` outside the mask
# ``crf.transitions``, ``start_transitions``,          ``crf.transitions``, ``crf.start``, ``crf.end``
# ``end_transitions``
# the mask must switch on the first time step          any mask pattern (left padding, first sub-tokens)
# (none)                                               ``constraints=``, ``ignore_index=`` (partial labels),
#                                                      ``decode(k=)``, ``marginals``, ``entropy``, ``sample``
# ===================================================  ==========================================================
#
# ``st.LinearChainCRF.from_pytorch_crf(crf)`` copies a trained ``torchcrf.CRF``'s scores. When
# pytorch-crf is installed (``pip install pytorch-crf``), we check here that both give the same
# numbers:
import importlib.util

em = torch.randn(4, 7, len(tags))
gold = test_tags[:4, :7]
mask = test_mask[:4, :7]
if importlib.util.find_spec("torchcrf") is not None:
    from torchcrf import CRF

    theirs = CRF(len(tags), batch_first=True)
    ours = st.LinearChainCRF.from_pytorch_crf(theirs)  # batch_first taken from theirs
    ll_theirs = theirs(em, gold, mask, reduction="none")
    ll_ours = ours.log_likelihood(em, gold, mask)
    print("log-likelihoods equal:", torch.allclose(ll_theirs, ll_ours, atol=1e-5))
    paths = ours.decode(em, mask)[1]
    print("decodings equal:", theirs.decode(em, mask) == [p[p >= 0].tolist() for p in paths])
else:
    print("pytorch-crf is not installed: the comparison is skipped")

# %%
# Where next: :func:`structtorch.train.fit` trains this model with validation metrics
# (``metrics={"f1": functools.partial(st.chunk_f1, labels=tags)}``), early stopping and
# checkpoints; the crfsuite-style tutorial trains a sparse-feature CRF with L-BFGS on the same
# data; the transformer tutorial puts the CRF on a BERT encoder with word masks.
print(f"total {time.perf_counter() - start_time:.1f} s")
