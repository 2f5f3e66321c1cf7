"""structtorch: differentiable structured prediction layers for PyTorch."""

from .chain import Viterbi, kbest, log_partition, marginals, path_score, viterbi
from .crf import LinearChainCRF
from .hamming import loss_augmented_viterbi, loss_augmented_viterbi_window
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
]

__version__ = "0.1.0"
