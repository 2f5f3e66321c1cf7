"""
Semi-Markov models, PLiFs and a hidden semi-Markov SVM gene finder
==================================================================

A linear chain labels positions; a semi-Markov model labels *segments*. A segmentation of
``[0, L)`` is a sequence of labeled segments ``[s, e)``, each scored as a whole: the sum of its
positions' content scores, a score for its length and label, a score at its boundary, and a
transition score between consecutive segments. Lengths are then modelled directly (an exon is
50-300 bases long; an HMM can only make long states geometrically unlikely), and features of a
whole segment (the mean of a sensor over it) become possible. The dynamic programs cost
``O(T S N^2)`` for segments of at most ``S`` positions.

This page decodes a toy signal with and without a length model, fits a piecewise-linear function
(PLiF, the feature transform of Rätsch & Sonnenburg 2007), and trains a small version of their
hidden semi-Markov SVM gene finder on :func:`structtorch.data.synthetic_genes`
(``examples/gene_structure.py`` is the full demo: two stages, C selection, a chain baseline).
"""

# %%
# Segments with a length model
# ----------------------------
# A noisy two-label signal, label 1 in runs of 4 to 6 positions. A chain (per-position scores
# plus a transition matrix) sees only neighbouring pairs: it merges runs or misses one. The
# semi-Markov model's length scores forbid (``-inf``) label-1 segments shorter than 4 or longer
# than 6, and its transitions forbid a segment followed by one of the same label (so each run is
# one segment, of at most ``S`` positions).
import time

import torch

import structtorch as st

start_time = time.perf_counter()
g = torch.Generator().manual_seed(4)
truth = torch.zeros(40, dtype=torch.long)
for s, d in ((5, 5), (16, 4), (27, 6)):
    truth[s:s + d] = 1
signal = truth.double() + 0.6 * torch.randn(40, generator=g, dtype=torch.float64)
content = torch.stack([-signal**2, -(signal - 1) ** 2], -1)[None] / 2  # (B=1, T, N=2): Gaussian log-likelihoods
trans = torch.tensor([[0.0, -1.0], [-1.0, 0.0]], dtype=torch.float64)  # (N, N): a change costs 1
_, chain_path = st.viterbi(content, trans)

S = 12  # the longest segment
length_scores = torch.zeros(S, 2, dtype=torch.float64)  # (S, N): length_scores[d - 1, n]
length_scores[:3, 1] = float("-inf")  # label 1: at least 4
length_scores[6:, 1] = float("-inf")  # and at most 6 positions
seg_trans = trans + torch.diag(torch.full((2,), float("-inf"), dtype=torch.float64))  # no 0 -> 0, 1 -> 1
score, seg_labels, seg_starts = st.semimarkov_viterbi(content, seg_trans, max_len=S,
                                                      length_scores=length_scores)


def show(labels):
    return "".join(".#"[v] for v in labels.tolist())


print("truth       ", show(truth))
print("chain       ", show(chain_path[0]), f"({int((chain_path[0] != truth).sum())} positions wrong)")
print("semi-Markov ", show(seg_labels[0]), f"({int((seg_labels[0] != truth).sum())} positions wrong)")
print("segments start at", seg_starts[0].nonzero().flatten().tolist())

# %%
# ``st.SemiMarkovDistribution`` wraps the same potentials as a distribution over segmentations
# (log-partition, marginals, entropy, samples, k-best), and ``st.SemiMarkovCRF`` is the layer
# with learnable transitions and length scores, trained on ``(labels, starts)`` targets.
dist = st.SemiMarkovDistribution(content, seg_trans, max_len=S, length_scores=length_scores)
p1 = dist.marginals.positions[0, :, 1]  # (T,) probability of label 1 at each position
print("P(label 1):", " ".join(f"{v:.1f}" for v in p1[:20].tolist()), "...")
print(f"entropy {dist.entropy.item():.3f} nats; 3 best scores:",
      [round(v, 3) for v in dist.kbest(3)[0][0].tolist()])
