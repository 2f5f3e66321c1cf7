"""Training of structured models: :func:`fit` (any torch optimizer, block-coordinate Frank-Wolfe,
cutting planes or any registered solver) and :func:`evaluate`.

The learning layer sits on top of the library: the model/loss adapter is
:class:`structtorch.learn.task.Task`, the solvers are registered in
:mod:`structtorch.learn.solvers` (one file each), :class:`History` and best-epoch selection are in
:mod:`structtorch.learn.history`. The metrics (:func:`accuracy`, :func:`hamming`,
:func:`sequence_metrics`) live in :mod:`structtorch.metrics` and the CRF loss :func:`chain_nll` in
:mod:`structtorch.losses`; both are re-exported here.

The loss protocol
-----------------
The model maps features x (B, T, ...) to chain potentials: a tuple ``(unary, transitions)`` or
``(unary, transitions, start, end)``. The loss is any callable

    ``loss(unary, transitions, labels, lengths=lengths) -> scalar tensor``

(with ``start=`` and ``end=`` too when the model returns them) giving the mean over the batch
(0 for an empty batch): :class:`structtorch.StructuredHingeLoss` (reduction "mean"),
:func:`chain_nll` (the CRF negative log-likelihood of the model's own potentials), or a user
function. A model whose ``forward`` takes ``lengths`` is called as ``model(x, lengths=lengths)``
and may return a structure instead (a :class:`structtorch.ChainDistribution`,
:class:`structtorch.SemiMarkovDistribution`, ...): the loss is then called as ``loss(structure,
labels)`` (e.g. :class:`structtorch.StructuredHingeLoss`) and decoding is the structure's
``argmax``. One exception: a :class:`structtorch.LinearChainCRF` instance as the loss holds the
transition, start and end scores itself; the model then returns the unary scores (B, T, N) alone,
the loss is the CRF's mean NLL, decoding is the CRF's, and the CRF's parameters are trained (and
regularized) with the model's.

The SVM regularizer
-------------------
The structured SVM primal ``1/2 ||w||^2 + C sum_i xi_i`` divided by n C is
``mean_i xi_i + lambda/2 ||w||^2`` with ``lambda = 1 / (n C)``, n the number of training
sequences. ``fit`` adds that penalty over all trained parameters to the loss (``C=``, or
``l2=lambda`` directly), which is plain SGD's ``weight_decay = lambda``; the history's
``objective`` is this scaled primal.

Under ``torch.distributed`` (e.g. the model wrapped in DistributedDataParallel) every process
draws the same shuffled batches and takes its share of each, its batch mean weighted by the
share's size, so the averaged gradients equal those of one process on the whole batch
(:mod:`structtorch.learn.solvers.subgradient`).
"""

from __future__ import annotations

import inspect
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

from .._checks import check_finite, check_float, check_int, check_number, check_values
from ..losses import StructuredHingeLoss, chain_nll
from ..metrics import BUILTIN_METRICS as BUILTIN_METRICS  # re-exported where it was
from ..metrics import Metric, accuracy, hamming, resolve_metrics, sequence_metrics
from ..nn.crf import LinearChainCRF
from ..sequence_data import SequenceData
from .checkpoint import Checkpoint, fingerprint
from .history import History, Selection
from .solvers import SOLVERS as SOLVERS  # re-exported where it was (the registry, by name)
from .solvers import FitOptions, Solver, get_solver
from .task import Task

__all__ = ["fit", "evaluate", "History", "sequence_metrics", "accuracy", "hamming", "chain_nll", "fit_bcfw"]


@torch.no_grad()
def evaluate(model: nn.Module, data: SequenceData, batch_size: int = 256, *,
             crf: LinearChainCRF | None = None,
             metrics: Sequence[str] | Mapping[str, Metric] = ("accuracy", "hamming")) -> dict[str, float]:
    """Viterbi-decode ``data`` with ``model`` and score the paths.

    Parameters
    ----------
    model : nn.Module
        x -> chain potentials, or -> unary (B, T, N) when ``crf`` is given.
    data : SequenceData
    batch_size : int
    crf : LinearChainCRF, optional
        The CRF that was the loss of :func:`fit`: it decodes the model's unary scores.
    metrics : names from {"accuracy", "hamming"}, or a dict {name: fn(path, labels, lengths)}
        ``path`` (n, T) int64 (-1 beyond each length), ``labels`` (n, T), ``lengths`` (n,); each
        fn returns a float (or anything ``float()`` takes, such as
        :class:`structtorch.metrics.ChunkScores`), computed once over the whole of ``data``.

    Returns
    -------
    dict name -> float
    """
    check_int("batch_size", batch_size, 1)
    task = Task(model, crf if crf is not None else _no_loss)
    return task.score(data, resolve_metrics(metrics), batch_size)


