"""LP relaxations of MAP labeling on graphs (Nowozin 2009, Part II).

- :func:`map_lp`: the local-polytope LP solved exactly by HiGHS, with connectivity constraints
  (hard or soft) added by cutting planes (Algorithm 7);
- :func:`connectivity_cut`: the vertex-separator separation oracle (min cut after node splitting);
- :class:`MAPRelaxation`: a differentiable, quadratically smoothed relaxation layer built on
  cvxpylayers;
- :func:`round_labels`, :func:`grid_edges`;
- max-margin learning over the relaxation: :func:`relaxed_hinge` / :class:`RelaxedHingeLoss`.

Scores are maximized (the thesis minimizes energies: energy = -score). V nodes, E edges (i < j),
L labels, B instances on the same graph.
"""

from .graph import grid_edges
from .layer import MAPRelaxation, cut_block
from .learning import RelaxedHingeLoss, area_weights, relaxed_hinge
from .relaxation import LPResult, lp_score, map_lp
from .rounding import round_labels
from .separation import connectivity_cut

__all__ = ["map_lp", "LPResult", "lp_score", "connectivity_cut", "round_labels", "grid_edges",
           "relaxed_hinge", "RelaxedHingeLoss", "area_weights",
           "MAPRelaxation", "cut_block"]
