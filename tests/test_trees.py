"""Trees (issue 55): projective and non-projective dependency trees and constituency trees against
enumeration of every tree (T <= 6, variable lengths, -inf entries, ties, single root or not): the
log-partition, the best tree, the marginals (the gradient of the log-partition, gradcheck in
float64) and loss-augmented inference for margin and slack rescaling."""

from __future__ import annotations

import functools
import itertools
import math

import pytest
import torch
from conftest import _fewer_examples, use_backend
from hypothesis import given, settings
from hypothesis import strategies as hst

import structtorch as st
from structtorch.trees import (
    _torch,
    cky_log_partition,
    cky_loss_augmented,
    cky_marginals,
    cky_viterbi,
    dependency_log_partition,
    dependency_loss_augmented,
    dependency_marginals,
    dependency_viterbi,
)

INF = math.inf


@pytest.fixture(params=["compiled", "triton", "torch"])
def tree_backend(request):
    """Each backend's tree code: the compiled kernels, the Triton kernels (in Triton's interpreter
    here, with fewer hypothesis examples) and the PyTorch references."""
    with use_backend(request.param), _fewer_examples(request.function, request.param):
        yield request.param


@functools.cache
def _dependency_trees(L: int, single_root: bool, projective: bool) -> torch.Tensor:
    """Every dependency tree of L words as heads (n, L) of words 1..L (0 the root)."""
    trees = []
    for heads in itertools.product(range(L + 1), repeat=L):
        if any(h == m for m, h in enumerate(heads, 1)) or (single_root and L and heads.count(0) != 1):
            continue
        acyclic = True
        for m in range(1, L + 1):
            seen, x = set(), m
            while x and acyclic:
                acyclic = x not in seen
                seen.add(x)
                x = heads[x - 1]
        spans = [(min(h, m), max(h, m)) for m, h in enumerate(heads, 1)]
        crossing = projective and any(a[0] < b[0] < a[1] < b[1] for a in spans for b in spans)
        if acyclic and not crossing:
            trees.append(heads)
    return torch.tensor(trees, dtype=torch.long).view(len(trees), L)


def _arc_scores(arcs: torch.Tensor, trees: torch.Tensor) -> torch.Tensor:
    """(n,) the scores of trees (n, L) under arcs (T + 1, T + 1) of one sentence."""
    L = trees.shape[1]
    return arcs[trees, torch.arange(1, L + 1)].sum(1)


def _random(shape, seed: int, integer: bool, forbid: float) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = (torch.randint(-2, 3, shape, generator=g).double() if integer
         else torch.randn(shape, generator=g, dtype=torch.float64))
    x[torch.rand(shape, generator=g) < forbid] = -INF
    return x


def _lengths(B: int, T: int, seed: int, low: int = 0) -> torch.Tensor:
    return torch.randint(low, T + 1, (B,), generator=torch.Generator().manual_seed(seed + 1))


def _arc_marginals(trees: torch.Tensor, p: torch.Tensor, T: int) -> torch.Tensor:
    want = torch.zeros(T + 1, T + 1, dtype=torch.float64)
    for w, t in zip(p, trees, strict=True):
        want[t, torch.arange(1, len(t) + 1)] += w
    return want


@settings(max_examples=40, deadline=None, database=None)
@given(hst.integers(1, 3), hst.integers(1, 6), hst.integers(0, 2**16), hst.sampled_from([0.0, 0.3]),
       hst.booleans(), hst.booleans(), hst.booleans())
