"""Tree structures. Rooms as in every structure package: ``dependency`` (dependency trees over the
words of a sentence: projective by Eisner's algorithm, non-projective by the matrix-tree theorem
and Chu-Liu-Edmonds), ``constituency`` (labeled binary trees by CKY) and ``sampling`` (exact
draws), the public functions; ``layout`` (the types and checks); ``_torch`` (the PyTorch references
in any semiring); ``_cpu`` (the compiled kernels' glue, ``csrc/trees.cpp``); ``_ops`` (the
operators and their autograd Functions). Triton kernels are not written yet (the triton backend runs
the references)."""

from .constituency import cky_log_partition, cky_loss_augmented, cky_marginals, cky_viterbi
from .dependency import (
    dependency_kbest,
    dependency_log_partition,
    dependency_loss_augmented,
    dependency_marginals,
    dependency_viterbi,
)
from .sampling import cky_sample, dependency_sample

__all__ = ["dependency_viterbi", "dependency_log_partition", "dependency_marginals",
           "dependency_loss_augmented", "cky_viterbi", "cky_log_partition", "cky_marginals",
           "cky_loss_augmented", "dependency_sample", "cky_sample", "dependency_kbest"]
