"""Hinge losses, the linear HM-SVM model, histogram features, the training loop and DDP."""

from __future__ import annotations

import sys

import pytest
import torch
import torch.multiprocessing as mp

import structtorch as st
from structtorch.data import SequenceData, bauer_synthetic


def separable_data(n=48, T=10, N=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, N, (n, T), generator=g)
    x = torch.nn.functional.one_hot(labels, N).float() + 0.1 * torch.randn(n, T, N, generator=g)
    lengths = torch.randint(1, T + 1, (n,), generator=g)
    return SequenceData(x, labels, lengths)


@pytest.mark.parametrize("rescaling", ["margin", "slack"])
def test_training_on_separable_data_reaches_zero_error(rescaling):
    torch.manual_seed(0)
    data = separable_data()
    model = st.LinearChainPotentials(3, 3)
    loss = st.StructuredHingeLoss(rescaling=rescaling)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    history = st.train.fit(model, data, loss, optimizer=opt, epochs=25, val_data=data, progress=False,
                           batch_size=8)
    assert history["val_accuracy"][-1] == 1.0 and history["val_hamming"][-1] == 0.0
    assert history["objective"][-1] < 0.1 * history["objective"][0]
    assert len(history) == 25


def test_hinge_is_zero_and_flat_when_inactive():
    u = torch.tensor([[[5.0, 0.0], [0.0, 5.0]]], requires_grad=True)
    A = torch.zeros(2, 2)
    target = torch.tensor([[0, 1]])
    for rescaling in ("margin", "slack"):
        u.grad = None
        hinge = st.structured_hinge(u, A, target, rescaling=rescaling)
        hinge.backward()
        assert hinge.item() == 0.0 and (u.grad == 0).all()


def test_hinge_reductions_and_errors():
    u, A = torch.randn(3, 4, 2), torch.randn(2, 2)
    y = torch.zeros(3, 4, dtype=torch.long)
    per = st.StructuredHingeLoss(reduction="none")(u, A, y)
    assert per.shape == (3,) and (per >= 0).all()
    torch.testing.assert_close(st.StructuredHingeLoss(reduction="sum")(u, A, y), per.sum())
    torch.testing.assert_close(st.StructuredHingeLoss()(u, A, y), per.mean())
    with pytest.raises(ValueError, match="rescaling must be 'margin' or 'slack'"):
        st.StructuredHingeLoss(rescaling="both")
    with pytest.raises(ValueError, match="reduction must be one of"):
        st.StructuredHingeLoss(reduction="max")


def test_fit_rejects_bad_arguments():
    data = separable_data(n=4)
    model, loss = st.LinearChainPotentials(3, 3), st.StructuredHingeLoss()
    with pytest.raises(ValueError, match=r"C must be a finite number in \(0, inf\), got -1.0"):
        st.train.fit(model, data, loss, epochs=1, C=-1.0, progress=False)
    with pytest.raises(ValueError, match=r"C must be a finite number in \(0, inf\), got nan"):
        st.train.fit(model, data, loss, epochs=1, C=float("nan"), progress=False)
    with pytest.raises(ValueError, match="train_data is empty"):  # was a ZeroDivisionError
        st.train.fit(model, data.batch(torch.arange(0)), loss, epochs=1, progress=False)
    with pytest.raises(TypeError, match="epochs must be an int"):
        st.train.fit(model, data, loss, epochs=1.5, progress=False)
    with pytest.raises(ValueError, match="unknown metrics"):
        st.train.fit(model, data, loss, epochs=1, metrics=["f1"], progress=False)
    with pytest.raises(TypeError, match="the model must return"):
        st.train.fit(torch.nn.Linear(3, 3), data, loss, epochs=1, progress=False)


def test_regularizer_matches_svm_scaling():
    """objective = mean hinge + (1 / (2 n C)) ||theta||^2 at the returned parameters."""
    data = separable_data(n=8)
    model, loss = st.LinearChainPotentials(3, 3), st.StructuredHingeLoss()
    history = st.train.fit(model, data, loss, epochs=2, C=0.5, progress=False)
    with torch.no_grad():
        unary, trans = model(data.x)
        hinge = loss(unary, trans, data.labels, lengths=data.lengths)
        norm = sum(p.pow(2).sum() for p in model.parameters())
    assert abs(history["objective"][-1] - (hinge + norm / (2 * 8 * 0.5)).item()) < 1e-5


