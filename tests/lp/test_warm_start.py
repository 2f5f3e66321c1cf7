"""WarmStart: working sets of connectivity cuts, LP bases and cut pools kept per training instance
between calls of map_lp / relaxed_hinge give the answers of cold starts, in fewer rounds."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st_

from structtorch import lp
from structtorch.lp import relaxation
from structtorch.lp.learning import _target_keys


def denoising(H, W, B, seed, sigma=1.0, strength=0.6):
    """B noisy instances of an H x W grid whose foreground (label 1) is a cross (connected)."""
    g = torch.Generator().manual_seed(seed)
    truth = torch.zeros(H, W)
    truth[H // 2, :] = truth[:, W // 2] = 1
    unary = torch.zeros(B, H * W, 2, dtype=torch.float64)
    unary[..., 1] = (2 * truth.reshape(-1) - 1) + sigma * torch.randn(B, H * W, generator=g, dtype=torch.float64)
    edges = lp.grid_edges(H, W)
    pairwise = torch.zeros(len(edges), 2, 2, dtype=torch.float64)
    pairwise[:, 0, 0] = pairwise[:, 1, 1] = strength
    return unary, pairwise, edges, truth.reshape(-1).long().expand(B, -1).clone()


@settings(deadline=None, max_examples=8)
@given(seed=st_.integers(0, 2**31), soft=st_.booleans(), size=st_.sampled_from([(4, 4), (5, 6)]),
       sigma=st_.sampled_from([1.0, 1.5]))
def test_warm_hinge_equals_the_cold_one_over_epochs(seed, soft, size, sigma):
    """Three epochs over the same instances with drifting potentials: every warm call gives the
    cold call's hinge (both converged), and the working sets are kept per instance."""
    unary, pairwise, edges, target = denoising(*size, 3, seed, sigma=sigma, strength=0.3)
    connectivity = {"connected_soft": {1: 0.7}} if soft else {"connected": [1]}
    warm = lp.WarmStart()
    g = torch.Generator().manual_seed(seed + 1)
    for _ in range(3):
        unary = unary + 0.2 * torch.randn(unary.shape, generator=g, dtype=torch.float64)
        cold, res_cold = lp.relaxed_hinge(unary, pairwise, edges, target, reduction="none", return_result=True,
                                          max_iter=500, **connectivity)
        hot, res_hot = lp.relaxed_hinge(unary, pairwise, edges, target, reduction="none", return_result=True,
                                        max_iter=500, warm_start=warm, ids=[10, 11, 12], **connectivity)
        assert bool(res_cold.converged.all()) and bool(res_hot.converged.all())
        torch.testing.assert_close(hot, cold, atol=1e-6, rtol=1e-6)
        torch.testing.assert_close(res_hot.score, res_cold.score, atol=1e-6, rtol=1e-6)
    assert len(warm) == 3 and all(len(warm.cuts(k)) <= len(warm._states[k].pool) for k in (10, 11, 12))


def test_a_repeated_call_needs_one_lp_and_the_pool_saves_separation(monkeypatch):
    unary, pairwise, edges, _ = denoising(8, 8, 2, 0, sigma=1.5, strength=0.3)
    warm = lp.WarmStart()
    first = lp.map_lp(unary, pairwise, edges, connected=[1], warm_start=warm, keys=["a", "b"])
    assert bool(first.converged.all()) and int(first.iterations.max()) > 1  # the cold call needed cuts
    again = lp.map_lp(unary, pairwise, edges, connected=[1], warm_start=warm, keys=["a", "b"])
    assert again.iterations.tolist() == [1, 1]  # its working set bounds the LP at once
    torch.testing.assert_close(again.score, first.score)
    # other potentials, then the first ones again: the cuts of the first call come from the pool
    other = unary.flip(1)
    lp.map_lp(other, pairwise, edges, connected=[1], warm_start=warm, keys=["a", "b"])
    calls = []
    separate = relaxation._Problem.separate
    monkeypatch.setattr(relaxation._Problem, "separate", lambda self, x: calls.append(1) or separate(self, x))
    back = lp.map_lp(unary, pairwise, edges, connected=[1], warm_start=warm, keys=["a", "b"])
    torch.testing.assert_close(back.score, first.score)
    assert len(calls) == 2  # one oracle call per instance: the check of the last solution
    lp.map_lp(unary, pairwise, edges, connected=[1])
    assert len(calls) > 4  # a cold start runs the oracle every round


