"""What ``import structtorch`` loads, the layers' import order, and the old import paths that
moved (issue 22): each check runs in a fresh interpreter, so nothing imported by other tests
hides a missing or circular import."""

from __future__ import annotations

import json
import os
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
    assert "structtorch.nn.token_classification" not in loaded


def test_transformers_loads_with_the_hugging_face_head_only():
    pytest.importorskip("transformers")
    _run("import sys, structtorch as st\n"
         "assert 'transformers' not in sys.modules\n"
         "assert st.CRFForTokenClassification is st.nn.CRFForTokenClassification\n"
         "assert 'transformers' in sys.modules\n")


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


LAYERS = [
    "structtorch.losses", "structtorch.nn.hsm", "structtorch.learn.solvers.bcfw", "structtorch.learn.bcfw",
    "structtorch.learn.solvers.cutting_plane",
    "structtorch.learn.train", "structtorch.learn.losses", "structtorch.learn.task", "structtorch.sequence_data",
    "structtorch.schemes", "structtorch.metrics", "structtorch.data.conll", "structtorch.data.tagging",
    "structtorch.trees",
]

# One interpreter imports the third-party stack (torch's import is most of an interpreter's start),
# then forks a child per module that imports that module first: structtorch itself is fresh in
# every child. Without fork, one interpreter per module.
_FORKING_DRIVER = """
import json, os, sys, traceback
import clarabel, daqp, numpy, scipy.optimize, scipy.sparse, torch
assert not [m for m in sys.modules if m.startswith("structtorch")]
errors = {}
for module in sys.argv[1:]:
    read, write = os.pipe()
    if os.fork() == 0:
        os.close(read)
        try:
            __import__(module)
            message = ""
        except BaseException:
            message = traceback.format_exc()
        os.write(write, message.encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        errors[module] = pipe.read()
    os.wait()
print(json.dumps(errors))
"""


@pytest.fixture(scope="module")
def first_imports() -> dict[str, str]:
    """module -> the traceback of importing it first in a fresh interpreter ("" when it worked)."""
    if not hasattr(os, "fork"):
        return {m: "" if _ok(f"import {m}") else f"import {m} failed" for m in LAYERS}
    proc = subprocess.run([sys.executable, "-c", _FORKING_DRIVER, *LAYERS], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _ok(code: str) -> bool:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=300).returncode == 0


@pytest.mark.parametrize("module", LAYERS)
def test_each_layer_imports_first(module, first_imports):
    """Importing any one module first works (no import circle needs a particular order)."""
    assert first_imports[module] == "", first_imports[module][-3000:]


def test_a_circular_import_is_caught(tmp_path, monkeypatch):
    """The forking driver reports a module that fails when imported first."""
    (tmp_path / "circle_a.py").write_text("import circle_b\nVALUE = 1\n")
    (tmp_path / "circle_b.py").write_text("from circle_a import VALUE\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    proc = subprocess.run([sys.executable, "-c", _FORKING_DRIVER, "circle_a", "json"], capture_output=True,
                          text=True, timeout=300)
    errors = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "ImportError" in errors["circle_a"] and errors["json"] == ""


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

