"""Modules: the linear-chain CRF, joint feature maps (HM-SVM potentials, histogram binning, PLiFs),
the hidden semi-Markov SVM, the tree CRFs (dependency and constituency), and (loaded on first use,
with ``transformers``) the CRF head for token classification, :class:`CRFForTokenClassification`."""

import importlib

from .constraints import allowed_transitions
from .crf import LinearChainCRF
from .features import HistogramBinning, LinearChainPotentials, PLiF
from .hsm import HiddenSemiMarkovSVM
from .semimarkov_crf import SemiMarkovCRF
from .sparse import SparseFeaturePotentials
from .trees import DependencyCRF, TreeCRF
from .words import tokens_to_words, word_mask, words_to_tokens

__all__ = ["LinearChainCRF", "allowed_transitions", "LinearChainPotentials", "HistogramBinning", "PLiF",
           "HiddenSemiMarkovSVM", "SemiMarkovCRF", "DependencyCRF", "TreeCRF",
           "SparseFeaturePotentials", "word_mask", "tokens_to_words", "words_to_tokens",
           "CRFForTokenClassification"]

_LAZY = {"CRFForTokenClassification": ".token_classification"}  # imports transformers


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'structtorch.nn' has no attribute {name!r}")

