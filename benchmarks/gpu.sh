#!/usr/bin/env bash
# One run on a GPU machine gives every GPU figure: the CUDA tests, then benchmarks/gpu.py (every DP
# against the peers). Under 6 minutes on one GPU. The machine needs torch with CUDA, Triton, pytest,
# hypothesis and numpy; the peers travel as wheels in .gpu-wheels/ (`make gpu-wheels` fetches them;
# without them their columns say "not installed"). Results go to $OUT (default benchmarks/out/).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-benchmarks/out}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
if compgen -G ".gpu-wheels/*.whl" >/dev/null; then
    python -m pip install -q --no-deps --no-index .gpu-wheels/*.whl || echo "note: peer wheels did not install"
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/gpu.txt"
timeout 180 python -m pytest -q -p no:cacheprovider tests/test_cuda.py 2>&1 | tee "$OUT/cuda_tests.log"
timeout 240 python benchmarks/gpu.py --budget 0.3 2>&1 | tee "$OUT/gpu_bench.md"
timeout 90 python benchmarks/neural.py --device cuda 2>&1 | tee "$OUT/neural.md"
