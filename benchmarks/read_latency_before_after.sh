#!/bin/bash
# Read latency before / after a read-side change, in one run on the same stores (results/read-latency-cpu/before-after-45.md).
# BEFORE: a checkout of the starting commit (git archive 9041009 | tar -x -C $BEFORE) with this tree's
# benchmarks/read_latency.py as of 560fafe copied in (its stage paths name c3m.methods.c3m); AFTER: this tree.
# STORES / DATA48K: where read_latency.py --stores keeps the stores and the 48K hard dev set
# (python -c "from c3m.eval.synth import generate_dataset; generate_dataset('$DATA48K', length='48k', episodes=2,
# seed=0, progress=False, preset='hard', split='dev')"); MG_STORES: benchmarks/read_identity.py's --stores.
set -e
BEFORE=${BEFORE:-/tmp/c3m-base}
AFTER=${AFTER:-$(cd "$(dirname "$0")/.." && pwd)}
PY=${PY:-$AFTER/.venv/bin/python}
STORES=${STORES:-/tmp/c3m-lat/stores}
DATA48K=${DATA48K:-/tmp/c3m-lat/hard-dev-48k}
MG=${MG:-/work/shared/data/memgallery-dev}
MG_STORES=${MG_STORES:-/tmp/c3m-read-identity-stores}
OUT=${OUT:-/tmp/c3m-lat}
for clock in cpu wall; do
  for tree in "$BEFORE" "$AFTER"; do
    echo "== $tree 48K clock=$clock"
    (cd "$tree" && $PY benchmarks/read_latency.py --dataset "$DATA48K" --stores "$STORES" --methods c3m,dense-topk \
      --out "$OUT/out-$clock-$(basename "$tree")-48k" --clock $clock --repeat 3 2>&1 | grep "^| \(c3m\|dense\)")
    echo "== $tree memgallery clock=$clock"
    (cd "$tree" && $PY benchmarks/read_latency.py --dataset "$MG" --histories 2 --stores "$MG_STORES" \
      --methods c3m,dense-topk --out "$OUT/out-$clock-$(basename "$tree")-mg" --clock $clock 2>&1 \
      | grep "^| \(c3m\|dense\)")
  done
done
