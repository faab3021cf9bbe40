"""How long ``verify`` (c3m.store.verify.verify_store) takes on a big store, and how much memory it needs.

Either builds a store with about ``--build`` Raw Nodes cheaply (no memory method, so no snapshots: ColdStore's own
``prepare_session`` + ``insert_session``, many sessions per transaction; short texts, one small distinct PNG every
``--image-every`` nodes) or measures an existing store (``--store`` a location string, as ``ColdStore`` takes it:
a folder, later a ``postgresql://`` URL). Each verify mode runs in its own fresh process, so its peak RSS
(``ru_maxrss``) is its own: with blob hash checks (the default ``c3m verify``) and without (existence only).
``--profile`` adds a cProfile of one run (top functions by own time) to the results.

    .venv/bin/python benchmarks/verify_scale.py --build 1000000 --store /tmp/scale/vstore --profile \\
        --out benchmarks/results/verify-scale-cpu.md
"""
from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from report import git_commit  # noqa: E402

CHILD = r"""
import cProfile, io, json, pstats, resource, sys, time
from c3m.store import ColdStore, verify_store
store, check, profile = sys.argv[1], sys.argv[2] == "1", sys.argv[3] == "1"
t = time.perf_counter()
s = ColdStore(store, create=False)
open_s = time.perf_counter() - t
prof = cProfile.Profile() if profile else None
t = time.perf_counter()
if prof:
    prof.enable()
rep = verify_store(s, check_blob_hashes=check)
if prof:
    prof.disable()
out = {"open_s": open_s, "verify_s": time.perf_counter() - t, "ok": rep.ok, "counts": rep.counts,
       "errors": rep.errors[:5], "warnings": rep.warnings, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
if prof:
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(18)
    out["profile"] = buf.getvalue()
    st = pstats.Stats(prof).stats
    out["profile_rows"] = sorted(({"func": f"{k[0].split('/')[-1]}:{k[1]}({k[2]})", "ncalls": v[1], "tottime": v[2],
                                   "cumtime": v[3]} for k, v in st.items()), key=lambda r: -r["tottime"])[:25]
s.close()
print(json.dumps(out))
"""

# The verify phases, timed one by one on their own (the same SQL verify_store runs), to show where the time goes
# without profiler overhead; and the proposed rewrite of the two O(rows)-query loops (one ordered scan each).
PHASES = r"""
import hashlib, json, resource, sys, time
from datetime import datetime
from c3m.store import ColdStore
from c3m.store.cold import session_content_sha256
s = ColdStore(sys.argv[1], create=False); q = s.conn.execute; out = {}
def timed(name, fn):
    t = time.perf_counter(); fn(); out[name] = time.perf_counter() - t
timed("integrity_problems (PRAGMA integrity_check + foreign_key_check)", s.integrity_problems)
def sessions_now():
    for x in q("SELECT * FROM sessions ORDER BY namespace, seq").fetchall():
        nodes = q("SELECT turn_index, content_sha256 FROM raw_nodes WHERE namespace=? AND session_id=?"
                  " ORDER BY turn_index", (x["namespace"], x["session_id"])).fetchall()
        session_content_sha256(datetime.fromisoformat(x["time"]), [n[1] for n in nodes])
timed("sessions: one query per session (now)", sessions_now)
def sessions_scan():  # proposed: one scan of raw_nodes in (namespace, session_id, turn_index) order
    sess = {(x[0], x[1]): x[2] for x in q("SELECT namespace, session_id, time FROM sessions")}
    cur = q("SELECT namespace, session_id, turn_index, content_sha256 FROM raw_nodes"
            " ORDER BY namespace, session_id, turn_index")
    key, hs = None, []
    for r in cur:
        k = (r[0], r[1])
        if k != key:
            if key is not None:
                session_content_sha256(datetime.fromisoformat(sess[key]), hs)
            key, hs = k, []
        hs.append(r[3])
    if key is not None:
        session_content_sha256(datetime.fromisoformat(sess[key]), hs)
timed("sessions: one ordered scan (proposed)", sessions_scan)
def nodes_scan():  # proposed: stream raw_nodes LEFT JOIN node_images in node_id order, no fetchall
    cur = q("SELECT r.node_id, r.role, r.text, r.content_sha256, r.redacted, i.sha256 FROM raw_nodes r"
            " LEFT JOIN node_images i ON i.node_id = r.node_id ORDER BY r.node_id, i.position")
    prev, shas = None, []
    enc = json.JSONEncoder(separators=(",", ":")).encode  # one encoder, not one per json.dumps call: same bytes
    def done(p, shas):
        hashlib.sha256(enc([p[1], p[2], shas]).encode()).hexdigest()
    for r in cur:
        if prev is not None and r[0] != prev[0]:
            done(prev, shas); shas = []
        prev = r
        if r[5] is not None:
            shas.append(r[5])
    if prev is not None:
        done(prev, shas)
timed("raw nodes: one streamed LEFT JOIN scan (proposed)", nodes_scan)
out["rss_after_proposed_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
def nodes_now():
    for r in q("SELECT node_id, role, text, content_sha256, redacted FROM raw_nodes").fetchall():
        shas = [i[0] for i in q("SELECT sha256 FROM node_images WHERE node_id=? ORDER BY position", (r["node_id"],))]
        hashlib.sha256(json.dumps([r["role"], r["text"], shas], separators=(",", ":")).encode()).hexdigest()
timed("raw nodes: fetchall + one node_images query per node (now)", nodes_now)
out["rss_after_now_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
timed("nodes_by_id dict of every node (derived-record checks, now)",
      lambda: {r[0]: (r[1], bool(r[2])) for r in q("SELECT node_id, namespace, redacted FROM raw_nodes")})
timed("blob listing (iter_digests)", lambda: list(s.blobs.iter_digests()))
out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(out))
"""


