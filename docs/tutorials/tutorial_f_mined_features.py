"""
Mined substructures as features: sequences, graphs and boosting
===============================================================

Some classes differ not in *which* parts an object has but in *how they are arranged*: the same
motion words in another temporal order, the same labeled edges closed into a cycle instead of an
open path. Bags of parts cannot see that; substructure patterns can. :mod:`structtorch.mining`
(Nowozin 2009, Part I) finds patterns in itemset sequences and labeled graphs by reverse search,
selects a small discriminative set of them by boosting (LPBoost, column generation: the miner is
asked for the pattern that most violates the current dual), and turns the selected patterns into
binary features, the precomputed inputs of the chain, semi-Markov and graph models.

This page:

1. mines frequent and discriminative patterns in KTH-like action clips (itemset sequences);
2. boosts over them and reads the chosen patterns;
3. uses them as window features of a chain structural SVM that segments long streams of actions,
   against bags of words;
4. does the same for labeled graphs: boosting finds a planted labeled triangle, and subgraph
   features of each node's neighbourhood become the unary inputs of an LP graph model.
"""

# %%
# Itemset sequences
# -----------------
# :func:`structtorch.data.action_sequences` draws clips of six actions; each clip is a tuple of B
# temporal bins, each bin the set (``frozenset``) of visual words seen in it. In the ``"order"``
# setting the three actions of a group (boxing, clapping, waving; jogging, running, walking) use
# the *same* words, in different temporal orders.
import functools
import time

import numpy as np
import torch

import structtorch as st
from structtorch import lp, mining
from structtorch.data import ACTION_CLASSES, action_sequences, action_streams, motif_graphs
from structtorch.mining import graphs

clips = action_sequences(120, setting="order", B=6, splits=(60, 30, 30), seed=0)
X, y = clips.sequences, clips.labels.numpy()
tr, te = clips.train.numpy(), clips.test.numpy()
Xtr, Xte = [X[i] for i in tr], [X[i] for i in te]
print(f"{len(X)} clips of {len(X[0])} bins; classes {ACTION_CLASSES}")
print("first clip, bin sizes:", [len(b) for b in X[0]], "; bin 0 holds words", sorted(X[0][0])[:8], "...")

# %%
# A pattern is itself an itemset sequence; it occurs in a clip when its itemsets are subsets of
# later and later bins (gaps allowed, :func:`structtorch.mining.contains`).
# :func:`~structtorch.mining.frequent_patterns` lists the patterns that occur in at least a
# given share of the clips.
f = frozenset
a = min(X[0][0] - f().union(*X[0][1:]))  # a word of the first bin only
b = min(X[0][-1] - f().union(*X[0][:-1]))  # a word of the last bin only
print(mining.contains((f({a}), f({b})), X[0]), mining.contains((f({b}), f({a})), X[0]))  # order counts
began = time.perf_counter()
frequent = mining.frequent_patterns(Xtr, 0.25, max_size=2)
print(f"{len(frequent)} patterns of at most 2 words in >= 25% of the training clips "
      f"({time.perf_counter() - began:.2f} s); the most frequent:")
for pattern, support in sorted(frequent, key=lambda row: -row[1])[:3]:
    print(f"  {[sorted(s) for s in pattern]} in {support} clips")

# %%
# Boosting over patterns
# ----------------------
# :class:`~structtorch.mining.LPBoost` takes a *miner*: for the current boosting weights it must
# return the patterns of largest gain, which :func:`~structtorch.mining.best_patterns` finds
# without enumerating them all (Theorem 2's bound prunes the search tree). Six classes are handled
# one-vs-one (15 binary problems, decided by a DDAG).
miner = functools.partial(mining.best_patterns, max_size=3, min_support=2)
began = time.perf_counter()
boost = mining.LPBoost(miner, nu=0.1, columns=10).fit(Xtr, y[tr])
print(f"fitted in {time.perf_counter() - began:.1f} s; test accuracy {boost.score(Xte, y[te]):.3f}")
print("patterns per one-vs-one classifier:", [len(p) for p in boost.patterns_])
(i, j), pats, alpha = boost.pairs_[0], boost.patterns_[0], boost.alpha_[0]
pattern, direction = pats[int(np.argmax(alpha))]
print(f"{ACTION_CLASSES[i]} vs {ACTION_CLASSES[j]}: heaviest pattern {[sorted(s) for s in pattern]} "
      f"(weight {alpha.max():.3f}) votes for {ACTION_CLASSES[j] if direction > 0 else ACTION_CLASSES[i]}")

# %%
# Patterns as features
# --------------------
# :class:`~structtorch.mining.SubstructureFeatures` is the binary feature map of a fixed set of
# patterns: ``transform`` gives ``(n, |T|)`` for whole instances, ``transform_windows`` the
# features of a window around each position of a sequence, ``(B, T, |T|)``, and ``to_ids`` the
# same as padded active ids for :class:`structtorch.SparseFeaturePotentials`.
feats = mining.SubstructureFeatures.from_model(boost)
phi = feats.transform(Xte)
print(feats, "->", tuple(phi.shape), f"{phi.mean():.2f} of the entries are 1")

# %%
# A chain model on mined window features
# --------------------------------------
# :func:`structtorch.data.action_streams` concatenates clips of different actions into long
# streams labeled per bin. The task is to label every bin. LPBoost is fitted on windows of 5 bins
# labeled by their centre, its patterns become window features of every position, and a chain
# structural SVM (margin-rescaled Hamming hinge, trained by BCFW) decodes whole streams by
# Viterbi. The same model on bag-of-words windows (one itemset pattern ``{w}`` per word) is the
# baseline: in the ``"order"`` setting it can tell the groups apart, not the actions within one.
streams = action_streams(36, setting="order", clips=(2, 4), bins_per_clip=4, vocab=200, seed=0)
width = 5


