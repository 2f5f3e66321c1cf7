"""LP relaxations of MAP labeling on graphs (Nowozin 2009, Part II).

- :func:`map_lp`: the local-polytope LP solved exactly by HiGHS, with connectivity constraints
  (hard or soft) added by cutting planes (Algorithm 7); :class:`WarmStart` keeps each training
  instance's working set of cuts, its LP and a pool of cuts from one call (epoch) to the next;
- :func:`connectivity_cut`: the vertex-separator separation oracle (min cut after node splitting);
  :func:`connectivity_cuts`: every violated cut of a point (e.g. a layer's output) as ``cuts`` rows;
- :class:`MAPRelaxation`: a differentiable, quadratically smoothed relaxation layer (a native QP
  with an exact implicit backward, or cvxpylayers);
- :func:`map_exact`: the exact MAP under connectivity by branch and cut (HiGHS's MIP solver with
  the same separation), with a certified gap under a time or node limit;
- :func:`round_labels`, :func:`round_connected` (a rounding that keeps every connectivity
  constraint), :func:`labeling_score`, :func:`grid_edges`;
- max-margin learning over the relaxation: :func:`relaxed_hinge` / :class:`RelaxedHingeLoss`;
- graph partitioning over the multicut polytope (:func:`multicut`, cycle and odd-wheel cuts), the
  clustering weights of Table 9, and solution stability (:func:`stability_range`,
  :func:`variable_stability`, :func:`critical_edges`, :func:`solution_path`).

Scores are maximized (the thesis minimizes energies: energy = -score). V nodes, E edges (i < j),
L labels, B instances on the same graph.

Every entry point validates its arguments (a ``TypeError`` or ``ValueError`` naming the argument
and the expected range); empty batches, graphs and edge sets give empty or trivial results. The
LPs are solved by a silent HiGHS on costs scaled to [-1, 1], so that answers do not depend on the
scale of the potentials or weights, which must stay below 1e20 in magnitude (see
:mod:`structtorch.lp._highs` for the resolution within one instance). The B instances of a batch
are solved concurrently on ``num_workers`` threads (default ``torch.get_num_threads()``; HiGHS
releases the GIL), with the results of the sequential loop; :class:`MAPRelaxation` compiles its
problem once per graph structure (a cache shared by all layers).
"""

from .clustering import (
    all_pairs,
    cluster_size_bias,
    consensus_weights,
    correlation_weights,
    modularity,
    modularity_weights,
)
from .exact import ExactResult, map_exact
from .graph import grid_edges
from .layer import MAPRelaxation, cut_block
from .learning import GraphStructure, RelaxedHingeLoss, area_weights, relaxed_hinge
from .multicut import RELAXATIONS, MulticutResult, multicut
from .relaxation import LPResult, WarmStart, lp_score, map_lp
from .rounding import labeling_score, round_connected, round_labels
from .separation import connectivity_cut, connectivity_cuts
from .stability import critical_edges, node_stability, solution_path, stability_range, variable_stability

__all__ = ["map_lp", "LPResult", "lp_score", "WarmStart", "connectivity_cut", "connectivity_cuts",
           "round_labels", "grid_edges",
           "map_exact", "ExactResult", "round_connected", "labeling_score",
           "GraphStructure", "relaxed_hinge", "RelaxedHingeLoss", "area_weights",
           "MAPRelaxation", "cut_block", "multicut", "MulticutResult", "RELAXATIONS",
           "all_pairs", "modularity_weights", "correlation_weights", "consensus_weights", "cluster_size_bias",
           "modularity", "stability_range", "variable_stability", "critical_edges", "solution_path",
           "node_stability"]
