"""The Cold Store's database connection: SQLite (one folder) or PostgreSQL (a server, for many writers).

``ColdStore`` speaks one SQL dialect — SQLite's ``?`` placeholders and standard ``INSERT ... ON CONFLICT`` — and
these two adapters make it run on either engine. They differ in exactly three places, kept here:

* **writes serialise** per store in SQLite (``BEGIN IMMEDIATE`` takes the one write lock) and per *namespace* in
  PostgreSQL (a transaction-scoped advisory lock, taken by ``lock_namespace``), so writers of different users run
  in parallel on a server while each user's sessions still commit in one order;
* **rows** are ``sqlite3.Row`` or ``Row`` below, both readable as ``row[0]`` and ``row["column"]``;
* **lost connections**: a PostgreSQL server can go away; outside a transaction the adapter reconnects (waiting up
  to ``reconnect_s``), inside one it raises ``StoreError`` saying nothing of that transaction was committed.
"""
from __future__ import annotations

import hashlib
import re
import sqlite3
import time
from pathlib import Path
from typing import Any, Iterable, Sequence
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ..errors import StoreBusy, StoreError

POSTGRES_SCHEMES = ("postgresql://", "postgres://")
_GLOBAL_LOCK = 0x63336D  # "c3m": schema creation and upgrades


def is_postgres_url(location: Any) -> bool:
    return isinstance(location, str) and location.startswith(POSTGRES_SCHEMES)


def redact_url(url: str) -> str:
    """The URL without its password, for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def split_blobs_param(url: str) -> tuple[str, str | None]:
    """(URL for libpq, the ``blobs`` query parameter or None): libpq refuses parameters it does not know."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    blobs = [v for k, v in query if k == "blobs"]
    rest = [(k, v) for k, v in query if k != "blobs"]
    return urlunsplit(parts._replace(query=urlencode(rest))), (blobs[-1] if blobs else None)


