"""Semi-Markov benchmark: structtorch against torch-struct's SemiMarkovCRF, side by side.

Median wall times of Viterbi (torch-struct: ``argmax``), log-partition forward (``partition``) and
forward+backward on random float32 segment models: content (B, T, N), length scores (S, N), a
shared transition matrix. torch-struct gets the equivalent edge tensor
edge[b, s, d, c, c'] = (segment [s, s+d) with label c after label c'); it is skipped with a note
where its scan would need more than --ts-max-gb. A gene-scale case (B=1, T=100,000, S=1,000, N=4)
runs structtorch alone in a child process, which reports its peak resident memory; its Viterbi
also runs with segment-mean PLiF features (the HSM SVM's content term). A last table times the
compiled kernels that have no peer against the PyTorch reference (``use_backend("torch")``): the
log-partition with a segment PLiF (forward+backward) and the count tables of loss-augmented
inference under slack rescaling (position and segment losses).

    python benchmarks/semimarkov.py [--threads 1] [--budget 1.0] [--no-gene] [--no-reference]
    python benchmarks/semimarkov.py --busy    # under load: default threads against one
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import torch
from busy import busy_table
from chain import fmt, median_time

import structtorch as st

SIZES = [(8, 200, 20, 4), (4, 1000, 50, 4)]


def inputs(B, T, S, N, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(B, T, N, generator=g), torch.randn(N, N, generator=g),
            torch.randn(S, N, generator=g))


def ours(content, A, length):
    S = length.shape[0]

    def fwd_bwd():
        c = content.detach().requires_grad_()
        st.semimarkov_log_partition(c, A, max_len=S, length_scores=length).sum().backward()

    return {
        "viterbi": lambda: st.semimarkov_viterbi(content, A, max_len=S, length_scores=length),
        "logZ fwd": lambda: st.semimarkov_log_partition(content, A, max_len=S, length_scores=length),
        "logZ fwd+bwd": fwd_bwd,
    }


def torch_struct_cases(content, A, length, max_gb):
    try:
        import torch_struct
    except ImportError:
        return "not installed"
    B, T, N = content.shape
    S = length.shape[0]
    size = 2 ** (T - 1).bit_length()
    gb = B * size / 2 * (S * N) ** 3 * 4 / 1e9
    if gb > max_gb:
        return f"skipped: its scan allocates about {gb:.0f} GB"
    C = torch.cat([content.new_zeros(B, 1, N), content.cumsum(1)], 1)
    edge = content.new_full((B, T, S + 1, N, N), -1e9)  # on the inputs' device
    for d in range(1, S + 1):  # building the input is not timed
        seg = C[:, d:] - C[:, :-d] + length[d - 1]  # (B, T - d + 1, N): segments [s, s + d)
        edge[:, : T - d + 1, d] = seg.unsqueeze(3) + A.t()

    def fwd_bwd():
        e = edge.detach().requires_grad_()
        torch_struct.SemiMarkovCRF(e).partition.sum().backward()

    return {
        "viterbi": lambda: torch_struct.SemiMarkovCRF(edge).argmax,
        "logZ fwd": lambda: torch_struct.SemiMarkovCRF(edge).partition,
        "logZ fwd+bwd": fwd_bwd,
    }


def reference_cases(B, T, S, N):
    """The compiled-only cases: name -> fn, on float32 inputs of shape (B, T, S, N)."""
    content, A, length = inputs(B, T, S, N)
    g = torch.Generator().manual_seed(1)
    tracks, ordinates = torch.randn(B, T, N, generator=g), torch.randn(N, 30, generator=g)
    target = torch.randn(B, T, N, generator=g)
    _, labels, starts = st.semimarkov_viterbi(target, A, max_len=S, length_scores=length)

    def plif_fwd_bwd():
        c, o = content.detach().requires_grad_(), ordinates.detach().requires_grad_()
        plif = st.SegmentPLiF(tracks, o, -3.0, 3.0)
        st.semimarkov_log_partition(c, A, max_len=S, length_scores=length, segment_plif=plif).sum().backward()

    def slack(loss):
        return lambda: st.semimarkov_loss_augmented(content, A, labels, starts, max_len=S,
                                                    length_scores=length, rescaling="slack", loss=loss)

    return {"logZ fwd+bwd, segment PLiF": plif_fwd_bwd, "slack, position Hamming": slack("hamming"),
            "slack, segment loss": slack("segment")}


REFERENCE_SIZES = [(8, 200, 20, 4), (4, 300, 20, 4)]


def against_reference(budget: float) -> None:
    print("\n| B,T,S,N | op | compiled | PyTorch reference | reference / compiled |")
    print("|---|---|---|---|---|")
    cpu = torch.device("cpu")
    for size in REFERENCE_SIZES:
        for op, fn in reference_cases(*size).items():
            with st.use_backend("compiled"):
                mine = median_time(fn, budget, cpu)
            with st.use_backend("torch"):
                ref = median_time(fn, budget, cpu, min_runs=1, max_runs=3)
            print(f"| {','.join(map(str, size))} | {op} | {fmt(mine)} | {fmt(ref)} | {ref / mine:.0f}x |",
                  flush=True)


GENE = """
import json, re, time, torch, structtorch as st


