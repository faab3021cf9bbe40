"""End-to-end read benchmark: many tenants, one store — batched ``retrieve_many`` vs the per-question loop vs
faiss per tenant, with the library's real models.

Workload: N tenants (1, 64, 1,024, 4,096 ...), each a 32K-token history's index. Tenants are clones of the
source store's K real histories (``--store``, built with ``c3m ingest``): each clone has its **own** index
object and its own key rows in memory (so memory and kernel work scale with N), while its Raw Nodes are the
source history's rows in the one store (the SQLite page cache sees K histories, not N: a best case for store
reads, the same for every path). Requests are (random tenant, one of its history's questions).

Paths, side by side in one run, on the same requests:

* ``loop``: ``method.retrieve(question, budget)`` once per request (what a server without batching does);
* ``batched``: ``Method.retrieve_many`` over batches of ``--batch`` requests (one embedding call, one ragged
  ``candidate_topk`` launch, one ``budget_solve``);
* ``faiss`` (dense-topk only): one ``faiss.IndexFlatIP`` per tenant, searched per request, then the same node
  fetch and budgeted selection.

Every batched context is checked against the loop's (``identical`` column). Latency p50/p95 is per request
for the loop and faiss, and per batch (what each request in it waits) for the batched path.
Memory: RSS before and after loading the tenants, per 1,000 tenants.

    python benchmarks/e2e/read.py --store STORE --dataset DATASET --tenants 1,64,1024 --methods dense-topk,c3m
    python benchmarks/e2e/read.py --build 2 --store /tmp/e2e-store ...   # synthesise + ingest the sources first
    python benchmarks/e2e/read.py --smoke                                  # seconds: a tiny history, 1 and 8 tenants
"""
from __future__ import annotations

import argparse
import csv
import json
import random
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def load_sources(store, namespaces, method_name, models, device):
    from c3m.methods import method_class

    cls = method_class(method_name)
    out = []
    for ns in namespaces:
        m = cls(store, ns, models)
        m.device = device
        snap = store.snapshot(ns, m.snapshot_key, None)
        if snap is None:
            raise SystemExit(f"{ns}: no {method_name} snapshot in the store; ingest it with --method {method_name}")
        m.load_state(snap.state)
        out.append((m, snap.state))
    return cls, out


def make_tenants(cls, sources, n, models, store, arena, device):
    """n clones over the sources (round robin): own index / own key rows."""
    tenants = []
    for t in range(n):
        src, state = sources[t % len(sources)]
        m = cls(store, src.namespace, models)
        m.device = device
        if hasattr(m, "dense"):  # dense-topk: the node list is the source's, the key rows are the clone's own
            m.node_ids, m.upto_seq = list(src.node_ids), src.upto_seq
            m.dense.arena = arena
            m.dense.key = f"tenant-{t}"
            arena.extend(m.dense.key, src.dense.vectors)
            m._vector_memo = src._vector_memo
        else:
            m.load_state(state)
            m._vector_memo = dict(src._vector_memo)
        tenants.append(m)
    return tenants


def percentile(xs, p):
    return float(np.percentile(xs, p)) if len(xs) else float("nan")


def run_loop(tenants, requests, budget):
    lat, out = [], []
    for t, q in requests:
        t0 = time.perf_counter()
        out.append(tenants[t].retrieve(q, budget))
        lat.append(time.perf_counter() - t0)
    return out, lat


def run_batched(cls, tenants, requests, budget, batch):
    lat, out = [], []
    for s in range(0, len(requests), batch):
        chunk = requests[s:s + batch]
        t0 = time.perf_counter()
        out.extend(cls.retrieve_many([(tenants[t], q, budget) for t, q in chunk]))
        lat.append(time.perf_counter() - t0)
    return out, lat


