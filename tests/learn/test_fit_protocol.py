"""train.fit's loss protocol (hinge, CRF, chain_nll, user callables), LBFGS, l2, metrics, best-epoch
selection with early stopping, objective=False, and SparseFeaturePotentials."""

from __future__ import annotations

import functools

import pytest
import torch
from torch import nn

import structtorch as st
from structtorch.data import SequenceData
from structtorch.learn.train import chain_nll
from structtorch.metrics import chunk_f1
from structtorch.nn.sparse import SparseFeaturePotentials


def noisy_data(n=24, T=8, N=3, noise=0.8, seed=0):
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, N, (n, T), generator=g)
    x = nn.functional.one_hot(labels, N).float() + noise * torch.randn(n, T, N, generator=g)
    lengths = torch.randint(1, T + 1, (n,), generator=g)
    return SequenceData(x, labels, lengths)


class Encoder(nn.Module):
    def __init__(self, F=3, N=3):
        super().__init__()
        self.linear = nn.Linear(F, N)

    def forward(self, x):
        return self.linear(x)


class Tagger(nn.Module):  # the CRF as a submodule: its parameters must not be counted twice
    def __init__(self, F=3, N=3):
        super().__init__()
        self.encoder, self.crf = Encoder(F, N), st.LinearChainCRF(N)

    def forward(self, x):
        return self.encoder(x)


def test_crf_instance_as_loss_trains_encoder_and_crf():
    torch.manual_seed(0)
    data = noisy_data()
    encoder, crf = Encoder(), st.LinearChainCRF(3)
    before = crf.transitions.detach().clone()
    history = st.train.fit(encoder, data, crf, epochs=15, val_data=data, progress=False, batch_size=8,
                           optimizer=torch.optim.Adam([*encoder.parameters(), *crf.parameters()], lr=0.05))
    assert history["objective"][-1] < 0.7 * history["objective"][0]
    assert not torch.equal(before, crf.transitions.detach())  # the CRF's own parameters are trained
    with torch.no_grad():  # the objective is the CRF's mean NLL
        nll = crf(encoder(data.x), data.labels, lengths=data.lengths).mean()
    assert history["objective"][-1] == pytest.approx(float(nll), rel=1e-5)
    # validation decodes with the CRF; evaluate(crf=) does the same
    assert st.train.evaluate(encoder, data, crf=crf)["accuracy"] == history["val_accuracy"][-1] > 0.7


def test_crf_submodule_default_optimizer_and_penalty_count_each_parameter_once():
    data = noisy_data(n=8)
    tagger = Tagger()
    history = st.train.fit(tagger, data, tagger.crf, epochs=2, l2=0.1, progress=False)
    with torch.no_grad():
        nll = tagger.crf(tagger(data.x), data.labels, lengths=data.lengths).mean()
        norm = sum(p.pow(2).sum() for p in tagger.parameters())
    assert history["objective"][-1] == pytest.approx(float(nll + 0.05 * norm), rel=1e-5)


def test_crf_loss_with_a_potentials_model_is_a_clear_error():
    data = noisy_data(n=4)
    with pytest.raises(TypeError, match=r"LinearChainCRF as the loss the model must return the unary scores"):
        st.train.fit(st.LinearChainPotentials(3, 3), data, st.LinearChainCRF(3), epochs=1, progress=False)
    with pytest.raises(ValueError, match=r"scalar tensor .* got shape \(4,\): use reduction='mean'"):
        st.train.fit(st.LinearChainPotentials(3, 3), data, st.StructuredHingeLoss(reduction="none"), epochs=1,
                     progress=False, batch_size=4)
    with pytest.raises(TypeError, match="loss must be callable"):
        st.train.fit(st.LinearChainPotentials(3, 3), data, "hinge", epochs=1, progress=False)


