"""The Cold Store: immutable Raw Nodes, original images, derived perception, index snapshots.

Two backends behind one class (``c3m.store.db``): a **folder** — ``store.sqlite`` (WAL mode) + ``blobs/`` — for one
machine, or a **PostgreSQL** database (``postgresql://…?blobs=/shared/path``) for many writers on many hosts, its
blobs in a filesystem folder they share. Blobs are content-addressed images: the originals and the grounded crops
cut from them, which are *derived blobs* and never replace an original. Many processes may open the same store:
readers never block; writers serialise on SQLite's write lock (``BEGIN IMMEDIATE`` with a busy timeout), or in
PostgreSQL per namespace. A session is committed in *one* transaction together with the method's index snapshot,
so after a crash every session is either fully present (nodes, images, snapshot) or absent.
"""
from __future__ import annotations

import hashlib
import io
import json
import re
import sqlite3
import zlib
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from ..errors import InvalidInput, SessionConflict, StoreBusy, StoreError
from ..types import (ROLES, ImageInput, ImageRef, ImagePerception, Provenance, RawNode, Session, VisualAnchor,
                     node_id_for)
from .blobs import BlobStore
from .db import PostgresDB, SqliteDB, is_postgres_url, split_blobs_param
from .delta import apply as apply_patch
from .delta import canonical
from .delta import diff as diff_states
from .schema import MIGRATIONS, SCHEMA, SCHEMA_VERSION, SQLITE_SEARCH, search_token

NAMESPACE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@-]{0,127}$")
DEFAULT_MAX_IMAGE_BYTES = 20 * 1024 * 1024
#: pixels per image (the dataset validator's ImageLimits.max_pixels): checked on the header, before any decoding, so a
#: small file claiming 10,000 x 10,000 pixels (a decompression bomb) is refused without allocating its frame
DEFAULT_MAX_IMAGE_PIXELS = 40_000_000
#: a turn's text limit: a 2 MB turn used to be stored whole, peak ingest near 900 MB RSS, and then dropped from every
#: context by the reader's token budget without a word. Longer documents belong in several turns (or elsewhere).
DEFAULT_MAX_TEXT_CHARS = 100_000
SNAPSHOT_CHECKPOINT_EVERY = 32  # a full snapshot at least every K versions: a load applies at most K - 1 deltas
SNAPSHOT_CACHE_SIZE = 4  # (namespace, method) states kept reconstructed, so a sync applies one new delta
_MIME = {"PNG": "image/png", "JPEG": "image/jpeg", "GIF": "image/gif", "WEBP": "image/webp", "BMP": "image/bmp",
         "TIFF": "image/tiff"}


def utc_naive(t: datetime) -> datetime:
    """All stored times are naive UTC (aware inputs are converted) so that every pair compares."""
    return t.astimezone(timezone.utc).replace(tzinfo=None) if t.tzinfo is not None else t


def now_iso() -> str:
    return datetime.now(timezone.utc).replace(tzinfo=None).isoformat(timespec="microseconds")


def check_namespace(namespace: str) -> str:
    if not isinstance(namespace, str) or not NAMESPACE_RE.match(namespace):
        raise InvalidInput("namespace", f"{namespace!r} is not a valid namespace",
                           fix="use 1-128 characters from letters, digits and . _ : / @ -, starting with a letter "
                               "or digit (e.g. 'user-42' or 'agent/alice')")
    return namespace


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _pack(obj: Any) -> bytes:
    return zlib.compress(json.dumps(obj, separators=(",", ":"), sort_keys=True).encode("utf-8"), 6)


def _unpack(blob: bytes) -> Any:
    return json.loads(zlib.decompress(blob).decode("utf-8"))


@dataclass(frozen=True)
class SessionRecord:
    namespace: str
    session_id: str
    seq: int
    time: datetime
    n_turns: int
    content_sha256: str
    ingested_at: str


@dataclass(frozen=True)
class PreparedSession:
    """A session turned into Raw Nodes, its images already in the blob store, ready to commit."""

    namespace: str
    session_id: str
    time: datetime
    nodes: tuple[RawNode, ...]
    node_hashes: tuple[str, ...]
    content_sha256: str


@dataclass(frozen=True)
class Snapshot:
    namespace: str
    method: str
    version: int
    session_id: str
    created_at: str
    state: dict
    pointers: tuple[str, ...]
    complete_provenance: bool


@dataclass(frozen=True)
class ForgetReport:
    namespace: str
    node_ids: tuple[str, ...]
    blobs_deleted: int                 # original image blobs deleted
    snapshots_dropped: int
    derived_redacted: int = 0          # derived perception records (captions, anchors) redacted
    crops_deleted: int = 0             # grounded-crop blobs deleted


