#!/usr/bin/env bash
# The one prepared GPU run for the performance issue, < 9 minutes on one H200, from the repository root:
#   environment -> install what is missing (c3m/c3m_kernels, faiss-gpu; failures tolerated) ->
#   dense top-k bandwidth benchmark (candidate_topk Triton vs torch.topk(q @ k.T) vs faiss-gpu) ->
#   batched read benchmark at 1..4,096 tenants (benchmarks/e2e/read.py) ->
#   GPU tests -> the other kernel benchmarks (ragged top-k, budget_solve, anchor_scores) ->
#   candidate_topk route / BLOCK_B sweep -> the regular kernel test-suite on the GPU (if time is left).
# Every step has a timeout, and no step starts once BUDGET_S seconds (default 540) are spent, so the
# run ends inside a 10-minute device command; steps.txt says what ran, how long, and its exit code.
#
# Usage:
#   bash benchmarks/run_gpu.sh            results -> $OUT (default benchmarks/results/gpu/)
#   PACK=1 bash benchmarks/run_gpu.sh     results packed into $OUT/gpu-results.tgz + $OUT/summary.txt
#                                         (for a device tool that returns only a few files from $OUT)
#   bash benchmarks/run_gpu.sh --smoke    every step on the CPU in a few minutes: TRITON_INTERPRET=1,
#                                         tiny shapes, CUDA-only steps skipped with the reason printed
#                                         (results -> $OUT, default /tmp/c3m-gpu-smoke)
# Environment: PYTHON (interpreter; default the first of .venv/bin/python, python3, python with
# torch), BUDGET_S, COMMIT (recorded when the tree has no .git), FAISS_WHEELS (a folder of wheels
# for an offline faiss-gpu install), FAISS_SITE (where faiss-gpu is installed, default a temp dir;
# kept apart from site-packages so its CUDA 12 libraries cannot disturb torch's) and
# READ_ARGS (extra arguments for benchmarks/e2e/read.py, which builds its own sources).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT="$(pwd)"

SMOKE=0
for a in "$@"; do
    case "$a" in
        --smoke) SMOKE=1 ;;
        -h|--help) awk 'NR > 1 && /^#/ {print; next} NR > 1 {exit}' "$0"; exit 0 ;;
        *) echo "unknown argument: $a (use --smoke or nothing)"; exit 2 ;;
    esac
done

if (( SMOKE )); then
    OUT="${OUT:-/tmp/c3m-gpu-smoke}"
    BUDGET_S="${BUDGET_S:-1500}"
    export TRITON_INTERPRET=1 CUDA_VISIBLE_DEVICES=""
else
    OUT="${OUT:-benchmarks/results/gpu}"
    BUDGET_S="${BUDGET_S:-540}"
    unset TRITON_INTERPRET
fi
export PYTHONUNBUFFERED=1
T0=$SECONDS

pick_python() {
    if [[ -n "${PYTHON:-}" ]]; then echo "$PYTHON"; return; fi
    local c
    for c in .venv/bin/python python3 python; do
        if command -v "$c" >/dev/null 2>&1 && "$c" -c "import torch" >/dev/null 2>&1; then
            echo "$c"; return
        fi
    done
    echo python3
}
PY="$(pick_python)"
GPU_NAME="$("$PY" -c "import torch; print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')" 2>/dev/null)"
if (( ! SMOKE )) && [[ -z "$GPU_NAME" ]]; then
    echo "no CUDA GPU visible to $PY (PYTHON=... picks another interpreter); without one run: bash $0 --smoke"
    exit 1
fi
# file tag: h200 for an NVIDIA H200, else the GPU name in lower case; smoke for --smoke
if (( SMOKE )); then TAG=smoke
elif [[ "$GPU_NAME" == *H200* ]]; then TAG=h200
else TAG="$(echo "$GPU_NAME" | tr 'A-Z' 'a-z' | sed 's/nvidia //; s/[^a-z0-9]\+/-/g; s/^-//; s/-$//')"
fi
SCRATCH="$(mktemp -d "${TMPDIR:-/tmp}/c3m-gpu.XXXXXX")"
if [[ "${PACK:-0}" == 1 ]]; then WORK="$SCRATCH/gpu-results"; else WORK="$OUT"; fi
mkdir -p "$WORK" "$OUT"
WORK="$(cd "$WORK" && pwd)"
: > "$WORK/steps.txt"