def windows(index):
    out, labels = [], []
    for s in index:
        seq = streams.sequences[s]
        for t in range(len(seq)):
            out.append(seq[max(0, t - (width - 1) // 2):t + width // 2 + 1])
            labels.append(int(streams.labels[s, t]))
    return out, np.array(labels)


train_idx, test_idx = streams.train, torch.cat([streams.val, streams.test])
Xw, yw = windows(train_idx.tolist())
pick = np.random.default_rng(0).choice(len(Xw), 80, replace=False)
began = time.perf_counter()
pairs_miner = functools.partial(mining.best_patterns, max_size=2, min_support=2)
window_boost = mining.LPBoost(pairs_miner, nu=0.1, columns=10).fit([Xw[k] for k in pick], yw[pick])
mined = mining.SubstructureFeatures.from_model(window_boost)
print(f"mined {len(mined)} patterns from 80 training windows in {time.perf_counter() - began:.1f} s")
bow = mining.SubstructureFeatures([f({w}) for w in range(200)])


def chain_svm(dictionary):
    ids = mining.SubstructureFeatures.to_ids(dictionary.transform_windows(streams.sequences, width))
    train = st.SequenceData(ids[train_idx], streams.labels[train_idx], streams.lengths[train_idx])
    test = st.SequenceData(ids[test_idx], streams.labels[test_idx], streams.lengths[test_idx])
    model = st.SparseFeaturePotentials(len(dictionary), len(ACTION_CLASSES), boundary=True)
    st.train.fit(model, train, None, epochs=10, C=1.0, solver="bcfw", progress=False)
    with torch.no_grad():
        unary, transitions, start, end = model(test.x)
        paths = st.viterbi(unary, transitions, start=start, end=end, lengths=test.lengths)[1]
    return (st.train.accuracy(paths, test.labels, test.lengths),
            st.segment_f1(paths, test.labels, test.lengths, overlap=0.5))


for name, dictionary in (("bag of words", bow), ("mined patterns", mined)):
    began = time.perf_counter()
    accuracy, f1 = chain_svm(dictionary)
    print(f"{name:>15}: frame accuracy {accuracy:.3f}, segment F1@0.5 {f1:.3f} ({len(dictionary)} features, "
          f"{time.perf_counter() - began:.1f} s)")

# %%
# Labeled graphs
# --------------
# :func:`structtorch.data.motif_graphs` plants a labeled triangle in the positive graphs and the
# same labeled edges as an open path in the negatives, so bags of node labels and of labeled
# edges have one distribution in both classes. Graphs are ``(node_labels, edges, edge_labels)``
# triples (networkx graphs work too); patterns are gSpan's minimum DFS codes, tuples of edges
# ``(i, j, label_i, edge_label, label_j)``.
data = motif_graphs(90, num_nodes=(8, 12), seed=0)
gy = data.labels.numpy()
gtr = data.train.numpy()
gte = np.concatenate([data.val.numpy(), data.test.numpy()])
Gtr, Gte = [data.graphs[i] for i in gtr], [data.graphs[i] for i in gte]
print(f"{len(data.graphs)} graphs; the planted motif as a DFS code: {graphs.dfs_code(data.motif)}")
common = graphs.frequent_patterns(Gtr, 0.5, max_size=2)
print(f"{len(common)} subgraphs of <= 2 edges occur in half the training graphs")

graph_miner = functools.partial(graphs.best_patterns, max_size=3, min_support=2)
began = time.perf_counter()
graph_boost = mining.LPBoost(graph_miner, nu=0.1, columns=5).fit(Gtr, gy[gtr])
print(f"subgraph LPBoost: test accuracy {graph_boost.score(Gte, gy[gte]):.3f} "
      f"({time.perf_counter() - began:.1f} s, {len(graph_boost.patterns_)} patterns)")
for m in np.argsort(-graph_boost.alpha_)[:2]:
    code, direction = graph_boost.patterns_[m]
    planted = "  <- the planted triangle" if graphs.contains(code, data.motif) and len(code) == 3 else ""
    print(f"  weight {graph_boost.alpha_[m]:.3f}, direction {direction:+d}: {code}{planted}")

# %%
# Subgraph features of each node
# ------------------------------
# For a graph *labeling* model the features are per node: ``transform_neighbourhoods`` tests each
# pattern on the subgraph induced by the nodes within ``radius`` edges of each node, ``(V, |T|)``.
# A linear map of them gives the unary scores of an LP graph model (:mod:`structtorch.lp`), here
# untrained weights that favour label 1 wherever the triangle pattern is found, with label 1
# required to be connected.
node_feats = mining.SubstructureFeatures([graph_boost.patterns_[int(np.argmax(graph_boost.alpha_))][0]])
positive = next(g for g, label in zip(data.graphs, gy, strict=True) if label == 1)
N = node_feats.transform_neighbourhoods(positive, radius=1, dtype=torch.float64)  # (V, 1)
unary_g = torch.cat([torch.full_like(N, 0.5), 2 * N], 1)  # (V, 2): label 1 where the pattern is near
edges_g = torch.as_tensor(positive[1])
edges_g = torch.sort(edges_g, 1).values  # i < j
res = lp.map_lp(unary_g, torch.zeros(len(edges_g), 2, 2, dtype=torch.float64), edges_g, connected=[1])
print(f"{int(N.sum())} of {len(N)} nodes see the pattern within 1 edge; labeling "
      f"{lp.round_labels(res.mu)[0][0].tolist()} (integral {bool(res.integral[0])})")
