"""``verify`` (fsck): prove a store is intact — every blob hash, every pointer, every session, and the
provenance of every derived perception record and grounded crop back to its source image and Raw Node.

Errors mean data is damaged or inconsistent; warnings are harmless leftovers of an interrupted write
(orphan blobs written before a transaction that never committed, stale temp files).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime

from ..errors import StoreError
from .cold import ColdStore, decode_snapshot_row, session_content_sha256

PAGE = 1000  # sessions or Raw Nodes read per query (a node's text is at most max_turn_chars)


@dataclass
class VerifyReport:
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.errors

    def to_dict(self) -> dict:
        return {"ok": self.ok, "errors": self.errors, "warnings": self.warnings, "counts": self.counts}

    def __str__(self) -> str:
        lines = [f"verify: {'OK' if self.ok else 'FAILED'}  " + "  ".join(f"{k}={v}" for k, v in self.counts.items())]
        lines += [f"  error: {e}" for e in self.errors] + [f"  warning: {w}" for w in self.warnings]
        return "\n".join(lines)


def verify_store(store: ColdStore, *, check_blob_hashes: bool = True, max_messages: int = 50) -> VerifyReport:
    """Check SQLite integrity, session/node consistency, derived records, image and crop blobs and snapshot
    pointers."""
    rep = VerifyReport()
    q = store.conn.execute

    def err(msg: str) -> None:
        if len(rep.errors) < max_messages:
            rep.errors.append(msg)
        elif len(rep.errors) == max_messages:
            rep.errors.append("... more errors not shown")

    for problem in store.integrity_problems():
        err(problem)

    # Sessions: node count and content hash recomputed from the nodes (redacted nodes keep their hash). Read in
    # pages of sessions with their nodes' hashes joined, so memory stays flat and the scan is one query per page.
    n_sessions = 0
    for page in _pages(q, "SELECT s.namespace, s.session_id, s.time, s.n_turns, s.content_sha256, r.turn_index,"
                       " r.content_sha256 AS node_sha256 FROM (SELECT * FROM sessions WHERE (namespace, session_id) >"
                       " (?, ?) ORDER BY namespace, session_id LIMIT ?) s LEFT JOIN raw_nodes r ON"
                       " r.namespace=s.namespace AND r.session_id=s.session_id"
                       " ORDER BY s.namespace, s.session_id, r.turn_index", ("namespace", "session_id"), ("", "")):
        for (namespace, session_id), rows in page:
            n_sessions += 1
            s = rows[0]
            turns = [r["turn_index"] for r in rows if r["turn_index"] is not None]
            if turns != list(range(s["n_turns"])):
                err(f"session {namespace}/{session_id}: has {len(turns)} nodes, expected {s['n_turns']}")
                continue
            expect = session_content_sha256(datetime.fromisoformat(s["time"]), [r["node_sha256"] for r in rows])
            if expect != s["content_sha256"]:
                err(f"session {namespace}/{session_id}: content hash mismatch")
    rep.counts["sessions"] = n_sessions

    # Raw Nodes: content hash of every non-redacted node recomputed from text and image hashes (paged the same way).
    forgotten = {r[0] for r in q("SELECT DISTINCT node_id FROM forget_log")}
    n_nodes = 0
    for page in _pages(q, "SELECT r.node_id, r.role, r.text, r.content_sha256, r.redacted, i.sha256 AS image FROM"
                       " (SELECT node_id, role, text, content_sha256, redacted FROM raw_nodes WHERE node_id > ?"
                       " ORDER BY node_id LIMIT ?) r LEFT JOIN node_images i ON i.node_id=r.node_id"
                       " ORDER BY r.node_id, i.position", ("node_id",), ("",)):
        for (node_id,), rows in page:
            n_nodes += 1
            r = rows[0]
            if r["redacted"]:
                if r["text"] != "":
                    err(f"node {node_id}: redacted but text not blank")
                if node_id not in forgotten:
                    err(f"node {node_id}: redacted without a forget_log record")
                continue
            shas = [x["image"] for x in rows if x["image"] is not None]
            payload = json.dumps([r["role"], r["text"], shas], separators=(",", ":"))
            if hashlib.sha256(payload.encode()).hexdigest() != r["content_sha256"]:
                err(f"node {node_id}: content hash mismatch (text or images changed)")
    rep.counts["raw_nodes"] = n_nodes

    # Derived perception: every live record reaches a live image of its own node, and its crop a derived blob
    # cut from that same image of that node; redacted ones are blank and logged. The node each one names is
    # joined in SQL (a dict of every node cost 4 s and ~200 MB on a 1 M-node store).
    def check_source(tag: str, namespace: str, row) -> bool:
        if row["node_namespace"] is None:
            err(f"{tag}: node {row['node_id']} does not exist")
        elif row["node_namespace"] != namespace:
            err(f"{tag}: node {row['node_id']} is in namespace {row['node_namespace']!r}, not {namespace!r}")
        elif row["node_redacted"]:
            err(f"{tag}: node {row['node_id']} is redacted but its derived data is not (forget missed it)")
        else:
            return True
        return False

    n_derived = 0
    for d in q("SELECT d.namespace, d.node_id, d.position, d.sha256, d.backend, d.version, d.caption, d.anchors,"
               " d.crop_sha256, d.crop_phrase, d.redacted, r.namespace AS node_namespace, r.redacted AS node_redacted,"
               " (SELECT i.sha256 FROM node_images i WHERE i.node_id=d.node_id AND i.position=d.position AND"
               " i.redacted=0) AS image_sha256,"
               " EXISTS (SELECT 1 FROM derived_blobs b WHERE b.sha256=d.crop_sha256 AND b.node_id=d.node_id AND"
               " b.source_sha256=d.sha256 AND b.redacted=0) AS crop_linked"
               " FROM derived_records d LEFT JOIN raw_nodes r ON r.node_id=d.node_id"
               " ORDER BY d.node_id, d.position, d.backend, d.version"):
        n_derived += 1
        tag = f"derived record {d['backend']}@{d['version']} of {d['node_id']}#{d['position']}"
        if d["redacted"]:
            if d["caption"] != "" or d["anchors"] != "[]" or d["crop_phrase"] is not None:
                err(f"{tag}: redacted but caption/anchors not blank")
            if d["node_id"] not in forgotten:
                err(f"{tag}: redacted without a forget_log record")
            continue
        if not check_source(tag, d["namespace"], d):
            continue
        if d["image_sha256"] != d["sha256"]:
            err(f"{tag}: source image {d['sha256'][:12]}… is not image #{d['position']} of its node")
        try:
            anchors = json.loads(d["anchors"])
            if not isinstance(anchors, list):
                raise ValueError
        except ValueError:
            err(f"{tag}: anchors are not a JSON list")
        if d["crop_sha256"] is not None and not d["crop_linked"]:
            err(f"{tag}: crop {d['crop_sha256'][:12]}… has no derived blob row linking it to this node and source")
    rep.counts["derived_records"] = n_derived

    n_dblobs = 0
    for b in q("SELECT b.sha256, b.node_id, b.source_sha256, b.namespace, b.redacted, r.namespace AS node_namespace,"
               " r.redacted AS node_redacted, EXISTS (SELECT 1 FROM node_images i WHERE i.node_id=b.node_id AND"
               " i.sha256=b.source_sha256 AND i.redacted=0) AS source_linked"
               " FROM derived_blobs b LEFT JOIN raw_nodes r ON r.node_id=b.node_id ORDER BY b.sha256, b.node_id"):
        n_dblobs += 1
        tag = f"derived blob {b['sha256'][:12]}… of {b['node_id']}"
        if b["redacted"]:
            if b["node_id"] not in forgotten:
                err(f"{tag}: redacted without a forget_log record")
            continue
        if check_source(tag, b["namespace"], b) and not b["source_linked"]:
            err(f"{tag}: source image {b['source_sha256'][:12]}… is not one of its node's images")
    rep.counts["derived_blobs"] = n_dblobs

    # Image and crop blobs: present and hashing to their name; unreferenced blobs are orphans (warning).
    def users(sha: str, table: str) -> str:
        """Which namespace/session/node use a damaged blob (so the report says whose history it hurts)."""
        rows = q(f"SELECT r.namespace, r.session_id, r.node_id FROM {table} i JOIN raw_nodes r ON r.node_id=i.node_id"
                 " WHERE i.sha256=? AND i.redacted=0 ORDER BY r.namespace, r.session_id, r.node_id", (sha,)).fetchall()
        named = [f"{r[0]}/{r[1]} node {r[2]}" for r in rows[:3]]
        more = f" and {len(rows) - 3} more" if len(rows) > 3 else ""
        return f"; used by {', '.join(named)}{more}" if named else ""

    def check_blob(sha: str, what: str, table: str) -> None:
        if check_blob_hashes:
            problem = store.blobs.check(sha)
        else:
            problem = None if store.blobs.exists(sha) else f"missing (no file {store.blobs.path_for(sha)})"
        if problem:
            err(f"{what} {sha}: {problem}{users(sha, table)}")

    referenced = {r[0] for r in q("SELECT DISTINCT sha256 FROM node_images WHERE redacted=0")}
    for sha in sorted(referenced):
        check_blob(sha, "blob", "node_images")
    rep.counts["blobs"] = len(referenced)
    crop_blobs = {r[0] for r in q("SELECT DISTINCT sha256 FROM derived_blobs WHERE redacted=0")}
    for sha in sorted(crop_blobs - referenced):
        check_blob(sha, "crop blob", "derived_blobs")
    referenced |= crop_blobs
    orphans = [d for d in store.blobs.iter_digests() if d not in referenced]
    if orphans:
        rep.warnings.append(f"{len(orphans)} orphan blob(s) not referenced by any node or crop (left by an interrupted "
                            "ingest or by forget); harmless")
    temps = store.blobs.leftover_temp_files()
    if temps:
        rep.warnings.append(f"{len(temps)} leftover temp file(s) in {store.blobs.tmp}; harmless")

    # Snapshots: every version rebuilt (full rows and the deltas on them, in order) and checked against its hash;
    # pointers resolve into the namespace; provenance completeness.
    n_snap = 0
    for namespace, method in q("SELECT DISTINCT namespace, method FROM index_snapshots ORDER BY namespace, method"
                               ).fetchall():
        seq_of = {r[0]: r[1] for r in q(
            "SELECT r.node_id, x.seq FROM raw_nodes r JOIN sessions x ON x.namespace=r.namespace AND"
            " x.session_id=r.session_id WHERE r.namespace=?", (namespace,))}
        prev = None  # (version, state, pointers) of the last row that decoded
        for s in q("SELECT * FROM index_snapshots WHERE namespace=? AND method=? ORDER BY version",
                   (namespace, method)).fetchall():
            n_snap += 1
            tag = f"snapshot {namespace}/{method}@{s['version']}"
            try:
                if s["kind"] == "delta" and (prev is None or prev[0] != s["base_version"]):
                    raise StoreError(f"{tag}: its base version {s['base_version']} is missing or unreadable")
                state, pointers, _ = decode_snapshot_row(tag, s, prev[1] if prev else None,
                                                         prev[2] if prev else set(), check=True)
            except StoreError as exc:
                err(exc.message)
                prev = None
                continue
            prev = (s["version"], state, pointers)
            nodes_upto = {n for n, seq in seq_of.items() if seq <= s["version"]}
            dangling = pointers - nodes_upto
            if dangling:
                err(f"{tag}: {len(dangling)} pointer(s) to nodes not ingested by then, e.g. {sorted(dangling)[:2]}")
            if s["complete_provenance"] and pointers != nodes_upto:
                err(f"{tag}: reaches {len(pointers & nodes_upto)} of {len(nodes_upto)} Raw Nodes (provenance lost)")
    rep.counts["snapshots"] = n_snap

    # Cold-Store text search (schema v4): exactly the unredacted nodes with text are searchable, a forgotten node's
    # text never is (its searchable copy would outlive the forget).
    if store.backend == "sqlite":
        indexed = "SELECT r.node_id, r.redacted, r.text <> '' AS has_text FROM node_search s JOIN raw_nodes r ON r.rowid=s.rowid"
        unindexed = ("SELECT node_id FROM raw_nodes WHERE redacted=0 AND text <> '' AND rowid NOT IN "
                     "(SELECT rowid FROM node_search)")
    else:
        indexed = ("SELECT r.node_id, r.redacted, r.text <> '' AS has_text FROM node_search s JOIN raw_nodes r ON "
                   "r.node_id=s.node_id")
        unindexed = ("SELECT node_id FROM raw_nodes r WHERE redacted=0 AND text <> '' AND NOT EXISTS "
                     "(SELECT 1 FROM node_search s WHERE s.node_id=r.node_id)")
    searchable = 0
    for node_id, redacted, has_text in q(indexed).fetchall():
        searchable += 1
        if redacted or not has_text:
            err(f"search index: node {node_id} is forgotten but still searchable (fix: DELETE its node_search row)")
    missing = [r[0] for r in q(unindexed).fetchall()]
    if missing:
        rep.warnings.append(f"{len(missing)} Raw Node(s) missing from the search index (e.g. {missing[0]}): search "
                            "cannot find them; reopening an upgraded store does not refill a partial index")
    rep.counts["searchable_nodes"] = searchable
    return rep


def _pages(q, sql: str, key: tuple[str, ...], start: tuple):
    """Keyset pagination over a parent table joined to its children: ``sql`` takes the last key seen and a page
    size, and returns the page's parents (ordered by ``key``) with their child rows. Yields each page as
    ``[(key, rows), ...]``. Portable (no server-side cursor), and memory is one page, not the whole table."""
    after, page = start, PAGE
    while True:
        groups: dict[tuple, list] = {}
        for row in q(sql, (*after, page)).fetchall():
            groups.setdefault(tuple(row[k] for k in key), []).append(row)
        if not groups:
            return
        yield list(groups.items())
        if len(groups) < page:
            return
        after = next(reversed(groups))