def node_content_sha256(role: str, text: str, images: Sequence[ImageRef]) -> str:
    payload = json.dumps([role, text, [im.sha256 for im in images]], separators=(",", ":"))
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def session_content_sha256(time: datetime, node_hashes: Iterable[str]) -> str:
    payload = json.dumps([time.isoformat(), list(node_hashes)], separators=(",", ":"))
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def read_image(image: ImageInput, field: str, *, max_bytes: int = DEFAULT_MAX_IMAGE_BYTES,
               max_pixels: int = DEFAULT_MAX_IMAGE_PIXELS) -> tuple[bytes, ImageRef]:
    """Load and check one image given as a path or bytes; the bytes are kept exactly as given."""
    from PIL import Image, UnidentifiedImageError

    if isinstance(image, (str, Path)):
        path = Path(image)
        if not path.is_file():
            raise InvalidInput(field, f"image file {str(path)!r} does not exist", fix="give an existing image path")
        data = path.read_bytes()
    elif isinstance(image, (bytes, bytearray, memoryview)):
        data = bytes(image)
    else:
        raise InvalidInput(field, f"expected an image path or encoded image bytes, got {type(image).__name__}",
                           fix="pass a file path (str/Path) or the PNG/JPEG bytes")
    if len(data) > max_bytes:
        raise InvalidInput(field, f"image is {len(data)} bytes, over the {max_bytes}-byte limit",
                           fix="downscale or recompress the image")
    try:
        with Image.open(io.BytesIO(data)) as im:
            fmt, (w, h) = im.format, im.size
            if w <= 0 or h <= 0 or w * h > max_pixels:
                raise InvalidInput(field, f"image is {w}x{h} pixels: " + ("empty" if w * h <= 0 else
                                   f"over the {max_pixels}-pixel limit"), fix="give a non-empty image of at most "
                                   f"{max_pixels} pixels (downscale it)")
            im.verify()
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
        raise InvalidInput(field, f"not a readable image ({exc.__class__.__name__}: {exc})",
                           fix="give a PNG, JPEG, GIF, WEBP, BMP or TIFF file") from None
    ref = ImageRef(sha256=hashlib.sha256(data).hexdigest(), mime=_MIME.get(fmt or "", "application/octet-stream"),
                   width=int(w), height=int(h), nbytes=len(data))
    return data, ref



def _conflict(prepared: PreparedSession) -> SessionConflict:
    return SessionConflict(
        f"session {prepared.session_id!r} is already stored in namespace {prepared.namespace!r} "
        "with different content; stored sessions are immutable",
        fix="give the new session a new id (or use forget() first if the old one must be redacted)")

