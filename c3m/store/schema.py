"""SQLite schema of the Cold Store.

Immutability is enforced by the schema itself, not by convention: triggers refuse every DELETE of a
session, Raw Node or image row and every UPDATE, except one narrow case — redaction by ``forget``,
which is only accepted when the node's id was first written to the append-only ``forget_log`` and the
update does nothing but blank the content and set ``redacted``.

Derived perception (``derived_records``: a backend's caption, visual anchors and grounded-crop box for one
stored image of one Raw Node; ``derived_blobs``: the grounded crops, content-addressed in ``blobs/`` beside
the originals) is just as immutable: keyed by (backend, version, node, source image), a new backend or
version adds rows and never rewrites old ones; only a logged ``forget`` of the node may redact them.

Schema v2 added the two derived tables (a v1 store is upgraded in place on open; v1 code refuses a v2 store,
whose ``forget`` would not know to redact derived records).

Schema v3 stores index snapshots as *deltas*: a row is either a full state (``kind`` 'full') or a patch against
the state of ``base_version`` (``kind`` 'delta', see ``c3m.store.delta``), with a full checkpoint at least every
``SNAPSHOT_CHECKPOINT_EVERY`` versions, so a store grows with the sessions, not with sessions x index size.
``encoding`` 1 marks rows written by v1/v2 code (full, ``state_sha256`` over the zlib blob); 2 marks v3 rows
(``state_sha256`` over the full state's canonical JSON, delta or not). A v2 store gains the three columns on
open (its rows read as encoding-1 fulls); v2 code refuses a v3 store, which it could not read.
"""
from __future__ import annotations

import re

SCHEMA_VERSION = 4

# Columns added after a table was first shipped: (table, column, definition); added on open when missing.
MIGRATIONS = (
    ("index_snapshots", "kind", "TEXT NOT NULL DEFAULT 'full'"),
    ("index_snapshots", "base_version", "INTEGER"),
    ("index_snapshots", "encoding", "INTEGER NOT NULL DEFAULT 1"),
)

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS sessions (
    namespace      TEXT    NOT NULL,
    session_id     TEXT    NOT NULL,
    seq            INTEGER NOT NULL,          -- 1, 2, ... per namespace: commit order = replay order
    time           TEXT    NOT NULL,
    n_turns        INTEGER NOT NULL,
    content_sha256 TEXT    NOT NULL,          -- over time + every node's content hash
    ingested_at    TEXT    NOT NULL,
    PRIMARY KEY (namespace, session_id),
    UNIQUE (namespace, seq)
);

CREATE TABLE IF NOT EXISTS raw_nodes (
    node_id        TEXT    PRIMARY KEY,
    namespace      TEXT    NOT NULL,
    session_id     TEXT    NOT NULL,
    turn_index     INTEGER NOT NULL,
    role           TEXT    NOT NULL,
    text           TEXT    NOT NULL,
    time           TEXT    NOT NULL,
    content_sha256 TEXT    NOT NULL,          -- over role, text and image hashes, as ingested
    redacted       INTEGER NOT NULL DEFAULT 0,
    created_at     TEXT    NOT NULL,
    UNIQUE (namespace, session_id, turn_index),
    FOREIGN KEY (namespace, session_id) REFERENCES sessions (namespace, session_id)
);
CREATE INDEX IF NOT EXISTS raw_nodes_by_session ON raw_nodes (namespace, session_id, turn_index);

CREATE TABLE IF NOT EXISTS node_images (
    node_id  TEXT    NOT NULL REFERENCES raw_nodes (node_id),
    position INTEGER NOT NULL,
    sha256   TEXT    NOT NULL,
    mime     TEXT    NOT NULL,
    width    INTEGER NOT NULL,
    height   INTEGER NOT NULL,
    nbytes   INTEGER NOT NULL,
    redacted INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (node_id, position)
);
CREATE INDEX IF NOT EXISTS node_images_by_blob ON node_images (sha256);

