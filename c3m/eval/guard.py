"""The query-blindness tripwire of a method process: every way out of the process that could reach the data.

The harness runs each method in a process of its own (``c3m.eval.sandbox``) that never holds a question's
answer or evidence and is handed sessions one at a time. What it could still do is *go and read* them: the
dataset folder on disk (questions, answers, later sessions, hidden sidecars), the harness's output folder
(other methods' stores and results) or the parent process's memory. This module installs one audit hook
(PEP 578) for the whole life of that process, on every thread, that refuses:

- ``open`` (``open()``, ``io.open_code``, ``os.open``) of a guarded path, symlinks resolved; ``os.listdir`` /
  ``os.scandir`` of one; ``os.link`` / ``os.symlink`` / ``os.rename`` / ``shutil.copy*`` from one (a hard link
  made in the method's own store would otherwise open as an allowed path);
- ``/proc/<pid>`` of any other process (the parent's ``mem``, ``environ``, ``cmdline``);
- starting programs at all: ``subprocess.Popen``, ``os.system``, ``os.exec*``, ``os.posix_spawn``,
  ``os.spawn*``, ``os.fork*``, ``pty.spawn`` — a method has no reason to, and a child would not carry the hook;
- sockets other than to the model endpoints the run was configured with (``socket.connect``, ``sendto``);
- ``ctypes`` reaching libc's file and process calls (``dlopen`` of the main program or libc, ``dlsym`` of
  ``open``/``system``/``exec*``/``fork``/``syscall``/…), which would bypass the hook.

The method's own store folder is allowed even inside a guarded folder (``--out`` inside the dataset folder is
a natural layout: the store's temporary blob files must open). A violation raises ``QueryBlindnessViolation``
inside the method and is also kept by the tripwire (a method that catches it is still reported); the process
reports it and the run fails naming the path.

What it is not: a sandbox against code written to defeat Python itself (the hook lives in the same interpreter
as the method). That is why it is the second line: the first is that the gold is not in the process at all.
"""
from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Iterable

from ..errors import C3MError


class QueryBlindnessViolation(C3MError):
    """A memory method tried to read the dataset (questions, answers, future sessions) or leave its process."""


_SPAWN_EVENTS = frozenset({"subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
                           "os.forkpty", "pty.spawn", "os.startfile"})
_PATH_EVENTS = frozenset({"open", "os.listdir", "os.scandir", "os.link", "os.symlink", "os.rename",
                          "shutil.copyfile", "shutil.copymode", "shutil.copystat", "shutil.copytree",
                          "os.truncate", "os.remove", "os.rmdir", "shutil.rmtree", "os.chmod"})
_LIBC_SYMBOLS = re.compile(r"^_*(open|open64|openat|openat2|fopen|fopen64|freopen|creat|creat64|system|popen|"
                           r"exec\w*|posix_spawn\w*|fork|vfork|clone\w*|syscall|dlopen|dlmopen|socket|connect|"
                           r"name_to_handle_at|open_by_handle_at|process_vm_readv|ptrace)$")
_PROC_PID = re.compile(r"^/proc/(\d+)(/|$)")


class Tripwire:
    """The audit hook's state: guarded folders, the one allowed folder inside them, allowed socket peers."""

    def __init__(self, guarded: Iterable[str | Path], allowed: Iterable[str | Path] = (),
                 peers: Iterable[tuple[str, int]] = ()):
        self.guarded = tuple(Path(p).resolve() for p in guarded if p is not None)
        self.allowed = tuple(Path(p).resolve() for p in allowed if p is not None)
        self.peers = frozenset(peers)
        self.pid = os.getpid()
        self.phase = "write"  # named in the message: "the write path opened ..." / "the read path opened ..."
        #: every refusal, kept even when the method catches the exception: the process reports the first one
        self.tripped: list[QueryBlindnessViolation] = []

    def _refuse(self, what: str, fix: str) -> None:
        exc = QueryBlindnessViolation(f"the {self.phase} path {what} during replay; methods may only see the "
                                      f"sessions they are handed and the questions they are asked", fix=fix)
        self.tripped.append(exc)
        raise exc

    def _guarded(self, raw) -> Path | None:
        if isinstance(raw, int) or raw is None:
            return None
        try:
            text = os.fsdecode(raw)
        except TypeError:
            return None
        m = _PROC_PID.match(os.path.abspath(text))
        if m and int(m.group(1)) != self.pid:
            return Path(text)
        try:
            target = Path(text).resolve()
        except (OSError, ValueError, RuntimeError):
            return None
        if any(target == a or a in target.parents for a in self.allowed):
            return None
        if any(target == g or g in target.parents for g in self.guarded):
            return target
        return None

    def __call__(self, event: str, args: tuple) -> None:
        if event in _PATH_EVENTS:
            for raw in args[:2] if event in ("os.link", "os.symlink", "os.rename", "shutil.copyfile") else args[:1]:
                hit = self._guarded(raw)
                if hit is not None:
                    self._refuse(f"opened {hit}" if event == "open" else f"touched {hit} ({event})",
                                 "build the index from observe()'s Raw Nodes only (no dataset, question or "
                                 "answer access)")
        elif event in _SPAWN_EVENTS or event.startswith("os.spawn") or event.startswith("os.exec"):
            self._refuse(f"started a program ({event})", "do the work in the method's own process")
        elif event in ("socket.connect", "socket.sendto", "socket.sendmsg"):
            addr = args[1] if len(args) > 1 else None
            if isinstance(addr, tuple) and len(addr) >= 2 and (str(addr[0]), int(addr[1])) in self.peers:
                return
            if isinstance(addr, (str, bytes)):  # AF_UNIX: only paths outside the guarded folders
                if self._guarded(addr) is None:
                    return
            self._refuse(f"opened a connection to {addr!r}",
                         "reach models only through the configured endpoint (C3M_API_BASE_URL)")
        elif event == "ctypes.dlopen":
            name = args[0] if args else None
            if name is None or re.search(r"(^|/)lib(c|pthread|dl)\b", os.fsdecode(name) if name else ""):
                self._refuse(f"loaded the C library through ctypes ({name!r})", "use Python's own file access")
        elif event == "ctypes.dlsym":
            name = args[1] if len(args) > 1 else None
            if isinstance(name, (str, bytes)) and _LIBC_SYMBOLS.match(os.fsdecode(name)):
                self._refuse(f"looked up {os.fsdecode(name)!r} through ctypes", "use Python's own file access")


_ACTIVE: list[Tripwire] = []


def arm(wire: Tripwire) -> Tripwire:
    """Install ``wire`` for the rest of this process's life (audit hooks cannot be removed). One per process."""
    if _ACTIVE:
        raise RuntimeError("a tripwire is already armed in this process")
    _ACTIVE.append(wire)
    sys.addaudithook(wire)
    return wire


def api_peers() -> set[tuple[str, int]]:
    """(address, port) pairs a method process may connect to: the configured OpenAI-compatible endpoint's."""
    import socket
    from urllib.parse import urlsplit

    from ..models.api import BASE_URL_ENV  # the variables the api backend itself reads

    out: set[tuple[str, int]] = set()
    for var in BASE_URL_ENV:
        url = os.environ.get(var)
        if not url:
            continue
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            for info in socket.getaddrinfo(parts.hostname, port, proto=socket.IPPROTO_TCP):
                out.add((str(info[4][0]), int(info[4][1])))
        except (OSError, UnicodeError):
            continue
    return out
