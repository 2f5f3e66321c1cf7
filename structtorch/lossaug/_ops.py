"""The loss-augmented search over linear chains as one PyTorch operator,
``structtorch::chain_loss_augmented``: the Hamming table or the folded Viterbi, the checks that read
values, and the tie rule, with a fake implementation, so that ``torch.compile`` traces a structured
hinge loss without graph breaks. Its output (the most violating labeling) is an integer tensor: the
differentiable value is recomputed from the potentials along it (see ``hamming._solve``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .._checks import Chain
from .._library import operator
from .hamming import LossSpec, _ChainStructure, search

Opt = Tensor | None


def _fake(unary, *rest):
    return unary.new_empty(unary.shape[:2], dtype=torch.long)


@operator("chain_loss_augmented", _fake)
def chain_loss_augmented(unary: Tensor, transitions: Tensor, start: Tensor, end: Tensor, lengths: Tensor,
                         target: Tensor, gold: Tensor, weights: Tensor, htab: Opt, cost: Opt, intercept: Opt,
                         slope: Opt, affine_from_htab: bool, rescaling: str, algorithm: str) -> Tensor:
    """(B, T) int64 most violating labeling (see :func:`structtorch.lossaug.hamming.search`)."""
    affine = None if intercept is None else (intercept, slope)
    spec = LossSpec(rescaling, weights, htab, cost, affine, affine_from_htab)
    model = _ChainStructure(Chain(unary, transitions, start, end, lengths), target)
    return search(model, spec, target, unary.shape[2], algorithm, gold).clone()


def chain_search(chain: Chain, spec: LossSpec, target: Tensor, algorithm: str, gold: Tensor) -> Tensor:
    """:func:`chain_loss_augmented` on a canonical chain and a :class:`LossSpec`."""
    potentials = (x.detach() for x in (chain.unary, chain.transitions, chain.start, chain.end))
    intercept, slope = spec.affine if spec.affine is not None else (None, None)
    return chain_loss_augmented(*potentials, chain.lengths, target, gold, spec.weights, spec.htab, spec.cost,
                                intercept, slope, spec.affine_from_htab, spec.rescaling, algorithm)
