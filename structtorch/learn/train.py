"""Subgradient training of structured models with any torch optimizer, and sequence metrics.

The model maps features x (B, T, F) to chain potentials: a tuple ``(unary, transitions)`` or
``(unary, transitions, start, end)``. The loss is called as
``loss(unary, transitions, labels, start=..., end=..., lengths=...)`` and returns a scalar (for
instance :class:`structtorch.StructuredHingeLoss` with reduction "mean").

The SVM regularizer: the structured SVM primal ``1/2 ||w||^2 + C sum_i xi_i`` divided by n C is
``mean_i xi_i + lambda/2 ||w||^2`` with ``lambda = 1 / (n C)``, n the number of training
sequences. ``fit`` adds that penalty over all model parameters to the loss, which is plain SGD's
``weight_decay = 1 / (n C)``; the history's ``objective`` is this scaled primal.

Under ``torch.distributed`` (e.g. the model wrapped in DistributedDataParallel) every process
draws the same shuffled batches and takes its share of each, its batch mean weighted by the
share's size, so the averaged gradients equal those of one process on the whole batch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import Tensor, nn

from .._checks import check_int, check_number
from ..chain import viterbi
from ..data.tagging import SequenceData

__all__ = ["fit", "evaluate", "History", "sequence_metrics"]


@dataclass
class History:
    """Per-epoch records: ``epochs[e]`` maps names (objective, val_accuracy, ...) to floats."""

    epochs: list[dict[str, float]] = field(default_factory=list)

    def __getitem__(self, name: str) -> list[float]:
        return [e[name] for e in self.epochs]

    def __len__(self) -> int:
        return len(self.epochs)


def _potentials(model: nn.Module, x: Tensor) -> dict[str, Tensor]:
    out = model(x)
    if not isinstance(out, (tuple, list)) or len(out) not in (2, 4):
        raise TypeError("the model must return (unary, transitions) or (unary, transitions, start, end)")
    names = ("unary", "transitions", "start", "end")
    return dict(zip(names, out, strict=False))


def sequence_metrics(path: Tensor, labels: Tensor, lengths: Tensor) -> dict[str, float]:
    """Token accuracy and mean Hamming distance per sequence of predicted ``path`` (B, T)."""
    inside = torch.arange(labels.shape[1], device=labels.device) < lengths[:, None]
    wrong = (path != labels) & inside
    total = int(inside.sum())
    return {
        "accuracy": 1.0 - float(wrong.sum()) / max(total, 1),
        "hamming": float(wrong.sum(1).double().mean()) if len(labels) else 0.0,
    }


@torch.no_grad()
def evaluate(model: nn.Module, data: SequenceData, batch_size: int = 256) -> dict[str, float]:
    """Viterbi-decode ``data`` with ``model`` and return :func:`sequence_metrics`."""
    paths = []
    for idx in torch.arange(len(data)).split(batch_size):
        batch = data.batch(idx)
        pot = _potentials(model, batch.x)
        paths.append(viterbi(pot.pop("unary"), pot.pop("transitions"), lengths=batch.lengths, **pot)[1])
    path = torch.cat(paths) if paths else data.labels
    return sequence_metrics(path, data.labels, data.lengths)


def _penalty(model: nn.Module, lam: float) -> Tensor | float:
    if lam == 0.0:
        return 0.0
    return 0.5 * lam * sum(p.pow(2).sum() for p in model.parameters() if p.requires_grad)


def _batch_loss(model, loss, batch: SequenceData) -> Tensor:
    pot = _potentials(model, batch.x)
    return loss(pot.pop("unary"), pot.pop("transitions"), batch.labels, lengths=batch.lengths, **pot)


@torch.no_grad()
def _objective(model, loss, data: SequenceData, lam: float, batch_size: int) -> float:
    total = 0.0
    for idx in torch.arange(len(data)).split(batch_size):
        total += float(_batch_loss(model, loss, data.batch(idx))) * len(idx)
    return total / max(len(data), 1) + float(_penalty(model, lam))


def fit(
    model: nn.Module,
    train_data: SequenceData,
    loss: Callable[..., Tensor],
    *,
    optimizer: torch.optim.Optimizer | None = None,
    epochs: int,
    C: float | None = None,
    val_data: SequenceData | None = None,
    metrics: Sequence[str] = ("accuracy", "hamming"),
    progress: bool = True,
    batch_size: int = 32,
    seed: int = 0,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
) -> History:
    """Train ``model`` by (sub)gradient descent on ``loss`` over ``train_data``.

    Parameters
    ----------
    model : nn.Module
        x (B, T, F) -> (unary, transitions) or (unary, transitions, start, end); may be wrapped in
        DistributedDataParallel.
    train_data, val_data : SequenceData
        ``x`` (n, T, F), ``labels`` (n, T), ``lengths`` (n,).
    loss : callable
        ``loss(unary, transitions, labels, start=, end=, lengths=)`` -> scalar mean over the batch.
    optimizer : torch.optim.Optimizer, optional
        Default: SGD with lr 0.01 on ``model.parameters()``.
    epochs : int
    C : float, optional
        SVM trade-off; adds (1 / (2 n C)) ||theta||^2 (see the module docstring). None: no penalty.
    metrics : names from {"accuracy", "hamming"}
        Validation metrics recorded per epoch as ``val_<name>``.
    progress : bool
        Show a tqdm progress bar (on rank 0 only).
    batch_size : int
        Global batch size (split over the processes under torch.distributed; ``loss`` must
        return the mean over its batch, and 0 for an empty one).
    seed : int
        Seeds the shuffling, identically on every process.
    scheduler : torch.optim.lr_scheduler.LRScheduler, optional
        Stepped once after every epoch.

    Returns
    -------
    History
        Per epoch: ``objective`` (mean loss + penalty over the training set, after the epoch),
        ``train_loss`` (mean over the epoch's batches of loss + penalty, on this process) and
        ``val_<metric>``.
    """
    check_int("epochs", epochs, 0)
    if C is not None:
        check_number("C", C, low=0.0, open_low=True)
    check_int("batch_size", batch_size, 1)
    check_int("seed", seed)
    if len(train_data) == 0:
        raise ValueError("train_data is empty: fit needs at least one training sequence")
    unknown = set(metrics) - {"accuracy", "hamming"}
    if unknown:
        raise ValueError(f"unknown metrics {sorted(unknown)}; choose from ['accuracy', 'hamming']")
    n = len(train_data)
    lam = 0.0 if C is None else 1.0 / (n * C)
    optimizer = optimizer or torch.optim.SGD(model.parameters(), lr=0.01)
    distributed = dist.is_available() and dist.is_initialized()
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    gen = torch.Generator().manual_seed(seed)
    history = History()
    bar = None
    if progress and rank == 0:
        from tqdm import tqdm

        bar = tqdm(total=epochs, desc="training", unit="epoch")
    for _ in range(epochs):
        model.train()
        losses = []
        for idx in torch.randperm(n, generator=gen).split(batch_size):
            mine = idx.tensor_split(world)[rank]
            # weight this process's batch mean by its share, so that averaging over processes
            # gives the mean over the whole batch even when it does not split evenly
            share = len(mine) * world / len(idx)
            value = share * _batch_loss(model, loss, train_data.batch(mine)) + _penalty(model, lam)
            optimizer.zero_grad()
            value.backward()
            optimizer.step()
            losses.append(float(value.detach()))
        if scheduler is not None:
            scheduler.step()
        model.eval()
        record = {"objective": _objective(model, loss, train_data, lam, 256),
                  "train_loss": sum(losses) / max(len(losses), 1)}
        if val_data is not None:
            scores = evaluate(model, val_data)
            record.update({f"val_{m}": scores[m] for m in metrics})
        history.epochs.append(record)
        if bar is not None:
            bar.set_postfix({k: round(v, 4) for k, v in record.items()})
            bar.update()
    if bar is not None:
        bar.close()
    return history
