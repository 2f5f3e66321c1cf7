"""Semi-supervised structured max-margin learning (Altun, McAllester & Belkin 2005).

The parts of labeled and unlabeled sequences are tied by a similarity graph W over token
observations (:func:`knn_graph`); the Laplacian term ``lam2 f^T L f`` of eq. 9 either regularizes
any potential model directly (:func:`laplacian_penalty`) or, by two representer theorems, turns
into the graph-regularized kernel (:class:`GraphRegularizedKernel`) of a supervised structural SVM
over the labeled tokens only (:class:`KernelChainPotentials`), defined out of sample.
"""

from structtorch.semisup.graph import knn_graph, laplacian, laplacian_penalty
from structtorch.semisup.kernels import GraphRegularizedKernel, TransductiveKernel, rbf_kernel
from structtorch.semisup.potentials import KernelChainPotentials

__all__ = [
    "knn_graph",
    "laplacian",
    "laplacian_penalty",
    "rbf_kernel",
    "GraphRegularizedKernel",
    "TransductiveKernel",
    "KernelChainPotentials",
]
