"""Store scale: many namespaces (users) x a 32K-token history each in one Cold Store.

Generates N distinct histories (``c3m synth --preset hard --split dev --length 32k --episodes N --seed S``: every
episode is its own world, entities, images and questions), ingests history i into namespace ``u{i:05d}`` through one
``Memory`` and its tenants (as ``c3m ingest`` does: one store connection, one set of models, ``release`` after each
namespace), and measures

- ingest throughput per namespace (sessions/s, Raw Nodes/s) and how it changes as the store grows;
- store size: store.sqlite + WAL after a checkpoint, blobs/, bytes per Raw Node, per table (SQLite's dbstat);
- read latency (``tenant(ns).retrieve(question)`` on random namespaces, that history's own questions) from a fresh
  process (tenant not loaded: its snapshot is read from the store) and again on the loaded tenants (warm), plus
  ``retrieve_many`` batches and namespace listing;
- optionally ``verify`` (``--verify``: runs benchmarks/verify_scale.py on the same store).

``--store`` is a location string handed unchanged to ``Memory``/``ColdStore`` (a folder; later a ``postgresql://``
URL); the file-size measurements are taken only for a folder (SQLite).

    .venv/bin/python benchmarks/store_scale.py --namespaces 1000 --store /tmp/scale/store \\
        --method dense-topk --embedder hashing --verify

Each namespace's ingest record is appended to ``<work>/ingest-<tag>.jsonl`` as it finishes, so ``--skip-ingest``
re-measures a store built earlier (or by a run that was stopped). Writes ``--out`` (.md, .json, .png).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from report import git_commit  # noqa: E402

READ_SNIPPET = r"""
import json, random, resource, sys, time
t0 = time.perf_counter()
from c3m.config import MemoryConfig
from c3m.memory import Memory
t_import = time.perf_counter() - t0
store, method, embedder, plan_file = sys.argv[1:5]
plan = json.load(open(plan_file))
out = {"import_s": t_import}
cfg = MemoryConfig(method=method, text_embedder=embedder)
t = time.perf_counter()
root = Memory(store, plan["reads"][0][0], config=cfg)
out["open_s"] = time.perf_counter() - t
t = time.perf_counter(); names = root.store.namespaces(); out["list_namespaces_s"] = time.perf_counter() - t
out["n_namespaces"] = len(names)
t = time.perf_counter(); root.retrieve(plan["reads"][0][1]); out["first_retrieve_s"] = time.perf_counter() - t
cold, warm = [], []
for ns, q in plan["reads"][1:]:  # tenant not loaded yet: its latest snapshot is read from the store
    t = time.perf_counter(); root.tenant(ns).retrieve(q); cold.append(time.perf_counter() - t)
for ns, q in plan["reads"][1:]:  # the same tenants, loaded
    t = time.perf_counter(); root.tenant(ns).retrieve(q); warm.append(time.perf_counter() - t)
batches = []
for batch in plan["batches"]:
    t = time.perf_counter(); root.retrieve_many([tuple(r) for r in batch]); batches.append(time.perf_counter() - t)