def test_dependency_trees_equal_enumeration(tree_backend, B, T, seed, forbid, integer, single_root, projective):
    arcs = _random((B, T + 1, T + 1), seed, integer, forbid)
    lengths = _lengths(B, T, seed)
    kw = dict(single_root=single_root, projective=projective)
    logz = dependency_log_partition(arcs, lengths, **kw)
    best, heads = dependency_viterbi(arcs, lengths, **kw)
    marginals = dependency_marginals(arcs, lengths, **kw)
    for b in range(B):
        L = int(lengths[b])
        trees = _dependency_trees(L, single_root, projective)
        scores = _arc_scores(arcs[b], trees)
        if L == 0:
            assert logz[b] == 0 and best[b] == 0 and (heads[b] == -1).all()
            continue
        if not (scores > -INF).any():
            assert logz[b] == -INF and best[b] == -INF and (heads[b] == -1).all()
            assert marginals[b].abs().sum() == 0
            continue
        torch.testing.assert_close(logz[b], torch.logsumexp(scores, 0), rtol=1e-9, atol=1e-9)
        assert float(best[b]) == pytest.approx(float(scores.max()), abs=1e-12)
        found = heads[b, 1:L + 1]
        assert (trees == found).all(1).any(), "the best heads are a tree of the set"
        assert float(_arc_scores(arcs[b], found[None])) == pytest.approx(float(scores.max()), abs=1e-12)
        assert heads[b, 0] == -1 and (heads[b, L + 1:] == -1).all()
        want = _arc_marginals(trees, torch.softmax(scores, 0), T)
        torch.testing.assert_close(marginals[b], want, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("projective", [True, False])
@pytest.mark.parametrize("single_root", [False, True])
def test_gradients_are_the_marginals_and_the_best_tree(tree_backend, projective, single_root):
    g = torch.Generator().manual_seed(1)
    arcs = torch.randn(2, 5, 5, generator=g, dtype=torch.float64, requires_grad=True)
    lengths = torch.tensor([4, 3])
    kw = dict(projective=projective, single_root=single_root)
    (grad,) = torch.autograd.grad(dependency_log_partition(arcs, lengths, **kw).sum(), arcs)
    torch.testing.assert_close(grad, dependency_marginals(arcs, lengths, **kw))
    if tree_backend != "triton":  # (the interpreter: about a minute; the kernels' marginals are
        # checked against enumeration, and the double backward runs the reference on every backend)
        torch.autograd.gradcheck(lambda a: dependency_log_partition(a, lengths, **kw), (arcs,))
        torch.autograd.gradcheck(lambda a: dependency_marginals(a, lengths, **kw), (arcs,))
    best, heads = dependency_viterbi(arcs, lengths, **kw)
    (grad,) = torch.autograd.grad(best.sum(), arcs)
    want = torch.zeros_like(grad)
    for b in range(2):
        for m in range(1, int(lengths[b]) + 1):
            want[b, heads[b, m], m] = 1
    assert torch.equal(grad, want)


def test_matrix_tree_is_stable_in_float32_on_long_sentences():
    """120 words with arc scores of spread 10: float32 (column-scaled log-determinant) matches
    float64 in the log-partition and the marginals."""
    g = torch.Generator().manual_seed(0)
    T = 120
    arcs = 10 * torch.randn(3, T + 1, T + 1, generator=g, dtype=torch.float64)
    lengths = torch.tensor([T, 100, 7])
    for single in (False, True):
        want = _torch.matrix_tree(arcs, lengths, single)
        got = _torch.matrix_tree(arcs.float(), lengths, single)
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-3)
        logz = functools.partial(_torch.matrix_tree, lengths=lengths, single_root=single)
        p64 = torch.func.grad(lambda a: logz(a).sum())(arcs)  # noqa: B023 - used at once
        p32 = torch.func.grad(lambda a: logz(a).sum())(arcs.float())  # noqa: B023
        assert (p32 >= -1e-4).all() and torch.allclose(p32.sum(1)[:, 1:].double(), (p64.sum(1)[:, 1:]), atol=1e-3)
        torch.testing.assert_close(p32.double(), p64, atol=2e-3, rtol=0)


def test_chu_liu_edmonds_contracts_nested_cycles(tree_backend):
    """A sentence whose greedy heads form two cycles, one inside a contraction of the other."""
    arcs = torch.full((1, 6, 6), -5.0, dtype=torch.float64)
    for h, m, s in [(2, 1, 9), (1, 2, 9), (4, 3, 8), (3, 4, 8), (1, 3, 7), (3, 1, 7), (5, 5, 0), (4, 5, 6),
                    (0, 1, 1), (0, 3, 0.5)]:
        arcs[0, h, m] = s
    best, heads = dependency_viterbi(arcs, projective=False)
    trees = _dependency_trees(5, False, False)
    assert float(best[0]) == pytest.approx(float(_arc_scores(arcs[0], trees).max()))


@settings(max_examples=40, deadline=None, database=None)
@given(hst.integers(1, 2), hst.integers(1, 5), hst.integers(0, 2**16), hst.booleans(), hst.booleans(),
       hst.sampled_from(["margin", "slack"]), hst.booleans())
def test_dependency_loss_augmented_equals_enumeration(tree_backend, B, T, seed, single_root, projective, rescaling, integer):
    if rescaling == "slack" and not projective:
        return
    arcs = _random((B, T + 1, T + 1), seed, integer, 0.0)
    lengths = _lengths(B, T, seed)
    gold = dependency_viterbi(_random((B, T + 1, T + 1), seed + 7, False, 0.0), lengths, single_root=single_root,
                              projective=projective)[1]
    kw = dict(single_root=single_root, projective=projective, rescaling=rescaling)
    value, found, loss = dependency_loss_augmented(arcs, gold, lengths, **kw)
    for b in range(B):
        L = int(lengths[b])
        trees = _dependency_trees(L, single_root, projective)
        scores = _arc_scores(arcs[b], trees)
        delta = (trees != gold[b, 1:L + 1]).sum(1).double()
        target = float(_arc_scores(arcs[b], gold[b, 1:L + 1][None]))
        values = scores + delta if rescaling == "margin" else delta * (1 + scores - target)
        assert float(value[b]) == pytest.approx(float(values.max()), abs=1e-9)
        tree = found[b, 1:L + 1]
        hit = (trees == tree).all(1)
        assert hit.any() and float(values[hit][0]) == pytest.approx(float(values.max()), abs=1e-9)
        assert int(loss[b]) == int((tree != gold[b, 1:L + 1]).sum())
        if float(values.max()) == pytest.approx((target if rescaling == "margin" else 0.0), abs=1e-12):
            assert torch.equal(found[b, 1:L + 1], gold[b, 1:L + 1]), "ties keep the gold tree"


