"""Semi-Markov (segment) models: Viterbi and log-partition over segmentations (``segments``), the
k best (``kbest``) and samples (``sampling``), and the segment-mean PLiF features they accumulate
(``plif``). The potentials' type and checks are in ``layout``; the PyTorch reference loops and the
overflow guard in ``_torch``, the compiled and Triton kernels in ``_cpu`` and ``_triton``, the
operators in ``_ops``."""

from .kbest import semimarkov_kbest
from .layout import SemiMarkov
from .plif import SegmentPLiF, check_support, plif_basis, plif_interpolate
from .sampling import semimarkov_sample
from .segments import semimarkov_log_partition, semimarkov_score, semimarkov_viterbi

__all__ = ["semimarkov_viterbi", "semimarkov_log_partition", "semimarkov_score", "semimarkov_kbest",
           "semimarkov_sample", "SemiMarkov", "SegmentPLiF", "plif_interpolate", "plif_basis",
           "check_support"]
