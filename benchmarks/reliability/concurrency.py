"""Many writers on one store: W writer processes and R reader processes against one store (a folder or a
``postgresql://`` URL) for a bounded time, then three checks —

* **no lost session**: every session a writer was told was committed is in the store, whole;
* **no lock error surfaced**: no writer or reader call raised (busy timeouts, "database is locked", deadlocks);
* **linearisable**: in each namespace the seqs are 1..N with no gap, there is a snapshot for every seq, and
  snapshot v's pointers are exactly the Raw Nodes of sessions 1..v (``dense-topk`` promises complete provenance,
  so its state *is* the prefix); every reader's observations are prefix states too — (version, pointers) equal to
  the final store's snapshot at that version, and a reader's versions never go backwards.

Writers share namespaces (each namespace has several writers) so the per-namespace ordering is exercised, and
write to their own too. Cheap hashing embedder: the subject is the store, not the model.

    python benchmarks/reliability/concurrency.py --store /tmp/conc/sqlite --seconds 60
    python benchmarks/reliability/concurrency.py --store "postgresql://…?blobs=/tmp/conc/pg-blobs" --seconds 60
"""
from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing as mp
import sys
import time
import traceback
from datetime import datetime, timedelta
from pathlib import Path


def _models():
    from c3m.models import ApproxTokenCounter, ExtractiveAnswerer, HashingEmbedder, Models

    return Models(HashingEmbedder(64), ApproxTokenCounter(), ExtractiveAnswerer())


def _png(i: int) -> bytes:
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (16, 12), (i * 37 % 256, i * 11 % 256, 90)).save(buf, "PNG")
    return buf.getvalue()


def _session(writer: int, j: int):
    from c3m.types import Session, Turn

    turns = (Turn("user", f"Writer {writer} note {j}: the lamp {j % 5} is colour {j % 7}.",
                  (_png(writer * 1000 + j),) if j % 3 == 0 else ()),
             Turn("assistant", f"Noted lamp {j % 5}."))
    return Session(f"w{writer}-s{j}", datetime(2026, 1, 1) + timedelta(minutes=j), turns)


def _namespaces_of(writer: int, shared: int) -> list[str]:
    return [f"shared-{writer % shared}", f"own-{writer}"]


def writer_main(location: str, writer: int, shared: int, seconds: float, max_sessions: int, out) -> None:
    from c3m.config import MemoryConfig
    from c3m.memory import Memory

    committed, errors = [], []
    root = Memory(location, _namespaces_of(writer, shared)[0], config=MemoryConfig(method="dense-topk"),
                  models=_models())
    deadline = time.time() + seconds  # from when this process is ready: interpreter start-up is not the test
    j = 0
    while time.time() < deadline and j < max_sessions:
        ns = _namespaces_of(writer, shared)[j % 2]
        try:
            res = root.tenant(ns).add_session(_session(writer, j))
            committed.append((ns, res.session_id, res.seq))
        except Exception as exc:  # any surfaced error is a failure of the campaign
            errors.append(f"writer {writer} {ns} session {j}: {exc.__class__.__name__}: {exc}")
        j += 1
    root.close()
    out.put(("writer", writer, committed, errors, []))


def reader_main(location: str, reader: int, namespaces: list[str], seconds: float, out) -> None:
    from c3m.config import MemoryConfig
    from c3m.memory import Memory

    seen, errors = [], []
    root = Memory(location, namespaces[0], config=MemoryConfig(method="dense-topk"), models=_models())
    deadline = time.time() + seconds
    i = 0
    while time.time() < deadline:
        ns = namespaces[(reader + i) % len(namespaces)]
        i += 1
        try:
            mem = root.tenant(ns)
            v = mem.sync()
            ptrs = sorted(mem.method.pointers()) if v else []
            mem.retrieve("What colour is the lamp?")
            seen.append((ns, v, hashlib.sha256(json.dumps(ptrs).encode()).hexdigest()))
        except Exception as exc:
            errors.append(f"reader {reader} {ns}: {exc.__class__.__name__}: {exc}")
            traceback.print_exc()
    root.close()
    out.put(("reader", reader, [], errors, seen))


