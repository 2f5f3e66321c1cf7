"""Tree benchmark: structtorch against torch-struct and SuPar, side by side, on the CPU.

Median wall times on random float32 scores of B sentences of T words:

- projective dependency trees: Viterbi (torch-struct's ``DependencyCRF.argmax``, SuPar's
  ``DependencyCRF.argmax``) and log-partition forward+backward (the arc marginals);
- non-projective trees: log-partition forward+backward (torch-struct's
  ``NonProjectiveDependencyCRF``, SuPar's ``MatrixTree``) and the best tree (SuPar's
  ``MatrixTree.argmax``, Chu-Liu-Edmonds; torch-struct has none);
- constituency trees: Viterbi and log-partition forward+backward with N labels (torch-struct's
  ``TreeCRF``; SuPar's ``ConstituencyCRF`` is unlabeled: it runs at N = 1 against ours at N = 1).

Each library gets its own conventions: torch-struct's arc potentials (B, T, T) with the root on the
diagonal, SuPar's scores[b, dependent, head] with the root at 0, SuPar's constituency fenceposts.
A peer that is not installed is skipped with a note (``pip install -e .[bench]`` brings them).

A last table times what has no peer, slack-rescaled loss-augmented inference (the count tables of
Eisner's DP and of CKY), compiled against the PyTorch reference (``use_backend("torch")``).

    python benchmarks/trees.py [--threads 1] [--budget 0.5] [--no-peers] [--no-reference]
"""

from __future__ import annotations

import argparse
import warnings

import torch
from chain import fmt, median_time

import structtorch as st

SIZES = [(16, 10), (16, 30), (32, 60), (8, 100)]
LABELS = 4


def _peer(name: str):
    try:
        return __import__(name)
    except ImportError:
        print(f"({name} is not installed: its column is skipped)")
        return None


def _backward(fn, x: torch.Tensor):
    def run():
        leaf = x.detach().requires_grad_()
        fn(leaf).sum().backward()

    return run


def cases(B: int, T: int, torch_struct, supar) -> dict[str, dict[str, object]]:
    """{row: {library: callable}} for one size."""
    g = torch.Generator().manual_seed(0)
    arcs = torch.randn(B, T + 1, T + 1, generator=g)
    spans = torch.randn(B, T, T, LABELS, generator=g)
    one = spans[..., :1].contiguous()
    lengths = torch.full((B,), T)
    rows: dict[str, dict[str, object]] = {
        "projective viterbi": {"structtorch": lambda: st.dependency_viterbi(arcs)},
        "projective logZ fwd+bwd": {"structtorch": _backward(st.dependency_log_partition, arcs)},
        "non-projective logZ fwd+bwd": {
            "structtorch": _backward(lambda a: st.dependency_log_partition(a, projective=False), arcs)},
        "non-projective best tree": {"structtorch": lambda: st.dependency_viterbi(arcs, projective=False)},
        f"CKY viterbi (N={LABELS})": {"structtorch": lambda: st.cky_viterbi(spans)},
        f"CKY logZ fwd+bwd (N={LABELS})": {"structtorch": _backward(st.cky_log_partition, spans)},
        "CKY logZ fwd+bwd (N=1)": {"structtorch": _backward(st.cky_log_partition, one)},
    }
    if torch_struct is not None:
        # torch-struct: potentials[b, h, m] over words, the root arc of m on the diagonal
        words = arcs[:, 1:, 1:].clone()
        # its argmax differentiates a max: inputs that require grad (as a network's outputs do)
        leaf, span_leaf = words.clone().requires_grad_(), spans.clone().requires_grad_()
        words.diagonal(dim1=1, dim2=2).copy_(arcs[:, 0, 1:])
        rows["projective viterbi"]["torch-struct"] = lambda: torch_struct.DependencyCRF(leaf).argmax
        rows["projective logZ fwd+bwd"]["torch-struct"] = _backward(
            lambda w: torch_struct.DependencyCRF(w).partition, words)
        rows["non-projective logZ fwd+bwd"]["torch-struct"] = _backward(
            lambda w: torch_struct.NonProjectiveDependencyCRF(w).partition, words)
        rows[f"CKY viterbi (N={LABELS})"]["torch-struct"] = lambda: torch_struct.TreeCRF(span_leaf).argmax
        rows[f"CKY logZ fwd+bwd (N={LABELS})"]["torch-struct"] = _backward(
            lambda s: torch_struct.TreeCRF(s).partition, spans)
        rows["CKY logZ fwd+bwd (N=1)"]["torch-struct"] = _backward(
            lambda s: torch_struct.TreeCRF(s).partition, one)
    if supar is not None:
        dep_head = arcs.transpose(1, 2).contiguous()  # SuPar: scores[b, dependent, head]
        fence = torch.zeros(B, T + 1, T + 1)
        fence[:, :-1, 1:] = one[..., 0]  # the span [i, j] of words is the fencepost pair (i, j + 1)
        rows["projective viterbi"]["SuPar"] = lambda: supar.structs.DependencyCRF(dep_head, lengths).argmax
        rows["projective logZ fwd+bwd"]["SuPar"] = _backward(
            lambda s: supar.structs.DependencyCRF(s, lengths).log_partition, dep_head)
        rows["non-projective logZ fwd+bwd"]["SuPar"] = _backward(
            lambda s: supar.structs.MatrixTree(s, lengths, multiroot=True).log_partition, dep_head)
        rows["non-projective best tree"]["SuPar"] = lambda: supar.structs.MatrixTree(
            dep_head, lengths, multiroot=True).argmax
        rows["CKY logZ fwd+bwd (N=1)"]["SuPar"] = _backward(
            lambda s: supar.structs.ConstituencyCRF(s, lengths).log_partition, fence)
    return rows


