"""Where the strictly bounded reader (``c3m:cold=false``) loses its gold turns, and how often capacity repairs.

For each history of a dataset: write it with ``c3m`` (in this process, into ``--store``; a namespace already written
there is reused, so a reader change can be measured without writing again), count the ``overflow_repair`` records
of its commits, then ask its questions of the bounded reader and sort every gold turn it did not show raw into

- ``candidate``: the reader had it as a candidate (the index channel's turns, ``rerank_inputs``) but ranked or
  composed it out;
- ``spill_unrouted``: never a candidate, and referenced only by spill entries on pages the question did not read;
- ``spill_routed``: never a candidate, referenced by a spill entry on a read page (lost in the pool's top-k);
- ``entry_unrouted`` / ``entry_routed``: the same for regular entries;
- ``no_pointer``: no entry points at it.

This is a diagnostic (raw-text Support Recall here is the share of gold turns shown as raw text or raw image,
as the harness's ``raw_support_recall`` counts them); the numbers to report come from ``c3m eval``.

    python benchmarks/bounded_reach.py --dataset /tmp/data/photo-dev-48k --store /tmp/h3-stores/base \\
        --limit 4 --json /tmp/h3-reach-base.json
"""
from __future__ import annotations

import argparse
import json
import time
from collections import Counter, defaultdict
from pathlib import Path

from c3m.config import MemoryConfig
from c3m.dataset.format import iter_histories
from c3m.eval.harness import _safe
from c3m.eval.replay import namespace_for
from c3m.memory import Memory
from c3m.types import EvidenceForm, node_id_for

RAW = (EvidenceForm.RAW_TEXT, EvidenceForm.RAW_IMAGE)


def diagnose(mem: Memory, history, questions) -> list[dict]:
    m = mem.method
    budget = mem.config.reader_budget
    ns = mem.namespace
    qs = [q.question for q in questions]
    gathered = m.rerank_inputs(qs, budget)
    ctxs = [mem.retrieve(q, budget, check=False) for q in qs]
    owners: dict[str, list] = defaultdict(list)
    for e in m.index.ordered():
        for sid, turns in e.sources().items():
            for t in turns:
                owners[node_id_for(ns, sid, t)].append(e)
    out = []
    for q, g, ctx in zip(questions, gathered, ctxs):
        gold = [node_id_for(ns, ev.session, ev.turn) for ev in q.evidence]
        cands = {c.node.node_id for c in g.cands} if g is not None else set()
        shown = {it.node_id for it in ctx.items if it.form in RAW}
        read_pages = {int(p[1:]) for p, _ in ctx.trace.pages}
        kinds = []
        for nid in gold:
            if nid in shown:
                kinds.append("shown")
            elif nid in cands:
                kinds.append("candidate")
            elif not owners.get(nid):
                kinds.append("no_pointer")
            else:
                es = owners[nid]
                routed = any(e.page in read_pages for e in es)
                kind = "spill" if all(e.kind == "spill" for e in es) else "entry"
                kinds.append(f"{kind}_{'routed' if routed else 'unrouted'}")
        out.append({"history": history.id, "question": q.id, "category": q.category, "text": q.question,
                    "gold": len(gold), "kinds": kinds,
                    "raw_sr": (sum(k == "shown" for k in kinds) / len(kinds)) if kinds else None})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--store", default=None, help="store folder (reused: histories written there are not rewritten)")
    ap.add_argument("--eval-stores", default=None,
                    help="read only: a c3m eval's OUT/stores/<method>/<length> folder (one store per history, written "
                         "by the harness with the same write options); repairs are then not counted here")
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--options", default="", help="c3m method options, key=value,... (cold=false is always set)")
    ap.add_argument("--json", default=None, help="write every question's record here")
    args = ap.parse_args()
    options = {"cold": False}
    for kv in filter(None, args.options.split(",")):
        k, v = kv.split("=", 1)
        options[k] = json.loads(v) if v[:1].isdigit() or v in ("true", "false") else v
    if (args.store is None) == (args.eval_stores is None):
        ap.error("give exactly one of --store and --eval-stores")
    if args.store:
        Path(args.store).mkdir(parents=True, exist_ok=True)
    config = MemoryConfig(method="c3m", method_options=options)
    records, repairs = [], {}
    for i, h in enumerate(iter_histories(args.dataset)):
        if args.limit is not None and i >= args.limit:
            break
        t0 = time.time()
        if args.eval_stores:
            folder = Path(args.eval_stores, _safe(h.id))
            if not folder.is_dir():
                raise SystemExit(f"no store for {h.id} at {folder}")
            mem = Memory(folder, namespace_for(h.id), config=config)
            repairs[h.id] = -1
        else:
            mem = Memory(args.store, namespace_for(h.id), config=config)
            log_file = Path(args.store, f"{namespace_for(h.id)}.repairs")
            if not log_file.exists():
                n = sum(a.get("action") == "overflow_repair" for r in mem.add_history(h) for a in r.actions)
                log_file.write_text(str(n))
            repairs[h.id] = int(log_file.read_text())
        got = diagnose(mem, h, [q for q in h.questions if q.evidence])
        records += got
        mem.close()
        kinds = Counter(k for r in got for k in r["kinds"])
        print(f"{h.id}: {repairs[h.id]} overflow repairs, entries {len(mem.method.index.entries)}, "
              f"{dict(kinds)} ({time.time() - t0:.0f}s)", flush=True)
    by_cat: dict[str, list[float]] = defaultdict(list)
    for r in records:
        if r["raw_sr"] is not None:
            by_cat[r["category"]].append(r["raw_sr"])
            by_cat["overall"].append(r["raw_sr"])
    kinds = Counter(k for r in records for k in r["kinds"])
    summary = {"repairs_per_history": sum(repairs.values()) / max(1, len(repairs)), "repairs": repairs,
               "raw_sr": {c: round(100 * sum(v) / len(v), 1) for c, v in sorted(by_cat.items())},
               "gold_turns": dict(kinds)}
    print(json.dumps(summary, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": summary, "records": records}, indent=1))


if __name__ == "__main__":
    main()
