"""Segmentation with connectivity on top of a torchvision backbone, trained end to end (issue 12).

Images. ``structtorch.data.synthetic_objects`` gives, per image, an H x W grid of nodes with
appearance features and the mask of one connected object (bars by default) on clutter. Each
image is rendered in RGB (``render``): with ``num_features = 4`` a node has three appearance
features, and ``sigmoid(features)`` is its colour; a node is a ``scale x scale`` block of pixels
with independent pixel noise N(0, 0.05^2), so an image is (3, scale H, scale W). The
object and background colours overlap (per-node noise), object-like clutter patches sit in the
background and a background-like patch sits in the object: a per-pixel classifier labels the
clutter as object and splits the object. Training batches are augmented by
``torchvision.transforms.v2``: horizontal and vertical flips applied jointly to the image and its
mask (the grid graph is symmetric under both), and colour jitter of the image.

Model. The stem and the first stage of ``torchvision.models.resnet18(weights=None)`` (stride 4:
a 4H x 4W image gives an H x W map; other sizes are resampled to the grid) and a 1x1
convolution give the per-node unaries (V, 2) on the H x W grid graph (4-neighbourhood); the
pairwise scores (bg-bg, bg-fg, fg-fg) are three learned numbers shared by all edges. Methods,
each the same backbone trained from the same initialization:

- ``pixel CE``: per-pixel cross-entropy on the unaries, decoded per pixel (argmax); also shown
  decoded with hard connectivity on its log-probabilities (``pixel CE + conn.``, not trained
  for it);
- ``hinge hard``: ``lp.relaxed_hinge`` with hard connectivity of the object (loss-augmented
  LP inference with vertex-separator cuts; each image keeps its working set of cuts, its LP
  and its pool of cuts from epoch to epoch in an ``lp.WarmStart``);
- ``hinge soft``: ``lp.relaxed_hinge`` with soft connectivity and a learned weight w >= 0;
- ``MAPRelaxation``: the smoothed relaxation layer ``lp.MAPRelaxation`` (smoothing
  ``--smoothing``; its QP path), trained on the expected Hamming loss mean_i (1 - mu_i(y_i)) of
  its output; its cut block holds, per image, the newest connectivity cuts that its own outputs
  for that image violated at earlier steps (``lp.connectivity_cuts``: cutting planes for the
  smoothed problem, carried from epoch to epoch).

After training, the BatchNorm statistics of every model are recomputed on the training images
under the final weights (``recalibrate_batchnorm``). The structured models are decoded by LP MAP
inference with their connectivity (hard for
``hinge hard`` and ``MAPRelaxation``, soft with the learned weight for ``hinge soft``). The
loss-augmented LPs of a batch are solved concurrently (``num_workers``, default
``torch.get_num_threads()``). Prints, per epoch, the loss and the median time per training batch
of the backbone (forward+backward) and of the structured part (LP / layer, forward and
backward); at the end IoU and pixel accuracy on held-out images and the time split over all
epochs after the first, and saves a figure of test predictions.

    python examples/vision_segmentation.py [--train 48] [--test 32] [--epochs 16] [--size 16]
        [--device cuda] [--out vision_segmentation.png]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F
import torchvision
from torch import Tensor, nn
from torchvision import tv_tensors
from torchvision.transforms import v2

from structtorch import lp
from structtorch.data import OBJECT_CLASSES, synthetic_objects

METHODS = ("pixel CE", "hinge hard", "hinge soft", "MAPRelaxation")
TRAIN_MAX_ITER = 10  # LP solves per loss-augmented inference in training (the cuts carry over)
PIXEL_NOISE = 0.05


def render(features: Tensor, labels: Tensor, shape: tuple[int, int], scale: int,
           generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """RGB images and pixel masks of synthetic objects.

    Parameters
    ----------
    features : Tensor (n, V, 4)
        ``ObjectData.x`` with three appearance features per node (and the constant 1).
    labels : Tensor (n, V) int64
        1 on the object.
    shape : (H, W)
        The node grid, V = H W.
    scale : int >= 1
        Pixels per node side.

    Returns
    -------
    images : Tensor (n, 3, scale H, scale W) float32 in [0, 1]
        ``sigmoid(features)`` per node, repeated over its block, plus N(0, 0.05^2) pixel noise.
    masks : Tensor (n, scale H, scale W) int64
        The labels repeated over the blocks.
    """
    n, V, _ = features.shape
    H, W = shape
    colour = torch.sigmoid(features[..., :3]).float().transpose(1, 2).reshape(n, 3, H, W)
    images = colour.repeat_interleave(scale, 2).repeat_interleave(scale, 3)
    images = images + PIXEL_NOISE * torch.randn(images.shape, generator=generator)
    masks = labels.reshape(n, H, W).repeat_interleave(scale, 1).repeat_interleave(scale, 2)
    return images.clamp(0, 1), masks


AUGMENT = v2.Compose([
    v2.RandomHorizontalFlip(),
    v2.RandomVerticalFlip(),
    v2.ColorJitter(brightness=0.2, contrast=0.2, saturation=0.2, hue=0.02),  # the image only
])


def augment(images: Tensor, masks: Tensor) -> tuple[Tensor, Tensor]:
    """Each image and its mask with one random draw of ``AUGMENT`` (torch's global generator)."""
    pairs = [AUGMENT(tv_tensors.Image(img), tv_tensors.Mask(mask)) for img, mask in zip(images, masks, strict=True)]
    return (torch.stack([img.as_subclass(Tensor) for img, _ in pairs]),
            torch.stack([mask.as_subclass(Tensor) for _, mask in pairs]))


def node_labels(masks: Tensor, scale: int) -> Tensor:
    """(n, V) node labels of pixel masks (n, scale H, scale W): the top-left pixel of each block."""
    return masks[:, ::scale, ::scale].reshape(len(masks), -1)


class Backbone(nn.Module):
    """ResNet-18 stem + layer1 (torchvision, random initialization) and a 1x1 head: images
    (B, 3, h, w) -> unaries (B, H W, 2) on the H x W grid."""

    def __init__(self, grid: tuple[int, int]) -> None:
        super().__init__()
        r = torchvision.models.resnet18(weights=None)
        self.trunk = nn.Sequential(r.conv1, r.bn1, r.relu, r.maxpool, r.layer1)
        self.head = nn.Conv2d(64, 2, kernel_size=1)
        nn.init.normal_(self.head.weight, std=0.01)
        nn.init.zeros_(self.head.bias)
        self.grid = grid

    @property
    def first_conv(self) -> nn.Conv2d:
        return self.trunk[0]

    def forward(self, images: Tensor) -> Tensor:
        maps = self.head(self.trunk(images))
        if tuple(maps.shape[2:]) != self.grid:
            maps = F.interpolate(maps, size=self.grid, mode="bilinear", align_corners=False)
        return maps.flatten(2).transpose(1, 2)  # (B, V, 2), node r * W + c as in lp.grid_edges


class SegModel(nn.Module):
    """The backbone's unaries, Potts-like pairwise scores shared by all edges and (for soft
    connectivity) a weight w = softplus(raw) >= 0."""

    def __init__(self, grid: tuple[int, int], soft: bool = False) -> None:
        super().__init__()
        self.backbone = Backbone(grid)
        self.edge = nn.Parameter(torch.zeros(3))
        self.raw_soft = nn.Parameter(torch.zeros(())) if soft else None

    def soft_weight(self) -> Tensor | None:
        return None if self.raw_soft is None else F.softplus(self.raw_soft)

    def pairwise(self, E: int) -> Tensor:
        bb, bf, ff = self.edge
        return torch.stack([torch.stack([bb, bf]), torch.stack([bf, ff])]).expand(E, 2, 2)


def connectivity(method: str, model: SegModel, detach: bool = False) -> dict:
    if method in ("hinge hard", "MAPRelaxation", "pixel CE + conn."):
        return {"connected": [1]}
    if method == "hinge soft":
        w = model.soft_weight()
        return {"connected_soft": {1: float(w) if detach else w}}
    return {}


class Trainer:
    """One method's training step: backbone forward, structured loss (forward and backward on
    the unaries as a leaf), backbone backward; times the structured part and the backbone."""

    def __init__(self, method: str, model: SegModel, edges: Tensor, n_train: int,
                 args: argparse.Namespace) -> None:
        self.method, self.model, self.edges, self.args = method, model, edges, args
        self.opt = torch.optim.Adam(model.parameters(), lr=args.lr)
        self.warm = lp.WarmStart()  # per image: working set of cuts, LP, cut pool
        self.layer = None
        self.cuts: dict[int, list] = {}  # MAPRelaxation: per image, the cut block's rows (newest last)
        if method == "MAPRelaxation":
            V = model.backbone.grid[0] * model.backbone.grid[1]
            self.layer = lp.MAPRelaxation(edges, 2, num_nodes=V, smoothing=args.smoothing, max_cuts=args.max_cuts,
                                          num_workers=args.workers)
        self.times: dict[str, list[float]] = {"structured": [], "backbone": []}
        self.epochs: list[dict[str, float]] = []  # per epoch: median ms of each part

    def structured_loss(self, unary: Tensor, target: Tensor, idx: list[int]) -> Tensor:
        E = len(self.edges)
        pairwise = self.model.pairwise(E).to(unary)
        if self.method == "pixel CE":
            return F.cross_entropy(unary.reshape(-1, 2), target.reshape(-1))
        if self.method.startswith("hinge"):
            return lp.relaxed_hinge(unary, pairwise, self.edges, target, normalize=False, warm_start=self.warm,
                                    ids=idx, max_iter=TRAIN_MAX_ITER, num_workers=self.args.workers,
                                    **connectivity(self.method, self.model))
        # MAPRelaxation: each image's block holds the newest cuts its earlier outputs violated
        k = self.args.max_cuts
        mu = self.layer(unary.cpu(), pairwise.cpu(), [self.cuts.get(i, []) for i in idx])
        for i, rows in zip(idx, lp.connectivity_cuts(mu.detach(), self.edges, [1], max_cuts=k), strict=True):
            self.cuts[i] = (self.cuts.get(i, []) + rows)[-k:]
        return (1 - mu.to(unary.device).gather(2, target.unsqueeze(2))).mean()

    def step(self, images: Tensor, target: Tensor, idx: list[int]) -> float:
        sync = torch.cuda.synchronize if images.is_cuda else (lambda: None)
        self.model.train()
        t0 = time.perf_counter()
        unary = self.model.backbone(images)
        sync()
        t1 = time.perf_counter()
        leaf = unary.detach().requires_grad_()
        loss = self.structured_loss(leaf, target, idx)
        self.opt.zero_grad()
        loss.backward()
        sync()
        t2 = time.perf_counter()
        unary.backward(leaf.grad)
        self.opt.step()
        sync()
        t3 = time.perf_counter()
        self.times["structured"].append(t2 - t1)
        self.times["backbone"].append((t1 - t0) + (t3 - t2))
        return float(loss.detach())


def train(method: str, images: Tensor, masks: Tensor, edges: Tensor, args: argparse.Namespace,
          log=print) -> tuple[SegModel, Trainer]:
    torch.manual_seed(args.seed)  # the same initialization and augmentations for every method
    grid = (args.size, args.size)
    model = SegModel(grid, soft=method == "hinge soft").to(args.device)
    trainer = Trainer(method, model, edges, len(images), args)
    for epoch in range(args.epochs):
        losses, first = [], len(trainer.times["backbone"])
        for idx in torch.randperm(len(images)).split(args.batch):
            imgs, msks = augment(images[idx], masks[idx])
            target = node_labels(msks, args.scale).to(args.device)
            losses.append(trainer.step(imgs.to(args.device), target, idx.tolist()))
        split = {k: 1e3 * statistics.median(v[first:]) for k, v in trainer.times.items()}
        trainer.epochs.append(split)
        log(f"  {method} epoch {epoch + 1}: loss {statistics.mean(losses):.4f}, per batch backbone "
            f"{split['backbone']:.1f} ms, structured {split['structured']:.1f} ms")
    recalibrate_batchnorm(model, images, args)
    return model, trainer


@torch.no_grad()
def recalibrate_batchnorm(model: SegModel, images: Tensor, args: argparse.Namespace) -> None:
    """Replace the BatchNorm running statistics by their averages over the training images
    under the final weights. The running averages of training lag behind weights that move fast
    (the hinge's subgradient steps): a hinge-trained backbone scored 0.75 test IoU with batch
    statistics and 0.26 with its running ones before this step."""
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None  # a cumulative average over the batches below
    model.train()
    for idx in torch.arange(len(images)).split(args.batch):
        model.backbone(images[idx].to(args.device))
    model.eval()


@torch.no_grad()
def predict(method: str, model: SegModel, images: Tensor, edges: Tensor, args: argparse.Namespace) -> Tensor:
    """(n, V) labels: per pixel for the CE model, LP MAP with connectivity for the others."""
    model.eval()
    unary = torch.cat([model.backbone(x.to(args.device)) for x in images.split(64)]).double().cpu()
    if method == "pixel CE":
        return unary.argmax(2)
    if method == "pixel CE + conn.":
        unary, pairwise = unary.log_softmax(2), torch.zeros(len(edges), 2, 2, dtype=torch.float64)
    else:
        pairwise = model.pairwise(len(edges)).detach().double().cpu()
    res = lp.map_lp(unary, pairwise, edges, max_iter=200, num_workers=args.workers,
                    **connectivity(method, model, detach=True))
    return lp.round_labels(res.mu)[0]


def iou(pred: Tensor, truth: Tensor) -> float:
    """Average over images of TP / (TP + FP + FN) on the object."""
    tp = ((pred == 1) & (truth == 1)).sum(1).double()
    return float((tp / (tp + (pred != truth).sum(1).double()).clamp(min=1)).mean())


def plot(path: Path, images: Tensor, truth: Tensor, preds: dict[str, Tensor], grid: tuple[int, int],
         rows: int = 4) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = min(rows, len(images))
    cols = 2 + len(preds)
    fig, axes = plt.subplots(rows, cols, figsize=(1.9 * cols, 2.0 * rows), squeeze=False)
    for r in range(rows):
        panels = [("image", images[r].permute(1, 2, 0)), ("truth", truth[r].reshape(grid))]
        panels += [(f"{m}\nIoU {iou(p[r:r + 1], truth[r:r + 1]):.2f}", p[r].reshape(grid)) for m, p in preds.items()]
        for ax, (title, img) in zip(axes[r], panels, strict=True):
            ax.imshow(img.numpy(), cmap=None if title == "image" else "gray", vmin=0, vmax=1)
            ax.set_title(title, fontsize=7)
            ax.axis("off")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--train", type=int, default=48, help="training images")
    p.add_argument("--test", type=int, default=32, help="held-out images")
    p.add_argument("--epochs", type=int, default=16)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--size", type=int, default=16, help="node grid H = W")
    p.add_argument("--scale", type=int, default=4, help="pixels per node side (the image is size * scale)")
    p.add_argument("--cls", default="bar", choices=OBJECT_CLASSES, help="object class")
    p.add_argument("--noise", type=float, default=1.0, help="per-node feature noise of synthetic_objects")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--smoothing", type=float, default=0.5, help="MAPRelaxation smoothing")
    p.add_argument("--max-cuts", type=int, default=16, help="MAPRelaxation cut block rows")
    p.add_argument("--workers", type=int, default=None,
                   help="threads for the LPs of a batch (default torch.get_num_threads())")
    p.add_argument("--methods", nargs="*", default=list(METHODS), choices=METHODS)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path("vision_segmentation.png"))
    return p.parse_args(argv)