def test_loss_augmented_gradient_and_costs():
    g = torch.Generator().manual_seed(3)
    arcs = torch.randn(2, 5, 5, generator=g, dtype=torch.float64, requires_grad=True)
    gold = torch.tensor([[-1, 2, 0, 2, 3], [-1, 0, 1, 2, 3]])
    value, found, loss = dependency_loss_augmented(arcs, gold, rescaling="slack")
    (grad,) = torch.autograd.grad(value.sum(), arcs)
    want = torch.zeros_like(grad)
    for b in range(2):
        for m in range(1, 5):
            want[b, found[b, m], m] += float(loss[b])
            want[b, gold[b, m], m] -= float(loss[b])
    torch.testing.assert_close(grad, want)
    cost = torch.rand(2, 5, 5, generator=g, dtype=torch.float64)
    value, found, loss = dependency_loss_augmented(arcs, gold, cost=cost)
    trees = _dependency_trees(4, False, True)
    for b in range(2):
        both = _arc_scores(arcs[b].detach() + cost[b], trees)
        assert float(value[b].detach()) == pytest.approx(float(both.max()))
        assert float(loss[b]) == pytest.approx(float(_arc_scores(cost[b], found[b, 1:][None])))


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="arc_scores must have shape"):
        dependency_viterbi(torch.randn(2, 4, 5))
    with pytest.raises(ValueError, match="arc_scores contains NaN"):
        dependency_log_partition(torch.full((1, 3, 3), float("nan")))
    with pytest.raises(ValueError, match="lengths"):
        dependency_marginals(torch.randn(1, 3, 3), torch.tensor([3]))
    with pytest.raises(TypeError, match="projective must be"):
        dependency_viterbi(torch.randn(1, 3, 3), projective="no")
    arcs, gold = torch.randn(1, 3, 3), torch.tensor([[-1, 0, 1]])
    with pytest.raises(NotImplementedError, match="rescaling='margin'"):
        dependency_loss_augmented(arcs, gold, rescaling="slack", projective=False)
    with pytest.raises(ValueError, match="heads must hold a head"):
        dependency_loss_augmented(arcs, torch.tensor([[-1, 1, 1]]))
    with pytest.raises(TypeError, match="heads must be an integer tensor"):
        dependency_loss_augmented(arcs, gold.float())
    with pytest.raises(ValueError, match="rescaling must be"):
        dependency_loss_augmented(arcs, gold, rescaling="hinge")
    arcs[0, 0, 1] = -INF
    with pytest.raises(ValueError, match="heads has score -inf in row 0"):
        dependency_loss_augmented(arcs, gold)
    with pytest.raises(ValueError, match="span_scores must have shape"):
        cky_viterbi(torch.randn(1, 3, 4, 2))
    with pytest.raises(ValueError, match="spans must hold 0 or 1"):
        cky_loss_augmented(torch.randn(1, 3, 3, 2), torch.full((1, 3, 3, 2), 0.5))
    with pytest.raises(ValueError, match="spans must have shape"):
        cky_loss_augmented(torch.randn(1, 3, 3, 2), torch.zeros(1, 3, 3, 1))
    crossing = torch.tensor([[-1, 3, -100, 0, 2]])  # 3 -> 1 and 2 -> 4 cross: no projective tree agrees
    with pytest.raises(ValueError, match="no tree agrees with its annotated heads"):
        dependency_loss_augmented(torch.zeros(1, 5, 5), crossing, ignore_index=-100)
    with pytest.raises(ValueError, match=r"or ignore_index = -100\)"):
        dependency_loss_augmented(torch.zeros(1, 5, 5), torch.tensor([[-1, 3, -7, 0, 2]]), ignore_index=-100)
    assert st.trees.dependency_viterbi is dependency_viterbi and st.cky_viterbi is cky_viterbi


def _bracketings(i: int, j: int) -> list[list[tuple[int, int]]]:
    if i == j:
        return [[(i, i)]]
    return [a + b + [(i, j)] for k in range(i, j) for a in _bracketings(i, k) for b in _bracketings(k + 1, j)]


@functools.cache
def _constituency_trees(L: int, N: int, T: int) -> torch.Tensor:
    """Every labeled binary tree of L words as 0/1 spans (n, T, T, N)."""
    if L == 0:
        return torch.zeros(1, T, T, N, dtype=torch.float64)
    out = []
    for spans in _bracketings(0, L - 1):
        for labels in itertools.product(range(N), repeat=len(spans)):
            x = torch.zeros(T, T, N, dtype=torch.float64)
            for (i, j), n in zip(spans, labels, strict=True):
                x[i, j, n] = 1
            out.append(x)
    return torch.stack(out)


@settings(max_examples=30, deadline=None, database=None)
@given(hst.integers(1, 2), hst.integers(1, 5), hst.integers(1, 2), hst.integers(0, 2**16),
       hst.sampled_from([0.0, 0.2]), hst.booleans())