def test_chain_nll_matches_the_crf_and_a_plain_callable_works():
    data = noisy_data(n=6)
    crf = st.LinearChainCRF(3)
    u = torch.randn(6, 8, 3)
    want = crf(u, data.labels, lengths=data.lengths)
    got = chain_nll(u, crf.transitions, data.labels, start=crf.start, end=crf.end, lengths=data.lengths,
                    reduction="none")
    torch.testing.assert_close(got, want)
    calls = []

    def my_loss(unary, transitions, labels, lengths=None):  # a plain function, no start/end
        calls.append(unary.shape[0])
        return chain_nll(unary, transitions, labels, lengths=lengths) + 0.0 * unary.sum()

    st.train.fit(st.LinearChainPotentials(3, 3), data, my_loss, epochs=1, batch_size=4, progress=False)
    assert calls[:2] == [4, 2]


def test_lbfgs_gets_a_closure_and_reaches_the_optimum():
    torch.manual_seed(0)
    data = noisy_data(n=16)
    model = st.LinearChainPotentials(3, 3)
    opt = torch.optim.LBFGS(model.parameters(), lr=1.0, max_iter=50, line_search_fn="strong_wolfe")
    history = st.train.fit(model, data, chain_nll, optimizer=opt, epochs=3, l2=0.1, batch_size=len(data),
                           progress=False)
    # smooth strictly convex objective: the gradient vanishes at LBFGS's solution
    model.zero_grad()
    unary, trans = model(data.x)
    value = chain_nll(unary, trans, data.labels, lengths=data.lengths)
    value = value + 0.05 * sum(p.pow(2).sum() for p in model.parameters())
    value.backward()
    assert max(float(p.grad.abs().max()) for p in model.parameters()) < 1e-3
    assert history["objective"][-1] == pytest.approx(float(value.detach()), rel=1e-5)
    assert history["objective"][0] < history["train_loss"][0]  # train_loss: the loss before the first step


def test_l2_equals_c_scaling_and_both_is_an_error():
    data = noisy_data(n=8)
    runs = []
    for kw in ({"C": 0.5}, {"l2": 1 / (8 * 0.5)}):
        model = st.LinearChainPotentials(3, 3)
        runs.append((st.train.fit(model, data, st.StructuredHingeLoss(), epochs=2, progress=False, **kw),
                     [p.detach() for p in model.parameters()]))
    assert runs[0][0]["objective"] == runs[1][0]["objective"]
    for a, b in zip(runs[0][1], runs[1][1], strict=True):
        torch.testing.assert_close(a, b)
    model, loss = st.LinearChainPotentials(3, 3), st.StructuredHingeLoss()
    with pytest.raises(ValueError, match="pass C or l2, not both"):
        st.train.fit(model, data, loss, epochs=1, C=1.0, l2=0.1, progress=False)
    with pytest.raises(ValueError, match=r"l2 must be a finite number in \[0, inf\), got -1.0"):
        st.train.fit(model, data, loss, epochs=1, l2=-1.0, progress=False)


def test_custom_metrics_and_chunk_f1_on_validation_data():
    data = noisy_data(n=16)
    names = ["O", "B-X", "I-X"]
    seen = []

    def count_positions(path, labels, lengths):
        seen.append(path.shape)
        return float(lengths.sum())

    history = st.train.fit(
        st.LinearChainPotentials(3, 3), data, st.StructuredHingeLoss(), epochs=2, val_data=data, progress=False,
        metrics={"f1": functools.partial(chunk_f1, labels=names), "positions": count_positions,
                 "accuracy": st.train.accuracy})
    assert set(history.epochs[0]) == {"objective", "train_loss", "time", "val_f1", "val_positions",
                                      "val_accuracy"}
    assert seen == [(16, 8), (16, 8)]  # once per epoch over the whole validation set
    assert history["val_positions"] == [float(data.lengths.sum())] * 2
    path = st.viterbi(*st.LinearChainPotentials(3, 3)(data.x), lengths=data.lengths)[1]  # zero model
    assert 0.0 <= history["val_f1"][-1] <= 1.0 and chunk_f1(path, data.labels, data.lengths, names).f1 >= 0
    with pytest.raises(TypeError, match="metrics must map names to callables"):
        st.train.fit(st.LinearChainPotentials(3, 3), data, chain_nll, epochs=1, metrics={"f1": 3}, progress=False)


