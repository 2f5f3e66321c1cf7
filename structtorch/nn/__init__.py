"""Modules: the linear-chain CRF, joint feature maps (HM-SVM potentials, histogram binning, PLiFs)
and the hidden semi-Markov SVM."""

from .constraints import allowed_transitions
from .crf import LinearChainCRF
from .features import HistogramBinning, LinearChainPotentials, PLiF
from .hsm import HiddenSemiMarkovSVM
from .semimarkov_crf import SemiMarkovCRF
from .sparse import SparseFeaturePotentials
from .words import tokens_to_words, word_mask, words_to_tokens

__all__ = ["LinearChainCRF", "allowed_transitions", "LinearChainPotentials", "HistogramBinning", "PLiF",
           "HiddenSemiMarkovSVM", "SemiMarkovCRF",
           "SparseFeaturePotentials", "word_mask", "tokens_to_words", "words_to_tokens"]
