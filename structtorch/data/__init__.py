"""Synthetic data generators that reproduce the papers' setups."""

from .tagging import TaggingData, make_tagging_data

__all__ = ["TaggingData", "make_tagging_data"]
