"""Training of structured models with any torch optimizer (or block-coordinate Frank-Wolfe), and metrics.

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
share's size, so the averaged gradients equal those of one process on the whole batch.
"""

from __future__ import annotations

import copy
import inspect
import math
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

from .._checks import LengthsLike, check_int, check_number
from .._numerics import negative_log_likelihood, reduce_batch
from ..chain import log_partition, path_score, viterbi
from ..data.tagging import SequenceData

if TYPE_CHECKING:  # nn imports learn (hsm); import the CRF class where it is used
    from ..nn.crf import LinearChainCRF

__all__ = ["fit", "evaluate", "History", "sequence_metrics", "accuracy", "hamming", "chain_nll"]

Metric = Callable[[Tensor, Tensor, Tensor], Any]
SOLVERS = ("subgradient", "bcfw")


@dataclass
class History:
    """Per-epoch records: ``epochs[e]`` maps names (objective, val_accuracy, ...) to floats.

    ``best_epoch`` is the index of the selected epoch (``select=``; its weights are the returned
    ones unless ``restore_best=False``), ``stopped_early`` whether ``patience`` ended training and
    ``converged`` whether the BCFW duality gap reached its tolerance.
    """

    epochs: list[dict[str, float]] = field(default_factory=list)
    best_epoch: int | None = None
    stopped_early: bool = False
    converged: bool = False

    def __getitem__(self, name: str) -> list[float]:
        return [e[name] for e in self.epochs]

    def __len__(self) -> int:
        return len(self.epochs)


# ---------------------------------------------------------------------------------------------
# metrics


def _inside(labels: Tensor, lengths: Tensor) -> Tensor:
    return torch.arange(labels.shape[1], device=labels.device) < lengths[:, None]


def accuracy(path: Tensor, labels: Tensor, lengths: Tensor) -> float:
    """Token accuracy of ``path`` (B, T) against ``labels`` (B, T) inside ``lengths`` (B,)."""
    inside = _inside(labels, lengths)
    wrong = (path != labels) & inside
    return 1.0 - float(wrong.sum()) / max(int(inside.sum()), 1)


def hamming(path: Tensor, labels: Tensor, lengths: Tensor) -> float:
    """Mean Hamming distance per sequence of ``path`` (B, T) to ``labels`` (B, T)."""
    wrong = (path != labels) & _inside(labels, lengths)
    return float(wrong.sum(1).double().mean()) if len(labels) else 0.0


BUILTIN_METRICS: dict[str, Metric] = {"accuracy": accuracy, "hamming": hamming}


def sequence_metrics(path: Tensor, labels: Tensor, lengths: Tensor) -> dict[str, float]:
    """Token accuracy and mean Hamming distance per sequence of predicted ``path`` (B, T)."""
    return {name: fn(path, labels, lengths) for name, fn in BUILTIN_METRICS.items()}


def _metrics(metrics: Sequence[str] | Mapping[str, Metric]) -> dict[str, Metric]:
    if isinstance(metrics, Mapping):
        bad = [k for k, fn in metrics.items() if not isinstance(k, str) or not callable(fn)]
        if bad:
            raise TypeError(f"metrics must map names to callables fn(path, labels, lengths) -> float; "
                            f"entry {bad[0]!r} is not")
        return dict(metrics)
    if isinstance(metrics, str):
        metrics = [metrics]
    unknown = sorted(set(metrics) - set(BUILTIN_METRICS))
    if unknown:
        raise ValueError(f"unknown metrics {unknown}; choose from {sorted(BUILTIN_METRICS)} or pass a dict "
                         "{name: fn(path, labels, lengths) -> float}")
    return {m: BUILTIN_METRICS[m] for m in metrics}


# ---------------------------------------------------------------------------------------------
# losses and the model/loss pair