out.update(cold_s=cold, warm_s=warm, batch_s=batches, batch_size=len(plan["batches"][0]) if plan["batches"] else 0,
           peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
root.close()
print(json.dumps(out))
"""


def sh(cmd, **kw):
    print("+", " ".join(map(str, cmd)), flush=True)
    return subprocess.run(cmd, check=True, **kw)


def pct(xs, p):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def namespace_of(i: int) -> str:
    return f"u{i:05d}"


def ingest(args, data: Path, log: Path) -> list[dict]:
    """Ingest history i into namespace u{i}; one JSON line per namespace to ``log`` (appended as it goes)."""
    from c3m.config import MemoryConfig
    from c3m.dataset import iter_histories
    from c3m.memory import Memory

    cfg = MemoryConfig(method=args.method, text_embedder=args.embedder)
    done = {json.loads(x)["namespace"] for x in log.read_text().splitlines()} if log.exists() else set()
    root = None
    rows = []
    t_start = time.perf_counter()
    with log.open("a") as fh:
        for i, history in enumerate(iter_histories(data)):
            if i >= args.namespaces:
                break
            ns = namespace_of(i)
            if ns in done:
                continue
            t = time.perf_counter()
            root = root or Memory(args.store, ns, config=cfg)
            mem = root.tenant(ns)
            sessions = nodes = images = 0
            for session in history.sessions:
                res = mem.add_session(session)
                sessions += res.created
                nodes += res.raw_nodes if res.created else 0
                images += res.images if res.created else 0
            root.release(ns)
            dt = time.perf_counter() - t
            row = {"i": i, "namespace": ns, "history": history.id, "sessions": sessions, "raw_nodes": nodes,
                   "images": images, "seconds": dt, "at_s": time.perf_counter() - t_start}
            if (i + 1) % 50 == 0 and not str(args.store).startswith("postgresql"):
                row["store_file_bytes"] = file_bytes(Path(args.store))
            fh.write(json.dumps(row) + "\n")
            fh.flush()
            rows.append(row)
            if (i + 1) % 25 == 0:
                print(f"  {i + 1} namespaces, last {dt:.2f} s ({sessions / dt:.1f} sessions/s)", flush=True)
    if root is not None:
        root.close()
    return rows


def file_bytes(store: Path) -> int:
    db = store / "store.sqlite"
    return sum(p.stat().st_size for p in (db, db.with_name("store.sqlite-wal")) if p.exists())


def measure_sqlite(store: Path) -> dict:
    db = store / "store.sqlite"
    c = sqlite3.connect(db)
    c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    q = lambda sql: c.execute(sql).fetchone()[0]  # noqa: E731
    out = {
        "file_bytes": file_bytes(store),
        "blob_dir_bytes": sum(p.stat().st_size for p in (store / "blobs").rglob("*") if p.is_file()),
        "blob_files": sum(1 for p in (store / "blobs").rglob("*") if p.is_file()),
        "namespaces": q("SELECT COUNT(DISTINCT namespace) FROM sessions"),
        "sessions": q("SELECT COUNT(*) FROM sessions"),
        "raw_nodes": q("SELECT COUNT(*) FROM raw_nodes"),
        "images": q("SELECT COUNT(*) FROM node_images"),
        "text_bytes": q("SELECT SUM(length(CAST(text AS BLOB))) FROM raw_nodes"),
        "image_bytes": q("SELECT COALESCE(SUM(nbytes), 0) FROM node_images"),
        "snapshots": q("SELECT COUNT(*) FROM index_snapshots"),
        "snapshot_bytes": q("SELECT COALESCE(SUM(length(state) + length(pointers)), 0) FROM index_snapshots"),
    }
    t = time.perf_counter()
    try:
        out["tables"] = {n: s for n, s in c.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC")}
    except sqlite3.OperationalError as exc:  # SQLite built without dbstat
        out["tables"] = {"(dbstat unavailable)": str(exc)}
    out["dbstat_s"] = time.perf_counter() - t
    c.close()
    return out


def read_plan(args, data: Path, n_ns: int) -> dict:
    """Seeded: ``reads`` random (namespace, one of its history's questions); ``batches`` of retrieve_many."""
    from c3m.dataset import iter_histories

    rng = random.Random(args.seed)
    picks = [rng.randrange(n_ns) for _ in range(args.reads + 1 + args.batches * args.batch_size)]
    want = set(picks)
    questions = {}
    for i, h in enumerate(iter_histories(data)):
        if i >= n_ns:
            break
        if i in want:
            questions[i] = [q.question for q in h.questions] or ["what happened?"]
    pairs = [(namespace_of(i), rng.choice(questions[i])) for i in picks]
    reads = pairs[:args.reads + 1]
    rest = pairs[args.reads + 1:]
    batches = [rest[k * args.batch_size:(k + 1) * args.batch_size] for k in range(args.batches)]
    return {"reads": reads, "batches": batches}


def reads(args, plan: dict, work: Path) -> dict:
    plan_file = work / "read-plan.json"
    plan_file.write_text(json.dumps(plan))
    t = time.perf_counter()
    res = subprocess.run([sys.executable, "-c", READ_SNIPPET, str(args.store), args.method, args.embedder,
                          str(plan_file)], cwd=ROOT, check=True, capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)))
    out = json.loads(res.stdout.strip().splitlines()[-1])
    out["process_wall_s"] = time.perf_counter() - t
    return out


