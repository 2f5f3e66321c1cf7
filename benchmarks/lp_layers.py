"""The graph layers against the network they sit on (issue 51): per batch forward+backward, one thread.

Setting: ``examples/vision_segmentation.py``'s, B = 8 images of bars (``structtorch.data.
synthetic_objects``) on an H x W node grid (4-neighbourhood), two labels, Potts couplings 0.8; the
unaries are the object mask's signal plus N(0, 1) noise, and each "epoch" adds N(0, 0.2^2) to them
(a network that moves a little between epochs). The backbone is the example's (ResNet-18 stem and
first stage, 1x1 head) on the 4H x 4W images, forward and backward.

Rows, each the median time per batch:

- ``MAPRelaxation`` (smoothing 0.5, the example's): the QP path against cvxpylayers, without cuts
  and with the cut block filled from each image's connectivity working set (its 16 newest cuts);
  the outputs of both paths are compared (largest node difference) and so are the gradients
  (relative norm);
- ``relaxed_hinge`` with hard and with soft (weight 0.5) connectivity of the object, the example's
  loss (``normalize=False``, at most 10 LP solves a call): "cold" starts every call afresh (epoch
  1, and epochs 2+), "cold, Python oracle" the same with the separation oracle in Python
  (``use_backend("torch")``: the path when issue 51 was filed, but for the two-label LP form),
  "cuts carried" passes each image's cuts of the previous epoch back in (what the example did
  before ``lp.WarmStart``), "warm" keeps working sets, live LPs and cut pools in an
  ``lp.WarmStart`` (epochs 2+); medians over ``--repeats`` passes through the epochs.
  ``--hinge-only --modes cold`` runs on releases without ``lp.WarmStart`` too: with
  ``PYTHONPATH`` at a checkout of another revision (and ``STRUCTTORCH_NO_EXTENSION=1`` when its
  kernels would rebuild the cached ones), it measures that revision on the same instances.

    python benchmarks/lp_layers.py [--sizes 16 32] [--epochs 4] [--repeats 3] [--no-cvxpylayers]
        [--smoothing 0.5] [--layers-only] [--hinge-only] [--modes cold warm ...]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from timing import median_time

from structtorch import lp, use_backend
from structtorch.data import synthetic_objects

B = 8


def instances(H: int, epochs: int, seed: int = 0):
    """(unary per epoch [(B, V, 2)], pairwise (E, 2, 2), edges, target (B, V))."""
    data = synthetic_objects(B, "bar", H=H, W=H, num_features=4, noise=1.0, seed=seed)
    g = torch.Generator().manual_seed(seed)
    unary = torch.zeros(B, H * H, 2, dtype=torch.float64)
    unary[..., 1] = (2 * data.labels - 1).double() + torch.randn(B, H * H, generator=g, dtype=torch.float64)
    per_epoch = []
    for _ in range(epochs):
        unary = unary + 0.2 * torch.randn(unary.shape, generator=g, dtype=torch.float64)
        per_epoch.append(unary.clone())
    pairwise = torch.zeros(len(data.edges), 2, 2, dtype=torch.float64)
    pairwise[:, 0, 0] = pairwise[:, 1, 1] = 0.8
    return per_epoch, pairwise, data.edges, data.labels


def timed(fn, repeats: int) -> float:
    """Median seconds of ``repeats`` calls after one warm-up."""
    return median_time(fn, 0.0, torch.device("cpu"), min_runs=repeats, max_runs=repeats)


def backbone_time(H: int, repeats: int) -> float | None:
    try:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
        from vision_segmentation import Backbone
    except ImportError:  # torchvision is an extra
        return None
    torch.manual_seed(0)
    net = Backbone((H, H))
    images = torch.rand(B, 3, 4 * H, 4 * H)

    def step():
        net.zero_grad()
        net(images).square().sum().backward()

    return timed(step, repeats)


def layer_rows(unary, pairwise, edges, cuts, repeats: int, with_cvxpylayers: bool, smoothing: float) -> dict:
    """{solver: (seconds, mu, grad)} for MAPRelaxation forward+backward."""
    weights = torch.randn(unary.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    out = {}
    for solver in ("qp", "cvxpylayers") if with_cvxpylayers else ("qp",):
        layer = lp.MAPRelaxation(edges, 2, smoothing=smoothing, max_cuts=16, solver=solver, num_workers=1)
        result = {}

        def step(layer=layer, result=result):
            u = unary.clone().requires_grad_()
            mu = layer(u, pairwise, cuts)
            (mu * weights).sum().backward()
            result["mu"], result["grad"] = mu.detach(), u.grad

        out[solver] = (timed(step, repeats), result["mu"], result["grad"])
    return out


MODES = ("python oracle", "cold", "cuts carried", "warm")


def hinge_rows(per_epoch, pairwise, edges, target, connectivity: dict, repeats: int,
               modes: tuple[str, ...] = MODES) -> dict:
    """{mode: [seconds per call]} for relaxed_hinge forward+backward: epoch 1 cold, and epochs 2+
    of each mode, over ``repeats`` passes through the epochs (fresh working sets each)."""
    options = {"normalize": False, "max_iter": 10, "num_workers": 1, **connectivity}
    ids = list(range(B))
    out = {"epoch 1": [], **{mode: [] for mode in modes}}
    for _ in range(repeats):
        warm, carried = (lp.WarmStart() if "warm" in modes else None), [[] for _ in ids]
        for epoch, unary in enumerate(per_epoch):
            for mode in modes:
                u = unary.clone().requires_grad_()
                t0 = time.perf_counter()
                if mode == "warm":
                    loss = lp.relaxed_hinge(u, pairwise, edges, target, warm_start=warm, ids=ids, **options)
                else:
                    cuts = carried if mode == "cuts carried" else None
                    with use_backend("torch" if mode == "python oracle" else None):
                        loss, res = lp.relaxed_hinge(u, pairwise, edges, target, return_result=True,
                                                     cuts=cuts, **options)
                    if mode == "cuts carried":
                        carried = res.cuts
                loss.backward()
                seconds = time.perf_counter() - t0
                if epoch > 0:
                    out[mode].append(seconds)
                elif mode == "cold":
                    out["epoch 1"].append(seconds)
    return out


def ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{1e3 * seconds:.1f} ms"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="*", default=[16, 32])
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--no-cvxpylayers", action="store_true")
    p.add_argument("--smoothing", type=float, default=0.5, help="MAPRelaxation's (the example's 0.5)")
    p.add_argument("--layers-only", action="store_true", help="skip the relaxed hinge tables")
    p.add_argument("--hinge-only", action="store_true", help="skip the backbone and the layers")
    p.add_argument("--modes", nargs="*", default=list(MODES), choices=MODES,
                   help="relaxed hinge modes (\"cold\" alone also runs on releases before lp.WarmStart)")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    print(f"# torch {torch.__version__}, structtorch from {Path(lp.__file__).parents[1]}, 1 thread, B = {B}, "
          "two labels, Potts 0.8")
    for H in args.sizes:
        per_epoch, pairwise, edges, target = instances(H, args.epochs)
        backbone = None if args.hinge_only else backbone_time(H, args.repeats)
        print(f"\n## {H} x {H} grid (V = {H * H}, E = {len(edges)}); backbone fwd+bwd {ms(backbone)}\n")

        def ref(t: float, backbone: float | None = backbone) -> str:
            return f"{t / backbone:.2f}x" if backbone else "-"

        if not args.hinge_only:
            layer_table(per_epoch, pairwise, edges, args, ref)
        if not args.layers_only:
            hinge_table(per_epoch, pairwise, edges, target, args, ref)


def layer_table(per_epoch, pairwise, edges, args: argparse.Namespace, ref) -> None:
    """MAPRelaxation's QP path against cvxpylayers, without cuts and with a cut block."""
    warm = lp.WarmStart()
    for unary in per_epoch:  # each image's working set under hard connectivity: the cut block's rows
        res = lp.map_lp(unary, pairwise, edges, connected=[1], warm_start=warm, keys=list(range(B)))
    block = [found[-16:] for found in res.cuts]
    print(f"MAPRelaxation with smoothing {args.smoothing}:\n")
    print("| layer (fwd+bwd per batch) | qp | cvxpylayers | qp / cvxpylayers | qp / backbone "
          "| max |mu diff| | grad rel. diff |")
    print("|---|---|---|---|---|---|---|")
    for name, cuts in (("MAPRelaxation, no cuts", None), ("MAPRelaxation, 16 cuts per image", block)):
        rows = layer_rows(per_epoch[-1], pairwise, edges, cuts, args.repeats, not args.no_cvxpylayers,
                          args.smoothing)
        t_qp, mu_qp, g_qp = rows["qp"]
        if "cvxpylayers" in rows:
            t_cvx, mu_cvx, g_cvx = rows["cvxpylayers"]
            diff = f"{float((mu_qp - mu_cvx).abs().max()):.1e}"
            grad = f"{float((g_qp - g_cvx).norm() / g_cvx.norm().clamp(min=1e-300)):.1e}"
            print(f"| {name} | {ms(t_qp)} | {ms(t_cvx)} | {t_qp / t_cvx:.3f} | {ref(t_qp)} | {diff} "
                  f"| {grad} |")
        else:
            print(f"| {name} | {ms(t_qp)} | - | - | {ref(t_qp)} | - | - |")


