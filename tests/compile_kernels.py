"""Compile every Triton kernel ahead of time for a Hopper GPU (sm_90): no GPU needed.

Triton's interpreter (which the tests use on CPU) forgives what the compiler does not: globals that
are not constexpr, loop-carried variables whose type changes. ``test_triton.py`` runs this script
in a process without TRITON_INTERPRET. Exit code 0: all compiled; 1: failures (printed); 3: this
Triton has no ahead-of-time compile API.

    python tests/compile_kernels.py [NAME_PART] [K/N]   # only kernels named with NAME_PART; every
                                                        # N-th variant from the K-th (0-based)
    python tests/compile_kernels.py --record            # compile all, write the manifest
    python tests/compile_kernels.py --skip-known        # compile what the manifest does not hold

The manifest (``tests/data/compiled_kernels.json``) holds one key per variant compiled without error
or spill: a hash of the kernel's source with the Triton functions it calls (Triton's
``cache_key``), its signature, constexprs, warps and the Triton version. ``--skip-known`` compiles
only the variants whose key is not there: a changed kernel, signature, launch setting or Triton
release is compiled and checked again, an unchanged one was checked when the manifest was written.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import triton

from structtorch._triton_common import block

try:
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
except ImportError:
    print("this Triton has no ahead-of-time compile API")
    sys.exit(3)


MANIFEST = Path(__file__).parent / "data" / "compiled_kernels.json"

NS = (2, 8, 16, 32, 64, 128, 1024)
"""The label counts whose tiles are compiled (issue 23): block(N) is 16, 32 or 64."""


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
            sig = dict(unary=x, trans=x, end=x, lengths="*i64", alpha=f64, logz=f64, grad=f64, dalpha=f64, ring=f64,
                       g_unary=f64, g_trans=f64, g_start=f64, g_end=f64, T=i, N=i)
            yield "chain marginals backward", chain._hvp_kernel, sig, dict(SHARED=shared, BLOCK=chain.BACKWARD_TILE)
            for tile in sorted({16, chain.KBEST_TILE}):
                yield f"chain kbest ({tile})", chain._kbest_kernel, _chain_kbest(x), dict(SHARED=shared, BLOCK=tile)
            yield "chain sample (16)", chain._sample_kernel, _chain_sample(x), dict(SHARED=shared, BLOCK=16)
        for bp in ("*i16", "*i32"):
            for tiles in ((16, 16), (16, 64), (64, 64)):
                sig = dict(scores=x, lengths="*i64", ring="*fp64", bp=bp, path="*i64", out="*fp64", T=i, N=i, S=i,
                           step=i, s_stride=i, DIGITS=i)
                yield f"chain window {tiles}", chain._window_kernel, sig, dict(BLOCK_O=tiles[0], BLOCK_S=tiles[1])
        inputs = dict(content=x, length=x, boundary=x, segment=x, trans=x, start=x, end=x, lengths="*i64")
        for viterbi in (True, False):
            for segment in (True, False):
                sig = {**inputs, "tracks": x, "plif": x, "alpha": f64, "inc": f64, "arg_d": "*i32", "arg_m": "*i32",
                       "out": f64, "labels": "*i64", "starts": "*i1", "target": "*i64", "target_starts": "*i1",
                       "gold": f64, "count": "*i64", "weights": f64, "T": i, "S": i, "N": i, "P": i, "low": "fp64",
                       "high": "fp64", "scale": "fp64"}
                losses = ((False, False), (True, False), (True, True)) if viterbi else ((False, False),)
                for loss, weighted in losses:  # weighted: the Hamming loss's position weights
                    for count, weights in (("*i64", "*i64"), ("*fp64", f64)) if weighted else (("*i64", f64),):
                        name = ("semi forward (weighted)" if weighted else "semi forward" if viterbi
                                else "semi forward (log-partition)")
                        yield name, semi._forward_kernel, {**sig, "count": count, "weights": weights}, dict(
                            VITERBI=viterbi, HAS_SEGMENT=segment, HAS_PLIF=viterbi and not loss, LOSS=loss,
                            WEIGHTED=weighted, ROWS=semi.SEGMENT_ROWS and not weighted, BLOCK_D=16, BLOCK_N=16)
                sig = {**inputs, "tracks": x, "plif": x, "labels": "*i64", "starts": "*i1", "out": f64, "T": i,
                       "S": i, "N": i, "P": i, "low": "fp64", "high": "fp64", "scale": "fp64"}
                yield "semi score", semi._score_kernel, sig, dict(HAS_SEGMENT=segment, HAS_PLIF=viterbi)
            sig = dict(grad=f64, logz=f64, alpha=f64, inc=f64, **inputs, tracks=x, plif=x, gamma=f64, delta=f64,
                       g_content=f64, g_length=f64, g_boundary=f64, g_segment=f64, g_trans=f64, g_start=f64,
                       g_end=f64, g_tracks=f64, g_plif=f64, T=i, S=i, N=i, P=i, low="fp64", high="fp64",
                       scale="fp64")
            for segment, plif in ((True, False), (False, True)) if viterbi else ((False, False),):
                name = "semi backward (plif)" if plif else "semi backward" if segment else "semi backward (plain)"
                yield name, semi._backward_kernel, sig, dict(
                    HAS_SEGMENT=segment, HAS_PLIF=plif, BLOCK_D=16, BLOCK_N=16)
                grads = {k: v for k, v in sig.items() if k.startswith("g_")}
                yield "semi backward zero", semi._zero_gradients_kernel, {**grads, "T": i, "S": i, "N": i, "P": i}, \
                    dict(HAS_SEGMENT=segment, HAS_PLIF=plif, BLOCK=128)
            out = dict(labels="*i64", starts="*i1")
            sig = {**inputs, "alpha": f64, "inc": f64, "uniforms": f64, **out, "B": i, "T": i, "S": i, "N": i}
            yield "semi sample", semi._sample_kernel, sig, dict(HAS_SEGMENT=viterbi, BLOCK_D=16, BLOCK_N=16)
            sig = {**inputs, "alpha": f64, "alpha_bp": "*i32", "inc": f64, "inc_bp": "*i32", "scores": f64, **out,
                   "T": i, "S": i, "N": i, "K": i}
            yield "semi kbest", semi._kbest_kernel, sig, dict(HAS_SEGMENT=viterbi, BLOCK_D=16, BLOCK_N=16)
    x = "*fp32"  # every tile the wrappers pick for N in NS (chain: block(N) up to 64 x 64)
    for tile in sorted({block(n) for n in NS} - {16}):
        for viterbi in (True, False):
            sig = dict(unary=x, trans=x, start=x, end=x, lengths="*i64", alpha=f64,
                       bp="*i16" if viterbi else "*i64", path="*i64", out=f64, labels="*i64", nll=f64, T=i, N=i,
                       ROWS=i)
            yield f"chain forward ({tile})", chain._forward_kernel, sig, dict(
                VITERBI=viterbi, GOLD=not viterbi, SHARED=True, BLOCK=tile)
        yield f"chain sample ({tile})", chain._sample_kernel, _chain_sample(x), dict(SHARED=True, BLOCK=tile)
    tile = chain.BACKWARD_TILE
    yield f"chain backward ({tile})", chain._backward_kernel, _chain_backward(x), dict(SHARED=False, EDGES=True,
                                                                                      GOLD=True, BLOCK=tile)
    sig = dict(bp="*u8", lengths="*i64", target="*i64", weights="*i64", chosen="*i64", last="*i64", path="*i64",
               broken="*i8", T=i, N=i, K1=i)
    yield "hamming backtrack", hamming._backtrack_kernel, sig, {}
    from structtorch import _triton_checks as checks

    slots = [(0, "*fp32"), (0, "*fp64"), (1, "*fp64"), (2, "*fp32"), (3, "*i64"), (4, "*i64"), (6, "*i64")]
    for first in range(0, len(slots), checks.SLOTS):  # every kind in some slot; unused slots last
        group = slots[first:first + checks.SLOTS]
        group += [(-1, "*i32")] * (checks.SLOTS - len(group))
        sig = {"flag": "*i32"}
        for s, (kind, x) in enumerate(group):
            sig |= {f"x{s}": x, f"n{s}": i, f"lo{s}": i, f"hi{s}": i, f"lengths{s}": x if kind < 4 else "*i64",
                    f"T{s}": i}
        kinds = {f"KIND{s}": kind for s, (kind, _) in enumerate(group)}
        yield "value checks", checks._checks_kernel, sig, dict(**kinds, BLOCK=checks.BLOCK)
    yield from _chain_scan()
    yield from _tree_signatures()


TREE_LENGTHS = (8, 30, 60, 100, 200, 400)
"""Sentence lengths whose tiles are compiled: the tree kernels' (BLOCK_S, BLOCK_R) follow T + 1."""


