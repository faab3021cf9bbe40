"""A generic, exact diff of JSON trees: what index snapshots store between full checkpoints.

``diff(old, new)`` returns a JSON-serialisable patch and ``apply(old, patch)`` rebuilds ``new`` from it;
``canonical(apply(old, diff(old, new))) == canonical(new)`` for any JSON values (dicts with string keys, lists,
strings, numbers, booleans, null). Both arguments must be *normalised* JSON (what ``json.loads`` returns: no
tuples, no int keys), which is what the Cold Store diffs: equality is type-strict (``1``, ``1.0`` and ``true``
are different values, as their JSON is).

Patch forms (short tags keep a zlib'd patch small):

- ``["r", value]``: replace with ``value``;
- ``["d", {key: patch}, [deleted keys]]``: a dict changed by key (new keys come as ``["r", value]``);
- ``["l", ops]``: a list rebuilt from ops, in order: ``["c", i, j]`` copies old[i:j], ``["p", i, patch]`` is
  old[i] patched, ``["n", [values]]`` inserts new values.

Lists of dicts that all carry a unique id field (``entry_id``, ``id``, ``node_id``: a method's entries) are
matched by id, so an entry whose text or counters changed is patched in place, not deleted and re-inserted;
other lists are matched on each element's canonical JSON (``difflib.SequenceMatcher`` opcodes). A patch is never
larger than the value it replaces by more than a few bytes: where it would be, the value is stored instead.

``apply`` may reuse (and mutate) the old tree's containers: pass a tree you own.
"""
from __future__ import annotations

import json
from difflib import SequenceMatcher
from typing import Any

ID_FIELDS = ("entry_id", "id", "node_id")
_SCALARS = (str, int, float, bool, type(None))


_ENCODER = json.JSONEncoder(separators=(",", ":"), sort_keys=True)  # == json.dumps(obj, same options), no per-call setup


def canonical(obj: Any) -> str:
    """The one JSON text of a value that snapshots hash and store (sorted keys, no spaces)."""
    return _ENCODER.encode(obj)


def _key(x: Any) -> Any:
    """A hashable key equal for two elements iff they are ``same`` (scalars without a JSON dump)."""
    t = type(x)
    if t is str or t is int or t is bool or x is None:
        return (t.__name__, x)
    if t is float:
        return ("float", repr(x))
    return canonical(x)


def same(a: Any, b: Any, nan: bool = True) -> bool:
    """Type-strict equality of normalised JSON values (``1 != 1.0 != True``, ``0.0 != -0.0``).

    Two containers are the same exactly when their canonical JSON is: Python's ``==`` (C speed, no allocation)
    settles most pairs, and only a pair it calls equal is encoded, to tell ``1`` from ``1.0`` and ``true``. A NaN is
    the one value unequal to itself, so containers ``==`` calls unequal are encoded too, unless ``nan=False``
    says neither tree holds one (``diff`` checks that once per call)."""
    if a is b:
        return True
    ta = type(a)
    if ta is not type(b):
        return False
    if ta is dict or ta is list:
        if a == b:
            return canonical(a) == canonical(b)
        return nan and canonical(a) == canonical(b)
    if ta is float:
        return repr(a) == repr(b)  # nan, -0.0
    return a == b


def _may_hold_nan(x: Any) -> bool:
    return type(x) is float and x != x or type(x) in (dict, list) and "NaN" in canonical(x)


def diff(old: Any, new: Any, *, nan: bool | None = None) -> list | None:
    """A patch turning ``old`` into ``new``; None when they are the same. ``nan``: whether either tree may hold a
    NaN, when the caller knows it already (the Cold Store has both trees' canonical JSON; a check here encodes
    both again, ~15% of a snapshot's cost)."""
    if nan is None:
        nan = _may_hold_nan(old) or _may_hold_nan(new)
    if same(old, new, nan):
        return None
    return _diff(old, new, nan)


def _diff(old: Any, new: Any, nan: bool = True) -> list:
    """A patch for two values known to differ."""
    if type(old) is dict and type(new) is dict:
        sets = {}
        for k, v in new.items():
            if k not in old:
                sets[k] = ["r", v]
            elif not same(old[k], v, nan):
                sets[k] = _smaller(old[k], v, nan)
        return ["d", sets, sorted(k for k in old if k not in new)]
    if type(old) is list and type(new) is list:
        return ["l", _list_ops(old, new, nan)]
    return ["r", new]


