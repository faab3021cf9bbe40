"""API keys mapped to namespaces, hashed at rest.

A key is 32 random bytes (``c3m_`` + URL-safe base64), shown once when it is made. The key file keeps only
its SHA-256: a key has 256 bits of entropy, so a fast hash is as strong as a slow one here (the reason
passwords need scrypt is that people choose them). A key grants a list of namespace patterns: exact names,
or a prefix ending in ``*`` (``team/alice/*``); ``*`` alone is an admin key, which may also verify the whole
store and list every namespace.

The file (default ``<store>/api_keys.json``) is written atomically (temp file, fsync, rename), mode 0600.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import os
import secrets
import tempfile
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

from ..errors import InvalidInput
from ..store import check_namespace

KEY_FILE = "api_keys.json"
PREFIX = "c3m_"


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


@dataclass(frozen=True)
class KeyRecord:
    """One key as stored: never the key itself."""

    key_id: str
    sha256: str
    namespaces: tuple[str, ...]
    label: str = ""
    created_at: str = ""

    @property
    def admin(self) -> bool:
        return "*" in self.namespaces

    def allows(self, namespace: str) -> bool:
        return any(p == "*" or p == namespace or (p.endswith("*") and namespace.startswith(p[:-1]))
                   for p in self.namespaces)


def check_pattern(pattern: str) -> str:
    """A namespace or a prefix pattern (``team/*``) or ``*``."""
    if pattern == "*":
        return pattern
    if pattern.endswith("*"):
        check_namespace(pattern[:-1] or "x")
        if "*" in pattern[:-1]:
            raise InvalidInput("namespaces", f"{pattern!r}: '*' may only end a pattern", fix="e.g. 'team/*'")
        return pattern
    return check_namespace(pattern)


def _record(r: dict) -> KeyRecord:
    """One key file entry, its types checked (a TypeError is reported as a damaged key file)."""
    rec = KeyRecord(r["key_id"], r["sha256"], r["namespaces"], r.get("label", ""), r.get("created_at", ""))
    if not (all(isinstance(v, str) for v in (rec.key_id, rec.sha256, rec.label, rec.created_at))
            and isinstance(rec.namespaces, list) and rec.namespaces and all(isinstance(n, str) for n in rec.namespaces)):
        raise TypeError("a key record needs string key_id, sha256, label, created_at and a list of namespaces")
    return KeyRecord(rec.key_id, rec.sha256, tuple(rec.namespaces), rec.label, rec.created_at)


class KeyRing:
    """The keys a server accepts, loaded from (and saved to) one JSON file."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._load()

    def _stamp(self):
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return None
        return st.st_mtime_ns, st.st_size, st.st_ino

    def _load(self) -> None:
        seen, records = self._stamp(), []
        if seen is not None:
            try:
                data = json.loads(self.path.read_text(encoding="utf-8"))
                records = [_record(r) for r in data["keys"]]
            except (ValueError, KeyError, TypeError, RecursionError) as exc:
                raise InvalidInput("keys", f"{self.path} is not a c3m key file ({exc})",
                                   fix="recreate it with `c3m keys add`") from None
        self._seen, self.records = seen, records
        self._by_hash = {r.sha256: r for r in self.records}

    def __len__(self) -> int:
        return len(self.records)

    def add(self, namespaces: list[str], label: str = "") -> tuple[str, KeyRecord]:
        """Make a key for ``namespaces`` (patterns), save the file, and return (the key, its record)."""
        if not namespaces:
            raise InvalidInput("namespaces", "a key needs at least one namespace", fix="pass --namespace NS (or '*')")
        pats = tuple(check_pattern(p) for p in namespaces)
        key = PREFIX + base64.urlsafe_b64encode(secrets.token_bytes(32)).decode().rstrip("=")
        rec = KeyRecord("k-" + secrets.token_hex(4), hash_key(key), pats, label,
                        datetime.now(timezone.utc).isoformat(timespec="seconds"))
        self.records.append(rec)
        self._save()
        self._by_hash[rec.sha256] = rec
        return key, rec

    def revoke(self, key_id: str) -> bool:
        before = len(self.records)
        self.records = [r for r in self.records if r.key_id != key_id]
        self._by_hash = {r.sha256: r for r in self.records}
        if len(self.records) != before:
            self._save()
        return len(self.records) != before

    def lookup(self, key: str | None) -> KeyRecord | None:
        """The record of a presented key, or None (compared in constant time on the hash)."""
        if not key:
            return None
        if self._stamp() != self._seen:  # `c3m keys add/revoke` while the server runs: takes effect at once
            try:
                self._load()
            except InvalidInput as exc:  # a damaged file: keep serving the keys loaded before, say why
                self._seen = self._stamp()
                logging.getLogger(__name__).error("%s; still using the %d key(s) loaded before", exc,
                                                  len(self.records))
        digest = hash_key(key)
        rec = self._by_hash.get(digest)
        return rec if rec is not None and hmac.compare_digest(rec.sha256, digest) else None

    def _save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        body = json.dumps({"keys": [dict(asdict(r), namespaces=list(r.namespaces)) for r in self.records]},
                          indent=2).encode()
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".api_keys.")
        try:
            os.fchmod(fd, 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(body)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
            self._seen = self._stamp()
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
