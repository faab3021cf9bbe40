"""c3m_kernels: GPU (Triton) and CPU kernels for c3m, each with a plain PyTorch reference.

Installed under the import name ``c3m_kernels`` (see setup.py for why not ``kernels``).
This package imports nothing from ``c3m``.

Public API (imported lazily, so ``import c3m_kernels`` needs numpy only; torch, numba and triton are
imported the first time an op that needs them runs):

* :func:`candidate_topk` — fused inner-product top-k, dense or ragged multi-tenant.
* :func:`anchor_scores`, :func:`build_anchor_graph` — HiVe-Mem IDF anchor expansion and graph build.
* :func:`budget_solve` — batched BMER reader-budget selection (exact DP, coverage-aware variant).
* :class:`BackendUnavailable` — raised when an explicitly requested backend cannot run.

Backend selection and environment variables: see ``kernels/README.md`` and :mod:`.dispatch`.
"""
from __future__ import annotations

import importlib

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