def chain_nll(unary: Tensor, transitions: Tensor, labels: Tensor, *, start: Tensor | None = None,
              end: Tensor | None = None, lengths: LengthsLike = None, reduction: str = "mean") -> Tensor:
    """CRF negative log-likelihood ``log Z - score(labels)`` of chain potentials (the loss protocol).

    Parameters
    ----------
    unary : Tensor (B, T, N)
    transitions : Tensor (N, N) or (B, T-1, N, N)
    labels : Tensor (B, T) int64
    start, end : Tensor (N,) or (B, N), optional
    lengths : Tensor (B,), optional
    reduction : {"mean", "sum", "none"}

    Returns
    -------
    Tensor
        Scalar (mean over the batch, 0 for an empty one, or sum), or (B,) for "none".
    """
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"reduction must be one of ('mean', 'sum', 'none'), got {reduction!r}")
    kw = {"start": start, "end": end, "lengths": lengths}
    nll = negative_log_likelihood(log_partition(unary, transitions, **kw),
                                  path_score(unary, transitions, labels, **kw))
    return reduce_batch(nll, reduction)


def _as_potentials(out: object) -> dict[str, Tensor]:
    if isinstance(out, Tensor):
        raise TypeError("the model must return (unary, transitions) or (unary, transitions, start, end); "
                        "it returned one tensor, which fits only a LinearChainCRF as the loss (the CRF "
                        "holds the transitions)")
    if not isinstance(out, (tuple, list)) or len(out) not in (2, 4):
        raise TypeError("the model must return (unary, transitions) or (unary, transitions, start, end)")
    return dict(zip(("unary", "transitions", "start", "end"), out, strict=False))


def _is_structure(out: object) -> bool:
    """Whether a model output is a structure (a :class:`structtorch.ChainDistribution`, ...): it
    carries loss-augmented inference and a best structure."""
    return hasattr(out, "loss_augmented") and hasattr(out, "argmax")


def _scalar(value: object) -> Tensor:
    if not isinstance(value, Tensor):
        raise TypeError(f"the loss must return a scalar tensor (the mean over the batch), got "
                        f"{type(value).__name__}")
    if value.numel() != 1:
        raise ValueError(f"the loss must return a scalar tensor (the mean over the batch), got shape "
                         f"{tuple(value.shape)}: use reduction='mean' (a LinearChainCRF is taken as the loss "
                         "directly: fit(model, data, crf))")
    return value.reshape(())


class _Task:
    """The model with its loss: the batch loss, the decoding and the parameters trained."""

    def __init__(self, model: nn.Module, loss: object) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
        from ..nn.crf import LinearChainCRF

        self.model = model
        self.crf = loss if isinstance(loss, LinearChainCRF) else None
        if self.crf is None and not callable(loss):
            raise TypeError(f"loss must be callable (the loss protocol: see structtorch.learn.train), got "
                            f"{type(loss).__name__}")
        self.loss = loss
        modules = [model] if self.crf is None else [model, self.crf]
        seen: dict[int, nn.Parameter] = {}
        for m in modules:
            for p in m.parameters():
                seen.setdefault(id(p), p)
        self.parameters = list(seen.values())
        self.modules = modules
        try:
            self.takes_lengths = "lengths" in inspect.signature(model.forward).parameters
        except (TypeError, ValueError):  # no introspectable signature
            self.takes_lengths = False

    def _unary(self, x: Tensor) -> Tensor:
        out = self.model(x)
        if not isinstance(out, Tensor):
            raise TypeError("with a LinearChainCRF as the loss the model must return the unary scores "
                            "(B, T, N) alone: the CRF holds the transition, start and end scores (to "
                            "train the model's own transitions with the CRF likelihood, pass "
                            "loss=st.train.chain_nll)")
        return out

    def _output(self, batch: SequenceData) -> object:
        """The model's output: ``model(x, lengths=lengths)`` when its forward takes ``lengths`` (so it
        can return a structure), else ``model(x)``."""
        if self.takes_lengths:
            return self.model(batch.x, lengths=batch.lengths)
        return self.model(batch.x)

    def batch_loss(self, batch: SequenceData) -> Tensor:
        if self.crf is not None:
            nll = self.crf(self._unary(batch.x), batch.labels, lengths=batch.lengths)
            return nll.sum() / max(len(batch), 1) if nll.dim() else nll
        out = self._output(batch)
        if _is_structure(out):  # loss(structure, target), e.g. StructuredHingeLoss
            return _scalar(self.loss(out, batch.labels))
        pot = _as_potentials(out)
        unary, transitions = pot.pop("unary"), pot.pop("transitions")
        return _scalar(self.loss(unary, transitions, batch.labels, lengths=batch.lengths, **pot))

    @torch.no_grad()
    def decode(self, batch: SequenceData) -> Tensor:
        if self.crf is not None:
            return self.crf.decode(self._unary(batch.x), lengths=batch.lengths)[1]
        out = self._output(batch)
        if _is_structure(out):
            best = out.argmax
            return best[0] if isinstance(best, tuple) else best  # segmentations: their labels
        pot = _as_potentials(out)
        return viterbi(pot.pop("unary"), pot.pop("transitions"), lengths=batch.lengths, **pot)[1]

    def train(self, mode: bool) -> None:
        for m in self.modules:
            m.train(mode)

    def state(self) -> list[dict[str, Tensor]]:
        return [copy.deepcopy(m.state_dict()) for m in self.modules]

    def load(self, state: list[dict[str, Tensor]]) -> None:
        for m, s in zip(self.modules, state, strict=True):
            m.load_state_dict(s)


