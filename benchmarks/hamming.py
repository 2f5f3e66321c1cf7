"""Loss-augmented Viterbi benchmark: the Hamming-dimension table against plain Viterbi.

Median wall times on random float32 chains (shared transitions, Hamming loss h(k) = k) for
slack rescaling (forward, and forward + subgradient), margin rescaling through the table
(``algorithm="hamming"``) and through the O(T N^2) fold (``algorithm="auto"``), plain Viterbi of the
same size, and the batched PyTorch loop over t (the compiled kernel disabled) as the simple
reference. No peer library computes slack-rescaled inference.

    python benchmarks/hamming.py [--threads 1] [--budget 1.0]
    python benchmarks/hamming.py --busy    # under load: default threads against one
"""

from __future__ import annotations

import argparse

import torch
from busy import busy_table
from chain import fmt, median_time

import structtorch as st

SIZES = [(1, 100, 4), (1, 2000, 4), (32, 100, 4), (16, 500, 8)]


def cases(u, A, y):
    def slack_grad():
        uu, AA = u.detach().requires_grad_(), A.detach().requires_grad_()
        st.loss_augmented(uu, AA, y, rescaling="slack")[0].sum().backward()

    return {
        "slack": lambda: st.loss_augmented(u, A, y, rescaling="slack"),
        "slack+subgrad": slack_grad,
        "margin (table)": lambda: st.loss_augmented(u, A, y, algorithm="hamming"),
        "margin (fold)": lambda: st.loss_augmented(u, A, y),
        "viterbi": lambda: st.viterbi(u, A),
    }


def problem(B: int, T: int, N: int):
    g = torch.Generator().manual_seed(0)
    u, A = torch.randn(B, T, N, generator=g), torch.randn(N, N, generator=g)
    return u, A, torch.randint(0, N, (B, T), generator=g)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--budget", type=float, default=1.0)
    p.add_argument("--busy", action="store_true", help="time structtorch beside a competing busy process")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device("cpu")
    if args.busy:
        busy_table({f"{op} {B},{T},{N}": fn for B, T, N in SIZES
                    for op, fn in cases(*problem(B, T, N)).items()}, args.budget)
        return
    print(f"# structtorch {st.__version__}, torch {torch.__version__}, threads {torch.get_num_threads()}, "
          "float32, shared transitions, h(k) = k")
    names = list(cases(*(torch.zeros(1, 2, 2), torch.zeros(2, 2), torch.zeros(1, 2, dtype=torch.long))))
    print("| B,T,N | " + " | ".join(names) + " | torch loop (slack) | slack / viterbi | subgrad / fwd "
          "| torch loop / compiled |")
    print("|---" * (len(names) + 5) + "|")
    for B, T, N in SIZES:
        u, A, y = problem(B, T, N)
        times = {k: median_time(f, args.budget, device) for k, f in cases(u, A, y).items()}
        with st.use_backend("torch"):
            loop = median_time(lambda: st.loss_augmented(u, A, y, rescaling="slack"),  # noqa: B023
                               args.budget, device, min_runs=1, max_runs=3)
        cells = [fmt(times[k]) for k in names] + [
            fmt(loop),
            f"{times['slack'] / times['viterbi']:.0f}x",
            f"{times['slack+subgrad'] / times['slack']:.2f}",
            f"{loop / times['slack']:.0f}x",
        ]
        print(f"| {B},{T},{N} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
