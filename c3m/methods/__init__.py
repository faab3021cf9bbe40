"""Memory methods behind one interface (``observe`` / ``retrieve``); see ``base.py``."""
from .base import METHOD_NAMES, MemoryMethod, available_methods, method_class, register
from . import bm25, c3m, cdrs, dense_topk, facts, full_context, hivemem, hybrid, memrefine, moviechat, resum, summary_only  # noqa: E402,F401  (each registers itself; base imports none of them)

__all__ = ["METHOD_NAMES", "MemoryMethod", "available_methods", "method_class", "register"]
