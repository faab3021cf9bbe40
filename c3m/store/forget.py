"""The Cold Store's forget (``ColdStore``'s part ``ForgetStore``): the only redaction, logged, with every derived
copy of the forgotten content (vectors, perception, crops, snapshots from the first affected session)."""
from __future__ import annotations

from typing import Sequence

from ..errors import InvalidInput
from .records import ForgetReport, check_namespace, now_iso, text_sha256


class ForgetStore:
    """``forget`` (a part of ``ColdStore``)."""

    # -- privacy -------------------------------------------------------------------------------
    def forget(self, namespace: str, *, node_ids: Sequence[str] = (), session_id: str | None = None,
               reason: str, derived_texts: Sequence[str] = ()) -> ForgetReport:
        """Redact Raw Nodes for privacy: blank their text, drop their images, log who/why.

        Derived data is dropped with them: cached vectors of the forgotten text and captions, their derived
        perception records (caption and anchors blanked, marked redacted), their grounded crops, and every
        index snapshot from the first affected session on (the method rebuilds them by replay on next open).
        Blobs still referenced by another non-redacted node image or derived blob are kept. ``derived_texts``
        are further texts made from the forgotten nodes (e.g. a method's "text + captions" embedding string),
        whose cached vectors are dropped too.
        """
        check_namespace(namespace)
        if not reason or not reason.strip():
            raise InvalidInput("reason", "forget() needs a reason for the audit log", fix="say why, e.g. 'user request'")
        with self.transaction(namespace):
            targets = list(node_ids)
            if session_id is not None:
                targets += [r[0] for r in self.conn.execute(
                    "SELECT node_id FROM raw_nodes WHERE namespace=? AND session_id=?", (namespace, session_id))]
                if not targets:
                    raise InvalidInput("session_id", f"no session {session_id!r} in namespace {namespace!r}",
                                       fix="list sessions with `c3m inspect`")
            targets = list(dict.fromkeys(targets))
            rows = self.get_nodes(targets)
            missing = [t for t in targets if t not in rows or rows[t].provenance.namespace != namespace]
            if missing:
                raise InvalidInput("node_ids", f"{len(missing)} node(s) not in namespace {namespace!r}: {missing[:3]}",
                                   fix="pass node ids from this namespace")
            at = now_iso()
            blobs: set[str] = set()
            crops: set[str] = set()
            derived = 0
            first_seq = None
            for nid in targets:
                node = rows[nid]
                if node.redacted:
                    continue
                self.conn.execute("INSERT INTO forget_log(namespace, node_id, reason, at) VALUES (?,?,?,?)",
                                  (namespace, nid, reason, at))
                self._unindex_search(nid)  # the searchable copy of the text goes first
                self.conn.execute("UPDATE raw_nodes SET text='', redacted=1 WHERE node_id=?", (nid,))
                self.conn.execute("UPDATE node_images SET redacted=1 WHERE node_id=?", (nid,))
                self.conn.execute("DELETE FROM vector_cache WHERE text_sha256=?", (text_sha256(node.text),))
                blobs.update(im.sha256 for im in node.images)
                for cap, crop in self.conn.execute("SELECT caption, crop_sha256 FROM derived_records WHERE node_id=?"
                                                   " AND redacted=0", (nid,)).fetchall():
                    self.conn.execute("DELETE FROM vector_cache WHERE text_sha256=?", (text_sha256(cap),))
                    if crop is not None:
                        crops.add(crop)
                crops.update(r[0] for r in self.conn.execute(
                    "SELECT sha256 FROM derived_blobs WHERE node_id=? AND redacted=0", (nid,)))
                derived += self.conn.execute(
                    "UPDATE derived_records SET caption='', anchors='[]', crop_phrase=NULL, redacted=1"
                    " WHERE node_id=? AND redacted=0", (nid,)).rowcount
                self.conn.execute("UPDATE derived_blobs SET redacted=1 WHERE node_id=? AND redacted=0", (nid,))
                seq = self.session_record(namespace, node.session_id).seq
                first_seq = seq if first_seq is None else min(first_seq, seq)
            for text in derived_texts:  # e.g. a method's "text + captions" embedding string of these nodes
                self.conn.execute("DELETE FROM vector_cache WHERE text_sha256=?", (text_sha256(text),))
            dropped = 0
            if first_seq is not None:  # deltas point backwards: the versions left keep whole chains
                dropped = self.conn.execute("DELETE FROM index_snapshots WHERE namespace=? AND version>=?",
                                            (namespace, first_seq)).rowcount
                for key in [k for k in self._snap_cache if k[0] == namespace]:
                    del self._snap_cache[key]
            candidates = sorted(blobs | crops)
            still_used: set[str] = set()
            for start in range(0, len(candidates), 500):
                chunk = candidates[start:start + 500]
                marks = ",".join("?" * len(chunk))
                still_used.update(r[0] for r in self.conn.execute(
                    f"SELECT sha256 FROM node_images WHERE redacted=0 AND sha256 IN ({marks}) UNION"
                    f" SELECT sha256 FROM derived_blobs WHERE redacted=0 AND sha256 IN ({marks})", chunk + chunk))
        # after commit: never dangling
        deleted = sum(self.blobs.delete(sha) for sha in sorted(blobs - still_used))
        crops_deleted = sum(self.blobs.delete(sha) for sha in sorted(crops - blobs - still_used))
        return ForgetReport(namespace, tuple(targets), deleted, dropped, derived, crops_deleted)
