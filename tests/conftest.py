"""Shared fixtures: hypothesis profiles, backend switching (``use_backend``, the ``backend``
fixture), the CUDA marker. The brute-force enumerators of every structure are in ``brute.py``."""

from __future__ import annotations

import contextlib
import os

import pytest
import torch

# Triton's interpreter runs the Triton kernels on CPU tensors; it must be chosen before Triton is
# imported (by structtorch's Triton backend, or by torch.compile). On a CUDA machine the kernels
# compile for the GPU instead.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
from hypothesis import HealthCheck, settings

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


INTERPRETED_EXAMPLES = 12
"""Hypothesis examples per property on the triton backend in Triton's interpreter (about a
hundred times slower than the other backends), in the default profile; every other backend, and
the "thorough" profile, draw the profile's count. The interpreted properties are about 40% of the
suite's time at 20 (the kernels also meet the PyTorch backend on fixed cases, and the compiled
and PyTorch backends draw 60 examples of every property)."""


@contextlib.contextmanager
def _fewer_examples(test, name: str):
    """While the test runs on ``name``: at most INTERPRETED_EXAMPLES hypothesis examples when it is
    the interpreted triton backend (hypothesis reads the settings off the test when it is called)."""
    current = getattr(test, "_hypothesis_internal_use_settings", None)
    interpreted = name == "triton" and os.environ.get("TRITON_INTERPRET") == "1"
    if current is None or not interpreted or current.max_examples <= INTERPRETED_EXAMPLES:
        yield
        return
    test._hypothesis_internal_use_settings = settings(current, max_examples=INTERPRETED_EXAMPLES)
    try:
        yield
    finally:
        test._hypothesis_internal_use_settings = current


@pytest.fixture(params=BACKENDS)
def backend(request):
    with use_backend(request.param), _fewer_examples(request.function, request.param):
        yield request.param


requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


LONGEST_FIRST = (
    "test_kernels_compile_for_a_gpu",  # 2-3 minutes with a cold Triton cache, as in CI
    "test_readme_tour_runs", "test_semisupervised_example_runs", "test_bauer_examples_run",
    "test_transformer_ner_example_runs", "test_lp_examples_run", "test_gpu_benchmark_script_runs_in_smoke_mode",
    "test_chunking_example_end_to_end", "test_killed_and_resumed_equals_uninterrupted",
    "test_cutting_planes_on_2_and_3_processes_equal_one",
)
"""Tests of half a minute or more (single processes of an example or a compiler): collected first,
so that pytest-xdist starts them while the other worker takes the many short ones, instead of
leaving one worker alone with them at the end."""


def pytest_collection_modifyitems(config, items):
    first = [item for item in items if item.originalname in LONGEST_FIRST]
    items[:] = first + [item for item in items if item.originalname not in LONGEST_FIRST]