crf = st.SemiMarkovCRF(num_labels=2, max_len=S).double()
nll = crf(content, seg_labels, seg_starts)  # (B,) -log p(segmentation)
print(f"an untrained SemiMarkovCRF: NLL of the decoded segmentation {nll.item():.3f}")

# %%
# PLiFs: learnable piecewise-linear feature transforms
# ----------------------------------------------------
# A PLiF maps a scalar feature through a piecewise-linear function with fixed support points
# and learnable values, optionally monotone. It lets a linear model score a detector output or
# a segment length non-linearly while the score stays linear in the parameters (the values
# at the support points), so the structured SVM solvers still apply. Here one is fitted to a
# sigmoid-like target.
plif = st.PLiF(10, -4.0, 4.0, monotone="increasing").double()
x = torch.linspace(-5, 5, 200, dtype=torch.float64)
target = torch.tanh(x) + 0.1 * x
opt = torch.optim.Adam(plif.parameters(), lr=0.1)
for _ in range(300):
    opt.zero_grad()
    loss = ((plif(x) - target) ** 2).mean()
    loss.backward()
    opt.step()
print(f"PLiF fit: mean squared error {loss.item():.4f}; values at the support points "
      f"{[round(v, 2) for v in plif.ordinates[0].tolist()]}")
print("outside [-4, 4] it is constant:", [round(v, 3) for v in plif(torch.tensor([-5.0, 5.0])).tolist()])

# %%
# The gene finder: data and sensors
# ---------------------------------
# :func:`structtorch.data.synthetic_genes` draws DNA with one gene each: intergenic DNA, a single
# exon or first exon, (intron, internal exon)*, intron, last exon, intergenic DNA, with start
# codons, splice sites and stop codons in their consensus and decoys everywhere. The segment
# grammar (:func:`structtorch.data.gene_grammar`) says which segment type may follow which.
#
# As in the paper, stage 1 trains sensors on a first split: signal detectors (logistic
# regression at every candidate site: ATG, GT, AG, stop codons) and content sensors (exon,
# intron, intergenic k-mer statistics). Their outputs on the other splits are precomputed tracks:
# ``signals`` (B, T, 4) with ``-inf`` where no site can be, and ``contents`` (B, T, 3).
from structtorch.data import SEGMENT_NAMES, gene_grammar, synthetic_genes
from structtorch.data.gene_sensors import CONTENTS, SIGNALS, GeneSensors, gene_metrics

torch.manual_seed(0)
stage1, train_genes, test_genes = (synthetic_genes(n, seed=100 + k) for k, n in enumerate((30, 40, 30)))
print(f"{len(train_genes)} training sequences, lengths {int(train_genes.lengths.min())}-"
      f"{int(train_genes.lengths.max())} bp; segment types {SEGMENT_NAMES}")
t0 = time.perf_counter()
sensors = GeneSensors.fit(stage1)
train_tracks, test_tracks = sensors.tracks(train_genes), sensors.tracks(test_genes)
print(f"sensors trained in {time.perf_counter() - t0:.1f} s: signals {SIGNALS}, contents {CONTENTS}")
print("signals", tuple(train_tracks[0].shape), "contents", tuple(train_tracks[1].shape))

# %%
# The hidden semi-Markov SVM
# --------------------------
# :class:`structtorch.HiddenSemiMarkovSVM` scores a segment of type n ending at e by a PLiF of
# its signal track at e (a start codon ends an intergenic segment, a donor site an exon, ...),
# a PLiF of the mean of its content track over the segment, a PLiF of its length, and a bias
# per allowed transition. All of it is linear in the PLiF values, and decoding is one
# semi-Markov Viterbi with segments of up to 1000 bases.
signal_of = [SIGNALS.index(s) for s in ("start", "stop", "donor", "donor", "stop", "acceptor")]
content_of = [CONTENTS.index(c) for c in ("intergenic", "exon", "exon", "exon", "exon", "intron")]
intergenic = SEGMENT_NAMES.index("intergenic")
hsm = st.HiddenSemiMarkovSVM(
    gene_grammar(), max_len=1000, signal_of=signal_of, content_of=content_of,
    start_labels=[intergenic], end_labels=[intergenic], num_points=30, signal_range=(-10.0, 10.0),
    content_range=(-2.0, 2.0), length_range=(1.0, 1000.0), content_sums=True).double()
