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
import warnings

import torch

import structtorch as st

warnings.filterwarnings("ignore", message="where received a uint8 condition", category=UserWarning)

SIZES = [(1, 10, 4), (8, 20, 4), (32, 50, 10)]


def per_call_us(fns: list, budget: float) -> list[float]:
    """Median microseconds per call of each function, measured in turns (one batch of calls of each,
    a batch lasting about 2 ms, then again) within ``budget`` seconds, so that the machine's drifts
    reach every function alike; after a warm-up."""
    reps = []
    for fn in fns:
        for _ in range(20):
            fn()
        t0 = time.perf_counter()
        fn()
        reps.append(max(1, int(2e-3 / max(time.perf_counter() - t0, 1e-7))))
    samples: list[list[float]] = [[] for _ in fns]
    began = time.perf_counter()
    while len(samples[0]) < 5 or (len(samples[0]) < 200 and time.perf_counter() - began < budget):
        for fn, n, out in zip(fns, reps, samples, strict=True):
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            out.append((time.perf_counter() - t0) / n * 1e6)
    return [statistics.median(x) for x in samples]


class _Unvalidated:
    """``fn`` called with value checks off."""

    def __init__(self, fn) -> None:
        self.fn = fn

    def __call__(self) -> None:
        with st.set_validation(False):
            self.fn()


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
    print(f"{'case':26s} {'(B, T, N)':>14s} {'valid. on':>10s} {'valid. off':>10s} {'pytorch-crf':>12s} "
          f"{'ratio':>7s}")
    rows = [((B, T, N), structtorch_cases(B, T, N), peer_cases(B, T, N)) for B, T, N in SIZES]
    rows.append(("(1, 50, 4) L=8", semimarkov_cases(1, 50, 4, 8), {}))
    for size, ours, peers in rows:
        for name, fn in ours.items():
            fns = [fn, _Unvalidated(fn)] + ([peers[name]] if name in peers else [])
            times = per_call_us(fns, budget)
            peer = f"{times[2]:12.1f} {times[0] / times[2]:7.3f}" if len(times) == 3 else ""
            print(f"{name:26s} {str(size):>14s} {times[0]:10.1f} {times[1]:10.1f} {peer}")


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
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
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