def check(location: str, committed: list, seen: list) -> dict:
    """The three properties over the final store."""
    from c3m.store import ColdStore, verify_store

    problems = []
    with ColdStore(location, create=False) as store:
        rep = verify_store(store, check_blob_hashes=True)
        problems += [f"verify: {e}" for e in rep.errors]
        final_hash: dict[tuple[str, int], str] = {}
        for ns in store.namespaces():
            recs = store.sessions(ns)
            if [r.seq for r in recs] != list(range(1, len(recs) + 1)):
                problems.append(f"{ns}: seqs are not 1..{len(recs)}")
            versions = store.snapshot_versions(ns, "dense-topk")
            if versions != [r.seq for r in recs]:
                problems.append(f"{ns}: snapshot versions {versions[:5]}… do not match seqs 1..{len(recs)}")
            prefix: list[str] = []
            for r in recs:
                prefix += [n.node_id for n in store.nodes_for_session(ns, r.session_id)]
                snap = store.snapshot(ns, "dense-topk", r.seq)
                if snap is None or sorted(snap.pointers) != sorted(prefix):
                    problems.append(f"{ns}@{r.seq}: snapshot is not the prefix of sessions 1..{r.seq}")
                    continue
                final_hash[(ns, r.seq)] = hashlib.sha256(json.dumps(sorted(prefix)).encode()).hexdigest()
        stored = {(ns, r.session_id): r.seq for ns in store.namespaces() for r in store.sessions(ns)}
    lost = [c for c in committed if stored.get((c[0], c[1])) != c[2]]
    problems += [f"lost or moved: {c}" for c in lost[:10]]
    empty = hashlib.sha256(b"[]").hexdigest()
    bad_reads = [s for s in seen if final_hash.get((s[0], s[1]), empty if s[1] == 0 else None) != s[2]]
    problems += [f"read of a non-prefix state: {s[:2]}" for s in bad_reads[:10]]
    return {"problems": problems, "lost": len(lost), "non_prefix_reads": len(bad_reads),
            "sessions": len(stored), "namespaces": len({k[0] for k in stored})}


def run(location: str, *, writers: int = 8, readers: int = 2, seconds: float = 30.0, shared: int = 2,
        max_sessions: int = 10_000) -> dict:
    ctx = mp.get_context("spawn")  # a fresh interpreter per process, as separate services would be
    out = ctx.Queue()
    from c3m.store import ColdStore

    ColdStore(location).close()  # create the schema once, so the timed part is only sessions
    start = time.time()
    procs = [ctx.Process(target=writer_main, args=(location, w, shared, seconds, max_sessions, out))
             for w in range(writers)]
    names = [f"shared-{i}" for i in range(shared)] + [f"own-{w}" for w in range(writers)]
    procs += [ctx.Process(target=reader_main, args=(location, r, names, seconds, out)) for r in range(readers)]
    for p in procs:
        p.start()
    results = [out.get(timeout=seconds + 600) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    wall = time.time() - start
    committed = [c for r in results for c in r[2]]
    errors = [e for r in results for e in r[3]]
    seen = [s for r in results for s in r[4]]
    verdict = check(location, committed, seen)
    return {"location": _shown(location), "writers": writers, "readers": readers, "seconds": round(wall, 1),
            "committed": len(committed), "sessions_per_s": round(len(committed) / wall, 1),
            "reads": len(seen), "errors": errors[:20], "n_errors": len(errors),
            "exit_codes": [p.exitcode for p in procs], **verdict}


def _shown(location: str) -> str:
    from c3m.store.db import is_postgres_url, redact_url

    return redact_url(location) if is_postgres_url(location) else "folder (SQLite)"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", required=True, help="a folder, or postgresql://…?blobs=DIR (an empty store)")
    ap.add_argument("--writers", type=int, default=8)
    ap.add_argument("--readers", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--max-sessions", type=int, default=10_000, help="per writer")
    ap.add_argument("--json", type=Path, help="write the result here")
    args = ap.parse_args(argv)
    res = run(args.store, writers=args.writers, readers=args.readers, seconds=args.seconds,
              max_sessions=args.max_sessions)
    text = json.dumps(res, indent=2)
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n")
    ok = not res["problems"] and not res["n_errors"] and all(c == 0 for c in res["exit_codes"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
