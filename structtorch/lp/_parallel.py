"""Solving the instances of a batch concurrently.

Every instance of a batch is its own LP (HiGHS, CPU). HiGHS releases the GIL while it solves
(``Highs.run``), so a thread pool overlaps the solves; the Python parts around them (building the
model, separating cuts) still take turns on the GIL. Each instance owns its solver object and
reads only shared, read-only data (the constraint matrix, the separation network), and the
results are collected in batch order: a parallel batch gives exactly the results of the
sequential loop.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import torch

from .._checks import check_int

__all__ = ["check_num_workers", "parallel_map"]

T = TypeVar("T")
R = TypeVar("R")


def check_num_workers(num_workers: object) -> int:
    """``num_workers`` as an int >= 1; None means ``torch.get_num_threads()`` (the intra-op
    threads)."""
    if num_workers is None:
        return max(int(torch.get_num_threads()), 1)
    return check_int("num_workers", num_workers, 1)


def parallel_map(fn: Callable[[T], R], items: Sequence[T], num_workers: int) -> list[R]:
    """``[fn(x) for x in items]`` on up to ``num_workers`` threads, in the order of ``items``.

    One worker (or at most one item) runs the plain loop in the calling thread. The first
    exception raised by ``fn`` (in batch order) propagates after every started call has ended.
    """
    workers = min(num_workers, len(items))
    if workers <= 1:
        return [fn(x) for x in items]
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="structtorch-lp") as pool:
        futures = [pool.submit(fn, x) for x in items]
        return [f.result() for f in futures]
