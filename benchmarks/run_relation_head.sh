#!/usr/bin/env bash
# RAMU's relation head, end to end (benchmarks/results/relation-head-*): build gold pairs for train / dev / test,
# train the MLP head (training/train_relation_head.py: epoch, temperature and δ on dev; test once), compare the
# heads on the test pairs (benchmarks/relation_head.py), then the effect on the hard benchmark: c3m with the
# feature head against c3m with the trained head, on the same histories (paired), scene-encoder perception and
# image embedder (so phi's text–image and image–image features are real).
# Usage: bash benchmarks/run_relation_head.sh [OUT] [TRAIN_HISTORIES] [TEST_HISTORIES_32K] [WORKERS]
set -euo pipefail
OUT=${1:-/tmp/c3m-relation-head}
NTRAIN=${2:-40}
NTEST=${3:-20}
WORKERS=${4:-2}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
[ -f "$OUT/train-16k/manifest.json" ] || c3m synth "$OUT/train-16k" --preset hard --split train --length 16k \
    --episodes "$NTRAIN" --seed 1 --workers "$WORKERS" -q
[ -f "$OUT/dev-16k/manifest.json" ] || c3m synth "$OUT/dev-16k" --preset hard --split dev --length 16k \
    --episodes 20 --seed 2 --workers "$WORKERS" -q
[ -f "$OUT/test-32k/manifest.json" ] || c3m synth "$OUT/test-32k" --preset hard --split test --length 32k \
    --episodes 30 --seed 0 --workers "$WORKERS" -q
python "$ROOT/training/train_relation_head.py" --train "$OUT/train-16k" --dev "$OUT/dev-16k" --test "$OUT/test-32k" \
  --cache-dir "$OUT/pairs" --report "$ROOT/benchmarks/results/relation-head-training.md" \
  --card "$ROOT/c3m/models/weights/RELATION_HEAD_CARD.md" --ship   # --ship: replace the shipped relation_mlp.npz
python "$ROOT/benchmarks/relation_head.py" --pairs "$(ls "$OUT"/pairs/test-32k-*.npz | head -1)" --heads feature mlp
c3m eval --dataset "$OUT/test-32k" --methods c3m c3m:relation_head=mlp --out "$OUT/eval" --workers "$WORKERS" \
  --perception scene-encoder --image-embedder scene-encoder --limit "$NTEST"