def _tree_signatures():
    """Eisner's and CKY's forward and backward kernels (``trees/_triton.py``) in both semirings."""
    from structtorch.trees import _triton as trees

    i, f64 = "i32", "*fp64"
    for T in TREE_LENGTHS:
        S, R = trees._blocks(T + 1)
        for viterbi in (True, False):
            tiles = dict(VITERBI=viterbi, BLOCK_S=S, BLOCK_R=R)
            for single in (True, False):
                sig = dict(arcs=f64, lengths="*i64", charts=f64, value=f64, T1=i)
                yield f"eisner forward ({R})", trees._eisner_forward_kernel, sig, dict(SINGLE=single, **tiles)
                sig = dict(arcs=f64, lengths="*i64", charts=f64, value=f64, grad=f64, out=f64, gcharts=f64, T1=i)
                yield f"eisner backward ({R})", trees._eisner_backward_kernel, sig, dict(SINGLE=single, **tiles)
            sig = dict(spans=f64, lengths="*i64", charts=f64, value=f64, T=i)
            yield f"cky forward ({R})", trees._cky_forward_kernel, sig, tiles
            sig = dict(lengths="*i64", charts=f64, value=f64, grad=f64, out=f64, T=i)
            yield f"cky backward ({R})", trees._cky_backward_kernel, sig, tiles


