"""SparseFeaturePotentials' compiled bag sums (``csrc/bags.cpp``) against nn.EmbeddingBag."""

from __future__ import annotations

import pytest
import torch

import structtorch as st
from structtorch._extension import chain_ops
from structtorch.nn import sparse

pytestmark = pytest.mark.skipif(chain_ops() is None, reason="compiled kernels unavailable")


def scores_and_grad(model, ids, values=None):
    model.zero_grad()
    unary = model(ids, values=values)[0]
    weights = torch.arange(unary.numel(), dtype=unary.dtype).reshape(unary.shape).sin()
    (unary * weights).sum().backward()
    grad = model.emission.weight.grad
    return unary.detach().clone(), (grad.to_dense() if grad.is_sparse else grad).clone()


@pytest.mark.parametrize("with_values", [False, True])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("threads", [1, 3])
def test_bag_sums_equal_embedding_bag(with_values, dtype, threads, monkeypatch):
    """Duplicate ids in a bag, empty positions, values, both dtypes; three threads split the 40
    features of the backward into ranges (and the kernel runs: counted)."""
    g = torch.Generator().manual_seed(0)
    model = st.SparseFeaturePotentials(40, 5).to(dtype)
    torch.nn.init.normal_(model.emission.weight, generator=g)
    ids = torch.randint(-1, 40, (3, 7, 6), generator=g)
    ids[1, 3, 2] = ids[1, 3, 4]  # an id twice in one bag
    ids[2, 5:] = -1  # positions with no feature
    values = torch.rand(3, 7, 6, generator=g, dtype=dtype) if with_values else None
    reference = st.SparseFeaturePotentials(40, 5, sparse_grad=True).to(dtype)  # EmbeddingBag
    reference.load_state_dict(model.state_dict())
    calls = []
    real = sparse._BagSum.apply
    monkeypatch.setattr(sparse._BagSum, "apply", lambda *a: (calls.append(1), real(*a))[1])
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        got = scores_and_grad(model, ids, values)
    finally:
        torch.set_num_threads(before)
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    torch.testing.assert_close(got, scores_and_grad(reference, ids, values), rtol=tol, atol=tol)
    assert calls == [1]


def test_gradcheck_and_empty_batches():
    weight = torch.randn(9, 3, dtype=torch.float64, requires_grad=True)
    ids = torch.randint(-1, 9, (5, 4), generator=torch.Generator().manual_seed(3))
    values = torch.rand(5, 4, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda w: sparse._BagSum.apply(w, ids, values), (weight,))
    assert torch.autograd.gradcheck(lambda w: sparse._BagSum.apply(w, ids, values[:0, :0]), (weight,))
    model = st.SparseFeaturePotentials(9, 3)
    for shape in ((0, 4, 2), (2, 0, 2), (2, 3, 0)):
        unary = model(torch.zeros(shape, dtype=torch.long))[0]
        assert unary.shape == (*shape[:2], 3)
        unary.sum().backward()
    assert torch.equal(model.emission.weight.grad, torch.zeros(9, 3))


def test_learned_values_and_sparse_gradients_keep_embedding_bag():
    ids = torch.randint(-1, 30, (2, 4, 3), generator=torch.Generator().manual_seed(1))
    values = torch.rand(2, 4, 3, requires_grad=True)
    model = st.SparseFeaturePotentials(30, 3)
    torch.nn.init.normal_(model.emission.weight)
    model(ids, values=values)[0].sum().backward()
    assert values.grad is not None and values.grad.abs().sum() > 0
    sparse_model = st.SparseFeaturePotentials(30, 3, sparse_grad=True)
    sparse_model(ids)[0].sum().backward()
    assert sparse_model.emission.weight.grad.is_sparse


def test_kernels_refuse_bad_ids():
    ops = chain_ops()
    weight = torch.zeros(4, 2)
    for bad in (4, -2):
        ids = torch.tensor([[0, bad]])
        with pytest.raises(RuntimeError, match="ids must lie in"):
            ops.bag_sum_forward(ids, weight.new_empty(0), weight)
        with pytest.raises(RuntimeError, match="ids must lie in"):
            ops.bag_sum_backward(ids, weight.new_empty(0), torch.zeros(1, 2), 4)
    ids = torch.tensor([[0, 1]])
    with pytest.raises(RuntimeError, match="weight must be float32 or float64"):
        ops.bag_sum_forward(ids, weight.new_empty(0), weight.long())
    with pytest.raises(RuntimeError, match="values must have shape"):
        ops.bag_sum_forward(ids, torch.ones(1, 3), weight)
    with pytest.raises(RuntimeError, match="one row per row of grad"):
        ops.bag_sum_backward(ids, weight.new_empty(0), torch.zeros(2, 2), 4)
    with pytest.raises(ValueError, match="feature ids in"):
        st.SparseFeaturePotentials(4, 2)(torch.tensor([[[0, 4]]]))


