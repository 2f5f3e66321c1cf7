"""Synthetic data generators that reproduce the papers' setups; ``import structtorch`` does not load
them (``structtorch.data`` loads on first use).

:class:`SequenceData` (from :mod:`structtorch.sequence_data`) and the tag utilities
:func:`encode_tags`, :func:`decode_tags` and :func:`to_bio` (from :mod:`structtorch.schemes`)
belong to the library proper and are re-exported here, where they were.
"""

from .actions import ACTION_CLASSES, ActionData, ActionStreams, action_sequences, action_streams
from .bauer import bauer_features, bauer_synthetic
from .conll import (
    CHUNK_TYPES,
    conll_sequence_data,
    decode_tags,
    encode_tags,
    read_conll,
    synthetic_chunking,
    to_bio,
    token_features,
    window_features,
    write_conll,
)
from .digits import DigitSequences, digit_sequences, digit_transitions
from .genes import SEGMENT_NAMES, GeneData, gene_grammar, synthetic_genes
from .graphs import GraphData, motif_graphs
from .manifold import PITCH_FEATURES, pitch_accent_like
from .objects import OBJECT_CLASSES, ObjectData, synthetic_objects
from .tagging import SequenceData, TaggingData, make_tagging_data
from .treebank import RELATIONS, WORD_CLASSES, Treebank, synthetic_treebank

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
    "Treebank",
    "synthetic_treebank",
    "RELATIONS",
    "WORD_CLASSES",
    "synthetic_objects",
    "OBJECT_CLASSES",
    "DigitSequences",
    "digit_sequences",
    "digit_transitions",
    "read_conll",
    "write_conll",
    "synthetic_chunking",
    "window_features",
    "token_features",
    "encode_tags",
    "decode_tags",
    "to_bio",
    "conll_sequence_data",
    "CHUNK_TYPES",
    "ActionData",
    "action_sequences",
    "ACTION_CLASSES",
    "ActionStreams",
    "action_streams",
    "GraphData",
    "motif_graphs",
    "pitch_accent_like",
    "PITCH_FEATURES",
]
