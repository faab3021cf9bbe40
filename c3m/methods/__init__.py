"""Memory methods behind one interface (``observe`` / ``retrieve``); see ``base.py``."""
from .base import METHOD_NAMES, MemoryMethod, available_methods, method_class, register

__all__ = ["METHOD_NAMES", "MemoryMethod", "available_methods", "method_class", "register"]
