"""
Trees: dependency parsing and constituency CKY
==============================================

A dependency tree gives each word of a sentence one head: another word, or the root. Its score is
the sum of its arcs' scores, ``arc_scores[b, h, m]`` for head ``h`` and word ``m``, with position 0
the root and words at 1..T, so arc scores are (B, T + 1, T + 1). *Projective* trees (no two arcs
cross when drawn above the sentence) are found by Eisner's O(T^3) dynamic program; *all* trees by
Chu-Liu-Edmonds, and their log-partition is a determinant (the matrix-tree theorem). A
constituency tree brackets the words into nested labeled spans, scored by span scores (B, T, T,
N), by CKY.

This page checks the three algorithms against brute force on a 4-word sentence, trains a small
biaffine parser as a non-projective CRF on :func:`structtorch.data.synthetic_treebank`, draws its
trees and arc marginals, and ends with a structured SVM on trees and a constituency example.
``examples/dependency_parser.py`` is the full demo (a BiLSTM parser, the slack-rescaled hinge
against the CRF, UAS and LAS).
"""

# %%
# Arc scores and the best tree
# ----------------------------
# Four words; the root prefers word 2, word 2 heads words 1 and 4, and word 4 would like to head
# word 1 too. ``dependency_viterbi`` returns each word's head (-1 at the root).
import itertools
import time

import torch

import structtorch as st

start_time = time.perf_counter()
arcs = torch.full((1, 5, 5), -1.0, dtype=torch.float64)
for h, m, s in [(0, 2, 3.0), (2, 1, 2.0), (2, 4, 2.0), (4, 1, 2.5), (1, 3, 1.0), (4, 3, 1.2)]:
    arcs[0, h, m] = s
for projective in (True, False):
    score, heads = st.dependency_viterbi(arcs, projective=projective)
    print(f"projective={projective!s:5}: heads {heads[0, 1:].tolist()}, score {float(score):.1f}")

# %%
# The non-projective tree attaches word 1 to word 4 (2.5 instead of 2.0): the arc 4 -> 1 spans
# word 2, whose own arc comes from the root outside it, so the two arcs cross. Both results can be
# checked by enumerating the trees of four words (the acyclic ones among the 5^4 head
# assignments): the log-partitions and the best scores agree.


def trees(L, projective):
    for heads in itertools.product(range(L + 1), repeat=L):
        seen_ok = all(h != m for m, h in enumerate(heads, 1))
        for m in range(1, L + 1):  # acyclic: every word reaches the root
            x, steps = m, 0
            while x and steps <= L:
                x, steps = heads[x - 1], steps + 1
            seen_ok &= x == 0
        spans = [(min(h, m), max(h, m)) for m, h in enumerate(heads, 1)]
        crossing = any(a[0] < b[0] < a[1] < b[1] for a in spans for b in spans)
        if seen_ok and not (projective and crossing):
            yield heads


for projective in (True, False):
    every = list(trees(4, projective))
    scores = torch.tensor([sum(float(arcs[0, h, m]) for m, h in enumerate(t, 1)) for t in every],
                          dtype=torch.float64)
    logz = st.dependency_log_partition(arcs, projective=projective)
    print(f"projective={projective!s:5}: {len(every):3} trees, logZ {float(logz):.6f} "
          f"(enumerated {float(torch.logsumexp(scores, 0)):.6f}), best {float(scores.max()):.1f}")

# %%
# A biaffine parser trained as a tree CRF
# ---------------------------------------
# The synthetic treebank comes from a small grammar (a verb with subject, object and prepositional
# phrases, nouns with determiners, adjectives and modifiers); prepositional phrases attach to the
# verb or to the noun before them depending on their noun, and with ``extraposition`` the
# subject's modifier moves to the end of the sentence, which makes its arc cross the verb's.
# The encoder here is a convolution over word embeddings (the example uses a BiLSTM); the arc
# scores are biaffine in a head and a dependent projection of each position, the root a learned
# vector. ``st.DependencyCRF(projective=False)`` gives the negative log-likelihood through the
# matrix-tree theorem, and decodes with Chu-Liu-Edmonds.
from torch import nn

from structtorch.data import synthetic_treebank
from structtorch.data.treebank import VOCABULARY

train_set = synthetic_treebank(600, extraposition=0.8, seed=1)
test_set = synthetic_treebank(200, extraposition=0.8, seed=2)


