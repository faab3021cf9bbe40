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

Callers that hold a *device name* rather than arrays (c3m's ``MemoryConfig.device``) ask
:func:`placement` which array type to build, so their inputs land on the backend above: ``"cuda…"``
-> torch tensors on that device (Triton), ``"cpu"`` -> numpy arrays (the CPU kernels), except that a
Triton backend forced by environment variable under ``TRITON_INTERPRET=1`` gets torch CPU tensors (the
interpreter needs torch), so the CUDA code path can be run and tested without a GPU.

:func:`counts` / :func:`reset_counts`: how many calls each (op, backend) pair has executed in this
process (thread-safe), so a caller can check which kernels its workload really reached.
:func:`transfers`: how many host <-> device copies the ops made *inside* themselves, so a test can prove a
Triton call on device tensors never round-trips its data through the host.
"""
from __future__ import annotations

import logging
import os
import threading
from collections import Counter
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

log = logging.getLogger("c3m_kernels")

BACKENDS = ("triton", "cpu", "reference")
_logged: set = set()
_lock = threading.Lock()
_counts: Counter = Counter()
_transfers: Counter = Counter()
_count_lock = threading.Lock()
#: what :func:`record_transfer` counts (see :func:`transfers`)
TRANSFERS = ("download", "upload", "sync")


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


# -- dispatch counters ----------------------------------------------------------------------------
def record(op: str, backend: str) -> None:
    """Count one executed call of ``op`` on ``backend`` (each op's entry point calls this once per call,
    after the backend is resolved and the inputs validated, just before that backend runs)."""
    with _count_lock:
        _counts[(op, backend)] += 1


def counts() -> Dict[Tuple[str, str], int]:
    """``{(op, backend): calls}`` executed in this process since the last :func:`reset_counts` (a copy).

    ``op`` is ``candidate_topk``, ``anchor_scores``, ``build_anchor_graph`` or ``budget_solve``;
    ``backend`` is ``triton``, ``cpu`` or ``reference``. Calls that raise before a backend runs, and
    ``budget_solve`` calls with no items (nothing to solve), are not counted."""
    with _count_lock:
        return dict(_counts)


def reset_counts() -> None:
    """Zero every counter (calls and transfers)."""
    with _count_lock:
        _counts.clear()
        _transfers.clear()


def record_transfer(op: str, kind: str, n: int = 1) -> None:
    """Count ``n`` copies of ``kind`` (:data:`TRANSFERS`) made inside ``op``; the ops call it wherever they copy."""
    if kind not in TRANSFERS:
        raise ValueError(f"record_transfer: kind must be one of {TRANSFERS}, got {kind!r}")
    if n:
        with _count_lock:
            _transfers[(op, kind)] += n


def transfers() -> Dict[Tuple[str, str], int]:
    """``{(op, kind): copies}`` made inside the ops since the last :func:`reset_counts` (a copy).

    ``download``: a whole input tensor brought to host numpy (the CPU kernels need it; on the Triton path it is
    a round trip). ``upload``: a host array copied to the device (numpy inputs, or an index's CSR, cached per
    device). ``sync``: one small tensor of checks and sizes fetched so the host can raise a clear error or size
    a launch (a Triton call on device tensors makes one; a tensor-shaped result like ``nonzero`` is not counted).
    Counted on CPU tensors too (Triton's interpreter), where the copies are free but the code path is the
    CUDA one, so a regression shows without a GPU."""
    with _count_lock:
        return dict(_transfers)


# -- where a caller's arrays live -----------------------------------------------------------------
def is_cuda_device(device: Any) -> bool:
    """True for a CUDA device name (``"cuda"``, ``"cuda:1"``) or a torch CUDA device."""
    return str(device if device is not None else "cpu").startswith("cuda")


def forced_backend(op: Optional[str] = None) -> Optional[str]:
    """The backend the environment forces for ``op`` (``C3M_KERNELS_BACKEND_<OP>``, then
    ``C3M_KERNELS_BACKEND``), or None for ``auto``/unset. ``op=None`` reads the global variable only."""
    if op is None:
        val = os.environ.get("C3M_KERNELS_BACKEND", "").strip().lower()
        return val if val and val != "auto" else None
    val, _ = _env_choice(op)
    return val if val is not None and val != "auto" else None


class Placement:
    """Where a caller's kernel inputs live, and so which backend the ops pick for them (:func:`placement`).

    ``tensors`` False: numpy arrays, the ops' CPU kernels; :meth:`put` and :meth:`host` return numpy
    arrays unchanged (no copy, no torch import), so such callers compute exactly what they computed
    before this helper existed. ``tensors`` True: torch tensors on ``device``; :meth:`put` uploads a
    host array once, :meth:`host` brings an op's output back once (call it at the end of a stage, on
    the whole output, never per element)."""

    __slots__ = ("device", "tensors", "backend")

    def __init__(self, device: str, tensors: bool, backend: str):
        self.device, self.tensors, self.backend = device, tensors, backend

    def __repr__(self) -> str:
        return f"Placement(device={self.device!r}, tensors={self.tensors}, backend={self.backend!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Placement) and (self.device, self.tensors) == (other.device, other.tensors)

    def __hash__(self) -> int:
        return hash((self.device, self.tensors))

    def put(self, x, dtype=None):
        """``x`` as this placement's array type: a numpy array as is (``dtype`` ignored: the CPU path
        keeps the caller's array), or a torch tensor on ``device`` (``dtype``: a numpy dtype or a torch
        dtype; default: the array's own)."""
        if not self.tensors:
            return x
        import numpy as np
        import torch

        if torch.is_tensor(x):
            t = x
        else:
            a = np.asarray(x)
            if dtype is not None and not isinstance(dtype, torch.dtype):
                a = a.astype(dtype, copy=False)
            t = torch.from_numpy(np.ascontiguousarray(a))
        if isinstance(dtype, torch.dtype):
            return t.to(device=self.device, dtype=dtype)
        return t.to(self.device)

    def host(self, x):
        """An op's output (a tensor, a numpy array, or a tuple of them) as numpy, in one transfer each."""
        if isinstance(x, tuple):
            return tuple(self.host(v) for v in x)
        if type(x).__module__.startswith("torch"):
            return x.detach().cpu().numpy()
        return x


#: numpy arrays and the CPU kernels: ``placement("cpu")`` without a forced, interpreted Triton
HOST = Placement("cpu", False, "cpu")


def placement(device: Any = "cpu", op: Optional[str] = None) -> Placement:
    """THE rule for callers that hold a device name (c3m's ``MemoryConfig.device``): which arrays to hand ``op``.

    * a CUDA device (``"cuda"``, ``"cuda:N"``) -> torch tensors on it; the ops resolve to ``triton``
      (or their fallback chain: see :func:`resolve_backend`);
    * ``"cpu"`` (or None) -> numpy arrays; the ops resolve to their ``cpu`` kernels;
    * except: ``"cpu"`` while the environment forces ``triton`` for ``op`` (``C3M_KERNELS_BACKEND[_<OP>]``)
      and ``TRITON_INTERPRET=1`` -> torch CPU tensors, because Triton's interpreter runs on torch
      tensors only. This runs a workload's CUDA code path, Triton kernels included, on a machine with
      no GPU (the tests do).

    The choice depends on the device and the environment only, never on the data, so every stage of
    a workload agrees on it."""
    dev = str(device if device is not None else "cpu")
    if is_cuda_device(dev):
        return Placement(dev, True, "triton")
    if forced_backend(op) == "triton" and os.environ.get("TRITON_INTERPRET", "0") == "1":
        return Placement("cpu", True, "triton")
    return HOST