def _chain_scan():
    """The chunked (parallel-in-time) chain kernels: every constexpr combination at 16-label tiles,
    and the largest tiles the wrappers pick (N >= 64) in fp32."""
    from structtorch.chain import _triton_scan as scan

    i, f64 = "i32", "*fp64"
    dims = dict(T=i, N=i, C=i, S=i)
    for x, tiles in (("*fp64", (16,)), ("*fp32", (16, 64))):
        for shared in (True, False):
            for viterbi, gold in ((True, False), (False, False), (False, True)):
                for tile in tiles:
                    sig = dict(unary=x, trans=x, start=x, lengths="*i64", labels="*i64", prod=f64, partial=f64, **dims)
                    yield f"chain scan products ({tile})", scan._product_kernel, sig, dict(
                        SHARED=shared, VITERBI=viterbi, GOLD=gold, BLOCK=min(tile, scan.PRODUCT_TILE))
                    sig = dict(unary=x, trans=x, end=x, lengths="*i64", vec=f64, bp="*i16" if viterbi else "*i32",
                               maps="*i32", last="*i32", out=f64, labels="*i64", partial=f64, nll=f64, **dims)
                    yield f"chain scan inside ({tile})", scan._inside_kernel, sig, dict(
                        SHARED=shared, VITERBI=viterbi, GOLD=gold, BLOCK=tile)
                    if shared and not gold:
                        sig = dict(unary=x, start=x, lengths="*i64", prod=f64, vec=f64, **dims)
                        yield f"chain scan boundaries ({tile})", scan._boundary_kernel, sig, dict(VITERBI=viterbi,
                                                                                                  BLOCK=tile)
            sig = dict(unary=x, trans=x, end=x, lengths="*i64", prod=f64, bounds=f64, ring=f64, **dims)
            for tile in tiles:
                yield "chain scan beta boundaries", scan._beta_boundary_kernel, sig, dict(
                    SHARED=shared, BLOCK=min(tile, scan.BETA_TILE))
            sig = dict(unary=x, trans=x, end=x, lengths="*i64", alpha=f64, logz=f64, bounds=f64, ring=f64, g_unary=f64,
                       g_trans=f64, g_start=f64, g_end=f64, grad=f64, grad_stride=i, labels="*i64", **dims)
            for edges, gold in ((True, False), (False, False), (True, True)):
                yield "chain scan backward", scan._backward_chunk_kernel, sig, dict(
                    SHARED=shared, EDGES=edges, GOLD=gold, BLOCK=scan.BACKWARD_TILE)
    yield "chain scan ends", scan._ends_kernel, dict(lengths="*i64", bp="*i16", maps="*i32", last="*i32", out=f64,
                                                     ends="*i32", **dims), {}
    for tile in (16, 64):
        sig = dict(lengths="*i64", bp="*i16", ends="*i32", out=f64, path="*i64", **dims)
        yield f"chain scan walk ({tile})", scan._walk_kernel, sig, dict(BLOCK=tile)


