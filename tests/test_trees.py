"""Projective dependency trees (issue 55, item 1, the first slice): dependency_viterbi,
dependency_log_partition and dependency_marginals against enumeration of every tree (T <= 5,
variable lengths, -inf arcs, ties, single root or not); the marginals are the gradient of the
log-partition (gradcheck in float64) and the best score's gradient is the best tree."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as hst

import structtorch as st
from structtorch.trees import dependency_log_partition, dependency_marginals, dependency_viterbi


def _projective_trees(L: int, single_root: bool) -> list[tuple[int, ...]]:
    """Every projective dependency tree of L words: the heads of words 1..L (0 the root)."""
    trees = []
    for heads in itertools.product(range(L + 1), repeat=L):
        if any(h == m for m, h in enumerate(heads, 1)):
            continue
        if single_root and sum(h == 0 for h in heads) != 1:
            continue
        acyclic = True
        for m in range(1, L + 1):
            seen, x = set(), m
            while x and acyclic:
                acyclic = x not in seen
                seen.add(x)
                x = heads[x - 1]
        spans = [(min(h, m), max(h, m)) for m, h in enumerate(heads, 1)]
        crossing = any(a[0] < b[0] < a[1] < b[1] for a in spans for b in spans)
        if acyclic and not crossing:
            trees.append(heads)
    return trees


@settings(max_examples=40, deadline=None, database=None)
@given(hst.integers(1, 3), hst.integers(1, 5), hst.integers(0, 2**16), hst.sampled_from([0.0, 0.3]),
       hst.booleans(), hst.booleans())
def test_projective_trees_equal_enumeration(B, T, seed, forbid, integer, single_root):
    g = torch.Generator().manual_seed(seed)
    arcs = (torch.randint(-2, 3, (B, T + 1, T + 1), generator=g).double() if integer
            else torch.randn(B, T + 1, T + 1, generator=g, dtype=torch.float64))
    arcs[torch.rand(arcs.shape, generator=g) < forbid] = float("-inf")
    lengths = torch.randint(0, T + 1, (B,), generator=g)
    kw = dict(single_root=single_root)
    logz = dependency_log_partition(arcs, lengths, **kw)
    best, heads = dependency_viterbi(arcs, lengths, **kw)
    marginals = dependency_marginals(arcs, lengths, **kw)
    for b in range(B):
        L = int(lengths[b])
        trees = _projective_trees(L, single_root)
        scores = torch.tensor([sum(float(arcs[b, h, m]) for m, h in enumerate(t, 1)) for t in trees],
                              dtype=torch.float64)
        if L == 0:
            assert logz[b] == 0 and best[b] == 0 and (heads[b] == -1).all()
            continue
        if not (scores > -math.inf).any():
            assert logz[b] == -math.inf and best[b] == -math.inf and (heads[b] == -1).all()
            assert marginals[b].abs().sum() == 0
            continue
        torch.testing.assert_close(logz[b], torch.logsumexp(scores, 0))
        assert float(best[b]) == pytest.approx(float(scores.max()), abs=1e-12)
        found = tuple(heads[b, 1:L + 1].tolist())
        assert found in trees and float(scores[trees.index(found)]) == pytest.approx(float(scores.max()), abs=1e-12)
        assert heads[b, 0] == -1 and (heads[b, L + 1:] == -1).all()
        p = torch.softmax(scores, 0)
        want = torch.zeros(T + 1, T + 1, dtype=torch.float64)
        for w, t in zip(p, trees, strict=True):
            for m, h in enumerate(t, 1):
                want[h, m] += w
        torch.testing.assert_close(marginals[b], want, rtol=1e-9, atol=1e-12)


def test_gradients_are_the_marginals_and_the_best_tree():
    g = torch.Generator().manual_seed(1)
    arcs = torch.randn(2, 5, 5, generator=g, dtype=torch.float64, requires_grad=True)
    lengths = torch.tensor([4, 3])
    (grad,) = torch.autograd.grad(dependency_log_partition(arcs, lengths).sum(), arcs)
    torch.testing.assert_close(grad, dependency_marginals(arcs, lengths))
    torch.autograd.gradcheck(lambda a: dependency_marginals(a, lengths), (arcs,))
    best, heads = dependency_viterbi(arcs, lengths)
    (grad,) = torch.autograd.grad(best.sum(), arcs)
    want = torch.zeros_like(grad)
    for b in range(2):
        for m in range(1, int(lengths[b]) + 1):
            want[b, heads[b, m], m] = 1
    assert torch.equal(grad, want)


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="arc_scores must have shape"):
        dependency_viterbi(torch.randn(2, 4, 5))
    with pytest.raises(ValueError, match="arc_scores contains NaN"):
        dependency_log_partition(torch.full((1, 3, 3), float("nan")))
    with pytest.raises(ValueError, match="lengths"):
        dependency_marginals(torch.randn(1, 3, 3), torch.tensor([3]))
    with pytest.raises(NotImplementedError, match="projective=False"):
        dependency_viterbi(torch.randn(1, 3, 3), projective=False)
    assert st.trees.dependency_viterbi is dependency_viterbi


@settings(max_examples=30, deadline=None, database=None)
@given(hst.integers(1, 2), hst.integers(1, 5), hst.integers(0, 2**16), hst.booleans())
def test_margin_loss_augmented_inference_equals_enumeration(B, T, seed, single_root):
    g = torch.Generator().manual_seed(seed)
    arcs = torch.randn(B, T + 1, T + 1, generator=g, dtype=torch.float64)
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    gold = dependency_viterbi(torch.randn(B, T + 1, T + 1, generator=g, dtype=torch.float64), lengths,
                              single_root=single_root)[1]
    value, found, loss = st.dependency_loss_augmented(arcs, gold, lengths, single_root=single_root)
    for b in range(B):
        L = int(lengths[b])
        trees = _projective_trees(L, single_root)
        want = max(sum(float(arcs[b, h, m]) + (h != int(gold[b, m])) for m, h in enumerate(t, 1)) for t in trees)
        assert float(value[b]) == pytest.approx(want, abs=1e-12)
        tree = tuple(found[b, 1:L + 1].tolist())
        assert tree in trees and int(loss[b]) == sum(h != int(gold[b, m]) for m, h in enumerate(tree, 1))


def test_loss_augmented_refusals_are_named():
    arcs, gold = torch.randn(1, 3, 3), torch.tensor([[-1, 0, 1]])
    with pytest.raises(NotImplementedError, match="slack rescaling for dependency trees"):
        st.dependency_loss_augmented(arcs, gold, rescaling="slack")
    with pytest.raises(ValueError, match="heads must hold a head"):
        st.dependency_loss_augmented(arcs, torch.tensor([[-1, 1, 1]]))
    with pytest.raises(TypeError, match="heads must be an integer tensor"):
        st.dependency_loss_augmented(arcs, gold.float())