def _slack_cases(B: int, T: int) -> dict[str, object]:
    """{case: forward+backward of the slack-rescaled value} on random scores and gold trees."""
    g = torch.Generator().manual_seed(0)
    arcs = torch.randn(B, T + 1, T + 1, generator=g)
    heads = st.dependency_viterbi(torch.randn(B, T + 1, T + 1, generator=g))[1]
    spans = torch.randn(B, T, T, LABELS, generator=g)
    gold = st.cky_viterbi(torch.randn(B, T, T, LABELS, generator=g))[1]
    def dependency(a: torch.Tensor) -> torch.Tensor:
        return st.dependency_loss_augmented(a, heads, rescaling="slack")[0]

    def constituency(s: torch.Tensor) -> torch.Tensor:
        return st.cky_loss_augmented(s, gold, rescaling="slack")[0]

    return {"dependency (Eisner)": _backward(dependency, arcs),
            f"constituency (CKY, N={LABELS})": _backward(constituency, spans)}


def reference_table(budget: float) -> None:
    """Slack-rescaled loss-augmented inference (forward and backward), compiled and reference."""
    print("\nslack rescaling, value and gradient: compiled kernels against the PyTorch reference")
    print("| case | B,T | compiled | reference | ratio |")
    print("|---|---|---|---|---|")
    for B, T in ((16, 10), (16, 20)):
        for name, fn in _slack_cases(B, T).items():
            fast = median_time(fn, budget, torch.device("cpu"))
            with st.use_backend("torch"):
                slow = median_time(fn, budget, torch.device("cpu"), max_runs=3)
            print(f"| {name} | {B},{T} | {fmt(fast)} | {fmt(slow)} | {slow / fast:.0f}x |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--budget", type=float, default=0.5, help="seconds per timing")
    parser.add_argument("--no-peers", action="store_true", help="skip the table against the peers")
    parser.add_argument("--no-reference", action="store_true", help="skip the table against the reference")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")  # torch-struct's distribution warnings
    torch_struct = _peer("torch_struct")
    try:
        import supar
        import supar.structs  # noqa: F401 - the submodule
    except ImportError:
        print("(supar is not installed: its column is skipped)")
        supar = None
    if not args.no_peers:
        peer_table(args.budget, torch_struct, supar)
    if not args.no_reference:
        reference_table(args.budget)


def peer_table(budget: float, torch_struct, supar) -> None:
    """Every case of :func:`cases` at every size, structtorch and the installed peers."""
    peers = ["torch-struct", "SuPar"]
    print(f"CPU, {torch.get_num_threads()} thread(s); medians; ratio = peer / structtorch")
    print(f"| B,T | case | structtorch | {' | '.join(peers)} |")
    print("|---|---|---|" + "---|" * len(peers))
    for B, T in SIZES:
        for row, fns in cases(B, T, torch_struct, supar).items():
            ours = median_time(fns["structtorch"], budget, torch.device("cpu"))
            cells = []
            for peer in peers:
                if peer not in fns:
                    cells.append("-")
                    continue
                theirs = median_time(fns[peer], budget, torch.device("cpu"))
                cells.append(f"{fmt(theirs)} ({theirs / ours:.1f}x)")
            print(f"| {B},{T} | {row} | {fmt(ours)} | {' | '.join(cells)} |", flush=True)


if __name__ == "__main__":
    main()