def hinge_table(per_epoch, pairwise, edges, target, args: argparse.Namespace, ref) -> None:
    """relaxed_hinge per mode, hard and soft connectivity ("-" for the modes not run)."""
    print("\n| relaxed_hinge (fwd+bwd per batch) | epoch 1, cold | epochs 2+: cold, Python oracle | cold "
          "| cuts carried | warm | warm / cold, Python oracle | warm / backbone |")
    print("|---|---|---|---|---|---|---|---|")
    soft = {"connected_soft": {1: 0.5}}
    for name, conn in (("hard connectivity", {"connected": [1]}), ("soft connectivity (0.5)", soft)):
        rows = hinge_rows(per_epoch, pairwise, edges, target, conn, args.repeats, tuple(args.modes))
        t = {k: statistics.median(v) if v else None for k, v in rows.items()}
        t = {mode: t.get(mode) for mode in ("epoch 1", *MODES)}
        gain = f"{t['warm'] / t['python oracle']:.2f}" if t["warm"] and t["python oracle"] else "-"
        per_backbone = ref(t["warm"]) if t["warm"] else "-"
        print(f"| {name} | {ms(t['epoch 1'])} | {ms(t['python oracle'])} | {ms(t['cold'])} | "
              f"{ms(t['cuts carried'])} | {ms(t['warm'])} | {gain} | {per_backbone} |")


if __name__ == "__main__":
    main()