def _smaller(old: Any, new: Any, nan: bool = True) -> list:
    """The recursive patch of two differing values, or a plain replacement when that is no bigger."""
    if type(old) is not type(new) or type(new) not in (dict, list):
        return ["r", new]
    patch = _diff(old, new, nan)
    return patch if len(canonical(patch)) < len(canonical(new)) + 6 else ["r", new]


def _id_field(old: list, new: list) -> str | None:
    """The id field every element of both lists has (a unique scalar), or None."""
    if not old or not new or type(old[0]) is not dict:
        return None
    for f in ID_FIELDS:
        ok = True
        for xs in (old, new):
            seen = set()
            for x in xs:
                if type(x) is not dict or f not in x or type(x[f]) not in (str, int) or x[f] in seen:
                    ok = False
                    break
                seen.add(x[f])
            if not ok:
                break
        if ok:
            return f
    return None


def _list_ops(old: list, new: list, nan: bool = True) -> list:
    field = _id_field(old, new)
    if field is not None:
        a = [("i", type(x[field]).__name__, x[field]) for x in old]
        b = [("i", type(x[field]).__name__, x[field]) for x in new]
    else:
        a = [_key(x) for x in old]
        b = [_key(x) for x in new]
    ops: list = []

    def copy(i: int, j: int) -> None:
        if i == j:
            return
        if ops and ops[-1][0] == "c" and ops[-1][2] == i:
            ops[-1][2] = j
        else:
            ops.append(["c", i, j])

    def insert(v: Any) -> None:
        if ops and ops[-1][0] == "n":
            ops[-1][1].append(v)
        else:
            ops.append(["n", [v]])

    def patch_or_insert(i: int, v: Any) -> None:
        """new element v from old[i] (same id, or paired in a replace block)."""
        if same(old[i], v, nan):
            copy(i, i + 1)
            return
        p = _smaller(old[i], v, nan)
        if p[0] == "r":
            insert(v)
        else:
            ops.append(["p", i, p])

    where = {k: i for i, k in enumerate(a)} if field is not None else None
    for tag, i1, i2, j1, j2 in SequenceMatcher(None, a, b, autojunk=True).get_opcodes():
        if tag == "equal":
            if field is None:
                copy(i1, i2)
            else:
                for i, j in zip(range(i1, i2), range(j1, j2)):
                    patch_or_insert(i, new[j])
        elif tag in ("replace", "insert"):
            for k, j in enumerate(range(j1, j2)):
                if field is not None:
                    i = where.get(b[j])  # an entry that moved keeps its patch
                else:
                    i = i1 + k if tag == "replace" and i2 - i1 == j2 - j1 else None
                if i is None:
                    insert(new[j])
                else:
                    patch_or_insert(i, new[j])
        # "delete": nothing to emit
    return ops


def apply(old: Any, patch: list | None) -> Any:
    """``new`` from ``old`` and ``diff(old, new)`` (may mutate ``old``'s containers)."""
    if patch is None:
        return old
    tag = patch[0]
    if tag == "r":
        return patch[1]
    if tag == "d":
        if type(old) is not dict:
            raise ValueError(f"dict patch on a {type(old).__name__}")
        for k, p in patch[1].items():
            old[k] = p[1] if p[0] == "r" else apply(old[k], p)
        for k in patch[2]:
            del old[k]
        return old
    if tag == "l":
        if type(old) is not list:
            raise ValueError(f"list patch on a {type(old).__name__}")
        out: list = []
        for op in patch[1]:
            kind = op[0]
            if kind == "c":
                if not 0 <= op[1] <= op[2] <= len(old):
                    raise ValueError(f"copy range {op[1]}:{op[2]} outside a list of {len(old)}")
                out.extend(old[op[1]:op[2]])
            elif kind == "p":
                if not 0 <= op[1] < len(old):
                    raise ValueError(f"patched index {op[1]} outside a list of {len(old)}")
                out.append(apply(old[op[1]], op[2]))
            elif kind == "n":
                out.extend(op[1])
            else:
                raise ValueError(f"unknown list op {kind!r}")
        return out
    raise ValueError(f"unknown patch tag {tag!r}")