def test_linear_potentials_and_histogram_features():
    model = st.LinearChainPotentials(5, 3)
    unary, trans = model(torch.randn(2, 7, 5))
    assert unary.shape == (2, 7, 3) and trans.shape == (3, 3)
    with pytest.raises(ValueError, match=r"x must have shape \(B, T, F\) = \(B, T, 5\)"):
        model(torch.randn(2, 7, 4))
    with pytest.raises(ValueError, match=r"x must have shape \(B, T, F\) = \(B, T, 2\)"):
        st.HistogramBinning(2).fit(torch.randn(3, 4, 3))
    x = torch.randn(20, 30, 2)
    binning = st.HistogramBinning(2, num_bins=10).fit(x)
    feats = binning(x)
    assert feats.shape == (20, 30, 20)
    assert (feats.reshape(20, 30, 2, 10).sum(-1) == 1).all()
    counts = feats.reshape(-1, 2, 10).sum(0)  # quantile edges: about 60 values per bin
    assert counts.min() >= 55 and counts.max() <= 65


def test_bauer_synthetic_structure():
    data = bauer_synthetic(50, 0.0, seed=1)
    assert data.x.shape == (50, 100, 4) and data.labels.shape == (50, 100)
    assert (data.labels[:, 0] == 0).all() and (data.labels[:, -1] == 3).all()
    body = data.labels[:, 1:-1]
    assert set(body.unique().tolist()) <= {1, 2}
    signal = data.x[:, 1:-1, 0]
    assert torch.equal(signal > 0, body == 2)  # sigma = 0: the signal is the +-1 label
    assert (data.x[..., 0] == data.x[..., 3]).all()
    noisy = bauer_synthetic(50, 2.0, seed=1)
    assert abs(float((noisy.x - data.x).std()) - 2.0) < 0.1


def _ddp_worker(rank, world, init_file, out_file):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = DistributedDataParallel(st.LinearChainPotentials(3, 3))
    data = separable_data(n=33)  # the last batch of 1 leaves rank 1 an empty share
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    hinge, seen = st.StructuredHingeLoss("slack"), []

    def counting_loss(unary, *args, **kwargs):
        if torch.is_grad_enabled():  # training steps, not the objective evaluation
            seen.append(unary.shape[0])
        return hinge(unary, *args, **kwargs)

    st.train.fit(model, data, counting_loss, optimizer=opt, epochs=3, C=1.0, batch_size=8, progress=False)
    assert sum(seen) == 3 * (17 if rank == 0 else 16), seen  # each process trains on its share
    if rank == 0:
        torch.save([p.detach() for p in model.module.parameters()], out_file)
    dist.barrier()  # neither process tears gloo down while the other still uses it (SIGABRT under load)
    dist.destroy_process_group()


@pytest.mark.skipif(sys.platform == "win32", reason="gloo file store")
def test_ddp_two_processes_match_one(tmp_path):
    out = tmp_path / "ddp.pt"
    mp.spawn(_ddp_worker, args=(2, str(tmp_path / "init"), str(out)), nprocs=2, join=True)
    torch.manual_seed(0)
    model = st.LinearChainPotentials(3, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    st.train.fit(model, separable_data(n=33), st.StructuredHingeLoss("slack"), optimizer=opt, epochs=3,
                 C=1.0, batch_size=8, progress=False)
    for a, b in zip(torch.load(out), model.parameters(), strict=True):
        torch.testing.assert_close(a, b.detach(), atol=1e-5, rtol=1e-5)


def test_empty_batch_gives_zero_loss():
    u, A, y = torch.zeros(0, 4, 3, requires_grad=True), torch.zeros(3, 3), torch.zeros(0, 4, dtype=torch.long)
    for rescaling in ("margin", "slack"):
        value, path, hamming = st.loss_augmented(u, A, y, rescaling=rescaling)
        assert value.shape == (0,) and path.shape == (0, 4) and hamming.shape == (0,)
        loss = st.StructuredHingeLoss(rescaling)(u, A, y)
        assert loss.item() == 0.0
        loss.backward()
    with pytest.raises(TypeError, match="h must be None, a callable or a tensor"):
        st.StructuredHingeLoss(h="k")