def run_faiss(tenants, requests, budget):
    """Per request: embed, search the tenant's own IndexFlatIP, fetch, select (dense-topk's read, faiss top-k)."""
    import faiss

    indexes = {}
    for i in sorted({t for t, _ in requests}):  # only the tenants the requests hit (building is not timed)
        m = tenants[i]
        idx = faiss.IndexFlatIP(m.dense.arena.dim)
        idx.add(np.ascontiguousarray(m.dense.vectors))
        indexes[i] = idx
    lat, out = [], []
    for t, q in requests:
        m = tenants[t]
        t0 = time.perf_counter()
        v = m.models.text_embedder.embed([q]).astype(np.float32)
        k = min(m.pool_size + 16, len(m.node_ids))
        scores, rows = indexes[t].search(v, k)
        nodes = m.store.get_nodes([m.node_ids[r] for r in rows[0] if r >= 0])
        pool = [(nodes[m.node_ids[r]], float(s)) for r, s in zip(rows[0], scores[0]) if r >= 0]
        pool = [(n, s) for n, s in pool if not n.redacted][:m.pool_size]
        out.append(m._select(q, pool, budget))
        lat.append(time.perf_counter() - t0)
    return out, lat


def build_sources(args) -> str:
    """Synthesise ``args.build`` hard/dev histories and ingest them with every benchmarked method (skipped for
    histories already in the store)."""
    from c3m import Memory, MemoryConfig
    from c3m.dataset import load_dataset
    from c3m.eval.synth import generate_dataset

    data = Path(args.store).parent / f"e2e-data-{args.length}-{args.build}"
    if not (data / "episodes.jsonl").exists():
        generate_dataset(data, length=args.length, episodes=args.build, seed=0, split="dev", progress=False,
                         preset="hard")
    for h in load_dataset(data):
        for method in args.methods.split(","):
            with Memory(args.store, h.id, config=MemoryConfig(method=method)) as mem:
                mem.add_history(h, progress=True)
    return str(data)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--store", help="a store with the source histories ingested (c3m ingest)")
    ap.add_argument("--dataset", help="the dataset those histories came from (for the questions)")
    ap.add_argument("--build", type=int, default=0,
                    help="first synthesise this many hard/dev histories (--length) and ingest them into --store")
    ap.add_argument("--length", default="32k")
    ap.add_argument("--smoke", action="store_true", help="a tiny run that checks the script end to end")
    ap.add_argument("--tenants", default="1,64,1024")
    ap.add_argument("--methods", default="dense-topk,c3m")
    ap.add_argument("--requests", type=int, default=256, help="requests per (method, tenants) cell")
    ap.add_argument("--batch", type=int, default=256, help="requests per retrieve_many call")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "e2e-read-cpu"))
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.smoke:
        import tempfile

        tmp = Path(tempfile.mkdtemp(prefix="e2e-read-smoke-"))
        args.build, args.length, args.tenants, args.requests, args.batch = 1, "4k", "1,8", 16, 8
        args.store, args.dataset = args.store or str(tmp / "store"), None
        args.out = str(tmp / "out") if args.out == ap.get_default("out") else args.out
    if args.build:
        args.dataset = build_sources(args)
    if not (args.store and args.dataset):
        ap.error("--store and --dataset are required (or --build N / --smoke to make them)")

    from c3m import MemoryConfig
    from c3m.dataset import load_dataset
    from c3m.models import Models
    from c3m.read.arena import KeyArena
    from c3m.store import ColdStore
    from c3m.types import ReaderBudget

    cfg = MemoryConfig()
    store = ColdStore(args.store, create=False)
    models = Models.from_config(cfg, store=store, perception="none", image_embedder="none")
    histories = {h.id: h for h in load_dataset(args.dataset)}
    namespaces = [ns for ns in histories if store.head_seq(ns) > 0]
    if not namespaces:
        raise SystemExit(f"none of {list(histories)[:3]}… is a namespace of {args.store}")
    budget = ReaderBudget()
    try:
        import faiss  # noqa: F401
        have_faiss = True
    except ImportError:
        have_faiss = False
    rows = []
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for method in args.methods.split(","):
        base_rss = rss_mib()
        cls, sources = load_sources(store, namespaces, method, models, args.device)
        for n in (int(x) for x in args.tenants.split(",")):
            rng = random.Random(args.seed)
            per = max((len(src.node_ids) for src, _ in sources), default=0) if method == "dense-topk" else 0
            arena = KeyArena(models.text_embedder.dim, capacity=n * (1 << max(4, (per - 1).bit_length())) if per else 1)
            before = rss_mib()
            tenants = make_tenants(cls, sources, n, models, store, arena, args.device)
            after = rss_mib()
            requests = []
            for _ in range(args.requests):
                t = rng.randrange(n)
                qs = histories[tenants[t].namespace].questions
                requests.append((t, rng.choice(qs).question))
            run_loop(tenants, requests[:8], budget)  # warm-up: numba compile, page cache, memo
            run_batched(cls, tenants, requests[:8], budget, 8)
            loop_ctx, loop_lat = run_loop(tenants, requests, budget)
            bat_ctx, bat_lat = run_batched(cls, tenants, requests, budget, args.batch)
            same = sum(a == b for a, b in zip(loop_ctx, bat_ctx))
            cells = {"loop": loop_lat, "batched": bat_lat}
            if method == "dense-topk" and have_faiss:
                _, cells["faiss"] = run_faiss(tenants, requests, budget)
            loop_qps = len(requests) / sum(loop_lat)
            for path, lat in cells.items():
                qps = len(requests) / sum(lat)
                rows.append({"method": method, "tenants": n, "path": path, "requests": len(requests),
                             "batch": args.batch if path == "batched" else 1, "qps": round(qps, 1),
                             "p50_ms": round(1000 * percentile(lat, 50), 2), "p95_ms": round(1000 * percentile(lat, 95), 2),
                             "vs_loop": round(qps / loop_qps, 2), "identical": f"{same}/{len(requests)}" if path == "batched" else "",
                             "rss_mib_per_1000_tenants": round((after - before) * 1000 / n, 1),
                             "rss_mib": round(after, 1)})
                print(json.dumps(rows[-1]), flush=True)
            del tenants, arena
        del sources
        _ = base_rss
    with open(out / "e2e-read.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    write_markdown(rows, out, args)
    plot(rows, out)
    return 0


def write_markdown(rows, out: Path, args) -> None:
    from benchmarks.report import git_commit, md_rows
    from c3m.machine import describe

    commit = git_commit(ROOT)
    lines = [f"# End-to-end read: batched vs per-question loop vs faiss per tenant ({args.device})", "",
             f"`python benchmarks/e2e/read.py {' '.join(sys.argv[1:])}` — {time.strftime('%Y-%m-%d')}, at commit {commit}, "
             f"{describe()}, MiniLM (numpy) embedder, "
             f"default reader budget; {args.requests} requests per cell, batches of {args.batch}.", "",
             "| method | tenants | path | q/s | p50 ms | p95 ms | × loop | identical to loop | RSS MiB / 1000 tenants |",
             "|---|---:|---|---:|---:|---:|---:|---|---:|"]
    lines += md_rows(rows, ("method", "tenants", "path", "qps", "p50_ms", "p95_ms", "vs_loop", "identical",
                            "rss_mib_per_1000_tenants"))
    lines += ["", "p50/p95: per request (loop, faiss), per batch of requests (batched: each request in a batch "
              "waits for the whole batch)."]
    (out / "e2e-read.md").write_text("\n".join(lines) + "\n")


def plot(rows, out: Path) -> None:
    from benchmarks.report import plot_per_method

    plot_per_method(rows, out / "e2e-read.png", x="tenants", y="qps", series_field="path",
                    series=("loop", "batched", "faiss"), xlabel="tenants", ylabel="questions / s")


if __name__ == "__main__":
    raise SystemExit(main())
