"""How long ``verify`` (c3m.store.verify.verify_store) takes on a big store, and how much memory it needs.

Either builds a store with about ``--build`` Raw Nodes cheaply (no memory method, so no snapshots: ColdStore's own
``prepare_session`` + ``insert_session``, many sessions per transaction; short texts, one small distinct PNG every
``--image-every`` nodes) or measures an existing store (``--store`` a location string, as ``ColdStore`` takes it:
a folder, later a ``postgresql://`` URL). Each verify mode runs in its own fresh process, so its peak RSS
(``ru_maxrss``) is its own: with blob hash checks (the default ``c3m verify``) and without (existence only).
``--profile`` adds a cProfile of one run (top functions by own time) to the results; ``--baseline-tree`` runs an
earlier checkout's verify on the same store too, so a change to verify is measured side by side.

    git worktree add /tmp/verify-base 3670461
    .venv/bin/python benchmarks/verify_scale.py --build 1000000 --store /tmp/scale/vstore --profile \\
        --baseline-tree /tmp/verify-base --out benchmarks/results/verify-scale-cpu.md
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


def child(store: str, check: bool, profile: bool, tree: Path = ROOT) -> dict:
    """One verify in a fresh process, importing c3m from ``tree`` (this checkout, or a baseline one)."""
    t = time.perf_counter()
    res = subprocess.run([sys.executable, "-c", CHILD, store, "1" if check else "0", "1" if profile else "0"],
                         cwd=tree, check=True, capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(tree)))
    out = json.loads(res.stdout.strip().splitlines()[-1])
    out["process_wall_s"] = time.perf_counter() - t
    return out


def table(res: dict) -> list[str]:
    lines = ["| verify mode | Raw Nodes | sessions | snapshots | blobs | wall | Raw Nodes/s | peak RSS | result |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    rows = (("with blob hash checks (default)", "hashes"), ("blob existence only", "no_hashes"),
            (f"baseline {res.get('baseline_commit', '')}: with blob hash checks", "baseline_hashes"),
            (f"baseline {res.get('baseline_commit', '')}: blob existence only", "baseline_no_hashes"))
    for name, key in rows:
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
    ap.add_argument("--profile", action="store_true", help="cProfile one run (no blob hashes)")
    ap.add_argument("--no-hash-run", action="store_true", help="skip the existence-only run")
    ap.add_argument("--baseline-tree", type=Path, help="also run the verify of another checkout (e.g. a git "
                    "worktree of an earlier commit) on the same store, side by side")
    ap.add_argument("--json", type=Path, help="write the results here (JSON)")
    ap.add_argument("--out", type=Path, help="write a Markdown report here (and .json beside it)")
    args = ap.parse_args()
    res: dict = {"store": args.store, "commit": git_commit(ROOT), "when": f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M}",
                 "argv": sys.argv[1:]}
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
    if args.baseline_tree:
        res["baseline_commit"] = git_commit(args.baseline_tree)
        res["baseline_hashes"] = child(args.store, True, False, args.baseline_tree)
        print(f"baseline verify (blob hashes): {res['baseline_hashes']['verify_s']:.1f} s", flush=True)
        if not args.no_hash_run:
            res["baseline_no_hashes"] = child(args.store, False, False, args.baseline_tree)
    if args.profile:
        res["profiled"] = child(args.store, False, True)
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
        if "profiled" in res:
            lines += ["", "cProfile of the existence-only run (top by own time):", "", "```",
                      res["profiled"]["profile"].strip(), "```"]
        args.out.write_text("\n".join(lines) + "\n")
        print("\n".join(lines))
    else:
        print("\n".join(res["table"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
