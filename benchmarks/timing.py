"""Wall-clock medians for the benchmarks (CUDA work synchronized), shared by every script."""

from __future__ import annotations

import statistics
import time

import torch


def median_time(fn, budget: float, device: torch.device, min_runs: int = 3, max_runs: int = 30) -> float:
    """Median seconds of ``fn()`` after one warm-up, repeating within ``budget`` seconds."""

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    fn()
    sync()
    times: list[float] = []
    began = time.perf_counter()
    while len(times) < min_runs or (len(times) < max_runs and time.perf_counter() - began < budget):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)
