"""Where c3m's reranker puts each KU / TR gold turn of a `c3m synth --preset photo` dataset (issue 43's diagnosis).

    python benchmarks/photo_rerank_ranks.py EVAL_OUT/stores/c3m/48k DATASET > ranks.jsonl

Copies the eval's c3m stores (one folder per history) to a temporary folder, reopens each history's committed
index with the default c3m config, rebuilds every KU/TR question's reranker inputs (``rerank_inputs``) and
scores them with the configured reranker, and prints one JSON row per gold turn: its rank among the candidates
(null: not a candidate), the number of candidates, its text length, whether it is a photo-only change, and how
many small-talk copies (and distinct small-talk lines) rank above it. Run it with the c3m tree that wrote the
store first on PYTHONPATH (the calibration used the pre-#43 tree, 1186956), so the reranker is the one measured.
"""
import json
import shutil
import sys
import tempfile
from pathlib import Path
import numpy as np
from c3m import Memory
from c3m.config import MemoryConfig
from c3m.dataset import load_dataset
from c3m.eval.synth import load_hidden
from c3m.read.pipeline import rerank
from c3m.types import ReaderBudget

store_src, data = Path(sys.argv[1]), sys.argv[2]
tmp = Path(tempfile.mkdtemp(prefix="rankdiag-")) / "s"
shutil.copytree(store_src, tmp)
hid = load_hidden(data)
rows = []
for h in load_dataset(data):
    w = hid["world"].get(h.id)
    st = {(a["session"], a["turn"]): l["text"] for l in w["small_talk"] for a in l["at"]}
    qs = [q for q in h.questions if q.category in ("KU", "TR") and q.evidence]
    if not (tmp / h.id).is_dir():
        continue
    try:
        mem = Memory(str(tmp / h.id), namespace=h.id, config=MemoryConfig(method="c3m"))
    except Exception as e:
        print("skip", h.id, e); continue
    with mem:
        got = mem.method.rerank_inputs([q.question for q in qs], ReaderBudget())
        scores = rerank([g for g in got if g is not None], mem.method.reranker)
        it = iter(scores)
        for q, g in zip(qs, got):
            if g is None:
                continue
            sc = next(it)
            order = np.argsort(-sc, kind="stable")
            keys = [(c.node.session_id, c.node.turn_index) for c in g.cands]
            spec = hid["questions"][(h.id, q.id)]
            for s in spec["support"]:
                k = (s["session"], s["turn"])
                rank = next((r + 1 for r, j in enumerate(order) if keys[j] == k), None)
                above = [keys[j] for j in order[: (rank - 1 if rank else len(order))]]
                rows.append({"h": h.id, "q": q.id, "cat": q.category, "type": spec["type"], "photo": s["photo_only"],
                             "chars": s["text_chars"], "rank": rank, "cands": len(keys),
                             "st_above": sum(a in st for a in above), "st_lines_above": len({st[a] for a in above if a in st})})
for r in rows:
    print(json.dumps(r))