def test_warm_start_arguments_are_checked():
    unary, pairwise, edges, target = denoising(3, 3, 2, 0)
    warm = lp.WarmStart()
    with pytest.raises(ValueError, match="warm_start needs keys"):
        lp.map_lp(unary, pairwise, edges, connected=[1], warm_start=warm)
    with pytest.raises(ValueError, match="keys are the instance ids of warm_start"):
        lp.map_lp(unary, pairwise, edges, connected=[1], keys=[0, 1])
    with pytest.raises(ValueError, match=r"keys must hold B = 2 instance ids, got 3"):
        lp.map_lp(unary, pairwise, edges, warm_start=warm, keys=[0, 1, 2])
    with pytest.raises(ValueError, match="keys must be distinct within a batch"):
        lp.map_lp(unary, pairwise, edges, warm_start=warm, keys=[0, 0])
    with pytest.raises(TypeError, match="keys must be hashable"):
        lp.map_lp(unary, pairwise, edges, warm_start=warm, keys=[[0], [1]])
    with pytest.raises(TypeError, match="keys given as a tensor must be a 1-D integer tensor"):
        lp.map_lp(unary, pairwise, edges, warm_start=warm, keys=torch.tensor([0.0, 1.0]))
    with pytest.raises(TypeError, match="warm_start must be a structtorch.lp.WarmStart"):
        lp.map_lp(unary, pairwise, edges, warm_start={}, keys=[0, 1])
    lp.map_lp(unary, pairwise, edges, connected=[1], warm_start=warm, keys=torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="warm_start holds the working sets of another graph"):
        lp.map_lp(unary, pairwise, edges, connected=[0], warm_start=warm, keys=[0, 1])
    warm.clear()
    assert len(warm) == 0 and repr(warm) == "WarmStart(0 instances, 0 cuts)"
    with pytest.raises(ValueError, match="does not apply with exact=True"):
        lp.relaxed_hinge(unary, pairwise, edges, target, connected=[1], exact=True, warm_start=warm)
    with pytest.raises(ValueError, match="ids are the instance keys of warm_start"):
        lp.relaxed_hinge(unary, pairwise, edges, target, connected=[1], ids=[0, 1])
    with pytest.raises(TypeError, match="warm_start must be a bool or a structtorch.lp.WarmStart"):
        lp.RelaxedHingeLoss(edges, warm_start="yes")


def test_relaxed_hinge_loss_keeps_its_working_sets():
    unary, pairwise, edges, target = denoising(5, 5, 2, 3)
    target[1, 0] = 1 - target[1, 0]  # two targets, so that the default keys differ ...
    loss = lp.RelaxedHingeLoss(edges, connected_soft={1: 0.5}, warm_start=True)
    value = loss(unary, pairwise, target)
    assert len(loss.warm_start) == 2  # ... keyed by the target labelings
    again = loss(unary, pairwise, target, ids=torch.tensor([7, 8]))
    assert len(loss.warm_start) == 4
    torch.testing.assert_close(again, value)
    same = target.clone()
    same[1] = same[0]
    keys = _target_keys(same)
    assert keys[0] != keys[1] and keys[0][0] == keys[1][0]  # a repeated labeling is numbered


def test_the_pool_keeps_the_newest_cuts_within_its_bound(monkeypatch):
    monkeypatch.setattr(relaxation, "MAX_POOL", 5)
    unary, pairwise, edges, _ = denoising(8, 8, 1, 0, sigma=1.5, strength=0.3)
    warm = lp.WarmStart()
    first = lp.map_lp(unary, pairwise, edges, connected=[1], warm_start=warm, keys=[0])
    pool = warm._states[0].pool
    assert len(pool) == 5 and pool.keys == [relaxation._key(cut) for cut in first.cuts[0][-5:]]
    again = lp.map_lp(unary.flip(1), pairwise, edges, connected=[1], warm_start=warm, keys=[0])
    cold = lp.map_lp(unary.flip(1), pairwise, edges, connected=[1])
    assert bool(again.converged[0]) and len(warm._states[0].pool) == 5
    torch.testing.assert_close(again.score, cold.score)


def test_cuts_given_beside_a_warm_start_keep_the_pool():
    """Extra rows in ``cuts`` make the stored basis unusable, but the working set and the pool
    stay: the pool only grows."""
    unary, pairwise, edges, _ = denoising(8, 8, 1, 0, sigma=1.5, strength=0.3)
    warm = lp.WarmStart()
    lp.map_lp(unary, pairwise, edges, connected=[1], warm_start=warm, keys=[0])
    known = len(warm._states[0].pool)
    res = lp.map_lp(unary, pairwise, edges, connected=[1], warm_start=warm, keys=[0], cuts=[(1, 0, 63, [1, 8])])
    assert bool(res.converged[0]) and len(warm._states[0].pool) >= known + 1


