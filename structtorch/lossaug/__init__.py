"""Loss-augmented inference with a Hamming-loss dimension, exact for margin and slack rescaling:
linear chains and order-l windows (``hamming``; tables in ``_torch`` and ``_cpu``) and segmentations
(``semimarkov``)."""

from .hamming import loss_augmented_viterbi, loss_augmented_viterbi_window
from .semimarkov import semimarkov_loss_augmented

__all__ = ["loss_augmented_viterbi", "loss_augmented_viterbi_window", "semimarkov_loss_augmented"]
