"""Substructure mining (Nowozin 2009, Part I): substructure posets, reverse search and miners.

Data types
----------
* Itemsets: ``frozenset`` (or ``set``) of non-negative ints; the relation is the subset relation.
* Itemset sequences: ``tuple`` (or ``list``) of itemsets; the relation is Def. 16's robust gapped
  subsequence relation (each pattern element a subset of a later instance element, order kept, gaps
  allowed), decided by the greedy earliest match.
* Labeled graphs live in :mod:`structtorch.mining.graphs`; :func:`contains`, :func:`frequent_patterns`
  and :func:`best_patterns` dispatch to it (imported lazily) when given graphs.

Functions
---------
contains(pattern, instance)
    The substructure relation.
parent(pattern), children(pattern, alphabet), enumerate_patterns(...)
    The reduction maps (Example 1, Def. 17) and their inverses (Lemma 5): the reverse-search tree.
``frequent_patterns(data, min_support, *, max_size)``
    Problem 2: ``(pattern, support)`` pairs.
``best_patterns(data, y, weights, *, top_k=1, max_size)``
    The boosting subproblem with Theorem 2's bound: ``(pattern, direction, gain)`` triples.
occurrence_matrix(patterns, data)
    The binary feature map ``[1[t <= x_n]]`` as an ``(N, |T|)`` boolean array.
separating_weights(data, y)
    Theorem 1's constructive separation of any consistently labeled training set.
gain(support, y, weights, direction), gain_bound(support, y, weights)
    The stump gain and Theorem 2's bound for a support vector.
``LPBoost(miner, *, nu)``, ``TCBoost(miner, *, p, nu | D)``
    Totally corrective boosting (Algorithm 1) over the stumps of any miner; one-vs-one DDAG for
    more than two classes.
``SubstructureFeatures(patterns)``
    The feature map of a pattern dictionary, per instance, per sequence window or per graph-node
    neighbourhood, as tensors for the structured models.
"""

from structtorch.mining.boosting import LPBoost, TCBoost
from structtorch.mining.features import SubstructureFeatures
from structtorch.mining.sequences import (
    SequencePattern,
    SetPattern,
    best_patterns,
    children,
    contains,
    enumerate_patterns,
    frequent_patterns,
    gain,
    gain_bound,
    occurrence_matrix,
    parent,
    separating_weights,
)

__all__ = [
    "SetPattern",
    "SequencePattern",
    "contains",
    "parent",
    "children",
    "enumerate_patterns",
    "occurrence_matrix",
    "separating_weights",
    "frequent_patterns",
    "best_patterns",
    "gain",
    "gain_bound",
    "LPBoost",
    "TCBoost",
    "SubstructureFeatures",
]
