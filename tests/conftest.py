"""Shared helpers: brute-force enumeration, random chain instances, backend switching."""

from __future__ import annotations

import contextlib
import itertools
import os
from dataclasses import dataclass
from unittest import mock

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

import structtorch.chain as chain_mod

settings.register_profile(
    "default", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
settings.load_profile("default")

BACKENDS = ["compiled", "torch"]
NEG_INF = float("-inf")


@contextlib.contextmanager
def use_backend(name: str):
    """Run the chain DPs on the compiled CPU kernels or on the pure-PyTorch loops."""
    if name == "compiled":
        if chain_mod.chain_ops() is None:
            if os.environ.get("STRUCTTORCH_REQUIRE_EXTENSION"):
                raise AssertionError("the compiled kernels failed to build (see the warning)")
            pytest.skip("compiled kernels unavailable on this machine")
        yield
    else:
        with mock.patch.object(chain_mod, "_ops", lambda chain: None):
            yield


@dataclass
class Instance:
    unary: torch.Tensor  # (B, T, N) float64
    transitions: torch.Tensor  # (N, N) or (B, T-1, N, N)
    start: torch.Tensor | None
    end: torch.Tensor | None
    lengths: torch.Tensor

    @property
    def kwargs(self) -> dict:
        return {"start": self.start, "end": self.end, "lengths": self.lengths}

    def args(self):
        return self.unary, self.transitions


def _values(rng, shape, integer: bool, p_inf: float) -> np.ndarray:
    x = rng.integers(-2, 3, size=shape).astype(float) if integer else rng.normal(size=shape)
    x[rng.random(shape) < p_inf] = -np.inf
    return x


@st.composite
def instances(draw, max_t: int = 6, max_n: int = 4, max_b: int = 3):
    B = draw(st.integers(1, max_b))
    T = draw(st.integers(0, max_t))
    N = draw(st.integers(1, max_n))
    lengths = draw(st.lists(st.integers(0, T), min_size=B, max_size=B))
    integer = draw(st.booleans())
    p_inf = draw(st.sampled_from([0.0, 0.0, 0.2, 0.5]))
    shared = draw(st.booleans())
    boundary = draw(st.booleans())
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    t = lambda a: torch.tensor(a, dtype=torch.float64)  # noqa: E731
    trans_shape = (N, N) if shared else (B, max(T - 1, 0), N, N)
    return Instance(
        unary=t(_values(rng, (B, T, N), integer, p_inf / 2)),
        transitions=t(_values(rng, trans_shape, integer, p_inf)),
        start=t(_values(rng, (N,), integer, p_inf / 2)) if boundary else None,
        end=t(_values(rng, (B, N), integer, p_inf / 2)) if boundary else None,
        lengths=torch.tensor(lengths, dtype=torch.long),
    )


def enumerate_row(inst: Instance, b: int):
    """All labelings of row b with their float64 scores, and the edge/node indicator arrays."""
    L = int(inst.lengths[b])
    N = inst.unary.shape[2]
    u = inst.unary[b].numpy()
    A = inst.transitions.numpy()
    s = np.zeros(N) if inst.start is None else inst.start.numpy()
    e = np.zeros(N) if inst.end is None else inst.end[b].numpy()
    out = []
    for y in itertools.product(range(N), repeat=L):
        if L == 0:
            out.append((y, 0.0))
            continue
        terms = [s[y[0]], e[y[-1]]] + [u[t, y[t]] for t in range(L)]
        for t in range(L - 1):
            terms.append(A[y[t], y[t + 1]] if A.ndim == 2 else A[b, t, y[t], y[t + 1]])
        out.append((y, float(np.sum(terms))))
    return out


def brute_logsumexp(scores) -> float:
    arr = np.array(scores, dtype=float)
    m = arr.max()
    if m == -np.inf:
        return -np.inf
    return float(m + np.log(np.exp(arr - m).sum()))


def brute_best(rows):
    """(score, path) with the documented tie-break: reverse-lexicographically smallest."""
    best = max(s for _, s in rows)
    if best == -np.inf:
        return best, None
    ties = [y for y, s in rows if s == best]
    return best, min(ties, key=lambda y: tuple(reversed(y)))


def pad(y, T: int) -> list[int]:
    return list(y) + [-1] * (T - len(y))


@pytest.fixture(params=BACKENDS)
def backend(request):
    with use_backend(request.param):
        yield request.param


requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
