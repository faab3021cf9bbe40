#!/usr/bin/env bash
# One prepared GPU run: kernel GPU tests + every kernel benchmark on one CUDA GPU, < 8 minutes.
# Results (Markdown, CSV, PNG, test log, environment) go to $OUT (default benchmarks/results/gpu/).
# Usage: bash benchmarks/kernels/run_gpu.sh        (from the repository root)
# The whole prepared GPU run for the performance issue (dense top-k bandwidth vs faiss-gpu and torch,
# batched read benchmark, these tests and benchmarks, step timeouts) is benchmarks/run_gpu.sh.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-benchmarks/results/gpu}"
mkdir -p "$OUT"
unset TRITON_INTERPRET
export PYTHONPATH="${PYTHONPATH:-}:$(pwd)"
python - <<'PY' > "$OUT/env.txt" 2>&1
import datetime, platform, torch
print("date", datetime.datetime.utcnow().isoformat() + "Z")
print("gpu", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "NONE")
print("torch", torch.__version__, "cuda", torch.version.cuda)
try:
    import triton; print("triton", triton.__version__)
except Exception as e:
    print("triton missing", e)
print("python", platform.python_version())
PY
cat "$OUT/env.txt"
python -c "import c3m_kernels" 2>/dev/null || pip install --no-deps -e . >/dev/null
echo "== GPU tests"
timeout 240 python -m pytest tests/kernels -m gpu -q -p no:cacheprovider -o addopts="" \
    2>&1 | tee "$OUT/gpu-tests.log" | tail -15
echo "== the regular kernel tests (triton ones now use the real GPU kernels; gpu ones ran above)"
timeout 150 python -m pytest tests/kernels -q -p no:cacheprovider -m "not gpu and not slow" \
    2>&1 | tail -3 | tee -a "$OUT/gpu-tests.log"
echo "== benchmarks"
timeout 300 python benchmarks/kernels/run_all.py --device cuda --out "$OUT" 2>&1 | tee "$OUT/bench.log"
echo "== candidate_topk route / BLOCK_B sweep (sets DENSE_AS_RAGGED_MAX_B and BLOCK_B from numbers)"
timeout 120 python benchmarks/kernels/sweep_gpu_topk.py 2>&1 | tee "$OUT/sweep.md"
echo "results in $OUT"
ls -la "$OUT"