class ConvParser(nn.Module):
    def __init__(self, dim=48, width=5):
        super().__init__()
        self.embed = nn.Embedding(VOCABULARY, dim, padding_idx=0)
        self.root = nn.Parameter(0.1 * torch.randn(dim))
        self.conv = nn.Sequential(nn.Conv1d(dim, dim, width, padding=width // 2), nn.ReLU(),
                                  nn.Conv1d(dim, dim, width, padding=width // 2), nn.ReLU())
        self.head, self.dep = nn.Linear(dim, dim), nn.Linear(dim, dim)

    def forward(self, words):  # (B, T) -> arc scores (B, T + 1, T + 1)
        x = torch.cat([self.root.expand(len(words), 1, -1), self.embed(words)], 1)
        x = x + self.conv(x.transpose(1, 2)).transpose(1, 2)
        return self.head(x) @ self.dep(x).transpose(1, 2) / x.shape[-1] ** 0.5


torch.manual_seed(0)
model, crf = ConvParser(), st.DependencyCRF(projective=False)
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
for epoch in range(8):
    for index in torch.randperm(len(train_set)).split(32):
        batch = train_set.batch(index)
        loss = crf(model(batch.words), batch.heads, batch.lengths, reduction="token_mean")
        opt.zero_grad()
        loss.backward()
        opt.step()
with torch.no_grad():
    arcs = model(test_set.words)
    predicted = crf.decode(arcs, test_set.lengths)[1]
words = test_set.heads >= 0
print(f"UAS on {len(test_set)} test sentences: {100 * float((predicted == test_set.heads)[words].float().mean()):.1f}%")

# %%
# What the parser believes
# ------------------------
# A test sentence with crossing arcs: the gold tree above the words, the predicted one below, and
# the arc marginals p(head of m = h) beside them (``st.dependency_marginals``: each column sums
# to 1, a word whose head is uncertain spreads its column).
import matplotlib.pyplot as plt


def crossing(h, L):
    spans = [(min(h[m], m), max(h[m], m)) for m in range(1, L + 1)]
    return any(a[0] < b[0] < a[1] < b[1] for a in spans for b in spans)


b = next(i for i in range(len(test_set)) if crossing(test_set.heads[i].tolist(), int(test_set.lengths[i])))
L = int(test_set.lengths[b])
marginals = st.dependency_marginals(arcs[b:b + 1, :L + 1, :L + 1], projective=False)[0]
fig, (ax, heat) = plt.subplots(1, 2, figsize=(11, 3.8))
for heads, sign, color, name in ((test_set.heads[b], 1, "tab:blue", "gold"), (predicted[b], -1, "tab:orange",
                                                                              "predicted")):
    for m in range(1, L + 1):
        h, x = int(heads[m]), torch.linspace(0, 1, 40)
        ax.plot(h + (m - h) * x, sign * abs(m - h) / 2 * torch.sin(torch.pi * x), color=color,
                label=name if m == 1 else None)
ax.set_xticks(range(L + 1), ["ROOT"] + [f"w{int(w)}" for w in test_set.words[b, :L]], rotation=60)
ax.set_yticks([])
ax.legend(loc="upper left")
ax.set_title("gold (above) and predicted (below) arcs")
shown = heat.imshow(marginals[:, 1:], vmin=0, vmax=1, cmap="magma")
heat.set_xticks(range(L), range(1, L + 1))
heat.set_xlabel("word m")
heat.set_ylabel("head h (0 = root)")
heat.set_title("arc marginals")
fig.colorbar(shown, ax=heat)
fig.tight_layout()

# %%
# A structured SVM on trees
# -------------------------
# ``st.DependencyDistribution`` is a structure for :func:`structtorch.structured_hinge`: with
# ``rescaling="slack"`` the hinge is max over trees y of Delta(y) (1 + s(y) - s(gold)), Delta the
# number of wrong heads; the maximization is exact through Eisner's DP over a Hamming-count
# dimension (projective trees). Its gradient is Delta times the difference of the two trees'
# arc indicators. An untrained parser on projective training sentences:
batch = train_set.batch(torch.arange(8))
rows = torch.tensor([not crossing(h.tolist(), int(n)) for h, n in zip(batch.heads, batch.lengths, strict=True)])
scores = ConvParser()(batch.words)[rows]
structure = st.DependencyDistribution(scores, batch.lengths[rows])
hinge = st.structured_hinge(structure, batch.heads[rows], rescaling="slack", reduction="none")
worst = structure.loss_augmented(batch.heads[rows], rescaling="slack")[1]
print("slack-rescaled hinge:", [round(x, 2) for x in hinge.tolist()])
print("wrong heads in the most violating trees:", ((worst != batch.heads[rows]) & (worst >= 0)).sum(1).tolist())
hinge.sum().backward()  # a subgradient for any torch optimizer

# %%
# Constituency trees by CKY
# -------------------------
# Span scores (B, T, T, N) score words i..j as a constituent with label n; a tree is a binary
# bracketing whose 2L - 1 spans (single words included) each carry a label. Here two labels, "NP"
# and "X", and a sentence of five words whose first two and last three belong together.
labels = ["X", "NP"]
span_scores = torch.zeros(1, 5, 5, 2, dtype=torch.float64)
span_scores[0, 0, 1, 1] = span_scores[0, 2, 4, 1] = 2.0  # NP over words 0-1 and 2-4
span_scores[0, 3, 4, 1] = 1.0
score, spans = st.cky_viterbi(span_scores)


def bracket(spans, i, j):
    n = int(spans[i, j].argmax())
    if i == j:
        return f"w{i}"
    k = next(k for k in range(i, j) if spans[i, k].any() and spans[k + 1, j].any())
    return f"({labels[n]} {bracket(spans, i, k)} {bracket(spans, k + 1, j)})"


print("best tree:", bracket(spans[0], 0, 4), f"score {float(score):.1f}")
print("p(NP over words 2-4) =", round(float(st.cky_marginals(span_scores)[0, 2, 4, 1]), 3))
print(f"this page ran in {time.perf_counter() - start_time:.0f} s")