class SqliteDB:
    """One SQLite connection in autocommit mode; transactions are explicit."""

    backend = "sqlite"

    def __init__(self, path: Path, busy_timeout_s: float):
        self.path, self.busy_timeout_s = path, busy_timeout_s
        self.conn = sqlite3.connect(path, timeout=busy_timeout_s, isolation_level=None)
        self.conn.row_factory = sqlite3.Row
        self.conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")

    def execute(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        try:
            return self.conn.execute(sql, params)
        except sqlite3.OperationalError as exc:
            raise self._clear(exc) from None

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        try:
            self.conn.executemany(sql, rows)
        except sqlite3.OperationalError as exc:
            raise self._clear(exc) from None

    def _clear(self, exc: sqlite3.OperationalError) -> BaseException:
        """The engine's conditions a caller can act on, as StoreError with the fix; anything else unchanged."""
        text = str(exc)
        if "locked" in text or "busy" in text:
            return StoreBusy(f"store {self.path.parent}: another writer held the write lock for over "
                              f"{self.busy_timeout_s:g} s ({text})", fix="retry, or raise busy_timeout_s")
        if "disk is full" in text or "disk I/O error" in text:
            return StoreError(f"store {self.path.parent}: {text}; the transaction was rolled back and nothing of "
                              "it was committed", fix="free disk space (or move the store), then retry")
        return exc

    def begin(self) -> None:
        self.execute("BEGIN IMMEDIATE")  # the write lock from the start: no upgrade deadlocks

    def lock_namespace(self, namespace: str) -> None:
        """Nothing to do: BEGIN IMMEDIATE already holds the store's one write lock."""

    def commit(self) -> None:
        self.execute("COMMIT")

    def rollback(self) -> None:
        if self.conn.in_transaction:  # SQLite may already have rolled back (disk full, I/O error)
            self.conn.execute("ROLLBACK")

    def columns(self, table: str) -> set[str]:
        return {r[1] for r in self.conn.execute(f"PRAGMA table_info({table})")}

    def close(self) -> None:
        self.conn.close()


class Row(tuple):
    """A PostgreSQL result row readable like ``sqlite3.Row``: by position, by column name, and as ``dict(row)``."""

    __slots__ = ()
    _index: dict[str, int] = {}

    def __getitem__(self, key):  # type: ignore[override]
        if isinstance(key, str):
            return tuple.__getitem__(self, self._index[key])
        return tuple.__getitem__(self, key)

    def keys(self) -> list[str]:
        return list(self._index)


_ROW_CLASSES: dict[tuple[str, ...], type] = {}


def _row_factory(cursor):
    names = tuple(c.name for c in cursor.description) if cursor.description else ()
    cls = _ROW_CLASSES.get(names)
    if cls is None:
        cls = _ROW_CLASSES[names] = type("Row", (Row,), {"__slots__": (),
                                                         "_index": {n: i for i, n in enumerate(names)}})
    return cls


class PostgresDB:
    """One psycopg 3 connection in autocommit mode; transactions are explicit (``begin``/``commit``)."""

    backend = "postgresql"

    def __init__(self, url: str, busy_timeout_s: float, *, reconnect_s: float = 30.0):
        try:
            import psycopg
        except ImportError:
            raise StoreError("a postgresql:// store needs psycopg 3, which is not installed",
                             fix='pip install "c3m[postgres]"  (or: pip install "psycopg[binary]")') from None
        self._psycopg = psycopg
        self.url, self.shown = url, redact_url(url)
        self.busy_timeout_s, self.reconnect_s = busy_timeout_s, reconnect_s
        self.in_txn = False
        self._sql: dict[str, str] = {}
        self.conn = self._connect(deadline=time.monotonic() + reconnect_s)

    def _connect(self, *, deadline: float):
        delay = 0.05
        while True:
            try:
                conn = self._psycopg.connect(self.url, autocommit=True, row_factory=_row_factory,
                                             connect_timeout=max(1, int(min(10, self.reconnect_s))))
                # a writer that waits longer than the busy timeout for a namespace's lock gets a clear error
                conn.execute(f"SET lock_timeout = {int(self.busy_timeout_s * 1000)}")
                return conn
            except self._psycopg.OperationalError as exc:
                if time.monotonic() > deadline:
                    raise StoreError(f"cannot connect to the PostgreSQL store {self.shown}: {_first_line(exc)}",
                                     fix="check that the server is running and the URL (host, port, database, "
                                         "user) is right") from None
                time.sleep(delay)
                delay = min(delay * 2, 1.0)

    def _translate(self, sql: str) -> str:
        out = self._sql.get(sql)
        if out is None:
            out = self._sql[sql] = sql.replace("%", "%%").replace("?", "%s")
        return out

    def execute(self, sql: str, params: Sequence[Any] = ()):
        return self._run(lambda c: c.execute(self._translate(sql), tuple(params)))

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        rows = [tuple(r) for r in rows]
        if rows:
            self._run(lambda c: c.cursor().executemany(self._translate(sql), rows))

    def _run(self, fn):
        psycopg = self._psycopg
        try:
            if self.conn.closed and not self.in_txn:
                self.conn = self._connect(deadline=time.monotonic() + self.reconnect_s)
            return fn(self.conn)
        except psycopg.errors.LockNotAvailable:
            raise StoreBusy(f"PostgreSQL store {self.shown}: waited over {self.busy_timeout_s:g} s for another "
                             "writer of this namespace", fix="retry, or raise busy_timeout_s") from None
        except psycopg.errors.DeadlockDetected:
            raise StoreError(f"PostgreSQL store {self.shown}: a deadlock with another writer aborted this "
                             "transaction; nothing of it was committed", fix="retry the call") from None
        except psycopg.OperationalError as exc:
            if not self.conn.closed and not self.conn.broken:
                raise
            if self.in_txn:
                raise StoreError(f"lost the connection to the PostgreSQL store {self.shown} mid-transaction "
                                 f"({_first_line(exc)}); nothing of that transaction was committed",
                                 fix="retry once the server is back (re-adding a session is idempotent)") from None
            self.conn = self._connect(deadline=time.monotonic() + self.reconnect_s)  # outside a transaction:
            return fn(self.conn)                                                      # reconnect, run it again

    def begin(self) -> None:
        self.execute("BEGIN ISOLATION LEVEL READ COMMITTED")  # each statement sees what the lock holder before
        self.in_txn = True                                    # us committed

    def lock_namespace(self, namespace: str) -> None:
        """Serialise this transaction with every other writer of ``namespace`` (released at commit/rollback)."""
        self.execute("SELECT pg_advisory_xact_lock(?)", (_lock_key(namespace),))

    def lock_global(self) -> None:
        self.execute("SELECT pg_advisory_xact_lock(?)", (_GLOBAL_LOCK,))

    def commit(self) -> None:
        try:
            self.execute("COMMIT")
        except StoreError as exc:
            raise StoreError(exc.message.replace("nothing of that transaction was committed",
                                                 "the commit's outcome is unknown"),
                             fix="reopen and check with `c3m inspect`, or add the session again (idempotent)") from None
        finally:
            self.in_txn = False

    def rollback(self) -> None:
        self.in_txn = False
        if self.conn.closed or self.conn.broken:
            return  # the server rolled it back when the connection went
        try:
            self.conn.execute("ROLLBACK")
        except self._psycopg.OperationalError:
            pass

    def columns(self, table: str) -> set[str]:
        rows = self.execute("SELECT column_name FROM information_schema.columns WHERE table_name=? AND"
                            " table_schema=current_schema()", (table,)).fetchall()
        return {r[0] for r in rows}

    def close(self) -> None:
        self.conn.close()


def _lock_key(namespace: str) -> int:
    return int.from_bytes(hashlib.sha256(namespace.encode("utf-8")).digest()[:8], "big", signed=True)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return re.split(r"\n", text, maxsplit=1)[0] if text else exc.__class__.__name__
