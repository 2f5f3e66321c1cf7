"""GPU benchmark: every dynamic program on CUDA, structtorch's Triton kernels against its own PyTorch
loops and the peers (torch-struct, pytorch-crf, flash-semicrf), side by side in one run, and one
structured training step eager against its CUDA-graph replay.

Prints markdown tables of median times (CUDA events around each call, after a warm-up call; repeats
within --budget seconds per case), the ratios structtorch-triton / peer (< 1: structtorch is faster)
and the peak CUDA memory of each structtorch call. structtorch's Triton calls are timed with value
checks off and on (``structtorch.set_validation(False / True)``: the "triton" and "+checks" columns);
its PyTorch loops and the ratios use checks off. Peers that are not installed are noted and skipped;
a peer (or a structtorch call) that raises gets "error" in its cell and a note at the end, and the
run goes on; torch-struct is skipped where its scan would need more than --ts-max-gb; the PyTorch
loops are skipped, without being run, at T above --loop-max-t (one kernel launch per time step).

flash-semicrf is timed through ``semi_crf_streaming_forward`` on the cumulative content sums, the
transitions and the length scores at the same (B, T, K = max_len, C = N): the same O(T K C^2) work,
but its model's conventions differ from ours (its log-partition of the same inputs is not ours), so
only times are compared.

The last table times one training step (an MLP emission layer over random features, the structured
hinge with slack or margin rescaling on the chain or the ``LinearChainCRF`` NLL, backward, a
``capturable`` Adam step; see benchmarks/train_step.py) eager with checks off and on, and as the
replay of a CUDA graph captured with checks off. A step whose capture fails says "capture failed:
<reason>" (a host synchronization inside it, for one) and the run goes on.

--smoke runs every table at tiny sizes on CPU tensors in Triton's interpreter (TRITON_INTERPRET=1),
timed with perf_counter, without CUDA graphs ("-"): it checks that the script runs, not speed.

    python benchmarks/gpu.py [--budget 0.5] [--quick] [--smoke] [--loop-max-t 10000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from chain import crf_cases, fmt, structtorch_cases, ts_cases  # noqa: E402
from chain import inputs as chain_inputs  # noqa: E402
from semimarkov import inputs as semi_inputs  # noqa: E402
from semimarkov import ours as semi_cases  # noqa: E402
from semimarkov import torch_struct_cases  # noqa: E402
from train_step import LOSSES, capture, training_step  # noqa: E402

import structtorch as st  # noqa: E402

CHAIN = [(32, 128, 16), (32, 512, 16), (8, 2000, 4), (64, 256, 64), (1, 10000, 8), (256, 128, 32),
         (64, 1024, 128)]
SEMI = [(8, 200, 20, 4), (4, 1000, 50, 4), (1, 100000, 1000, 4)]
HAMMING = [(16, 500, 8), (64, 200, 16)]
STEP = [(16, 64, 8), (32, 128, 16), (64, 256, 32)]
DEV = torch.device("cuda")
# --smoke: the script runs, at tiny sizes
SMOKE = dict(chain=[(2, 5, 3)], semi=[(2, 6, 3, 2)], hamming=[(2, 5, 3)], step=[(2, 5, 3)])
NOTES: list[str] = []
MIN_RUNS = 3  # repeats timed at least, after the warm-up call (1 in --smoke)


def short(e: BaseException, root: bool = False) -> str:
    """The first line of an exception's message, short and safe inside a markdown cell; with
    ``root``, of the first exception of its chain (a failed CUDA-graph capture raises again when the
    capture ends: the first error says why)."""
    while root and e.__context__ is not None:
        e = e.__context__
    lines = str(e).strip().splitlines()
    text = lines[0] if lines else type(e).__name__
    text = text.replace("|", "/")
    return text if len(text) <= 120 else text[:117] + "..."


def attempt(what: str, fn, *args):
    """``fn(*args)``, or "error" (and a note naming ``what``) when it raises: the run goes on."""
    try:
        return fn(*args)
    except Exception as e:  # noqa: BLE001 - one failing case must not end the run
        NOTES.append(f"{what}: {type(e).__name__}: {short(e)}")
        if DEV.type == "cuda":
            try:
                torch.cuda.synchronize()
                torch.cuda.empty_cache()  # after an out-of-memory error
            except Exception:  # noqa: BLE001, S110 - a dead context fails the later cells, noted there
                pass
        return "error"


def median_time(fn, budget: float, max_runs: int = 50) -> float:
    """Median seconds of ``fn()`` after one warm-up call, repeating within ``budget`` seconds: CUDA
    events recorded around each call on the current stream (perf_counter in --smoke on CPU)."""
    cuda = DEV.type == "cuda"
    fn()
    if cuda:
        torch.cuda.synchronize()
    times: list[float] = []
    began = time.perf_counter()
    while len(times) < MIN_RUNS or (len(times) < max_runs and time.perf_counter() - began < budget):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def peak_mb(fn) -> float | None:
    if DEV.type != "cuda":
        return None
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2**20


def cell(value) -> str:
    return fmt(value) if value is None or isinstance(value, float) else str(value)


def ratio(ours, peer) -> str:
    return f"{ours / peer:.3f}" if isinstance(ours, float) and isinstance(peer, float) else "-"


def table(title: str, header: list[str]) -> None:
    print(f"\n### {title}\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))


def row(cells) -> None:
    print("| " + " | ".join(str(c) for c in cells) + " |", flush=True)


def peer_cases(what: str, build, *args):
    """A peer's cases (a dict), or why it has none (a string); a builder that raises is noted."""
    cases = attempt(f"{what}, building its inputs", build, *args)
    return "not installed" if cases is None else cases


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


