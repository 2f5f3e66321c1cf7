"""Checkpoints of :func:`structtorch.train.fit`: the whole training state on disk, written atomically,
read safely, and refused when it belongs to another training.

``fit(..., checkpoint=PATH, checkpoint_every=k)`` writes, every k epochs and after the last one,
the model's (and a CRF loss's) state, the history, the best-epoch selection, the RNG states
(torch, CUDA, NumPy, Python) and the solver's own state (:meth:`Solver.state_dict`: the optimizer
and the shuffling generator of the subgradient solver, the blocks and the averaged iterate of BCFW,
the working set with its dual and Gram matrix of cutting planes). Calling ``fit`` again with the
same ``checkpoint=`` resumes after the last epoch written: the rest of the run is the one an
uninterrupted run would have made (bit for bit on the CPU for the deterministic solvers; ``time``
continues from the saved total).

A checkpoint is written to a temporary file beside ``PATH``, flushed and synced to disk, then
renamed over ``PATH`` (an atomic replacement on POSIX and Windows): a process killed at any moment
leaves the previous checkpoint whole. The file starts with the SHA-256 digest of the state
(:data:`MAGIC`): reading checks it first, so that a changed, lost or added byte anywhere is a
ValueError naming the file. The state is read with ``torch.load(weights_only=True)`` (tensors and
plain Python values only: no code runs on loading), each entry is checked (a missing or mistyped
one is a ValueError naming it), and it is compared with the training that reads it
(:func:`fingerprint`): another solver, other options, another model shape or another training set
is refused with a ValueError naming each difference.
Under ``torch.distributed`` rank 0 writes and every rank reads the same file.
"""

from __future__ import annotations

import hashlib
import io
import os
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from ..sequence_data import SequenceData
from .history import History, Selection

__all__ = ["Checkpoint", "fingerprint", "read_checkpoint", "write_checkpoint"]

FORMAT = "structtorch.fit.checkpoint/2"
MAGIC = b"structtorch.fit.checkpoint sha256="
"""A checkpoint file is this line, the SHA-256 of the rest in hex, a newline, then the state as
``torch.save`` writes it: any changed, missing or added byte fails the digest."""
DIGEST = 64  # hex digits of a SHA-256

ENTRIES = {"format": str, "meta": dict, "model": list, "solver": dict, "selection": dict, "rng": dict,
           "history": dict}
"""The entries of a checkpoint of fit, and their types."""


def write_checkpoint(path: str | os.PathLike, state: Mapping[str, Any]) -> None:
    """Write ``state`` to ``path`` with its digest (see :data:`MAGIC`), atomically: a temporary file
    in the same folder, flushed and fsynced, renamed over ``path``, then the folder synced (where
    the system allows)."""
    path = Path(path)
    buffer = io.BytesIO()
    torch.save(dict(state), buffer)
    payload = buffer.getvalue()
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as fh:
            fh.write(MAGIC + hashlib.sha256(payload).hexdigest().encode() + b"\n")
            fh.write(payload)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    try:  # the rename itself survives a power cut once the folder is synced
        folder = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(folder)
    except OSError:
        pass
    finally:
        os.close(folder)


def _verified(path: str | os.PathLike) -> bytes:
    """The state's bytes in ``path``, after its digest is checked; a ValueError naming the file
    where the file is not a checkpoint of fit or any byte differs from what was written."""
    data = Path(path).read_bytes()
    if not data.startswith(MAGIC):
        raise ValueError(f"checkpoint {str(path)!r} is not a checkpoint of structtorch's fit (it does "
                         f"not start with {MAGIC.decode()!r}: another file, a damaged first line, or a "
                         "checkpoint of a structtorch before 0.4)")
    head = len(MAGIC) + DIGEST
    digest, payload = data[len(MAGIC):head], data[head + 1:]
    if data[head:head + 1] != b"\n" or hashlib.sha256(payload).hexdigest().encode() != digest:
        raise ValueError(f"checkpoint {str(path)!r} is damaged: its content does not match the digest "
                         "written with it (a changed, lost or added byte; e.g. a truncated copy); remove it, "
                         "or restore an intact copy")
    return payload


