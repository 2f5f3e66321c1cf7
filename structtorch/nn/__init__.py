"""Modules: the linear-chain CRF, joint feature maps (HM-SVM potentials, histogram binning, PLiFs)
and the hidden semi-Markov SVM."""

from .crf import LinearChainCRF
from .features import HistogramBinning, LinearChainPotentials, PLiF
from .hsm import HiddenSemiMarkovSVM

__all__ = ["LinearChainCRF", "LinearChainPotentials", "HistogramBinning", "PLiF", "HiddenSemiMarkovSVM"]
