"""GPU benchmark: every dynamic program on CUDA, structtorch's Triton kernels against its own PyTorch
loops and the peers (torch-struct, pytorch-crf, flash-semicrf), side by side in one run.

Prints markdown tables of median times (CUDA-synchronized), the ratio structtorch-triton / peer
(< 1: structtorch is faster) and the peak CUDA memory of each structtorch call. Peers that are not
installed are noted and skipped; torch-struct is skipped where its scan would need more than
--ts-max-gb; the PyTorch loops are skipped where one call would exceed --loop-max-s.

flash-semicrf is timed through ``semi_crf_streaming_forward`` on the cumulative content sums, the
transitions and the length scores at the same (B, T, K = max_len, C = N): the same O(T K C^2) work,
but its model's conventions differ from ours (its log-partition of the same inputs is not ours), so
only times are compared.

    python benchmarks/gpu.py [--budget 0.5] [--quick] [--smoke]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from chain import crf_cases, fmt, median_time, structtorch_cases, ts_cases  # noqa: E402
from chain import inputs as chain_inputs  # noqa: E402
from semimarkov import inputs as semi_inputs  # noqa: E402
from semimarkov import ours as semi_cases  # noqa: E402
from semimarkov import torch_struct_cases  # noqa: E402

import structtorch as st  # noqa: E402

CHAIN = [(32, 128, 16), (32, 512, 16), (8, 2000, 4), (64, 256, 64), (1, 10000, 8), (256, 128, 32),
         (64, 1024, 128)]
SEMI = [(8, 200, 20, 4), (4, 1000, 50, 4), (1, 100000, 1000, 4)]
HAMMING = [(16, 500, 8), (64, 200, 16)]
DEV = torch.device("cuda")
SMOKE = dict(chain=[(2, 5, 3)], semi=[(2, 6, 3, 2)], hamming=[(2, 5, 3)])  # --smoke: the script runs


def peak_mb(fn) -> float | None:
    if DEV.type != "cuda":
        return None
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2**20


def timed(fn, budget: float, loop_max_s: float | None = None):
    """Median seconds, or None when a single call exceeds ``loop_max_s`` (measured once)."""
    if loop_max_s is not None:
        t0 = time.perf_counter()
        fn()
        if DEV.type == "cuda":
            torch.cuda.synchronize()
        if time.perf_counter() - t0 > loop_max_s:
            return None
    return median_time(fn, budget, DEV, min_runs=3, max_runs=50)


def flash_cases(content, A, length):
    try:
        from flash_semicrf import semi_crf_streaming_forward
    except ImportError:
        return "not installed"
    B, T, N = content.shape
    S = length.shape[0]
    cum = torch.cat([content.new_zeros(B, 1, N), content.cumsum(1)], 1).float()
    lengths = torch.full((B,), T, device=content.device, dtype=torch.long)

    def run(semiring, grad=False):
        c = cum.detach().requires_grad_(grad)
        out = semi_crf_streaming_forward(c, A, length, lengths, S, semiring=semiring)
        if grad:
            out.sum().backward()
        return out

    return {"viterbi": lambda: run("max"), "logZ fwd": lambda: run("log"),
            "logZ fwd+bwd": lambda: run("log", True)}


def table(title: str, header: list[str]) -> None:
    print(f"\n### {title}\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))


def row(cells) -> None:
    print("| " + " | ".join(str(c) for c in cells) + " |", flush=True)


def ratio(ours, peer) -> str:
    return "-" if ours is None or peer is None else f"{ours / peer:.3f}"


def compare(label, ours: dict, loop: dict, peers: dict[str, dict], args) -> None:
    """One row per op: triton time, peak MB, torch loop, each peer and the triton/peer ratios."""
    for op, fn in ours.items():
        with st.use_backend("triton"):
            t = timed(fn, args.budget)
            mb = peak_mb(fn)
        with st.use_backend("torch"):
            t_loop = timed(loop[op], args.budget, args.loop_max_s)
        peer_times = [timed(p[op], args.budget) if isinstance(p, dict) else None for p in peers.values()]
        cells = [label, op, fmt(t), "-" if mb is None else f"{mb:.0f}", fmt(t_loop), ratio(t, t_loop)]
        for pt in peer_times:
            cells += [fmt(pt), ratio(t, pt)]
        row(cells)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--budget", type=float, default=0.5, help="seconds of repeats per case")
    p.add_argument("--ts-max-gb", type=float, default=16.0)
    p.add_argument("--loop-max-s", type=float, default=2.0, help="skip the PyTorch loop above this")
    p.add_argument("--quick", action="store_true", help="the first two sizes of each table only")
    p.add_argument("--smoke", action="store_true",
                   help="tiny sizes on CPU tensors (Triton's interpreter): checks that the script runs")
    args = p.parse_args()
    global DEV
    if args.smoke:
        DEV = torch.device("cpu")
        args.budget = 0.0
    elif not torch.cuda.is_available():
        raise SystemExit("benchmarks/gpu.py needs a CUDA device (or --smoke)")
    sizes = SMOKE if args.smoke else dict(chain=CHAIN, semi=SEMI, hamming=HAMMING)
    pick = (lambda xs: xs[:2]) if args.quick else (lambda xs: xs)
    name = torch.cuda.get_device_properties(0).name if DEV.type == "cuda" else "CPU (smoke run)"
    print(f"# structtorch {st.__version__}, torch {torch.__version__}, {name}, float32 inputs")
    notes = []

    table("Linear chain", ["B,T,N", "op", "triton", "peak MB", "torch loop", "tr/loop", "pytorch-crf",
                           "tr/crf", "torch-struct", "tr/ts"])
    for B, T, N in pick(sizes['chain']):
        u, A, s, e = chain_inputs(B, T, N, DEV)
        cases = structtorch_cases(u, A, s, e)
        peers = {"crf": crf_cases(u, A, s, e), "ts": ts_cases(u, A, s, e, args.ts_max_gb)}
        notes += [f"{k} at ({B},{T},{N}): {v or 'not installed'}" for k, v in peers.items()
                  if not isinstance(v, dict)]
        compare(f"{B},{T},{N}", cases, cases, peers, args)

    table("Semi-Markov", ["B,T,S,N", "op", "triton", "peak MB", "torch loop", "tr/loop", "flash-semicrf",
                          "tr/flash", "torch-struct", "tr/ts"])
    for B, T, S, N in pick(sizes['semi']):
        content, A, length = (x.to(DEV) for x in semi_inputs(B, T, S, N))
        cases = semi_cases(content, A, length)
        peers = {"flash": flash_cases(content, A, length),
                 "ts": torch_struct_cases(content, A, length, args.ts_max_gb)}
        notes += [f"{k} at ({B},{T},{S},{N}): {v}" for k, v in peers.items() if isinstance(v, str)]
        compare(f"{B},{T},{S},{N}", cases, cases, peers, args)

    table("Loss-augmented Viterbi, slack rescaling (Hamming table)", ["B,T,N", "op", "triton", "peak MB",
                                                                      "torch loop", "tr/loop"])
    for B, T, N in pick(sizes['hamming']):
        g = torch.Generator().manual_seed(0)
        u, A = torch.randn(B, T, N, generator=g).to(DEV), torch.randn(N, N, generator=g).to(DEV)
        y = torch.randint(0, N, (B, T), generator=g).to(DEV)
        cases = {"slack": lambda u=u, A=A, y=y: st.loss_augmented(u, A, y, rescaling="slack")}
        compare(f"{B},{T},{N}", cases, cases, {}, args)
    for n in notes:
        print("note:", n)


if __name__ == "__main__":
    main()
