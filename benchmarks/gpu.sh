#!/usr/bin/env bash
# One run on a GPU machine gives every GPU figure: the CUDA tests, then benchmarks/gpu.py (every DP
# against its PyTorch loops and the peers, timed with CUDA events with value checks off and on, and a
# structured training step eager against its CUDA-graph replay; a peer or capture that fails is a
# note or a cell, not the end of the run), then the neural tagger. Meant to take under 6 minutes on
# one GPU when warm (--budget 0.3 s of repeats per case); each step has its own timeout, and the
# script exits non-zero naming every step that failed or timed out. The machine needs torch with
# CUDA, Triton, pytest, hypothesis and numpy; the peers travel as wheels in .gpu-wheels/ (`make
# gpu-wheels` fetches them; without them their columns say "not installed"). Results go to $OUT
# (default benchmarks/out/).
set -uo pipefail
PY=${PYTHON:-python3}
cd "$(dirname "$0")/.."
OUT=${OUT:-benchmarks/out}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
if compgen -G ".gpu-wheels/*.whl" >/dev/null; then
    "$PY" -m pip install -q --no-deps --no-index .gpu-wheels/*.whl || echo "note: peer wheels did not install"
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
"$PY" -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/gpu.txt"
FAILED=()
# step NAME SECONDS LOG COMMAND...: run one step with its own timeout (sized for a cold start: the
# C++ build and the Triton compiles happen on first use), log it, and say loudly how it ended.
step() {
    local name=$1 seconds=$2 log=$3
    shift 3
    timeout "$seconds" "$@" 2>&1 | tee "$OUT/$log"
    local rc=${PIPESTATUS[0]}
    if [ "$rc" -eq 124 ]; then
        echo "STEP TIMED OUT after ${seconds}s: $name" | tee -a "$OUT/steps.txt"
        FAILED+=("$name")
    elif [ "$rc" -ne 0 ]; then
        echo "STEP FAILED (exit $rc): $name" | tee -a "$OUT/steps.txt"
        FAILED+=("$name")
    else
        echo "step ok: $name" | tee -a "$OUT/steps.txt"
    fi
}
step "CUDA tests" ${CUDA_TESTS_TIMEOUT:-240} cuda_tests.log "$PY" -m pytest -q -p no:cacheprovider tests/test_cuda.py
step "GPU benchmark" ${GPU_BENCH_TIMEOUT:-240} gpu_bench.md "$PY" benchmarks/gpu.py --budget 0.3 ${GPU_BENCH_ARGS:-}
step "neural tagger" ${NEURAL_TIMEOUT:-90} neural.md "$PY" benchmarks/neural.py --device cuda
if [ ${#FAILED[@]} -ne 0 ]; then
    echo "gpu.sh: ${#FAILED[@]} step(s) did not finish: ${FAILED[*]}" >&2
    exit 1
fi