def _decode_all(task: _Task, data: SequenceData, batch_size: int) -> Tensor:
    paths = [task.decode(data.batch(idx)) for idx in torch.arange(len(data)).split(batch_size)]
    return torch.cat(paths) if paths else data.labels


def _score(task: _Task, data: SequenceData, metrics: Mapping[str, Metric],
           batch_size: int) -> dict[str, float]:
    was = [m.training for m in task.modules]
    task.train(False)
    try:
        path = _decode_all(task, data, batch_size)
    finally:
        for m, mode in zip(task.modules, was, strict=True):
            m.train(mode)
    return {name: float(fn(path, data.labels, data.lengths)) for name, fn in metrics.items()}


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
    task = _Task(model, crf if crf is not None else _no_loss)
    return _score(task, data, _metrics(metrics), batch_size)


def _no_loss(*args, **kwargs) -> Tensor:  # evaluate() decodes only
    raise RuntimeError("evaluate does not compute a loss")


# ---------------------------------------------------------------------------------------------
# fit


@torch.no_grad()
def _regularizer_is_l2(model: nn.Module) -> bool:
    """Whether the model's ``regularizer()`` (if any) is the squared norm of its parameters, checked at
    a random point of parameter space (the parameters are restored)."""
    own = getattr(model, "regularizer", None)
    if not callable(own):
        return True
    params = [p for p in model.parameters() if p.requires_grad]
    saved = [p.detach().clone() for p in params]
    try:
        gen = torch.Generator().manual_seed(0)
        for p in params:
            p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype).to(p.device))
        reg, norm = float(own()), float(sum(p.pow(2).sum() for p in params))
    finally:
        for p, s in zip(params, saved, strict=True):
            p.copy_(s)
    return abs(reg - norm) <= 1e-6 * max(1.0, norm)


def _penalty(task: _Task, lam: float) -> Tensor | float:
    """``lam / 2`` times the squared norm of the trained parameters; a model with a
    ``regularizer()`` method (e.g. a kernel model's ``beta^T K beta``) gives its own term for its
    parameters instead."""
    if lam == 0.0:
        return 0.0
    own = getattr(task.model, "regularizer", None)
    if callable(own):
        mine = {id(p) for p in task.model.parameters()}
        rest = [p for p in task.parameters if p.requires_grad and id(p) not in mine]
        return 0.5 * lam * (own() + sum(p.pow(2).sum() for p in rest))
    return 0.5 * lam * sum(p.pow(2).sum() for p in task.parameters if p.requires_grad)


@torch.no_grad()
def _objective(task: _Task, data: SequenceData, lam: float, batch_size: int) -> float:
    total = 0.0
    for idx in torch.arange(len(data)).split(batch_size):
        total += float(task.batch_loss(data.batch(idx))) * len(idx)
    return total / max(len(data), 1) + float(_penalty(task, lam))