CREATE TABLE IF NOT EXISTS forget_log (
    id        INTEGER PRIMARY KEY AUTOINCREMENT,
    namespace TEXT NOT NULL,
    node_id   TEXT NOT NULL,
    reason    TEXT NOT NULL,
    at        TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS forget_log_by_namespace ON forget_log (namespace);

CREATE TABLE IF NOT EXISTS index_snapshots (
    namespace           TEXT    NOT NULL,
    method              TEXT    NOT NULL,
    version             INTEGER NOT NULL,      -- = seq of the last session folded in
    session_id          TEXT    NOT NULL,
    created_at          TEXT    NOT NULL,
    state               BLOB    NOT NULL,      -- zlib(JSON): the state (full) or a patch to base's (delta)
    state_sha256        TEXT    NOT NULL,      -- encoding 2: of the full state's canonical JSON
    pointers            BLOB    NOT NULL,      -- zlib(JSON): sorted Raw-Node ids (full), {"+": [...], "-": [...]}
    n_pointers          INTEGER NOT NULL,      --   vs base's (delta); n_pointers counts the full set
    complete_provenance INTEGER NOT NULL,      -- 1: the method promises pointers == all nodes ingested
    kind                TEXT    NOT NULL DEFAULT 'full',   -- 'full' | 'delta'
    base_version        INTEGER,               -- delta: the version it patches (always an earlier one)
    encoding            INTEGER NOT NULL DEFAULT 1,        -- 1: v1/v2 row, 2: v3 row (see above)
    PRIMARY KEY (namespace, method, version)
);

CREATE TABLE IF NOT EXISTS maintenance_log (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    namespace  TEXT    NOT NULL,
    method     TEXT    NOT NULL,
    version    INTEGER NOT NULL,
    session_id TEXT    NOT NULL,
    action     TEXT    NOT NULL,
    detail     TEXT    NOT NULL,               -- JSON
    at         TEXT    NOT NULL
);
CREATE INDEX IF NOT EXISTS maintenance_by_version ON maintenance_log (namespace, method, version);

CREATE TABLE IF NOT EXISTS vector_cache (
    model       TEXT NOT NULL,
    text_sha256 TEXT NOT NULL,
    dim         INTEGER NOT NULL,
    vector      BLOB NOT NULL,                 -- float32 little-endian
    PRIMARY KEY (model, text_sha256)
);

CREATE TABLE IF NOT EXISTS extraction_cache (
    backend      TEXT NOT NULL,                -- extractor name
    version      TEXT NOT NULL,                -- prompt / weights version
    kind         TEXT NOT NULL,                -- caption, visual_anchors, ground, summarize, ...
    input_sha256 TEXT NOT NULL,                -- of the input bytes (+ arguments)
    output       TEXT NOT NULL,                -- JSON
    PRIMARY KEY (backend, version, kind, input_sha256)
);

CREATE TABLE IF NOT EXISTS derived_records (
    namespace    TEXT    NOT NULL,
    node_id      TEXT    NOT NULL REFERENCES raw_nodes (node_id),
    position     INTEGER NOT NULL,              -- the source image's position in the node
    sha256       TEXT    NOT NULL,              -- of the source image (one of the node's node_images)
    backend      TEXT    NOT NULL,              -- extractor name
    version      TEXT    NOT NULL,              -- extractor version
    caption      TEXT    NOT NULL,
    anchors      TEXT    NOT NULL,              -- JSON list of VisualAnchor dicts
    crop_sha256  TEXT,                          -- grounded crop (a derived_blobs row), NULL when none
    crop_box     TEXT,                          -- JSON [x0, y0, x1, y1] in source pixels
    crop_phrase  TEXT,                          -- what the crop shows (chosen from the turn's own text)
    redacted     INTEGER NOT NULL DEFAULT 0,
    created_at   TEXT    NOT NULL,
    PRIMARY KEY (backend, version, node_id, sha256)
);
CREATE INDEX IF NOT EXISTS derived_records_by_node ON derived_records (node_id, position);
CREATE INDEX IF NOT EXISTS derived_records_by_crop ON derived_records (crop_sha256);

CREATE TABLE IF NOT EXISTS derived_blobs (
    sha256        TEXT    NOT NULL,             -- of the crop's bytes (its name in blobs/)
    node_id       TEXT    NOT NULL REFERENCES raw_nodes (node_id),
    source_sha256 TEXT    NOT NULL,             -- the original image it was cut from
    namespace     TEXT    NOT NULL,
    kind          TEXT    NOT NULL,             -- 'grounded_crop'
    box           TEXT    NOT NULL,             -- JSON [x0, y0, x1, y1] in source pixels
    backend       TEXT    NOT NULL,
    version       TEXT    NOT NULL,
    mime          TEXT    NOT NULL,
    width         INTEGER NOT NULL,
    height        INTEGER NOT NULL,
    nbytes        INTEGER NOT NULL,
    redacted      INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (sha256, node_id, source_sha256)
);
CREATE INDEX IF NOT EXISTS derived_blobs_by_node ON derived_blobs (node_id);

CREATE TRIGGER IF NOT EXISTS sessions_no_delete BEFORE DELETE ON sessions
BEGIN SELECT RAISE(ABORT, 'sessions are append-only: DELETE refused'); END;
CREATE TRIGGER IF NOT EXISTS sessions_no_update BEFORE UPDATE ON sessions
BEGIN SELECT RAISE(ABORT, 'sessions are append-only: UPDATE refused'); END;

CREATE TRIGGER IF NOT EXISTS raw_nodes_no_delete BEFORE DELETE ON raw_nodes
BEGIN SELECT RAISE(ABORT, 'raw_nodes are append-only: DELETE refused (use forget() to redact)'); END;
CREATE TRIGGER IF NOT EXISTS raw_nodes_no_update BEFORE UPDATE ON raw_nodes
WHEN NOT (OLD.redacted = 0 AND NEW.redacted = 1 AND NEW.text = ''
          AND NEW.node_id = OLD.node_id AND NEW.namespace = OLD.namespace
          AND NEW.session_id = OLD.session_id AND NEW.turn_index = OLD.turn_index
          AND NEW.role = OLD.role AND NEW.time = OLD.time
          AND NEW.content_sha256 = OLD.content_sha256 AND NEW.created_at = OLD.created_at
          AND EXISTS (SELECT 1 FROM forget_log f WHERE f.node_id = OLD.node_id))
BEGIN SELECT RAISE(ABORT, 'raw_nodes are append-only: UPDATE refused (only a logged forget() may redact)'); END;

CREATE TRIGGER IF NOT EXISTS node_images_no_delete BEFORE DELETE ON node_images
BEGIN SELECT RAISE(ABORT, 'node_images are append-only: DELETE refused (use forget() to redact)'); END;
CREATE TRIGGER IF NOT EXISTS node_images_no_update BEFORE UPDATE ON node_images
WHEN NOT (OLD.redacted = 0 AND NEW.redacted = 1
          AND NEW.node_id = OLD.node_id AND NEW.position = OLD.position AND NEW.sha256 = OLD.sha256
          AND NEW.mime = OLD.mime AND NEW.width = OLD.width AND NEW.height = OLD.height
          AND NEW.nbytes = OLD.nbytes
          AND EXISTS (SELECT 1 FROM forget_log f WHERE f.node_id = OLD.node_id))
BEGIN SELECT RAISE(ABORT, 'node_images are append-only: UPDATE refused (only a logged forget() may redact)'); END;

CREATE TRIGGER IF NOT EXISTS derived_records_no_delete BEFORE DELETE ON derived_records
BEGIN SELECT RAISE(ABORT, 'derived_records are append-only: DELETE refused (use forget() to redact)'); END;
CREATE TRIGGER IF NOT EXISTS derived_records_no_update BEFORE UPDATE ON derived_records
WHEN NOT (OLD.redacted = 0 AND NEW.redacted = 1 AND NEW.caption = '' AND NEW.anchors = '[]'
          AND NEW.crop_phrase IS NULL
          AND NEW.namespace = OLD.namespace AND NEW.node_id = OLD.node_id AND NEW.position = OLD.position
          AND NEW.sha256 = OLD.sha256 AND NEW.backend = OLD.backend AND NEW.version = OLD.version
          AND NEW.crop_sha256 IS OLD.crop_sha256 AND NEW.crop_box IS OLD.crop_box
          AND NEW.created_at = OLD.created_at
          AND EXISTS (SELECT 1 FROM forget_log f WHERE f.node_id = OLD.node_id))
BEGIN SELECT RAISE(ABORT, 'derived_records are append-only: UPDATE refused (only a logged forget() may redact)'); END;

CREATE TRIGGER IF NOT EXISTS derived_blobs_no_delete BEFORE DELETE ON derived_blobs
BEGIN SELECT RAISE(ABORT, 'derived_blobs are append-only: DELETE refused (use forget() to redact)'); END;
CREATE TRIGGER IF NOT EXISTS derived_blobs_no_update BEFORE UPDATE ON derived_blobs
WHEN NOT (OLD.redacted = 0 AND NEW.redacted = 1
          AND NEW.sha256 = OLD.sha256 AND NEW.node_id = OLD.node_id AND NEW.source_sha256 = OLD.source_sha256
          AND NEW.namespace = OLD.namespace AND NEW.kind = OLD.kind AND NEW.box = OLD.box
          AND NEW.backend = OLD.backend AND NEW.version = OLD.version AND NEW.mime = OLD.mime
          AND NEW.width = OLD.width AND NEW.height = OLD.height AND NEW.nbytes = OLD.nbytes
          AND EXISTS (SELECT 1 FROM forget_log f WHERE f.node_id = OLD.node_id))
BEGIN SELECT RAISE(ABORT, 'derived_blobs are append-only: UPDATE refused (only a logged forget() may redact)'); END;

CREATE TRIGGER IF NOT EXISTS forget_log_no_delete BEFORE DELETE ON forget_log
BEGIN SELECT RAISE(ABORT, 'forget_log is an audit log: DELETE refused'); END;
CREATE TRIGGER IF NOT EXISTS forget_log_no_update BEFORE UPDATE ON forget_log
BEGIN SELECT RAISE(ABORT, 'forget_log is an audit log: UPDATE refused'); END;
"""


#: Cold-Store text search, SQLite (v4): FTS5 over node text; ``ns`` holds ``search_token(namespace)`` so a query is
#: restricted to one namespace by its postings (weight 0 in ``bm25``), ``node_id`` is stored but not indexed
SQLITE_SEARCH = ("CREATE VIRTUAL TABLE IF NOT EXISTS node_search USING fts5(body, ns, node_id UNINDEXED, "
                 "tokenize='porter unicode61')")
#: Cold-Store text search, PostgreSQL (v4): an English ``tsvector`` per node, GIN-indexed, ranked by ``ts_rank``
PG_SEARCH = (
    'CREATE TABLE IF NOT EXISTS node_search (node_id TEXT COLLATE "C" PRIMARY KEY REFERENCES raw_nodes (node_id), '
    'namespace TEXT COLLATE "C" NOT NULL, tsv tsvector NOT NULL)',
    "CREATE INDEX IF NOT EXISTS node_search_tsv ON node_search USING GIN (tsv)",
    "CREATE INDEX IF NOT EXISTS node_search_ns ON node_search (namespace)",
)


def search_token(namespace: str) -> str:
    """The opaque word a namespace's rows carry in ``node_search.ns`` (a namespace may hold ``/ : @``, which the
    tokenizer would split)."""
    import hashlib

    return "ns" + hashlib.sha256(namespace.encode()).hexdigest()[:20]


def postgres_schema() -> list[str]:
    """The same tables in PostgreSQL: BIGINT for INTEGER (SQLite's are 64-bit), BYTEA for BLOB, identity ids,
    ``COLLATE "C"`` text (byte order, as SQLite sorts), and the append-only rules as PL/pgSQL triggers.

    PostgreSQL trigger conditions cannot hold subqueries, so each redaction rule is a function; TRUNCATE skips
    row triggers, so every protected table also refuses TRUNCATE."""
    tables = []
    for stmt in _sqlite_statements(SCHEMA):
        if stmt.startswith("CREATE TRIGGER"):
            continue
        s = stmt.replace("INTEGER PRIMARY KEY AUTOINCREMENT", "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY")
        s = re.sub(r"\bINTEGER\b", "BIGINT", s)
        s = re.sub(r"\bBLOB\b", "BYTEA", s)
        s = re.sub(r"\bTEXT\b", 'TEXT COLLATE "C"', s)
        s = re.sub(r"--[^\n]*", "", s)
        tables.append(s)
    return tables + list(PG_SEARCH) + [_PG_REFUSE] + [_pg_guard(t, cond, msg) for t, cond, msg in _PG_GUARDS] + _pg_refusals()


_PG_REFUSE = """CREATE OR REPLACE FUNCTION c3m_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION '%', TG_ARGV[0] USING ERRCODE = 'integrity_constraint_violation'; END $$"""

_FORGOTTEN = "EXISTS (SELECT 1 FROM forget_log f WHERE f.node_id = OLD.node_id)"
_PG_GUARDS = (
    ("raw_nodes", "OLD.redacted = 0 AND NEW.redacted = 1 AND NEW.text = '' AND NEW.node_id = OLD.node_id"
     " AND NEW.namespace = OLD.namespace AND NEW.session_id = OLD.session_id AND NEW.turn_index = OLD.turn_index"
     " AND NEW.role = OLD.role AND NEW.time = OLD.time AND NEW.content_sha256 = OLD.content_sha256"
     " AND NEW.created_at = OLD.created_at AND " + _FORGOTTEN,
     "raw_nodes are append-only: UPDATE refused (only a logged forget() may redact)"),
    ("node_images", "OLD.redacted = 0 AND NEW.redacted = 1 AND NEW.node_id = OLD.node_id"
     " AND NEW.position = OLD.position AND NEW.sha256 = OLD.sha256 AND NEW.mime = OLD.mime"
     " AND NEW.width = OLD.width AND NEW.height = OLD.height AND NEW.nbytes = OLD.nbytes AND " + _FORGOTTEN,
     "node_images are append-only: UPDATE refused (only a logged forget() may redact)"),
    ("derived_records", "OLD.redacted = 0 AND NEW.redacted = 1 AND NEW.caption = '' AND NEW.anchors = '[]'"
     " AND NEW.crop_phrase IS NULL AND NEW.namespace = OLD.namespace AND NEW.node_id = OLD.node_id"
     " AND NEW.position = OLD.position AND NEW.sha256 = OLD.sha256 AND NEW.backend = OLD.backend"
     " AND NEW.version = OLD.version AND NEW.crop_sha256 IS NOT DISTINCT FROM OLD.crop_sha256"
     " AND NEW.crop_box IS NOT DISTINCT FROM OLD.crop_box AND NEW.created_at = OLD.created_at AND " + _FORGOTTEN,
     "derived_records are append-only: UPDATE refused (only a logged forget() may redact)"),
    ("derived_blobs", "OLD.redacted = 0 AND NEW.redacted = 1 AND NEW.sha256 = OLD.sha256"
     " AND NEW.node_id = OLD.node_id AND NEW.source_sha256 = OLD.source_sha256 AND NEW.namespace = OLD.namespace"
     " AND NEW.kind = OLD.kind AND NEW.box = OLD.box AND NEW.backend = OLD.backend AND NEW.version = OLD.version"
     " AND NEW.mime = OLD.mime AND NEW.width = OLD.width AND NEW.height = OLD.height AND NEW.nbytes = OLD.nbytes"
     " AND " + _FORGOTTEN,
     "derived_blobs are append-only: UPDATE refused (only a logged forget() may redact)"),
)


def _pg_guard(table: str, allowed: str, message: str) -> str:
    return (f"CREATE OR REPLACE FUNCTION c3m_guard_{table}() RETURNS trigger LANGUAGE plpgsql AS $$\n"
            f"BEGIN IF {allowed} THEN RETURN NEW; END IF;\n"
            f"RAISE EXCEPTION '{message}' USING ERRCODE = 'integrity_constraint_violation'; END $$")


def _pg_refusals() -> list[str]:
    """DELETE/TRUNCATE refused on every append-only table, UPDATE refused or guarded (CREATE OR REPLACE TRIGGER:
    PostgreSQL 14+, so a reopen is idempotent)."""
    out = []
    deletes = {"sessions": "sessions are append-only", "raw_nodes": "raw_nodes are append-only",
               "node_images": "node_images are append-only", "derived_records": "derived_records are append-only",
               "derived_blobs": "derived_blobs are append-only", "forget_log": "forget_log is an audit log"}
    for table, what in deletes.items():
        hint = "" if table in ("sessions", "forget_log") else " (use forget() to redact)"
        out.append(f"CREATE OR REPLACE TRIGGER {table}_no_delete BEFORE DELETE OR TRUNCATE ON {table} FOR EACH "
                   f"STATEMENT EXECUTE FUNCTION c3m_refuse('{what}: DELETE refused{hint}')")
    for table in ("sessions", "forget_log"):
        out.append(f"CREATE OR REPLACE TRIGGER {table}_no_update BEFORE UPDATE ON {table} FOR EACH ROW "
                   f"EXECUTE FUNCTION c3m_refuse('{deletes[table]}: UPDATE refused')")
    for table, _, _ in _PG_GUARDS:
        out.append(f"CREATE OR REPLACE TRIGGER {table}_no_update BEFORE UPDATE ON {table} FOR EACH ROW "
                   f"EXECUTE FUNCTION c3m_guard_{table}()")
    return out


#: what a least-privilege application role may do (``ColdStore.grant``, docs/store.md): no DELETE on anything
#: append-only, UPDATE only where forget() redacts; derived data (snapshots, caches, logs of maintenance) is its own.
PG_GRANTS = (
    "GRANT USAGE ON SCHEMA {schema} TO {role}",
    "GRANT SELECT, INSERT ON meta, sessions, forget_log, maintenance_log TO {role}",
    "GRANT SELECT, INSERT, UPDATE ON raw_nodes, node_images, derived_records, derived_blobs TO {role}",
    "GRANT SELECT, INSERT, UPDATE, DELETE ON index_snapshots, vector_cache, extraction_cache TO {role}",
    "GRANT SELECT, INSERT, DELETE ON node_search TO {role}",  # forget deletes a redacted node's searchable copy
    "GRANT USAGE ON ALL SEQUENCES IN SCHEMA {schema} TO {role}",
)


def _sqlite_statements(script: str) -> list[str]:
    import sqlite3

    statements, buf = [], ""
    for line in script.splitlines(keepends=True):
        buf += line
        if sqlite3.complete_statement(buf):
            statements.append(buf.strip().rstrip(";"))
            buf = ""
    return statements
