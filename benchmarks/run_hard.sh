#!/usr/bin/env bash
# The hard synthetic benchmark, as reported in benchmarks/results/hard-synth-cpu/: generate the test split
# once at 32K/64K/128K (50 histories each) and replay every method on the same histories; the report starts
# with the paired differences. Tuning happens on --split dev only (benchmarks/README.md).
# Usage: bash benchmarks/run_hard.sh [OUT] [EPISODES] [WORKERS]   (about an hour on 2 cores)
set -euo pipefail
OUT=${1:-/tmp/c3m-hard}
EPISODES=${2:-50}
WORKERS=${3:-2}
METHODS=${METHODS:-"c3m hybrid dense-topk bm25"}
for L in 32k 64k 128k; do
  [ -f "$OUT/data-$L/manifest.json" ] || c3m synth "$OUT/data-$L" --preset hard --split test --length "$L" \
      --episodes "$EPISODES" --seed 0 --workers "$WORKERS" -q
done
# shellcheck disable=SC2086
c3m eval --dataset "$OUT/data-32k" --dataset "$OUT/data-64k" --dataset "$OUT/data-128k" \
  --methods $METHODS --out "$OUT/eval" --workers "$WORKERS"
