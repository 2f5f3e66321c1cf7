"""Tree structures: dependency trees over the words of a sentence (projective, by Eisner's
algorithm; ``dependency.py``) with their PyTorch reference (``_torch.py``). In progress (issue
55): non-projective trees, constituency trees, loss-augmented inference, kernels and layers."""

from .dependency import (
    dependency_log_partition,
    dependency_loss_augmented,
    dependency_marginals,
    dependency_viterbi,
)

__all__ = ["dependency_viterbi", "dependency_log_partition", "dependency_marginals",
           "dependency_loss_augmented"]
