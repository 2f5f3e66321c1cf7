"""Handwritten words: a torchvision CNN per character feeding a LinearChainCRF, trained end to end.

Words are sequences of noisy, upscaled handwritten digits (scikit-learn's bundled 8x8 digits, no
download; ``structtorch.data.digit_sequences``) whose labels follow a strongly peaked bigram chain.
One CNN (torchvision ``Conv2dNormActivation`` blocks, or a ResNet-18 trunk built with
``weights=None`` and adapted to 1 channel and small images) scores every character, giving unary
(B, T, 10) for a ``structtorch.LinearChainCRF`` with learned transitions. Three models of the same
CNN are trained and compared on disjoint test images:

(a) CRF negative log-likelihood, Viterbi decoding;
(b) slack-rescaled structured hinge with Hamming loss (``StructuredHingeLoss``), Viterbi decoding;
(c) per-character softmax cross-entropy, argmax decoding (no transitions).

Prints a table of character and word accuracy per method and saves a figure of decoded test words.

    python examples/handwritten_words.py [--epochs 15] [--train 1000] [--device cuda] [--out words.png]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
import torchvision
from torch import Tensor, nn
from torchvision.ops import Conv2dNormActivation

import structtorch as st
from structtorch.data import DigitSequences, digit_sequences

NUM_LABELS = 10
METHODS = {
    "nll": "(a) CNN + CRF, NLL",
    "hinge": "(b) CNN + CRF, slack-rescaled hinge",
    "softmax": "(c) CNN, per-character softmax",
}
HINGE = st.StructuredHingeLoss(rescaling="slack")


def char_cnn(backbone: str = "small") -> nn.Module:
    """A CNN mapping (M, 1, H, W) character images to (M, 10) scores; no pretrained weights.

    "small": three ``torchvision.ops.Conv2dNormActivation`` blocks (32, 32, 64 channels, two 2x2
    max-pools), global average pooling and a linear layer. "resnet18": torchvision's ResNet-18 with
    a 3x3 stride-1 one-channel stem and no stem max-pool (suited to 16x16-32x32 images).
    """
    if backbone == "small":
        return nn.Sequential(
            Conv2dNormActivation(1, 32, kernel_size=3),
            Conv2dNormActivation(32, 32, kernel_size=3),
            nn.MaxPool2d(2),
            Conv2dNormActivation(32, 64, kernel_size=3),
            nn.MaxPool2d(2),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(64, NUM_LABELS),
        )
    if backbone == "resnet18":
        net = torchvision.models.resnet18(weights=None, num_classes=NUM_LABELS)
        net.conv1 = nn.Conv2d(1, 64, kernel_size=3, stride=1, padding=1, bias=False)
        net.maxpool = nn.Identity()
        return net
    raise ValueError(f"backbone must be 'small' or 'resnet18', got {backbone!r}")


def first_conv(module: nn.Module) -> nn.Conv2d:
    """The first Conv2d of ``module`` (the layer farthest from the loss)."""
    return next(m for m in module.modules() if isinstance(m, nn.Conv2d))


class WordModel(nn.Module):
    """Per-character CNN -> unary (B, T, 10) -> linear-chain CRF (transitions, start, end)."""

    def __init__(self, backbone: str = "small") -> None:
        super().__init__()
        self.cnn = char_cnn(backbone)
        self.crf = st.LinearChainCRF(NUM_LABELS)

    def unary(self, words: DigitSequences) -> Tensor:
        """Scores (B, T, 10); the CNN sees only the characters inside each length (0 beyond)."""
        mask = words.mask
        scores = self.cnn(words.images[mask])
        unary = scores.new_zeros(*mask.shape, NUM_LABELS)
        unary[mask] = scores
        return unary

    def loss(self, words: DigitSequences, method: str) -> Tensor:
        """Mean CRF NLL per word ("nll"), mean slack-rescaled hinge per word ("hinge") or mean
        cross-entropy per character ("softmax")."""
        unary = self.unary(words)
        if method == "nll":
            return self.crf(unary, words.labels, lengths=words.lengths).mean()
        if method == "hinge":
            crf = self.crf
            return HINGE(unary, crf.transitions, words.labels, start=crf.start, end=crf.end,
                         lengths=words.lengths)
        if method == "softmax":
            mask = words.mask
            return nn.functional.cross_entropy(unary[mask], words.labels[mask])
        raise ValueError(f"method must be one of {tuple(METHODS)}, got {method!r}")

    @torch.no_grad()
    def predict(self, words: DigitSequences, method: str) -> Tensor:
        """Labels (B, T): Viterbi under the CRF for "nll"/"hinge", per-character argmax for
        "softmax"; 0 beyond each length."""
        unary = self.unary(words)
        if method == "softmax":
            path = unary.argmax(-1)
        else:
            path = self.crf.decode(unary, lengths=words.lengths)[1]
        return torch.where(words.mask, path, 0)


def fit(model: WordModel, train: DigitSequences, method: str, args) -> float:
    """Adam over shuffled mini-batches of words (a larger step for the CRF's few parameters);
    returns the seconds taken."""
    opt = torch.optim.Adam([
        {"params": model.cnn.parameters(), "lr": args.lr},
        {"params": model.crf.parameters(), "lr": args.crf_lr},
    ])
    steps = args.epochs * -(-len(train) // args.batch_size)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=[args.lr, args.crf_lr], total_steps=steps)
    model.train()
    began = time.perf_counter()
    for epoch in range(args.epochs):
        total, count = 0.0, 0
        for idx in torch.randperm(len(train), device=train.lengths.device).split(args.batch_size):
            loss = model.loss(train.batch(idx), method)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            total, count = total + loss.item() * len(idx), count + len(idx)
        if args.verbose:
            print(f"  {method} epoch {epoch + 1}/{args.epochs}: mean loss {total / count:.4f}", flush=True)
    model.eval()
    return time.perf_counter() - began


@torch.no_grad()
def predict_all(model: WordModel, data: DigitSequences, method: str, batch_size: int = 256) -> Tensor:
    """Predicted labels (B, T) for every word, in batches."""
    model.eval()
    index = torch.arange(len(data), device=data.lengths.device)
    return torch.cat([model.predict(data.batch(i), method) for i in index.split(batch_size)])


def accuracies(pred: Tensor, data: DigitSequences) -> tuple[float, float]:
    """(character accuracy over the positions inside the lengths, fraction of words all right)."""
    right = (pred == data.labels) | ~data.mask
    return (right[data.mask].float().mean().item(), right.all(1).float().mean().item())


def plot(test: DigitSequences, preds: dict[str, Tensor], out: Path, num_words: int = 5) -> None:
    """A few test words (those where the methods disagree first), each character's image with its
    true label and each method's prediction (red where wrong)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    wrong = torch.stack([(p != test.labels).any(1) for p in preds.values()], 1).cpu()  # (B, methods)
    disagree = wrong.any(1) & ~wrong.all(1)
    order = torch.cat([disagree.nonzero().flatten(), (~disagree).nonzero().flatten()])[:num_words]
    T = int(test.lengths[order].max())
    fig, axes = plt.subplots(len(order), T, figsize=(1.25 * T + 1.6, 2.1 * len(order)), squeeze=False)
    images = test.images.cpu()
    for row, b in enumerate(order.tolist()):
        for t in range(T):
            ax = axes[row, t]
            ax.axis("off")
            if t >= int(test.lengths[b]):
                continue
            ax.imshow(images[b, t, 0], cmap="gray_r", interpolation="nearest")
            truth = int(test.labels[b, t])
            lines = [(f"true {truth}", "black")]
            lines += [(f"{name} {int(p[b, t])}", "black" if int(p[b, t]) == truth else "red")
                      for name, p in preds.items()]
            for k, (text, color) in enumerate(lines):
                ax.text(0.5, -0.08 - 0.17 * k, text, color=color, fontsize=7, ha="center", va="top",
                        transform=ax.transAxes)
    fig.suptitle("decoded test words (red: wrong character)", fontsize=10)
    fig.subplots_adjust(top=0.93, bottom=0.1, hspace=1.1, wspace=0.25)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--train", type=int, default=1000, help="training words")
    p.add_argument("--test", type=int, default=1000, help="test words (disjoint digit images)")
    p.add_argument("--min-length", type=int, default=3)
    p.add_argument("--max-length", type=int, default=8)
    p.add_argument("--transitions", choices=("informative", "uniform"), default="informative")
    p.add_argument("--size", type=int, default=16, help="image side after upscaling the 8x8 digits")
    p.add_argument("--noise", type=float, default=0.4, help="pixel noise std at 8x8 (ink in [0, 1])")
    p.add_argument("--backbone", choices=("small", "resnet18"), default="small")
    p.add_argument("--epochs", type=int, default=15)
    p.add_argument("--batch-size", type=int, default=32, help="words per step")
    p.add_argument("--lr", type=float, default=3e-3, help="peak learning rate of the CNN")
    p.add_argument("--crf-lr", type=float, default=0.05, help="peak learning rate of the CRF scores")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--methods", nargs="+", choices=tuple(METHODS), default=list(METHODS))
    p.add_argument("--out", type=Path, default=Path("handwritten_words.png"))
    p.add_argument("--verbose", action="store_true", help="print the mean loss per epoch")
    args = p.parse_args(argv)

    device = torch.device(args.device)
    common = dict(min_length=args.min_length, max_length=args.max_length, transitions=args.transitions,
                  size=args.size, noise=args.noise)
    train = digit_sequences(args.train, split="train", seed=args.seed, **common).to(device)
    test = digit_sequences(args.test, split="test", seed=args.seed + 1, **common).to(device)
    print(f"{len(train)} train / {len(test)} test words of {args.min_length}-{args.max_length} digits "
          f"({int(train.lengths.sum())} / {int(test.lengths.sum())} characters, disjoint images), "
          f"{args.transitions} transitions, {args.size}x{args.size} images, noise {args.noise}, "
          f"{args.backbone} CNN, {args.epochs} epochs, device {device}", flush=True)

    rows, preds = [], {}
    for method in args.methods:
        torch.manual_seed(args.seed)  # the same initial CNN for every method
        model = WordModel(args.backbone).to(device)
        seconds = fit(model, train, method, args)
        preds[method] = predict_all(model, test, method)
        rows.append((METHODS[method], *accuracies(preds[method], test), seconds))
        print(f"{METHODS[method]}: trained in {seconds:.1f} s", flush=True)

    print()
    print("| method | character accuracy | word accuracy | training time (s) |")
    print("|---|---:|---:|---:|")
    for name, char, word, seconds in rows:
        print(f"| {name} | {char:.3f} | {word:.3f} | {seconds:.1f} |")
    plot(test, {m: preds[m] for m in args.methods}, args.out)
    print(f"\nfigure saved to {args.out}")


if __name__ == "__main__":
    main()