LOSS_MODES = ((0, False), (1, False), (2, True))
"""(UNITS, PAIR) of the fused chain tables: the Hamming count, position weights, costs with pairs."""

COST_MODES = ((0, False), (2, False), (2, True))
"""(UNITS, PAIR) of the folds and the window searches, which take weights as costs."""


def _fused_hamming_signatures():
    """The fused searches of ``lossaug/_triton.py`` (the Hamming loss, weights and costs, any h)."""
    from structtorch.lossaug import _triton as hamming

    i, f64 = "i32", "*fp64"
    out = dict(value=f64, path="*i64", count="*i64", scale=f64, gold=f64)
    for x in ("*fp32", "*fp64"):
        seq = dict(unary=x, trans=x, start=x, end=x, lengths="*i64")
        for shared in (True, False):
            for units, pair in LOSS_MODES:  # integer units in the table
                sig = {**seq, "target": "*i64", "units": "*i64", "pair": "*i64", "ring": f64, "bp": "*u8",
                       "best": f64, "last": "*i64", "T": i, "N": i, "K1": i}
                yield "hamming table", hamming._table_kernel, sig, dict(SHARED=shared, UNITS=units, PAIR=pair,
                                                                       BLOCK_K=16, BLOCK_J=32)
            for tile in (16, 64):
                for units, pair in COST_MODES:  # real costs in the fold (weights too)
                    sig = {**seq, "target": "*i64", "units": f64, "pair": f64, "steps": f64, "ring": f64,
                           "bp": "*i16", **out, "count": "*i64" if units == 0 else f64, "T": i, "N": i}
                    name = f"hamming fold ({max(32, tile)}{', costs' if units and tile > 32 else ''})"
                    yield name, hamming._fold_kernel, sig, dict(SHARED=shared, UNITS=units, PAIR=pair,
                                                                BLOCK=max(32, tile))
                for margin, custom, low in _h_options():
                    for units, pair in LOSS_MODES if (margin, custom, low) == (False, True, True) else LOSS_MODES[:1]:
                        sig = {**seq, "target": "*i64", "units": "*i64", "pair": "*i64", "bp": "*u8", "best": f64,
                               "last": "*i64", "htab": f64, "h_stride": i, **out, "T": i, "N": i, "K1": i}
                        yield "hamming choose", hamming._choose_kernel, sig, dict(
                            MARGIN=margin, CUSTOM=custom, LOW=low, SHARED=shared, UNITS=units, PAIR=pair,
                            BLOCK_K=tile, BLOCK=tile)
            sig = dict(path="*i64", target="*i64", lengths="*i64", grad=f64, grad_stride=i, scale=f64, g_unary=f64,
                       g_trans=f64, g_start=f64, g_end=f64, T=i, N=i)
            yield "hamming indicators", hamming._indicator_kernel, sig, dict(SHARED=shared, BLOCK=64, TILE=16)
        for tile in (16, 64):
            for units, pair in COST_MODES:  # real units in the fold
                sig = dict(scores=x, lengths="*i64", target="*i64", units=f64, pair=f64, ring=f64, bp="*i16", **out,
                           T=i, N=i, S=i, P=i, ORDER=i)
                sig["count"] = "*i64" if units == 0 else f64
                yield "window fold", hamming._window_fold_kernel, sig, dict(UNITS=units, PAIR=pair, BLOCK=tile)
        sig = dict(path="*i64", target="*i64", lengths="*i64", grad=x, grad_stride=i, scale=f64, g_scores=f64, T=i,
                   N=i, S=i, P=i)
        yield "window indicators", hamming._window_indicator_kernel, sig, dict(BLOCK=64)
        tables = dict(bp="*u8", best=f64, last="*i64")
        loss = dict(units="*i64", pair="*i64")  # integer units in the table
        for tile in (16, 64):
            for units, pair in COST_MODES:
                sig = dict(scores=x, lengths="*i64", target="*i64", **loss, ring=f64, **tables, T=i, N=i, S=i, P=i,
                           ORDER=i, K1=i)
                yield "window table", hamming._window_table_kernel, sig, dict(UNITS=units, PAIR=pair, BLOCK_K=tile,
                                                                             BLOCK_S=min(tile, 32))
            for margin, custom, low in _h_options():
                for units, pair in COST_MODES if (margin, custom, low) == (False, True, True) else COST_MODES[:1]:
                    sig = dict(scores=x, lengths="*i64", target="*i64", **loss, **tables, htab=f64, h_stride=i, **out,
                               T=i, N=i, S=i, P=i, K1=i)
                    yield "window choose", hamming._window_choose_kernel, sig, dict(
                        MARGIN=margin, CUSTOM=custom, LOW=low, UNITS=units, PAIR=pair, BLOCK_K=tile,
                        BLOCK=min(tile, 32))
        yield from _semimarkov_table_signatures(x)


