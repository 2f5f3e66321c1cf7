"""Overhead of the structured layer in a neural tagger: a BiLSTM encoder's forward+backward against
the CRF negative log-likelihood's and the slack-rescaled hinge's (forward+backward through the
emissions), measured side by side; also the same step under torch.autocast(bfloat16) and compiled
with torch.compile. Prints median milliseconds per training step and the ratio to the encoder.

    python benchmarks/neural.py [--device cuda] [--batch 32 --length 50 --labels 10]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import structtorch as st


def median_ms(fn, device: str, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        if device == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return 1e3 * statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=50)
    parser.add_argument("--labels", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    dev, B, T, N = args.device, args.batch, args.length, args.labels
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(64, 128, batch_first=True, bidirectional=True).to(dev)
    head = torch.nn.Linear(256, N).to(dev)
    crf = st.LinearChainCRF(N).to(dev)
    hinge = st.StructuredHingeLoss("slack")
    x = torch.randn(B, T, 64, device=dev)
    y = torch.randint(0, N, (B, T), device=dev)
    lengths = torch.randint(T // 2, T + 1, (B,), device=dev)

    def encoder():
        return head(lstm(x)[0])

    def encoder_step():
        encoder().square().mean().backward()

    emissions = encoder().detach().requires_grad_()

    def crf_step():
        crf(emissions, y, lengths=lengths).mean().backward()

    def hinge_step():
        hinge(emissions, crf.transitions, y, start=crf.start, end=crf.end, lengths=lengths).backward()

    def full_step():
        crf(encoder(), y, lengths=lengths).mean().backward()

    def amp_step():
        with torch.autocast(device_type=dev, dtype=torch.bfloat16):
            loss = crf(encoder(), y, lengths=lengths).mean()
        loss.backward()

    compiled_crf = torch.compile(lambda e: crf(e, y, lengths=lengths).mean(), fullgraph=True)

    def compiled_crf_step():
        compiled_crf(emissions).backward()

    rows = [("BiLSTM encoder fwd+bwd", encoder_step), ("CRF NLL fwd+bwd", crf_step),
            ("slack hinge fwd+bwd", hinge_step), ("encoder + CRF step", full_step),
            ("encoder + CRF step, autocast bf16", amp_step), ("CRF NLL, torch.compile", compiled_crf_step)]
    base = None
    print(f"device {dev}, B={B}, T={T}, N={N}, backend for these tensors: {st._backend.backend_for(x)}")
    print("| step | median ms | vs encoder |\n|---|---|---|")
    for name, fn in rows:
        ms = median_ms(fn, dev, args.repeats)
        base = base or ms
        print(f"| {name} | {ms:.2f} | {ms / base:.2f} |")


if __name__ == "__main__":
    main()
