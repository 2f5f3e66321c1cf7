"""Synthetic data generators that reproduce the papers' setups."""

from .bauer import bauer_features, bauer_synthetic
from .tagging import SequenceData, TaggingData, make_tagging_data

__all__ = ["SequenceData", "TaggingData", "make_tagging_data", "bauer_synthetic", "bauer_features"]
