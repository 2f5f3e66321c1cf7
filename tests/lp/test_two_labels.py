"""The two-label form of the local polytope (y_i = mu_i(1), z_e = mu_e(1, 1)) that map_lp hands to
HiGHS: the same optimum as the full local polytope, with and without connectivity cuts (hard and
soft), on random graphs with attractive and mixed couplings, and a feasible full solution."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from brute import lp_graphs
from hypothesis import given, settings
from hypothesis import strategies as st_

from structtorch import lp
from structtorch.lp import relaxation


@settings(deadline=None, max_examples=40)
@given(graph=lp_graphs(max_nodes=8), seed=st_.integers(0, 2**31), mixed=st_.booleans(),
       connectivity=st_.sampled_from(["none", "hard0", "hard1", "soft"]))
def test_the_two_label_form_has_the_full_optimum(graph, seed, mixed, connectivity):
    V, edges = graph
    g = torch.Generator().manual_seed(seed)
    unary = torch.randn(2, V, 2, generator=g, dtype=torch.float64)
    pairwise = torch.randn(2, len(edges), 2, 2, generator=g, dtype=torch.float64)
    if not mixed:  # attractive Potts
        pairwise = torch.zeros_like(pairwise)
        pairwise[..., 0, 0] = pairwise[..., 1, 1] = torch.rand(2, len(edges), generator=g, dtype=torch.float64)
    options = {"none": {}, "hard0": {"connected": [0]}, "hard1": {"connected": [1]},
               "soft": {"connected_soft": {1: 0.4}}}[connectivity]
    got = lp.map_lp(unary, pairwise, edges, max_iter=200, **options)
    with pytest.MonkeyPatch.context() as mp:  # map_lp on the full local polytope
        mp.setattr(relaxation, "_TwoLabels", lambda *a: None)
        want = lp.map_lp(unary, pairwise, edges, max_iter=200, **options)
    assert bool(got.converged.all()) and bool(want.converged.all())
    torch.testing.assert_close(got.score, want.score, atol=1e-7, rtol=1e-7)
    # the full solution is a point of the local polytope: normalized, marginalized, in [0, 1]
    torch.testing.assert_close(got.mu.sum(-1), torch.ones(2, V, dtype=torch.float64))
    e = edges
    torch.testing.assert_close(got.mu_edges.sum(-1), got.mu[:, e[:, 0]], atol=1e-9, rtol=0)
    torch.testing.assert_close(got.mu_edges.sum(-2), got.mu[:, e[:, 1]], atol=1e-9, rtol=0)


def test_cut_rows_of_either_label_map_to_the_same_constraint():
    """A cut row of label 0 or 1 (with a soft label's slack) is, in the reduced columns, the same
    linear constraint: equal activity at random feasible points."""
    V, edges = 6, lp.grid_edges(2, 3)
    form = relaxation._TwoLabels(V, edges, 1)
    rng = np.random.default_rng(0)
    width = form.M.shape[1]
    for c, slack in [(0, None), (1, None), (1, 2 * V + 4 * len(edges))]:
        idx, val = relaxation._cut_row(c, 0, 5, np.array([1, 4]), 2, slack)
        pieces, upper = form.rows([(idx, val)])
        (r_idx, r_val), = pieces
        for _ in range(5):
            x = rng.random(width)
            assert np.isclose(val @ form.expand(x)[idx] - 1.0, r_val @ x[r_idx] - upper[0])
