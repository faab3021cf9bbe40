"""Store growth with index snapshots as deltas (schema v3) vs one full snapshot per session (v2).

Ingests one 128K-token history with the c3m method (default models) twice, with an old tree (full snapshots)
and with this tree (deltas), each into a fresh store, then reports store file size (store.sqlite + WAL after a
checkpoint), blob folder size, snapshot bytes, the Raw Nodes' own bytes and the ratios, per-table sizes (SQLite's
dbstat), the time to load the latest and a random old version (fresh connection each), a sync after one new
session (one delta on the cached state), ingest wall time, the per-session cost of writing a snapshot (the old
store's 233 states replayed through both writers), and checks that every version the new store rebuilds hashes
to the state the old store kept in full.

    git worktree add /tmp/sg-old <old commit>
    .venv/bin/python benchmarks/store_growth.py --old-tree /tmp/sg-old --work /tmp/sg

Writes benchmarks/results/store-growth-cpu.md (``--out``).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

LOAD_SNIPPET = r"""
import json, random, sys, time
from c3m.store import ColdStore
path, reps = sys.argv[1], int(sys.argv[2])
out = {}
with ColdStore(path, create=False) as s:
    ns = s.namespaces()[0]
    method = s.snapshot_methods(ns)[0]
    latest = s.latest_snapshot_version(ns, method)
    olds = random.Random(0).sample(range(1, latest), reps)
def fresh(v):
    with ColdStore(path, create=False) as s:
        t = time.perf_counter(); s.snapshot(ns, method, v); return time.perf_counter() - t
out["latest_s"] = sorted(fresh(latest) for _ in range(reps))
out["old_s"] = sorted(fresh(v) for v in olds)
out["old_versions"] = olds
if hasattr(ColdStore, "_state_at"):  # one delta on the cached state (what Memory.sync does after one session)
    with ColdStore(path, create=False) as s:
        ts = []
        for v in range(latest - reps, latest + 1):
            t = time.perf_counter(); s.snapshot(ns, method, v); ts.append(time.perf_counter() - t)
        out["next_s"] = sorted(ts[1:])