class ColdStore:
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

    # -- derived perception records and grounded-crop blobs ------------------------------------
    def put_perceptions(self, namespace: str, items: Sequence[tuple[ImagePerception, bytes | None]]) -> int:
        """Store write-time perception of stored images (derived records) and their grounded crops (derived
        blobs); returns the number of records inserted.

        Each item is an ``ImagePerception`` and the crop's encoded bytes (None when it has no crop). Records
        are immutable: an item whose (backend, version, node, source image) is already stored is a no-op,
        crop included. Everything is checked before anything is written; a bad item raises ``InvalidInput``
        naming it. Runs in its own transaction, or inside the caller's (e.g. the session commit, right after
        ``insert_session``).
        """
        check_namespace(namespace)
        items = list(items)
        checked = []
        for i, item in enumerate(items):
            checked.append(self._check_perception(namespace, i, item))
        with self.transaction(namespace):
            infos = self._node_image_info([rec.node_id for rec, _, _ in checked])
            positions = [self._source_position(namespace, i, rec, infos) for i, (rec, _, _) in enumerate(checked)]
            inserted = 0
            at = now_iso()
            for pos, (rec, data, crop_ref) in zip(positions, checked):
                if self.conn.execute("SELECT 1 FROM derived_records WHERE backend=? AND version=? AND node_id=? AND"
                                     " sha256=?", (rec.backend, rec.version, rec.node_id,
                                                   rec.image.sha256)).fetchone():
                    continue  # immutable: already stored
                box = json.dumps(list(rec.crop_box)) if rec.crop_box is not None else None
                if crop_ref is not None:
                    self.blobs.put(data)  # before the row that references it: a crash leaves an orphan, no dangle
                    self.conn.execute(
                        "INSERT INTO derived_blobs(sha256, node_id, source_sha256, namespace, kind, box,"
                        " backend, version, mime, width, height, nbytes) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)"
                        " ON CONFLICT DO NOTHING",
                        (crop_ref.sha256, rec.node_id, rec.image.sha256, namespace, "grounded_crop", box,
                         rec.backend, rec.version, crop_ref.mime, crop_ref.width, crop_ref.height, crop_ref.nbytes))
                anchors = json.dumps([_anchor_dict(a) for a in rec.anchors], separators=(",", ":"), sort_keys=True)
                cur = self.conn.execute(
                    "INSERT INTO derived_records(namespace, node_id, position, sha256, backend, version,"
                    " caption, anchors, crop_sha256, crop_box, crop_phrase, created_at)"
                    " VALUES (?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT DO NOTHING",
                    (namespace, rec.node_id, pos, rec.image.sha256, rec.backend, rec.version, rec.caption, anchors,
                     crop_ref.sha256 if crop_ref is not None else None, box, rec.crop_phrase, at))
                inserted += cur.rowcount
        return inserted

    @staticmethod
    def _check_perception(namespace: str, i: int, item: Any) -> tuple[ImagePerception, bytes | None, ImageRef | None]:
        """Shape checks of one put_perceptions item that need no database (crop bytes decoded and hashed)."""
        f = f"items[{i}]"
        if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], ImagePerception)):
            raise InvalidInput(f, f"expected (ImagePerception, crop bytes or None), got {type(item).__name__}",
                               fix="pass the pairs c3m.write.perception.perceive() returns")
        rec, data = item
        for name in ("backend", "version"):
            if not isinstance(getattr(rec, name), str) or not getattr(rec, name).strip():
                raise InvalidInput(f"{f}.{name}", "must be a non-empty string",
                                   fix=f"set {name} from the extractor (extractor.{name})")
        if not isinstance(rec.caption, str):
            raise InvalidInput(f"{f}.caption", f"must be a string, got {type(rec.caption).__name__}",
                               fix="pass the extractor's caption text")
        if not isinstance(rec.image, ImageRef):
            raise InvalidInput(f"{f}.image", f"must be an ImageRef, got {type(rec.image).__name__}",
                               fix="use one of the node's stored images (RawNode.images)")
        if any(not isinstance(a, VisualAnchor) for a in rec.anchors):
            raise InvalidInput(f"{f}.anchors", "must be VisualAnchor objects", fix="pass extractor.visual_anchors()")
        if rec.crop_box is not None:
            box = rec.crop_box
            ok = (len(box) == 4 and all(isinstance(v, int) and not isinstance(v, bool) for v in box)
                  and 0 <= box[0] < box[2] <= rec.image.width and 0 <= box[1] < box[3] <= rec.image.height)
            if not ok:
                raise InvalidInput(f"{f}.crop_box", f"{box!r} is not a box (x0, y0, x1, y1) inside the "
                                   f"{rec.image.width}x{rec.image.height} source image",
                                   fix="give integer pixel coordinates with x0 < x1 <= width, y0 < y1 <= height")
        if rec.crop is None:
            if data is not None:
                raise InvalidInput(f"{f}.crop", "crop bytes given but the record has no crop ImageRef",
                                   fix="set ImagePerception.crop to the crop's ImageRef, or pass None as bytes")
            return rec, None, None
        if data is None:
            raise InvalidInput(f"{f}.crop", "the record has a crop but no crop bytes were given",
                               fix="pass the crop's encoded bytes beside the record")
        if rec.crop_box is None:
            raise InvalidInput(f"{f}.crop_box", "a crop needs the box it was cut from",
                               fix="set crop_box to the (x0, y0, x1, y1) the crop covers in the source image")
        data, ref = read_image(bytes(data) if isinstance(data, (bytearray, memoryview)) else data, f"{f}.crop")
        if ref.sha256 != rec.crop.sha256:
            raise InvalidInput(f"{f}.crop.sha256", f"{rec.crop.sha256[:12]}… is not the SHA-256 of the crop bytes "
                               f"({ref.sha256[:12]}…)", fix="build the crop ImageRef from the bytes you pass")
        if ref != rec.crop:
            raise InvalidInput(f"{f}.crop", f"crop ImageRef {rec.crop} does not describe the bytes ({ref})",
                               fix="build the crop ImageRef (mime, width, height, nbytes) from the bytes you pass")
        return rec, data, ref

    def _node_image_info(self, node_ids: Sequence[str]) -> dict[str, tuple[str, bool, list[str]]]:
        """node id -> (namespace, redacted, non-redacted image shas by position); not counted as a node read."""
        out: dict[str, tuple[str, bool, list[str]]] = {}
        ids = list(dict.fromkeys(node_ids))
        for start in range(0, len(ids), 500):
            chunk = ids[start:start + 500]
            marks = ",".join("?" * len(chunk))
            for r in self.conn.execute(f"SELECT node_id, namespace, redacted FROM raw_nodes WHERE node_id IN ({marks})",
                                       chunk):
                out[r[0]] = (r[1], bool(r[2]), [])
            for r in self.conn.execute(f"SELECT node_id, sha256 FROM node_images WHERE node_id IN ({marks}) AND"
                                       " redacted=0 ORDER BY node_id, position", chunk):
                out[r[0]][2].append(r[1])
        return out

    @staticmethod
    def _source_position(namespace: str, i: int, rec: ImagePerception,
                         infos: dict[str, tuple[str, bool, list[str]]]) -> int:
        info = infos.get(rec.node_id)
        if info is None or info[0] != namespace:
            where = "is not a stored Raw Node" if info is None else f"belongs to namespace {info[0]!r}"
            raise InvalidInput(f"items[{i}].node_id", f"{rec.node_id!r} {where}, not of namespace {namespace!r}",
                               fix="perceive nodes of this namespace after their session is inserted "
                                   "(insert_session), and pass that namespace")
        if info[1]:
            raise InvalidInput(f"items[{i}].node_id", f"{rec.node_id!r} was forgotten (redacted)",
                               fix="do not store perception of forgotten nodes")
        if rec.image.sha256 not in info[2]:
            raise InvalidInput(f"items[{i}].image", f"image {rec.image.sha256[:12]}… is not one of node "
                               f"{rec.node_id!r}'s images", fix="perceive the node's own RawNode.images")
        return info[2].index(rec.image.sha256)

    def perceptions(self, node_ids: Sequence[str], *, backend: str | None = None,
                    version: str | None = None) -> dict[str, list[ImagePerception]]:
        """Non-redacted derived records of these nodes (only nodes that have some), each list ordered by
        image position, then backend and version; ``backend``/``version`` None means any."""
        out: dict[str, list[ImagePerception]] = {}
        ids = list(dict.fromkeys(node_ids))
        extra, extra_args = "", []
        if backend is not None:
            extra, extra_args = extra + " AND d.backend=?", extra_args + [backend]
        if version is not None:
            extra, extra_args = extra + " AND d.version=?", extra_args + [version]
        for start in range(0, len(ids), 500):
            chunk = ids[start:start + 500]
            rows = self.conn.execute(
                "SELECT d.*, i.mime AS i_mime, i.width AS i_width, i.height AS i_height, i.nbytes AS i_nbytes,"
                " b.mime AS b_mime, b.width AS b_width, b.height AS b_height, b.nbytes AS b_nbytes"
                " FROM derived_records d JOIN node_images i ON i.node_id=d.node_id AND i.position=d.position"
                " LEFT JOIN derived_blobs b ON b.sha256=d.crop_sha256 AND b.node_id=d.node_id"
                "  AND b.source_sha256=d.sha256 AND b.redacted=0"
                f" WHERE d.redacted=0 AND d.node_id IN ({','.join('?' * len(chunk))}){extra}"
                " ORDER BY d.node_id, d.position, d.backend, d.version", [*chunk, *extra_args]).fetchall()
            for r in rows:
                crop = (ImageRef(r["crop_sha256"], r["b_mime"], r["b_width"], r["b_height"], r["b_nbytes"])
                        if r["crop_sha256"] is not None and r["b_mime"] is not None else None)
                out.setdefault(r["node_id"], []).append(ImagePerception(
                    node_id=r["node_id"],
                    image=ImageRef(r["sha256"], r["i_mime"], r["i_width"], r["i_height"], r["i_nbytes"]),
                    backend=r["backend"], version=r["version"], caption=r["caption"],
                    anchors=tuple(_anchor_from(a) for a in json.loads(r["anchors"])),
                    crop=crop, crop_box=tuple(json.loads(r["crop_box"])) if r["crop_box"] else None,
                    crop_phrase=r["crop_phrase"]))
        return out

    def derived_blob(self, sha256: str, *, namespace: str | None = None) -> dict | None:
        """Provenance of a non-redacted derived blob (a grounded crop): the node and source image it was cut
        from, or None. ``node_ids`` lists every node whose identical crop shares these bytes (the other
        fields describe the first; ``links`` lists every (node, source image) pair — identical crops can come from
        different source images); ``namespace`` restricts to one namespace."""
        rows = self.conn.execute(
            "SELECT * FROM derived_blobs WHERE sha256=? AND redacted=0" + (" AND namespace=?" if namespace else "")
            + " ORDER BY node_id, source_sha256", (sha256, namespace) if namespace else (sha256,)).fetchall()
        if not rows:
            return None
        r = rows[0]
        return {"sha256": r["sha256"], "node_id": r["node_id"], "namespace": r["namespace"],
                "source_sha256": r["source_sha256"], "kind": r["kind"], "box": tuple(json.loads(r["box"])),
                "backend": r["backend"], "version": r["version"], "mime": r["mime"], "width": r["width"],
                "height": r["height"], "nbytes": r["nbytes"],
                "node_ids": list(dict.fromkeys(x["node_id"] for x in rows)),
                "links": [(x["node_id"], x["source_sha256"]) for x in rows]}

    # -- index snapshots -----------------------------------------------------------------------
    # A row holds the full state (kind 'full') or a patch against the state of an earlier version (kind 'delta',
    # c3m.store.delta), pointers likewise (the sorted id list, or ids added/removed vs the base). A full row at
    # least every SNAPSHOT_CHECKPOINT_EVERY versions, and whenever the delta would be over half the full row, so
    # any version is at most K - 1 patches from a full one. state_sha256 hashes the full state's canonical JSON
    # (encoding 2), so a load proves it rebuilt the exact state. Deltas only ever point backwards: forget's
    # "drop every version >= first affected session" leaves every remaining chain whole.
    def put_snapshot(self, namespace: str, method: str, version: int, session_id: str, state: dict,
                     pointers: Iterable[str], *, complete_provenance: bool) -> None:
        assert self._in_txn, "put_snapshot must run inside ColdStore.transaction()"
        self.conn.lock_namespace(namespace)  # the version chain is read, then extended
        q = self.conn.execute
        canon = canonical(state)
        sha = hashlib.sha256(canon.encode("utf-8")).hexdigest()
        norm = json.loads(canon)  # the state as a load returns it (tuples are lists, keys strings): what we diff
        ptrs = sorted(set(pointers))
        key = (namespace, method)
        if q("SELECT 1 FROM index_snapshots WHERE namespace=? AND method=? AND version=?",
             (namespace, method, version)).fetchone():
            self._detach_dependents(namespace, method, version)  # a later delta built on the row we replace
        kind, base, blob, pblob = "full", None, b"", b""
        base_state = None
        prev = q("SELECT version FROM index_snapshots WHERE namespace=? AND method=? AND version<?"
                 " ORDER BY version DESC LIMIT 1", (namespace, method, version)).fetchone()
        if prev is not None:
            last_full = q("SELECT MAX(version) FROM index_snapshots WHERE namespace=? AND method=? AND kind='full'"
                          " AND version<?", (namespace, method, version)).fetchone()[0]
            since = q("SELECT COUNT(*) FROM index_snapshots WHERE namespace=? AND method=? AND version>? AND"
                      " version<?", (namespace, method, last_full or 0, version)).fetchone()[0]
            if last_full is not None and since + 1 < SNAPSHOT_CHECKPOINT_EVERY:
                try:
                    base_state = self._state_at(namespace, method, prev[0])
                except StoreError:  # a damaged base (verify reports it): this version is written whole
                    base_state = None
            if base_state is not None:
                patch = canonical(diff_states(base_state.state, norm,
                                              nan="NaN" in canon or "NaN" in base_state.canon))
                now = set(ptrs)
                pdelta = canonical({"+": sorted(now - base_state.pointers), "-": sorted(base_state.pointers - now)})
                full_len = len(canon) + sum(len(p) + 3 for p in ptrs)
                if 2 * (len(patch) + len(pdelta)) <= full_len:
                    kind, base = "delta", prev[0]
                    blob, pblob = zlib.compress(patch.encode("utf-8"), 6), zlib.compress(pdelta.encode("utf-8"), 6)
        if kind == "full":
            blob, pblob = zlib.compress(canon.encode("utf-8"), 6), _pack(ptrs)
        at = now_iso()
        q("INSERT INTO index_snapshots(namespace, method, version, session_id, created_at, state,"
          " state_sha256, pointers, n_pointers, complete_provenance, kind, base_version, encoding)"
          " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,2) ON CONFLICT (namespace, method, version) DO UPDATE SET"
          " session_id=excluded.session_id, created_at=excluded.created_at, state=excluded.state,"
          " state_sha256=excluded.state_sha256, pointers=excluded.pointers, n_pointers=excluded.n_pointers,"
          " complete_provenance=excluded.complete_provenance, kind=excluded.kind,"
          " base_version=excluded.base_version, encoding=excluded.encoding",
          (namespace, method, version, session_id, at, blob, sha, pblob, len(ptrs), int(complete_provenance),
           kind, base))
        # if the transaction rolls back, the row's (created_at, hash) will not match and the entry is dropped
        self._remember(key, _CachedState(version, at, sha, norm, canon, set(ptrs), tuple(ptrs)), force=True)

    def _detach_dependents(self, namespace: str, method: str, version: int) -> None:
        """Rewrite as full rows the deltas built on ``version`` (before that row is replaced)."""
        deps = [r[0] for r in self.conn.execute(
            "SELECT version FROM index_snapshots WHERE namespace=? AND method=? AND kind='delta' AND base_version=?",
            (namespace, method, version))]
        for dep in deps:
            st = self._state_at(namespace, method, dep)
            self.conn.execute("UPDATE index_snapshots SET kind='full', base_version=NULL, state=?, pointers=?,"
                              " encoding=2 WHERE namespace=? AND method=? AND version=?",
                              (zlib.compress(st.canon.encode("utf-8"), 6), _pack(sorted(st.pointers)),
                               namespace, method, dep))

    def _remember(self, key: tuple[str, str], entry: "_CachedState", *, force: bool = False) -> None:
        """Keep ``entry`` as the key's reconstructed state unless a newer version is kept (``force``: always)."""
        old = self._snap_cache.pop(key, None)
        if old is not None and not force and old.version > entry.version:
            entry = old
        self._snap_cache[key] = entry
        while len(self._snap_cache) > SNAPSHOT_CACHE_SIZE:
            del self._snap_cache[next(iter(self._snap_cache))]

    def _state_at(self, namespace: str, method: str, version: int) -> "_CachedState":
        """The full state and pointer set of one stored version (never mutate it: the cache owns it).

        Walks the delta chain down to a full row, or to the cached state when that is on the chain (a sync after one
        new session applies one patch), then checks the result against the row's hash. Damaged rows raise
        ``StoreError`` naming namespace, method and version."""
        key = (namespace, method)
        q = self.conn.execute
        cached = self._snap_cache.get(key)
        if cached is not None:
            row = q("SELECT created_at, state_sha256 FROM index_snapshots WHERE namespace=? AND method=? AND"
                    " version=?", (namespace, method, cached.version)).fetchone()
            if row is None or (row[0], row[1]) != (cached.created_at, cached.state_sha256):
                del self._snap_cache[key]  # rewritten or dropped (forget, another connection): stale
                cached = None
            elif cached.version == version:
                self._remember(key, cached, force=True)
                return cached
        chain: list[sqlite3.Row] = []
        cur = version
        start = None
        while True:
            if cached is not None and cur == cached.version:
                start = cached
                break
            row = q("SELECT version, created_at, kind, base_version, state, state_sha256, pointers, n_pointers,"
                    " encoding FROM index_snapshots WHERE namespace=? AND method=? AND version=?",
                    (namespace, method, cur)).fetchone()
            if row is None:
                what = f"snapshot {namespace}/{method}@{chain[-1]['version']}: its base version {cur}" if chain \
                    else f"snapshot {namespace}/{method}@{cur}"
                raise StoreError(f"{what} is missing", fix=SNAPSHOT_FIX)
            chain.append(row)
            if row["kind"] == "full":
                break
            if row["kind"] != "delta" or row["base_version"] is None or row["base_version"] >= cur:
                raise StoreError(f"snapshot {namespace}/{method}@{cur}: kind {row['kind']!r} with base version "
                                 f"{row['base_version']!r} is not a full row or a delta on an earlier version",
                                 fix=SNAPSHOT_FIX)
            cur = row["base_version"]
        state: Any = None
        ptrs: set[str] = set()
        if start is not None:
            del self._snap_cache[key]  # its tree is patched in place into the newer version
            state, ptrs = start.state, start.pointers
        canon = None
        try:
            for i, row in enumerate(reversed(chain)):
                state, ptrs, canon = decode_snapshot_row(f"snapshot {namespace}/{method}@{row['version']}", row,
                                                         state, ptrs, check=i == len(chain) - 1)
        except StoreError as exc:
            self._snap_cache.pop(key, None)
            first = self._locate_damage(namespace, method, version) or exc
            if first.message.startswith(f"snapshot {namespace}/{method}@{version}:"):
                raise first from None
            raise StoreError(f"snapshot {namespace}/{method}@{version} cannot be rebuilt: {first.message}",
                             fix=SNAPSHOT_FIX) from None
        top = chain[0]
        entry = _CachedState(version, top["created_at"], top["state_sha256"], state, canon, ptrs)
        self._remember(key, entry)
        return entry

    def _locate_damage(self, namespace: str, method: str, version: int) -> StoreError | None:
        """After a failed rebuild of ``version``: walk its whole chain again from the full row, hashing every row,
        and return the first row's error (a delta applied to a wrong base fails later than where the damage is)."""
        rows = []
        cur: int | None = version
        while cur is not None:
            row = self.conn.execute("SELECT version, created_at, kind, base_version, state, state_sha256, pointers,"
                                    " n_pointers, encoding FROM index_snapshots WHERE namespace=? AND method=? AND"
                                    " version=?", (namespace, method, cur)).fetchone()
            if row is None or row["kind"] != "delta" or row["base_version"] is None or row["base_version"] >= cur:
                rows += [row] if row is not None else []
                break
            rows.append(row)
            cur = row["base_version"]
        state: Any = None
        ptrs: set[str] = set()
        try:
            for row in reversed(rows):
                state, ptrs, _ = decode_snapshot_row(f"snapshot {namespace}/{method}@{row['version']}", row, state,
                                                     ptrs, check=True)
        except StoreError as first:
            return first
        return None

    def latest_snapshot_version(self, namespace: str, method: str) -> int:
        row = self.conn.execute("SELECT MAX(version) FROM index_snapshots WHERE namespace=? AND method=?",
                                (namespace, method)).fetchone()
        return int(row[0] or 0)

    def snapshot(self, namespace: str, method: str, version: int | None = None) -> Snapshot | None:
        """The snapshot after session ``version`` (its seq); the latest one when version is None. Its state is a
        fresh tree, the caller's to keep or change."""
        if version is None:
            version = self.latest_snapshot_version(namespace, method)
        row = self.conn.execute("SELECT namespace, method, version, session_id, created_at, complete_provenance"
                                " FROM index_snapshots WHERE namespace=? AND method=? AND version=?",
                                (namespace, method, version)).fetchone()
        if row is None:
            return None
        st = self._state_at(namespace, method, version)
        if st.sorted_pointers is None:
            st.sorted_pointers = tuple(sorted(st.pointers))
        return Snapshot(row["namespace"], row["method"], row["version"], row["session_id"], row["created_at"],
                        json.loads(st.canon), st.sorted_pointers, bool(row["complete_provenance"]))

    def snapshot_versions(self, namespace: str, method: str) -> list[int]:
        return [r[0] for r in self.conn.execute(
            "SELECT version FROM index_snapshots WHERE namespace=? AND method=? ORDER BY version", (namespace, method))]

    def snapshot_methods(self, namespace: str) -> list[str]:
        return [r[0] for r in self.conn.execute(
            "SELECT DISTINCT method FROM index_snapshots WHERE namespace=? ORDER BY method", (namespace,))]

    def log_maintenance(self, namespace: str, method: str, version: int, session_id: str, action: str,
                        detail: dict) -> None:
        self.conn.execute("INSERT INTO maintenance_log(namespace, method, version, session_id, action, detail, at)"
                          " VALUES (?,?,?,?,?,?,?)",
                          (namespace, method, version, session_id, action, json.dumps(detail, sort_keys=True),
                           now_iso()))

    def maintenance_log(self, namespace: str, method: str, *, version: int | None = None) -> list[dict]:
        sql = "SELECT * FROM maintenance_log WHERE namespace=? AND method=?" + (" AND version=?" if version else "")
        args = (namespace, method, version) if version else (namespace, method)
        return [dict(r) | {"detail": json.loads(r["detail"])} for r in self.conn.execute(sql + " ORDER BY id", args)]

    # -- vector cache (derived data; safe to drop) ---------------------------------------------
    def get_vectors(self, model: str, text_hashes: Sequence[str]) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        hashes = list(dict.fromkeys(text_hashes))
        for start in range(0, len(hashes), 500):
            chunk = hashes[start:start + 500]
            rows = self.conn.execute(f"SELECT text_sha256, vector FROM vector_cache WHERE model=? AND text_sha256 IN "
                                     f"({','.join('?' * len(chunk))})", [model, *chunk])
            out.update((r[0], np.frombuffer(r[1], dtype="<f4").copy()) for r in rows)
        return out

    def put_vectors(self, model: str, vectors: dict[str, np.ndarray]) -> None:
        rows = [(model, h, int(v.shape[0]), np.asarray(v, dtype="<f4").tobytes()) for h, v in vectors.items()]
        with self.transaction():
            self.conn.executemany("INSERT INTO vector_cache VALUES (?,?,?,?) ON CONFLICT DO NOTHING", sorted(rows))

    # -- extraction cache (derived data; survives restarts, shared by processes) --------------
    def get_extraction(self, backend: str, version: str, kind: str, input_sha256: str) -> Any | None:
        """A cached extractor output (JSON-decoded), or None."""
        row = self.conn.execute("SELECT output FROM extraction_cache WHERE backend=? AND version=? AND kind=? AND"
                                " input_sha256=?", (backend, version, kind, input_sha256)).fetchone()
        return json.loads(row[0]) if row else None

    def put_extraction(self, backend: str, version: str, kind: str, input_sha256: str, output: Any) -> None:
        with self.transaction():
            self.conn.execute("INSERT INTO extraction_cache VALUES (?,?,?,?,?) ON CONFLICT (backend, version, kind,"
                              " input_sha256) DO UPDATE SET output=excluded.output",
                              (backend, version, kind, input_sha256, json.dumps(output, sort_keys=True)))

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


