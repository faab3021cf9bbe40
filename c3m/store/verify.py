"""``verify`` (fsck): prove a store is intact — every blob hash, every pointer, every session.

Errors mean data is damaged or inconsistent; warnings are harmless leftovers of an interrupted write
(orphan blobs written before a transaction that never committed, stale temp files).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime

from .cold import ColdStore, _unpack, session_content_sha256


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
    """Check SQLite integrity, session/node consistency, image blobs and snapshot pointers."""
    rep = VerifyReport()
    q = store.conn.execute

    def err(msg: str) -> None:
        if len(rep.errors) < max_messages:
            rep.errors.append(msg)
        elif len(rep.errors) == max_messages:
            rep.errors.append("... more errors not shown")

    integrity = q("PRAGMA integrity_check").fetchone()[0]
    if integrity != "ok":
        err(f"sqlite integrity_check: {integrity}")
    for row in q("PRAGMA foreign_key_check").fetchall():
        err(f"foreign key violation in {row[0]} rowid {row[1]}")

    # Sessions: node count and content hash recomputed from the nodes (redacted nodes keep their hash).
    n_sessions = 0
    for s in q("SELECT * FROM sessions ORDER BY namespace, seq").fetchall():
        n_sessions += 1
        nodes = q("SELECT turn_index, content_sha256 FROM raw_nodes WHERE namespace=? AND session_id=?"
                  " ORDER BY turn_index", (s["namespace"], s["session_id"])).fetchall()
        if [n[0] for n in nodes] != list(range(s["n_turns"])):
            err(f"session {s['namespace']}/{s['session_id']}: has {len(nodes)} nodes, expected {s['n_turns']}")
            continue
        expect = session_content_sha256(datetime.fromisoformat(s["time"]), [n[1] for n in nodes])
        if expect != s["content_sha256"]:
            err(f"session {s['namespace']}/{s['session_id']}: content hash mismatch")
    rep.counts["sessions"] = n_sessions

    # Raw Nodes: content hash of every non-redacted node recomputed from text and image hashes.
    n_nodes = 0
    for r in q("SELECT node_id, role, text, content_sha256, redacted FROM raw_nodes").fetchall():
        n_nodes += 1
        if r["redacted"]:
            if r["text"] != "":
                err(f"node {r['node_id']}: redacted but text not blank")
            if q("SELECT 1 FROM forget_log WHERE node_id=?", (r["node_id"],)).fetchone() is None:
                err(f"node {r['node_id']}: redacted without a forget_log record")
            continue
        shas = [i[0] for i in q("SELECT sha256 FROM node_images WHERE node_id=? ORDER BY position", (r["node_id"],))]
        payload = json.dumps([r["role"], r["text"], shas], separators=(",", ":"))
        if hashlib.sha256(payload.encode()).hexdigest() != r["content_sha256"]:
            err(f"node {r['node_id']}: content hash mismatch (text or images changed)")
    rep.counts["raw_nodes"] = n_nodes

    # Image blobs: present and hashing to their name; unreferenced blobs are orphans (warning).
    referenced = {r[0] for r in q("SELECT DISTINCT sha256 FROM node_images WHERE redacted=0")}
    for sha in sorted(referenced):
        problem = store.blobs.check(sha) if check_blob_hashes else (None if store.blobs.exists(sha) else "missing")
        if problem:
            err(f"blob {sha}: {problem}")
    rep.counts["blobs"] = len(referenced)
    orphans = [d for d in store.blobs.iter_digests() if d not in referenced]
    if orphans:
        rep.warnings.append(f"{len(orphans)} orphan blob(s) not referenced by any node (left by an interrupted "
                            "ingest or by forget); harmless")
    temps = store.blobs.leftover_temp_files()
    if temps:
        rep.warnings.append(f"{len(temps)} leftover temp file(s) in {store.blobs.tmp}; harmless")

    # Snapshots: payload hash, pointers resolve into the namespace, provenance completeness.
    n_snap = 0
    for s in q("SELECT namespace, method, version, state, state_sha256, pointers, n_pointers, complete_provenance"
               " FROM index_snapshots ORDER BY namespace, method, version").fetchall():
        n_snap += 1
        tag = f"snapshot {s['namespace']}/{s['method']}@{s['version']}"
        if hashlib.sha256(s["state"]).hexdigest() != s["state_sha256"]:
            err(f"{tag}: state hash mismatch")
        pointers = set(_unpack(s["pointers"]))
        if len(pointers) != s["n_pointers"]:
            err(f"{tag}: pointer count {len(pointers)} != recorded {s['n_pointers']}")
        nodes_upto = {r[0] for r in q(
            "SELECT r.node_id FROM raw_nodes r JOIN sessions x ON x.namespace=r.namespace AND x.session_id=r.session_id"
            " WHERE r.namespace=? AND x.seq<=?", (s["namespace"], s["version"]))}
        dangling = pointers - nodes_upto
        if dangling:
            err(f"{tag}: {len(dangling)} pointer(s) to nodes not ingested by then, e.g. {sorted(dangling)[:2]}")
        if s["complete_provenance"] and pointers != nodes_upto:
            err(f"{tag}: reaches {len(pointers & nodes_upto)} of {len(nodes_upto)} Raw Nodes (provenance lost)")
    rep.counts["snapshots"] = n_snap
    return rep