def png(i: int) -> bytes:
    from PIL import Image

    im = Image.new("RGB", (8, 8), ((i * 37) % 256, (i * 101) % 256, (i // 65536) % 256))
    im.putpixel((0, 0), (i % 256, (i >> 8) % 256, (i >> 16) % 256))
    buf = io.BytesIO()
    im.save(buf, "PNG")
    return buf.getvalue()


def build(store: str, n_nodes: int, *, turns: int, sessions_per_ns: int, image_every: int, txn_sessions: int) -> dict:
    from c3m.store import ColdStore
    from c3m.types import Session, Turn

    words = ("the blue kettle moved to the shelf near a window on tuesday and nobody noticed it until later").split()
    t0, made, i = time.perf_counter(), 0, 0
    base = datetime(2026, 1, 1)
    with ColdStore(store) as s:
        pending = 0
        ns_i = 0
        while made < n_nodes:
            ns = f"v{ns_i:05d}"
            for k in range(sessions_per_ns):
                if made >= n_nodes:
                    break
                tt = []
                for j in range(turns):
                    text = f"{ns} s{k} t{j}: " + " ".join(words[(i + x) % len(words)] for x in range(8))
                    imgs = [png(i)] if image_every and i % image_every == 0 else []
                    tt.append(Turn("user" if j % 2 == 0 else "assistant", text, images=imgs))
                    i += 1
                prepared = s.prepare_session(ns, Session(id=f"s{k:04d}", time=base + timedelta(hours=k), turns=tt))
                if pending == 0:
                    s.conn.begin()
                    s._in_txn = True  # ColdStore.transaction() as a long-lived one: many sessions per commit
                s.insert_session(prepared)
                pending += 1
                made += turns
                if pending >= txn_sessions:
                    s._in_txn = False
                    s.conn.commit()
                    pending = 0
            ns_i += 1
            if ns_i % 100 == 0:
                print(f"  built {made:,} nodes, {ns_i} namespaces, {time.perf_counter() - t0:.0f} s", flush=True)
        if pending:
            s._in_txn = False
            s.conn.commit()
    return {"raw_nodes": made, "namespaces": ns_i, "build_s": time.perf_counter() - t0}


def child(store: str, check: bool, profile: bool) -> dict:
    t = time.perf_counter()
    res = subprocess.run([sys.executable, "-c", CHILD, store, "1" if check else "0", "1" if profile else "0"],
                         cwd=ROOT, check=True, capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    out = json.loads(res.stdout.strip().splitlines()[-1])
    out["process_wall_s"] = time.perf_counter() - t
    return out


def phases(store: str) -> dict:
    res = subprocess.run([sys.executable, "-c", PHASES, store], cwd=ROOT, check=True, capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)))
    return json.loads(res.stdout.strip().splitlines()[-1])


def table(res: dict) -> list[str]:
    lines = ["| verify mode | Raw Nodes | sessions | snapshots | blobs | wall | Raw Nodes/s | peak RSS | result |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for name, key in (("with blob hash checks (default)", "hashes"), ("blob existence only", "no_hashes")):
        r = res.get(key)
        if not r:
            continue
        c = r["counts"]
        lines.append(f"| {name} | {c.get('raw_nodes', 0):,} | {c.get('sessions', 0):,} | {c.get('snapshots', 0):,} | "
                     f"{c.get('blobs', 0):,} | {r['verify_s']:.1f} s | {c.get('raw_nodes', 0) / r['verify_s']:,.0f} | "
                     f"{r['peak_rss_mb']:,.0f} MB | {'OK' if r['ok'] else 'FAILED: ' + '; '.join(r['errors'][:2])} |")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", default="/tmp/scale/vstore", help="store location, handed to ColdStore as is")
    ap.add_argument("--build", type=int, default=0, help="first build a store with about this many Raw Nodes")
    ap.add_argument("--turns", type=int, default=25, help="Raw Nodes per session when building")
    ap.add_argument("--sessions-per-namespace", type=int, default=40)
    ap.add_argument("--image-every", type=int, default=500, help="one image per this many nodes (0: none)")
    ap.add_argument("--txn-sessions", type=int, default=400, help="sessions per transaction when building")
    ap.add_argument("--profile", action="store_true", help="cProfile one run (no blob hashes) and time the phases")
    ap.add_argument("--no-hash-run", action="store_true", help="skip the existence-only run")
    ap.add_argument("--phases-only", action="store_true", help="only time the phases; merge into --out's .json")
    ap.add_argument("--json", type=Path, help="write the results here (JSON)")
    ap.add_argument("--out", type=Path, help="write a Markdown report here (and .json beside it)")
    args = ap.parse_args()
    res: dict = {"store": args.store, "commit": git_commit(ROOT), "when": f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M}",
                 "argv": sys.argv[1:]}
    if args.phases_only:
        prior = json.loads(args.out.with_suffix(".json").read_text())
        prior["phases"] = phases(args.store)
        prior["phases_when"] = f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M}"
        args.out.with_suffix(".json").write_text(json.dumps(prior, indent=1))
        print(json.dumps(prior["phases"], indent=1))
        return 0
    if args.build:
        if not args.store.startswith("postgresql") and Path(args.store).exists():
            raise SystemExit(f"{args.store} exists; remove it or drop --build")
        res["build"] = build(args.store, args.build, turns=args.turns, sessions_per_ns=args.sessions_per_namespace,
                             image_every=args.image_every, txn_sessions=args.txn_sessions)
        print(f"built: {res['build']}", flush=True)
    if not args.store.startswith("postgresql"):
        db = Path(args.store) / "store.sqlite"
        res["store_file_bytes"] = db.stat().st_size
    res["hashes"] = child(args.store, True, False)
    print(f"verify (blob hashes): {res['hashes']['verify_s']:.1f} s", flush=True)
    if not args.no_hash_run:
        res["no_hashes"] = child(args.store, False, False)
        print(f"verify (existence): {res['no_hashes']['verify_s']:.1f} s", flush=True)
    if args.profile:
        res["profiled"] = child(args.store, False, True)
        res["phases"] = phases(args.store)
    res["table"] = table(res)
    if args.json:
        args.json.write_text(json.dumps(res, indent=1))
    if args.out:
        args.out.with_suffix(".json").write_text(json.dumps(res, indent=1))
        lines = [f"# verify on a {res['hashes']['counts'].get('raw_nodes', 0):,}-Raw-Node store (CPU)", "",
                 f"Run {res['when']} UTC, commit {res['commit']}, {os.cpu_count()} shared CPUs (niced):", "",
                 f"    .venv/bin/python benchmarks/verify_scale.py {' '.join(res['argv'])}", ""]
        if "build" in res:
            b = res["build"]
            lines += [f"Built with ColdStore.prepare_session + insert_session ({args.txn_sessions} sessions per "
                      f"transaction, no memory method so no snapshots): {b['raw_nodes']:,} Raw Nodes in "
                      f"{b['namespaces']} namespaces, {b['build_s']:.0f} s ({b['raw_nodes'] / b['build_s']:,.0f} "
                      f"nodes/s); store.sqlite {res.get('store_file_bytes', 0) / 1e6:,.0f} MB.", ""]
        lines += res["table"]
        if "phases" in res:
            lines += ["", "Phases timed on their own (same SQL as verify_store; 'proposed' = the rewrite below):", "",
                      "| phase | seconds |", "|---|---:|"]
            lines += [f"| {k} | {v:.1f} |" for k, v in res["phases"].items() if not k.endswith("_mb")]
            lines += ["", "cProfile of the existence-only run (top by own time):", "", "```",
                      res["profiled"]["profile"].strip(), "```"]
        args.out.write_text("\n".join(lines) + "\n")
        print("\n".join(lines))
    else:
        print("\n".join(res["table"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
