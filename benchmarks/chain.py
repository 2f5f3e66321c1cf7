"""Linear-chain benchmark: structtorch against torch-struct and pytorch-crf, side by side.

Prints median wall times and the ratios structtorch/peer (< 1 means structtorch is faster) for
Viterbi, log-partition forward and log-partition forward+backward on random float32 inputs with
shared transitions. Peers that are not installed are skipped with a note; torch-struct is skipped
where its O(B T N^3) scan would need more than --ts-max-gb of memory.

    python benchmarks/chain.py [--threads 1] [--device cpu] [--budget 1.5] [--sizes 32,128,16 ...]
    python benchmarks/chain.py --busy    # structtorch under load: default threads against one
"""

from __future__ import annotations

import argparse

import torch
from busy import busy_table
from timing import median_time  # also imported from here by the other benchmarks

import structtorch as st

SIZES = [(32, 128, 16), (32, 512, 16), (8, 2000, 4), (64, 256, 64), (1, 10000, 8)]


def inputs(B: int, T: int, N: int, device: torch.device, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(B, T, N, generator=g)
    A, s, e = torch.randn(N, N, generator=g), torch.randn(N, generator=g), torch.randn(N, generator=g)
    return tuple(x.to(device) for x in (u, A, s, e))


def structtorch_cases(u, A, s, e):
    def fwd_bwd():
        uu = u.detach().requires_grad_()
        AA = A.detach().requires_grad_()
        st.log_partition(uu, AA, start=s, end=e).sum().backward()

    return {
        "viterbi": lambda: st.viterbi(u, A, start=s, end=e),
        "logZ fwd": lambda: st.log_partition(u, A, start=s, end=e),
        "logZ fwd+bwd": fwd_bwd,
    }


def crf_cases(u, A, s, e):
    try:
        from torchcrf import CRF
    except ImportError:
        return None
    crf = CRF(u.shape[2], batch_first=True).to(u.device)
    with torch.no_grad():
        crf.transitions.copy_(A)
        crf.start_transitions.copy_(s)
        crf.end_transitions.copy_(e)
    mask = torch.ones(u.shape[:2], dtype=torch.bool, device=u.device)

    def fwd_bwd():
        uu = u.detach().requires_grad_()
        crf._compute_normalizer(uu.transpose(0, 1), mask.t()).sum().backward()

    return {
        "viterbi": lambda: crf.decode(u, mask),
        "logZ fwd": lambda: crf._compute_normalizer(u.transpose(0, 1), mask.t()),
        "logZ fwd+bwd": fwd_bwd,
    }


def ts_cases(u, A, s, e, max_gb: float):
    try:
        import torch_struct
    except ImportError:
        return None
    B, T, N = u.shape
    if B * T * N**3 * 4 / 1e9 > max_gb:
        return "skipped: its scan needs about %.0f GB" % (B * T * N**3 * 4 / 1e9)
    # edge[b, t, next, prev] = A[prev, next] + u[b, t + 1, next]; start, u_0 and end folded in.
    edge = A.t().expand(B, T - 1, N, N) + u[:, 1:, :, None]
    edge = edge.clone()
    edge[:, 0] += (s + u[:, 0])[:, None, :]
    edge[:, -1] += e[None, :, None]

    def fwd_bwd():
        ee = edge.detach().requires_grad_()
        torch_struct.LinearChainCRF(ee).partition.sum().backward()

    return {
        "viterbi": lambda: torch_struct.LinearChainCRF(edge).argmax,
        "logZ fwd": lambda: torch_struct.LinearChainCRF(edge).partition,
        "logZ fwd+bwd": fwd_bwd,
    }


def fmt(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds * 1e3:.2f} ms" if seconds < 1 else f"{seconds:.2f} s"


def ratio(ours: float, peer: float | None) -> str:
    return "-" if peer is None else f"{ours / peer:.3f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--budget", type=float, default=1.5, help="seconds of repeats per case")
    p.add_argument("--ts-max-gb", type=float, default=4.0, help="skip torch-struct above this")
    p.add_argument("--sizes", nargs="*", default=None, help="B,T,N triples")
    p.add_argument("--busy", action="store_true", help="time structtorch beside a competing busy process")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    sizes = [tuple(int(v) for v in s.split(",")) for s in args.sizes] if args.sizes else SIZES
    st.viterbi(*inputs(1, 3, 2, device)[:2])  # build the compiled kernels before timing
    if args.busy:
        busy_table({f"{op} {B},{T},{N}": fn for B, T, N in sizes
                    for op, fn in structtorch_cases(*inputs(B, T, N, device)).items()}, args.budget)
        return
    print(f"# structtorch {st.__version__}, torch {torch.__version__}, device {device}, "
          f"threads {torch.get_num_threads()}, float32, shared transitions")
    print("| B,T,N | op | structtorch | pytorch-crf | torch-struct | st/crf | st/ts |")
    print("|---|---|---|---|---|---|---|")
    notes = []
    for B, T, N in sizes:
        data = inputs(B, T, N, device)
        ours = {k: median_time(f, args.budget, device) for k, f in structtorch_cases(*data).items()}
        peers = {}
        for name, cases in (("crf", crf_cases(*data)), ("ts", ts_cases(*data, args.ts_max_gb))):
            if isinstance(cases, dict):
                peers[name] = {k: median_time(f, args.budget, device) for k, f in cases.items()}
            else:
                notes.append(f"{name} at ({B},{T},{N}): {cases or 'not installed'}")
                peers[name] = {}
        for op, t in ours.items():
            crf, ts = peers["crf"].get(op), peers["ts"].get(op)
            cells = [f"{B},{T},{N}", op, fmt(t), fmt(crf), fmt(ts), ratio(t, crf), ratio(t, ts)]
            print("| " + " | ".join(cells) + " |", flush=True)
        print(f"| {B},{T},{N} | fwd+bwd / fwd | {ours['logZ fwd+bwd'] / ours['logZ fwd']:.2f} | | | | |")
    for n in notes:
        print("note:", n)


if __name__ == "__main__":
    main()