note() { echo "$*" | tee -a "$WORK/steps.txt"; }

# PACK=1: (re)pack after every step, so a run cut off by the device's limit still returns its results
pack() {
    [[ "${PACK:-0}" == 1 ]] || return 0
    tar czf "$OUT/gpu-results.tgz.part" -C "$SCRATCH" gpu-results 2>/dev/null \
        && mv -f "$OUT/gpu-results.tgz.part" "$OUT/gpu-results.tgz"
    cp -f "$WORK/steps.txt" "$OUT/summary.txt" 2>/dev/null
    return 0
}
trap 'rm -rf "$SCRATCH"' EXIT

# step NAME TIMEOUT LOGFILE CMD...: run CMD under `timeout` (capped by what is left of BUDGET_S),
# output to the terminal and to $WORK/LOGFILE; never stops the script
step() {
    local name="$1" t="$2" log="$3"; shift 3
    local left=$(( BUDGET_S - (SECONDS - T0) ))
    if (( left < 15 )); then
        note "SKIP  $name: time budget (BUDGET_S=$BUDGET_S s) spent"
        return 0
    fi
    (( t > left )) && t=$left
    echo
    echo "== $name (timeout ${t}s, $(( SECONDS - T0 ))s into the run)"
    local s=$SECONDS
    timeout -k 10 "$t" "$@" 2>&1 | tee -a "$WORK/$log"
    local rc=${PIPESTATUS[0]}
    local why=""
    (( rc == 124 || rc == 137 )) && why=" (timed out)"
    note "$(printf '%-5s %s: rc=%s%s, %ss, log %s' "$([[ $rc == 0 ]] && echo ok || echo FAIL)" \
        "$name" "$rc" "$why" "$(( SECONDS - s ))" "$log")"
    pack
}

# ---- environment ---------------------------------------------------------------------------------
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
{
    echo "date $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "mode $([[ $SMOKE == 1 ]] && echo 'SMOKE (CPU, Triton interpreter; timings meaningless)' || echo GPU)"
    echo "command bash benchmarks/run_gpu.sh $*"
    echo "commit ${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo 'unknown (no .git; pass COMMIT=)')}"
    git status --short 2>/dev/null | head -20 | sed 's/^/dirty /'
    echo "python $PY"
    if command -v nvidia-smi >/dev/null 2>&1 && (( ! SMOKE )); then
        nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem \
            --format=csv,noheader 2>&1 | sed 's/^/nvidia-smi /'
    fi
    "$PY" - <<'PY' 2>&1
import platform
print("python_version", platform.python_version())
try:
    import torch
    print("torch", torch.__version__, "cuda", torch.version.cuda)
    print("gpu", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "NONE")
except Exception as e:
    print("torch missing", e)
for m in ("triton", "numpy", "numba", "faiss"):
    try:
        mod = __import__(m)
        extra = ""
        if m == "faiss":
            extra = f" gpus={mod.get_num_gpus() if hasattr(mod, 'get_num_gpus') else 0}"
        print(m, getattr(mod, "__version__", "?") + extra)
    except Exception as e:
        print(m, "missing:", type(e).__name__, str(e)[:100])
PY
} > "$WORK/env.txt"
cat "$WORK/env.txt"
note "mode $([[ $SMOKE == 1 ]] && echo smoke || echo "gpu ($GPU_NAME)"); python $PY; results in $WORK"

# ---- install what is missing ---------------------------------------------------------------------
echo
echo "== install"
if ! "$PY" -c "import c3m, c3m_kernels" >/dev/null 2>&1; then
    timeout 120 "$PY" -m pip install -q --no-deps --no-build-isolation -e . >"$WORK/install.log" 2>&1
    if ! "$PY" -c "import c3m, c3m_kernels" >/dev/null 2>&1; then
        # no network / no pip: the import packages are c3m/ and kernels/ (as c3m_kernels, setup.py)
        mkdir -p "$SCRATCH/pypath" && ln -sfn "$ROOT/kernels" "$SCRATCH/pypath/c3m_kernels"
        export PYTHONPATH="$SCRATCH/pypath:$PYTHONPATH"
    fi
