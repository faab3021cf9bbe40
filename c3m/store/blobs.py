"""Content-addressed blob folder for original images.

A blob lives at ``blobs/ab/cdef…`` (SHA-256 of its bytes). Writes go to a temp file in ``blobs/tmp``,
are fsynced, then renamed into place and the directory fsynced, so a crash leaves either no blob or a
complete one — never a torn file under a valid name. Blobs are written *before* the database
transaction that references them, so a crash can leave an unreferenced blob (harmless, reported by
``verify`` as an orphan) but never a reference to a missing blob.
"""
from __future__ import annotations

import errno
import hashlib
import os
import tempfile
from pathlib import Path
from typing import Iterator

from ..errors import StoreError

_HEX = set("0123456789abcdef")
#: errno values that mean "the disk (or the quota, or the file-size limit) is full"
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
VERIFY_FIX = "run `c3m verify` to list damaged or missing blobs and the sessions that use them; restore the files from a backup"


class BlobMissing(StoreError, FileNotFoundError):
    """A referenced blob file is not on disk (forgotten, deleted, or never copied with the store)."""


class BlobDamaged(StoreError):
    """A blob file's bytes no longer hash to its name (bit rot, truncation, an edit): never handed out."""


class StoreFull(StoreError, OSError):
    """The disk holding the store is full (ENOSPC, a quota, or RLIMIT_FSIZE): nothing partial was committed."""


def disk_full_fix(location: object) -> str:
    return (f"free space on the disk holding {location} (or move the store to a bigger one), then rerun the same "
            "command: sessions already stored are skipped, and nothing half-written was committed")


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class BlobStore:
    """Immutable blobs addressed by SHA-256; safe for many writer processes (rename is atomic)."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.tmp = self.root / "tmp"
        self.tmp.mkdir(parents=True, exist_ok=True)

    def path_for(self, sha256: str) -> Path:
        if len(sha256) != 64 or not set(sha256) <= _HEX:
            raise ValueError(f"not a lowercase SHA-256 hex digest: {sha256!r}")
        return self.root / sha256[:2] / sha256[2:]

    def put(self, data: bytes) -> str:
        """Store ``data`` (idempotent) and return its SHA-256."""
        digest = sha256_bytes(data)
        final = self.path_for(digest)
        if final.exists() and final.stat().st_size == len(data):
            return digest
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp_name = None
        try:
            fd, tmp_name = tempfile.mkstemp(dir=self.tmp, prefix=digest[:8] + ".")
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp_name, final)
        except BaseException as exc:
            if tmp_name is not None:
                try:
                    os.unlink(tmp_name)
                except FileNotFoundError:
                    pass
            if isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS:
                raise StoreFull(f"no space left to write blob {digest[:12]}… into {self.root} ({exc.strerror})",
                                fix=disk_full_fix(self.root)) from None
            raise
        _fsync_dir(final.parent)
        return digest

    def get(self, sha256: str) -> bytes:
        """The blob's bytes, checked against its name: a damaged file raises BlobDamaged, never wrong bytes."""
        path = self.path_for(sha256)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise BlobMissing(f"blob {sha256} is missing: no file {path}", fix=VERIFY_FIX) from None
        if sha256_bytes(data) != sha256:
            raise BlobDamaged(f"blob {sha256} is damaged: {path} ({len(data)} bytes) no longer hashes to its name",
                              fix=VERIFY_FIX)
        return data

    def exists(self, sha256: str) -> bool:
        return self.path_for(sha256).is_file()

    def check(self, sha256: str) -> str | None:
        """None when the blob is present and hashes to its name, else a short problem description."""
        path = self.path_for(sha256)
        if not path.is_file():
            return f"missing (no file {path})"
        h = hashlib.sha256()
        with path.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        if h.hexdigest() == sha256:
            return None
        return f"hash mismatch: {path} ({path.stat().st_size} bytes) hashes to {h.hexdigest()[:12]}…"

    def delete(self, sha256: str) -> bool:
        """Remove a blob (only ``forget`` calls this, after the redaction is committed)."""
        try:
            self.path_for(sha256).unlink()
            return True
        except FileNotFoundError:
            return False

    def iter_digests(self) -> Iterator[str]:
        for sub in sorted(self.root.iterdir()):
            if sub.is_dir() and len(sub.name) == 2 and set(sub.name) <= _HEX:
                for f in sorted(sub.iterdir()):
                    yield sub.name + f.name

    def leftover_temp_files(self) -> list[Path]:
        return sorted(self.tmp.iterdir())
