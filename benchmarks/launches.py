"""GPU launches and host syncs per public call, counted on CPU.

Runs every call of ``tests/budget.py`` (each under every option set) on the "triton" backend in
Triton's interpreter and prints, per call and T, the Triton launches, the other leaf ATen ops (each
a CUDA launch) and the host syncs, with validation off and on (see :mod:`structtorch.profiling`).
No GPU needed; the figures are op counts, not times.

    .venv/bin/python benchmarks/launches.py [--T 12 40] [--match loss_augmented]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")  # before Triton is imported
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import structtorch as st  # noqa: E402
from structtorch.profiling import device_ops  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--T", type=int, nargs="+", default=[12, 40])
    parser.add_argument("--names", action="store_true", help="list the ops of each call")
    parser.add_argument("--match", default="", help="only the calls whose name contains this")
    args = parser.parse_args()
    from budget import CALLS

    columns = (f"T={T} launches / ops / syncs (validation off; on)" for T in args.T)
    print("| call | " + " | ".join(columns) + " |")
    print("|---" * (len(args.T) + 1) + "|")
    for name, make in CALLS.items():
        if args.match not in name:
            continue
        cells, names = [], None
        for T in args.T:
            row = []
            for validate in (False, True):
                st.set_validation(validate)
                with st.use_backend("triton"):
                    fn = make(T)
                    fn()  # warm: compiled kernels, lazy imports
                    counts = device_ops(fn)
                row.append(counts)
                if not validate and names is None:
                    names = counts.names
            off, on = row
            cells.append(f"{off.launches} / {off.ops} / {off.syncs}; {on.launches} / {on.ops} / {on.syncs}")
        st.set_validation(True)
        print(f"| {name} | " + " | ".join(cells) + " |")
        if args.names:
            print("   ", dict(names.most_common()))


if __name__ == "__main__":
    main()
