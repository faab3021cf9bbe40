"""The Cold Store: immutable Raw Nodes, original images, derived perception, index snapshots.

Two backends behind one class (``c3m.store.db``): a **folder** — ``store.sqlite`` (WAL mode) + ``blobs/`` — for one
machine, or a **PostgreSQL** database (``postgresql://…?blobs=/shared/path``) for many writers on many hosts, its
blobs in a filesystem folder they share. Blobs are content-addressed images: the originals and the grounded crops
cut from them, which are *derived blobs* and never replace an original. Many processes may open the same store:
readers never block; writers serialise on SQLite's write lock (``BEGIN IMMEDIATE`` with a busy timeout), or in
PostgreSQL per namespace. A session is committed in *one* transaction together with the method's index snapshot,
so after a crash every session is either fully present (nodes, images, snapshot) or absent.

This module holds the store itself: opening, the schema, transactions, sessions, Raw Nodes and their full-text search,
images. Its other jobs are parts ``ColdStore`` is made of, one module each: ``snapshots`` (versioned index
snapshots, the maintenance log), ``caches`` (perception records, crops, the vector and extraction caches) and
``forget`` (redaction); ``records`` holds what they share. Every name this module exported before is still here.
"""
from __future__ import annotations

import re
import sqlite3
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Iterator, Sequence

from ..errors import InvalidInput, StoreError
from ..types import ROLES, ImageRef, Provenance, RawNode, Session, node_id_for
from .blobs import BlobStore
from .caches import DerivedStore
from .db import PostgresDB, SqliteDB, is_postgres_url, split_blobs_param
from .forget import ForgetStore
# the records are this module's API as before (``from c3m.store.cold import Snapshot, read_image, ...``)
from .records import (DEFAULT_MAX_IMAGE_BYTES, DEFAULT_MAX_IMAGE_PIXELS, DEFAULT_MAX_TEXT_CHARS,  # noqa: F401
                      NAMESPACE_RE, ForgetReport, PreparedSession, SessionRecord, Snapshot, _conflict,
                      _retry_locked, _session_record, _split_sql, check_namespace, node_content_sha256, now_iso,
                      read_image, session_content_sha256, text_sha256, utc_naive)
from .schema import MIGRATIONS, SCHEMA, SCHEMA_VERSION, SQLITE_SEARCH, search_token
from .snapshots import (SNAPSHOT_CACHE_SIZE, SNAPSHOT_CHECKPOINT_EVERY, SNAPSHOT_FIX, SnapshotStore,  # noqa: F401
                        _CachedState, decode_snapshot_row)


