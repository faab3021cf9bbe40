"""``c3m`` command line: a thin layer over ``c3m.Memory`` and the dataset tools.

Every command takes ``--store`` (default ``$C3M_STORE`` or ``./c3m-store``). Errors print what is wrong
and how to fix it, and exit with status 2; ``verify`` exits 1 when the store is damaged.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from .config import MemoryConfig
from .errors import C3MError
from .types import ReaderBudget, as_json_dict, chain_lines, status_note

DEFAULT_STORE = "./c3m-store"


def _config(args) -> MemoryConfig:
    cfg = MemoryConfig.load(args.config) if getattr(args, "config", None) else MemoryConfig()
    changes = {k: getattr(args, k) for k in ("method", "text_embedder", "answerer", "perception", "image_embedder")
               if getattr(args, k, None)}
    return cfg.with_(**changes) if changes else cfg


def _budget(spec: str | None, default: ReaderBudget) -> ReaderBudget:
    """Parse ``pages=3,raw_nodes=12,images=8,text_tokens=12288`` over the default budget."""
    if not spec:
        return default
    values = dict(zip(("pages", "raw_nodes", "images", "text_tokens"), default.as_tuple()))
    for part in spec.split(","):
        key, _, value = part.partition("=")
        if key.strip() not in values or not value.strip().isdigit():
            from .errors import InvalidInput

            raise InvalidInput("--budget", f"cannot read {part!r}",
                               fix="write e.g. --budget raw_nodes=6,text_tokens=2000 (keys: pages, raw_nodes, "
                                   "images, text_tokens)")
        values[key.strip()] = int(value)
    return ReaderBudget(**values)


def _open(args, namespace: str | None = None):
    """A Memory on an existing store and namespace: asking or inspecting a typo must not create an empty store
    and answer "I don't know"."""
    from .memory import Memory
    from .methods import method_class

    cfg = _config(args)
    method_class(cfg.method)  # a bad --method is named before the store is looked at
    namespace = _require_namespace(args.store, namespace or args.namespace)
    return Memory(args.store, namespace, config=cfg)


def _existing_store(store_path: str) -> None:
    """Refuse a path that holds no store: reading commands never create one."""
    from .errors import StoreError

    from .store.db import is_postgres_url

    if is_postgres_url(store_path):  # ColdStore(create=False) checks the database for a store
        return
    if not (Path(store_path) / "store.sqlite").is_file():
        raise StoreError(f"no c3m store at {store_path}",
                         fix="ingest first (`c3m ingest DATASET --store DIR`), or pass --store / set $C3M_STORE "
                             "to an existing store")


def _some(names: list[str]) -> str:
    return f"{', '.join(names[:20])}{' …' if len(names) > 20 else ''}"


def _require_namespace(store_path: str, namespace: str | None) -> str:
    """The namespace to open: the one given, else the store's only one; an unknown one is an error that lists
    what exists."""
    from .errors import InvalidInput
    from .store import ColdStore

    _existing_store(store_path)
    with ColdStore(store_path, create=False) as store:
        have = store.namespaces()
    if namespace is None and len(have) == 1:
        return have[0]
    if namespace is None:
        raise InvalidInput("--namespace", f"{store_path} holds {len(have)} namespaces; say which one",
                           fix=f"pass -n NS, one of: {_some(have)}" if have else "the store is empty: ingest first")
    if namespace not in have:
        raise InvalidInput("--namespace", f"no namespace {namespace!r} in {store_path}",
                           fix=f"use one of: {_some(have)} (`c3m namespaces` lists them)" if have
                           else "the store is empty: ingest first")
    return namespace


# -- commands -------------------------------------------------------------------------------------
def cmd_demo(args) -> int:
    from .demo import run_demo

    if args.store_given:
        run_demo(args.store, dataset_dir=args.dataset_out, config=_config(args))
        return 0
    with tempfile.TemporaryDirectory(prefix="c3m-demo-") as tmp:
        run_demo(Path(tmp) / "store", dataset_dir=args.dataset_out, config=_config(args))
    return 0


def cmd_validate(args) -> int:
    from .dataset import validate_dataset

    problems = validate_dataset(args.dataset)
    for p in problems:
        print(f"error: {p}", file=sys.stderr)
    print(f"{args.dataset}: {'OK' if not problems else f'{len(problems)} problem(s)'}")
    return 2 if problems else 0


def cmd_ingest(args) -> int:
    from tqdm import tqdm

    from .dataset import iter_histories, validate_dataset
    from .memory import Memory

    problems = validate_dataset(args.dataset)  # fail before writing anything
    if problems:
        for p in problems[:20]:
            print(f"error: {p}", file=sys.stderr)
        print(f"{len(problems)} problem(s) in {args.dataset}; nothing was ingested", file=sys.stderr)
        return 2
    cfg, models = _config(args), None
    totals = {"histories": 0, "sessions_new": 0, "sessions_unchanged": 0, "raw_nodes": 0, "images": 0}
    histories = list(iter_histories(args.dataset))
    bar = tqdm(total=sum(len(h.sessions) for h in histories), desc="ingest", unit="session",
               disable=args.quiet)
    per_namespace: dict[str, dict] = {}
    root = None  # one store connection and one set of models for every history (tenants of one Memory)
    try:
        for history in histories:
            namespace = args.namespace if args.namespace else f"{args.namespace_prefix}{history.id}"
            row = per_namespace.setdefault(namespace, {"namespace": namespace, "histories": [], "sessions_new": 0,
                                                       "sessions_unchanged": 0})
            row["histories"].append(history.id)
            root = root or Memory(args.store, namespace, config=cfg, models=models)
            mem = root.tenant(namespace)
            def added(res, row=row) -> None:
                row["sessions_new" if res.created else "sessions_unchanged"] += 1
                totals["raw_nodes"] += res.raw_nodes if res.created else 0
                totals["images"] += res.images if res.created else 0
                bar.update(1)

            # questions stay in the dataset: the write path never sees them; the next sessions' model work runs
            # on a second thread while one commits (Memory.add_sessions)
            mem.add_sessions(history.sessions, on_added=added)
            root.release(namespace)  # its index is in the store; keep memory flat over many histories
            totals["histories"] += 1
    finally:
        if root is not None:
            root.close()
    bar.close()
    for key in ("sessions_new", "sessions_unchanged"):
        totals[key] = sum(r[key] for r in per_namespace.values())
    if args.json:
        print(json.dumps({**totals, "store": str(args.store), "namespaces": list(per_namespace.values())}))
        return 0
    for r in list(per_namespace.values())[:50]:
        print(f"  namespace {r['namespace']}: {r['sessions_new']} new, {r['sessions_unchanged']} already stored "
              f"(history {', '.join(r['histories'][:3])}{' …' if len(r['histories']) > 3 else ''})")
    if len(per_namespace) > 50:
        print(f"  … and {len(per_namespace) - 50} more namespace(s): `c3m namespaces --store {args.store}`")
    print(f"ingested {totals['histories']} histories into {len(per_namespace)} namespace(s): "
          f"{totals['sessions_new']} new sessions ({totals['sessions_unchanged']} already stored), "
          f"{totals['raw_nodes']} Raw Nodes, {totals['images']} images -> {args.store}")
    first = next(iter(per_namespace), None)
    if first is not None:
        print(f'ask with: c3m ask "QUESTION" -n {first} --store {args.store}')
    return 0


def cmd_ask(args) -> int:
    budget = _budget(args.budget, _config(args).reader_budget)  # bad input is named before anything opens
    with _open(args) as mem:
        answer = mem.ask(args.question, budget)
        ctx = answer.context
        if args.json:
            print(json.dumps({"namespace": mem.namespace, "answer": answer.text, "answerer": answer.answerer,
                              "cited": list(answer.cited), "use": as_json_dict(ctx.use),
                              "budget": as_json_dict(ctx.budget), "items": [as_json_dict(i) for i in ctx.items],
                              "chains": as_json_dict(ctx.chains), "trace": ctx.trace.to_dict()}, indent=2))
            return 0
        print(f"Q: {args.question}\nA: {answer.text}\n")
        print(f"context ({mem.method_name} in namespace {mem.namespace}, answerer {answer.answerer}; * = cited):")
        for item in ctx.items:
            p = item.provenance
            imgs = "".join(f" [image {im.sha256[:12]} {im.width}x{im.height}]" for im in item.images)
            mark = " *" if item.node_id in answer.cited else ""
            form = getattr(item.form, "value", item.form)
            print(f"  {p.session_id}#{p.turn_index} {p.time:%Y-%m-%d %H:%M} {item.role:9s} {item.score:6.3f}{mark} "
                  f"{'' if form == 'raw_text' else f'[{form}] '}{item.text[:100]}{imgs}{status_note(item)}")
        for line in chain_lines(ctx.chains):
            print(f"  {line}")
        u, b = ctx.use, ctx.budget
        print(f"\nbudget use: pages {u.pages}/{b.pages}, raw nodes {u.raw_nodes}/{b.raw_nodes}, images "
              f"{u.images}/{b.images}, text tokens {u.text_tokens}/{b.text_tokens} ({mem.models.token_counter.name})")
    return 0


def _namespace_rows(store_path: str) -> list[dict]:
    from .store import ColdStore

    _existing_store(store_path)
    with ColdStore(store_path, create=False) as store:
        return [{"namespace": ns, **store.namespace_stats(ns), "methods": store.snapshot_methods(ns)}
                for ns in store.namespaces()]


def cmd_namespaces(args) -> int:
    rows = _namespace_rows(args.store)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"store {args.store}: {len(rows)} namespace(s)")
    for r in rows:
        print(f"  {r['namespace']}: {r['sessions']} sessions, {r['raw_nodes']} Raw Nodes, {r['images']} "
              f"images, snapshots for {', '.join(r['methods']) or '-'}")
    return 0


def cmd_inspect(args) -> int:
    if args.namespace is None:
        cmd_namespaces(args)
        if not args.json:
            print("pick one with --namespace NS")
        return 0
    with _open(args) as mem:
        snap = mem.snapshot(args.version)
        if snap is None:
            from .errors import InvalidInput

            raise InvalidInput("--version", f"no snapshot {args.version} for {mem.method_name}",
                               fix=f"choose from {mem.store.snapshot_versions(mem.namespace, mem.method_name)}")
        head = mem.sync()
        store_stats = mem.store.namespace_stats(mem.namespace)
        mem.method.load_state(snap.state)  # everything below is the index as of that version
        described = mem.method.describe()
        sessions = [s for s in mem.sessions() if s.seq <= snap.version]
        info = {"namespace": mem.namespace, "method": mem.method_name, "version": snap.version, "head": head,
                "store": store_stats, "index": described,
                "snapshot": {"version": snap.version, "after_session": snap.session_id,
                             "created_at": snap.created_at, "pointers": len(snap.pointers),
                             "complete_provenance": snap.complete_provenance},
                "sessions": [{"seq": s.seq, "id": s.session_id, "time": s.time.isoformat(), "turns": s.n_turns}
                             for s in sessions],
                "maintenance": mem.store.maintenance_log(mem.namespace, mem.method_name, version=args.version)}
        if args.json:
            info["state"] = snap.state
            print(json.dumps(info, indent=2, default=str))
            return 0
        of = f" of {head}" if snap.version != head else " (latest)"
        print(f"namespace {mem.namespace}  method {mem.method_name}  version {snap.version}{of}: "
              f"{len(sessions)} sessions, {sum(s.n_turns for s in sessions)} Raw Nodes")
        print(f"store now: {store_stats['sessions']} sessions, {store_stats['raw_nodes']} Raw Nodes "
              f"({store_stats['redacted_nodes']} redacted), {store_stats['images']} images")
        print(f"snapshot after session {snap.session_id} (v{snap.version}): {len(snap.pointers)} Raw-Node "
              f"pointers, complete provenance: {snap.complete_provenance}")
        for k, v in described.items():
            if k not in ("method", "pages", "entries"):
                print(f"  {k}: {v}")
        print("sessions:")
        for s in info["sessions"]:
            print(f"  {s['seq']:>4}  {s['id']:<16} {s['time']}  {s['turns']} turns")
        if "entries" in described:
            _print_index(mem, snap, described)
        print(f"maintenance log ({len(info['maintenance'])} action(s); last 20):")
        for m in info["maintenance"][-20:]:
            print(f"  v{m['version']} {m['session_id']}: {m['action']} {json.dumps(m['detail'])}")
    return 0


def _print_index(mem, snap, d: dict) -> None:
    """Pages, entries, relation chains and the overflow log of a bounded index (method ``c3m``), as of the
    snapshot being inspected (``d`` = the method's ``describe()`` with that snapshot loaded)."""
    entries = {e["id"]: e for e in d["entries"]}
    print("active index: " + ", ".join(f"{k} {v}" for k, v in d["usage"].items()))
    for p in d["pages"]:
        print(f"  page {p['id']}  {p['summary']}")
        for eid in p["entries"]:
            e = entries[eid]
            labels = ", ".join(f"{k}×{v}" for k, v in sorted(e["labels"].items()))
            print(f"    {eid} [{e['kind']}] {e['pointers']} pointers, support {e['support']}"
                  f"{', ' + labels if labels else ''}: {e['text']}")
    chains = [e for e in d["entries"] if e["chain"]]
    print(f"relation chains (updates, oldest first): {len(chains)}")
    for e in chains:
        steps = " -> ".join(f"{c['time'][:10]} {', '.join(c['states']) or c['text'][:50]}" for c in e["chain"])
        print(f"  {e['id']}: {steps}")
    repairs = [m for m in mem.store.maintenance_log(mem.namespace, mem.method_name)
               if m["action"] in ("overflow_repair", "consolidate") and m["version"] <= snap.version
               and not m["detail"].get("replay")]
    print(f"overflow log: {sum(m['action'] == 'overflow_repair' for m in repairs)} overflow repair(s), "
          f"{sum(m['action'] == 'consolidate' for m in repairs)} safe consolidation(s); last 10:")
    for m in repairs[-10:]:
        det = m["detail"]
        if m["action"] == "overflow_repair":
            print(f"  v{m['version']} {m['session_id']}: moved {det['moved']} -> {det['into']} (page p{det['page']}, "
                  f"{det['pointers']} pointers; over {', '.join(det['over'])})")
        else:
            print(f"  v{m['version']} {m['session_id']}: merged {det['merged']} into {det['kept']} "
                  f"(same, c={det['confidence']})")


def cmd_verify(args) -> int:
    from .store import ColdStore, verify_store

    with ColdStore(args.store, create=False) as store:
        report = verify_store(store, check_blob_hashes=not args.fast)
    print(json.dumps(report.to_dict(), indent=2) if args.json else report)
    return 0 if report.ok else 1


def cmd_forget(args) -> int:
    if args.namespace is None:  # redaction is never aimed at a namespace by default
        from .errors import InvalidInput

        raise InvalidInput("--namespace", "forget needs the namespace to redact in", fix="pass -n NS")
    with _open(args) as mem:
        rep = mem.forget(node_ids=args.node or (), session_id=args.session, reason=args.reason)
    print(f"redacted {len(rep.node_ids)} Raw Node(s) in {rep.namespace}; deleted {rep.blobs_deleted} image blob(s); "
          f"dropped {rep.snapshots_dropped} derived snapshot(s) (the index is rebuilt from the redacted store on "
          f"its next use)")
    return 0


def cmd_models(args) -> int:
    from .models import available_backends

    rows = available_backends()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for r in rows:
        print(f"  {r['kind']:<14} {r['name']:<11} {'yes' if r['available'] else 'no ':<4} {r['reason']}")
    return 0


def _field(cls, attr: str) -> str:
    value = getattr(cls, attr, "") if cls is not None else ""
    return value.strip() if isinstance(value, str) and value.strip() else "-"


def method_rows() -> list[dict]:
    """One row per method: the project's names (``METHOD_NAMES``, ``planned`` when not registered yet), then any
    other registered name."""
    from .methods import METHOD_NAMES, available_methods, method_class

    have = available_methods()
    rows = []
    for name in [*METHOD_NAMES, *(n for n in have if n not in METHOD_NAMES)]:
        cls = method_class(name) if name in have else None
        rows.append({"name": name, "status": "planned" if cls is None else
                     "bounded" if getattr(cls, "bounded", False) else "unbounded",
                     "reads": _field(cls, "reads") if cls is not None else "-", "paper": _field(cls, "paper"),
                     "summary": _field(cls, "summary")})
    return rows


def cmd_methods(args) -> int:
    rows = method_rows()
    if getattr(args, "json", False):
        print(json.dumps(rows, indent=2))
        return 0
    import textwrap

    w_name = max(len(r["name"]) for r in rows)
    print(f"  {'method':<{w_name}}  {'budget':<9}  what it reads; then what it does [its paper]")
    for r in rows:  # two lines per method: what it is, then what it does (wrapped to 100 columns)
        print(f"  {r['name']:<{w_name}}  {r['status']:<9}  reads {r['reads'] or '-'}"[:100])
        about = " ".join(x for x in (r["summary"] if r["summary"] != "-" else "",
                                     f"[{r['paper']}]" if r["paper"] not in ("", "-") else "") if x)
        if about:
            print(textwrap.fill(about, 100, initial_indent=" " * (w_name + 4), subsequent_indent=" " * (w_name + 4)))
    print("bounded = keeps its active index within the write budget (measured by the harness)\n"
          "planned = not implemented yet; --json for machine-readable rows")
    return 0


def expand_methods(specs: list[str] | None) -> list[str] | None:
    """``all`` -> every registered method (``METHOD_NAMES`` order, then other registered names); other specs
    (variants like ``c3m:expansion=false``) are kept; duplicates dropped, first occurrence wins."""
    if not specs:
        return specs
    from .methods import METHOD_NAMES, available_methods

    have = available_methods()
    every = [n for n in METHOD_NAMES if n in have] + [n for n in have if n not in METHOD_NAMES]
    out: list[str] = []
    for spec in specs:
        for s in every if spec == "all" else [spec]:
            if s not in out:
                out.append(s)
    return out


def cmd_eval(args) -> int:
    from .eval import make_header, run_eval, write_report
    from .eval.report import compute_paired, paired_markdown

    cfg = _config(args)
    budget = _budget(args.budget, cfg.reader_budget)
    methods = expand_methods(args.methods) or [cfg.method]
    everything = run_eval(args.dataset, methods, args.out, config=cfg, budget=budget, workers=args.workers,
                          progress=not args.json, limit=args.limit, judge=args.judge, perception=args.perception,
                          answer=not args.no_answer)
    header = make_header(cfg, budget, seed=args.seed, judge=args.judge, perception=args.perception,
                         answered=not args.no_answer)
    metrics = write_report(everything, args.out, header)
    from .eval.table1 import write_table1

    table1 = write_table1(everything, Path(args.out) / "table1.md", seed=args.seed,
                          judged_label=f"answerer {cfg.answerer}, judge {args.judge}" if args.judge else None)
    if args.json:
        print(json.dumps(metrics, indent=2))
        return 0
    print(f"report: {Path(args.out) / 'report.md'}  table 1: {table1}  metrics: {Path(args.out) / 'metrics.json'}")
    paired = compute_paired(everything, seed=args.seed)
    if paired:  # the comparison first: a difference on the same histories, not two separate intervals
        print("\n".join(paired_markdown(paired, "raw_support_recall")))
    print("answer_f1 / answered / prec_answered / refused: the configured answerer (token F1, coverage, precision "
          "among answered, refusal recall on AR and forgotten evidence); oracle-reader accuracy = all gold evidence in "
          "the context (evidence-only); "
          "overall = IE/MSR/TR/KU; every figure measured by the harness")
    cols = ("oracle_reader_acc", "raw_support_recall", "route_hit", "pool_size", "text_tokens", "images")
    if not args.no_answer:  # answers beside evidence: token F1, coverage (answered), precision among answered
        cols = ("answer_f1", "answered", "precision_answered", "refused_should") + cols
    if args.judge:  # judged accuracy beside the evidence-only figures, not only in report.md
        cols = ("judged_acc",) + cols
    short = {"answer_f1": "answer_f1", "answered": "answered", "precision_answered": "prec_answered",
             "refused_should": "refused", "judged_acc": "judged_acc", "oracle_reader_acc": "oracle_reader",
             "raw_support_recall": "raw_SR", "route_hit": "route_hit", "pool_size": "pool",
             "text_tokens": "text_tokens", "images": "images"}
    width = max(len(w) for w in short.values()) + 2
    print(f"{'method':<16}{'length':>7}{'category':>9}" + "".join(f"{short.get(c, c):>{width}}" for c in cols)
          + f"{'violations':>11}")
    for method, by_len in metrics.items():
        for length, table in by_len.items():
            for cat, row in table.items():
                cells = ["–" if row.get(c, {}).get("mean") is None else f"{row[c]['mean']:.3f}" for c in cols]
                print(f"{method:<16}{length:>7}{cat:>9}" + "".join(f"{c:>{width}}" for c in cells)
                      + f"{row.get('violations', 0):>11}")
    return 0


def cmd_table1(args) -> int:
    from .errors import InvalidInput
    from .eval.harness import load_results
    from .eval.table1 import write_table1

    results = load_results(args.folder)
    if not results:
        raise InvalidInput("folder", f"no results under {Path(args.folder) / 'results'}",
                           fix="pass the --out folder of a `c3m eval` run")
    out = Path(args.out) if args.out else Path(args.folder) / "table1.md"
    path = write_table1(results, out, reference=args.reference, judged_label=args.judged_label, seed=args.seed)
    print(f"table 1: {path}")
    return 0


def cmd_convert(args) -> int:
    from .eval.loaders import SUMMARY_FILE, convert

    out = convert(args.kind, args.source, args.out)
    summary = json.loads((Path(out) / SUMMARY_FILE).read_text())
    print(json.dumps(summary, indent=2) if args.json else f"{args.kind} -> {out}: {summary}")
    return 0


def cmd_synth(args) -> int:
    from .eval.synth import generate_dataset

    out = generate_dataset(args.out, length=args.length, episodes=args.episodes, seed=args.seed, split=args.split,
                           workers=args.workers, progress=not args.quiet, preset=args.preset)
    manifest = json.loads((Path(out) / "manifest.json").read_text())
    print(json.dumps(manifest, indent=2) if args.json else
          f"wrote {args.episodes} histories of ~{args.length} text tokens to {out} "
          f"(preset {args.preset}, split {args.split}, seed {args.seed})")
    return 0


# -- service ---------------------------------------------------------------------------------------
def _key_file(args) -> Path:
    if getattr(args, "keys", None):
        return Path(args.keys)
    from .store.db import is_postgres_url, split_blobs_param

    if is_postgres_url(args.store):  # beside the blobs: the one folder a PostgreSQL store has
        return Path(split_blobs_param(args.store)[1] or ".") / "api_keys.json"
    return Path(args.store) / "api_keys.json"


def cmd_keys(args) -> int:
    from .server.auth import KeyRing

    ring = KeyRing(_key_file(args))
    if args.keys_command == "add":
        key, rec = ring.add(args.namespace or [], args.label or "")
        if args.json:
            print(json.dumps({"key": key, "key_id": rec.key_id, "namespaces": list(rec.namespaces)}))
        else:
            print(f"{key}\n  id {rec.key_id}, namespaces {', '.join(rec.namespaces)} (stored hashed in "
                  f"{ring.path}; this is the only time the key is shown)")
    elif args.keys_command == "revoke":
        if not args.key_id or not ring.revoke(args.key_id):
            from .errors import InvalidInput

            raise InvalidInput("key_id", f"no key {args.key_id!r} in {ring.path}", fix="list them with `c3m keys list`")
        print(f"revoked {args.key_id}")
    else:
        rows = [{"key_id": r.key_id, "namespaces": list(r.namespaces), "label": r.label, "created_at": r.created_at}
                for r in ring.records]
        if args.json:
            print(json.dumps(rows, indent=2))
        else:
            print(f"{len(rows)} key(s) in {ring.path}")
            for r in rows:
                print(f"  {r['key_id']}  {', '.join(r['namespaces'])}  {r['label']}  {r['created_at']}")
    return 0


def _limits(args):
    from dataclasses import replace

    from .server.limits import RequestLimits

    return replace(RequestLimits(), max_body_bytes=int(args.max_body_mib * 1024 * 1024),
                   max_text_chars=args.max_text_chars, max_images_per_turn=args.max_images_per_turn)


def _need_server_extra() -> None:
    import importlib.util

    missing = [m for m in ("fastapi", "uvicorn", "multipart", "mcp") if importlib.util.find_spec(m) is None]
    if missing:
        from .errors import C3MError

        raise C3MError(f"the service needs {', '.join(missing)}, which are not installed",
                       fix='pip install -e ".[server]" (or pip install "c3m[server]")')


def cmd_serve(args) -> int:
    _need_server_extra()
    cfg = _config(args)
    if args.openapi:
        from .server.app import openapi_spec

        Path(args.openapi).write_text(json.dumps(openapi_spec(cfg), indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.openapi}")
        return 0
    from .errors import InvalidInput
    from .methods import method_class
    from .server.auth import KeyRing

    method_class(cfg.method)
    keys = None
    if not args.no_auth:
        keys = KeyRing(_key_file(args))
        if not len(keys):
            raise InvalidInput("--keys", f"no API keys in {keys.path}",
                               fix=f"make one: `c3m keys add --store {args.store} --namespace NS` (or run "
                                   "`c3m serve --no-auth` on loopback for local development)")
    elif args.host not in ("127.0.0.1", "localhost", "::1"):
        raise InvalidInput("--no-auth", f"refused on a non-loopback host ({args.host}): anyone could read every "
                           "namespace", fix="make API keys with `c3m keys add`, or bind --host 127.0.0.1")
    import uvicorn

    from .server.app import create_app

    cfg = cfg.with_(max_turn_chars=max(cfg.max_turn_chars, args.max_text_chars))  # the server's limit governs
    app = create_app(args.store, cfg, keys=keys, limits=_limits(args))
    print(f"c3m serve: store {args.store}, method {cfg.method}, "
          f"{'no auth (loopback only)' if keys is None else f'{len(keys)} API key(s)'}; "
          f"inspector at http://{args.host}:{args.port}/inspector", file=sys.stderr)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)
    return 0


def cmd_mcp(args) -> int:
    _need_server_extra()
    from .server.mcp import run_mcp

    run_mcp(args.store, _config(args), transport=args.transport, host=args.host, port=args.port,
            namespace=args.namespace)
    return 0


# -- parser ---------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="c3m", description="Cross-session multimodal memory for LLM/VLM agents: "
                                "immutable Cold Store + bounded index + budgeted, provenance-linked retrieval.",
                                epilog="Docs in the repository: README.md, docs/architecture.md (data flow, "
                                       "layout, invariants, formats), docs/evaluation.md (protocol, metrics), "
                                       "docs/multimodal.md, docs/baselines.md, docs/training.md.")
    from . import __version__

    p.add_argument("--version", action="version", version=f"c3m {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def common(sp, namespace=True, method=True):
        sp.add_argument("--store", default=os.environ.get("C3M_STORE", DEFAULT_STORE),
                        help="store folder (default: $C3M_STORE or ./c3m-store)")
        if namespace:
            sp.add_argument("--namespace", "-n", default=os.environ.get("C3M_NAMESPACE"),
                            help="namespace: one per user/agent or ingested history (default: $C3M_NAMESPACE, "
                                 "else the store's only namespace; `c3m namespaces` lists them)")
        if method:
            sp.add_argument("--method", help="memory method (see `c3m methods`)")
            sp.add_argument("--text-embedder", metavar="{auto,minilm,minilm-bf16,hashing,local:PATH}",
                            help="text embedder backend (default auto: packaged MiniLM, else hashing; minilm-bf16: "
                                 "the same model with bfloat16 products, ~2x faster on CPUs with AVX-512 BF16)")
            sp.add_argument("--answerer", choices=("extractive", "smollm", "local", "api"),
                            help="who answers from the context (default extractive; see `c3m models`)")
            sp.add_argument("--perception", metavar="{none,oracle,oracle:DATASET,scene-encoder,local:PATH,api}",
                            help="write-time perception for every method: captions, visual anchors and grounded "
                                 "crops stored as derived records (default none; oracle = a synthetic dataset's "
                                 "hidden ground truth, named as such in reports; scene-encoder is synthetic-domain "
                                 "only; see docs/multimodal.md)")
            sp.add_argument("--image-embedder", metavar="{none,scene-encoder,local:PATH}",
                            help="image vectors for RAMU's text-image agreement (default none)")
            sp.add_argument("--config", help="TOML/YAML file with MemoryConfig fields")
        sp.add_argument("--json", action="store_true", help="machine-readable output")

    sp = sub.add_parser("demo", help="build a small multimodal history, ingest it, answer questions with provenance",
                        description="Builds a six-session history with drawn images, ingests it session by "
                                    "session, asks six questions and prints answers, their provenance and budget "
                                    "use. Uses a temporary store unless --store is given.")
    common(sp, namespace=False)
    sp.add_argument("--dataset-out", help="also write the demo history as a dataset folder here")
    sp.set_defaults(func=cmd_demo)

    sp = sub.add_parser("validate", help="check a dataset folder (episodes.jsonl + images) and list every problem")
    sp.add_argument("dataset", help="dataset folder or its episodes.jsonl")
    sp.set_defaults(func=cmd_validate)

    sp = sub.add_parser("ingest", help="validate a dataset, then add its histories session by session",
                        description="Each history goes to its own namespace (<prefix><history id>) unless "
                                    "--namespace is given. Re-ingesting the same sessions is a no-op.")
    common(sp, namespace=False)
    sp.add_argument("dataset", help="dataset folder or its episodes.jsonl (format: docs/architecture.md, "
                    "section Formats; `c3m demo --dataset-out DIR` writes an example)")
    sp.add_argument("--namespace", "-n", help="put every history into this one namespace")
    sp.add_argument("--namespace-prefix", default="", help="prefix for per-history namespaces")
    sp.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    sp.set_defaults(func=cmd_ingest)

    sp = sub.add_parser("ask", help="answer a question from memory; print context items with provenance and budget use")
    common(sp)
    sp.add_argument("question")
    sp.add_argument("--budget", help="reader budget override, e.g. raw_nodes=6,text_tokens=2000")
    sp.set_defaults(func=cmd_ask)

    sp = sub.add_parser("inspect", help="show namespaces, or one namespace's index snapshot, sessions and log",
                        description="Without --namespace lists namespaces. With it shows the index after the "
                                    "latest session (or --version N: after the N-th session).")
    common(sp)
    sp.set_defaults(namespace=os.environ.get("C3M_NAMESPACE"))
    sp.add_argument("--version", type=int, dest="version", help="snapshot after this session number")
    sp.set_defaults(func=cmd_inspect)

    sp = sub.add_parser("namespaces", help="list the store's namespaces (one per user/agent or ingested history)")
    common(sp, namespace=False, method=False)
    sp.set_defaults(func=cmd_namespaces)

    sp = sub.add_parser("verify", help="fsck: check every blob hash, Raw Node, session and snapshot pointer")
    common(sp, namespace=False, method=False)
    sp.add_argument("--fast", action="store_true", help="check blobs exist without re-hashing them")
    sp.set_defaults(func=cmd_verify)

    sp = sub.add_parser("forget", help="redact Raw Nodes for privacy (logged; derived index data is rebuilt)")
    common(sp)
    sp.add_argument("--node", action="append", help="Raw Node id (repeatable)")
    sp.add_argument("--session", help="redact every turn of this session")
    sp.add_argument("--reason", required=True, help="why (kept in the audit log)")
    sp.set_defaults(func=cmd_forget)

    sp = sub.add_parser("serve", help="HTTP API + inspector page over a store (FastAPI; the `server` extra)",
                        description="Serves every namespace of --store: sessions (JSON or multipart), retrieve, ask, "
                                    "trace, index, entry history, nodes, images, forget, verify; the inspector page "
                                    "at /inspector. Needs API keys (`c3m keys add`) unless --no-auth on loopback. "
                                    "API reference: docs/service.md and docs/openapi.json.")
    common(sp, namespace=False)
    sp.add_argument("--host", default="127.0.0.1")
    sp.add_argument("--port", type=int, default=8765)
    sp.add_argument("--keys", help="API key file (default STORE/api_keys.json)")
    sp.add_argument("--no-auth", action="store_true", help="no API keys (loopback only: every namespace is open)")
    sp.add_argument("--max-body-mib", type=float, default=64, help="largest request body (default 64 MiB)")
    sp.add_argument("--max-text-chars", type=int, default=100_000, help="longest turn text (default 100,000)")
    sp.add_argument("--max-images-per-turn", type=int, default=16)
    sp.add_argument("--log-level", default="warning", choices=("critical", "error", "warning", "info", "debug"))
    sp.add_argument("--openapi", metavar="FILE", help="write the OpenAPI spec to FILE and exit")
    sp.set_defaults(func=cmd_serve)

    sp = sub.add_parser("keys", help="API keys for `c3m serve`: add (shown once), list, revoke",
                        description="Keys are stored hashed (SHA-256) in STORE/api_keys.json (or --keys FILE). A key "
                                    "grants namespaces: exact names, prefixes ending in '*' ('team/*'), or '*' (admin).")
    common(sp, namespace=False, method=False)
    sp.add_argument("keys_command", choices=("add", "list", "revoke"))
    sp.add_argument("--id", dest="key_id", help="revoke: the key's id (from `c3m keys list`)")
    sp.add_argument("--namespace", "-n", action="append", help="add: a namespace or pattern this key grants (repeatable)")
    sp.add_argument("--label", help="add: a note kept with the key (who it is for)")
    sp.add_argument("--keys", help="key file (default STORE/api_keys.json)")
    sp.set_defaults(func=cmd_keys)

    sp = sub.add_parser("mcp", help="MCP server (remember / recall / ask / forget) over stdio or streamable HTTP",
                        description="For MCP clients (Claude Desktop, Cursor, ...): stdio by default; "
                                    "--transport streamable-http serves http://HOST:PORT/mcp. With --namespace every "
                                    "tool works in that one namespace (one user per server).")
    common(sp)
    sp.add_argument("--transport", default="stdio", choices=("stdio", "streamable-http"))
    sp.add_argument("--host", default="127.0.0.1")
    sp.add_argument("--port", type=int, default=8766)
    sp.set_defaults(func=cmd_mcp)

    from .eval.loaders import LOADERS

    sp = sub.add_parser("convert", help="convert a public benchmark (LoCoMo, LongMemEval, MemLens) into a c3m dataset",
                        description="Reads the benchmark's own JSON and writes episodes.jsonl + images; images given "
                                    "only as URLs are kept as captions + URL (nothing is downloaded).")
    sp.add_argument("kind", choices=sorted(LOADERS))
    sp.add_argument("source", help="the benchmark's JSON file")
    sp.add_argument("out", help="output dataset folder")
    sp.add_argument("--json", action="store_true", help="machine-readable output")
    sp.set_defaults(func=cmd_convert)

    sp = sub.add_parser("synth", help="generate a synthetic multimodal cross-session benchmark (MemLens-style)",
                        description="Deterministic from --seed: entities whose attributes change over time, rendered "
                                    "images with details only in the picture, distractors, and IE/MSR/TR/KU/AR "
                                    "questions with gold evidence. Hidden scene graphs go to OUT/_hidden/.")
    sp.add_argument("out", help="output dataset folder")
    sp.add_argument("--length", default="32k", help="text tokens per history: 32k, 64k, 128k or a number")
    sp.add_argument("--episodes", type=int, default=10, help="number of histories")
    sp.add_argument("--seed", type=int, default=0)
    sp.add_argument("--split", default="test", choices=("train", "dev", "test"),
                    help="vocabulary/template pool (learned parts train on 'train', are scored on 'test')")
    sp.add_argument("--preset", default="easy", choices=("easy", "hard", "photo"),
                    help="easy: the original generator; hard: mention noise, photo bursts, filler grammar and AR "
                         "questions with evidence, calibrated so dense top-k does not saturate; photo: hard's "
                         "questions with changes shown only in photos under short generic captions, small talk "
                         "repeated word for word and 2-4 changes per entity over several hundred sessions")
    sp.add_argument("--workers", type=int, default=1, help="parallel worker processes")
    sp.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    sp.add_argument("--json", action="store_true", help="print the manifest")
    sp.set_defaults(func=cmd_synth)

    sp = sub.add_parser("models", help="list model backends available on this machine, and why others are not")
    sp.add_argument("--json", action="store_true", help="machine-readable output")
    sp.set_defaults(func=cmd_models)

    sp = sub.add_parser("methods", help="list memory methods: bounded or not, what they read, their paper",
                        description="Two lines per method: name, bounded/unbounded (planned = not implemented "
                                    "yet) and what its reader is shown; then what it does and the paper it "
                                    "reproduces.")
    sp.add_argument("--json", action="store_true", help="machine-readable output")
    sp.set_defaults(func=cmd_methods)

    sp = sub.add_parser("table1", help="rewrite the C3M Table-1 layout (table1.md) from an eval folder, no rerun",
                        description="Reads OUT/results (written by `c3m eval --out OUT`) and writes the paper's "
                                    "Table 1: per-category × length tables, resources, the reference method "
                                    "against the strongest other method per cell, and where it loses.")
    sp.add_argument("folder", help="the --out folder of a `c3m eval` run")
    sp.add_argument("--reference", default="c3m", help="method compared against the strongest other (default c3m)")
    sp.add_argument("--out", help="Markdown file to write (default FOLDER/table1.md)")
    sp.add_argument("--judged-label", help="who produced judged accuracy, e.g. 'answerer api, judge api'")
    sp.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    sp.set_defaults(func=cmd_table1)

    sp = sub.add_parser("eval", help="replay datasets session by session through methods; write a report",
                        description="Chronological replay: each history's sessions go through the write path "
                                    "(questions hidden; opening the dataset at write time is refused), then its "
                                    "questions through the read path. Writes report.md (Table-1 layout), "
                                    "metrics.json and plots to --out; rerunning continues a killed run. Protocol, metrics and "
                                    "honesty rules: docs/evaluation.md.")
    common(sp, namespace=False)
    sp.add_argument("--dataset", action="append", required=True, help="dataset folder (repeat for several lengths)")
    sp.add_argument("--methods", nargs="+",
                    help="several methods to compare (default: --method); 'all' = every available method (the "
                         "order of `c3m methods`); variants as name:key=value,... (e.g. c3m:expansion=false)")
    sp.add_argument("--out", default="c3m-eval", help="results folder (default ./c3m-eval); resumable")
    sp.add_argument("--budget", help="reader budget override, e.g. raw_nodes=6,text_tokens=2000")
    sp.add_argument("--workers", type=int, default=1,
                    help="method processes run at once (each (method, history) has its own process)")
    sp.add_argument("--limit", type=int, help="only the first N histories of each dataset")
    sp.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    sp.add_argument("--judge", choices=("em", "f1", "contains", "api"),
                    help="also judge each answer (judged_acc): exact match, token F1, gold-contained-in-prediction, "
                         "or an LLM judge at $C3M_API_BASE_URL")
    sp.add_argument("--no-answer", action="store_true",
                    help="skip answering (faster): evidence metrics only, no token F1 / selective accuracy / refusals")
    sp.set_defaults(func=cmd_eval)
    return p


def _disk_full_error(exc: BaseException, store: str | None):
    """A StoreError for a full disk (SQLite's "database or disk is full", ENOSPC/EDQUOT/EFBIG from a file write, a
    server's disk-full error), naming the store and the fix; None for any other error. SQLite rolls the open
    transaction back, so every session already committed is whole and the one being written is absent."""
    import sqlite3

    from .errors import StoreError
    from .store.blobs import DISK_FULL_ERRNOS, disk_full_fix

    where = store or "the store"
    if isinstance(exc, sqlite3.OperationalError) and "disk is full" in str(exc):
        why = f"SQLite: {exc}"
    elif isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS:
        why = f"{exc.strerror}{f': {exc.filename}' if exc.filename else ''}"
    elif type(exc).__name__ == "DiskFull":  # a database server's disk-full error (e.g. psycopg.errors.DiskFull)
        why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    else:
        return None
    return StoreError(f"the disk holding the store {where} is full ({why}); the session being written was rolled "
                      "back, every session committed before it is intact", fix=disk_full_fix(where))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    args.store_given = any(a == "--store" or a.startswith("--store=") for a in argv) or "C3M_STORE" in os.environ
    from .models import anchors

    anchors.IMPORT_SPACY_WITHOUT_TORCH = True  # ~1 s of start-up per command (see c3m.models.anchors)
    try:
        return args.func(args)
    except BrokenPipeError:  # `c3m ask ... | head`: the reader left; not an error of ours
        sys.stderr.close()
        return 0
    except C3MError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        if exc.fix:
            print(f"  fix: {exc.fix}", file=sys.stderr)
        return 2
    except Exception as exc:
        full = _disk_full_error(exc, getattr(args, "store", None))
        if full is None:
            raise
        print(f"error: {full.message}", file=sys.stderr)
        print(f"  fix: {full.fix}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
