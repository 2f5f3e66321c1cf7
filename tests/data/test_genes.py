"""The synthetic gene data follows its grammar and has the promised statistics."""

from __future__ import annotations

import torch

from structtorch.data import gene_grammar, synthetic_genes
from structtorch.data.genes import EXONS, INTERGENIC, INTRON, LENGTHS

G, T_, A = 2, 3, 0


def segments(data, i):
    L = int(data.lengths[i])
    pos = data.starts[i, :L].nonzero().squeeze(1).tolist() + [L]
    return [(s, e, int(data.labels[i, s])) for s, e in zip(pos[:-1], pos[1:], strict=True)]


def test_grammar_lengths_and_splice_consensus():
    data = synthetic_genes(60, seed=1)
    allowed = gene_grammar()
    assert data.dna.shape[0] == 60 and (data.labels[data.labels >= 0] < 6).all()
    for i in range(60):
        segs = segments(data, i)
        assert segs[0][2] == INTERGENIC and segs[-1][2] == INTERGENIC
        for (_, _, a), (_, _, b) in zip(segs[:-1], segs[1:], strict=True):
            assert allowed[a, b], (a, b)
        for s, e, k in segs:
            lo, hi = LENGTHS[k]
            assert lo <= e - s <= hi
            assert (data.labels[i, s:e] == k).all()
            if k == INTRON:
                assert data.dna[i, s:s + 2].tolist() == [G, T_] and data.dna[i, e - 2:e].tolist() == [A, G]
        L = int(data.lengths[i])
        assert (data.labels[i, L:] == -1).all() and not data.starts[i, L:].any()
    assert 900 < data.lengths.float().mean() < 3000


def test_composition_differs_and_decoys_exist():
    data = synthetic_genes(80, seed=2)
    inside = data.labels >= 0
    gc = (data.dna == 1) | (data.dna == 2)
    exon = torch.zeros_like(inside)
    for k in EXONS:
        exon |= data.labels == k
    intron = data.labels == INTRON
    assert gc[exon].float().mean() > gc[intron].float().mean() + 0.05
    gt = (data.dna[:, :-1] == G) & (data.dna[:, 1:] == T_) & inside[:, 1:]
    donors = data.starts & (data.labels == INTRON)
    assert int(gt.sum()) > 5 * int(donors.sum())  # most GT are decoys


def test_reproducible():
    a, b = synthetic_genes(5, seed=3), synthetic_genes(5, seed=3)
    assert torch.equal(a.dna, b.dna) and torch.equal(a.labels, b.labels) and torch.equal(a.starts, b.starts)


def test_start_and_stop_codons():
    data = synthetic_genes(40, seed=4)
    stops = {(T_, A, A), (T_, A, G), (T_, G, A)}
    for i in range(40):
        segs = segments(data, i)
        gene = segs[1:-1]
        assert data.dna[i, gene[0][0]:gene[0][0] + 3].tolist() == [A, T_, G]
        assert tuple(data.dna[i, gene[-1][1] - 3:gene[-1][1]].tolist()) in stops


def test_sensors_and_metrics():
    from structtorch.data.gene_sensors import SIGNALS, GeneSensors, candidate_sites, gene_metrics, true_sites

    train, test = synthetic_genes(60, seed=5), synthetic_genes(30, seed=6)
    sensors = GeneSensors.fit(train)
    signals, contents = sensors.tracks(test)
    assert signals.shape == (*test.dna.shape, 4) and contents.shape == (*test.dna.shape, 3)
    for k, name in enumerate(SIGNALS):
        cand, true = candidate_sites(test, name), true_sites(test, name)
        assert (cand | ~true).all(), f"every true {name} site has its consensus"
        off = ~cand
        off[torch.arange(len(test)), test.lengths - 1] = False
        assert torch.isinf(signals[..., k][off]).all()
        pos, neg = signals[..., k][true], signals[..., k][cand & ~true]
        assert float((pos[:, None] > neg[None, :]).double().mean()) > 0.85, name  # AUC on held-out data
    perfect = gene_metrics(test.labels, test.starts, test)
    assert perfect == {"gene error": 0.0, "exon Sn": 1.0, "exon Sp": 1.0, "nucleotide Sn": 1.0, "nucleotide Sp": 1.0}
    shifted = test.starts.clone()
    first_exon = [int(row.nonzero()[1]) for row in test.starts]
    for i, s in enumerate(first_exon):
        shifted[i, s], shifted[i, s + 1] = False, True  # the first exon starts one base late
    labels = test.labels.clone()
    labels[torch.arange(len(test)), torch.tensor(first_exon)] = INTERGENIC
    bad = gene_metrics(labels, shifted, test)
    assert bad["gene error"] == 1.0 and bad["nucleotide Sp"] == 1.0 and bad["nucleotide Sn"] < 1.0
    assert 0.0 < bad["exon Sn"] < 1.0