def compare(label: str, T: int, ours: dict, loop: dict, peers: dict[str, dict | str], args) -> None:
    """One row per op: triton time with checks off and on, peak MB, the torch loop, each peer, and
    the ratios triton (checks off) / other. Every timing is attempted on its own."""
    for name, p in peers.items():
        if not isinstance(p, dict) and p != "error":
            NOTES.append(f"{name} at ({label}): {p}")
    if T > args.loop_max_t:
        NOTES.append(f"torch loop at ({label}): skipped, T = {T} > --loop-max-t {args.loop_max_t}")
    for op, fn in ours.items():
        at = f"{op} at ({label})"
        with st.use_backend("triton"):
            with st.set_validation(False):
                t = attempt(f"structtorch triton {at}", median_time, fn, args.budget)
                mb = attempt(f"structtorch triton {at}, peak memory", peak_mb, fn)
            with st.set_validation(True):
                t_on = attempt(f"structtorch triton {at}, checks on", median_time, fn, args.budget)
        t_loop = "skipped"
        if T <= args.loop_max_t:
            with st.use_backend("torch"), st.set_validation(False):
                t_loop = attempt(f"structtorch torch loop {at}", median_time, loop[op], args.budget)
        mb = mb if isinstance(mb, str) else "-" if mb is None else f"{mb:.0f}"
        cells = [label, op, cell(t), cell(t_on), ratio(t_on, t), mb, cell(t_loop), ratio(t, t_loop)]
        for name, p in peers.items():
            pt = attempt(f"{name} {at}", median_time, p[op], args.budget) if isinstance(p, dict) else None
            pt = "error" if p == "error" else pt  # its builder raised (noted once)
            cells += [cell(pt), ratio(t, pt)]
        row(cells)


def step_row(B: int, T: int, N: int, loss_name: str, args) -> None:
    """Eager training step with checks off and on, and its CUDA-graph replay (captured checks off)."""
    label = f"{B},{T},{N}"
    at = f"{loss_name} step at ({label})"
    with st.use_backend("triton"):
        step = attempt(f"{at}, building it", training_step, loss_name, B, T, N, DEV)
        if isinstance(step, str):
            row([label, loss_name, step, "-", "-", "-", "-"])
            return
        with st.set_validation(False):
            eager = attempt(f"{at}, eager", median_time, step, args.budget)
        with st.set_validation(True):
            eager_on = attempt(f"{at}, eager, checks on", median_time, step, args.budget)
        graph_t = "-"
        if DEV.type == "cuda":
            with st.set_validation(False):
                try:
                    graph, _ = capture(step)
                except Exception as e:  # noqa: BLE001 - a failed capture is a result, not the end
                    graph_t = f"capture failed: {short(e, root=True)}"
                    NOTES.append(f"{at}, CUDA-graph capture: {type(e).__name__}: {short(e)}")
                    try:
                        torch.cuda.synchronize()
                    except Exception as e2:  # noqa: BLE001
                        NOTES.append(f"{at}, after the failed capture: {short(e2)}")
                else:
                    graph_t = attempt(f"{at}, graph replay", median_time, graph.replay, args.budget)
                    del graph
    row([label, loss_name, cell(eager), cell(eager_on), ratio(eager_on, eager), cell(graph_t),
         ratio(graph_t, eager)])


