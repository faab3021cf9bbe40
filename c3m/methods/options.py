"""Typed method options: a frozen dataclass per method, built once from ``MemoryConfig.method_options``.

``parse_options`` checks every given value against its field's default type (bool, int, float, str, or a
tuple of str) and an optional ``minimum`` in the field's metadata, and raises ``InvalidInput`` naming
``method_options.<key>`` with the fix. A preset is a dataclass value; an ablation is that value with a field
replaced. Method-specific cross-field checks stay in each config's ``validate``.
"""
from __future__ import annotations

from dataclasses import fields, replace
from typing import Any, TypeVar

import numpy as np

from ..errors import InvalidInput

T = TypeVar("T")


def _check(key: str, value: Any, default: Any, minimum: float | None) -> Any:
    where = f"method_options.{key}"
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise InvalidInput(where, f"must be true or false, got {value!r}", fix=f"{key} = {str(default).lower()}")
        return value
    if isinstance(default, (int, float)):
        ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
        if ok and isinstance(default, int) and not float(value).is_integer():
            ok = False
        if not ok:
            kind = "an integer" if isinstance(default, int) else "a number"
            raise InvalidInput(where, f"must be {kind}, got {value!r}", fix=f"e.g. {key} = {default}")
        value = type(default)(value)
        if minimum is not None and value < minimum:
            raise InvalidInput(where, f"must be >= {minimum}, got {value!r}", fix=f"e.g. {key} = {default}")
        return value
    if isinstance(default, tuple):
        if isinstance(value, str):
            value = tuple(v.strip() for v in value.replace("+", ",").split(",") if v.strip())
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            raise InvalidInput(where, f"must be a list of names, got {value!r}",
                               fix=f'e.g. {key} = "{"+".join(default)}"')
        return tuple(value)
    if isinstance(default, str) and not isinstance(value, str):
        raise InvalidInput(where, f"must be a string, got {value!r}", fix=f'e.g. {key} = "{default}"')
    return value


def parse_options(cls: type[T], options: dict[str, Any], method: str, base: T | None = None) -> T:
    """``base`` (default ``cls()``) with ``options`` applied, every value type-checked; then ``validate()``."""
    known = {f.name: f for f in fields(cls)}
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise InvalidInput(f"method_options.{unknown[0]}", f"unknown option for method {method!r}",
                           fix=f"use only {sorted(known)}")
    base = base if base is not None else cls()
    values = {k: _check(k, v, getattr(base, k), known[k].metadata.get("minimum")) for k, v in options.items()}
    cfg = replace(base, **values)
    validate = getattr(cfg, "validate", None)
    if validate is not None:
        validate()
    return cfg