def test_select_best_epoch_early_stopping_and_restore():
    data = noisy_data(n=8)
    model = st.LinearChainPotentials(3, 3)
    scripted = iter([0.1, 0.5, 0.3, 0.2, 0.9, 0.9])
    snapshots = []

    def scripted_metric(path, labels, lengths):
        snapshots.append([p.detach().clone() for p in model.parameters()])
        return next(scripted)

    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    history = st.train.fit(model, data, st.StructuredHingeLoss(), optimizer=opt, epochs=6, val_data=data,
                           metrics={"score": scripted_metric}, select="val_score", patience=2, progress=False)
    assert len(history) == 4 and history.stopped_early and history.best_epoch == 1
    for a, b in zip(snapshots[1], model.parameters(), strict=True):  # epoch 1's weights are back
        torch.testing.assert_close(a, b.detach())
    # mode "min" inferred for the objective; no patience: all epochs, best restored
    model = st.LinearChainPotentials(3, 3)
    history = st.train.fit(model, data, st.StructuredHingeLoss(), epochs=3, select="objective",
                           optimizer=torch.optim.SGD(model.parameters(), lr=0.1), progress=False)
    assert history["objective"][history.best_epoch] == min(history["objective"]) and not history.stopped_early


def test_selection_argument_errors():
    data = noisy_data(n=4)
    model, loss = st.LinearChainPotentials(3, 3), st.StructuredHingeLoss()
    with pytest.raises(ValueError, match=r"select='val_f1' is not recorded; choose from \['objective'"):
        st.train.fit(model, data, loss, epochs=1, select="val_f1", progress=False)
    with pytest.raises(ValueError, match="select='objective' is not recorded"):
        st.train.fit(model, data, loss, epochs=1, select="objective", objective=False, progress=False)
    with pytest.raises(ValueError, match="patience needs select="):
        st.train.fit(model, data, loss, epochs=1, patience=2, progress=False)
    with pytest.raises(ValueError, match="mode must be 'max' or 'min'"):
        st.train.fit(model, data, loss, epochs=1, select="train_loss", mode="up", progress=False)
    with pytest.raises(ValueError, match="patience must be an int >= 1"):
        st.train.fit(model, data, loss, epochs=1, select="train_loss", patience=0, progress=False)


def test_objective_false_skips_the_full_pass():
    data = noisy_data(n=8)
    hinge, calls = st.StructuredHingeLoss(), []

    def counting(unary, *args, **kwargs):
        calls.append(torch.is_grad_enabled())
        return hinge(unary, *args, **kwargs)

    history = st.train.fit(st.LinearChainPotentials(3, 3), data, counting, epochs=2, objective=False,
                           batch_size=4, progress=False)
    assert all(calls) and len(calls) == 4  # training steps only, no gradient-free objective pass
    assert "objective" not in history.epochs[0] and len(history["train_loss"]) == 2


def test_progress_without_tqdm_warns_and_trains(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "tqdm", None)  # import tqdm now raises ImportError
    with pytest.warns(UserWarning, match="progress=True needs tqdm"):
        history = st.train.fit(st.LinearChainPotentials(3, 3), noisy_data(n=4), chain_nll, epochs=1)
    assert len(history) == 1


# ---------------------------------------------------------------------------------------------
# SparseFeaturePotentials


def bags(n=6, T=5, K=4, F=11, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, F, (n, T, K), generator=g)
    ids[torch.rand(n, T, K, generator=g) < 0.3] = -1  # padding slots
    dense = torch.zeros(n, T, F)
    for b, t, k in torch.nonzero(ids >= 0).tolist():
        dense[b, t, ids[b, t, k]] += 1.0
    return ids, dense


