"""examples/vision_segmentation.py: a torchvision backbone trained end to end through the LP
relaxations (issue 12, item 3): the example runs, the loss falls and gradients reach the backbone."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("torchvision")  # a safety net: CI installs torchvision

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--train", "8", "--test", "4", "--epochs", "1", "--batch", "4", "--size", "8", "--device", "cpu"]


def load_example():
    spec = importlib.util.spec_from_file_location("vision_segmentation", ROOT / "examples" / "vision_segmentation.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_example_runs(tmp_path):
    out = tmp_path / "seg.png"
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "vision_segmentation.py"), *TINY, "--out", str(out)],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    table = [line for line in proc.stdout.splitlines() if line.startswith("| ")]
    for name in ("pixel CE", "pixel CE + conn.", "hinge hard", "hinge soft", "MAPRelaxation"):
        row = next(line for line in table if line.startswith(f"| {name} | "))
        iou, acc = (float(v) for v in row.strip("| ").split(" | ")[1:3])
        assert 0.0 <= iou <= 1.0 and 0.0 < acc <= 1.0, row
    assert any("structured fwd+bwd" in line for line in table)
    assert out.exists() and out.stat().st_size > 10_000


def test_render_and_augment_keep_image_and_mask_together():
    vs = load_example()
    from structtorch.data import synthetic_objects

    data = synthetic_objects(3, "bar", H=6, W=6, num_features=4, seed=1)
    images, masks = vs.render(data.x, data.labels, data.shape, 3, torch.Generator().manual_seed(0))
    assert images.shape == (3, 3, 18, 18) and masks.shape == (3, 18, 18)
    assert float(images.min()) >= 0 and float(images.max()) <= 1
    assert torch.equal(vs.node_labels(masks, 3), data.labels)
    # the colour of a node is sigmoid(features) up to the pixel noise
    expect = torch.sigmoid(data.x[0, 0, :3]).float()
    assert torch.allclose(images[0, :, :3, :3].mean((1, 2)), expect, atol=0.1)
    # grey images equal to their masks: colour jitter keeps the order of grey levels, so the
    # augmented image thresholded at mid-grey must give the augmented mask (flipped together)
    grey = masks.unsqueeze(1).expand(-1, 3, -1, -1).float()
    torch.manual_seed(0)
    flips = set()
    for _ in range(8):
        img, msk = vs.augment(grey, masks)
        assert img.shape == grey.shape and msk.dtype == torch.int64
        for b in range(3):
            lo, hi = float(img[b, 0].min()), float(img[b, 0].max())
            assert torch.equal((img[b, 0] > (lo + hi) / 2).long(), msk[b])
            variants = [masks[b], masks[b].flip(1), masks[b].flip(0), masks[b].flip(0).flip(1)]
            flips.add(next(k for k, v in enumerate(variants) if torch.equal(v, msk[b])))
    assert len(flips) > 1  # random flips happened


@pytest.mark.parametrize("method", ["hinge hard", "hinge soft", "MAPRelaxation"])
def test_training_steps_reduce_the_loss_and_reach_the_backbone(method):
    vs = load_example()
    args = vs.parse_args(["--size", "8", "--batch", "4", "--device", "cpu", "--lr", "3e-3"])
    args.device = torch.device("cpu")
    from structtorch.data import synthetic_objects

    data = synthetic_objects(4, "bar", H=8, W=8, num_features=4, seed=1)
    images, masks = vs.render(data.x, data.labels, data.shape, args.scale, torch.Generator().manual_seed(0))
    target = vs.node_labels(masks, args.scale)
    torch.manual_seed(0)
    model = vs.SegModel((8, 8), soft=method == "hinge soft")
    trainer = vs.Trainer(method, model, data.edges, len(images), args)
    losses = [trainer.step(images, target, [0, 1, 2, 3])]
    grad = model.backbone.first_conv.weight.grad
    assert grad is not None and bool(torch.isfinite(grad).all()) and float(grad.abs().sum()) > 0
    for _ in range(7):
        losses.append(trainer.step(images, target, [0, 1, 2, 3]))
    assert all(torch.isfinite(torch.tensor(losses)))
    assert losses[-1] < 0.7 * losses[0], losses
    assert len(trainer.times["structured"]) == 8 and min(trainer.times["backbone"]) > 0
