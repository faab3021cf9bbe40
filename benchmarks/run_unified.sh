#!/usr/bin/env bash
# The unified reader against its parents and the yardsticks on the hard benchmark (test split), as reported in
# benchmarks/results/unified-synth-cpu/: c3m (unified), c3m-paper, hivemem, hybrid, dense-topk, plus the
# HiVe-Mem ablation table as read-only variants of c3m and hivemem (asked on the same committed index, so an
# ablation costs reads, not another write replay). Perception: scene-encoder (pixels only) for the headline;
# PERCEPTION=oracle gives the upper bound. --judge contains: the extractive answerer's sentence holds the gold
# answer (a text-only reader: it sees images only through captions).
# Usage: bash benchmarks/run_unified.sh [OUT] [HISTORIES_128K] [HISTORIES_32K] [WORKERS]
set -euo pipefail
OUT=${1:-/tmp/c3m-unified}
N128=${2:-50}
N32=${3:-50}
WORKERS=${4:-2}
PERCEPTION=${PERCEPTION:-scene-encoder}
DATA=${DATA:-$OUT}
for L in 32k 128k; do
  [ -f "$DATA/data-$L/manifest.json" ] || c3m synth "$DATA/data-$L" --preset hard --split test --length "$L" \
      --episodes 50 --seed 0 --workers "$WORKERS" -q
done
METHODS="c3m c3m-paper hivemem hybrid dense-topk"
C3M_ABLATIONS="c3m:expansion=false c3m:visual_anchors=false c3m:idf=false c3m:reader=c3m c3m:expansion_pages=1
  c3m:selector=mlp-init:0 c3m:lam_tokens=10
  c3m:forms=summary+caption+raw_image+grounded_crop c3m:forms=raw_text+summary+caption+grounded_crop
  c3m:forms=raw_text+summary+raw_image+grounded_crop c3m:forms=raw_text+summary+caption+raw_image"
HIVEMEM_ABLATIONS="hivemem:expansion=false hivemem:visual_anchors=false hivemem:idf=false hivemem:summary_only=true
  hivemem:no_raw_text=true hivemem:no_raw_image=true hivemem:no_caption=true hivemem:no_crop=true
  hivemem:no_summary=true"
# shellcheck disable=SC2086
c3m eval --dataset "$DATA/data-128k" --methods $METHODS $C3M_ABLATIONS --out "$OUT/eval" --workers "$WORKERS" \
  --perception "$PERCEPTION" --limit "$N128" --judge contains
# shellcheck disable=SC2086
c3m eval --dataset "$DATA/data-32k" --methods $METHODS $C3M_ABLATIONS $HIVEMEM_ABLATIONS --out "$OUT/eval" \
  --workers "$WORKERS" --perception "$PERCEPTION" --limit "$N32" --judge contains