def test_constituency_trees_equal_enumeration(tree_backend, B, T, N, seed, forbid, integer):
    if T == 5 and N == 2:
        N = 1  # 14 bracketings x 2^9 labelings: enough at T = 4
    scores = _random((B, T, T, N), seed, integer, forbid)
    lengths = _lengths(B, T, seed)
    logz, (best, spans), marginals = (cky_log_partition(scores, lengths), cky_viterbi(scores, lengths),
                                      cky_marginals(scores, lengths))
    gold = cky_viterbi(_random((B, T, T, N), seed + 3, False, 0.0), lengths)[1]
    augmented = {r: cky_loss_augmented(scores, gold, lengths, rescaling=r) if _finite_gold(scores, gold)
                 else None for r in ("margin", "slack")}
    for b in range(B):
        L = int(lengths[b])
        trees = _constituency_trees(L, N, T)
        value = torch.where(trees.bool(), scores[b], 0.0).sum((1, 2, 3))
        if L == 0:
            assert logz[b] == 0 and best[b] == 0 and spans[b].sum() == 0
            continue
        if not (value > -INF).any():
            assert logz[b] == -INF and best[b] == -INF and spans[b].sum() == 0 and marginals[b].abs().sum() == 0
            continue
        torch.testing.assert_close(logz[b], torch.logsumexp(value, 0), rtol=1e-9, atol=1e-9)
        assert float(best[b]) == pytest.approx(float(value.max()), abs=1e-12)
        hit = (trees == spans[b]).flatten(1).all(1)
        assert hit.any() and float(value[hit][0]) == pytest.approx(float(value.max()), abs=1e-12)
        want = (torch.softmax(value, 0)[:, None, None, None] * trees).sum(0)
        torch.testing.assert_close(marginals[b], want, rtol=1e-9, atol=1e-10)
        if augmented["margin"] is None:
            continue
        delta = (trees * (1 - gold[b])).sum((1, 2, 3))
        target = float((scores[b] * gold[b]).nan_to_num(0.0, neginf=0.0).sum())
        for rescaling, (v, found, loss) in augmented.items():
            values = value + delta if rescaling == "margin" else delta * (1 + value - target)
            values = values.nan_to_num(-INF)
            assert float(v[b]) == pytest.approx(float(values.max()), abs=1e-9)
            hit = (trees == found[b]).flatten(1).all(1)
            assert hit.any() and float(values[hit][0]) == pytest.approx(float(values.max()), abs=1e-9)
            assert int(loss[b]) == int(delta[hit][0])


def _finite_gold(scores: torch.Tensor, gold: torch.Tensor) -> bool:
    return bool((torch.where(gold.bool(), scores, 0.0).sum((1, 2, 3)) > -INF).all())


def test_constituency_gradients(tree_backend):
    g = torch.Generator().manual_seed(2)
    scores = torch.randn(2, 4, 4, 3, generator=g, dtype=torch.float64, requires_grad=True)
    lengths = torch.tensor([4, 2])
    if tree_backend != "triton":  # (as in test_gradients_are_the_marginals_and_the_best_tree)
        torch.autograd.gradcheck(lambda s: cky_log_partition(s, lengths), (scores,))
        torch.autograd.gradcheck(lambda s: cky_marginals(s, lengths), (scores,))
    (grad,) = torch.autograd.grad(cky_log_partition(scores, lengths).sum(), scores)
    torch.testing.assert_close(grad, cky_marginals(scores, lengths))
    best, spans = cky_viterbi(scores, lengths)
    (grad,) = torch.autograd.grad(best.sum(), scores)
    assert torch.equal(grad, spans) and spans.sum().item() == 2 * 4 - 1 + 2 * 2 - 1


@pytest.mark.parametrize("projective", [True, False])
def test_dependency_crf_layer(projective):
    g = torch.Generator().manual_seed(4)
    arcs = torch.randn(3, 6, 6, generator=g, dtype=torch.float64, requires_grad=True)
    lengths = torch.tensor([5, 3, 0])
    crf = st.DependencyCRF(projective=projective, single_root=True)
    assert "single_root=True" in repr(crf)
    gold = crf.decode(torch.randn(3, 6, 6, generator=g, dtype=torch.float64), lengths)[1]
    nll = crf(arcs, gold, lengths, reduction="none")
    trees = {L: _dependency_trees(L, True, projective) for L in (5, 3, 0)}
    for b, L in enumerate(lengths.tolist()):
        scores = _arc_scores(arcs[b].detach(), trees[L])
        target = float(_arc_scores(arcs[b].detach(), gold[b, 1:L + 1][None]))
        assert float(nll[b].detach()) == pytest.approx(float(torch.logsumexp(scores, 0)) - target, abs=1e-9)
    assert torch.allclose(crf(arcs, gold, lengths), nll.mean())
    assert torch.allclose(crf(arcs, gold, lengths, reduction="token_mean"), nll.sum() / 8)
    (grad,) = torch.autograd.grad(crf(arcs, gold, lengths, reduction="sum"), arcs)
    want = crf.marginals(arcs, lengths).detach()
    inside = (gold >= 0)
    for b in range(3):
        for m in range(6):
            if inside[b, m]:
                want[b, gold[b, m], m] -= 1
    torch.testing.assert_close(grad, want)
    with pytest.raises(ValueError, match="reduction must be one of"):
        crf(arcs, gold, lengths, reduction="avg")


def test_training_a_dependency_crf_recovers_the_gold_trees():
    """Free arc scores trained with the CRF loss decode the gold trees: projective ones, and with
    projective=False one whose arcs 3 -> 1 and 4 -> 2 cross."""
    projective_gold = torch.tensor([[-1, 2, 0, 2, 3], [-1, 3, 1, 0, -1]])
    crossing_gold = torch.tensor([[-1, 2, 0, 2, 3], [-1, 3, 4, 0, 3]])
    for projective, gold in ((True, projective_gold), (False, crossing_gold)):
        lengths = (gold >= 0).sum(1)
        arcs = torch.zeros(2, 5, 5, requires_grad=True)
        crf = st.DependencyCRF(projective=projective)
        opt = torch.optim.Adam([arcs], lr=0.3)
        for _ in range(30):
            opt.zero_grad()
            crf(arcs, gold, lengths).backward()
            opt.step()
        assert torch.equal(crf.decode(arcs.detach(), lengths)[1], gold)


