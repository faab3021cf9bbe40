#!/usr/bin/env bash
# The read path on real conversations and on the hard test split, as reported in benchmarks/results/retrieval-cpu/:
#  1. the synthetic train splits (hard + easy 32K, photo 48K) the reranker learns from beside the Mem-Gallery dev dialogs;
#  2. the reranker's grouped cross-validation, keeping the fold models (runs/reranker-cv) so the dev set is scored
#     OUT OF FOLD through the real harness (c3m:reranker=xfit:...): the honest dev number, since the shipped model
#     was trained on those dialogs (plain `c3m` on dev is in-sample and is reported only beside it);
#  3. Mem-Gallery dev: c3m (shipped), c3m out of fold, its strictly bounded variant (cold=false) out of fold, the
#     rrf-v1 and bmer (the reader before the reranker) orderings, c3m-paper and the yardsticks;
#  4. the hard test split at 32K (8 histories, run once): c3m with the shipped model, cold=false, bmer, yardsticks.
# Perception none everywhere: raw-text Support Recall is the headline. About 20 minutes on 2 cores.
# Usage: bash benchmarks/run_retrieval.sh [OUT] [WORKERS]
set -euo pipefail
OUT=${1:-/tmp/c3m-retrieval}
WORKERS=${2:-2}
DEV=benchmarks/data/memgallery-dev
[ -f "$OUT/hard-train-32k/manifest.json" ] || c3m synth "$OUT/hard-train-32k" --preset hard --split train \
    --length 32k --episodes 40 --seed 7 --workers "$WORKERS" -q
[ -f "$OUT/easy-train-32k/manifest.json" ] || c3m synth "$OUT/easy-train-32k" --preset easy --split train \
    --length 32k --episodes 16 --seed 8 --workers "$WORKERS" -q
[ -f "$OUT/photo-train-48k/manifest.json" ] || c3m synth "$OUT/photo-train-48k" --preset photo --split train \
    --length 48k --episodes 24 --seed 7 --workers "$WORKERS" -q
[ -f "$OUT/hard-test-32k/manifest.json" ] || c3m synth "$OUT/hard-test-32k" --preset hard --split test \
    --length 32k --episodes 8 --seed 0 --workers "$WORKERS" -q
python training/train_reranker.py --data "$DEV,$OUT/hard-train-32k,$OUT/easy-train-32k,$OUT/photo-train-48k" \
    --out runs/reranker/reranker_lgbm.txt --workers "$WORKERS"
rm -rf runs/reranker-cv && cp -r runs/reranker/cv runs/reranker-cv
XFIT="c3m:reranker=xfit:runs/reranker-cv"
c3m eval --dataset "$DEV" --methods c3m "$XFIT" "$XFIT,cold=false" c3m:reranker=rrf c3m:reranker=bmer c3m-paper \
    dense-topk hybrid bm25 --out "$OUT/dev" --workers "$WORKERS"
c3m eval --dataset "$OUT/hard-test-32k" --methods c3m c3m:cold=false c3m:reranker=bmer dense-topk hybrid bm25 \
    --out "$OUT/hard-test" --workers "$WORKERS"
