"""Former home of the chain and window loss-augmented inference, kept so that old imports work:
the public functions are in :mod:`structtorch.lossaug.chain`, the loss specification in
:mod:`structtorch.lossaug.spec` and the generic search in :mod:`structtorch.lossaug.structures`."""

from .chain import loss_augmented, loss_augmented_chain, loss_augmented_viterbi, loss_augmented_viterbi_window
from .spec import ALGORITHMS, MAX_COUNTS, RESCALINGS, HLike, LossSpec, resolve_loss

__all__ = ["loss_augmented", "loss_augmented_viterbi", "loss_augmented_viterbi_window",
           "loss_augmented_chain", "chain_loss_augmented",
           "HLike", "LossSpec", "resolve_loss", "RESCALINGS", "ALGORITHMS", "MAX_COUNTS"]

chain_loss_augmented = loss_augmented_chain  # its former name here