fi
if "$PY" -c "import c3m, c3m_kernels" >/dev/null 2>&1; then
    note "ok    c3m + c3m_kernels importable"
else
    note "FAIL  c3m / c3m_kernels not importable (see install.log); the steps below will fail"
fi

BW_ENV=()  # extra environment for the bandwidth benchmark (faiss-gpu kept out of site-packages)
FAISS_SPECS=(faiss-gpu "nvidia-cuda-runtime-cu12>=12.6,<13" "nvidia-cublas-cu12>=12.6,<13"
             "nvidia-curand-cu12>=10.3.7,<11")  # faiss-gpu 1.15.x: CUDA 12 wheels (PyPI, 2026-09)
if (( SMOKE )); then
    note "SKIP  faiss-gpu install: smoke (needs CUDA); a GPU run installs ${FAISS_SPECS[*]} into a side folder"
elif "$PY" -c "import faiss, sys; sys.exit(faiss.get_num_gpus() == 0)" >/dev/null 2>&1; then
    note "ok    faiss with GPU support already importable"
elif [[ -z "${FAISS_WHEELS:-}" ]] && ! timeout 20 "$PY" -m pip index versions faiss-gpu --retries 0 \
        --timeout 5 >>"$WORK/install.log" 2>&1; then
    note "SKIP  faiss-gpu: no package index reachable (no network?) and no FAISS_WHEELS folder; faiss columns will say why"