def _h_options():
    """(MARGIN, CUSTOM, LOW) of the count pick: h the identity or a table; the min table with slack
    rescaling and a table."""
    return (True, False, False), (False, False, False), (True, True, False), (False, True, True)


def _semimarkov_table_signatures(x: str):
    """The semi-Markov count table and its choice (``lossaug/_triton.py``) for inputs of type ``x``."""
    from structtorch.lossaug import _triton as hamming

    i, f64 = "i32", "*fp64"
    inputs = dict(content=x, length=x, boundary=x, segment=x, trans=x, start=x, end=x, lengths="*i64", tracks=x,
                  plif=x)
    scalars = dict(T=i, S=i, N=i, P=i, low="fp64", high="fp64", pscale="fp64", K1=i)
    for kind, weighted in ((0, False), (0, True), (1, False), (2, False)):  # kind 0 may weigh positions
        for segment, plif in ((False, False), (True, True)):
            flags = dict(KIND=kind, WEIGHTED=weighted, HAS_SEGMENT=segment, HAS_PLIF=plif)
            # the segment loss without segment scores launches its own warps (hamming.table_warps)
            name = "semi table (segments)" if kind == 1 and not segment else "semi table"
            for labels in sorted({block(n, hamming.TABLE_LABELS) for n in NS}):
                sig = {**inputs, "target": "*i64", "target_starts": "*i1", "weights": "*i64", "gold": f64,
                       "inc": f64, "alpha": f64, "bp_d": "*u8", "bp_m": "*u8", "best": f64, "last": "*i64", **scalars}
                yield name, hamming._semimarkov_table_kernel, sig, dict(
                    **flags, BLOCK_K=hamming.TABLE_COUNTS, BLOCK_N=labels)
            for tile in (16, 64):
                for margin, custom, low in _h_options():
                    sig = {**inputs, "target": "*i64", "target_starts": "*i1", "weights": "*i64", "bp_d": "*u8",
                           "bp_m": "*u8", "best": f64, "last": "*i64", "htab": f64, "h_stride": i, "value": f64,
                           "labels": "*i64", "starts": "*i1", "count": "*i64", "scale": f64, "gold": f64, **scalars}
                    name = "semi choose (min table)" if low else "semi choose"
                    yield name, hamming._semimarkov_choose_kernel, sig, dict(
                        **flags, MARGIN=margin, CUSTOM=custom, LOW=low, BLOCK_K=tile, BLOCK=tile)