SNAPSHOT_FIX = ("snapshots are derived data: run `c3m verify` to list the damaged ones, then delete them (DELETE FROM "
                "index_snapshots WHERE namespace=? AND method=? AND version>=<first damaged>) and reopen the "
                "Memory to rebuild them by replaying the Raw Nodes")


@dataclass
class _CachedState:
    """One reconstructed snapshot version, owned by the store's cache (``state`` is never handed out)."""

    version: int
    created_at: str          # with state_sha256: which row this is (a rewritten row has another created_at)
    state_sha256: str
    state: Any               # normalised JSON tree
    canon: str               # its canonical JSON (what a Snapshot is decoded from)
    pointers: set[str]
    sorted_pointers: tuple[str, ...] | None = None  # what a Snapshot hands out, sorted once


def decode_snapshot_row(tag: str, row: sqlite3.Row, state: Any, pointers: set[str], *, check: bool = True,
                        ) -> tuple[Any, set[str], str | None]:
    """Apply one index_snapshots row: a full row replaces (state, pointers), a delta patches them (in place).
    Returns (state, pointers, canonical JSON or None); ``check``: also hash a delta's result (a full row's hash is
    always checked, on its stored bytes). Anything damaged raises StoreError starting with ``tag``."""
    try:
        raw = zlib.decompress(row["state"])
        praw = zlib.decompress(row["pointers"])
    except zlib.error as exc:
        raise StoreError(f"{tag}: stored {row['kind']} row does not decompress ({exc})", fix=SNAPSHOT_FIX) from None
    canon = None
    try:
        if row["kind"] == "full":
            hashed = row["state"] if row["encoding"] == 1 else raw  # v1/v2 rows hashed their zlib blob
            if hashlib.sha256(hashed).hexdigest() != row["state_sha256"]:
                raise StoreError(f"{tag}: state hash mismatch (the full row is damaged)", fix=SNAPSHOT_FIX)
            state, pointers = json.loads(raw), set(json.loads(praw))
            canon = raw.decode("utf-8") if row["encoding"] != 1 else canonical(state)
        else:
            state = apply_patch(state, json.loads(raw))
            pd = json.loads(praw)
            pointers.difference_update(pd["-"])
            pointers.update(pd["+"])
            if check:
                canon = canonical(state)
                if hashlib.sha256(canon.encode("utf-8")).hexdigest() != row["state_sha256"]:
                    raise StoreError(f"{tag}: state hash mismatch (the delta, or one it builds on, is damaged)",
                                     fix=SNAPSHOT_FIX)
    except StoreError:
        raise
    except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
        raise StoreError(f"{tag}: stored {row['kind']} row does not decode ({exc.__class__.__name__}: {exc})",
                         fix=SNAPSHOT_FIX) from None
    if len(pointers) != row["n_pointers"]:
        raise StoreError(f"{tag}: pointer count {len(pointers)} != recorded {row['n_pointers']}", fix=SNAPSHOT_FIX)
    return state, pointers, canon


