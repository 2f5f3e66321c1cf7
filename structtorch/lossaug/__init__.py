"""Loss-augmented inference, exact for margin and slack rescaling, for every structure.

Rooms, as in every structure package: ``chain`` and ``semimarkov`` (the public functions),
``spec`` (the loss in canonical form and the checks of its arguments), ``structures`` (the generic
search and the structures it runs on), ``_torch`` (the Hamming-count tables, the reference loops),
``_cpu`` and ``_triton`` (the chains' tables as kernels; on Triton the whole search of the unweighted
Hamming loss, value and tie rule included) and ``_ops`` (the searches as operators).
"""

from .chain import (
           loss_augmented,
           loss_augmented_viterbi,
           loss_augmented_viterbi_window,
           window_loss_augmented,
)
from .semimarkov import semimarkov_loss_augmented

__all__ = ["loss_augmented", "window_loss_augmented", "semimarkov_loss_augmented", "loss_augmented_viterbi",
           "loss_augmented_viterbi_window"]
