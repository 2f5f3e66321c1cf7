"""structtorch: differentiable structured prediction layers for PyTorch.

``structtorch.lp`` (HiGHS, scipy, cvxpy), ``structtorch.data`` (the synthetic generators),
``structtorch.mining`` and ``structtorch.semisup`` load on first use, so that ``import structtorch``
needs torch alone and loads the library proper: the structures, the losses, the modules and the
learning layer.
"""

import importlib as _importlib

from . import metrics
from ._backend import use_backend
from ._checks import set_validation, validation_enabled
from ._threads import set_adaptive_threads
from .chain import (
    Viterbi,
    kbest,
    log_partition,
    marginals,
    path_score,
    sample,
    viterbi,
    viterbi_window,
    window_log_partition,
    window_marginals,
    window_score,
    window_viterbi,
)
from .distributions import (
    ChainDistribution,
    DependencyDistribution,
    SegmentMarginals,
    SemiMarkovDistribution,
    TreeDistribution,
)
from .learn import train
from .lossaug import (
    loss_augmented,
    loss_augmented_viterbi,
    loss_augmented_viterbi_window,
    semimarkov_loss_augmented,
    window_loss_augmented,
)
from .losses import StructuredHingeLoss, structured_hinge
from .metrics import chunk_f1, segment_f1
from .nn import (
    DependencyCRF,
    HiddenSemiMarkovSVM,
    HistogramBinning,
    LinearChainCRF,
    LinearChainPotentials,
    PLiF,
    SemiMarkovCRF,
    SparseFeaturePotentials,
    TreeCRF,
    allowed_transitions,
    tokens_to_words,
    word_mask,
    words_to_tokens,
)
from .semimarkov import (
    SegmentPLiF,
    plif_basis,
    plif_interpolate,
    semimarkov_kbest,
    semimarkov_log_partition,
    semimarkov_sample,
    semimarkov_score,
    semimarkov_viterbi,
)
from .sequence_data import SequenceData
from .trees import (
    cky_log_partition,
    cky_loss_augmented,
    cky_marginals,
    cky_sample,
    cky_viterbi,
    dependency_kbest,
    dependency_log_partition,
    dependency_loss_augmented,
    dependency_marginals,
    dependency_sample,
    dependency_viterbi,
)

__all__ = [
    "viterbi",
    "log_partition",
    "marginals",
    "path_score",
    "kbest",
    "sample",
    "window_viterbi",
    "window_log_partition",
    "window_marginals",
    "window_loss_augmented",
    "loss_augmented",
    "semimarkov_kbest",
    "semimarkov_sample",
    "viterbi_window",
    "window_score",
    "Viterbi",
    "LinearChainCRF",
    "allowed_transitions",
    "word_mask",
    "tokens_to_words",
    "words_to_tokens",
    "loss_augmented_viterbi",
    "loss_augmented_viterbi_window",
    "StructuredHingeLoss",
    "structured_hinge",
    "semimarkov_viterbi",
    "semimarkov_log_partition",
    "semimarkov_loss_augmented",
    "semimarkov_score",
    "dependency_viterbi",
    "dependency_log_partition",
    "dependency_marginals",
    "dependency_loss_augmented",
    "cky_viterbi",
    "cky_log_partition",
    "cky_marginals",
    "cky_loss_augmented",
    "dependency_sample",
    "dependency_kbest",
    "cky_sample",
    "DependencyDistribution",
    "TreeDistribution",
    "SemiMarkovCRF",
    "DependencyCRF",
    "TreeCRF",
    "ChainDistribution",
    "SemiMarkovDistribution",
    "SegmentMarginals",
    "LinearChainPotentials",
    "HistogramBinning",
    "PLiF",
    "HiddenSemiMarkovSVM",
    "SegmentPLiF",
    "plif_interpolate",
    "plif_basis",
    "data",
    "SequenceData",
    "train",
    "metrics",
    "chunk_f1",
    "segment_f1",
    "SparseFeaturePotentials",
    "CRFForTokenClassification",
    "lp",
    "mining",
    "semisup",
    "profiling",
    "use_backend",
    "set_validation",
    "validation_enabled",
    "set_adaptive_threads",
    "onnx_translation_table",
]

__version__ = "0.4.0.dev0"

_LAZY = ("lp", "data", "mining", "semisup", "profiling")
_SUBPACKAGES = ("nn", "learn", "losses")
"""Subpackages whose members the API page documents by their dotted names (``structtorch.nn.words``,
``structtorch.learn.checkpoint``, ``structtorch.losses.Structure``)."""


def onnx_translation_table() -> dict:
    """ONNX translations of structtorch's operators, for ``torch.onnx.export``.

    Pass it as ``torch.onnx.export(model, args, dynamo=True, dynamic_shapes=...,
    custom_translation_table=structtorch.onnx_translation_table())``. Covers every decoder and
    the confidence scores: the chain Viterbi and k-best (``viterbi``, ``kbest``,
    ``LinearChainCRF.decode`` with ``k`` or without; masks, lengths, constraints, start/end,
    per-step transitions), window chains of any order (``window_viterbi``), the semi-Markov Viterbi
    (``semimarkov_viterbi``, ``SemiMarkovCRF.decode``, ``HiddenSemiMarkovSVM.decode``: every
    potential, segment PLiFs included), the log-partitions (``log_partition``,
    ``semimarkov_log_partition``) and the chain's node marginals (``marginals``,
    ``LinearChainCRF.marginals``), hence ``CRFForTokenClassification``'s predictions and
    ``decode``. Each is an ONNX loop over positions in float64 whose onnxruntime paths equal
    PyTorch's (ties included) and whose scores agree within 1e-5. Every other structtorch operator
    fails the export with an error that names it and says what to export instead (a training loss
    or gradient: the decoder; sampling: not yet translated, served by torch.export and
    AOTInductor). Needs onnx and onnxscript (the ``export`` extra).

    Returns
    -------
    dict
        {operator overload: onnxscript function}.
    """
    from ._onnx import translation_table

    return translation_table()


def __getattr__(name: str):
    if name in _LAZY:
        module = _importlib.import_module(f".{name}", __name__)
        globals()[name] = module
        return module
    if name == "CRFForTokenClassification":  # imports transformers
        return getattr(_importlib.import_module(".nn", __name__), name)
    raise AttributeError(f"module 'structtorch' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The documented names (the API page's; a test compares them), not the modules imported on the
    way: ``__all__``, the documented subpackages and the version."""
    return sorted({*__all__, *_SUBPACKAGES, "__version__"})