def test_sparse_equals_the_dense_one_hot_linear_model():
    ids, dense = bags()
    sparse, lin = SparseFeaturePotentials(11, 3), st.LinearChainPotentials(11, 3)
    with torch.no_grad():
        for p in (sparse.emission.weight, sparse.bias, sparse.transitions):
            p.normal_()
        lin.emission.weight.copy_(sparse.emission.weight.T)
        lin.emission.bias.copy_(sparse.bias)
        lin.transitions.copy_(sparse.transitions)
    (u1, a1), (u2, _) = sparse(ids), lin(dense)
    torch.testing.assert_close(u1, u2)
    assert a1 is sparse.transitions
    # offsets form: the same bags flattened
    flat = [ids[b, t][ids[b, t] >= 0] for b in range(6) for t in range(5)]
    offsets = torch.tensor([0, *torch.tensor([len(f) for f in flat]).cumsum(0)[:-1].tolist()])
    u3, _ = sparse(torch.cat(flat), offsets, shape=(6, 5))
    torch.testing.assert_close(u3, u1)
    # values: a real value per id scales its weight
    values = torch.rand(ids.shape)
    u4, _ = sparse(ids, values=values)
    dense_v = torch.zeros(6, 5, 11)
    for b, t, k in torch.nonzero(ids >= 0).tolist():
        dense_v[b, t, ids[b, t, k]] += values[b, t, k]
    torch.testing.assert_close(u4, lin(dense_v)[0])


def test_sparse_boundary_scores_enter_the_path_score():
    ids, _ = bags()
    model = SparseFeaturePotentials(11, 3, boundary=True)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_()
    unary, trans, start, end = model(ids)
    assert start is model.start and end is model.end and start.shape == end.shape == (3,)
    labels = torch.randint(0, 3, (6, 5))
    plain = st.path_score(unary, trans, labels)
    full = st.path_score(unary, trans, labels, start=start, end=end)
    torch.testing.assert_close(full - plain, start[labels[:, 0]] + end[labels[:, -1]])
    assert len(SparseFeaturePotentials(11, 3)(ids)) == 2


def test_sparse_trains_like_the_dense_model():
    ids, dense = bags(n=12, T=6)
    g = torch.Generator().manual_seed(1)
    labels = torch.randint(0, 3, (12, 6), generator=g)
    lengths = torch.randint(1, 7, (12,), generator=g)
    results = []
    for model, x in ((SparseFeaturePotentials(11, 3), ids), (st.LinearChainPotentials(11, 3), dense)):
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        h = st.train.fit(model, SequenceData(x, labels, lengths), st.StructuredHingeLoss(), optimizer=opt,
                         epochs=3, C=1.0, batch_size=4, progress=False)
        results.append((h["objective"], model))
    assert results[0][0] == pytest.approx(results[1][0], rel=1e-5)
    torch.testing.assert_close(results[0][1].emission.weight, results[1][1].emission.weight.T)


def test_sparse_memory_is_o_nnz():
    """10^6 features: a one-hot input of this batch would take 4 * 2 * 50 * 10^6 = 400 MB."""
    F = 1_000_000
    model = SparseFeaturePotentials(F, 2)
    ids = torch.randint(0, F, (2, 50, 3))
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        unary, _ = model(ids)
        unary.sum().backward()
    allocated = sum(max(e.self_cpu_memory_usage, 0) for e in prof.key_averages())
    weight_and_grad = 2 * F * 2 * 4  # the dense gradient of the weight; sparse_grad avoids it
    assert allocated < weight_and_grad + 1_000_000, allocated
    sparse = SparseFeaturePotentials(F, 2, sparse_grad=True)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        unary, _ = sparse(ids)
        unary.sum().backward()
    assert sum(max(e.self_cpu_memory_usage, 0) for e in prof.key_averages()) < 1_000_000
    assert sparse.emission.weight.grad.is_sparse