class ColdStore(SnapshotStore, DerivedStore, ForgetStore):
    """An opened store with one database connection: a folder path (SQLite) or a ``postgresql://`` URL.

    Open one per process or thread (SQLite refuses cross-thread use of a connection, which keeps one
    thread's open transaction from leaking into another's reads); any number may share a store.
    A PostgreSQL URL names its blob folder with a ``blobs`` query parameter (or ``blobs=``): every host that opens
    the store must see the same folder (a shared filesystem), since the database holds only the blobs' hashes.
    """

    def __init__(self, path: str | Path, *, create: bool = True, busy_timeout_s: float = 60.0,
                 blobs: str | Path | None = None):
        self._in_txn = False
        self._snap_cache: dict[tuple[str, str], _CachedState] = {}  # most recently used last
        self.nodes_read = 0  # Raw Nodes materialised from the database: the harness's read-amplification meter
        #: when a set, every Raw-Node id this connection materialises or a full-text search returns is added: the
        #: harness's record of what a read touched (``c3m.eval.sandbox``)
        self.touched: set[str] | None = None
        if is_postgres_url(path):
            url, param = split_blobs_param(str(path))
            blob_dir = blobs if blobs is not None else param
            self.conn = PostgresDB(url, busy_timeout_s)
            self.location = self.conn.shown
            if not blob_dir:
                self.conn.close()
                raise StoreError(f"the PostgreSQL store {self.location} needs a blob folder",
                                 fix="add ?blobs=/shared/path to the URL (a folder every host opening the store "
                                     "can reach), or pass blobs=")
            self.path = Path(blob_dir)
            self.backend = "postgresql"
            try:
                self._init_postgres(create)
            except BaseException:
                self.conn.close()
                raise
            self.blobs = BlobStore(self.path)
            return
        self.path = Path(path)
        self.location = str(self.path)
        self.backend = "sqlite"
        db = self.path / "store.sqlite"
        if not db.exists() and not create:
            raise StoreError(f"no c3m store at {self.path}", fix="check the path, or create one with `c3m ingest`")
        self.path.mkdir(parents=True, exist_ok=True)
        self.blobs = BlobStore(self.path / "blobs" if blobs is None else Path(blobs))
        self.conn = SqliteDB(db, busy_timeout_s)
        _retry_locked(self._setup, busy_timeout_s)

    def _init_postgres(self, create: bool) -> None:
        from .schema import postgres_schema

        exists = self.conn.execute("SELECT to_regclass('meta')").fetchone()[0] is not None
        if not exists and not create:
            raise StoreError(f"no c3m store in {self.location}",
                             fix="check the URL (database, search_path), or create one with `c3m ingest`")
        self.path.mkdir(parents=True, exist_ok=True)
        with self.transaction():
            self.conn.lock_global()  # concurrent CREATE TABLE IF NOT EXISTS races in PostgreSQL's catalogue
            if self.conn.execute("SELECT to_regclass('meta')").fetchone()[0] is None or self._schema_behind():
                searchable = self.conn.execute("SELECT to_regclass('node_search')").fetchone()[0] is not None
                for statement in postgres_schema():
                    self.conn.execute(statement)
                if not searchable:
                    self._backfill_search()
            self._check_version()

    def _schema_behind(self) -> bool:
        row = self.conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        return row is None or int(row["value"]) < SCHEMA_VERSION

    def _setup(self) -> None:
        # Switching to WAL needs an exclusive lock and SQLite does not call the busy handler for it, so
        # several processes creating one store at once must retry (see _retry_locked).
        if self.conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
            self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute("PRAGMA synchronous = FULL")
        # the WAL is reused after a checkpoint but keeps its high-water size: cap what it keeps (a nearly full disk
        # otherwise fills with a stale 4 MB WAL; faults campaign)
        self.conn.execute("PRAGMA journal_size_limit = 4194304")
        self.conn.execute("PRAGMA foreign_keys = ON")
        self._init_schema()

    # -- lifecycle -----------------------------------------------------------------------------
    def _init_schema(self) -> None:
        with self.transaction():
            for statement in _split_sql(SCHEMA):
                self.conn.execute(statement)
            for table, column, definition in MIGRATIONS:  # columns a table gained after it shipped
                if column not in self.conn.columns(table):
                    self.conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {definition}")
            searchable = self.conn.execute("SELECT 1 FROM sqlite_master WHERE name='node_search'").fetchone()
            self.conn.execute(SQLITE_SEARCH)
            if not searchable:  # a v3 store (or a new one, which has nothing to index yet)
                self._backfill_search()
            self._check_version()

    def _backfill_search(self) -> None:
        """Index every unredacted node of an upgraded store for ``search_text`` (schema v4), one statement per
        namespace."""
        for (namespace,) in self.conn.execute("SELECT DISTINCT namespace FROM raw_nodes").fetchall():
            self._index_search(namespace)

    def _check_version(self) -> None:
        """Record the schema version in a new store; refuse a newer one; mark an upgraded older one."""
        row = self.conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        if row is None:
            self.conn.execute("INSERT INTO meta(key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            self.conn.execute("INSERT INTO meta(key, value) VALUES ('created_at', ?)", (now_iso(),))
        elif int(row["value"]) > SCHEMA_VERSION:
            raise StoreError(f"store schema v{row['value']} is newer than this c3m (v{SCHEMA_VERSION})",
                             fix="upgrade c3m (pip install -U c3m)")
        elif int(row["value"]) < SCHEMA_VERSION:  # older stores only lack tables, created above
            self.conn.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(SCHEMA_VERSION),))

    def grant(self, role: str) -> None:
        """PostgreSQL: give ``role`` (an existing database role) exactly what c3m needs and no more — no DELETE or
        TRUNCATE of sessions, Raw Nodes, images, derived records or the forget log, UPDATE only where ``forget``
        redacts, no DDL (so it cannot drop the triggers either). Run it as the store's owner; run c3m as the role."""
        from .schema import PG_GRANTS

        if self.backend != "postgresql":
            raise InvalidInput("store", "grant() is for PostgreSQL stores (a folder's permissions are the "
                               "filesystem's)", fix="open the store with its postgresql:// URL")
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,62}", role or ""):
            raise InvalidInput("role", f"{role!r} is not a plain PostgreSQL role name",
                               fix="use letters, digits and _ (create it first: CREATE ROLE name LOGIN)")
        schema = self.conn.execute("SELECT current_schema()").fetchone()[0]
        with self.transaction():
            for statement in PG_GRANTS:
                self.conn.execute(statement.format(role=role, schema=f'"{schema}"'))

    def integrity_problems(self) -> list[str]:
        """The database engine's own consistency check: SQLite's integrity and foreign-key checks (PostgreSQL
        enforces foreign keys on every write and checksums pages itself, so there is nothing to list)."""
        if self.backend != "sqlite":
            return []
        out = []
        integrity = self.conn.execute("PRAGMA integrity_check").fetchone()[0]
        if integrity != "ok":
            out.append(f"sqlite integrity_check: {integrity}")
        for row in self.conn.execute("PRAGMA foreign_key_check").fetchall():
            out.append(f"foreign key violation in {row[0]} rowid {row[1]}")
        return out

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> "ColdStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @contextmanager
    def transaction(self, namespace: str | None = None) -> Iterator["ColdStore"]:
        """A write transaction: SQLite's write lock from the start (no upgrade deadlocks); in PostgreSQL, with
        ``namespace``, that namespace's writer lock from the start (so what it reads next is what the previous
        writer committed). Nested calls join the open transaction (and take the namespace's lock)."""
        if self._in_txn:
            if namespace is not None:
                self.conn.lock_namespace(namespace)
            yield self
            return
        self.conn.begin()
        self._in_txn = True
        try:
            if namespace is not None:
                self.conn.lock_namespace(namespace)
            yield self
        except BaseException:
            self._in_txn = False
            self.conn.rollback()
            raise
        self._in_txn = False
        self.conn.commit()

    # -- sessions and Raw Nodes ----------------------------------------------------------------
    def prepare_session(self, namespace: str, session: Session, *, max_image_bytes: int = DEFAULT_MAX_IMAGE_BYTES,
                        max_text_chars: int = DEFAULT_MAX_TEXT_CHARS) -> PreparedSession:
        """Check a session, write its images to the blob store, and build its Raw Nodes (no DB write)."""
        check_namespace(namespace)
        if not isinstance(session, Session):
            raise InvalidInput("session", f"expected c3m.types.Session, got {type(session).__name__}",
                               fix="build one with Session(id=..., time=datetime, turns=[Turn(...)])")
        if not isinstance(session.id, str) or not session.id.strip():
            raise InvalidInput("session.id", "must be a non-empty string", fix="give each session a unique id")
        if not isinstance(session.time, datetime):
            raise InvalidInput("session.time", f"must be a datetime, got {type(session.time).__name__}",
                               fix="pass datetime.fromisoformat('2026-03-02T10:00:00')")
        if not session.turns:
            raise InvalidInput("session.turns", "a session needs at least one turn", fix="add a Turn")
        time = utc_naive(session.time)
        for i, turn in enumerate(session.turns):  # every text checked before any image blob is written
            if isinstance(turn.text, str) and len(turn.text) > max_text_chars:
                raise InvalidInput(f"turns[{i}].text", f"has {len(turn.text)} characters, over the limit of "
                                   f"{max_text_chars}", fix="split the text over several turns (or raise "
                                   "MemoryConfig.max_turn_chars / `c3m serve --max-text-chars`)")
        images: list[list[tuple[bytes, ImageRef]]] = []
        for i, turn in enumerate(session.turns):  # every turn checked, every image decoded, before any blob write
            if turn.role not in ROLES:
                raise InvalidInput(f"turns[{i}].role", f"unknown role {turn.role!r}", fix=f"use one of {list(ROLES)}")
            if not isinstance(turn.text, str):
                raise InvalidInput(f"turns[{i}].text", f"must be a string, got {type(turn.text).__name__}",
                                   fix="pass the utterance text (may be empty when the turn has images)")
            images.append([read_image(image, f"turns[{i}].images[{k}]", max_bytes=max_image_bytes)
                           for k, image in enumerate(turn.images)])
        nodes, hashes = [], []
        for i, turn in enumerate(session.turns):
            refs = [ref for _, ref in images[i]]
            prov = Provenance(namespace=namespace, session_id=session.id, turn_index=i, time=time)
            node = RawNode(node_id=node_id_for(namespace, session.id, i), provenance=prov, role=turn.role,
                           text=turn.text, images=tuple(refs))
            nodes.append(node)
            hashes.append(node_content_sha256(turn.role, turn.text, refs))
        prepared = PreparedSession(namespace, session.id, time, tuple(nodes), tuple(hashes),
                                   session_content_sha256(time, hashes))
        # A session id already stored with other content is refused before its images reach the blob store (the
        # fuzz campaign found such refusals leaving orphan blobs). insert_session checks again under the lock.
        existing = self.session_record(namespace, session.id)
        if existing is not None and existing.content_sha256 != prepared.content_sha256:
            raise _conflict(prepared)
        for turn_images in images:
            for data, _ in turn_images:
                self.blobs.put(data)
        return prepared

    def session_record(self, namespace: str, session_id: str) -> SessionRecord | None:
        row = self.conn.execute("SELECT * FROM sessions WHERE namespace=? AND session_id=?",
                                (namespace, session_id)).fetchone()
        return _session_record(row) if row else None

    def head_seq(self, namespace: str) -> int:
        """Seq of the namespace's latest committed session (0 when empty): a cheap change check."""
        return self.conn.execute("SELECT COALESCE(MAX(seq), 0) FROM sessions WHERE namespace=?",
                                 (namespace,)).fetchone()[0]

    def generation(self, namespace: str) -> tuple[int, int]:
        """(head seq, forget-log length) of a namespace: changes whenever another connection adds a session *or*
        forgets nodes (a forget keeps the head but drops snapshots, so the head alone cannot tell a reader that
        its in-memory index still holds forgotten content)."""
        row = self.conn.execute("SELECT (SELECT COALESCE(MAX(seq), 0) FROM sessions WHERE namespace=?),"
                                " (SELECT COUNT(*) FROM forget_log WHERE namespace=?)", (namespace, namespace)).fetchone()
        return int(row[0]), int(row[1])

    def sessions(self, namespace: str) -> list[SessionRecord]:
        rows = self.conn.execute("SELECT * FROM sessions WHERE namespace=? ORDER BY seq", (namespace,))
        return [_session_record(r) for r in rows]

    def insert_session(self, prepared: PreparedSession) -> tuple[SessionRecord, bool]:
        """Insert inside a transaction. Returns (record, created); identical re-ingest is a no-op."""
        assert self._in_txn, "insert_session must run inside ColdStore.transaction()"
        self.conn.lock_namespace(prepared.namespace)  # seq = max + 1 needs the namespace's writers in one line
        existing = self.session_record(prepared.namespace, prepared.session_id)
        if existing is not None:
            if existing.content_sha256 == prepared.content_sha256:
                return existing, False
            raise _conflict(prepared)
        seq = self.conn.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM sessions WHERE namespace=?",
                                (prepared.namespace,)).fetchone()[0]
        at = now_iso()
        self.conn.execute("INSERT INTO sessions VALUES (?,?,?,?,?,?,?)",
                          (prepared.namespace, prepared.session_id, seq, prepared.time.isoformat(),
                           len(prepared.nodes), prepared.content_sha256, at))
        for node, h in zip(prepared.nodes, prepared.node_hashes):
            self.conn.execute(
                "INSERT INTO raw_nodes(node_id, namespace, session_id, turn_index, role, text, time, content_sha256,"
                " created_at) VALUES (?,?,?,?,?,?,?,?,?)",
                (node.node_id, prepared.namespace, prepared.session_id, node.turn_index, node.role, node.text,
                 prepared.time.isoformat(), h, at))
            for pos, im in enumerate(node.images):
                self.conn.execute("INSERT INTO node_images(node_id, position, sha256, mime, width, height, nbytes)"
                                  " VALUES (?,?,?,?,?,?,?)",
                                  (node.node_id, pos, im.sha256, im.mime, im.width, im.height, im.nbytes))
        self._index_search(prepared.namespace, prepared.session_id)
        return self.session_record(prepared.namespace, prepared.session_id), True

    # -- Cold-Store text search (schema v4) ----------------------------------------------------
    def _index_search(self, namespace: str, session_id: str | None = None) -> None:
        """Put the unredacted, non-empty texts of a session (or of the whole namespace) into ``node_search``. In
        SQLite the FTS row shares the Raw Node's rowid, so ``forget`` deletes it without scanning the index."""
        where = "namespace=? AND redacted=0 AND text <> ''" + (" AND session_id=?" if session_id is not None else "")
        args = (namespace,) + ((session_id,) if session_id is not None else ())
        if self.backend == "sqlite":
            self.conn.execute(f"INSERT INTO node_search(rowid, body, ns, node_id) SELECT rowid, text, ?, node_id"
                              f" FROM raw_nodes WHERE {where}", (search_token(namespace),) + args)
        else:
            self.conn.execute(f"INSERT INTO node_search(node_id, namespace, tsv) SELECT node_id, namespace,"
                              f" to_tsvector('english', text) FROM raw_nodes WHERE {where} ON CONFLICT DO NOTHING", args)

    def search_text(self, namespace: str, terms: Sequence[str], limit: int) -> list[tuple[str, float]]:
        """The namespace's Raw Nodes that hold any of ``terms`` (plain words; anything else is dropped), best first:
        ``[(node_id, score)]``, higher = better, at most ``limit``.

        SQLite ranks by FTS5's Okapi BM25 (porter stemming; ties by commit order). Its term statistics are those of
        the whole store (every namespace's rows), as a search engine's shared index: a ranking can shift slightly
        as other namespaces grow, and no row of another namespace is ever returned. PostgreSQL ranks by
        ``ts_rank`` over an English ``tsvector`` (term frequency, no IDF; ties by node id), so its order differs."""
        words = [t for t in dict.fromkeys(str(t).lower() for t in terms) if re.fullmatch(r"[^\W_]+", t)]
        if not words or limit <= 0:
            return []
        if self.backend == "sqlite":
            match = f'ns : "{search_token(namespace)}" AND body : (' + " OR ".join(f'"{w}"' for w in words) + ")"
            rows = self.conn.execute("SELECT node_id, bm25(node_search, 1.0, 0.0) FROM node_search WHERE node_search"
                                     " MATCH ? ORDER BY bm25(node_search, 1.0, 0.0), rowid LIMIT ?",
                                     (match, int(limit))).fetchall()
            found = [(r[0], -float(r[1])) for r in rows]  # FTS5's bm25() is negated: lower = better
        else:
            rows = self.conn.execute("SELECT s.node_id, ts_rank(s.tsv, q) AS r FROM node_search s,"
                                     " to_tsquery('english', ?) q WHERE s.namespace=? AND s.tsv @@ q"
                                     " ORDER BY r DESC, s.node_id LIMIT ?", (" | ".join(words), namespace, int(limit)))
            found = [(r[0], float(r[1])) for r in rows.fetchall()]
        if self.touched is not None:
            self.touched.update(n for n, _ in found)
        return found

    def _unindex_search(self, node_id: str) -> None:
        if self.backend == "sqlite":
            self.conn.execute("DELETE FROM node_search WHERE rowid=(SELECT rowid FROM raw_nodes WHERE node_id=?)",
                              (node_id,))
        else:
            self.conn.execute("DELETE FROM node_search WHERE node_id=?", (node_id,))

    def search_stats(self, namespace: str) -> dict[str, int]:
        """Size of the namespace's Cold-Store search index: rows and the bytes of text they hold (reported beside
        the active index's size: the search index is not bounded by the write budget)."""
        if self.backend == "sqlite":
            row = self.conn.execute("SELECT COUNT(*), COALESCE(SUM(LENGTH(CAST(body AS BLOB))), 0) FROM node_search"
                                    " WHERE node_search MATCH ?", (f'ns : "{search_token(namespace)}"',)).fetchone()
        else:
            row = self.conn.execute("SELECT COUNT(*), COALESCE(SUM(pg_column_size(tsv)), 0) FROM node_search"
                                    " WHERE namespace=?", (namespace,)).fetchone()
        return {"search_rows": int(row[0]), "search_bytes": int(row[1])}

    def nodes_for_session(self, namespace: str, session_id: str) -> list[RawNode]:
        rows = self.conn.execute("SELECT * FROM raw_nodes WHERE namespace=? AND session_id=? ORDER BY turn_index",
                                 (namespace, session_id)).fetchall()
        return self._build_nodes(rows)

    def get_nodes(self, node_ids: Sequence[str]) -> dict[str, RawNode]:
        out: dict[str, RawNode] = {}
        ids = list(dict.fromkeys(node_ids))
        for start in range(0, len(ids), 500):
            chunk = ids[start:start + 500]
            rows = self.conn.execute(f"SELECT * FROM raw_nodes WHERE node_id IN ({','.join('?' * len(chunk))})",
                                     chunk).fetchall()
            out.update((n.node_id, n) for n in self._build_nodes(rows))
        return out

    def iter_nodes(self, namespace: str, *, upto_seq: int | None = None, after_seq: int = 0) -> Iterator[RawNode]:
        """Raw Nodes of a namespace in commit order (optionally only sessions with after_seq < seq <= upto_seq)."""
        sql = ("SELECT r.* FROM raw_nodes r JOIN sessions s ON s.namespace=r.namespace AND s.session_id=r.session_id"
               " WHERE r.namespace=? AND s.seq>?" + (" AND s.seq<=?" if upto_seq is not None else "")
               + " ORDER BY s.seq, r.turn_index")
        args = (namespace, after_seq) + ((upto_seq,) if upto_seq is not None else ())
        rows = self.conn.execute(sql, args).fetchall()
        for start in range(0, len(rows), 1000):
            yield from self._build_nodes(rows[start:start + 1000])

    def count_nodes(self, namespace: str, *, upto_seq: int | None = None) -> int:
        sql = ("SELECT COUNT(*) FROM raw_nodes r JOIN sessions s ON s.namespace=r.namespace AND"
               " s.session_id=r.session_id WHERE r.namespace=?" + (" AND s.seq<=?" if upto_seq is not None else ""))
        return self.conn.execute(sql, (namespace, upto_seq) if upto_seq is not None else (namespace,)).fetchone()[0]

    def _build_nodes(self, rows: Sequence[sqlite3.Row]) -> list[RawNode]:
        if not rows:
            return []
        self.nodes_read += len(rows)
        ids = [r["node_id"] for r in rows]
        if self.touched is not None:
            self.touched.update(ids)
        images: dict[str, list[ImageRef]] = {i: [] for i in ids}
        img_rows = self.conn.execute(
            f"SELECT * FROM node_images WHERE node_id IN ({','.join('?' * len(ids))}) AND redacted=0"
            " ORDER BY node_id, position", ids).fetchall()
        for ir in img_rows:
            images[ir["node_id"]].append(ImageRef(ir["sha256"], ir["mime"], ir["width"], ir["height"], ir["nbytes"]))
        return [RawNode(node_id=r["node_id"],
                        provenance=Provenance(r["namespace"], r["session_id"], r["turn_index"],
                                              datetime.fromisoformat(r["time"])),
                        role=r["role"], text=r["text"], images=tuple(images[r["node_id"]]),
                        redacted=bool(r["redacted"]))
                for r in rows]

    def image_bytes(self, ref: ImageRef | str) -> bytes:
        return self.blobs.get(ref.sha256 if isinstance(ref, ImageRef) else ref)

    def image_in_namespace(self, namespace: str, sha256: str) -> str | None:
        """The MIME type of blob ``sha256`` when a non-redacted Raw Node of ``namespace`` holds it as an image or
        a non-redacted derived blob (a grounded crop) of ``namespace`` is it; else None. What a server checks
        before handing out bytes: a blob shared by two namespaces is visible to each, never through the other."""
        row = self.conn.execute(
            "SELECT i.mime FROM node_images i JOIN raw_nodes r ON r.node_id=i.node_id WHERE i.sha256=? AND"
            " r.namespace=? AND i.redacted=0 UNION ALL SELECT mime FROM derived_blobs WHERE sha256=? AND namespace=?"
            " AND redacted=0 LIMIT 1", (sha256, namespace, sha256, namespace)).fetchone()
        return row[0] if row else None

    def namespaces(self) -> list[str]:
        return [r[0] for r in self.conn.execute("SELECT DISTINCT namespace FROM sessions ORDER BY namespace")]

    def namespace_stats(self, namespace: str) -> dict[str, int]:
        q = self.conn.execute
        return {
            "sessions": q("SELECT COUNT(*) FROM sessions WHERE namespace=?", (namespace,)).fetchone()[0],
            "raw_nodes": q("SELECT COUNT(*) FROM raw_nodes WHERE namespace=?", (namespace,)).fetchone()[0],
            "redacted_nodes": q("SELECT COUNT(*) FROM raw_nodes WHERE namespace=? AND redacted=1",
                                (namespace,)).fetchone()[0],
            "images": q("SELECT COUNT(*) FROM node_images i JOIN raw_nodes r ON r.node_id=i.node_id"
                        " WHERE r.namespace=? AND i.redacted=0", (namespace,)).fetchone()[0],
            "derived_records": q("SELECT COUNT(*) FROM derived_records WHERE namespace=? AND redacted=0",
                                 (namespace,)).fetchone()[0],
        }
