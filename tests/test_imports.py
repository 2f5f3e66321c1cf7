"""What ``import structtorch`` loads, the layers' import order, and the old import paths that
moved (issue 22): each check runs in a fresh interpreter, so nothing imported by other tests
hides a missing or circular import."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _run(code: str) -> str:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_import_loads_the_library_proper_only():
    """The synthetic generators, mining, semi-supervised learning and the LP stack load on first use."""
    out = _run("import sys, structtorch\n"
               "print(' '.join(sorted(m for m in sys.modules if m.startswith('structtorch'))))")
    loaded = out.split()
    lazy = [m for m in loaded if m.split(".")[1:2] in (["data"], ["mining"], ["semisup"], ["lp"])]
    assert not lazy, lazy
    assert {"structtorch.learn.train", "structtorch.losses", "structtorch.sequence_data"} <= set(loaded)


def test_training_on_own_data_loads_no_generator():
    """fit and evaluate on user data built as SequenceData need no structtorch.data module."""
    _run("import sys, torch, structtorch as st\n"
         "g = torch.Generator().manual_seed(0)\n"
         "data = st.SequenceData(torch.randn(6, 5, 3, generator=g), torch.randint(0, 2, (6, 5), generator=g),\n"
         "                       torch.full((6,), 5))\n"
         "model = st.LinearChainPotentials(3, 2)\n"
         "st.train.fit(model, data, st.StructuredHingeLoss(), epochs=1, C=1.0, progress=False, val_data=data)\n"
         "st.train.fit(model, data, None, epochs=1, C=1.0, solver='bcfw', progress=False)\n"
         "st.train.evaluate(model, data)\n"
         "assert not [m for m in sys.modules if m.startswith('structtorch.data')]\n")


@pytest.mark.parametrize("module", [
    "structtorch.losses", "structtorch.nn.hsm", "structtorch.learn.solvers.bcfw", "structtorch.learn.bcfw",
    "structtorch.learn.solvers.cutting_plane",
    "structtorch.learn.train", "structtorch.learn.losses", "structtorch.learn.task", "structtorch.sequence_data",
    "structtorch.schemes", "structtorch.metrics", "structtorch.data.conll", "structtorch.data.tagging",
])
def test_each_layer_imports_first(module):
    """Importing any one module first works (no import circle needs a particular order)."""
    _run(f"import {module}")


def test_old_paths_name_the_same_objects():
    import structtorch as st
    import structtorch.data as data
    import structtorch.data.conll as conll
    import structtorch.data.tagging as tagging
    import structtorch.learn as learn
    import structtorch.learn.bcfw as bcfw
    import structtorch.learn.losses as old_losses
    import structtorch.learn.train as train
    from structtorch import losses, metrics, schemes, sequence_data
    from structtorch.learn.solvers import bcfw as bcfw_solver

    assert old_losses.StructuredHingeLoss is learn.StructuredHingeLoss is st.StructuredHingeLoss \
        is losses.StructuredHingeLoss
    assert old_losses.structured_hinge is st.structured_hinge is losses.structured_hinge
    assert old_losses.Structure is losses.Structure and old_losses.structure_of is losses.structure_of
    assert train.chain_nll is st.train.chain_nll is losses.chain_nll
    for name in ("accuracy", "hamming", "sequence_metrics", "BUILTIN_METRICS", "Metric"):
        assert getattr(train, name) is getattr(metrics, name)
    assert bcfw.BCFW is bcfw_solver.BCFW and bcfw.fit_bcfw is learn.fit_bcfw is train.fit_bcfw
    assert data.SequenceData is tagging.SequenceData is sequence_data.SequenceData is st.SequenceData
    assert tagging.TaggingData is sequence_data.SequenceData
    for name in ("to_bio", "encode_tags", "decode_tags"):
        assert getattr(conll, name) is getattr(data, name) is getattr(schemes, name)
    assert set(train.SOLVERS) == {"subgradient", "bcfw", "cutting_plane"}