def test_tree_crf_layer():
    g = torch.Generator().manual_seed(5)
    scores = torch.randn(2, 4, 4, 2, generator=g, dtype=torch.float64, requires_grad=True)
    lengths = torch.tensor([4, 2])
    crf = st.TreeCRF(2)
    gold = crf.decode(torch.randn(2, 4, 4, 2, generator=g, dtype=torch.float64), lengths)[1]
    nll = crf(scores, gold, lengths, reduction="none")
    for b, L in enumerate(lengths.tolist()):
        trees = _constituency_trees(L, 2, 4)
        value = torch.where(trees.bool(), scores[b].detach(), 0.0).sum((1, 2, 3))
        target = float((scores[b].detach() * gold[b]).sum())
        assert float(nll[b].detach()) == pytest.approx(float(torch.logsumexp(value, 0)) - target, abs=1e-9)
    (grad,) = torch.autograd.grad(crf(scores, gold, lengths, reduction="sum"), scores)
    torch.testing.assert_close(grad, crf.marginals(scores, lengths) - gold)
    torch.testing.assert_close(crf.log_partition(scores, lengths), cky_log_partition(scores, lengths))
    with pytest.raises(ValueError, match="num_labels = 2"):
        crf(scores[..., :1], gold[..., :1])
    with pytest.raises(ValueError, match="num_labels must be"):
        st.TreeCRF(0)


class _Parser(torch.nn.Module):
    """Every tree operator in one module, for the tracers."""

    def forward(self, arcs: torch.Tensor, lengths: torch.Tensor):
        spans = arcs[:, 1:, 1:, None]
        return (dependency_log_partition(arcs, lengths), *dependency_viterbi(arcs, lengths),
                dependency_log_partition(arcs, lengths, projective=False),
                dependency_viterbi(arcs, lengths, projective=False)[1], cky_log_partition(spans, lengths),
                *cky_viterbi(spans, lengths))


def test_trees_export_compile_and_transform(tree_backend):
    """The tree operators are visible to torch.export (symbolic batch and length: another shape
    gives the eager answers), torch.compile (one graph) and torch.func (the references)."""
    g = torch.Generator().manual_seed(6)
    arcs, lengths = torch.randn(3, 6, 6, generator=g), torch.tensor([5, 3, 0])
    B, T1 = torch.export.Dim("B", min=2), torch.export.Dim("T1", min=3)
    program = torch.export.export(_Parser(), (arcs, lengths), dynamic_shapes=({0: B, 1: T1, 2: T1}, {0: B}))
    other, other_lengths = torch.randn(4, 9, 9, generator=g), torch.tensor([8, 2, 0, 5])
    for got, want in zip(program.module()(other, other_lengths), _Parser()(other, other_lengths), strict=True):
        torch.testing.assert_close(got, want)
    torch._dynamo.reset()
    compiled = torch.compile(lambda a, n: dependency_log_partition(a, n), fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(arcs, lengths), dependency_log_partition(arcs, lengths))
    double = arcs.double()
    grad = torch.func.grad(lambda a: dependency_log_partition(a, lengths).sum())(double)
    torch.testing.assert_close(grad, dependency_marginals(double, lengths))
    spans = double[:, 1:, 1:, None].expand(3, 5, 5, 2)
    grad = torch.func.grad(lambda s: cky_log_partition(s, lengths).sum())(spans)
    torch.testing.assert_close(grad, cky_marginals(spans, lengths))


@pytest.mark.parametrize("projective", [True, False])
def test_dependency_distribution_against_enumeration(tree_backend, projective):
    g = torch.Generator().manual_seed(7)
    arcs, other = (torch.randn(2, 5, 5, generator=g, dtype=torch.float64) for _ in range(2))
    arcs[0, 2, 3] = -INF
    lengths = torch.tensor([4, 2])
    p = st.DependencyDistribution(arcs, lengths, projective=projective)
    q = st.DependencyDistribution(other, lengths, projective=projective)
    assert "projective" in repr(p) and p.event_shape == (5,) and p.batch_shape == (2,)
    sample = p.sample(3, generator=g)
    log_p = p.log_prob(sample)
    for b, L in enumerate(lengths.tolist()):
        trees = _dependency_trees(L, False, projective)
        lp = torch.log_softmax(_arc_scores(arcs[b], trees), 0)
        lq = torch.log_softmax(_arc_scores(other[b], trees), 0)
        prob = lp.exp()
        entropy = -(prob * torch.where(prob > 0, lp, 0.0)).sum()
        assert float(p.entropy[b]) == pytest.approx(float(entropy), abs=1e-9)
        kl = (prob * torch.where(prob > 0, lp - lq, 0.0)).sum()
        assert float(torch.distributions.kl_divergence(p, q)[b]) == pytest.approx(float(kl), abs=1e-9)
        for s in range(3):
            hit = (trees == sample[s, b, 1:L + 1]).all(1)
            assert hit.any() and float(log_p[s, b]) == pytest.approx(float(lp[hit][0]), abs=1e-9)
        assert float(p.max[b]) == pytest.approx(float(_arc_scores(arcs[b], trees).max()))
    torch.testing.assert_close(p.marginals, st.dependency_marginals(arcs, lengths, projective=projective))
    torch.testing.assert_close(p.log_partition, st.dependency_log_partition(arcs, lengths, projective=projective))
    assert torch.equal(p.argmax, st.dependency_viterbi(arcs, lengths, projective=projective)[1])


