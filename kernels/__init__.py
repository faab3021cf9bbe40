"""c3m_kernels: GPU (Triton) and CPU kernels for c3m, each with a plain PyTorch reference.

Installed under the import name ``c3m_kernels`` (see setup.py for why not ``kernels``).
This package imports nothing from ``c3m``.

Public API (imported lazily, so ``import c3m_kernels`` needs numpy only; torch, numba and triton are
imported the first time an op that needs them runs):

* :func:`candidate_topk` — fused inner-product top-k, dense or ragged multi-tenant.
* :func:`anchor_scores`, :func:`build_anchor_graph` — HiVe-Mem IDF anchor expansion and graph build.
* :func:`budget_solve` — batched BMER reader-budget selection (exact DP, coverage-aware variant).
* :class:`BackendUnavailable` — raised when an explicitly requested backend cannot run.

Backend selection and environment variables: see ``kernels/README.md`` and :mod:`.dispatch` — including
``dispatch.placement(device, op)`` (which arrays a caller holding a device name should build) and
``dispatch.counts()`` / ``dispatch.reset_counts()`` (the (op, backend) calls executed in this process).
"""
from __future__ import annotations

import importlib


def _hand_over_to_pypi_kernels() -> None:
    """Imported under the name ``kernels``: the repository root is on ``sys.path`` (``python -m …``, ``python
    -c`` or a REPL started there), so this folder shadows the PyPI package ``kernels``, which transformers
    (>= 5.25 depends on it) imports at start-up. Load that package instead, when it is installed: the import
    statement returns ``sys.modules["kernels"]``, not this module (whose body below only defines lazy names)."""
    import importlib.machinery
    import importlib.util
    import os
    import sys

    root = os.path.realpath(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    path = [p for p in sys.path if os.path.realpath(os.path.abspath(p or os.curdir)) != root]
    spec = importlib.machinery.PathFinder.find_spec("kernels", path)
    if spec is None or spec.loader is None or spec.origin is None:  # not installed (or a bare namespace folder)
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["kernels"] = module
    spec.loader.exec_module(module)


if __name__ == "kernels":
    _hand_over_to_pypi_kernels()

__all__ = ["candidate_topk", "anchor_scores", "build_anchor_graph", "build_anchor_index",
           "budget_solve", "BackendUnavailable"]

_LAZY = {
    "candidate_topk": (".candidate_topk", "candidate_topk"),
    "anchor_scores": (".anchor_scores", "anchor_scores"),
    "build_anchor_graph": (".anchor_scores", "build_anchor_graph"),
    "build_anchor_index": (".anchor_scores", "build_anchor_index"),
    "budget_solve": (".budget_solve", "budget_solve"),
    "BackendUnavailable": (".dispatch", "BackendUnavailable"),
}


def __getattr__(name: str):
    if name in _LAZY:
        mod, attr = _LAZY[name]
        value = getattr(importlib.import_module(mod, __name__), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'c3m_kernels' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + __all__)