def _no_loss(*args, **kwargs) -> Tensor:  # evaluate() decodes only
    raise RuntimeError("evaluate does not compute a loss")


# ---------------------------------------------------------------------------------------------
# fit


def _regularization(n: int, C: float | None, l2: float | None) -> float:
    if C is not None and l2 is not None:
        raise ValueError(f"pass C or l2, not both (l2 = 1 / (n C)); got C={C} and l2={l2}")
    if C is not None:
        return 1.0 / (n * check_number("C", C, low=0.0, open_low=True))
    if l2 is not None:
        return check_number("l2", l2, low=0.0)
    return 0.0


def _check_features(name: str, data: SequenceData | None) -> None:
    """Every solver's first check, before it calls or probes the model: the floating-point features
    of ``data`` hold no NaN or +inf (-inf may mark what cannot occur, as a signal track's)."""
    if data is None:
        return
    if not isinstance(data, SequenceData):
        raise TypeError(f"{name} must be a SequenceData, got {type(data).__name__}")
    if isinstance(data.x, Tensor) and data.x.is_floating_point():
        check_values(f"{name}.x", data.x)
    if data.cost is not None:
        cost = check_float(f"{name}.cost", data.cost)
        check_finite(f"{name}.cost", cost)
        shape = tuple(data.labels.shape)
        if cost.dim() != 3 or tuple(cost.shape[:2]) != shape:
            raise ValueError(f"{name}.cost must have shape (n, T, N) = ({shape[0]}, {shape[1]}, N) as "
                             f"{name}.labels, got {tuple(cost.shape)}")


def _check_cost_taken(data: SequenceData, loss: object) -> None:
    """A ValueError or TypeError where ``data`` has costs that ``loss`` cannot take (``cost=``)."""
    if data.cost is None:
        return
    if isinstance(loss, LinearChainCRF) or loss is chain_nll:
        raise ValueError("train_data.cost holds costs of the structured hinge; the CRF likelihood takes none "
                         "(train with a StructuredHingeLoss, or drop the costs)")
    if loss is None or isinstance(loss, StructuredHingeLoss):
        return
    try:
        parameters = inspect.signature(loss).parameters.values()
    except (TypeError, ValueError):  # no introspectable signature: the call will tell
        return
    if not any(p.name == "cost" or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        raise TypeError(f"train_data.cost is passed to the loss as cost=, which {type(loss).__name__} does "
                        "not take")


def _process_group() -> tuple[bool, int, int]:
    """(distributed, rank, world) of this process under torch.distributed."""
    if dist.is_available() and dist.is_initialized():
        return True, dist.get_rank(), dist.get_world_size()
    return False, 0, 1


def _directions(solver: Solver, metrics: Mapping[str, Metric], validating: bool) -> dict[str, str]:
    """Every record of the run -> the direction in which it improves (the default ``mode``)."""
    directions = dict(solver.records)
    if validating:
        directions |= {f"val_{m}": "min" if m == "hamming" else "max" for m in metrics}
    return directions


def _progress_bar(total: int, enabled: bool):
    if not enabled:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        warnings.warn("progress=True needs tqdm (pip install tqdm); training without a progress bar",
                      stacklevel=4)
        return None
    return tqdm(total=total, desc="training", unit="epoch")


def _run(solver: Solver, selection: Selection, options: FitOptions, val_data: SequenceData | None,
         metrics: Mapping[str, Metric], bar, saver: Checkpoint | None) -> History:
    """The epoch loop of every solver: an epoch, validation, progress, selection, convergence, the
    checkpoint; resumed from the checkpoint where there is one."""
    history = saver.resume(solver, selection) if saver is not None else History()
    if bar is not None:
        bar.update(len(history))
    while len(history) < options.epochs and not (history.stopped_early or history.converged):
        record = solver.epoch()
        if val_data is not None:
            record.update({f"val_{k}": v for k, v in solver.task.score(val_data, metrics, 256).items()})
        history.epochs.append(record)
        if bar is not None:
            bar.set_postfix({k: round(v, 4) for k, v in record.items()})
            bar.update()
        if not selection.update(history, solver.task) and solver.converged(record):
            history.converged = True
        if saver is not None:
            saver.after_epoch(history, selection, solver, history.stopped_early or history.converged
                              or len(history) == options.epochs)
    selection.restore(history, solver.task)
    return history


def _train(solver: Solver, selection: Selection, options: FitOptions, val_data: SequenceData | None,
           metrics: Mapping[str, Metric], progress: bool, saver: Checkpoint | None) -> History:
    bar = _progress_bar(options.epochs, progress and options.rank == 0)
    try:
        return _run(solver, selection, options, val_data, metrics, bar, saver)
    finally:
        if bar is not None:
            bar.close()


def _checkpoint(path: str | os.PathLike | None, every: int, engine: Solver, options: FitOptions, *,
                solver: str, data: SequenceData, loss: object, select: str | None, mode: str | None,
                patience: int | None) -> Checkpoint | None:
    """The checkpoint of ``fit(checkpoint=path, checkpoint_every=every)``, or None without a path."""
    check_int("checkpoint_every", every, 1)
    if path is None:
        return None
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"checkpoint must be a path (str or os.PathLike), got {type(path).__name__}")
    if not all(callable(getattr(engine, name, None)) for name in ("state_dict", "load_state_dict")):
        raise TypeError(f"solver={solver!r} cannot be checkpointed: it has no state_dict() and "
                        "load_state_dict() (see structtorch.learn.solvers.base.Solver)")
    meta = fingerprint(solver=solver, solver_options=options.solver_options, lam=options.lam,
                       batch_size=options.batch_size, seed=options.seed, data=data,
                       modules=engine.task.modules, loss=loss, optimizer=options.optimizer,
                       scheduler=options.scheduler, select=select, mode=mode, patience=patience,
                       objective=options.objective)
    return Checkpoint(path, every, meta, options.rank, options.distributed)