@pytest.mark.parametrize("projective", [True, False])
def test_dependency_samples_follow_the_distribution(projective):
    """4000 draws of a 3-word sentence: every tree's frequency within 4.5 standard errors of its
    probability (a sampler that ignored the conditioning, or the arcs, fails)."""
    g = torch.Generator().manual_seed(8)
    arcs = torch.randn(1, 4, 4, generator=g, dtype=torch.float64)
    draws = st.dependency_sample(arcs, 4000, projective=projective, single_root=True, generator=g)[:, 0, 1:]
    trees = _dependency_trees(3, True, projective)
    prob = torch.softmax(_arc_scores(arcs[0], trees), 0)
    freq = (draws[:, None, :] == trees[None]).all(2).double().mean(0)
    assert freq.sum() == 1
    assert ((freq - prob).abs() <= 4.5 * (prob * (1 - prob) / 4000).sqrt() + 1e-3).all()


def test_tree_samples_and_distribution(tree_backend):
    g = torch.Generator().manual_seed(9)
    scores = torch.randn(2, 3, 3, 2, generator=g, dtype=torch.float64)
    scores[0, 0, 1, 0] = -INF
    lengths = torch.tensor([3, 2])
    p = st.TreeDistribution(scores, lengths)
    assert p.event_shape == (3, 3, 2)
    draws = st.cky_sample(scores, 4000, lengths, generator=g)
    for b, L in enumerate(lengths.tolist()):
        trees = _constituency_trees(L, 2, 3)
        value = torch.where(trees.bool(), scores[b], 0.0).sum((1, 2, 3))
        prob = torch.softmax(value, 0)
        freq = (draws[:, b, None] == trees[None]).flatten(2).all(2).double().mean(0)
        assert freq.sum() == 1
        assert ((freq - prob).abs() <= 4.5 * (prob * (1 - prob) / 4000).sqrt() + 1e-3).all()
        lp = torch.log_softmax(value, 0)
        entropy = -(prob * torch.where(prob > 0, lp, 0.0)).sum()
        assert float(p.entropy[b]) == pytest.approx(float(entropy), abs=1e-9)
        assert float(p.log_prob(draws[:2])[1, b]) == pytest.approx(
            float(lp[(trees == draws[1, b]).flatten(1).all(1)][0]), abs=1e-9)


def test_structured_hinge_takes_tree_distributions():
    g = torch.Generator().manual_seed(10)
    arcs = torch.randn(2, 5, 5, generator=g, dtype=torch.float64, requires_grad=True)
    gold = torch.tensor([[-1, 2, 0, 2, 3], [-1, 0, 1, 2, 3]])
    for rescaling in ("margin", "slack"):
        hinge = st.structured_hinge(st.DependencyDistribution(arcs), gold, rescaling=rescaling, reduction="none")
        value = dependency_loss_augmented(arcs, gold, rescaling=rescaling)[0]
        if rescaling == "margin":
            value = value - st.DependencyDistribution(arcs).score(gold)
        torch.testing.assert_close(hinge, value.clamp(min=0))
        hinge.sum().backward()
    with pytest.raises(ValueError, match="h are not supported for trees"):
        st.structured_hinge(st.DependencyDistribution(arcs), gold, h=lambda k: k)
    spans = torch.randn(1, 3, 3, 2, generator=g, dtype=torch.float64)
    gold_spans = cky_viterbi(torch.randn(1, 3, 3, 2, generator=g, dtype=torch.float64))[1]
    for rescaling in ("margin", "slack"):
        hinge = st.structured_hinge(st.TreeDistribution(spans), gold_spans, rescaling=rescaling)
        trees = _constituency_trees(3, 2, 3)
        value = torch.where(trees.bool(), spans[0], 0.0).sum((1, 2, 3))
        target = float((spans[0] * gold_spans[0]).sum())
        delta = (trees * (1 - gold_spans[0])).sum((1, 2, 3))
        want = (value + delta - target) if rescaling == "margin" else delta * (1 + value - target)
        assert float(hinge) == pytest.approx(max(float(want.max()), 0.0), abs=1e-9)


@settings(max_examples=30, deadline=None, database=None)
@given(hst.integers(1, 2), hst.integers(1, 5), hst.integers(0, 2**16), hst.booleans(),
       hst.sampled_from(["margin", "slack"]))