def _chain_backward(x: str) -> dict:
    """The chain backward kernel's signature for inputs of pointer type ``x``."""
    f64 = "*fp64"
    return dict(unary=x, trans=x, end=x, lengths="*i64", alpha=f64, logz=f64, ring=f64, g_unary=f64, g_trans=f64,
                g_start=f64, g_end=f64, grad=f64, grad_stride="i32", labels="*i64", T="i32", N="i32")


def _chain_kbest(x: str) -> dict:
    """The chain k-best kernel's signature for inputs of pointer type ``x``."""
    return dict(unary=x, trans=x, start=x, end=x, lengths="*i64", top="*fp64", bp="*i32", scores="*fp64",
                codes="*i32", path="*i64", K="i32", T="i32", N="i32")


def _chain_sample(x: str) -> dict:
    """The chain sampling kernel's signature for inputs of pointer type ``x``."""
    return dict(trans=x, end=x, lengths="*i64", alpha="*fp64", noise="*fp64", out="*i64", B="i32", T="i32",
                N="i32")


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


def scalar_types_ok(kernel, signature: dict) -> bool:
    """Whether the float scalars meant as float64 are annotated so (the JIT types a Python float as
    fp32 otherwise, where the interpreter keeps float64: a difference no CPU test could see);
    pointers of those names are not scalars."""
    scalars = {name for name in FLOAT64_SCALARS if not signature.get(name, "").startswith("*")}
    return all(p.annotation == "fp64" for p in kernel.params if p.name in scalars)


def _warps(warps: dict, name: str, signature: dict) -> int:
    """The warps the wrappers launch ``name`` with: by (name, input pointer type) where they choose
    by dtype, else by name, else Triton's 4."""
    dtype = next((t for t in signature.values() if t in ("*fp32", "*fp64")), None)
    return warps.get((name, dtype), warps.get(name, 4))


