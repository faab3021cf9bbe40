"""Read-path identity: every method's contexts, dumped to JSON, so a read-side refactor can be checked bit for bit.

For each method spec, 2 Mem-Gallery dev histories and 1 small ``hard`` dev synthetic history are ingested once into
stores under ``--stores`` (kept between runs: a read-side change does not change what was written, so later runs
only read), then every question is read through ``Memory.retrieve_many`` (one batch per history) and, for a few
questions, ``Memory.retrieve`` (the batch of one). Each context is written as its items (node id, form, text, image
shas, covers, score), its budget use and its trace's pages and pool.

    python benchmarks/read_identity.py --out /tmp/ident-before.json          # at the starting commit
    python benchmarks/read_identity.py --out /tmp/ident-after.json           # after the change
    python benchmarks/read_identity.py --diff /tmp/ident-before.json /tmp/ident-after.json

Specs that differ from a base spec only in read options (``c3m:cold=false``) read the base spec's store.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

METHODS = ("c3m", "c3m:cold=false", "c3m-paper", "hivemem", "dense-topk", "bm25", "hybrid", "resum", "moviechat",
           "memrefine", "cdrs", "summary-only", "facts", "full-context")
#: read-only variants: the store they read (written by the base spec)
SHARED_STORE = {"c3m:cold=false": "c3m"}


def histories(cache: Path, real_path: str):
    from c3m.dataset import load_dataset
    from c3m.eval.synth import generate_dataset

    real = load_dataset(real_path)[:2]
    synth_dir = cache / "synth-hard-dev"
    if not (synth_dir / "episodes.jsonl").exists() and not synth_dir.exists():
        generate_dataset(synth_dir, length=4000, episodes=1, seed=0, progress=False, preset="hard", split="dev")
    return real + load_dataset(synth_dir)[:1]


def dump_context(ctx) -> dict:
    return {"items": [{"node_id": it.node_id, "form": str(getattr(it.form, "value", it.form)), "text": it.text,
                       "images": [im.sha256 for im in it.images], "covers": list(it.covers), "score": repr(it.score),
                       "text_tokens": it.text_tokens} for it in ctx.items],
            "use": list(ctx.use.as_tuple()),
            "pages": [list(p) for p in ctx.trace.pages], "pool": list(ctx.trace.pool),
            "selected": list(ctx.trace.selected_nodes), "scored": ctx.trace.scored}


def run(args) -> dict:
    from c3m import Memory, MemoryConfig
    from c3m.eval.harness import method_spec

    stores = Path(args.stores)
    stores.mkdir(parents=True, exist_ok=True)
    hs = histories(stores, args.real)
    out: dict = {}
    specs = [m.strip() for m in args.methods.split(",") if m.strip()]
    for spec in specs:
        base, options = method_spec(spec)
        t0 = time.perf_counter()
        out[spec] = {}
        for h in hs:
            path = stores / SHARED_STORE.get(spec, spec).replace(":", "_").replace("=", "-") / h.id
            cfg = MemoryConfig(method=base, method_options=options)
            with Memory(path, "h", config=cfg) as mem:
                if mem.version == 0:
                    if spec in SHARED_STORE:
                        raise SystemExit(f"{spec}: build {SHARED_STORE[spec]}'s stores first")
                    for s in h.sessions:
                        mem.add_session(s)
                qs = [q.question for q in h.questions]
                many = mem.retrieve_many([("h", q) for q in qs])
                rows = [dump_context(c) for c in many]
                for k in range(min(args.singles, len(qs))):  # the batch of one must equal the batch
                    one = dump_context(mem.retrieve(qs[k]))
                    if one != rows[k]:
                        rows[k] = {"batch": rows[k], "single": one}
                out[spec][h.id] = {"questions": qs, "contexts": rows}
        print(f"{spec}: {sum(len(v['questions']) for v in out[spec].values())} questions, "
              f"{time.perf_counter() - t0:.1f}s", flush=True)
    return out


def diff(a_path: str, b_path: str) -> int:
    a, b = json.loads(Path(a_path).read_text()), json.loads(Path(b_path).read_text())
    bad = 0
    for spec in sorted(set(a) | set(b)):
        if spec not in a or spec not in b:
            print(f"{spec}: only in {'first' if spec in a else 'second'}")
            bad += 1
            continue
        n = same = 0
        for h in sorted(set(a[spec]) | set(b[spec])):
            ca, cb = a[spec].get(h, {}).get("contexts", []), b[spec].get(h, {}).get("contexts", [])
            for k in range(max(len(ca), len(cb))):
                n += 1
                x, y = (ca[k] if k < len(ca) else None), (cb[k] if k < len(cb) else None)
                if x == y:
                    same += 1
                elif bad < 20:
                    keys = sorted(kk for kk in set(x or {}) | set(y or {}) if (x or {}).get(kk) != (y or {}).get(kk))
                    print(f"  {spec} {h} q{k}: differs in {keys}")
        bad += n - same
        print(f"{spec}: {same}/{n} contexts identical")
    print("IDENTICAL" if not bad else f"{bad} DIFFERENCES")
    return 1 if bad else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stores", default="/tmp/c3m-read-identity-stores")
    ap.add_argument("--real", default="/work/shared/data/memgallery-dev", help="the Mem-Gallery dev episodes")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--singles", type=int, default=3, help="questions also read alone per history")
    ap.add_argument("--out")
    ap.add_argument("--diff", nargs=2, metavar=("BEFORE", "AFTER"))
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    if args.diff:
        return diff(*args.diff)
    from c3m.eval.runtime import _init_worker

    _init_worker(args.threads)
    out = run(args)
    Path(args.out).write_text(json.dumps(out, indent=0, sort_keys=True))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
