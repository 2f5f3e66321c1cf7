"""structtorch: differentiable structured prediction layers for PyTorch."""

from .chain import Viterbi, kbest, log_partition, marginals, path_score, viterbi
from .crf import LinearChainCRF
from .window import viterbi_window

__all__ = [
    "viterbi",
    "log_partition",
    "marginals",
    "path_score",
    "kbest",
    "viterbi_window",
    "Viterbi",
    "LinearChainCRF",
]

__version__ = "0.1.0"
