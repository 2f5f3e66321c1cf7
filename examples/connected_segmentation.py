"""Learning object segmentation with connectivity (Nowozin 2009, §6.5.2, Table 8 setup).

For each object class of ``structtorch.data.synthetic_objects`` (one connected object on clutter,
16x16 grid graphs, 6 appearance features per node), three max-margin CRFs are trained by
subgradient descent on the margin-rescaled hinge with loss-augmented inference over the LP
relaxation (Hamming loss; ``structtorch.lp.relaxed_hinge``; each image's connectivity cuts are
kept from one epoch to the next):

- CRF: linear node scores W x_i and learned pairwise scores (bg-bg, fg-fg, bg-fg);
- hard: the CRF plus hard connectivity of the object (vertex-separator cuts in training and test);
- soft: the CRF plus soft connectivity with a learned weight w_soft >= 0.

Reports the per-class intersection-over-union on held-out images (as thesis Table 8) and plots
test images where connectivity fixes the CRF.

``--solver cutting_plane`` trains the CRF and the hard-connectivity model instead by n-slack cutting
planes over the LP relaxation (thesis Alg. 5) to a duality gap <= ``--tol`` through
:func:`structtorch.train.fit` (the soft model, whose weight is a softplus, is not linear in its
parameters and keeps subgradient descent); ``--classes K`` runs the first K classes.

    python examples/connected_segmentation.py [--quick] [--out examples/out/segmentation]
    python examples/connected_segmentation.py --solver cutting_plane --classes 1
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from torch import nn

import structtorch as st
from structtorch import lp
from structtorch.data import OBJECT_CLASSES, ObjectData, synthetic_objects

MODELS = ("CRF", "hard", "soft")
# LP solves per loss-augmented inference in training: an unconverged cutting-plane loop still
# gives a (weaker) subgradient, and the cuts carry over to the next epoch
TRAIN_MAX_ITER = 10


class GraphCRF(nn.Module):
    """unary = W x_i; pairwise (bg-bg, bg-fg = fg-bg, fg-fg) shared by all edges; optional w_soft."""

    def __init__(self, num_features: int, soft: bool = False) -> None:
        super().__init__()
        self.node = nn.Linear(num_features, 2, bias=False).double()
        nn.init.zeros_(self.node.weight)
        self.edge = nn.Parameter(torch.zeros(3, dtype=torch.float64))
        self.raw_soft = nn.Parameter(torch.zeros((), dtype=torch.float64)) if soft else None

    def soft_weight(self):
        return None if self.raw_soft is None else nn.functional.softplus(self.raw_soft)  # >= 0

    def forward(self, x: torch.Tensor, E: int) -> tuple[torch.Tensor, torch.Tensor]:
        bb, bf, ff = self.edge
        table = torch.stack([torch.stack([bb, bf]), torch.stack([bf, ff])])
        return self.node(x), table.expand(E, 2, 2)


def connectivity(name: str, model: GraphCRF) -> dict:
    if name == "hard":
        return {"connected": [1]}
    if name == "soft":
        return {"connected_soft": {1: model.soft_weight()}}
    return {}


def train(name: str, data: ObjectData, epochs: int, lr: float, C: float, seed: int = 0) -> GraphCRF:
    torch.manual_seed(seed)
    model = GraphCRF(data.x.shape[2], soft=name == "soft")
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    g = torch.Generator().manual_seed(seed)
    E = len(data.edges)
    cuts = [[] for _ in range(len(data))]  # per image: connectivity cuts depend on the graph only
    for _ in range(epochs):
        for idx in torch.randperm(len(data), generator=g).split(5):
            unary, pairwise = model(data.x[idx], E)
            loss, res = lp.relaxed_hinge(unary, pairwise, data.edges, data.labels[idx], normalize=False,
                                         return_result=True, cuts=[cuts[i] for i in idx.tolist()],
                                         max_iter=TRAIN_MAX_ITER, **connectivity(name, model))
            for i, found in zip(idx.tolist(), res.cuts, strict=True):
                cuts[i] = found
            penalty = 0.5 / (len(data) * C) * sum(p.pow(2).sum() for p in model.parameters())
            opt.zero_grad()
            (loss + penalty).backward()
            opt.step()
    return model


class GraphModel(nn.Module):
    """A :class:`GraphCRF` as a model of :func:`structtorch.train.fit`: node features (B, V, F) ->
    the :class:`structtorch.lp.GraphStructure` of the images (hard connectivity of the object for
    ``name="hard"``)."""

    def __init__(self, crf: GraphCRF, edges: torch.Tensor, name: str) -> None:
        super().__init__()
        self.crf, self.edges = crf, edges
        self.options = {"normalize": False, "max_iter": 50, **connectivity(name, crf)}

    def forward(self, x: torch.Tensor, lengths: torch.Tensor | None = None) -> lp.GraphStructure:
        unary, pairwise = self.crf(x, len(self.edges))
        return lp.GraphStructure(unary, pairwise, self.edges, **self.options)


def train_cutting_plane(name: str, data: ObjectData, C: float, tol: float) -> tuple[GraphCRF, dict]:
    """n-slack cutting planes over the relaxation to a duality gap <= tol. -> (model, last record)."""
    model = GraphModel(GraphCRF(data.x.shape[2]), data.edges, name)
    n, V = data.labels.shape
    train_data = st.SequenceData(data.x, data.labels, torch.full((n,), V))
    history = st.train.fit(model, train_data, st.StructuredHingeLoss(), C=C, epochs=300, solver="cutting_plane",
                           solver_options={"variant": "n_slack", "tol": tol}, progress=False, objective=False)
    return model.crf, {**history.epochs[-1], "iterations": len(history.epochs), "converged": history.converged}


@torch.no_grad()
def predict(name: str, model: GraphCRF, data: ObjectData) -> tuple[torch.Tensor, float]:
    unary, pairwise = model(data.x, len(data.edges))
    soft = connectivity(name, model)
    if "connected_soft" in soft:
        soft = {"connected_soft": {1: float(soft["connected_soft"][1])}}
    res = lp.map_lp(unary, pairwise, data.edges, max_iter=200, **soft)
    labels, frac = lp.round_labels(res.mu)
    return labels, float(frac.mean())


def iou(pred: torch.Tensor, truth: torch.Tensor) -> float:
    """Average over images of TP / (TP + FP + FN) on the object."""
    tp = ((pred == 1) & (truth == 1)).sum(1).double()
    fp_fn = (pred != truth).sum(1).double()
    return float((tp / (tp + fp_fn).clamp(min=1)).mean())


def plot(path: Path, data: ObjectData, rows: list[tuple[str, int, dict]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    H, W = data.shape if rows else (1, 1)
    fig, axes = plt.subplots(max(len(rows), 1), 5, figsize=(12, 2.6 * max(len(rows), 1)), squeeze=False)
    for r, (cls, i, preds) in enumerate(rows):
        panels = {"features (PC 1)": preds["x"][:, 0].reshape(H, W), "truth": preds["truth"].reshape(H, W)}
        panels.update({m: preds[m].reshape(H, W) for m in MODELS})
        for ax, (title, img) in zip(axes[r], panels.items(), strict=True):
            ax.imshow(img.numpy(), cmap="gray" if title != "features (PC 1)" else "coolwarm")
            ax.set_title(f"{cls} #{i}: {title}" if title == "features (PC 1)" else title, fontsize=9)
            ax.axis("off")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="one class, few images and epochs (tests)")
    parser.add_argument("--out", type=Path, default=Path("examples/out/segmentation"))
    parser.add_argument("--solver", choices=["subgradient", "cutting_plane"], default="subgradient")
    parser.add_argument("--tol", type=float, default=0.01, help="cutting planes: the duality gap to reach")
    parser.add_argument("--classes", type=int, default=None, help="the first K object classes")
    args = parser.parse_args()
    classes = OBJECT_CLASSES[:1] if args.quick else OBJECT_CLASSES[:args.classes]
    n_train, n_test, epochs = (5, 5, 1) if args.quick else (30, 40, 12)
    t0 = time.time()
    table, shown = {m: {} for m in MODELS}, []
    for cls in classes:
        train_data = synthetic_objects(n_train, cls, seed=1)
        test = synthetic_objects(n_test, cls, seed=2)
        preds = {}
        for name in MODELS:
            t1 = time.time()
            extra = ""
            if args.solver == "cutting_plane" and name != "soft":
                model, record = train_cutting_plane(name, train_data, C=1.0, tol=args.tol)
                extra = (f", {record['iterations']} iterations, {int(record['oracle_calls'])} LP oracle calls, "
                         f"objective {record['objective']:.4f}, certified gap {record['gap']:.2g}")
            else:
                model = train(name, train_data, epochs, lr=0.1, C=1.0)
            preds[name], frac = predict(name, model, test)
            table[name][cls] = iou(preds[name], test.labels)
            extra += f", w_soft {float(model.soft_weight().detach()):.2f}" if name == "soft" else ""
            print(f"{cls:5s} {name:4s}: IoU {table[name][cls]:.3f}, fractional nodes {100 * frac:.2f}%{extra} "
                  f"({time.time() - t1:.0f} s)", flush=True)
        gain = [(iou(preds["hard"][i:i + 1], test.labels[i:i + 1]) - iou(preds["CRF"][i:i + 1], test.labels[i:i + 1]), i)
                for i in range(len(test))]
        best_gain, i = max(gain)
        if best_gain > 0:
            shown.append((cls, i, {"x": test.x[i], "truth": test.labels[i], **{m: preds[m][i] for m in MODELS}}))
    lines = ["| method | " + " | ".join(classes) + " | mean |", "|---" * (len(classes) + 2) + "|"]
    for name in MODELS:
        vals = [table[name][c] for c in classes]
        lines.append(f"| {name} | " + " | ".join(f"{v:.3f}" for v in vals) + f" | {sum(vals) / len(vals):.3f} |")
    text = "\n".join(lines)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".md").write_text(f"# Per-class intersection-over-union (test images)\n\n{text}\n")
    plot(args.out.with_suffix(".png"), test, shown)
    print(f"\n{text}\n\nwrote {args.out.with_suffix('.md')} and {args.out.with_suffix('.png')} "
          f"in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
