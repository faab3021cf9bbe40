#!/usr/bin/env bash
# The write path's cost, as reported in benchmarks/results/write-cost-cpu/ (run alone on the machine: timings):
#  1. `c3m eval --workers 2` on the Mem-Gallery dev dialogs and on 48K `hard` dev histories, c3m beside dense-topk
#     and hybrid in the same run: the harness's per-session write p50 / p95, overflow repairs, raw-text SR;
#  2. the write path at the harness's workload stage by stage (benchmarks/e2e/write.py --harness), with an earlier
#     checkout measured in the same run when BEFORE is given, and a cProfile summary per stage;
#  3. the text-anchor backends' cost and agreement (benchmarks/anchors_cost.py);
#  4. `c3m ingest` of one 128K-token history, wall seconds, three fresh stores (and BEFORE's, when given), also with
#     the opt-in minilm-bf16 embedder (and its recall on the dev dialogs, in step 1).
# Usage: bash benchmarks/run_write_cost.sh [OUT] [BEFORE]     (BEFORE: e.g. `git worktree add /tmp/old <commit>`)
set -euo pipefail
OUT=${1:-/tmp/c3m-write-cost}
BEFORE=${2:-}
RES=benchmarks/results/write-cost-cpu
DEV=benchmarks/data/memgallery-dev
mkdir -p "$OUT" "$RES"
OUT=$(cd "$OUT" && pwd)  # absolute: the ingest runs from inside it
[ -f "$OUT/hard-dev-48k/manifest.json" ] || c3m synth "$OUT/hard-dev-48k" --preset hard --split dev \
    --length 48000 --episodes 6 --seed 3 -q
[ -f "$OUT/s128k/manifest.json" ] || c3m synth "$OUT/s128k" --length 128k --episodes 1 --seed 5 -q

c3m eval --dataset "$DEV" --methods c3m dense-topk hybrid --workers 2 --out "$OUT/eval-dev"
c3m eval --dataset "$OUT/hard-dev-48k" --methods c3m c3m:capacity=stepwise dense-topk hybrid --workers 2 \
    --out "$OUT/eval-hard48k"
# the opt-in bfloat16 embedder: what it does to recall on the same dialogs (its own vectors for every method)
c3m eval --dataset "$DEV" --methods c3m dense-topk hybrid --workers 2 --text-embedder minilm-bf16 \
    --out "$OUT/eval-dev-bf16"

python benchmarks/e2e/write.py --harness "$DEV" --methods c3m,dense-topk,hybrid ${BEFORE:+--before-tree "$BEFORE"} \
    --out "$RES/harness-dev"
python benchmarks/e2e/write.py --harness "$OUT/hard-dev-48k" --methods c3m,dense-topk,hybrid --limit 2 \
    ${BEFORE:+--before-tree "$BEFORE"} --out "$RES/harness-hard48k"
python benchmarks/e2e/write.py --harness "$DEV" --methods c3m --limit 3 --profile-dir "$RES/profiles-dev" \
    --out "$OUT/profiled-dev"
python benchmarks/e2e/write.py --harness "$OUT/hard-dev-48k" --methods c3m --limit 1 \
    --profile-dir "$RES/profiles-hard48k" --out "$OUT/profiled-hard48k"

python benchmarks/anchors_cost.py --dataset "$DEV" --out "$RES/anchors"

ingest() {  # TREE LABEL [ARGS...]: three fresh stores, wall seconds each
    local tree=$1 label=$2
    shift 2
    for i in 1 2 3; do
        rm -rf "$OUT/ingest-store"
        # from $OUT: `python -m` puts the working directory first on sys.path, so run from the repo it would
        # import this checkout's c3m whatever PYTHONPATH says
        (cd "$OUT" && /usr/bin/time -f "$label %e s wall, %U s user, %M KiB peak" env ${tree:+PYTHONPATH="$tree"} \
            python -m c3m.cli ingest "$OUT/s128k" --store "$OUT/ingest-store" -q "$@" 2>&1 >/dev/null | tail -n 1)
    done
}
{ [ -z "$BEFORE" ] || ingest "$BEFORE" before; ingest "" after; ingest "" after-minilm-bf16 --text-embedder minilm-bf16
} | tee "$OUT/ingest-128k.txt"