def test_sparse_errors_name_the_argument():
    model = SparseFeaturePotentials(5, 2)
    with pytest.raises(ValueError, match=r"ids must hold feature ids in \[-1, num_features\) = \[-1, 5\), found 5"):
        model(torch.full((1, 2, 3), 5))
    with pytest.raises(ValueError, match=r"ids must have shape \(B, T, K\)"):
        model(torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(TypeError, match="ids must be an int64"):
        model(torch.zeros(1, 2, 3))
    with pytest.raises(ValueError, match=r"offsets must have shape \(B \* T,\) = \(4,\)"):
        model(torch.zeros(3, dtype=torch.long), torch.zeros(3, dtype=torch.long), shape=(2, 2))
    with pytest.raises(ValueError, match="shape must be"):
        model(torch.zeros(3, dtype=torch.long), torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match="num_features must be an int >= 1"):
        SparseFeaturePotentials(0, 2)


def test_fit_takes_a_model_that_returns_a_structure():
    """A model whose forward takes lengths may return a ChainDistribution; the hinge takes it as
    loss(structure, labels) and decoding is its argmax. Same training as the potentials protocol."""
    import structtorch as st_

    data = st_.data.make_tagging_data(64, num_labels=3, num_features=4, seed=5)

    class Structured(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = st_.LinearChainPotentials(4, 3)

        def forward(self, x, lengths=None):
            unary, transitions = self.inner(x)
            return st_.ChainDistribution(unary, transitions, lengths=lengths)

    torch.manual_seed(0)
    structured = Structured()
    torch.manual_seed(0)
    plain = st_.LinearChainPotentials(4, 3)
    kw = {"epochs": 3, "C": 1.0, "progress": False, "seed": 0, "val_data": data}
    h1 = st_.train.fit(structured, data, st_.StructuredHingeLoss("slack"),
                       optimizer=torch.optim.SGD(structured.parameters(), lr=0.1), **kw)
    h2 = st_.train.fit(plain, data, st_.StructuredHingeLoss("slack"),
                       optimizer=torch.optim.SGD(plain.parameters(), lr=0.1), **kw)
    assert h1["objective"] == pytest.approx(h2["objective"], rel=1e-6)
    assert h1["val_accuracy"] == pytest.approx(h2["val_accuracy"])


def test_a_registered_solver_brings_its_own_records(monkeypatch):
    """The solver protocol: a solver registered by name runs under fit's loop (validation, select,
    patience, restore, convergence) with records fit does not know, as a cutting-plane solver would."""
    from structtorch.learn import solvers
    from structtorch.learn.task import Task

    class Toy:
        records = {"objective": "min", "dual": "max", "gap": "min", "constraints": "max", "oracle_calls": "min",
                   "time": "min"}

        def __init__(self, model, data, loss, options):
            self.task, self.options, self.k = Task(model, loss), options, 0

        def epoch(self):
            self.k += 1
            with torch.no_grad():
                for p in self.task.parameters:
                    p.add_(0.1)
            return {"objective": 1.0 / self.k, "dual": -1.0 / self.k, "gap": 2.0 / self.k,
                    "constraints": float(self.k), "oracle_calls": float(self.k * 3), "time": 0.0}

        def converged(self, record):
            return record["gap"] <= self.options.solver_options["tol"]

    monkeypatch.setitem(solvers.SOLVERS, "toy", Toy)
    data = st.data.make_tagging_data(8, num_labels=3, num_features=4, seed=0)
    model = st.LinearChainPotentials(4, 3)
    history = st.train.fit(model, data, st.StructuredHingeLoss(), epochs=10, solver="toy",
                           solver_options={"tol": 0.5}, select="constraints", val_data=data, progress=False)
    assert len(history) == 4 and history.converged and history.best_epoch == 3
    assert set(history.epochs[0]) == set(Toy.records) | {"val_accuracy", "val_hamming"}
    with pytest.raises(ValueError, match=r"select='train_loss' is not recorded; choose from \['constraints'"):
        st.train.fit(model, data, st.StructuredHingeLoss(), epochs=1, solver="toy", select="train_loss",
                     solver_options={"tol": 0.5}, progress=False)
    with pytest.raises(ValueError, match=r"solver must be one of \('subgradient', 'bcfw', 'cutting_plane', 'toy'\)"):
        st.train.fit(model, data, st.StructuredHingeLoss(), epochs=1, solver="frank_wolfe", progress=False)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
@pytest.mark.parametrize("solver", ["subgradient", "bcfw", "cutting_plane"])
def test_nan_or_inf_features_get_one_clear_error_under_every_solver(solver, bad):
    data = st.data.make_tagging_data(6, seed=0, min_length=2, max_length=4, num_features=2, num_labels=3)
    data.x[1, 0, 1] = bad
    what = "NaN" if bad != bad else r"\+inf"
    for where in ("train_data", "val_data"):
        train, val = (data, None) if where == "train_data" else (data.batch(torch.arange(1)), data)
        with pytest.raises(ValueError, match=rf"{where}.x contains {what} at index \(1, 0, 1\)"):
            st.train.fit(st.LinearChainPotentials(2, 3), train, st.StructuredHingeLoss(), epochs=1, C=1.0,
                         solver=solver, val_data=val, progress=False)


@pytest.mark.parametrize("solver", ["bcfw", "cutting_plane"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_bad_potentials_without_validation_are_a_clear_error_of_the_exact_solvers(solver, bad):
    data = st.data.make_tagging_data(4, seed=0, min_length=2, max_length=3, num_features=2, num_labels=2)
    data.x[0, 0, 0] = bad
    with st.set_validation(False), pytest.raises(ValueError, match="outputs hold NaN or \\+inf at random"):
        st.train.fit(st.LinearChainPotentials(2, 2), data, st.StructuredHingeLoss(), epochs=1, C=1.0,
                     solver=solver, progress=False)



def _costed(n: int = 6, seed: int = 0) -> SequenceData:
    data = st.data.make_tagging_data(n, seed=seed, min_length=2, max_length=4, num_features=2, num_labels=3)
    cost = torch.rand(n, data.labels.shape[1], 3, generator=torch.Generator().manual_seed(seed))
    return SequenceData(data.x, data.labels, data.lengths, cost=cost.scatter(2, data.labels.unsqueeze(2), 0.0))


def test_data_costs_reach_every_solvers_loss():
    """SequenceData.cost (issue 53, item 9) is the loss's cost= under every solver: the subgradient
    solver's objective is the hinge with the costs, not with the Hamming count."""
    data = _costed()
    model = st.LinearChainPotentials(2, 3)
    history = st.train.fit(model, data, st.StructuredHingeLoss(), epochs=1, l2=0.1, progress=False)
    unary, trans = model(data.x)
    want = st.structured_hinge(unary, trans, data.labels, lengths=data.lengths, cost=data.cost).item()
    hamming = st.structured_hinge(unary, trans, data.labels, lengths=data.lengths).item()
    penalty = 0.05 * sum(float(p.pow(2).sum()) for p in model.parameters())
    assert history["objective"][-1] == pytest.approx(want + penalty, rel=1e-5)
    assert want != pytest.approx(hamming, rel=1e-3)  # the costs change the loss here
    assert data.batch(torch.tensor([1, 0])).cost.shape == (2, *data.cost.shape[1:])


def test_data_costs_that_the_loss_cannot_take_are_refused():
    data = _costed()
    with pytest.raises(ValueError, match="train_data.cost .* CRF likelihood takes none"):
        st.train.fit(nn.Linear(2, 3), data, st.LinearChainCRF(3), epochs=1, progress=False)
    with pytest.raises(ValueError, match="train_data.cost .* CRF likelihood takes none"):
        st.train.fit(st.LinearChainPotentials(2, 3), data, chain_nll, epochs=1, progress=False)

    def plain(unary, transitions, labels, *, lengths=None):
        return unary.sum()

    with pytest.raises(TypeError, match="train_data.cost is passed to the loss as cost="):
        st.train.fit(st.LinearChainPotentials(2, 3), data, plain, epochs=1, progress=False)
    for bad, exc in ((data.cost[:, :-1], ValueError), (data.cost.long(), TypeError),
                     (data.cost.index_fill(0, torch.tensor([0]), float("inf")), ValueError)):
        broken = SequenceData(data.x, data.labels, data.lengths, cost=bad)
        with pytest.raises(exc, match="train_data.cost"):
            st.train.fit(st.LinearChainPotentials(2, 3), broken, st.StructuredHingeLoss(), epochs=1, progress=False)