print(json.dumps(out))
"""


def sh(cmd, env=None, **kw):
    print("+", " ".join(map(str, cmd)), flush=True)
    return subprocess.run(cmd, check=True, env=env, **kw)


def ingest(tree: Path, data: Path, store: Path) -> float:
    if store.exists():
        subprocess.run(["rm", "-rf", str(store)], check=True)
    env = dict(os.environ, PYTHONPATH=str(tree))
    t = time.perf_counter()
    sh([sys.executable, "-m", "c3m.cli", "ingest", str(data), "--store", str(store), "-q"], env=env, cwd=tree,
       stdout=subprocess.DEVNULL)
    return time.perf_counter() - t


def measure(store: Path) -> dict:
    db = store / "store.sqlite"
    c = sqlite3.connect(db)
    c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    q = lambda sql: c.execute(sql).fetchone()  # noqa: E731
    wal = db.with_name("store.sqlite-wal")
    cols = {r[1] for r in c.execute("PRAGMA table_info(index_snapshots)")}
    out = {
        "file_bytes": db.stat().st_size + (wal.stat().st_size if wal.exists() else 0),
        "blob_dir_bytes": sum(p.stat().st_size for p in (store / "blobs").rglob("*") if p.is_file()),
        "snapshots": q("SELECT COUNT(*) FROM index_snapshots")[0],
        "snapshot_bytes": q("SELECT SUM(length(state) + length(pointers)) FROM index_snapshots")[0],
        "snapshot_full": (q("SELECT COUNT(*) FROM index_snapshots WHERE kind='full'")[0] if "kind" in cols
                          else q("SELECT COUNT(*) FROM index_snapshots")[0]),
        "sessions": q("SELECT COUNT(*) FROM sessions")[0],
        "raw_nodes": q("SELECT COUNT(*) FROM raw_nodes")[0],
        "text_bytes": q("SELECT SUM(length(CAST(text AS BLOB))) FROM raw_nodes")[0],
        "image_bytes": q("SELECT SUM(nbytes) FROM node_images")[0] or 0,
        "images": q("SELECT COUNT(*) FROM node_images")[0],
        "tables": {name: size for name, size in c.execute(
            "SELECT name, SUM(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC")},
    }
    raw_tables = ("raw_nodes", "node_images", "sessions", "sqlite_autoindex_raw_nodes_1", "sqlite_autoindex_raw_nodes_2",
                  "raw_nodes_by_session", "node_images_by_blob", "sqlite_autoindex_node_images_1",
                  "sqlite_autoindex_sessions_1", "sqlite_autoindex_sessions_2")
    out["raw_table_bytes"] = sum(out["tables"].get(t, 0) for t in raw_tables)
    c.close()
    return out


def load_times(tree: Path, store: Path, reps: int) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree))
    res = subprocess.run([sys.executable, "-c", LOAD_SNIPPET, str(store), str(reps)], env=env, cwd=tree,
                         check=True, capture_output=True, text=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def same_versions(old: Path, new: Path) -> tuple[int, int]:
    """(versions whose rebuilt state hashes equal the old full row's, versions)."""
    sys.path.insert(0, str(ROOT))
    from c3m.store import ColdStore
    from c3m.store.delta import canonical

    o = sqlite3.connect(f"file:{old / 'store.sqlite'}?mode=ro", uri=True)
    want = {(ns, v): (hashlib.sha256(zlib.decompress(s)).hexdigest(), zlib.decompress(p))
            for ns, v, s, p in o.execute("SELECT namespace, version, state, pointers FROM index_snapshots")}
    method = o.execute("SELECT method FROM index_snapshots LIMIT 1").fetchone()[0]
    same = 0
    with ColdStore(new, create=False) as s:
        for (ns, v), (sha, ptrs) in sorted(want.items(), reverse=True):
            snap = s.snapshot(ns, method, v)
            got = hashlib.sha256(canonical(snap.state).encode()).hexdigest()
            same += got == sha and canonical(list(snap.pointers)).encode() == ptrs
    return same, len(want)


def write_cost(old: Path) -> dict:
    """ms per session to write a snapshot: the old store's states through v2's full write and v3's put_snapshot."""
    sys.path.insert(0, str(ROOT))
    from c3m.store import ColdStore

    o = sqlite3.connect(f"file:{old / 'store.sqlite'}?mode=ro", uri=True)
    rows = [(ns, m, v, sid, json.loads(zlib.decompress(s)), json.loads(zlib.decompress(p)), cp) for
            ns, m, v, sid, s, p, cp in o.execute("SELECT namespace, method, version, session_id, state, pointers,"
                                                 " complete_provenance FROM index_snapshots ORDER BY version")]
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        with ColdStore(Path(tmp) / "a") as st:
            t = time.perf_counter()
            for ns, m, v, sid, state, ptrs, cp in rows:  # what v2's put_snapshot did
                blob = zlib.compress(json.dumps(state, separators=(",", ":"), sort_keys=True).encode(), 6)
                pblob = zlib.compress(json.dumps(sorted(set(ptrs)), separators=(",", ":"), sort_keys=True).encode(),
                                      6)
                hashlib.sha256(blob).hexdigest()
                len(pblob)
            out["full_ms"] = (time.perf_counter() - t) / len(rows) * 1e3
        with ColdStore(Path(tmp) / "b") as st:
            t = time.perf_counter()
            for ns, m, v, sid, state, ptrs, cp in rows:
                with st.transaction():
                    st.put_snapshot(ns, m, v, sid, state, ptrs, complete_provenance=bool(cp))
            out["delta_ms"] = (time.perf_counter() - t) / len(rows) * 1e3
    return out


def mb(n: float) -> str:
    return f"{n / 1e6:.2f} MB"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old-tree", type=Path, required=True, help="checkout of the commit before snapshot deltas")
    ap.add_argument("--work", type=Path, default=Path("/tmp/sg"))
    ap.add_argument("--reuse", action="store_true", help="reuse existing stores (skip both ingests)")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/store-growth-cpu.md")
    args = ap.parse_args()
    data, old_store, new_store = args.work / "d128", args.work / "store-old", args.work / "store-new"
    args.work.mkdir(parents=True, exist_ok=True)
    if not data.exists():
        sh([sys.executable, "-m", "c3m.cli", "synth", str(data), "--preset", "hard", "--split", "dev", "--length",
            "128k", "--episodes", "1", "--seed", "0", "-q"], cwd=ROOT)
    times, times_from = {}, None
    new_commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True).stdout.strip()
    prior = args.out.with_suffix(".json")
    if not args.reuse:
        times["old"] = ingest(args.old_tree, data, old_store)
        times["new"] = ingest(ROOT, data, new_store)
        times["commit"] = new_commit
    elif prior.exists():  # the ingest times of the run that made these stores
        times = json.loads(prior.read_text()).get("ingest_s") or {}
        times_from = times.get("commit")
    old_commit = subprocess.run(["git", "-C", str(args.old_tree), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True).stdout.strip()
    m = {"old": measure(old_store), "new": measure(new_store)}
    loads = {"old": load_times(args.old_tree, old_store, args.reps), "new": load_times(ROOT, new_store, args.reps)}
    same, n_versions = same_versions(old_store, new_store)
    cost = write_cost(old_store)

    raw = m["new"]["text_bytes"] + m["new"]["image_bytes"]
    lines = [
        "# Store growth: index snapshots as deltas (CPU)",
        "",
        f"Commands (run {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC on {os.cpu_count()} CPUs, shared; "
        f"old tree {old_commit}, new tree {new_commit} + working tree):",
        "",
        "    c3m synth /tmp/sg/d128 --preset hard --split dev --length 128k --episodes 1 --seed 0 -q",
        "    c3m ingest /tmp/sg/d128 --store /tmp/sg/store-{old,new} -q   # c3m method, default models",
        f"    .venv/bin/python benchmarks/store_growth.py --old-tree /tmp/sg-old --work /tmp/sg"
        f"{' --reuse' if args.reuse else ''}",
        "",
        f"One history: {m['new']['sessions']} sessions, {m['new']['raw_nodes']} Raw Nodes, {m['new']['images']} "
        f"images. **Raw Nodes' own bytes** = UTF-8 text bytes ({mb(m['new']['text_bytes'])}) + stored image bytes "
        f"(SUM(node_images.nbytes), {mb(m['new']['image_bytes'])}) = **{mb(raw)}**. Their SQLite footprint "
        f"(raw_nodes, node_images, sessions and their indexes) is {mb(m['new']['raw_table_bytes'])}.",
        "",
        "| | v2: full snapshot per session | v3: deltas |",
        "|---|---:|---:|",
        f"| store.sqlite + WAL (after checkpoint) | {mb(m['old']['file_bytes'])} | {mb(m['new']['file_bytes'])} |",
        f"| blobs/ (originals + grounded crops) | {mb(m['old']['blob_dir_bytes'])} | "
        f"{mb(m['new']['blob_dir_bytes'])} |",
        f"| snapshot rows (full) | {m['old']['snapshots']} ({m['old']['snapshot_full']}) | "
        f"{m['new']['snapshots']} ({m['new']['snapshot_full']}) |",
        f"| snapshot bytes SUM(length(state)+length(pointers)) | {mb(m['old']['snapshot_bytes'])} | "
        f"{mb(m['new']['snapshot_bytes'])} |",
        f"| snapshot bytes / Raw Nodes' bytes | {m['old']['snapshot_bytes'] / raw:.1f}x | "
        f"{m['new']['snapshot_bytes'] / raw:.1f}x |",
        f"| store file / Raw Nodes' bytes | {m['old']['file_bytes'] / raw:.1f}x | {m['new']['file_bytes'] / raw:.1f}x |",
        f"| store file without vector_cache (derived, droppable) / Raw Nodes' bytes | "
        f"{(m['old']['file_bytes'] - m['old']['tables'].get('vector_cache', 0)) / raw:.1f}x | "
        f"{(m['new']['file_bytes'] - m['new']['tables'].get('vector_cache', 0)) / raw:.1f}x |",
        f"| load latest version, fresh connection (median of {args.reps}) | "
        f"{statistics.median(loads['old']['latest_s']) * 1e3:.1f} ms | "
        f"{statistics.median(loads['new']['latest_s']) * 1e3:.1f} ms |",
        f"| load a random old version, fresh connection (median of {args.reps}) | "
        f"{statistics.median(loads['old']['old_s']) * 1e3:.1f} ms | "
        f"{statistics.median(loads['new']['old_s']) * 1e3:.1f} ms |",
        f"| load the next version on a warm connection (one delta; median) | - | "
        f"{statistics.median(loads['new']['next_s']) * 1e3:.1f} ms |",
        f"| snapshot write per session (233 stored states replayed) | {cost['full_ms']:.1f} ms | "
        f"{cost['delta_ms']:.1f} ms |",
    ]
    if times:
        lines.append(f"| ingest wall time{f' (the run that made the stores, new tree {times_from})' if times_from else ''}"
                     f" | {times['old']:.1f} s | {times['new']:.1f} s |")
    lines += [
        "",
        f"Every version rebuilt from the v3 store (deltas) hashes to the state the v2 store kept in full, pointers "
        f"included: **{same}/{n_versions}**.",
        "",
        "Old versions sampled (seeded): " + ", ".join(map(str, loads["new"]["old_versions"])) + ".",
        "",
        "Largest tables (SQLite dbstat, bytes):",
        "",
        "| table / index | v2 | v3 |",
        "|---|---:|---:|",
    ]
    names = list(dict.fromkeys(list(m["old"]["tables"])[:8] + list(m["new"]["tables"])[:8]))
    lines += [f"| {n} | {m['old']['tables'].get(n, 0):,} | {m['new']['tables'].get(n, 0):,} |" for n in names]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    (args.out.with_suffix(".json")).write_text(json.dumps({"measure": m, "loads": loads, "ingest_s": times,
                                                           "write_cost_ms": cost, "same_versions": [same, n_versions]},
                                                          indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
