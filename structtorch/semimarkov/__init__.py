"""Semi-Markov (segment) models: Viterbi and log-partition over segmentations (``segments``) and
the segment-mean PLiF features they accumulate (``plif``)."""

from .layout import SemiMarkov
from .plif import SegmentPLiF, check_support, plif_basis, plif_interpolate
from .segments import semimarkov_log_partition, semimarkov_score, semimarkov_viterbi

__all__ = ["semimarkov_viterbi", "semimarkov_log_partition", "semimarkov_score", "SemiMarkov", "SegmentPLiF",
           "plif_interpolate", "plif_basis", "check_support"]