def main() -> int:
    failures, spills = [], []
    from structtorch.chain import _triton as chain
    from structtorch.chain import _triton_scan as scan
    from structtorch.lossaug import _triton as hamming
    from structtorch.semimarkov import _triton as semi
    from structtorch.trees import _triton as trees

    warps = {"semi backward": semi.backward_warps(True, False), "semi sample": semi.SAMPLE_WARPS,  # as launched
             "chain forward": chain.FORWARD_WARPS, "chain backward": chain.BACKWARD_WARPS,  # them (else 4)
             f"chain backward ({chain.BACKWARD_TILE})": chain.BACKWARD_WARPS,
             "chain window (64, 64)": chain.WINDOW_WARPS,  # as the wrappers launch them (else Triton's 4)
             "window table": hamming.TABLE_WARPS, "semi table": hamming.TABLE_WARPS,
             "semi choose (min table)": hamming.MIN_TABLE_CHOOSE_WARPS,
             f"chain kbest ({chain.KBEST_TILE})": chain.KBEST_WARPS, "chain kbest (16)": chain.KBEST_WARPS,
             "chain marginals backward": chain.MARGINALS_BACKWARD_WARPS, "semi forward": semi.FORWARD_WARPS,
             "semi backward (plif)": semi.backward_warps(False, True),
             "semi backward (plain)": semi.backward_warps(False, False),
             "semi table (segments)": hamming.TABLE_WARPS_SEGMENTS,
             "semi forward (weighted)": semi.forward_warps(True, True),
             "semi forward (log-partition)": semi.forward_warps(False, False),
             "chain scan backward": scan.BACKWARD_WARPS, "hamming fold (32)": hamming.FOLD_WARPS,
             "hamming fold (64)": hamming.FOLD_WARPS, "hamming fold (64, costs)": hamming.FOLD_WARPS_WIDE,
             "hamming choose": hamming.CHOOSE_WARPS, "window choose": hamming.CHOOSE_WARPS,
             ("chain scan backward", "*fp64"): scan.BACKWARD_WARPS_FLOAT64,  # (name, input type): by dtype
             **{f"{kernel} ({trees._blocks(T + 1)[1]})": trees.warps(T + 1) for T in TREE_LENGTHS
                for kernel in ("eisner forward", "eisner backward", "cky forward", "cky backward")}}
    args = [a for a in sys.argv[1:] if a not in ("--record", "--skip-known")]
    record, skip_known = "--record" in sys.argv, "--skip-known" in sys.argv
    part = next((a for a in args if re.fullmatch(r"\d+/\d+", a)), "0/1")  # K/N: every N-th variant from K
    k, n = map(int, part.split("/"))
    only = next((a for a in args if a != part), "")  # a part of the kernels' names: those alone
    known = set(json.loads(MANIFEST.read_text())["keys"]) if skip_known and MANIFEST.exists() else set()
    keys, skipped = [], 0
    variants = itertools.chain(_gpu_signatures(), _fused_hamming_signatures())
    for index, (name, kernel, signature, constexprs) in enumerate(variants):
        if only not in name or index % n != k:
            continue
        key = variant_key(kernel, signature, constexprs, _warps(warps, name, signature))
        if key in known:
            skipped += 1
            continue
        sig = {**signature, **{k: "constexpr" for k in constexprs}}
        try:
            compiled = triton.compile(ASTSource(fn=kernel, signature=sig, constexprs=constexprs),
                                      target=GPUTarget("cuda", 90, 32), options={"num_warps": _warps(warps, name, signature)})
        except Exception as exc:  # noqa: BLE001 - every compile error is a finding
            failures.append(name)
            print("FAIL", name, constexprs, str(exc)[-1500:])
            continue
        if not scalar_types_ok(kernel, signature):
            failures.append(name)
            print("FAIL", name, "float64 scalars typed fp32 by the JIT: annotate them tl.float64")
        use = resources(compiled.asm["cubin"])
        if use.get("LOCAL", 0) or use.get("STACK", 0):
            spills.append(name)
        else:
            keys.append(key)
        print("ok  ", name, constexprs, " ".join(f"{k}={v}" for k, v in use.items()))
    print(f"known: {skipped} variants compiled and checked before (the manifest)")
    print(f"spills: {len(spills)} of the variants", sorted(set(spills)))
    if record and n == 1 and not only and not failures and not spills:
        MANIFEST.write_text(json.dumps({"triton": triton.__version__, "keys": sorted(keys)}, indent=0) + "\n")
    return 1 if failures else 0


def variant_key(kernel, signature: dict, constexprs: dict, warps: int) -> str:
    """What a compile of one variant depends on: the kernel's source with the Triton functions it
    calls (``cache_key``), its signature, constexprs and warps, the Triton release and the target."""
    text = json.dumps([kernel.cache_key, signature, {k: repr(v) for k, v in constexprs.items()}, warps,
                       triton.__version__, "sm_90"], sort_keys=True)
    return hashlib.sha1(text.encode()).hexdigest()


if __name__ == "__main__":
    sys.exit(main())
