"""Per-call time of small calls: structtorch against pytorch-crf, side by side in one process.

Small calls are host time: one sentence in a tagging service, one sequence per BCFW block step, one
small batch per GPU step. Prints the median microseconds per call of structtorch's Viterbi
(``st.viterbi`` and ``LinearChainCRF.decode``), its CRF loss forward+backward and the other public
calls at small sizes, with validation on (the default) and off, beside pytorch-crf's ``decode`` and
NLL forward+backward, and the ratio structtorch/pytorch-crf (< 0.1 is the target: ten times faster).
Default settings otherwise (adaptive threads on), one thread unless ``--threads``.

    python benchmarks/overhead.py [--threads 1] [--budget 0.5] [--profile CASE]

``--profile viterbi`` (or any case name) prints cProfile's top functions of that case instead
(validation on), for the breakdown recorded in RESULTS.md.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import time

import torch

import structtorch as st

SIZES = [(1, 10, 4), (8, 20, 4), (32, 50, 10)]


def per_call_us(fn, budget: float) -> float:
    """Median microseconds of ``fn()`` over batches of calls (a batch lasts about 2 ms), after a
    warm-up, repeating within ``budget`` seconds."""
    for _ in range(20):
        fn()
    t0 = time.perf_counter()
    fn()
    reps = max(1, int(2e-3 / max(time.perf_counter() - t0, 1e-7)))
    samples: list[float] = []
    began = time.perf_counter()
    while len(samples) < 5 or (len(samples) < 200 and time.perf_counter() - began < budget):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        samples.append((time.perf_counter() - t0) / reps * 1e6)
    return statistics.median(samples)


def chain_inputs(B: int, T: int, N: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(B, T, N, generator=g)
    tags = torch.randint(N, (B, T), generator=g)
    return u, tags


def structtorch_cases(B: int, T: int, N: int) -> dict:
    u, tags = chain_inputs(B, T, N)
    crf = st.LinearChainCRF(N)
    A, s, e = (x.detach() for x in (crf.transitions, crf.start, crf.end))
    lengths = torch.full((B,), T)
    target = tags

    def nll():
        x = u.detach().requires_grad_()
        crf(x, tags, reduction="sum").backward()

    def nll_mask():
        x = u.detach().requires_grad_()
        crf(x, tags, torch.ones(B, T, dtype=torch.bool), reduction="sum").backward()

    def logz_bwd():
        x = u.detach().requires_grad_()
        st.log_partition(x, A, start=s, end=e).sum().backward()

    return {
        "viterbi": lambda: st.viterbi(u, A, start=s, end=e),
        "decode": lambda: crf.decode(u),
        "nll fwd+bwd": nll,
        "nll fwd+bwd (mask)": nll_mask,
        "log_partition": lambda: st.log_partition(u, A, start=s, end=e, lengths=lengths),
        "logZ fwd+bwd": logz_bwd,
        "marginals": lambda: st.marginals(u, A, start=s, end=e),
        "kbest k=3": lambda: st.kbest(u, A, 3, start=s, end=e),
        "loss_augmented": lambda: st.loss_augmented(u, A, target, start=s, end=e),
    }


def semimarkov_cases(B: int, T: int, N: int, L: int) -> dict:
    g = torch.Generator().manual_seed(0)
    content, trans = torch.randn(B, T, N, generator=g), torch.randn(N, N, generator=g)
    return {
        "semimarkov_viterbi": lambda: st.semimarkov_viterbi(content, trans, max_len=L),
        "semimarkov_log_partition": lambda: st.semimarkov_log_partition(content, trans, max_len=L),
    }


def peer_cases(B: int, T: int, N: int) -> dict:
    try:
        from torchcrf import CRF
    except ImportError:
        return {}
    u, tags = chain_inputs(B, T, N)
    crf = CRF(N, batch_first=True)

    def nll():
        x = u.detach().requires_grad_()
        (-crf(x, tags, reduction="sum")).backward()

    return {"viterbi": lambda: crf.decode(u), "decode": lambda: crf.decode(u), "nll fwd+bwd": nll,
            "nll fwd+bwd (mask)": nll}


def table(budget: float) -> None:
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s); microseconds per call, medians")
    print(f"{'case':26s} {'(B, T, N)':>12s} {'valid. on':>10s} {'valid. off':>10s} {'pytorch-crf':>12s} "
          f"{'ratio':>7s}")
    for B, T, N in SIZES:
        ours, peers = structtorch_cases(B, T, N), peer_cases(B, T, N)
        for name, fn in ours.items():
            on = per_call_us(fn, budget)
            with st.set_validation(False):
                off = per_call_us(fn, budget)
            peer = per_call_us(peers[name], budget) if name in peers else None
            ratio = f"{on / peer:7.3f}" if peer else f"{'':7s}"
            peer_text = f"{peer:12.1f}" if peer else f"{'':12s}"
            print(f"{name:26s} {str((B, T, N)):>12s} {on:10.1f} {off:10.1f} {peer_text} {ratio}")
    for name, fn in semimarkov_cases(1, 50, 4, 8).items():
        on = per_call_us(fn, budget)
        with st.set_validation(False):
            off = per_call_us(fn, budget)
        print(f"{name:26s} {'(1, 50, 4) L=8':>12s} {on:10.1f} {off:10.1f}")


def profile(case: str, B: int, T: int, N: int) -> None:
    cases = {**structtorch_cases(B, T, N), **semimarkov_cases(1, 50, 4, 8)}
    fn = cases[case]
    for _ in range(50):
        fn()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(2000):
        fn()
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(25)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--budget", type=float, default=0.5, help="seconds per measurement")
    parser.add_argument("--profile", help="a case name: print its cProfile breakdown instead")
    parser.add_argument("--size", default="1,10,4", help="B,T,N of --profile")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.profile:
        profile(args.profile, *(int(v) for v in args.size.split(",")))
    else:
        table(args.budget)


if __name__ == "__main__":
    main()