def load(args: argparse.Namespace) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """(train images, train masks, test images, test node labels, edges)."""
    g = torch.Generator().manual_seed(args.seed)
    sets = []
    for n, seed in ((args.train, 1), (args.test, 2)):
        data = synthetic_objects(n, args.cls, H=args.size, W=args.size, num_features=4, noise=args.noise, seed=seed)
        sets.append(render(data.x, data.labels, data.shape, args.scale, g))
    (tr_img, tr_mask), (te_img, te_mask) = sets
    return tr_img, tr_mask, te_img, node_labels(te_mask, args.scale), data.edges


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    args = parse_args(argv)
    args.device = torch.device(args.device)
    t0 = time.time()
    tr_img, tr_mask, te_img, te_labels, edges = load(args)
    print(f"# {args.train} training / {args.test} test images of {args.cls}s, {args.size}x{args.size} node grid, "
          f"{tuple(tr_img.shape[1:])} images, device {args.device}, torch {torch.__version__}, torchvision "
          f"{torchvision.__version__}, {torch.get_num_threads()} threads", flush=True)
    rows, preds, timing = {}, {}, {}
    for method in args.methods:
        t1 = time.time()
        model, trainer = train(method, tr_img, tr_mask, edges, args)
        skip = -(-args.train // args.batch) if args.epochs > 1 else 0  # the first epoch starts cold
        timing[method] = {k: statistics.median(v[skip:]) for k, v in trainer.times.items()}
        decoded = [method] + (["pixel CE + conn."] if method == "pixel CE" else [])
        for name in decoded:
            preds[name] = predict(name, model, te_img, edges, args)
            rows[name] = {"IoU": iou(preds[name], te_labels),
                          "pixel acc.": float((preds[name] == te_labels).double().mean())}
        extra = f", w_soft {float(model.soft_weight().detach()):.2f}" if method == "hinge soft" else ""
        print(f"{method}: IoU {rows[method]['IoU']:.3f}{extra} ({time.time() - t1:.0f} s)", flush=True)
    lines = ["| method | IoU | pixel acc. |", "|---|---|---|"]
    lines += [f"| {name} | {r['IoU']:.3f} | {r['pixel acc.']:.3f} |" for name, r in rows.items()]
    lines += ["", f"| method (training, per batch of {args.batch}, epochs 2+) | structured fwd+bwd (LP / layer) | "
              "backbone fwd+bwd | ratio |",
              "|---|---|---|---|"]
    for method, t in timing.items():
        lines.append(f"| {method} | {1e3 * t['structured']:.1f} ms | {1e3 * t['backbone']:.1f} ms | "
                     f"{t['structured'] / t['backbone']:.2f} |")
    print("\n" + "\n".join(lines))
    plot(args.out, te_img, te_labels, preds, (args.size, args.size))
    print(f"\nwrote {args.out} in {time.time() - t0:.0f} s")
    return rows


if __name__ == "__main__":
    main()