def test_the_id_check_runs_once_per_unchanged_tensor(monkeypatch):
    """Full-batch training passes one ids tensor again and again: its range is scanned once, and
    again after an in-place change (the version counter), which is then refused."""
    model = st.SparseFeaturePotentials(5, 2)
    ids = torch.randint(-1, 5, (2, 3, 4), generator=torch.Generator().manual_seed(0))
    scans = []
    real = torch.Tensor.min
    monkeypatch.setattr(torch.Tensor, "min", lambda self, *a: (scans.append(1), real(self, *a))[1])
    for _ in range(3):
        model(ids)
    assert len(scans) == 1
    ids[0, 0, 0] = 5
    with pytest.raises(ValueError, match="feature ids in"):
        model(ids)
    model(ids.clamp(max=4))  # a new tensor: scanned
    assert len(scans) == 3


def test_the_torch_backend_keeps_embedding_bag(monkeypatch):
    """The backend choice reaches the bag sums: with "torch" no compiled kernel runs."""
    monkeypatch.setattr(sparse._BagSum, "apply", lambda *a: pytest.fail("compiled bag sums under 'torch'"))
    model = st.SparseFeaturePotentials(6, 2)
    with st.use_backend("torch"):
        model(torch.randint(-1, 6, (2, 3, 4)))[0].sum().backward()
    assert model.emission.weight.grad.shape == (6, 2)


@pytest.mark.parametrize("sparse_grad", [False, True])
@pytest.mark.parametrize("backend", ["compiled", "torch"])
def test_no_feature_slots_give_the_bias(sparse_grad, backend):
    """Issue 41: ids of shape (B, T, 0) with sparse_grad=True raised "step must be nonzero"
    (nn.EmbeddingBag refuses (R, 0) input); every position's bag is empty, so the scores are the
    bias, as with sparse_grad=False."""
    model = st.SparseFeaturePotentials(5, 3, sparse_grad=sparse_grad)
    torch.nn.init.normal_(model.bias)
    ids = torch.zeros(2, 4, 0, dtype=torch.long)
    with st.use_backend(backend):
        unary = model(ids)[0]
        torch.testing.assert_close(unary, model.bias.expand(2, 4, 3))
        values = torch.zeros(2, 4, 0, requires_grad=True)
        model(ids, values=values)[0].sum().backward()
    assert model.bias.grad is not None


def test_offsets_must_be_integers():
    """Issue 41: float offsets ran truncated ([0.0, 1.9, 2.5] as [0, 1, 2])."""
    model = st.SparseFeaturePotentials(5, 2)
    ids = torch.tensor([1, 2, 3])
    with pytest.raises(TypeError, match="offsets must be an int64"):
        model(ids, torch.tensor([0.0, 1.9, 2.5]), shape=(1, 3))
    for dtype in (torch.int64, torch.int32):
        assert model(ids, torch.tensor([0, 1, 2], dtype=dtype), shape=(1, 3))[0].shape == (1, 3, 2)


def test_the_id_check_remembers_several_tensors(monkeypatch):
    """A solver's fixed chunks of the data (several ids tensors, in turn) are scanned once each."""
    model = st.SparseFeaturePotentials(5, 2)
    chunks = [torch.randint(-1, 5, (2, 3, 4), generator=torch.Generator().manual_seed(i)) for i in range(3)]
    scans = []
    real = torch.Tensor.min
    monkeypatch.setattr(torch.Tensor, "min", lambda self, *a: (scans.append(1), real(self, *a))[1])
    for _ in range(4):
        for ids in chunks:
            model(ids)
    assert len(scans) == 3
    chunks[1][0, 0, 0] = 5  # changed in place: scanned again, refused
    with pytest.raises(ValueError, match="feature ids in"):
        model(chunks[1])
    assert len(scans) == 4