def test_partial_annotation_equals_enumeration(tree_backend, B, T, seed, projective, rescaling):
    """Heads given for some words (-100 elsewhere): Delta counts the annotated words, the gold tree
    is the best tree that agrees with them, and the CRF's loss is -log p(agreeing trees)."""
    if rescaling == "slack" and (not projective or tree_backend == "triton"):  # (triton: the reference's
        return  # count tables, tested on the torch backend)
    arcs = _random((B, T + 1, T + 1), seed, False, 0.0)
    lengths = _lengths(B, T, seed, low=1)
    full = dependency_viterbi(_random((B, T + 1, T + 1), seed + 5, False, 0.0), lengths, projective=projective)[1]
    hidden = torch.rand(B, T + 1, generator=torch.Generator().manual_seed(seed + 9)) < 0.5
    partial = torch.where(hidden & (full >= 0), -100, full)
    value, found, loss = dependency_loss_augmented(arcs, partial, lengths, rescaling=rescaling,
                                                   projective=projective, ignore_index=-100)
    nll = st.DependencyCRF(projective=projective)(arcs, partial, lengths, reduction="none", ignore_index=-100)
    for b in range(B):
        L = int(lengths[b])
        trees = _dependency_trees(L, False, projective)
        scores = _arc_scores(arcs[b], trees)
        given = partial[b, 1:L + 1] != -100
        delta = ((trees != partial[b, 1:L + 1]) & given).sum(1).double()
        agree = delta == 0
        target = float(scores[agree].max())
        values = scores + delta if rescaling == "margin" else delta * (1 + scores - target)
        assert float(value[b]) == pytest.approx(max(float(values.max()), target if rescaling == "margin" else 0.0),
                                                abs=1e-9)
        assert int(loss[b]) == int(((found[b, 1:L + 1] != partial[b, 1:L + 1]) & given).sum())
        want = float(torch.logsumexp(scores, 0) - torch.logsumexp(scores[agree], 0))
        assert float(nll[b]) == pytest.approx(want, abs=1e-9)
    hinge = st.structured_hinge(st.DependencyDistribution(arcs, lengths, projective=projective), partial,
                                rescaling=rescaling, ignore_index=-100, reduction="none")
    assert (hinge >= 0).all()


def test_batches_without_words(tree_backend):
    """T = 0: every function, gradient, loss, sampler and layer gives the empty tree (value 0)."""
    arcs = torch.zeros(2, 1, 1, dtype=torch.float64, requires_grad=True)
    spans = torch.zeros(2, 0, 0, 3, dtype=torch.float64, requires_grad=True)
    heads = torch.full((2, 1), -1)
    for projective in (True, False):
        assert (dependency_log_partition(arcs, projective=projective) == 0).all()
        assert (dependency_viterbi(arcs, projective=projective)[1] == -1).all()
        assert dependency_marginals(arcs, projective=projective).shape == (2, 1, 1)
        assert (st.DependencyCRF(projective=projective)(arcs, heads, reduction="none") == 0).all()
        dependency_log_partition(arcs, projective=projective).sum().backward()
    assert (dependency_loss_augmented(arcs, heads, rescaling="slack")[0] == 0).all()
    assert (cky_log_partition(spans) == 0).all() and cky_viterbi(spans)[1].shape == (2, 0, 0, 3)
    assert cky_marginals(spans).shape == (2, 0, 0, 3)
    assert (cky_loss_augmented(spans, torch.zeros(2, 0, 0, 3), rescaling="slack")[0] == 0).all()
    assert st.dependency_sample(arcs, 2).shape == (2, 2, 1) and st.cky_sample(spans, 2).shape == (2, 2, 0, 0, 3)
    cky_log_partition(spans).sum().backward()


@settings(max_examples=30, deadline=None, database=None)
@given(hst.integers(1, 2), hst.integers(1, 5), hst.integers(1, 6), hst.integers(0, 2**16), hst.booleans(),
       hst.booleans())
def test_kbest_trees_equal_enumeration(B, T, k, seed, integer, single_root):
    arcs = _random((B, T + 1, T + 1), seed, integer, 0.2)
    lengths = _lengths(B, T, seed)
    scores, heads = st.dependency_kbest(arcs, k, lengths, single_root=single_root)
    for b in range(B):
        L = int(lengths[b])
        trees = _dependency_trees(L, single_root, True)
        every = _arc_scores(arcs[b], trees)
        every = every[every > -INF]
        want = torch.cat([every.sort(descending=True).values, torch.full((k,), -INF, dtype=torch.float64)])[:k]
        if L == 0:
            want = torch.tensor([0.0] + [-INF] * (k - 1), dtype=torch.float64)
        torch.testing.assert_close(scores[b], want)
        seen = set()
        for j in range(k):
            if scores[b, j] == -INF:
                assert (heads[b, j] == -1).all()
                continue
            tree = tuple(heads[b, j, 1:L + 1].tolist())
            assert tree not in seen and (L == 0 or (trees == heads[b, j, 1:L + 1]).all(1).any())
            seen.add(tree)
            assert float(_arc_scores(arcs[b], heads[b, j, 1:L + 1][None])) == pytest.approx(float(scores[b, j]))


def test_kbest_refuses_non_projective_trees():
    with pytest.raises(NotImplementedError, match="projective trees only"):
        st.dependency_kbest(torch.randn(1, 3, 3), 2, projective=False)
    with pytest.raises(ValueError, match="k must be"):
        st.dependency_kbest(torch.randn(1, 3, 3), 0)


class _LinearArcs(torch.nn.Module):
    """Arc scores linear in (W, r): s[h, m] = x_h W x_m between words, s[0, m] = r x_m from the root."""

    def __init__(self, features: int):
        super().__init__()
        self.W = torch.nn.Parameter(torch.zeros(features, features, dtype=torch.float64))
        self.r = torch.nn.Parameter(torch.zeros(features, dtype=torch.float64))

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> st.DependencyDistribution:
        B, T, _ = x.shape
        arcs = torch.cat([(x @ self.r)[:, None, :], x @ self.W @ x.transpose(1, 2)], 1)  # (B, T + 1, T)
        return st.DependencyDistribution(torch.cat([arcs.new_zeros(B, T + 1, 1), arcs], 2), lengths)


