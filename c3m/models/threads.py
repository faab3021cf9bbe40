"""One BLAS / torch thread per worker while c3m runs model work on its own threads (ingest prefetch).

When the ingest embeds two sessions on two worker threads and describes a third on another, each library's own
thread pool on top (OpenBLAS's, torch's OpenMP) only oversubscribes the cores: on the 2-core CPU, torch's spinning
OpenMP threads took a bfloat16 ingest from 18 to 26 s. ``one_thread_each()`` caps both at one thread for as long
as any holder is inside it and restores what it found when the last one leaves; ``serial()`` tells an embedder that
the cap is on, so it need not take its own per-call one-thread limit (``minilm``), a process-wide lock that would
serialise the workers.
"""
from __future__ import annotations

import contextlib
import sys
import threading

_lock = threading.Lock()
_depth = 0
_restore: list = []


def serial() -> bool:
    """True while ``one_thread_each`` holds BLAS and torch at one thread for the whole process."""
    return _depth > 0


@contextlib.contextmanager
def one_thread_each():
    global _depth
    with _lock:
        _depth += 1
        if _depth == 1:
            _restore[:] = _cap()
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                for undo in reversed(_restore):
                    undo()
                _restore.clear()


def _cap() -> list:
    """Cap the thread pools already loaded at one thread; return how to undo each cap."""
    undo = []
    try:
        from threadpoolctl import threadpool_limits

        limits = threadpool_limits(limits=1)  # BLAS and OpenMP libraries loaded now
        undo.append(limits.restore_original_limits)
    except ImportError:
        pass
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "get_num_threads"):
        before = torch.get_num_threads()
        torch.set_num_threads(1)
        undo.append(lambda: torch.set_num_threads(before))
    return undo


__all__ = ["one_thread_each", "serial"]
