"""Learning: structured hinge losses (``losses``) and the subgradient training loop with its
metrics (``train``)."""

from . import bcfw, train
from .bcfw import fit_bcfw
from .losses import StructuredHingeLoss, structured_hinge

__all__ = ["StructuredHingeLoss", "structured_hinge", "train", "bcfw", "fit_bcfw"]