def fit(
    model: nn.Module,
    train_data: SequenceData,
    loss: Callable[..., Tensor] | LinearChainCRF | None,
    *,
    optimizer: torch.optim.Optimizer | None = None,
    epochs: int,
    C: float | None = None,
    l2: float | None = None,
    val_data: SequenceData | None = None,
    metrics: Sequence[str] | Mapping[str, Metric] = ("accuracy", "hamming"),
    select: str | None = None,
    mode: str | None = None,
    patience: int | None = None,
    restore_best: bool = True,
    objective: bool = True,
    progress: bool = True,
    batch_size: int = 32,
    seed: int = 0,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
    solver: str = "subgradient",
    solver_options: Mapping[str, Any] | None = None,
    checkpoint: str | os.PathLike | None = None,
    checkpoint_every: int = 1,
) -> History:
    """Train ``model`` on ``loss`` over ``train_data`` by (sub)gradient steps, BCFW or cutting planes.

    Parameters
    ----------
    model : nn.Module
        x (B, T, ...) -> (unary (B, T, N), transitions (N, N)) or (unary, transitions, start (N,),
        end (N,)); -> unary (B, T, N) alone when ``loss`` is a LinearChainCRF. May be wrapped in
        DistributedDataParallel.
    train_data, val_data : SequenceData
        ``x`` (n, T, ...), ``labels`` (n, T), ``lengths`` (n,); ``train_data.cost`` (n, T, N),
        optional, per-example costs of the structured hinge (``cost[i, t, j]``: predicting j at
        position t of sequence i), which every solver passes to the loss as ``cost=``.
    loss : callable or LinearChainCRF
        ``loss(unary, transitions, labels, start=, end=, lengths=)`` -> scalar mean over the batch
        (the loss protocol of the module docstring): a StructuredHingeLoss, :func:`chain_nll` or
        any function; or a LinearChainCRF (its mean NLL, its parameters trained too). None only
        with ``solver="bcfw"`` (the margin-rescaled Hamming hinge). BCFW calls the loss-augmented
        oracle with the loss's ``h`` (and the data's costs), not the loss: it refuses a subclass
        that overrides ``forward``, and segment losses or partial labels.
    optimizer : torch.optim.Optimizer, optional
        Default: SGD with lr 0.01 on the parameters of the model (and of a CRF loss). Optimizers
        whose ``step`` requires a closure (``torch.optim.LBFGS``) get one that recomputes the
        batch loss; use them full-batch (``batch_size >= n``).
    epochs : int
        Passes over the training data (the most, with ``patience`` or a BCFW tolerance).
    C, l2 : float, optional
        The regularizer, at most one of them: ``l2`` adds (l2 / 2) ||theta||^2 to the mean loss;
        ``C`` is the SVM trade-off, l2 = 1 / (n C) (see the module docstring). Neither: no penalty.
        A model with a ``regularizer()`` method (such as
        :class:`structtorch.semisup.KernelChainPotentials`, ``beta^T K beta``) supplies the term for
        its own parameters: ``(l2 / 2) model.regularizer()``.
    metrics : names from {"accuracy", "hamming"}, or a dict {name: fn(path, labels, lengths)}
        Validation metrics recorded per epoch as ``val_<name>``; fn gets the Viterbi paths
        (n_val, T) (-1 beyond each length), labels (n_val, T) and lengths (n_val,) of the whole
        validation set and returns a float (e.g.
        ``functools.partial(structtorch.metrics.chunk_f1, labels=tag_names)``).
    select : str, optional
        The record that picks the best epoch: ``"val_<name>"``, ``"objective"``, ``"train_loss"``
        (BCFW: also ``"gap"``). At the end the best epoch's weights are restored
        (``restore_best``); ``history.best_epoch`` is its index.
    mode : {"max", "min"}, optional
        Whether larger values of ``select`` are better. Default: "min" for objective, train_loss,
        gap and val_hamming, "max" otherwise.
    patience : int, optional
        Stop after this many epochs without improvement of ``select`` (early stopping).
    restore_best : bool
        Load the weights of the best epoch at the end (with ``select``).
    objective : bool
        Record the full training ``objective`` after every epoch (one more pass over the data
        without gradients). False skips it.
    progress : bool
        Show a tqdm progress bar (on rank 0 only; a warning and none when tqdm is missing).
    batch_size : int
        Global batch size (split over the processes under torch.distributed; the loss must
        return the mean over its batch, and 0 for an empty one).
    seed : int
        Seeds the shuffling, identically on every process.
    scheduler : torch.optim.lr_scheduler.LRScheduler, optional
        Stepped once after every epoch.
    solver : {"subgradient", "bcfw", "cutting_plane"} or a name in :mod:`structtorch.learn.solvers`
        "bcfw": block-coordinate Frank-Wolfe on the dual of the margin-rescaled structural SVM
        (:mod:`structtorch.learn.solvers.bcfw`); "cutting_plane": 1-slack or n-slack cutting
        planes for any :class:`structtorch.StructuredHingeLoss` (margin or slack rescaling,
        :mod:`structtorch.learn.solvers.cutting_plane`). Both need models linear in their
        parameters (:class:`structtorch.LinearChainPotentials`,
        :class:`structtorch.nn.sparse.SparseFeaturePotentials`, structures built from them, ...)
        and ``C`` or ``l2`` > 0, take no optimizer or scheduler, and stop once the duality gap is
        at most ``tol``. One BCFW epoch is n block steps; one cutting-plane epoch is one dual QP
        and one pass of the oracle.
    solver_options : dict, optional
        BCFW: ``tol`` (default 0: run all epochs), ``averaging`` (default True), ``line_search``
        (default True), ``batch_size`` of the gap computation (default 256). Cutting planes:
        ``variant`` ("one_slack", default, or "n_slack"), ``tol`` (absolute, default 1e-3),
        ``rtol`` (both solvers: also stop once the gap is at most rtol times the primal; default 0),
        ``inactive`` (iterations a plane may stay unused before it is dropped, default 10),
        ``batch_size`` of the oracle calls (default 256; n_slack: 32 for chain potentials, 1 for
        structures), ``margin`` (n_slack: the violation a plane needs to enter, default ``tol``).
    checkpoint : str or os.PathLike, optional
        A file for the whole training state (model, optimizer, RNGs, history, best-epoch selection,
        the solver's state; :mod:`structtorch.learn.checkpoint`), written atomically after every
        ``checkpoint_every`` epochs and after the last, with a digest of its content. Where the file
        exists, training resumes from it and ends as an uninterrupted run would have; a checkpoint
        of another training (other solver, options, ``objective``, model shape or data) is refused
        with a ValueError naming the difference, a damaged file (any changed byte) or a missing or
        mistyped entry with one naming the file and the entry. To train for more epochs, call again
        with a larger ``epochs``.
    checkpoint_every : int
        Epochs between two writes (default 1).

    Returns
    -------
    History
        Per epoch: ``objective`` (mean loss + penalty over the training set, after the epoch; not
        with ``objective=False``), ``train_loss`` (mean over the epoch's batches of loss + penalty,
        on this process), ``time`` (cumulative seconds of training steps, without the objective
        and validation passes) and ``val_<metric>``; BCFW records ``objective`` (the primal),
        ``dual``, ``gap`` and ``time``; cutting planes also ``constraints`` (the working set's
        size), ``oracle_calls`` (sequences, cumulative) and ``qp_time``.

    Examples
    --------
    >>> import structtorch as st
    >>> from structtorch.data import make_tagging_data
    >>> data = make_tagging_data(8, seed=0, min_length=2, max_length=4, num_features=2, num_labels=2)
    >>> model = st.LinearChainPotentials(2, 2)
    >>> history = st.train.fit(model, data, st.StructuredHingeLoss(), epochs=100, C=1.0,
    ...                        solver="cutting_plane", progress=False)
    >>> history.converged, history["gap"][-1] <= 1e-3  # a duality-gap certificate
    (True, True)
    >>> history["dual"][-1] <= history["objective"][-1]
    True
    """
    check_int("epochs", epochs, 0)
    check_int("batch_size", batch_size, 1)
    check_int("seed", seed)
    factory = get_solver(solver)
    _check_features("train_data", train_data)
    _check_features("val_data", val_data)
    if len(train_data) == 0:
        raise ValueError("train_data is empty: fit needs at least one training sequence")
    _check_cost_taken(train_data, loss)
    metric_fns = resolve_metrics(metrics)
    lam = _regularization(len(train_data), C, l2)
    if patience is not None:
        check_int("patience", patience, 1)
        if select is None:
            raise ValueError("patience needs select= (the record to watch, e.g. 'val_accuracy')")
    if solver_options is not None and not isinstance(solver_options, Mapping):
        raise TypeError(f"solver_options must be a dict of the solver's options (e.g. {{'tol': 1e-3}}), got "
                        f"{type(solver_options).__name__} {solver_options!r}")
    if solver_options is not None and not all(isinstance(k, str) for k in solver_options):
        raise TypeError(f"solver_options must have str keys (the options' names), got "
                        f"{list(solver_options)!r}")
    distributed, rank, world = _process_group()
    options = FitOptions(epochs=epochs, lam=lam, batch_size=batch_size, seed=seed, objective=objective,
                         optimizer=optimizer, scheduler=scheduler, solver_options=dict(solver_options or {}),
                         distributed=distributed, rank=rank, world=world)
    engine = factory(model, train_data, loss, options)
    selection = Selection(select, mode, patience, restore_best,
                          _directions(engine, metric_fns, val_data is not None))
    saver = _checkpoint(checkpoint, checkpoint_every, engine, options, solver=solver, data=train_data,
                        loss=loss, select=select, mode=mode, patience=patience)
    return _train(engine, selection, options, val_data, metric_fns, progress, saver)