def _needs_closure(optimizer: torch.optim.Optimizer) -> bool:
    """Whether ``optimizer.step`` requires a closure (LBFGS and the like)."""
    if isinstance(optimizer, torch.optim.LBFGS):
        return True
    try:
        param = inspect.signature(optimizer.step).parameters.get("closure")
    except (TypeError, ValueError):
        return False
    return param is not None and param.default is inspect.Parameter.empty


def _regularization(n: int, C: float | None, l2: float | None) -> float:
    if C is not None and l2 is not None:
        raise ValueError(f"pass C or l2, not both (l2 = 1 / (n C)); got C={C} and l2={l2}")
    if C is not None:
        return 1.0 / (n * check_number("C", C, low=0.0, open_low=True))
    if l2 is not None:
        return check_number("l2", l2, low=0.0)
    return 0.0


def _progress_bar(total: int, enabled: bool):
    if not enabled:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        warnings.warn("progress=True needs tqdm (pip install tqdm); training without a progress bar",
                      stacklevel=3)
        return None
    return tqdm(total=total, desc="training", unit="epoch")


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
) -> History:
    """Train ``model`` on ``loss`` over ``train_data`` by (sub)gradient steps or by BCFW.

    Parameters
    ----------
    model : nn.Module
        x (B, T, ...) -> (unary (B, T, N), transitions (N, N)) or (unary, transitions, start (N,),
        end (N,)); -> unary (B, T, N) alone when ``loss`` is a LinearChainCRF. May be wrapped in
        DistributedDataParallel.
    train_data, val_data : SequenceData
        ``x`` (n, T, ...), ``labels`` (n, T), ``lengths`` (n,).
    loss : callable or LinearChainCRF
        ``loss(unary, transitions, labels, start=, end=, lengths=)`` -> scalar mean over the batch
        (the loss protocol of the module docstring): a StructuredHingeLoss, :func:`chain_nll` or
        any function; or a LinearChainCRF (its mean NLL, its parameters trained too). None only
        with ``solver="bcfw"`` (the margin-rescaled Hamming hinge).
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
    solver : {"subgradient", "bcfw"}
        "bcfw": block-coordinate Frank-Wolfe on the dual of the margin-rescaled structural SVM
        (:mod:`structtorch.learn.bcfw`), for models linear in their parameters
        (:class:`structtorch.LinearChainPotentials`, :class:`structtorch.nn.sparse.SparseFeaturePotentials`)
        with ``C`` or ``l2`` > 0; it takes no optimizer or scheduler, and one epoch is one pass of
        n block steps.
    solver_options : dict, optional
        BCFW options: ``tol`` (stop when the duality gap is below it; default 0: run all epochs),
        ``averaging`` (default True), ``line_search`` (default True), ``batch_size`` of the gap
        computation (default 256).

    Returns
    -------
    History
        Per epoch: ``objective`` (mean loss + penalty over the training set, after the epoch; not
        with ``objective=False``), ``train_loss`` (mean over the epoch's batches of loss + penalty,
        on this process), ``time`` (cumulative seconds of training steps, without the objective
        and validation passes) and ``val_<metric>``; BCFW records ``objective`` (the primal),
        ``dual``, ``gap`` and ``time``.
    """
    check_int("epochs", epochs, 0)
    check_int("batch_size", batch_size, 1)
    check_int("seed", seed)
    if solver not in SOLVERS:
        raise ValueError(f"solver must be one of {SOLVERS}, got {solver!r}")
    if len(train_data) == 0:
        raise ValueError("train_data is empty: fit needs at least one training sequence")
    metric_fns = _metrics(metrics)
    n = len(train_data)
    lam = _regularization(n, C, l2)
    if patience is not None:
        check_int("patience", patience, 1)
        if select is None:
            raise ValueError("patience needs select= (the record to watch, e.g. 'val_accuracy')")
    if solver == "bcfw":
        from .bcfw import BCFW

        given = [k for k, v in {"optimizer": optimizer, "scheduler": scheduler}.items() if v is not None]
        if given:
            raise ValueError(f"solver='bcfw' takes no {' or '.join(given)} (it computes its own steps)")
        if dist.is_available() and dist.is_initialized():
            raise ValueError("solver='bcfw' runs in one process, not under torch.distributed")
        if not _regularizer_is_l2(model):
            raise ValueError("solver='bcfw' needs the squared-norm regularizer; this model's regularizer() "
                             "is not the squared norm of its parameters (use the subgradient solver)")
        state = BCFW(model, train_data, loss, lam, seed=seed, **dict(solver_options or {}))
        task = _Task(model, state.loss)
        recorded = {"objective", "dual", "gap", "time"}
    else:
        if solver_options:
            raise ValueError("solver_options are for solver='bcfw'")
        if loss is None:
            raise TypeError("loss is None: pass a loss (None, the Hamming hinge, is for solver='bcfw' only)")
        task = _Task(model, loss)
        optimizer = optimizer or torch.optim.SGD(task.parameters, lr=0.01)
        recorded = {"train_loss", "time"} | ({"objective"} if objective else set())
    recorded |= {f"val_{m}" for m in metric_fns} if val_data is not None else set()
    if select is not None:
        if select not in recorded:
            raise ValueError(f"select={select!r} is not recorded; choose from {sorted(recorded)}")
        if mode is None:
            mode = "min" if select in ("objective", "train_loss", "gap", "dual", "val_hamming") else "max"
    if mode not in (None, "max", "min"):
        raise ValueError(f"mode must be 'max' or 'min', got {mode!r}")
    if mode == "min" and select == "dual":
        mode = "max"

    distributed = dist.is_available() and dist.is_initialized()
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    gen = torch.Generator().manual_seed(seed)
    history = History()
    bar = _progress_bar(epochs, progress and rank == 0)
    closure_step = solver == "subgradient" and _needs_closure(optimizer)
    best, best_state, waited, elapsed = None, None, 0, 0.0
    for epoch in range(epochs):
        began = time.perf_counter()
        if solver == "bcfw":
            record = state.run_pass()
            elapsed += time.perf_counter() - began
            record["time"] = elapsed
        else:
            task.train(True)
            losses = []
            for idx in torch.randperm(n, generator=gen).split(batch_size):
                mine = idx.tensor_split(world)[rank]
                # weight this process's batch mean by its share, so that averaging over processes
                # gives the mean over the whole batch even when it does not split evenly
                share = len(mine) * world / len(idx)
                batch = train_data.batch(mine)

                def closure(batch=batch, share=share) -> Tensor:
                    optimizer.zero_grad()
                    value = share * task.batch_loss(batch) + _penalty(task, lam)
                    value.backward()
                    return value

                if closure_step:
                    value = optimizer.step(closure)
                else:
                    value = closure()
                    optimizer.step()
                if value is not None:  # an optimizer's step(closure) may return None
                    losses.append(float(value.detach()) if isinstance(value, Tensor) else float(value))
            if scheduler is not None:
                scheduler.step()
            elapsed += time.perf_counter() - began
            task.train(False)
            record = {}
            if objective:
                record["objective"] = _objective(task, train_data, lam, 256)
            record["train_loss"] = sum(losses) / max(len(losses), 1)
            record["time"] = elapsed
        if val_data is not None:
            record.update({f"val_{k}": v for k, v in _score(task, val_data, metric_fns, 256).items()})
        history.epochs.append(record)
        if bar is not None:
            bar.set_postfix({k: round(v, 4) for k, v in record.items()})
            bar.update()
        if select is not None:
            value = record[select]
            better = best is None or (value > best if mode == "max" else value < best) or (
                math.isnan(best) and not math.isnan(value))
            if better:
                best, waited, history.best_epoch = value, 0, epoch
                if restore_best:
                    best_state = task.state()
            else:
                waited += 1
                if patience is not None and waited >= patience:
                    history.stopped_early = True
                    break
        if solver == "bcfw" and record["gap"] <= state.tol:
            history.converged = True
            break
    if bar is not None:
        bar.close()
    if best_state is not None and history.best_epoch != len(history) - 1:
        task.load(best_state)
    return history