def peak_mb():  # VmHWM: this process's peak RSS (ru_maxrss would inherit the parent's across exec)
    return int(re.search(r"VmHWM:\\s+(\\d+)", open("/proc/self/status").read()).group(1)) / 1024



torch.set_num_threads({threads})
g = torch.Generator().manual_seed(0)
B, T, S, N = 1, 100_000, 1_000, 4
content = torch.randn(B, T, N, generator=g)
A, length = torch.randn(N, N, generator=g), torch.randn(S, N, generator=g)
st.semimarkov_viterbi(content[:, :100], A, max_len=S, length_scores=length)
base = peak_mb()
out = {{}}
t = time.perf_counter(); st.semimarkov_viterbi(content, A, max_len=S, length_scores=length)
out["viterbi_s"] = time.perf_counter() - t
plif = st.SegmentPLiF(torch.randn(B, T, N, generator=g), torch.randn(N, 30, generator=g), -3.0, 3.0)
t = time.perf_counter(); st.semimarkov_viterbi(content, A, max_len=S, length_scores=length, segment_plif=plif)
out["viterbi_plif_s"] = time.perf_counter() - t
c = content.clone().requires_grad_()
t = time.perf_counter(); st.semimarkov_log_partition(c, A, max_len=S, length_scores=length).sum().backward()
out["fwd_bwd_s"] = time.perf_counter() - t
out["peak_rss_mb"] = peak_mb()
out["rss_growth_mb"] = peak_mb() - base
print(json.dumps(out))
"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--budget", type=float, default=1.0)
    p.add_argument("--ts-max-gb", type=float, default=4.0)
    p.add_argument("--no-gene", action="store_true")
    p.add_argument("--gene-only", action="store_true")
    p.add_argument("--no-reference", action="store_true", help="skip the compiled-vs-reference table")
    p.add_argument("--busy", action="store_true", help="time structtorch beside a competing busy process")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device("cpu")
    if args.busy:
        cases = {f"{op} {','.join(map(str, size))}": fn for size in SIZES
                 for op, fn in ours(*inputs(*size)).items()}
        cases.update({f"{op} {','.join(map(str, size))}": fn for size in REFERENCE_SIZES
                      for op, fn in reference_cases(*size).items()})
        busy_table(cases, args.budget)
        return
    print(f"# structtorch {st.__version__}, torch {torch.__version__}, "
          f"threads {torch.get_num_threads()}, float32")
    print("| B,T,S,N | op | structtorch | torch-struct | st/ts |")
    print("|---|---|---|---|---|")
    notes = []
    for B, T, S, N in [] if args.gene_only else SIZES:
        data = inputs(B, T, S, N)
        mine = {k: median_time(f, args.budget, device) for k, f in ours(*data).items()}
        peer = torch_struct_cases(*data, args.ts_max_gb)
        if isinstance(peer, str):
            notes.append(f"torch-struct at ({B},{T},{S},{N}): {peer}")
            peer = {}
        else:
            peer = {k: median_time(f, args.budget, device, min_runs=1, max_runs=3) for k, f in peer.items()}
        for op, t in mine.items():
            ts = peer.get(op)
            ratio = "-" if ts is None else f"{t / ts:.4f}"
            print(f"| {B},{T},{S},{N} | {op} | {fmt(t)} | {fmt(ts)} | {ratio} |", flush=True)
        print(f"| {B},{T},{S},{N} | fwd+bwd / fwd | {mine['logZ fwd+bwd'] / mine['logZ fwd']:.2f} | | |")
    for n in notes:
        print("note:", n)
    if not (args.no_reference or args.gene_only):
        against_reference(args.budget)
    if not args.no_gene:
        proc = subprocess.run([sys.executable, "-c", GENE.format(threads=args.threads)], capture_output=True,
                              text=True, check=True)
        gene = json.loads(proc.stdout.strip().splitlines()[-1])
        print(f"gene scale (1, 100000, 1000, 4): viterbi {gene['viterbi_s']:.2f} s "
              f"({gene['viterbi_plif_s']:.2f} s with a 30-point segment-mean PLiF), log-partition fwd+bwd "
              f"{gene['fwd_bwd_s']:.2f} s, peak RSS {gene['peak_rss_mb']:.0f} MB "
              f"(+{gene['rss_growth_mb']:.0f} MB over the process after import)")


if __name__ == "__main__":
    main()
