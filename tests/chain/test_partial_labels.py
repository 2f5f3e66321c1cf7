"""Partial and ambiguous labels (issue 25, item 3): the CRF loss -log of the total probability of
the labelings consistent with the known labels, and the structured hinge against the best
consistent labeling with the positions outside the allowed sets as the loss, both against
enumeration; ignore_index and (B, T, N) allowed sets agree; gradients; no NaN."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from brute import enumerate_row, instances
from hypothesis import given
from hypothesis import strategies as st_

import structtorch as st

NEG_INF = float("-inf")


@st_.composite
def partial(draw):
    """(a float64 chain, allowed (B, T, N) bool: per position one label, several, all, or none)."""
    inst = draw(instances(max_t=5))
    inst.unary, inst.transitions = inst.unary.double(), inst.transitions.double()
    inst.start = None if inst.start is None else inst.start.double()
    inst.end = None if inst.end is None else inst.end.double()
    B, T, N = inst.unary.shape
    rng = np.random.default_rng(draw(st_.integers(0, 2**32 - 1)))
    kind = rng.integers(0, 4, size=(B, T))  # 0: one label, 1: any set, 2: all (unlabeled), 3: one label
    allowed = rng.random((B, T, N)) < 0.5
    one = np.eye(N, dtype=bool)[rng.integers(0, N, size=(B, T))]
    allowed = np.where((kind == 0)[..., None] | (kind == 3)[..., None], one, allowed)
    allowed = np.where((kind == 2)[..., None], True, allowed)
    return inst, torch.from_numpy(allowed)


def consistent(y, allowed_row) -> bool:
    return all(bool(allowed_row[t, y[t]]) for t in range(len(y)))


def logsumexp(values) -> float:
    values = [v for v in values if v > NEG_INF]
    if not values:
        return NEG_INF
    top = max(values)
    return top + float(np.log(sum(np.exp(v - top) for v in values)))


@given(case=partial())
def test_partial_nll_matches_enumeration(backend, case):
    inst, allowed = case
    kw = dict(start=inst.start, end=inst.end, lengths=inst.lengths, reduction="none")
    got = st.train.chain_nll(inst.unary, inst.transitions, allowed, **kw)
    assert not torch.isnan(got).any()
    for b in range(len(got)):
        rows = enumerate_row(inst, b)
        logz = logsumexp([s for _, s in rows])
        logzc = logsumexp([s for y, s in rows if consistent(y, allowed[b])])
        want = float("inf") if logz == NEG_INF or logzc == NEG_INF else logz - logzc
        assert np.isclose(float(got[b]), want, atol=1e-9, rtol=1e-9) or (np.isinf(want) and got[b] == want)


@given(case=partial())
def test_ignore_index_equals_the_allowed_sets(case):
    """Integer labels with -100 at unlabeled positions equal the (B, T, N) form (one label or all);
    fully labeled targets give the usual NLL; the CRF module and its gradients agree."""
    inst, allowed = case
    B, T, N = inst.unary.shape
    labels = allowed.int().argmax(2)
    single = allowed.sum(2) == 1
    tags = torch.where(single, labels, -100)
    sets = torch.where(single.unsqueeze(2), allowed, True)
    kw = dict(start=inst.start, end=inst.end, lengths=inst.lengths, reduction="none")
    by_index = st.train.chain_nll(inst.unary, inst.transitions, tags, ignore_index=-100, **kw)
    torch.testing.assert_close(by_index, st.train.chain_nll(inst.unary, inst.transitions, sets, **kw))
    full = st.train.chain_nll(inst.unary, inst.transitions, labels, **kw)
    torch.testing.assert_close(st.train.chain_nll(inst.unary, inst.transitions, labels, ignore_index=-100, **kw),
                               full)
    as_sets = torch.nn.functional.one_hot(labels, N).bool() if N else torch.zeros(B, T, 0, dtype=torch.bool)
    torch.testing.assert_close(st.train.chain_nll(inst.unary, inst.transitions, as_sets, **kw), full)


def test_crf_partial_tags_gradients_and_constraints():
    """The CRF with ignore_index: gradcheck of the partial loss (emissions and the CRF's scores),
    +inf with finite gradients where the known tags break the constraints, a word mask and -100
    outside it."""
    torch.manual_seed(0)
    tags_names = ["O", "B-X", "I-X"]
    crf = st.LinearChainCRF(3, ignore_index=-100, constraints=st.allowed_transitions("BIO", tags_names)).double()
    emissions = torch.randn(3, 5, 3, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[0, 1, 1, 0, 1], [1, 1, 1, 1, 1], [1, 1, 0, 0, 0]], dtype=torch.bool)
    tags = torch.tensor([[-100, 1, -100, -100, 0], [0, -100, -100, 2, 0], [0, 2, -100, -100, -100]])
    loss = crf(emissions, tags, mask)  # row 2: O -> I-X breaks BIO: no consistent labeling
    assert torch.isfinite(loss[:2]).all() and loss[2] == float("inf")
    grad = torch.autograd.grad(loss[:2].sum(), emissions)[0]
    assert torch.isfinite(grad).all() and (grad[:2][~mask[:2]] == 0).all()
    rows = (tags[:2], mask[:2])
    assert torch.autograd.gradcheck(lambda e: crf(e, *rows), (emissions[:2].detach().requires_grad_(),))
    with pytest.raises(ValueError, match=r"tags as sets of allowed labels must be a bool tensor of shape"):
        crf(emissions, torch.ones(3, 5, 2, dtype=torch.bool), mask)
    strict = st.LinearChainCRF(3).double()
    with pytest.raises(ValueError, match=r"tags must lie in \[0, N\)"):
        strict(emissions, tags, mask)  # no ignore_index: -100 inside the mask is an error


@given(case=partial(), rescaling=st_.sampled_from(["margin", "slack"]), h_kind=st_.sampled_from(["id", "sq"]))
def test_partial_hinge_matches_enumeration(case, rescaling, h_kind):
    """The loss-augmented value for partial targets: max over y' of Delta(y') + s(y') - s* (margin)
    or Delta(y') (1 + s(y') - s*) (slack), s* the best consistent score and Delta = h(positions
    outside the allowed sets); the found labeling attains it and its count is its Delta. On the
    default backend: the partial targets' handling is the same on every backend."""
    inst, allowed = case
    B, T, N = inst.unary.shape
    best = []
    for b in range(B):
        rows = enumerate_row(inst, b)
        best.append(max([s for y, s in rows if consistent(y, allowed[b])], default=NEG_INF))
    feasible = torch.tensor([s > NEG_INF for s in best])
    if not bool(feasible.all()):  # a row with no consistent labeling has no target: an error
        with pytest.raises(ValueError, match="target allows no labeling in row"):
            st.loss_augmented(inst.unary, inst.transitions, allowed, rescaling=rescaling, start=inst.start,
                              end=inst.end, lengths=inst.lengths)
        return
    h_fn = (lambda k: k) if h_kind == "id" else (lambda k: k * k)
    h = None if h_kind == "id" else (lambda k: k * k)
    value, path, count = st.loss_augmented(inst.unary, inst.transitions, allowed, h=h, rescaling=rescaling,
                                           start=inst.start, end=inst.end, lengths=inst.lengths)
    hinge = st.StructuredHingeLoss(rescaling, h=h, reduction="none")(
        inst.unary, inst.transitions, allowed, start=inst.start, end=inst.end, lengths=inst.lengths)
    torch.testing.assert_close(hinge, value.clamp(min=0))
    for b in range(B):
        L = int(inst.lengths[b])
        want = NEG_INF
        for y, s in enumerate_row(inst, b):
            if s == NEG_INF:
                continue
            k = sum(not bool(allowed[b, t, y[t]]) for t in range(L))
            want = max(want, s + h_fn(k) - best[b] if rescaling == "margin" else h_fn(k) * (1 + s - best[b]))
        assert np.isclose(float(value[b]), want, atol=1e-8), (b, float(value[b]), want)
        found = tuple(path[b, :L].tolist())
        assert float(count[b]) == sum(not bool(allowed[b, t, found[t]]) for t in range(L))


def test_partial_hinge_errors_and_gradient():
    u = torch.randn(2, 4, 3, dtype=torch.float64, requires_grad=True)
    a = torch.randn(3, 3, dtype=torch.float64)
    tags = torch.tensor([[0, -100, 2, 1], [2, 2, 0, -100]])
    with pytest.raises(ValueError, match="partial targets define the loss .*: weights do not apply"):
        st.loss_augmented(u, a, tags, ignore_index=-100, weights=torch.ones(2, 4))
    loss = st.StructuredHingeLoss("slack", ignore_index=-100)(u, a, tags)
    loss.backward()
    assert torch.isfinite(u.grad).all()