def read_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """The state in ``path`` (tensors on the CPU), its digest verified, read with
    ``weights_only=True``; a ValueError where the file is not a whole structtorch checkpoint."""
    payload = _verified(path)
    try:
        state = torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any failure to read is a bad file
        raise ValueError(f"checkpoint {str(path)!r} cannot be read (not a checkpoint of fit): "
                         f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from e
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise ValueError(f"checkpoint {str(path)!r} is not a checkpoint of structtorch's fit (format "
                         f"{state.get('format') if isinstance(state, dict) else type(state).__name__!r}, "
                         f"expected {FORMAT!r})")
    return state


def _check_entries(path: Path, state: Mapping[str, Any]) -> None:
    """A ValueError naming the first entry of :data:`ENTRIES` that ``state`` lacks or holds with
    another type."""
    for name, kind in ENTRIES.items():
        if name not in state:
            raise ValueError(f"checkpoint {str(path)!r} has no entry {name!r} (a checkpoint of fit holds "
                             f"{', '.join(ENTRIES)})")
        if not isinstance(state[name], kind):
            raise ValueError(f"checkpoint {str(path)!r}: its entry {name!r} must be a {kind.__name__}, got "
                             f"{type(state[name]).__name__}")


def _data_digest(data: SequenceData) -> str:
    """A short hash of the training set's tensors (their shapes, dtypes and bytes)."""
    digest = hashlib.sha1()
    for t in (data.x, data.labels, data.lengths, data.starts, data.cost):
        if isinstance(t, torch.Tensor):
            t = t.detach().cpu().contiguous()
            digest.update(f"{tuple(t.shape)}{t.dtype}".encode())
            digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return digest.hexdigest()[:16]


def fingerprint(*, solver: str, solver_options: Mapping[str, Any], lam: float, batch_size: int, seed: int,
                data: SequenceData, modules: list[torch.nn.Module], loss: object,
                optimizer: object, scheduler: object, select: str | None, mode: str | None,
                patience: int | None, objective: bool = True) -> dict[str, Any]:
    """What a checkpoint must share with the training that resumes it, as plain values (each key
    is named in the error when it differs)."""
    shapes = [[(k, tuple(v.shape), str(v.dtype)) for k, v in m.state_dict().items()] for m in modules]
    return {
        "solver": solver,
        "solver_options": repr(sorted((k, repr(v)) for k, v in solver_options.items())),
        "regularizer (l2)": float(lam),
        "batch_size": int(batch_size),
        "seed": int(seed),
        "training sequences": len(data),
        "training data": _data_digest(data),
        "model parameters": repr(shapes),
        "loss": f"{type(loss).__name__}({getattr(loss, 'rescaling', '')})",
        "optimizer": type(optimizer).__name__ if optimizer is not None else None,
        "scheduler": type(scheduler).__name__ if scheduler is not None else None,
        "select": (select, mode, patience),
        "objective": bool(objective),
    }


def _rng_state() -> dict[str, Any]:
    version, keys, pos = random.getstate()
    kind, array, position, has_gauss, gauss = np.random.get_state()
    state = {"torch": torch.get_rng_state(), "python": (version, list(keys), pos),
             "numpy": (kind, torch.from_numpy(array.astype(np.int64)), position, has_gauss, gauss)}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: Mapping[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    version, keys, pos = state["python"]
    random.setstate((version, tuple(keys), pos))
    kind, array, position, has_gauss, gauss = state["numpy"]
    np.random.set_state((kind, array.numpy().astype(np.uint32), position, has_gauss, gauss))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class Checkpoint:
    """One training's checkpoint file (``fit(checkpoint=path, checkpoint_every=every)``).

    Parameters
    ----------
    path : str or PathLike
        The file (its folder must exist).
    every : int
        Write after every ``every`` epochs (and after the last).
    meta : dict
        The training's :func:`fingerprint`.
    rank : int
        This process's rank (only rank 0 writes).
    distributed : bool
        Whether torch.distributed is initialized (ranks wait for rank 0's write).
    """

    def __init__(self, path: str | os.PathLike, every: int, meta: Mapping[str, Any], rank: int = 0,
                 distributed: bool = False) -> None:
        self.path, self.every, self.meta = Path(path), every, dict(meta)
        self.rank, self.distributed = rank, distributed
        if not self.path.parent.is_dir():
            raise FileNotFoundError(f"checkpoint: folder {str(self.path.parent)!r} does not exist")

    def resume(self, solver: Any, selection: Selection) -> History:
        """The history so far, with the model, the solver, the selection and the RNGs set to the
        checkpoint's state; an empty history (nothing loaded) where there is no file yet."""
        if not self.path.exists():
            return History()
        state = read_checkpoint(self.path)
        _check_entries(self.path, state)
        self._check(state["meta"])
        self._load("solver", solver.load_state_dict, state)
        self._load("model", solver.task.load, state)
        self._load("selection", selection.load_state_dict, state)
        self._load("rng", _set_rng_state, state)
        return self._load("history", History.from_state, state)

    def _load(self, entry: str, load: Any, state: Mapping[str, Any]) -> Any:
        """``load(state[entry])``, any failure a ValueError naming the entry."""
        try:
            return load(state[entry])
        except (KeyError, TypeError, ValueError, RuntimeError, IndexError, AttributeError) as e:
            raise ValueError(f"checkpoint {str(self.path)!r}: its entry {entry!r} does not fit this training "
                             f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})") from e

    def _check(self, saved: Mapping[str, Any]) -> None:
        diffs = [f"{key}: {saved.get(key)!r} in the checkpoint, {value!r} now"
                 for key, value in self.meta.items() if saved.get(key) != value]
        if diffs:
            raise ValueError(f"checkpoint {str(self.path)!r} belongs to another training and is not loaded "
                             f"(remove it or pass another path): " + "; ".join(diffs))

    def after_epoch(self, history: History, selection: Selection, solver: Any, last: bool) -> None:
        """Write the state after an epoch when it is due (every ``every`` epochs, and the ``last``)."""
        if not (last or len(history) % self.every == 0):
            return
        if self.rank == 0:
            write_checkpoint(self.path, {
                "format": FORMAT, "meta": self.meta, "model": solver.task.state(),
                "solver": solver.state_dict(), "selection": selection.state_dict(), "rng": _rng_state(),
                "history": {"epochs": history.epochs, "best_epoch": history.best_epoch,
                            "stopped_early": history.stopped_early, "converged": history.converged}})
        if self.distributed:
            dist.barrier()
