"""Synthetic gene structures with the grammar of Rätsch & Sonnenburg (2007), Fig. 2.

A sequence is intergenic DNA, then one gene, then intergenic DNA. The gene is a single exon, or a
first exon, introns alternating with internal exons, and a last exon. The gene begins with the
start codon ATG (after a Kozak-like motif) and ends with a stop codon (TAA, TAG or TGA); every
intron starts with the donor consensus GT and ends with the acceptor consensus AG. Exons are
GC-rich, introns AT-rich, and the neighbourhoods of the sites follow position weight matrices. All
of them are noisy, and ATG, stop codons, GT and AG occur everywhere by chance (decoys).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

A, C, G, T_ = 0, 1, 2, 3
NUCLEOTIDES = "ACGT"
INTERGENIC, EXON_SINGLE, EXON_FIRST, EXON_INTERNAL, EXON_LAST, INTRON = range(6)
SEGMENT_NAMES = ("intergenic", "exon (single)", "exon (first)", "exon (internal)", "exon (last)", "intron")
EXONS = (EXON_SINGLE, EXON_FIRST, EXON_INTERNAL, EXON_LAST)


def gene_grammar() -> Tensor:
    """(6, 6) bool: allowed[m, n] when a segment of type m may be followed by one of type n."""
    allowed = torch.zeros(6, 6, dtype=torch.bool)
    for m, n in [(INTERGENIC, EXON_SINGLE), (INTERGENIC, EXON_FIRST), (EXON_SINGLE, INTERGENIC),
                 (EXON_FIRST, INTRON), (INTRON, EXON_INTERNAL), (INTRON, EXON_LAST),
                 (EXON_INTERNAL, INTRON), (EXON_LAST, INTERGENIC)]:
        allowed[m, n] = True
    return allowed


LENGTHS = {  # segment type -> (shortest, longest)
    INTERGENIC: (300, 700),
    EXON_SINGLE: (100, 300),
    EXON_FIRST: (50, 200),
    EXON_INTERNAL: (50, 150),
    EXON_LAST: (50, 200),
    INTRON: (50, 1000),
}
COMPOSITION = {  # base frequencies A, C, G, T
    "intergenic": (0.30, 0.20, 0.20, 0.30),
    "exon": (0.22, 0.28, 0.28, 0.22),
    "intron": (0.32, 0.18, 0.18, 0.32),
}
# splice-site neighbourhoods: a biased base per offset (probability ``SITE_BIAS``), else background
DONOR_EXON_END = "CAG"  # the last exon bases before GT
DONOR_INTRON_START = "AAGTAT"  # intron bases after the GT
ACCEPTOR_INTRON_END = "TTTCTTTTCC"  # pyrimidine tract before the AG
KOZAK = "GCCACC"  # intergenic bases before the start codon
POLY_A = "AATAAA"  # intergenic bases 4 after the stop codon
START_CODON = "ATG"
STOP_CODONS = ("TAA", "TAG", "TGA")
SITE_BIAS = 0.8


@dataclass
class GeneData:
    """Padded DNA sequences with their gene structure.

    Attributes
    ----------
    dna : Tensor (n, T) int64 in {0: A, 1: C, 2: G, 3: T}, 0 beyond each length
    labels : Tensor (n, T) int64 segment type per position (see SEGMENT_NAMES), -1 beyond
    starts : Tensor (n, T) bool, True where a segment begins
    lengths : Tensor (n,) int64
    """

    dna: Tensor
    labels: Tensor
    starts: Tensor
    lengths: Tensor

    def __len__(self) -> int:
        return self.dna.shape[0]


def _bases(kind: str, length: int, g: torch.Generator) -> Tensor:
    return torch.multinomial(torch.tensor(COMPOSITION[kind]), length, replacement=True, generator=g)


def _bias(seq: Tensor, at: int, motif: str, g: torch.Generator) -> None:
    for i, base in enumerate(motif):
        pos = at + i
        if 0 <= pos < len(seq) and float(torch.rand(1, generator=g)) < SITE_BIAS:
            seq[pos] = NUCLEOTIDES.index(base)


def _codon(word: str) -> Tensor:
    return torch.tensor([NUCLEOTIDES.index(c) for c in word])


def _gene_segments(g: torch.Generator) -> list[int]:
    exons = int(torch.randint(1, 5, (1,), generator=g))
    if exons == 1:
        return [INTERGENIC, EXON_SINGLE, INTERGENIC]
    body = [EXON_FIRST] + [INTRON, EXON_INTERNAL] * (exons - 2) + [INTRON, EXON_LAST]
    return [INTERGENIC, *body, INTERGENIC]


def _one(g: torch.Generator) -> tuple[Tensor, Tensor, Tensor]:
    types = _gene_segments(g)
    sizes = [int(torch.randint(LENGTHS[k][0], LENGTHS[k][1] + 1, (1,), generator=g)) for k in types]
    kinds = ["intergenic" if k == INTERGENIC else "intron" if k == INTRON else "exon" for k in types]
    pieces = [_bases(kind, size, g) for kind, size in zip(kinds, sizes, strict=True)]
    for i, k in enumerate(types):
        if k != INTRON:
            continue
        intron = pieces[i]
        intron[:2] = torch.tensor([G, T_])  # donor consensus
        intron[-2:] = torch.tensor([A, G])  # acceptor consensus
        _bias(intron, 2, DONOR_INTRON_START, g)
        _bias(intron, len(intron) - 2 - len(ACCEPTOR_INTRON_END), ACCEPTOR_INTRON_END, g)
        _bias(pieces[i - 1], len(pieces[i - 1]) - len(DONOR_EXON_END), DONOR_EXON_END, g)
    first, last = pieces[1], pieces[-2]  # the gene's first and last exon
    first[:3] = _codon(START_CODON)
    _bias(pieces[0], len(pieces[0]) - len(KOZAK), KOZAK, g)
    last[-3:] = _codon(STOP_CODONS[int(torch.randint(3, (1,), generator=g))])
    _bias(pieces[-1], 4, POLY_A, g)
    dna = torch.cat(pieces)
    labels = torch.cat([torch.full((s,), k) for k, s in zip(types, sizes, strict=True)])
    starts = torch.zeros(len(dna), dtype=torch.bool)
    starts[torch.tensor([0] + sizes[:-1]).cumsum(0)] = True
    return dna, labels, starts


def synthetic_genes(n: int, *, seed: int = 0) -> GeneData:
    """Sample ``n`` sequences of about 1 to 3 kb (up to about 5 kb), each holding one gene.

    Returns
    -------
    GeneData
        ``dna`` (n, T), ``labels`` (n, T) segment types, ``starts`` (n, T), ``lengths`` (n,).
    """
    if n < 0:
        raise ValueError(f"n must be non-negative, got {n}")
    g = torch.Generator().manual_seed(seed)
    rows = [_one(g) for _ in range(n)]
    lengths = torch.tensor([len(r[0]) for r in rows], dtype=torch.long)
    T = int(lengths.max()) if n else 0
    dna = torch.zeros(n, T, dtype=torch.long)
    labels = torch.full((n, T), -1, dtype=torch.long)
    starts = torch.zeros(n, T, dtype=torch.bool)
    for i, (d, lab, st) in enumerate(rows):
        dna[i, : len(d)], labels[i, : len(d)], starts[i, : len(d)] = d, lab, st
    return GeneData(dna, labels, starts, lengths)
