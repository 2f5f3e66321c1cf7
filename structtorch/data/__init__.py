"""Synthetic data generators that reproduce the papers' setups."""

from .bauer import bauer_features, bauer_synthetic
from .digits import DigitSequences, digit_sequences, digit_transitions
from .genes import SEGMENT_NAMES, GeneData, gene_grammar, synthetic_genes
from .objects import OBJECT_CLASSES, ObjectData, synthetic_objects
from .tagging import SequenceData, TaggingData, make_tagging_data

__all__ = [
    "SequenceData",
    "TaggingData",
    "make_tagging_data",
    "bauer_synthetic",
    "bauer_features",
    "GeneData",
    "synthetic_genes",
    "gene_grammar",
    "SEGMENT_NAMES",
    "ObjectData",
    "synthetic_objects",
    "OBJECT_CLASSES",
    "DigitSequences",
    "digit_sequences",
    "digit_transitions",
]