def version(module: str) -> str:
    try:
        return __import__(module).__version__
    except Exception:  # noqa: BLE001
        return "not installed"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--budget", type=float, default=0.5, help="seconds of repeats per case")
    p.add_argument("--ts-max-gb", type=float, default=16.0)
    p.add_argument("--loop-max-t", type=int, default=10000,
                   help="skip the PyTorch loops (not run at all) at sequence lengths above this")
    p.add_argument("--quick", action="store_true", help="the first two sizes of each table only")
    p.add_argument("--smoke", action="store_true",
                   help="tiny sizes on CPU tensors (Triton's interpreter): checks that the script runs")
    args = p.parse_args()
    global DEV, MIN_RUNS
    if args.smoke:
        DEV, MIN_RUNS = torch.device("cpu"), 1
        args.budget = 0.0
    elif not torch.cuda.is_available():
        raise SystemExit("benchmarks/gpu.py needs a CUDA device (or --smoke)")
    sizes = SMOKE if args.smoke else dict(chain=CHAIN, semi=SEMI, hamming=HAMMING, step=STEP)
    pick = (lambda xs: xs[:2]) if args.quick else (lambda xs: xs)
    name = torch.cuda.get_device_properties(0).name if DEV.type == "cuda" else "CPU (smoke run)"
    date = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(f"# {name}, torch {torch.__version__}, triton {version('triton')}, structtorch {st.__version__}, "
          f"{date}; float32 inputs")
    timing = "CUDA events" if DEV.type == "cuda" else "perf_counter (smoke run)"
    print(f"\nMedian per call over repeats after one warm-up call, timed with {timing}. \"triton\": "
          "value checks off, \"+checks\": on (ratio +checks/triton); the other ratios are triton "
          "(checks off) / the column before (< 1: structtorch is faster).")
    ours_cols = ["triton", "+checks", "on/off", "peak MB", "torch loop", "tr/loop"]

    table("Linear chain", ["B,T,N", "op", *ours_cols, "pytorch-crf", "tr/crf", "torch-struct", "tr/ts"])
    for B, T, N in pick(sizes["chain"]):
        label = f"{B},{T},{N}"
        u, A, s, e = chain_inputs(B, T, N, DEV)
        cases = structtorch_cases(u, A, s, e)
        peers = {"pytorch-crf": peer_cases(f"pytorch-crf at ({label})", crf_cases, u, A, s, e),
                 "torch-struct": peer_cases(f"torch-struct at ({label})", ts_cases, u, A, s, e,
                                            args.ts_max_gb)}
        compare(label, T, cases, cases, peers, args)

    table("Semi-Markov", ["B,T,S,N", "op", *ours_cols, "flash-semicrf", "tr/flash", "torch-struct", "tr/ts"])
    for B, T, S, N in pick(sizes["semi"]):
        label = f"{B},{T},{S},{N}"
        content, A, length = (x.to(DEV) for x in semi_inputs(B, T, S, N))
        cases = semi_cases(content, A, length)
        peers = {"flash-semicrf": peer_cases(f"flash-semicrf at ({label})", flash_cases, content, A, length),
                 "torch-struct": peer_cases(f"torch-struct at ({label})", torch_struct_cases, content, A,
                                            length, args.ts_max_gb)}
        compare(label, T, cases, cases, peers, args)

    table("Loss-augmented Viterbi, slack rescaling (Hamming table)", ["B,T,N", "op", *ours_cols])
    for B, T, N in pick(sizes["hamming"]):
        g = torch.Generator().manual_seed(0)
        u, A = torch.randn(B, T, N, generator=g).to(DEV), torch.randn(N, N, generator=g).to(DEV)
        y = torch.randint(0, N, (B, T), generator=g).to(DEV)
        cases = {"slack": lambda u=u, A=A, y=y: st.loss_augmented(u, A, y, rescaling="slack")}
        compare(f"{B},{T},{N}", T, cases, cases, {}, args)

    table("Training step (MLP emissions, structured loss, backward, Adam): eager vs CUDA graph",
          ["B,T,N", "loss", "eager", "eager +checks", "on/off", "graph replay", "graph/eager"])
    for B, T, N in pick(sizes["step"]):
        for loss_name in LOSSES:
            step_row(B, T, N, loss_name, args)

    print()
    for n in NOTES:
        print("note:", n)


if __name__ == "__main__":
    main()