def _anchor_dict(a: VisualAnchor) -> dict:
    d = asdict(a)
    d["bbox"] = [int(v) for v in a.bbox] if a.bbox is not None else None
    d["score"] = float(a.score)
    return d


def _anchor_from(d: dict) -> VisualAnchor:
    return VisualAnchor(d["label"], d.get("attribute"), d.get("value"), float(d.get("score", 1.0)),
                        tuple(d["bbox"]) if d.get("bbox") is not None else None)


def _retry_locked(fn, timeout_s: float) -> None:
    """Run ``fn``, retrying with jittered backoff while another process holds the database lock."""
    import random
    import time

    deadline = time.monotonic() + timeout_s
    delay = 0.01
    while True:
        try:
            return fn()
        except (sqlite3.OperationalError, StoreBusy) as exc:
            if not isinstance(exc, StoreBusy) and "locked" not in str(exc) and "busy" not in str(exc) \
                    or time.monotonic() > deadline:
                raise
            time.sleep(delay * (1 + random.random()))
            delay = min(delay * 2, 0.5)


def _session_record(row: sqlite3.Row) -> SessionRecord:
    return SessionRecord(row["namespace"], row["session_id"], row["seq"], datetime.fromisoformat(row["time"]),
                         row["n_turns"], row["content_sha256"], row["ingested_at"])


def _split_sql(script: str) -> list[str]:
    """Split the schema into statements (``executescript`` would commit our open transaction)."""
    statements, buf = [], ""
    for line in script.splitlines(keepends=True):
        buf += line
        if sqlite3.complete_statement(buf):
            statements.append(buf.strip())
            buf = ""
    return statements
