"""structtorch: differentiable structured prediction layers for PyTorch."""

from . import data, lp, train
from .chain import Viterbi, kbest, log_partition, marginals, path_score, viterbi
from .crf import LinearChainCRF
from .features import HistogramBinning, LinearChainPotentials, PLiF, SegmentPLiF, plif_basis, plif_interpolate
from .hamming import loss_augmented_viterbi, loss_augmented_viterbi_window
from .hsm import HiddenSemiMarkovSVM
from .losses import StructuredHingeLoss, structured_hinge
from .semimarkov import semimarkov_log_partition, semimarkov_viterbi
from .semimarkov_loss import semimarkov_loss_augmented
from .window import viterbi_window, window_score

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
]

__version__ = "0.3.0"
