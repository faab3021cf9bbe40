"""Optional-dependency shims shared by every op.

Why this module exists: ``import c3m_kernels`` must work on a machine that has only numpy (the core
``c3m`` package never needs torch, numba or triton). Everything heavy is imported lazily, through the
small helpers below, and each helper reports *why* an optional piece is unavailable so the dispatcher
can log it once.
"""
from __future__ import annotations

import functools
import importlib
import os
from typing import Any, Callable, Optional, Tuple


@functools.lru_cache(maxsize=None)
def try_import(name: str) -> Tuple[Optional[Any], str]:
    """Import ``name``; return ``(module, "")`` or ``(None, reason)``. Cached: imports run once."""
    try:
        return importlib.import_module(name), ""
    except Exception as exc:  # ImportError, but also triton's "0 active drivers" RuntimeError
        return None, f"import {name} failed: {type(exc).__name__}: {exc}"


def numba_disabled() -> bool:
    """True when ``C3M_KERNELS_DISABLE_NUMBA=1`` asks for the pure-Python fallbacks (debugging)."""
    return os.environ.get("C3M_KERNELS_DISABLE_NUMBA", "0") not in ("", "0", "false", "False")


def twin(fn: Callable, name: str) -> Callable:
    """A copy of ``fn`` under another name, to compile the same kernel body twice (parallel and serial):
    numba's on-disk cache is keyed by the function's name and line, not its compile options, so one name
    compiled two ways would share (and overwrite) one cache entry."""
    import types

    copy = types.FunctionType(fn.__code__.replace(co_name=name), fn.__globals__, name, fn.__defaults__,
                              fn.__closure__)
    copy.__qualname__ = name
    return copy


def njit(*args: Any, **kwargs: Any) -> Callable:
    """``numba.njit`` with ``cache=True`` by default, or the identity decorator without numba.

    The identity fallback keeps every CPU kernel runnable (slowly) with numpy alone, so a missing
    numba degrades speed, never correctness. ``prange`` is likewise replaced by ``range``.
    Compilation is lazy: nothing is compiled until the first call of a kernel.
    """
    kwargs.setdefault("cache", True)
    numba, _ = (None, "") if numba_disabled() else try_import("numba")

    def wrap(fn: Callable) -> Callable:
        if numba is None:
            return fn
        return numba.njit(**kwargs)(fn)

    if len(args) == 1 and callable(args[0]):
        return wrap(args[0])
    return wrap


def have_numba() -> Tuple[bool, str]:
    """``(available, reason_if_not)`` for numba."""
    if numba_disabled():
        return False, "C3M_KERNELS_DISABLE_NUMBA is set"
    mod, why = try_import("numba")
    return mod is not None, why


def _prange_fallback(*args: int) -> range:
    return range(*args)


def get_prange() -> Callable:
    """``numba.prange`` when numba is usable, else ``range`` (same semantics, serial)."""
    ok, _ = have_numba()
    if ok:
        import numba

        return numba.prange
    return _prange_fallback


prange = get_prange()


def have_torch() -> Tuple[bool, str]:
    mod, why = try_import("torch")
    return mod is not None, why


def triton_usable(device_is_cuda: bool) -> Tuple[bool, str]:
    """Whether a Triton kernel can run on tensors of the given device kind, and why not.

    Triton runs on CUDA tensors, or on CPU tensors only when ``TRITON_INTERPRET=1`` was set before
    ``triton`` was first imported (the interpreter; slow, used by the CPU test-suite). Every launcher here
    takes torch tensors, so torch is required too.
    """
    interp = os.environ.get("TRITON_INTERPRET", "0") == "1"
    if not device_is_cuda and not interp:
        return False, ("tensors are on the CPU and TRITON_INTERPRET=1 is not set; "
                       "move the tensors to CUDA, or set TRITON_INTERPRET=1 before importing triton")
    mod, why = try_import("triton")
    if mod is None:
        return False, why + " (pip install 'triton>=3.0')"
    _, why_tl = try_import("triton.language")
    if why_tl:
        return False, why_tl
    if not have_torch()[0]:
        return False, "torch is not installed (the Triton launcher needs it)"
    return True, ""


def callable_package(module_name: str, fn: Callable) -> None:
    """Make the op's sub-package itself callable as its op.

    Why: the package exports each op lazily under the sub-package's own name (``c3m_kernels.candidate_topk``
    is both a function and a sub-package). Once any code imports the sub-package (``import
    c3m_kernels.candidate_topk``), Python binds the package attribute to the *module*, and a later
    ``from c3m_kernels import candidate_topk`` returns the module. Calling the module now calls the op, so
    both spellings work whatever was imported first.
    """
    import sys
    import types

    class _OpModule(types.ModuleType):
        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            return fn(*args, **kwargs)

    sys.modules[module_name].__class__ = _OpModule
