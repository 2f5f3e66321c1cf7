"""Shared helpers: brute-force enumeration, random chain instances, backend switching."""

from __future__ import annotations

import contextlib
import itertools
import os
from dataclasses import dataclass

import numpy as np
import pytest
import torch

# Triton's interpreter runs the Triton kernels on CPU tensors; it must be chosen before Triton is
# imported (by structtorch's Triton backend, or by torch.compile). On a CUDA machine the kernels
# compile for the GPU instead.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

import structtorch
from structtorch import _backend
from structtorch._extension import chain_ops

settings.register_profile(
    "default", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
settings.register_profile(
    "thorough", max_examples=1000, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


BACKENDS = ["compiled", "triton", "torch"]
NEG_INF = float("-inf")


@contextlib.contextmanager
def use_backend(name: str):
    """Run every dynamic program on one backend ("compiled" or "torch"); skip when unavailable."""
    if name == "compiled" and chain_ops() is None:
        if os.environ.get("STRUCTTORCH_REQUIRE_EXTENSION"):
            raise AssertionError("the compiled kernels failed to build (see the warning)")
        pytest.skip("compiled kernels unavailable on this machine")
    if name == "triton":
        reason = _backend._triton_reason(torch.zeros(()))
        if reason is not None:
            if os.environ.get("STRUCTTORCH_REQUIRE_TRITON"):
                raise AssertionError(f"the triton backend cannot run here: {reason}")
            pytest.skip(reason)
    with structtorch.use_backend(name):
        yield


@dataclass
class Instance:
    unary: torch.Tensor  # (B, T, N) float64
    transitions: torch.Tensor  # (N, N) or (B, T-1, N, N)
    start: torch.Tensor | None
    end: torch.Tensor | None
    lengths: torch.Tensor

    @property
    def tol(self) -> float:
        """Absolute tolerance for non-integer results (float32 instances are integer-valued)."""
        return 1e-9 if self.unary.dtype == torch.float64 else 2e-5

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
    """Random chains: float64 (integer-valued or Gaussian) or float32 (integer-valued, so that
    float32 sums are exact), shared or per-position transitions, (N,) or (B, N) start/end."""
    B = draw(st.integers(1, max_b))
    T = draw(st.integers(0, max_t))
    N = draw(st.integers(1, max_n))
    lengths = draw(st.lists(st.integers(0, T), min_size=B, max_size=B))
    dtype = draw(st.sampled_from([torch.float64, torch.float64, torch.float32]))
    integer = dtype == torch.float32 or draw(st.booleans())
    p_inf = draw(st.sampled_from([0.0, 0.0, 0.2, 0.5]))
    shared = draw(st.booleans())
    start_shape, end_shape = (draw(st.sampled_from([None, (N,), (B, N)])) for _ in range(2))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))

    def make(shape, p):
        return None if shape is None else torch.tensor(_values(rng, shape, integer, p), dtype=dtype)

    return Instance(
        unary=make((B, T, N), p_inf / 2),
        transitions=make((N, N) if shared else (B, max(T - 1, 0), N, N), p_inf),
        start=make(start_shape, p_inf / 2),
        end=make(end_shape, p_inf / 2),
        lengths=torch.tensor(lengths, dtype=torch.long),
    )


def _per_row(x, b: int, N: int) -> np.ndarray:
    if x is None:
        return np.zeros(N)
    return x.double().numpy() if x.dim() == 1 else x[b].double().numpy()


def enumerate_row(inst: Instance, b: int):
    """All labelings of row b with their float64 scores, and the edge/node indicator arrays."""
    L = int(inst.lengths[b])
    N = inst.unary.shape[2]
    u = inst.unary[b].double().numpy()
    A = inst.transitions.double().numpy()
    s, e = _per_row(inst.start, b, N), _per_row(inst.end, b, N)
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