def summarise_ingest(rows: list[dict]) -> dict:
    rows = sorted(rows, key=lambda r: r["i"])

    def agg(rs):
        s, n, t = sum(r["sessions"] for r in rs), sum(r["raw_nodes"] for r in rs), sum(r["seconds"] for r in rs)
        return {"namespaces": len(rs), "sessions": s, "raw_nodes": n, "seconds": t,
                "sessions_per_s": s / t if t else 0, "nodes_per_s": n / t if t else 0,
                "s_per_namespace": t / len(rs) if rs else 0}

    k = min(100, max(1, len(rows) // 10))
    return {"all": agg(rows), "first": agg(rows[:k]), "last": agg(rows[-k:]), "window": k}


def plot(rows, rd, png: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    rows = sorted(rows, key=lambda r: r["i"])
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 3.8))
    x = [r["i"] + 1 for r in rows]
    y = [r["sessions"] / r["seconds"] for r in rows]
    a.plot(x, y, ".", ms=2, alpha=0.35, label="one namespace")
    w = 25
    if len(y) >= w:
        a.plot(x[w - 1:], [statistics.mean(y[j - w + 1:j + 1]) for j in range(w - 1, len(y))], label=f"mean of {w}")
    a.set_xlabel("namespaces ingested")
    a.set_ylabel("ingest sessions/s")
    a.set_ylim(bottom=0)
    a.legend()
    a.set_title("ingest throughput as the store grows")
    for name, key in (("fresh process, tenant not loaded", "cold_s"), ("tenant loaded (warm)", "warm_s")):
        xs = sorted(v * 1e3 for v in rd[key])
        b.plot(xs, [(j + 1) / len(xs) for j in range(len(xs))], label=name)
    b.set_xscale("log")
    b.set_xlabel("retrieve latency (ms)")
    b.set_ylabel("fraction of reads")
    b.set_title(f"read latency, {len(rd['cold_s'])} random namespaces")
    b.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    plt.close(fig)
    return True


def mb(n: float) -> str:
    return f"{n / 1e6:,.1f} MB"


def ms(s: float) -> str:
    return f"{s * 1e3:.1f} ms"


def render(res: dict, extra: list[dict]) -> list[str]:
    a = res["args"]
    ing, m, rd = res["ingest"], res.get("size"), res["reads"]
    cmd = (f".venv/bin/python benchmarks/store_scale.py --namespaces {a['namespaces']} --store {a['store']} "
           f"--method {a['method']} --embedder {a['embedder']} --seed {a['seed']}"
           + (" --quick" if a["quick"] else "") + (" --verify" if a["verify"] else ""))
    lines = [
        f"# Store scale: {ing['all']['namespaces']:,} namespaces x a 32K history each, one store (CPU)",
        "",
        f"Run {res['when']} UTC on {os.cpu_count()} CPUs shared with other jobs (niced), commit {res['commit']}:",
        "",
        f"    c3m synth {a['data']} --preset hard --split dev --length 32k --episodes {a['namespaces']} "
        f"--seed {a['seed']} -q",
        f"    {cmd}",
        "",
        f"Method **{a['method']}**, text embedder **{a['embedder']}**. History i (synth episode i: its own "
        "world, entities, images and questions; no history is reused) goes into namespace u{i:05d}, ingested "
        "through one Memory and its tenants exactly as `c3m ingest` does.",
        "",
        "## Ingest",
        "",
        "| namespaces | sessions | Raw Nodes | wall (s) | sessions/s | Raw Nodes/s | s per namespace |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for label, key in ((f"first {ing['window']}", "first"), (f"last {ing['window']}", "last"), ("all", "all")):
        g = ing[key]
        lines.append(f"| {label} ({g['namespaces']}) | {g['sessions']:,} | {g['raw_nodes']:,} | {g['seconds']:,.1f} | "
                     f"{g['sessions_per_s']:.1f} | {g['nodes_per_s']:,.0f} | {g['s_per_namespace']:.2f} |")
    if m:
        raw = m["text_bytes"] + m["image_bytes"]
        n = m["raw_nodes"]
        lines += [
            "",
            "## Store size",
            "",
            "| | |",
            "|---|---:|",
            f"| namespaces / sessions / Raw Nodes / images | {m['namespaces']:,} / {m['sessions']:,} / {n:,} / "
            f"{m['images']:,} |",
            f"| store.sqlite + WAL (after a checkpoint) | {mb(m['file_bytes'])} |",
            f"| blobs/ ({m['blob_files']:,} files) | {mb(m['blob_dir_bytes'])} |",
            f"| Raw Nodes' own bytes (UTF-8 text + image bytes) | {mb(raw)} |",
            f"| (store file + blobs) per Raw Node | {(m['file_bytes'] + m['blob_dir_bytes']) / n:,.0f} B |",
            f"| store file per Raw Node | {m['file_bytes'] / n:,.0f} B |",
            f"| Raw Nodes' own bytes per Raw Node | {raw / n:,.0f} B |",
            f"| (store file + blobs) / Raw Nodes' own bytes | {(m['file_bytes'] + m['blob_dir_bytes']) / raw:.1f}x |",
            f"| index snapshots: rows / bytes | {m['snapshots']:,} / {mb(m['snapshot_bytes'])} |",
            "",
            f"Per table and index (SQLite dbstat, {m['dbstat_s']:.0f} s to compute):",
            "",
            "| table / index | bytes | per Raw Node |",
            "|---|---:|---:|",
        ]
        lines += [f"| {k} | {v:,} | {v / n:,.0f} B |" for k, v in list(m["tables"].items())[:14] if isinstance(v, int)]
    def row(name, xs):
        return (f"| {name} | {len(xs)} | {ms(pct(xs, 50))} | {ms(pct(xs, 95))} | {ms(pct(xs, 99))} | "
                f"{ms(max(xs))} |")

    lines += [
        "",
        "## Reads",
        "",
        f"One fresh process (`python -c`, imports {rd['import_s']:.2f} s, opening Memory + the store "
        f"{rd['open_s']:.2f} s): `root.store.namespaces()` over {rd['n_namespaces']:,} namespaces took "
        f"**{ms(rd['list_namespaces_s'])}**; its first retrieve {rd['first_retrieve_s']:.2f} s (one-off: JIT "
        f"compilation of the read kernels and the embedder). Then `tenant(ns).retrieve(q)` for random namespaces "
        "(seeded; q one of that history's own questions), first with the tenant not loaded (its latest snapshot read "
        "and decoded from the store: what a service pays for a user it has not seen since start), then again on the "
        "loaded tenants. The OS page cache is not dropped (no root), so 'cold' is a cold process and tenant, "
        "not a cold disk.",
        "",
        "| read | n | p50 | p95 | p99 | max |",
        "|---|---:|---:|---:|---:|---:|",
        row("retrieve, tenant not loaded (snapshot load + read)", rd["cold_s"]),
        row("retrieve, tenant loaded (warm)", rd["warm_s"]),
    ]
    if rd["batch_s"]:
        lines.append(row(f"retrieve_many, batch of {rd['batch_size']} random namespaces (mixed)", rd["batch_s"]))
    lines.append(f"\nReader process peak RSS {rd['peak_rss_mb']:,.0f} MB with {len(set(r for r in rd.get('loaded', [])))} "
                 "tenants loaded." if rd.get("loaded") else
                 f"\nReader process peak RSS {rd['peak_rss_mb']:,.0f} MB (all tenants it read stay loaded).")
    if res.get("verify"):
        v = res["verify"]
        lines += ["", "## verify on this store", ""] + v.get("table", [])
    if extra:
        lines += [
            "",
            "## Per-namespace ingest cost with other methods / embedders (smaller runs, same generator)",
            "",
            "| method | embedder | namespaces | sessions/s | Raw Nodes/s | s per namespace | extrapolated to "
            f"{ing['all']['namespaces']:,} namespaces |",
            "|---|---|---:|---:|---:|---:|---:|",
        ]
        for e in extra:
            g = e["ingest"]["all"]
            lines.append(f"| {e['args']['method']} | {e['args']['embedder']} | {g['namespaces']} | "
                         f"{g['sessions_per_s']:.2f} | {g['nodes_per_s']:,.0f} | {g['s_per_namespace']:.1f} | "
                         f"{g['s_per_namespace'] * ing['all']['namespaces'] / 3600:.1f} h |")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--namespaces", type=int, default=1000)
    ap.add_argument("--store", default="/tmp/scale/store", help="store location (folder, or a URL) for Memory")
    ap.add_argument("--method", default="dense-topk")
    ap.add_argument("--embedder", default="hashing", help="text embedder: hashing, minilm, auto, local:PATH")
    ap.add_argument("--quick", action="store_true", help="20 namespaces, 30 reads (a smoke test)")
    ap.add_argument("--seed", type=int, default=1, help="synth seed (and the read sample's)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/scale"), help="data, logs (never in the repo)")
    ap.add_argument("--data", type=Path, help="dataset folder (default WORK/d<namespaces>-s<seed>; made if missing)")
    ap.add_argument("--reads", type=int, default=300)
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--skip-ingest", action="store_true", help="measure the store the log says was built")
    ap.add_argument("--verify", action="store_true", help="time verify (benchmarks/verify_scale.py) on the store")
    ap.add_argument("--extra", type=Path, nargs="*", default=[], help="JSON results of smaller runs to tabulate")
    ap.add_argument("--verify-json", type=Path, help="with --render-only: a verify_scale.py --json result to include")
    ap.add_argument("--render-only", action="store_true", help="re-render --out from its .json (+ --extra)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/store-scale-cpu.md")
    args = ap.parse_args()
    if args.quick:
        args.namespaces, args.reads, args.batches = min(args.namespaces, 20), 30, 3
    if args.render_only:
        res = json.loads(args.out.with_suffix(".json").read_text())
        if args.verify_json:
            res["verify"] = json.loads(args.verify_json.read_text())
        return write(args, res)
    args.work.mkdir(parents=True, exist_ok=True)
    data = args.data or args.work / f"d{args.namespaces}-s{args.seed}"
    if not (data / "episodes.jsonl").exists():
        sh([sys.executable, "-m", "c3m.cli", "synth", str(data), "--preset", "hard", "--split", "dev", "--length",
            "32k", "--episodes", str(args.namespaces), "--seed", str(args.seed), "-q"], cwd=ROOT)
    tag = f"{args.method}-{args.embedder}-{Path(str(args.store)).name}".replace("/", "_").replace(":", "_")
    log = args.work / f"ingest-{tag}.jsonl"
    if not args.skip_ingest:
        ingest(args, data, log)
    rows = [json.loads(x) for x in log.read_text().splitlines()]
    res = {"args": {**{k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k != "extra"},
                    "data": str(data)},
           "commit": git_commit(ROOT), "when": f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M}",
           "ingest": summarise_ingest(rows), "ingest_rows": rows}
    is_folder = not str(args.store).startswith("postgresql")
    res["size"] = measure_sqlite(Path(args.store)) if is_folder else None
    res["reads"] = reads(args, read_plan(args, data, len(rows)), args.work)
    if args.verify:
        vj = args.work / f"verify-{tag}.json"
        sh([sys.executable, str(ROOT / "benchmarks/verify_scale.py"), "--store", str(args.store), "--json", str(vj)],
           cwd=ROOT)
        res["verify"] = json.loads(vj.read_text())
    return write(args, res)


def write(args, res: dict) -> int:
    extra = [json.loads(p.read_text()) for p in args.extra]
    lines = render(res, extra)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(res, indent=1))
    if plot(res["ingest_rows"], res["reads"], args.out.with_suffix(".png")):
        lines += ["", f"![throughput and latency]({args.out.with_suffix('.png').name})"]
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
