"""Compile every Triton kernel ahead of time for a Hopper GPU (sm_90): no GPU needed.

Triton's interpreter (which the tests use on CPU) forgives what the compiler does not: globals that
are not constexpr, loop-carried variables whose type changes. ``test_triton.py`` runs this script
in a process without TRITON_INTERPRET. Exit code 0: all compiled; 1: failures (printed); 3: this
Triton has no ahead-of-time compile API.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

import triton

try:
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
except ImportError:
    print("this Triton has no ahead-of-time compile API")
    sys.exit(3)


def _gpu_signatures():
    """Every Triton kernel with pointer/scalar types and each constexpr combination the wrappers use."""
    from structtorch.chain import _triton as chain
    from structtorch.lossaug import _triton as hamming
    from structtorch.semimarkov import _triton as semi

    i, f64 = "i32", "*fp64"
    for x in ("*fp32", "*fp64"):
        seq = dict(unary=x, trans=x, start=x, end=x, lengths="*i64")
        for shared in (True, False):
            for viterbi in (True, False):
                sig = {**seq, "alpha": f64, "bp": "*i16" if viterbi else "*i64", "path": "*i64", "out": f64,
                       "labels": "*i64", "nll": f64, "T": i, "N": i, "ROWS": i}
                for gold in (False,) if viterbi else (False, True):
                    yield "chain forward", chain._forward_kernel, sig, dict(VITERBI=viterbi, GOLD=gold, SHARED=shared,
                                                                            BLOCK=16)
            for edges in (True, False):
                for gold in (False, True):
                    yield "chain backward", chain._backward_kernel, _chain_backward(x), dict(
                        SHARED=shared, EDGES=edges, GOLD=gold, BLOCK=16)
            sig = {**seq, "target": "*i64", "weights": "*i64", "ring": f64, "bp": "*u8", "best": f64, "last": "*i64",
                   "T": i, "N": i, "K1": i}
            yield "hamming table", hamming._table_kernel, sig, dict(SHARED=shared, BLOCK_K=16, BLOCK_J=16)
        inputs = dict(content=x, forb="*i64", length=x, boundary=x, segment=x, trans=x, start=x, end=x,
                      lengths="*i64")
        for viterbi in (True, False):
            for segment in (True, False):
                sig = {**inputs, "tracks": x, "plif": x, "alpha": f64, "inc": f64, "arg_d": "*i32", "arg_m": "*i32",
                       "out": f64, "labels": "*i64", "starts": "*i8", "T": i, "S": i, "N": i, "P": i, "low": "fp64",
                       "high": "fp64", "scale": "fp64"}
                yield "semi forward", semi._forward_kernel, sig, dict(
                    VITERBI=viterbi, HAS_SEGMENT=segment, HAS_PLIF=viterbi, BLOCK_D=16, BLOCK_N=16)
            sig = dict(grad=f64, logz=f64, alpha=f64, inc=f64, **inputs, tracks=x, plif=x, gamma=f64, delta=f64,
                       diff=f64, g_length=f64, g_boundary=f64, g_segment=f64, g_trans=f64, g_start=f64, g_end=f64,
                       t_diff=f64, g_plif=f64, T=i, S=i, N=i, P=i, low="fp64", high="fp64", scale="fp64")
            yield "semi backward", semi._backward_kernel, sig, dict(HAS_SEGMENT=viterbi, HAS_PLIF=not viterbi,
                                                                    BLOCK_D=16, BLOCK_N=16)
    x = "*fp32"  # the largest tiles the wrappers pick (N >= 64: chain tiles of 64 x 64)
    for viterbi in (True, False):
        sig = dict(unary=x, trans=x, start=x, end=x, lengths="*i64", alpha=f64, bp="*i16" if viterbi else "*i64",
                   path="*i64", out=f64, labels="*i64", nll=f64, T=i, N=i, ROWS=i)
        yield "chain forward (64)", chain._forward_kernel, sig, dict(VITERBI=viterbi, GOLD=not viterbi, SHARED=True,
                                                                     BLOCK=64)
    tile = chain.BACKWARD_TILE
    yield f"chain backward ({tile})", chain._backward_kernel, _chain_backward(x), dict(SHARED=False, EDGES=True,
                                                                                      GOLD=True, BLOCK=tile)
    sig = dict(bp="*u8", lengths="*i64", target="*i64", weights="*i64", chosen="*i64", last="*i64", path="*i64",
               broken="*i8", T=i, N=i, K1=i)
    yield "hamming backtrack", hamming._backtrack_kernel, sig, {}
    from structtorch import _triton_checks as checks

    for kind, x in [(0, "*fp32"), (0, "*fp64"), (1, "*fp64"), (2, "*fp32"), (3, "*i64"), (4, "*i64")]:
        sig = dict(x=x, n=i, flag="*i32", lo=i, hi=i, lengths=x if kind < 4 else "*i64", T=i)
        yield "value checks", checks._check_kernel, sig, dict(KIND=kind, BLOCK=checks.BLOCK)


def _chain_backward(x: str) -> dict:
    """The chain backward kernel's signature for inputs of pointer type ``x``."""
    f64 = "*fp64"
    return dict(unary=x, trans=x, end=x, lengths="*i64", alpha=f64, logz=f64, ring=f64, g_unary=f64, g_trans=f64,
                g_start=f64, g_end=f64, grad=f64, grad_stride="i32", labels="*i64", T="i32", N="i32")


def resources(cubin: bytes) -> dict[str, int]:
    """Registers (REG), stack and local memory (STACK, LOCAL: spills) per thread of a compiled
    kernel, from ``cuobjdump --dump-resource-usage`` (shipped with Triton); {} without it."""
    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    if not tool.exists():
        return {}
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([str(tool), "--dump-resource-usage", f.name], capture_output=True, text=True).stdout
    return {k: int(v) for k, v in re.findall(r"\b(REG|STACK|LOCAL):(\d+)", out)}


FLOAT64_SCALARS = {"low", "high", "scale"}  # the segment PLiFs' bounds: float64, as on CPU


def scalar_types_ok(kernel) -> bool:
    """Whether the float scalars meant as float64 are annotated so (the JIT types a Python float as
    fp32 otherwise, where the interpreter keeps float64: a difference no CPU test could see)."""
    return all(p.annotation == "fp64" for p in kernel.params if p.name in FLOAT64_SCALARS)


def main() -> int:
    failures, spills = [], []
    for name, kernel, signature, constexprs in _gpu_signatures():
        sig = {**signature, **{k: "constexpr" for k in constexprs}}
        try:
            compiled = triton.compile(ASTSource(fn=kernel, signature=sig, constexprs=constexprs),
                                      target=GPUTarget("cuda", 90, 32))
        except Exception as exc:  # noqa: BLE001 - every compile error is a finding
            failures.append(name)
            print("FAIL", name, constexprs, str(exc)[-1500:])
            continue
        if not scalar_types_ok(kernel):
            failures.append(name)
            print("FAIL", name, "float64 scalars typed fp32 by the JIT: annotate them tl.float64")
        use = resources(compiled.asm["cubin"])
        if use.get("LOCAL", 0) or use.get("STACK", 0):
            spills.append(name)
        print("ok  ", name, constexprs, " ".join(f"{k}={v}" for k, v in use.items()))
    print(f"spills: {len(spills)} of the variants", sorted(set(spills)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