def fit_bcfw(
    model: nn.Module,
    train_data: SequenceData,
    loss: StructuredHingeLoss | None = None,
    *,
    C: float | None = None,
    l2: float | None = None,
    epochs: int = 100,
    tol: float = 1e-3,
    averaging: bool = True,
    line_search: bool = True,
    val_data: SequenceData | None = None,
    metrics: Sequence[str] | Mapping[str, Any] = ("accuracy", "hamming"),
    select: str | None = None,
    mode: str | None = None,
    patience: int | None = None,
    progress: bool = False,
    seed: int = 0,
) -> History:
    """Train a structural SVM with linear potentials by BCFW: ``fit(..., solver="bcfw")``.

    Parameters
    ----------
    model : nn.Module
        x (B, T, ...) -> (unary (B, T, N), transitions (N, N)), linear in its parameters.
    train_data, val_data : SequenceData
    loss : StructuredHingeLoss, optional
        Margin rescaling (default: the Hamming loss).
    C, l2 : float
        The regularizer, exactly one: lambda = l2 = 1 / (n C).
    epochs : int
        The most passes over the data.
    tol : float
        Stop once the duality gap is at most ``tol`` (``history.converged``).
    averaging, line_search : bool
        See :class:`structtorch.learn.bcfw.BCFW`.
    val_data, metrics, select, mode, patience, progress, seed
        As for :func:`fit`.

    Returns
    -------
    History
        Per pass: ``objective`` (primal), ``dual``, ``gap``, ``time`` and ``val_<metric>``.
    """
    if C is None and l2 is None:
        raise ValueError("fit_bcfw needs a regularizer: C or l2")
    return fit(model, train_data, loss, epochs=epochs, C=C, l2=l2, val_data=val_data, metrics=metrics,
               select=select, mode=mode, patience=patience, progress=progress, seed=seed, solver="bcfw",
               solver_options={"tol": tol, "averaging": averaging, "line_search": line_search})
