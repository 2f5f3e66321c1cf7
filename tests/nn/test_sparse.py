"""SparseFeaturePotentials' cached CSR path (the same ids tensor seen again: two sparse products)
against its EmbeddingBag path."""

from __future__ import annotations

import io

import pytest
import torch

import structtorch as st
from structtorch.nn.sparse import _Bags


def scores_and_grad(model, ids, values=None):
    model.zero_grad()
    unary = model(ids, values=values)[0]
    weights = torch.arange(unary.numel(), dtype=unary.dtype).reshape(unary.shape).sin()
    (unary * weights).sum().backward()
    return unary.detach().clone(), model.emission.weight.grad.clone()


@pytest.mark.parametrize("with_values", [False, True])
def test_cached_bags_equal_embedding_bag(with_values):
    g = torch.Generator().manual_seed(0)
    model = st.SparseFeaturePotentials(40, 5).double()
    torch.nn.init.normal_(model.emission.weight, generator=g)
    ids = torch.randint(-1, 40, (3, 7, 6), generator=g)
    ids[1, 3, 2] = ids[1, 3, 4]  # an id twice in one bag
    ids[2, 5:] = -1  # positions with no feature
    values = torch.rand(3, 7, 6, generator=g, dtype=torch.float64) if with_values else None
    reference = st.SparseFeaturePotentials(40, 5, sparse_grad=True).double()  # EmbeddingBag
    reference.load_state_dict(model.state_dict())
    first = scores_and_grad(reference, ids, values)
    first = (first[0], first[1].to_dense())
    torch.testing.assert_close(scores_and_grad(model, ids, values), first, rtol=1e-12, atol=1e-12)
    assert model._bags is None  # a tensor seen once: EmbeddingBag
    for _ in range(3):  # seen again: the CSR products, built once for this tensor
        again = scores_and_grad(model, ids, values)
        assert isinstance(model._bags, _Bags)
        torch.testing.assert_close(again, first, rtol=1e-12, atol=1e-12)
    bags = model._bags
    ids[0, 0, 0] = (ids[0, 0, 0] + 1) % 40  # changed in place: EmbeddingBag, then built again
    want = scores_and_grad(reference, ids, values)
    want = (want[0], want[1].to_dense())
    for _ in range(2):
        torch.testing.assert_close(scores_and_grad(model, ids, values), want, rtol=1e-12, atol=1e-12)
    assert model._bags is not bags and model._bags.matches(ids, values, torch.float64)


def test_new_tensors_each_call_keep_embedding_bag():
    """Minibatches and per-sentence solvers pass a new tensor each call: nothing is built."""
    ids = torch.randint(-1, 30, (2, 4, 3), generator=torch.Generator().manual_seed(2))
    model = st.SparseFeaturePotentials(30, 3)
    for _ in range(3):
        model(ids.clone())[0].sum().backward()
    assert model._bags is None


def test_the_cache_is_not_saved_and_sparse_gradients_keep_embedding_bag():
    ids = torch.randint(-1, 30, (2, 4, 3), generator=torch.Generator().manual_seed(1))
    model = st.SparseFeaturePotentials(30, 3)
    for _ in range(3):
        model(ids)
    assert model._bags is not None
    buffer = io.BytesIO()
    torch.save(model, buffer)
    assert torch.load(io.BytesIO(buffer.getvalue()), weights_only=False)._bags is None
    sparse = st.SparseFeaturePotentials(30, 3, sparse_grad=True)
    for _ in range(3):
        sparse(ids)[0].sum().backward()
    assert sparse._bags is None and sparse.emission.weight.grad.is_sparse
