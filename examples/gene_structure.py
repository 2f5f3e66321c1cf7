"""Main demo: gene structure prediction with a hidden semi-Markov SVM (Rätsch & Sonnenburg 2007).

Synthetic DNA (``structtorch.data.synthetic_genes``) in four splits, as in the paper:

1. stage 1 on split 1: start/donor/acceptor/stop detectors (logistic regression on one-hot windows
   around every ATG/GT/AG/stop candidate) and exon/intron/intergenic content sensors (logistic
   regression on segment k-mer frequencies);
2. stage 2: their outputs on splits 2-4 are precomputed tracks; the HSM SVM (PLiFs with 30 support
   points of the signals at segment ends, of the content sensors' segment means and of segment
   lengths, per segment type) trains on split 2 with the structured hinge loss and the PLiF
   smoothness regularizer, C is picked on split 3, and split 4 is the test set.

``--solver cutting_plane`` trains the HSM SVM to a certificate instead (n-slack cutting planes,
duality gap <= ``--tol``; free PLiFs, for the planes need potentials linear in the weights, an L2
regularizer, and a segment-level loss, ``--loss``: "segment", the segments (start, end, label)
in the symmetric difference of the true and the predicted gene structure, or "boundary", the
positions where "a segment starts here" differs; both fold into one Viterbi per sequence);
``--solver both`` trains both and prints both rows.

The baseline is HMM-like: the same sensors in a first-order chain (per-position content scores
summed over segments, signals on the label changes, no length model, no PLiFs), trained with the
same hinge loss and decoded by plain Viterbi. Prints the metrics of the paper's Table 1 and plots
one test gene.

    python examples/gene_structure.py [--quick] [--out examples/out/gene_structure.png]
    python examples/gene_structure.py --solver both [--tol 0.01] [--loss segment|boundary]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from torch import nn

import structtorch as st
from structtorch.data import gene_grammar, synthetic_genes
from structtorch.data.gene_sensors import CONTENTS, SIGNALS, GeneSensors, gene_metrics
from structtorch.data.genes import INTERGENIC, SEGMENT_NAMES, GeneData

# segment type -> signal track at its end / content track averaged over it
SIGNAL_OF = [SIGNALS.index(s) for s in ("start", "stop", "donor", "donor", "stop", "acceptor")]
CONTENT_OF = [CONTENTS.index(c) for c in ("intergenic", "exon", "exon", "exon", "exon", "intron")]
MAX_LEN = 1000
LOSS_PER_POSITION = 0.02  # the Hamming loss counts 1/50 per mislabelled position
PAPER = {"HSM SVM": 13.1, "ExonHunter": 36.8}  # gene-structure error (%) on C. elegans, Table 1


class ChainBaseline(nn.Module):
    """HMM-like chain over segment types: content sensors per position, signals on label changes."""

    def __init__(self) -> None:
        super().__init__()
        N = len(SEGMENT_NAMES)
        self.emission = nn.Linear(len(CONTENTS), N)
        self.transition_bias = nn.Parameter(torch.zeros(N, N))
        self.signal_weight = nn.Parameter(torch.ones(N))
        self.register_buffer("allowed", gene_grammar() | torch.eye(N, dtype=torch.bool))

    def forward(self, signals: torch.Tensor, contents: torch.Tensor) -> dict[str, torch.Tensor]:
        N = len(SEGMENT_NAMES)
        unary = self.emission(contents.to(self.emission.weight.dtype))
        sig = signals[:, :-1, SIGNAL_OF].to(unary.dtype)  # (B, T-1, N): segment of label m ends at t
        finite = torch.where(torch.isinf(sig), 0.0, sig)  # no -inf * weight in the backward pass
        change = torch.where(torch.isinf(sig), sig, self.signal_weight * finite).unsqueeze(3)  # (B, T-1, m, 1)
        eye = torch.eye(N, dtype=torch.bool, device=unary.device)
        trans = torch.where(eye, self.transition_bias, self.transition_bias + change)
        trans = torch.where(self.allowed, trans, float("-inf"))
        edge = torch.where(torch.arange(N, device=unary.device) == INTERGENIC, 0.0, float("-inf")).to(unary)
        return {"unary": unary, "transitions": trans, "start": edge, "end": edge}


def chain_to_segments(path: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    inside = torch.arange(path.shape[1]) < lengths[:, None]
    starts = torch.ones_like(path, dtype=torch.bool)
    starts[:, 1:] = path[:, 1:] != path[:, :-1]
    return torch.where(inside, path, -1), starts & inside


def batches(n: int, size: int, g: torch.Generator):
    return torch.randperm(n, generator=g).split(size)


def train_hsm(tracks, data: GeneData, C: float, epochs: int, lr: float, seed: int = 0) -> st.HiddenSemiMarkovSVM:
    """Subgradient training of mean hinge + smoothness / (n C) with Adam."""
    torch.manual_seed(seed)
    model = hsm_model()
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    signals, contents = tracks
    g = torch.Generator().manual_seed(seed)
    lam = 1.0 / (len(data) * C)
    for _ in range(epochs):
        for idx in batches(len(data), 10, g):
            T = int(data.lengths[idx].max())
            weights = torch.full((len(idx), T), LOSS_PER_POSITION, dtype=torch.float64)
            loss = model.loss(signals[idx, :T], contents[idx, :T], data.labels[idx, :T], data.starts[idx, :T],
                              data.lengths[idx], weights=weights)
            opt.zero_grad()
            (loss + lam * model.smoothness()).backward()
            opt.step()
    return model


class HSMStructure(nn.Module):
    """The HSM SVM (free PLiFs) as a model of :func:`structtorch.train.fit`: x = the signal tracks,
    then the content tracks; returns the :class:`structtorch.SemiMarkovDistribution`."""

    def __init__(self, signals: int) -> None:
        super().__init__()
        self.signals = signals
        self.hsm = hsm_model(monotone=None)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor | None = None) -> st.SemiMarkovDistribution:
        pot = self.hsm(x[..., :self.signals], x[..., self.signals:], lengths)
        return st.SemiMarkovDistribution(pot.pop("content"), pot.pop("transitions"), **pot)


def hsm_model(monotone: str | None = "increasing") -> st.HiddenSemiMarkovSVM:
    return st.HiddenSemiMarkovSVM(gene_grammar(), MAX_LEN, signal_of=SIGNAL_OF, content_of=CONTENT_OF,
                                  start_labels=[INTERGENIC], end_labels=[INTERGENIC], num_points=30,
                                  signal_range=(-10.0, 10.0), content_range=(-2.0, 2.0),
                                  length_range=(1.0, float(MAX_LEN)), content_sums=True,
                                  monotone=monotone).double()


def train_hsm_cutting_plane(tracks, data: GeneData, C: float, tol: float,
                            loss: str = "segment") -> tuple[st.HiddenSemiMarkovSVM, dict]:
    """n-slack cutting planes on a segment-level ``loss`` ("segment" or "boundary") + ||w||^2 /
    (2 n C), to a duality gap <= tol.
    -> (the model, the last record: objective, dual, gap, oracle calls, time)."""
    signals, contents = tracks
    train = st.SequenceData(torch.cat([signals, contents], 2).double(), data.labels.clamp(min=0), data.lengths,
                            data.starts)
    model = HSMStructure(signals.shape[2])
    history = st.train.fit(model, train, st.StructuredHingeLoss(loss=loss), C=C, epochs=500,
                           solver="cutting_plane", solver_options={"variant": "n_slack", "tol": tol},
                           progress=False, objective=False)
    return model.hsm, {**history.epochs[-1], "iterations": len(history.epochs), "converged": history.converged}


def train_baseline(tracks, data: GeneData, epochs: int, lr: float, seed: int = 0) -> ChainBaseline:
    torch.manual_seed(seed)
    model = ChainBaseline().double()
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    hinge = st.StructuredHingeLoss()
    signals, contents = tracks
    g = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        for idx in batches(len(data), 10, g):
            T = int(data.lengths[idx].max())
            pot = model(signals[idx, :T], contents[idx, :T])
            weights = torch.full((len(idx), T), LOSS_PER_POSITION, dtype=torch.float64)
            loss = hinge(pot.pop("unary"), pot.pop("transitions"), data.labels[idx, :T].clamp(min=0),
                         lengths=data.lengths[idx], weights=weights, **pot)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model


@torch.no_grad()
def predict_hsm(model, tracks, data):
    _, labels, starts = model.decode(*tracks, data.lengths)
    return labels, starts


@torch.no_grad()
def predict_baseline(model, tracks, data):
    pot = model(*tracks)
    _, path = st.viterbi(pot.pop("unary"), pot.pop("transitions"), lengths=data.lengths, **pot)
    return chain_to_segments(path, data.lengths)


def select_C(Cs, tracks, data: GeneData, train) -> tuple[st.HiddenSemiMarkovSVM, float]:
    """Train ``train(C) -> (model, record or None)`` for each C; -> (the model of least validation
    gene error, its C)."""
    best = None
    for C in Cs:
        t1 = time.time()
        model, record = train(C)
        val = gene_metrics(*predict_hsm(model, tracks, data), data)
        note = "" if record is None else (
            f"; {record['iterations']} iterations, objective {record['objective']:.4f}, certified gap "
            f"{record['gap']:.2g}{'' if record['converged'] else ' (not converged)'}")
        print(f"HSM SVM C={C:g}: validation gene error {100 * val['gene error']:.1f}% "
              f"({time.time() - t1:.1f} s{note})", flush=True)
        if best is None or val["gene error"] < best[0]:
            best = (val["gene error"], model, C)
    return best[1], best[2]


def table(rows: dict[str, dict[str, float]]) -> str:
    keys = ["gene error", "exon Sn", "exon Sp", "nucleotide Sn", "nucleotide Sp"]
    lines = ["| method | " + " | ".join(keys) + " |", "|---" * (len(keys) + 1) + "|"]
    for name, m in rows.items():
        lines.append(f"| {name} | " + " | ".join(f"{100 * m[k]:.1f}%" for k in keys) + " |")
    return "\n".join(lines)


def plot(path: Path, data: GeneData, i: int, tracks, predictions: dict[str, tuple]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    L = int(data.lengths[i])
    signals, contents = tracks
    fig, axes = plt.subplots(3, 1, figsize=(12, 6), sharex=True, gridspec_kw={"height_ratios": [2, 2, 2]})
    kernel = torch.ones(1, 1, 51, dtype=torch.float64) / 51
    for c, name in enumerate(CONTENTS):
        smooth = nn.functional.conv1d(contents[i, :L, c].view(1, 1, L), kernel, padding=25).view(-1)
        axes[0].plot(smooth.numpy(), label=f"{name} sensor (51-bp mean)")
    axes[0].legend(loc="upper right", fontsize=7)
    axes[0].set_ylabel("content")
    for k, name in enumerate(SIGNALS):
        v = signals[i, :L, k]
        at = torch.isfinite(v) & (v > -2)
        axes[1].vlines(at.nonzero().squeeze(1).numpy(), -2, v[at].numpy(), colors=f"C{k}", label=name, lw=0.8)
    axes[1].legend(loc="upper right", fontsize=7, ncol=4)
    axes[1].set_ylabel("signal (> -2)")
    colors = {INTERGENIC: "0.85", 5: "tab:orange"}
    rows = {"truth": (data.labels[i], data.starts[i]), **{k: (v[0][i], v[1][i]) for k, v in predictions.items()}}
    for r, (labels, _) in enumerate(rows.values()):
        lab = labels[:L]
        for k in range(len(SEGMENT_NAMES)):
            pos = (lab == k).nonzero().squeeze(1).numpy()
            color = colors.get(k, "tab:blue")
            axes[2].vlines(pos, r - 0.35, r + 0.35, colors=color, lw=0.6)
    axes[2].set_yticks(range(len(rows)), list(rows))
    axes[2].set_xlabel("position (blue: exon, orange: intron, grey: intergenic)")
    fig.suptitle(f"test sequence {i}: true and predicted gene structure with the sensor tracks")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def showcase(test: GeneData, predictions: dict[str, tuple]) -> int:
    """A multi-exon test gene that the HSM SVM gets right and the chain does not (else the first)."""
    def right(name: str, i: int) -> bool:
        labels, starts = predictions[name]
        one = GeneData(test.dna[i:i + 1], test.labels[i:i + 1], test.starts[i:i + 1], test.lengths[i:i + 1])
        return gene_metrics(labels[i:i + 1], starts[i:i + 1], one)["gene error"] == 0.0

    for i in range(len(test)):
        if int(test.starts[i].sum()) > 5 and right(next(iter(predictions)), i) and not right("HMM-like chain", i):
            return i
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small splits and few epochs (for tests)")
    parser.add_argument("--epochs", type=int, default=None)
    parser.add_argument("--out", type=Path, default=Path("examples/out/gene_structure.png"))
    parser.add_argument("--solver", choices=["subgradient", "cutting_plane", "both"], default="subgradient",
                        help="how the HSM SVM trains: Adam on the hinge, or cutting planes to a certificate")
    parser.add_argument("--tol", type=float, default=0.01, help="cutting planes: the duality gap to reach")
    parser.add_argument("--loss", choices=["segment", "boundary"], default="segment",
                        help="cutting planes: the segment-level loss of the hinge")
    args = parser.parse_args()
    sizes = (60, 30, 15, 30) if args.quick else (200, 200, 60, 200)
    epochs = args.epochs or (3 if args.quick else 20)
    Cs = (1.0,) if args.quick else (0.1, 1.0, 10.0)
    torch.set_num_threads(max(torch.get_num_threads(), 1))
    t0 = time.time()
    splits = [synthetic_genes(n, seed=100 + k) for k, n in enumerate(sizes)]
    print(f"splits of {sizes} sequences, mean length {float(splits[1].lengths.float().mean()):.0f} bp")

    sensors = GeneSensors.fit(splits[0])
    tracks = [sensors.tracks(d) for d in splits]
    print(f"stage 1 (sensors on split 1): {time.time() - t0:.1f} s")

    hsms = {}
    if args.solver in ("subgradient", "both"):
        hsms["HSM SVM"] = select_C(Cs, tracks[2], splits[2],
                                   lambda C: (train_hsm(tracks[1], splits[1], C, epochs, lr=0.05), None))
    if args.solver in ("cutting_plane", "both"):
        hsms["HSM SVM, cutting planes"] = select_C(
            Cs, tracks[2], splits[2], lambda C: train_hsm_cutting_plane(tracks[1], splits[1], C, args.tol, args.loss))
    t1 = time.time()
    baseline = train_baseline(tracks[1], splits[1], epochs, lr=0.05)
    print(f"HMM-like chain baseline trained ({time.time() - t1:.1f} s)")

    test, tr = splits[3], tracks[3]
    predictions = {name: predict_hsm(model, tr, test) for name, (model, _) in hsms.items()}
    predictions["HMM-like chain"] = predict_baseline(baseline, tr, test)
    results = {name: gene_metrics(*p, test) for name, p in predictions.items()}
    chosen = ", ".join(f"{name} with C={C:g}" for name, (_, C) in hsms.items())
    print(f"\nTest split ({len(test)} sequences; {chosen}):")
    print(table(results))
    print(f"(paper, C. elegans: gene error {PAPER['HSM SVM']}% HSM SVM vs {PAPER['ExonHunter']}% ExonHunter)")
    plot(args.out, test, showcase(test, predictions), tr, predictions)
    print(f"plot: {args.out}  (total {time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