def _tree_data(n: int):
    """Synthetic treebank sentences with one-hot word classes as features; the labels are the words'
    heads (B, T), the form :func:`structtorch.train.fit` passes to a tree structure."""
    from structtorch.data import synthetic_treebank
    from structtorch.sequence_data import SequenceData

    bank = synthetic_treebank(n, seed=1, noise=0.0, max_length=8)
    classes = torch.bucketize(bank.words, torch.tensor([21, 41, 61, 65, 81, 89]), right=True)
    x = torch.nn.functional.one_hot(classes, 8).double() * (bank.words > 0)[..., None]
    return SequenceData(x, bank.heads[:, 1:].clamp(min=0), bank.lengths)


def test_structural_svms_on_trees_reach_one_optimum():
    """fit(solver="bcfw" | "cutting_plane") on a model that returns a DependencyDistribution: the
    duality gaps close on the same primal objective, and the decoded trees fit the training data."""
    data = _tree_data(16)
    last = {}
    for solver, epochs, tol in (("cutting_plane", 100, 1e-5), ("bcfw", 60, 0.05)):
        model = _LinearArcs(8)
        history = st.train.fit(model, data, st.StructuredHingeLoss("margin"), solver=solver, C=1.0, epochs=epochs,
                               progress=False, solver_options={"tol": tol})
        last[solver] = history.epochs[-1]
        assert last[solver]["gap"] <= tol + 1e-12, (solver, last[solver])
        assert st.train.evaluate(model, data)["accuracy"] > 0.85
    optimum = last["cutting_plane"]["objective"]  # within 1e-5 of the optimum: BCFW's primal is above
    assert optimum - 1e-5 <= last["bcfw"]["objective"] <= optimum + last["bcfw"]["gap"] + 1e-9
    model = _LinearArcs(8)  # slack rescaling: the cutting planes (BCFW solves margin rescaling)
    history = st.train.fit(model, data, st.StructuredHingeLoss("slack"), solver="cutting_plane", C=1.0, epochs=100,
                           progress=False, solver_options={"tol": 1e-5})
    assert history.epochs[-1]["gap"] <= 1e-5
    model = _LinearArcs(8)  # and any torch optimizer on the subgradient
    st.train.fit(model, data, st.StructuredHingeLoss("slack"), epochs=30, progress=False,
                 optimizer=torch.optim.Adam(model.parameters(), lr=0.1))
    assert st.train.evaluate(model, data)["accuracy"] > 0.85


class _LinearSpans(torch.nn.Module):
    """Span scores linear in (W, V): s[i, j, n] = (x_i + x_j) W[:, n] + V[min(j - i, 3), n]."""

    def __init__(self, features: int, labels: int):
        super().__init__()
        self.W = torch.nn.Parameter(torch.zeros(features, labels, dtype=torch.float64))
        self.V = torch.nn.Parameter(torch.zeros(4, labels, dtype=torch.float64))

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> st.TreeDistribution:
        T = x.shape[1]
        width = (torch.arange(T)[None, :] - torch.arange(T)[:, None]).clamp(0, 3)
        scores = (x[:, :, None] + x[:, None, :]) @ self.W + torch.nn.functional.one_hot(width, 4).double() @ self.V
        return st.TreeDistribution(scores, lengths)


def test_structural_svms_on_constituency_trees():
    """Labeled spans (B, T, T, N) as the data's labels (padded beyond the longest sentence: the
    cutting planes trim both position dimensions): the gaps bound one optimum; the metrics count
    the gold labeled spans found."""
    from structtorch.sequence_data import SequenceData

    g = torch.Generator().manual_seed(0)
    x = torch.randn(12, 6, 5, generator=g, dtype=torch.float64)
    lengths = torch.randint(2, 6, (12,), generator=g)
    truth = _LinearSpans(5, 2)
    with torch.no_grad():
        truth.W.copy_(torch.randn(5, 2, generator=g))
        truth.V.copy_(torch.randn(4, 2, generator=g))
        data = SequenceData(x, truth(x, lengths).argmax, lengths)
    last = {}
    for solver, epochs, tol in (("cutting_plane", 100, 1e-4), ("bcfw", 30, 1.0)):
        model = _LinearSpans(5, 2)
        history = st.train.fit(model, data, st.StructuredHingeLoss("margin"), solver=solver, C=1.0, epochs=epochs,
                               progress=False, solver_options={"tol": tol})
        last[solver] = history.epochs[-1]
        assert last[solver]["gap"] <= tol
        assert st.train.evaluate(model, data)["accuracy"] > 0.9
    cp, bcfw = last["cutting_plane"], last["bcfw"]
    assert cp["objective"] - cp["gap"] - 1e-9 <= bcfw["objective"] and bcfw["objective"] - bcfw["gap"] <= cp["objective"]
    perfect = st.metrics.accuracy(data.labels, data.labels, lengths), st.metrics.hamming(data.labels, data.labels, lengths)
    assert perfect == (1.0, 0.0)
