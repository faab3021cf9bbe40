"""The Cold Store's index snapshots (``ColdStore``'s part ``SnapshotStore``): versioned full / delta rows, their
reconstruction and cache, and the maintenance log."""
from __future__ import annotations

import hashlib
import json
import sqlite3
import zlib
from dataclasses import dataclass
from typing import Any, Iterable

from ..errors import StoreError
from .delta import apply as apply_patch
from .delta import canonical
from .delta import diff as diff_states
from .records import Snapshot, _pack, now_iso


SNAPSHOT_CHECKPOINT_EVERY = 32  # a full snapshot at least every K versions: a load applies at most K - 1 deltas
SNAPSHOT_CACHE_SIZE = 4  # (namespace, method) states kept reconstructed, so a sync applies one new delta


class SnapshotStore:
    """Index snapshots and the maintenance log (a part of ``ColdStore``: ``self.conn``, ``self._snap_cache``)."""

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