print(f"{hsm.weights().numel()} weights")

# %%
# Training minimizes the structured hinge (margin rescaling, a Hamming loss of 0.02 per
# mislabelled base, found by loss-augmented semi-Markov Viterbi) plus the paper's PLiF
# smoothness penalty, by Adam steps on two sequences at a time.
# (``st.train.fit(..., solver="cutting_plane")`` trains the same model to a duality-gap
# certificate on the segment loss: ``examples/gene_structure.py --solver cutting_plane``, minutes.)
signals, contents = train_tracks
opt = torch.optim.Adam(hsm.parameters(), lr=0.1)
order = torch.Generator().manual_seed(0)
t0 = time.perf_counter()
for epoch in range(6):
    total = 0.0
    for idx in torch.randperm(len(train_genes), generator=order).split(2):
        T = int(train_genes.lengths[idx].max())
        weights = torch.full((len(idx), T), 0.02, dtype=torch.float64)
        loss = hsm.loss(signals[idx, :T], contents[idx, :T], train_genes.labels[idx, :T],
                        train_genes.starts[idx, :T], train_genes.lengths[idx], weights=weights)
        opt.zero_grad()
        (loss + hsm.smoothness() / len(train_genes)).backward()
        opt.step()
        total += loss.item() * len(idx)
    print(f"epoch {epoch + 1}: mean hinge {total / len(train_genes):.3f}")
print(f"trained in {time.perf_counter() - t0:.1f} s")

# %%
# Evaluation with the paper's Table 1 metrics: gene-structure error (a gene counts as right only
# when every one of its exons is), exon and nucleotide sensitivity (Sn) and specificity (Sp).
# With 40 training sequences and six epochs this is a sketch of the full demo's numbers (21.5%
# gene error with 200 sequences); it shows the pieces working together.
with torch.no_grad():
    _, pred_labels, pred_starts = hsm.decode(*test_tracks, test_genes.lengths)
metrics = gene_metrics(pred_labels, pred_starts, test_genes)
print(" | ".join(f"{k} {100 * v:.1f}%" for k, v in metrics.items()))

# %%
# The learned length PLiFs are the model's view of segment lengths per type (intergenic
# segments are drawn 300-700 bp long), and the first test sequence shows the predicted structure
# against the truth: at this gene error, mistakes such as a spurious exon before the true one
# are common.
import importlib.util

if importlib.util.find_spec("matplotlib") is not None:
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(8, 5.5))
    with torch.no_grad():
        lengths_grid = hsm.length_plif.support
        for n, name in enumerate(SEGMENT_NAMES):
            ax1.plot(lengths_grid.numpy(), hsm.length_plif.ordinates[n].numpy(), label=name)
    ax1.set_xlabel("segment length (bp)")
    ax1.set_ylabel("length score")
    ax1.legend(fontsize=7, ncol=3)
    i = 0
    L = int(test_genes.lengths[i])
    for row, labels in enumerate((test_genes.labels[i, :L], pred_labels[i, :L])):
        for k in range(len(SEGMENT_NAMES)):
            at = (labels == k).nonzero().flatten().numpy()
            color = "0.85" if k == intergenic else "tab:orange" if SEGMENT_NAMES[k] == "intron" else "tab:blue"
            ax2.vlines(at, row - 0.35, row + 0.35, colors=color, lw=0.6)
    ax2.set_yticks([0, 1], ["truth", "HSM SVM"])
    ax2.set_xlabel("position (blue: exon, orange: intron, grey: intergenic)")
    fig.tight_layout()
    plt.show()
print(f"total {time.perf_counter() - start_time:.1f} s")
