"""Plain-JSON views of what the server returns: contexts, the active index, entries' update history, Raw Nodes,
route traces. Method-agnostic: a method's ``describe()`` is the base; a bounded index (``c3m``) adds pages,
entries and their Raw-Node pointers; evidence forms (captions, crops) come from the items themselves, so
HiVe-Mem's forms show up without change.

``image_url(sha256)`` turns a blob hash into the URL the client fetches it from (the server's image route,
which checks the namespace)."""
from __future__ import annotations

from typing import Any, Callable

from ..read.answer_view import answer_view
from ..types import Context, RawNode, as_json_dict, node_id_for

UrlFor = Callable[[str], str]


def _image(ref, image_url: UrlFor) -> dict:
    return dict(as_json_dict(ref), url=image_url(ref.sha256))


def context_view(ctx: Context, image_url: UrlFor) -> dict:
    items = []
    for it in ctx.items:
        d = as_json_dict(it)
        d["images"] = [_image(im, image_url) for im in it.images]
        items.append(d)
    return {"question": ctx.question, "items": items, "use": as_json_dict(ctx.use), "budget": as_json_dict(ctx.budget),
            "chains": as_json_dict(ctx.chains), "trace": ctx.trace.to_dict(), "text": ctx.text()}


def node_view(node: RawNode, image_url: UrlFor, perceptions=()) -> dict:
    d = as_json_dict(node)
    d["images"] = [_image(im, image_url) for im in node.images]
    d["perceptions"] = [dict({k: v for k, v in as_json_dict(p).items() if k not in ("image", "crop")},
                             image=_image(p.image, image_url),
                             crop=_image(p.crop, image_url) if p.crop is not None else None)
                        for p in perceptions]
    return d


def _index(method):
    return getattr(method, "index", None) if hasattr(getattr(method, "index", None), "ordered") else None


def index_view(mem, version: int | None = None) -> dict:
    """The index as of ``version`` (latest when None): the method's description, and for a bounded index its
    pages and entries with their Raw-Node ids and budget use as numbers (for the inspector's bars)."""
    head = mem.sync()
    snap = mem.snapshot(version)
    if version is not None and snap is None:
        from ..errors import InvalidInput

        raise InvalidInput("version", f"no snapshot {version} for {mem.method_name}",
                           fix=f"choose from {mem.store.snapshot_versions(mem.namespace, mem.method_name)}")
    if snap is not None and snap.version != mem.version:
        mem.method.load_state(snap.state)  # the requested version; the next sync reloads the latest
        mem._version = None
    described = as_json_dict(mem.method.describe())
    out: dict[str, Any] = {"namespace": mem.namespace, "method": mem.method_name, "head": head,
                           "version": snap.version if snap else 0,
                           "versions": mem.store.snapshot_versions(mem.namespace, mem.method_name),
                           "describe": described, "store": mem.store.namespace_stats(mem.namespace)}
    index = _index(mem.method)
    if index is not None:
        b = mem.method.write_budget
        use = index.usage(mem.models.token_counter.count)
        out["usage"] = [{"name": n, "used": int(u), "limit": int(lim)} for n, u, lim in
                        zip(("entries", "pages", "index_tokens", "index_bytes"), use,
                            (b.entries, b.pages, b.index_tokens, b.index_bytes))]
        by_id = {e["id"]: e for e in described.get("entries", [])}
        out["entries"] = [dict(by_id.get(e.entry_id, {"id": e.entry_id}),
                               nodes=_node_ids(mem.namespace, e.sources())) for e in index.ordered()]
        out["pages"] = described.get("pages", [])
    return out


def _node_ids(namespace: str, sources: dict) -> list[str]:
    return [node_id_for(namespace, s, t) for s in sorted(sources) for t in sorted(sources[s])]


def entry_history(mem, entry_id: str) -> dict:
    """An entry's relation chain: each version's time, states, text and Raw Nodes (oldest first, the current
    state last), and the maintenance actions that named it."""
    mem.sync()
    index = _index(mem.method)
    entry = index.entries.get(entry_id) if index is not None else None
    if entry is None:
        from ..errors import InvalidInput

        known = sorted(index.entries)[:8] if index is not None else []
        raise InvalidInput("entry_id", f"no entry {entry_id!r} in the current index of {mem.method_name}",
                           fix=f"take an id from GET .../index (e.g. {', '.join(known) or 'none: the index is empty'})")
    steps = [{"time": v.time.isoformat(), "states": list(v.states), "text": v.text,
              "nodes": _node_ids(mem.namespace, v.pointers), "current": False} for v in entry.versions]
    steps.append({"time": entry.time.isoformat(), "states": list(entry.states), "text": entry.text,
                  "nodes": _node_ids(mem.namespace, entry.pointers), "current": True})
    log = [m for m in mem.store.maintenance_log(mem.namespace, mem.method_name) if _names(m, entry_id)]
    return {"entry_id": entry_id, "page": f"p{entry.page}", "kind": entry.kind, "text": entry.render(),
            "labels": dict(entry.labels), "links": entry.links, "chain": steps, "log": log}


def _names(record: dict, entry_id: str) -> bool:
    def walk(v) -> bool:
        if isinstance(v, str):
            return v == entry_id
        if isinstance(v, dict):
            return any(walk(x) for x in v.values())
        if isinstance(v, (list, tuple)):
            return any(walk(x) for x in v)
        return False
    return walk(record.get("detail", {}))


def trace_view(mem, ctx: Context, image_url: UrlFor) -> dict:
    """The route of one query, stage by stage: pages → entries → node pool → chosen context, with the budget
    used on each dimension (the inspector draws this). Items carry their current/superseded marks and the
    context its update chains, as the answerer sees them (``answer_view``: the photos' captions join the chains,
    so a change shown only in a photo is marked too; it selects and charges nothing)."""
    ctx = answer_view(ctx, mem.method, mem.models.answerer)
    t = ctx.trace
    d = index_view(mem) if _index(mem.method) is not None else {}
    pages = {p["id"]: p for p in d.get("pages", [])}
    entries = {e["id"]: e for e in d.get("entries", [])}
    chosen = {it.node_id for it in ctx.items}
    pool = list(t.pool)
    nodes = mem.store.get_nodes(pool[:200])
    return {
        "question": ctx.question, "method": t.method,
        "pages": [{"id": p, "score": s, "summary": pages.get(p, {}).get("summary", "")} for p, s in t.pages],
        "entries": [{"id": e, "score": s, "text": entries.get(e, {}).get("text", ""),
                     "page": entries.get(e, {}).get("page"), "nodes": entries.get(e, {}).get("nodes", [])}
                    for e, s in t.entries],
        "pool": [{"node_id": n, "chosen": n in chosen, "session_id": nodes[n].session_id if n in nodes else None,
                  "turn_index": nodes[n].turn_index if n in nodes else None,
                  "text": nodes[n].text[:160] if n in nodes else ""} for n in pool[:200]],
        "pool_size": len(pool), "scored": t.scored, "dropped_for_budget": list(t.dropped_for_budget),
        "notes": list(t.notes),
        "budget": [{"name": n, "used": u, "limit": b} for n, u, b in
                   zip(("pages", "raw_nodes", "images", "text_tokens"), ctx.use.as_tuple(), ctx.budget.as_tuple())],
        "context": context_view(ctx, image_url),
    }
