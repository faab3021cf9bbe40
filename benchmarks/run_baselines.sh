#!/usr/bin/env bash
# Every method under one protocol on the hard benchmark (test split), as reported in
# benchmarks/results/baselines-synth-cpu/: the C3M paper's Table 1 layout (OUT/eval/table1.md) for
# oracle-reader accuracy, Support Recall and the evidence check, then a judged pass with a real answerer over
# the committed stores (no second write replay; OUT/judged/table1.md).
# Resumable: finished (method, history) pairs are read back, so a killed run continues where it stopped.
# Usage: bash benchmarks/run_baselines.sh [OUT] [N32] [N64] [N128] [WORKERS] [N_JUDGED]
#   defaults: 50 histories per length (the issue's protocol; about a day on 2 cores), 2 workers, 4 judged.
set -euo pipefail
OUT=${1:-/tmp/c3m-baselines}
N32=${2:-50}
N64=${3:-50}
N128=${4:-50}
WORKERS=${5:-2}
NJUDGED=${6:-4}
PERCEPTION=${PERCEPTION:-scene-encoder}
ANSWERER=${ANSWERER:-smollm}
DATA=${DATA:-$OUT}
for L in 32k 64k 128k; do
  [ -f "$DATA/data-$L/manifest.json" ] || c3m synth "$DATA/data-$L" --preset hard --split test --length "$L" \
      --episodes 50 --seed 0 --workers "$WORKERS" -q
done
for pair in "32k $N32" "64k $N64" "128k $N128"; do
  read -r L N <<<"$pair"
  [ "$N" -gt 0 ] || continue
  c3m eval --dataset "$DATA/data-$L" --methods all --out "$OUT/eval" --workers "$WORKERS" \
    --perception "$PERCEPTION" --limit "$N"
done
c3m table1 "$OUT/eval"
python "$(dirname "$0")/judged_pass.py" "$OUT/eval" "$OUT/judged" --answerer "$ANSWERER" --judge contains \
  --perception "$PERCEPTION" --limit "$NJUDGED" \
  --dataset "32k=$DATA/data-32k" --dataset "64k=$DATA/data-64k" --dataset "128k=$DATA/data-128k"
c3m table1 "$OUT/judged" --judged-label "answerer $ANSWERER (offline), judge contains"