else
    FAISS_SITE="${FAISS_SITE:-$SCRATCH/faiss-site}"
    src=(--retries 0 --timeout 15)
    [[ -n "${FAISS_WHEELS:-}" ]] && src=(--no-index --find-links "$FAISS_WHEELS")
    timeout 240 "$PY" -m pip install -q --no-deps --target "$FAISS_SITE" "${src[@]}" "${FAISS_SPECS[@]}" \
        >>"$WORK/install.log" 2>&1
    libs="$(ls -d "$FAISS_SITE"/nvidia/*/lib 2>/dev/null | paste -sd: -)"
    probe_env=(PYTHONPATH="$FAISS_SITE:$PYTHONPATH" LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
    if env "${probe_env[@]}" "$PY" -c "
import torch; torch.ones(4, device='cuda').sum().item()
import faiss, sys; sys.exit(faiss.get_num_gpus() == 0)" >>"$WORK/install.log" 2>&1; then
        BW_ENV=("${probe_env[@]}")
        note "ok    faiss-gpu installed into $FAISS_SITE (used by the bandwidth benchmark only)"
    else
        note "SKIP  faiss-gpu: install or GPU probe failed (no network? see install.log); faiss columns will say why"
    fi
fi

# ---- dense top-k bandwidth (the never-measured target: >= 80% of 4.8 TB/s, fp16/bf16, B <= 64, k <= 128)
if (( SMOKE )); then
    step "dense top-k bandwidth (smoke)" 400 bandwidth.log \
        "$PY" benchmarks/kernels/bench_topk_bandwidth.py --smoke --out "$WORK" --stem "topk-bandwidth-$TAG"
else
    step "dense top-k bandwidth" 300 bandwidth.log env "${BW_ENV[@]}" \
        "$PY" benchmarks/kernels/bench_topk_bandwidth.py --out "$WORK" --stem "topk-bandwidth-$TAG" \
        --budget-s 150
fi

# ---- batched read benchmark --------------------------------------------------------------------------
# It builds its own sources (--build: one synthetic hard/dev 32K history, ingested with both methods; MiniLM
# ships its weights, so nothing is downloaded), clones them into 1..4,096 tenants and reads them through the
# per-question loop, retrieve_many (device cuda: the Triton kernels) and faiss per tenant. READ_ARGS adds or
# overrides arguments (e.g. "--store DIR --dataset DIR" to reuse a store carried to the device).
READ=benchmarks/e2e/read.py
read -r -a read_extra <<< "${READ_ARGS:-}"
if (( SMOKE )); then
    read_cmd=("$PY" "$READ" --smoke --out "$WORK/e2e-read")
else
    read_cmd=("$PY" "$READ" --device cuda --build 1 --length 32k --store "$WORK/e2e-store"
              --tenants 1,64,1024,4096 --methods dense-topk,c3m --requests 512 --batch 256 --out "$WORK/e2e-read")
fi
step "batched read$([[ $SMOKE == 1 ]] && echo ' (CPU smoke: 1 and 8 tenants)')" \
    "$([[ $SMOKE == 1 ]] && echo 300 || echo 240)" e2e-read.log "${read_cmd[@]}" "${read_extra[@]}"

# ---- GPU tests ------------------------------------------------------------------------------------
step "GPU tests (pytest tests/kernels -m gpu)" 240 "kernels-$TAG-gpu-tests.log" \
    "$PY" -m pytest tests/kernels -m gpu -q -rs -p no:cacheprovider -o addopts=""
if (( SMOKE )); then  # no CUDA: the Triton tests run under the interpreter in the regular suite
    step "kernel tests (CPU; Triton under the interpreter)" 400 "kernels-$TAG-gpu-tests.log" \
        "$PY" -m pytest tests/kernels -q -p no:cacheprovider -m "not gpu and not slow"
fi

# ---- the other kernel benchmarks (dense top-k is measured above, not twice) --------------------
if (( SMOKE )); then
    step "kernel benchmarks (quick, CPU)" 400 "kernels-$TAG-bench.log" "$PY" benchmarks/kernels/run_all.py \
        --device cpu --quick --no-dense-topk --out "$WORK" --stem "kernels-$TAG"
else
    step "kernel benchmarks" 240 "kernels-$TAG-bench.log" "$PY" benchmarks/kernels/run_all.py \
        --device cuda --no-dense-topk --out "$WORK" --stem "kernels-$TAG"
fi

# ---- candidate_topk route / BLOCK_B sweep (sets DENSE_AS_RAGGED_MAX_B and BLOCK_B from numbers) ---
step "candidate_topk route sweep" 150 "kernels-$TAG-sweep.md" \
    "$PY" benchmarks/kernels/sweep_gpu_topk.py $([[ $SMOKE == 1 ]] && echo --smoke)

if (( ! SMOKE )); then  # the Triton tests of the regular suite now run the real GPU kernels
    step "regular kernel tests on the GPU" 150 "kernels-$TAG-gpu-tests.log" \
        "$PY" -m pytest tests/kernels -q -p no:cacheprovider -m "not gpu and not slow"
fi

# ---- summary -------------------------------------------------------------------------------------
{
    echo
    echo "== done in $(( SECONDS - T0 )) s; results in $WORK"
    cat "$WORK/steps.txt"
    grep -h "target (>=" "$WORK"/topk-bandwidth-*.md 2>/dev/null
    echo
    (( SMOKE )) && echo "(smoke run: nothing here is for check-in; the names below are what a GPU run writes)"
    echo "Check in (from the repository root), named *-$TAG.*:"
    echo "  topk-bandwidth-$TAG.{md,csv,png}     -> benchmarks/results/ (the dense top-k bandwidth table)"
    echo "  kernels-$TAG.{md,csv} (+ PNGs)       -> benchmarks/results/ (ragged top-k, budget_solve, anchor_scores)"
    echo "  kernels-$TAG-sweep.md, kernels-$TAG-gpu-tests.log -> benchmarks/results/"
    echo "  e2e-read/                            -> benchmarks/results/e2e-read-$TAG.md (+ its CSV/PNG)"
    echo "  Each *.md must carry the date, the GPU and the exact command: copy them from env.txt."
} > "$WORK/summary.txt"
cat "$WORK/summary.txt"
ls -la "$WORK"
if [[ "${PACK:-0}" == 1 ]]; then
    pack && cp -f "$WORK/summary.txt" "$OUT/summary.txt"
    echo "packed: $OUT/gpu-results.tgz ($(du -h "$OUT/gpu-results.tgz" | cut -f1)), $OUT/summary.txt"
fi