def test_live_lps_give_the_answers_of_rebuilt_ones_within_their_bound():
    """Live LPs (costs changed in place, slack cut rows deleted) against stored bases only
    (``max_lps=0``) and cold starts over drifting epochs; at most ``max_lps`` stay live, the least
    recently used given up first."""
    unary, pairwise, edges, target = denoising(6, 6, 3, 5, sigma=1.5, strength=0.3)
    live, frozen = lp.WarmStart(max_lps=2), lp.WarmStart(max_lps=0)
    g = torch.Generator().manual_seed(2)
    for _ in range(3):
        unary = unary + 0.3 * torch.randn(unary.shape, generator=g, dtype=torch.float64)
        losses = [lp.relaxed_hinge(unary, pairwise, edges, target, reduction="none", max_iter=500, connected=[1],
                                   **({} if w is None else {"warm_start": w, "ids": [0, 1, 2]}))
                  for w in (live, frozen, None)]
        torch.testing.assert_close(losses[0], losses[2], atol=1e-6, rtol=1e-6)
        torch.testing.assert_close(losses[1], losses[2], atol=1e-6, rtol=1e-6)
        assert list(live._live) == [1, 2] and not frozen._live
        assert live._states[0].lp is None and live._states[0].basis is not None
    assert all(live._states[k].lp.added_upper.shape == (len(live.cuts(k)),) for k in (1, 2))


def test_a_failed_call_leaves_a_usable_working_set(monkeypatch):
    """An LP that fails mid-call (here: a solver error) was taken from the store: the instance
    keeps its cuts and pool, and the next call answers as a cold start."""
    unary, pairwise, edges, _ = denoising(8, 8, 1, 0, sigma=1.5, strength=0.3)
    warm = lp.WarmStart()
    lp.map_lp(unary, pairwise, edges, connected=[1], warm_start=warm, keys=[0])
    solve = relaxation._Instance.solve
    monkeypatch.setattr(relaxation._Instance, "solve", lambda self: (_ for _ in ()).throw(RuntimeError("boom")))
    with pytest.raises(RuntimeError, match="boom"):
        lp.map_lp(unary.flip(1), pairwise, edges, connected=[1], warm_start=warm, keys=[0])
    monkeypatch.setattr(relaxation._Instance, "solve", solve)
    assert warm._states[0].lp is None and len(warm.cuts(0)) > 0
    again = lp.map_lp(unary.flip(1), pairwise, edges, connected=[1], warm_start=warm, keys=[0])
    torch.testing.assert_close(again.score, lp.map_lp(unary.flip(1), pairwise, edges, connected=[1]).score)


def test_a_pickled_warm_start_keeps_its_working_sets():
    """Pickling drops the solver objects (LPs, bases) and keeps cuts and pools: the restored
    object answers as the original."""
    import pickle

    unary, pairwise, edges, _ = denoising(8, 8, 2, 0, sigma=1.5, strength=0.3)
    warm = lp.WarmStart()
    first = lp.map_lp(unary, pairwise, edges, connected=[1], warm_start=warm, keys=[0, 1])
    restored = pickle.loads(pickle.dumps(warm))
    assert restored.cuts(0) and all(torch.equal(a[3], b[3]) for a, b in zip(restored.cuts(0), warm.cuts(0),
                                                                             strict=True))
    again = lp.map_lp(unary, pairwise, edges, connected=[1], warm_start=restored, keys=[0, 1])
    assert again.iterations.tolist() == [1, 1]
    torch.testing.assert_close(again.score, first.score)


@pytest.mark.parametrize("connectivity", [{"connected": [1]}, {"connected_soft": {1: 0.5}}])
def test_lp_calls_cross_to_the_host_once_each_way_without_a_sync(connectivity):
    """map_lp and relaxed_hinge (forward and backward) move the potentials to the solver and the
    solutions back in one piece each: the operators they run (each a launch on a GPU) do not grow
    with B or V, and with value checks off nothing syncs (edges are checked on the host)."""
    import structtorch as st
    from structtorch.profiling import device_ops

    counts = {"map_lp": [], "relaxed_hinge": []}
    for H, B in ((3, 2), (3, 5), (5, 5)):
        unary, pairwise, edges, target = denoising(H, H, B, 0)
        unary.requires_grad_()
        calls = {"map_lp": lambda: lp.map_lp(unary, pairwise, edges, **connectivity),  # noqa: B023
                 "relaxed_hinge": lambda: lp.relaxed_hinge(unary, pairwise, edges, target,  # noqa: B023
                                                           **connectivity).backward()}
        for name, call in calls.items():
            counts[name].append(device_ops(call).ops)
            with st.set_validation(False):
                assert device_ops(call).syncs == 0, name
    assert all(len(set(c)) == 1 for c in counts.values()), counts
