"""structtorch: differentiable structured prediction layers for PyTorch."""

from . import data, lp
from ._backend import use_backend
from ._checks import set_validation, validation_enabled
from .chain import Viterbi, kbest, log_partition, marginals, path_score, viterbi, viterbi_window, window_score
from .learn import StructuredHingeLoss, structured_hinge, train
from .lossaug import loss_augmented_viterbi, loss_augmented_viterbi_window, semimarkov_loss_augmented
from .nn import HiddenSemiMarkovSVM, HistogramBinning, LinearChainCRF, LinearChainPotentials, PLiF
from .semimarkov import (
    SegmentPLiF,
    plif_basis,
    plif_interpolate,
    semimarkov_log_partition,
    semimarkov_viterbi,
)

__all__ = [
    "viterbi",
    "log_partition",
    "marginals",
    "path_score",
    "kbest",
    "viterbi_window",
    "window_score",
    "Viterbi",
    "LinearChainCRF",
    "loss_augmented_viterbi",
    "loss_augmented_viterbi_window",
    "StructuredHingeLoss",
    "structured_hinge",
    "semimarkov_viterbi",
    "semimarkov_log_partition",
    "semimarkov_loss_augmented",
    "LinearChainPotentials",
    "HistogramBinning",
    "PLiF",
    "HiddenSemiMarkovSVM",
    "SegmentPLiF",
    "plif_interpolate",
    "plif_basis",
    "data",
    "train",
    "lp",
    "use_backend",
    "set_validation",
    "validation_enabled",
]

__version__ = "0.3.0"
