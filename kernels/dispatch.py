"""Backend selection shared by the three ops.

Rules (the same for every op):

* ``backend=None`` / ``"auto"`` (or the env var set to ``auto``): CUDA tensors go to ``triton``,
  CPU tensors/arrays go to ``cpu``. When the automatic choice cannot run (triton missing, numba
  missing, ...) the next backend in the op's fallback chain is used and the reason is logged **once**
  per (op, reason) on the ``c3m_kernels`` logger, at WARNING level.
* An explicitly requested backend (argument or env var) that cannot run raises
  :class:`BackendUnavailable`, naming the backend, why, and how to fix it. No silent fallback.
* Environment variables: ``C3M_KERNELS_BACKEND`` (all ops) and ``C3M_KERNELS_BACKEND_<OP>``
  (e.g. ``C3M_KERNELS_BACKEND_CANDIDATE_TOPK``; wins over the global one). The ``backend=`` argument
  wins over both.
"""
from __future__ import annotations

import logging
import os
import threading
from typing import Callable, Dict, Optional, Sequence, Tuple

log = logging.getLogger("c3m_kernels")

BACKENDS = ("triton", "cpu", "reference")
_logged: set = set()
_lock = threading.Lock()


class BackendUnavailable(RuntimeError):
    """An explicitly requested backend cannot run here (the message says why and what to do)."""


def log_once(op: str, message: str) -> None:
    """Log ``message`` for ``op`` at WARNING level the first time only (per process)."""
    key = (op, message)
    with _lock:
        if key in _logged:
            return
        _logged.add(key)
    log.warning("c3m_kernels.%s: %s", op, message)


def _env_choice(op: str) -> Tuple[Optional[str], str]:
    specific = f"C3M_KERNELS_BACKEND_{op.upper()}"
    for var in (specific, "C3M_KERNELS_BACKEND"):
        val = os.environ.get(var, "").strip().lower()
        if val:
            return val, var
    return None, ""


def resolve_backend(
    op: str,
    requested: Optional[str],
    *,
    is_cuda: bool,
    checks: Dict[str, Callable[[], Tuple[bool, str]]],
    auto_chain_cuda: Sequence[str] = ("triton", "reference"),
    auto_chain_cpu: Sequence[str] = ("cpu", "reference"),
) -> str:
    """Pick the backend for one call of ``op``.

    ``checks[name]()`` returns ``(usable, reason_if_not)`` for this call's inputs. Returns the backend
    name; raises :class:`BackendUnavailable` for an explicit choice that is unusable and ``ValueError``
    for an unknown name.
    """
    source = "backend= argument"
    choice = requested.strip().lower() if isinstance(requested, str) else requested
    if choice is None or choice == "auto":
        env, var = _env_choice(op)
        if env is not None and env != "auto":
            choice, source = env, f"environment variable {var}"
        else:
            choice = "auto"
    if choice != "auto":
        if choice not in checks:
            raise ValueError(
                f"{op}: unknown backend {choice!r} (from {source}); "
                f"use one of {sorted(checks)} or 'auto'")
        ok, why = checks[choice]()
        if not ok:
            raise BackendUnavailable(
                f"{op}: backend {choice!r} was requested ({source}) but cannot run: {why}. "
                f"Fix that, or pass backend='auto' / unset the variable to let c3m_kernels choose.")
        return choice
    chain = auto_chain_cuda if is_cuda else auto_chain_cpu
    reasons = []
    for name in chain:
        if name not in checks:
            continue
        ok, why = checks[name]()
        if ok:
            if reasons:
                log_once(op, f"using backend {name!r} because " + "; ".join(reasons))
            return name
        reasons.append(f"{name!r} unavailable ({why})")
    raise BackendUnavailable(f"{op}: no backend can run these inputs: " + "; ".join(reasons))
