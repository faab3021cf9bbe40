"""LangGraph: ``C3MStore``, a ``langgraph.store.base.BaseStore`` on c3m, and LangChain tools ``remember`` /
``recall`` / ``ask`` (``pip install "c3m[langgraph]"``; docs/integrations/langgraph.md).

    from c3m.integrations.langgraph import C3MStore, c3m_tools
    store = C3MStore("./my-store")
    graph = builder.compile(store=store)            # tools reach it with langgraph.config.get_store()

How LangGraph's store maps onto c3m (every read and write goes through ``c3m.Memory``):

- a namespace tuple is a c3m namespace: its labels joined by ``.`` (LangGraph forbids ``.`` in a label, so the
  map is one to one); a label outside c3m's characters is written ``x@`` + the hex of its UTF-8. LangGraph's
  own rules (no empty namespace or label, no ``.``, root not ``langgraph``) raise ``InvalidNamespaceError``.
- ``put(ns, key, value)`` is a c3m session ``lg:<key>:v<n>`` of one turn: the value's text (``{"text": ...}``)
  or its JSON, its ``images`` (data URLs, ``{"data": base64}``) as the turn's original images. ``get`` returns
  exactly what was put (images come back as ``data:<mime>;base64,...`` URLs). A put over an existing key adds
  version ``n + 1`` and, with ``history=True`` (default), keeps the old version in c3m as history (a read marks
  it superseded); ``history=False`` forgets it. ``put(ns, key, None)`` / ``delete`` forget every version
  (redacted in the Cold Store, images deleted, index rebuilt: ``Memory.forget``).
- ``search(ns_prefix, query=...)`` is c3m's budgeted read (``Memory.retrieve_many`` over the namespaces under
  the prefix): items in c3m's ranking, ``SearchItem.score`` the reader's score, and the value carries
  ``"_c3m"``: the provenance of the turn that matched (session, turn, time, image references). Without a query,
  items come in insertion order, unscored, like ``InMemoryStore``. ``filter`` works as in ``InMemoryStore``.
- a session written to the namespace by anything else (``Memory.add_session``, the other adapters) is not a
  store item, but ``recall`` / ``ask`` read it.
"""
from __future__ import annotations

import hashlib
import json
import re
import uuid
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable

from ._core import MemoryWorker, data_url, decode_image, evidence_text, merged, now_utc, provenance, require, utc

require("langgraph.store.base", "c3m.integrations.langgraph")

from langgraph.store.base import (BaseStore, GetOp, InvalidNamespaceError, Item, ListNamespacesOp,  # noqa: E402
                                  MatchCondition, Op, PutOp, Result, SearchItem, SearchOp)

from langchain_core.runnables import RunnableConfig  # noqa: E402  (langgraph depends on langchain-core)
from langchain_core.tools import tool  # noqa: E402

from ..errors import InvalidInput  # noqa: E402
from ..memory import Memory  # noqa: E402
from ..store.cold import NAMESPACE_RE  # noqa: E402
from ..types import RawNode, ReaderBudget, Session, Turn  # noqa: E402

__all__ = ["C3MStore", "c3m_tools", "to_c3m_namespace", "from_c3m_namespace"]

_SAFE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_:/-]*\Z")
_SESSION = re.compile(r"lg:(?P<key>.*):v(?P<n>[0-9]+)\Z", re.S)
_PLACEHOLDER = re.compile(r"<image [0-9]+>\Z")


# -- namespaces -----------------------------------------------------------------------------------------------
def _check_labels(namespace: tuple, *, for_write: bool) -> None:
    if not isinstance(namespace, tuple):
        raise InvalidNamespaceError(f"Namespace must be a tuple of strings, got {type(namespace).__name__}: "
                                    f"pass e.g. ('memories', 'alice')")
    if for_write and not namespace:
        raise InvalidNamespaceError("Namespace cannot be empty: pass e.g. ('memories', 'alice')")
    if for_write and namespace[0] == "langgraph":
        raise InvalidNamespaceError(f'Root label for namespace cannot be "langgraph". Got: {namespace}')
    for label in namespace:
        if not isinstance(label, str):
            raise InvalidNamespaceError(f"Invalid namespace label '{label}' found in {namespace}. Namespace labels "
                                        f"must be strings, but got {type(label).__name__}.")
        if "." in label:
            raise InvalidNamespaceError(f"Invalid namespace label '{label}' found in {namespace}. Namespace labels "
                                        f"cannot contain periods ('.'): use another separator, e.g. '-'.")
        if "\x00" in label:
            raise InvalidNamespaceError(f"Invalid namespace label {label!r} found in {namespace}. Namespace labels "
                                        f"cannot contain NUL bytes ('\\x00').")
        if not label:
            raise InvalidNamespaceError(f"Namespace labels cannot be empty strings. Got {label!r} in {namespace}")


def to_c3m_namespace(namespace: tuple[str, ...]) -> str:
    """The c3m namespace of a LangGraph namespace: labels joined by ``.`` (``x@<hex>`` for a label outside
    c3m's characters). Raises ``InvalidNamespaceError`` for what LangGraph or c3m refuses."""
    _check_labels(namespace, for_write=True)
    name = ".".join(label if _SAFE.match(label) else "x@" + label.encode("utf-8").hex() for label in namespace)
    if not NAMESPACE_RE.match(name):
        raise InvalidNamespaceError(f"Namespace {namespace} maps to the c3m namespace {name[:60]!r}… of {len(name)} "
                                    f"characters, over c3m's limit of 128: use fewer or shorter labels (labels of "
                                    f"letters, digits, _ : / - are kept as they are; others take 2 characters per byte)")
    return name


def from_c3m_namespace(name: str) -> tuple[str, ...] | None:
    """The LangGraph namespace of a c3m namespace (None when it is not one, e.g. ``a..b``)."""
    out = []
    for part in name.split("."):
        if part.startswith("x@"):
            try:
                part = bytes.fromhex(part[2:]).decode("utf-8")
            except ValueError:
                return None
        if not part or "." in part or "\x00" in part:
            return None
        out.append(part)
    return tuple(out)


# -- values ---------------------------------------------------------------------------------------------------
def _encode_value(value: Any) -> tuple[str, list[bytes]]:
    """(turn text, image bytes) for a put: the text alone for ``{"text": str}`` (plus ``images``), else the value's
    JSON with each image replaced by ``<image k>``."""
    from collections.abc import Mapping

    if not isinstance(value, Mapping):
        raise ValueError(f"Store values must be dicts, got {type(value).__name__}: pass e.g. {{'text': 'I like tea'}}"
                         f" (None deletes)")
    value = dict(value)
    images: list[bytes] = []
    if "images" in value:
        raw = value["images"]
        if not isinstance(raw, (list, tuple)):
            raise ValueError("value['images'] must be a list: pass ['data:image/png;base64,...', ...]")
        images = [decode_image(im, f"value['images'][{i}]") for i, im in enumerate(raw)]
        if images:
            value["images"] = [f"<image {i + 1}>" for i in range(len(images))]
    text = value.get("text")
    plain = isinstance(text, str) and not text.startswith("{") and (
        set(value) == {"text"} or (set(value) == {"text", "images"} and images))
    if plain:
        return text, images
    try:
        return json.dumps(value, ensure_ascii=False), images
    except (TypeError, ValueError) as exc:
        raise ValueError(f"Store values must be JSON-serializable ({exc}): store strings, numbers, lists and dicts; "
                         f"images go in value['images'] as data URLs") from None


@dataclass
class _Key:
    """One store key in one c3m namespace: its live versions (oldest first) and the highest version number used."""

    order: int
    max_n: int = 0
    live: list[RawNode] = field(default_factory=list)


@dataclass
class _Index:
    generation: tuple[int, int]
    keys: dict[str, _Key]


class C3MStore(BaseStore):
    """A LangGraph ``BaseStore`` whose items are c3m turns (module docstring for the mapping).

    ``memory``: a store location (a folder or ``postgresql://`` URL) or an open ``c3m.Memory`` (its store,
    configuration and models are used). ``budget``: the reader budget of ``search(query=...)`` and the tools
    (default: the Memory's; ``raw_nodes`` is raised to ``offset + limit`` when a search asks for more).
    ``history``: keep overwritten values as c3m history (default) or forget them. ``role``: the role of the turns
    a put writes."""

    supports_ttl = False

    def __init__(self, memory: Memory | str, *, budget: ReaderBudget | None = None, history: bool = True,
                 role: str = "user", config=None, models=None):
        self.worker = MemoryWorker.of(memory, config=config, models=models)
        self.budget = budget or self.worker.root.config.reader_budget
        self.history = history
        self.role = role
        self._indexes: dict[str, _Index] = {}

    # -- BaseStore --------------------------------------------------------------------------------------------
    def batch(self, ops: Iterable[Op]) -> list[Result]:
        return self.worker.call(self._batch, list(ops))

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await self.worker.acall(self._batch, list(ops))

    def close(self) -> None:
        self.worker.close()

    def __enter__(self) -> "C3MStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def memory(self) -> Memory:
        """The worker's root ``Memory`` (use it through ``self.worker.call``: it belongs to the worker thread)."""
        return self.worker.root

    def _batch(self, ops: list[Op]) -> list[Result]:
        # As InMemoryStore: reads see the store as it was before the batch; the last put of a key wins.
        results: list[Result] = []
        puts: dict[tuple, PutOp] = {}
        for op in ops:
            if isinstance(op, GetOp):
                _check_labels(op.namespace, for_write=False)
                results.append(self._get(op))
            elif isinstance(op, SearchOp):
                _check_labels(op.namespace_prefix, for_write=False)
                results.append(self._search(op))
            elif isinstance(op, ListNamespacesOp):
                for cond in op.match_conditions or ():
                    _check_labels(tuple(cond.path), for_write=False)
                results.append(self._list_namespaces(op))
            elif isinstance(op, PutOp):
                to_c3m_namespace(op.namespace)
                if op.ttl is not None:
                    raise NotImplementedError(f"TTL is not supported by {type(self).__name__}: c3m keeps turns until "
                                              f"they are deleted or forgotten; put without ttl")
                if op.value is not None:
                    _encode_value(op.value)  # refuse a bad value before anything in the batch is written
                puts[(op.namespace, str(op.key))] = op
                results.append(None)
            else:
                raise ValueError(f"Unknown operation type: {type(op)}")
        for op in puts.values():
            self._put(op)
        return results

    # -- the key index of one namespace (rebuilt when another writer changed it) --------------------------------
    def _index(self, ns: str) -> _Index:
        store = self.worker.root.store
        gen = store.generation(ns)
        idx = self._indexes.get(ns)
        if idx is not None and idx.generation == gen:
            return idx
        idx = _Index(gen, {})
        if gen[0] > 0 and any(_SESSION.match(r.session_id) for r in store.sessions(ns)):  # no node read otherwise
            self._fold(idx, store.iter_nodes(ns))
        self._indexes[ns] = idx
        return idx

    @staticmethod
    def _fold(idx: _Index, nodes: Iterable[RawNode]) -> None:
        for node in nodes:
            m = _SESSION.match(node.session_id)
            if m is None or node.turn_index != 0:
                continue
            key, n = m.group("key"), int(m.group("n"))
            k = idx.keys.get(key)
            if k is None:
                k = idx.keys[key] = _Key(order=len(idx.keys))
            k.max_n = max(k.max_n, n)
            if not node.redacted:
                if not k.live:  # re-put after a delete: ordered as a new key, like InMemoryStore
                    k.order = max((o.order for o in idx.keys.values()), default=0) + 1
                k.live.append(node)

    def _value(self, node: RawNode) -> dict:
        text = node.text
        value: Any = None
        if text.startswith("{"):
            try:
                value = json.loads(text)
            except ValueError:
                value = None
        if not isinstance(value, dict):
            value = {"text": text}
            if node.images:
                value["images"] = [f"<image {i + 1}>" for i in range(len(node.images))]
        ims = value.get("images")
        if (node.images and isinstance(ims, list) and len(ims) == len(node.images)
                and all(isinstance(s, str) and _PLACEHOLDER.match(s) for s in ims)):
            value["images"] = [data_url(im.mime, self.worker.root.store.image_bytes(im)) for im in node.images]
        return value

    def _item(self, ns_tuple: tuple, key: str, k: _Key, cls=Item, **extra):
        value = self._value(k.live[-1])
        return cls(namespace=ns_tuple, key=key, value=value, created_at=utc(k.live[0].time),
                   updated_at=utc(k.live[-1].time), **extra)

    # -- operations -------------------------------------------------------------------------------------------
    def _get(self, op: GetOp) -> Item | None:
        if not op.namespace or op.namespace[0] == "langgraph":
            return None  # nothing can be put there
        ns = to_c3m_namespace(op.namespace)
        k = self._index(ns).keys.get(str(op.key))
        return self._item(tuple(op.namespace), str(op.key), k) if k is not None and k.live else None

    def _put(self, op: PutOp) -> None:
        ns, key = to_c3m_namespace(op.namespace), str(op.key)
        idx = self._index(ns)
        k = idx.keys.get(key)
        mem = self.worker.tenant(ns)
        if op.value is None:
            if k is not None and k.live:
                mem.forget(node_ids=[n.node_id for n in k.live], reason="langgraph store: delete")
            return
        text, images = _encode_value(op.value)
        if k is not None and k.live:
            last = k.live[-1]
            if last.text == text and [im.sha256 for im in last.images] == [hashlib.sha256(b).hexdigest()
                                                                            for b in images]:
                return  # the same value again: nothing new to remember
        n = (k.max_n if k is not None else 0) + 1
        try:
            res = mem.add_session(Session(f"lg:{key}:v{n}", now_utc().replace(tzinfo=None),
                                          (Turn(self.role, text, tuple(images)),)))
        except InvalidInput as exc:
            raise ValueError(f"c3m refused the value of {op.namespace}/{key}: {exc}") from None
        old = list(k.live) if k is not None else []
        if idx.generation == (res.seq - 1, idx.generation[1]):  # nobody else wrote meanwhile: fold in the new turn
            self._fold(idx, self.worker.root.store.iter_nodes(ns, after_seq=res.seq - 1, upto_seq=res.seq))
            idx.generation = (res.seq, idx.generation[1])
        if old and not self.history:
            mem.forget(node_ids=[n.node_id for n in old], reason="langgraph store: value replaced (history=False)")

    def _namespaces(self, prefix: tuple = ()) -> list[tuple[str, tuple]]:
        """(c3m name, LangGraph namespace) of the namespaces under ``prefix`` that hold store items."""
        out = []
        for name in self.worker.root.store.namespaces():
            t = from_c3m_namespace(name)
            if t is not None and t[:len(prefix)] == prefix and any(k.live for k in self._index(name).keys.values()):
                out.append((name, t))
        return out

    def _search(self, op: SearchOp) -> list[SearchItem]:
        spaces = self._namespaces(tuple(op.namespace_prefix))
        if not op.query:
            items = []
            for name, t in spaces:
                keys = self._index(name).keys
                for key, k in sorted(((key, k) for key, k in keys.items() if k.live), key=lambda kv: kv[1].order):
                    item = self._item(t, key, k, SearchItem)
                    if _matches(item.value, op.filter):
                        items.append(item)
            return items[op.offset:op.offset + op.limit]
        budget = replace(self.budget, raw_nodes=max(self.budget.raw_nodes, op.offset + op.limit))
        ctxs = self.worker.root.retrieve_many([(name, op.query) for name, _ in spaces], budget) if spaces else []
        best: dict[tuple, tuple] = {}
        for (name, t), ctx in zip(spaces, ctxs):
            keys = self._index(name).keys
            for it in merged(ctx):
                m = _SESSION.match(it.provenance.session_id)
                k = keys.get(m.group("key")) if m else None
                if k is None or not k.live:
                    continue
                ident = (t, m.group("key"))
                if ident not in best or it.score > best[ident][0]:
                    best[ident] = (float(it.score), it, k)
        items = []
        for (t, key), (score, it, k) in sorted(best.items(), key=lambda kv: -kv[1][0]):
            item = self._item(t, key, k, SearchItem, score=score)
            if _matches(item.value, op.filter):
                item.value = dict(item.value, _c3m=provenance(it))
                items.append(item)
        return items[op.offset:op.offset + op.limit]

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        spaces = [t for _, t in self._namespaces()]
        if op.match_conditions:
            spaces = [t for t in spaces if all(_does_match(c, t) for c in op.match_conditions)]
        if op.max_depth is not None:
            spaces = sorted({t[:op.max_depth] for t in spaces})
        else:
            spaces = sorted(spaces)
        return spaces[op.offset:op.offset + op.limit]


def _does_match(cond: MatchCondition, key: tuple) -> bool:
    path = tuple(cond.path)
    if len(key) < len(path):
        return False
    if cond.match_type == "prefix":
        pairs = zip(key, path)
    elif cond.match_type == "suffix":
        pairs = zip(reversed(key), reversed(path))
    else:
        raise ValueError(f"Unsupported match type: {cond.match_type}: use 'prefix' or 'suffix'")
    return all(p == "*" or k == p for k, p in pairs)


def _matches(value: dict, flt: dict | None) -> bool:
    return not flt or all(_compare(value.get(k), v) for k, v in flt.items())


def _compare(item: Any, want: Any) -> bool:
    """InMemoryStore's filter semantics (JSONB-like): nested dicts, ``$eq $ne $gt $gte $lt $lte``."""
    if isinstance(want, dict):
        if any(k.startswith("$") for k in want):
            return all(_operator(item, op, v) for op, v in want.items())
        return isinstance(item, dict) and all(_compare(item.get(k), v) for k, v in want.items())
    if isinstance(want, (list, tuple)):
        return (isinstance(item, (list, tuple)) and len(item) == len(want)
                and all(_compare(a, b) for a, b in zip(item, want)))
    return item == want


def _operator(value: Any, op: str, arg: Any) -> bool:
    if op == "$eq":
        return value == arg
    if op == "$ne":
        return value != arg
    cmp = {"$gt": float.__gt__, "$gte": float.__ge__, "$lt": float.__lt__, "$lte": float.__le__}.get(op)
    if cmp is None:
        raise ValueError(f"Unsupported operator: {op}: use one of $eq $ne $gt $gte $lt $lte")
    try:
        return cmp(float(value), float(arg))
    except (TypeError, ValueError):  # a missing or non-numeric field does not match (InMemoryStore raises)
        return False


# -- LangChain tools ------------------------------------------------------------------------------------------
def c3m_tools(store: C3MStore, namespace: tuple[str, ...] | Callable[[dict], tuple[str, ...]] | None = None,
              *, budget: ReaderBudget | None = None) -> list:
    """LangChain tools over ``store``: ``remember(text)`` (a store put), ``recall(query)`` (c3m's budgeted read:
    cited evidence, every line ``[session#turn time role] text <image sha>``) and ``ask(question)`` (c3m's
    answerer on that evidence, with its citations).

    ``namespace``: a tuple, or a function of the run's config; by default ``("memories", user_id)`` with
    ``user_id`` from ``config["configurable"]["user_id"]``, so each user of one graph has their own memory."""
    def ns_of(config: RunnableConfig) -> tuple[str, ...]:
        if namespace is None:
            user = ((config or {}).get("configurable") or {}).get("user_id")
            if not user:
                raise ValueError("c3m_tools: no user_id in the run's config: invoke the graph with "
                                 "config={'configurable': {'user_id': 'alice'}} or pass namespace= to c3m_tools")
            return ("memories", str(user))
        return tuple(namespace(config)) if callable(namespace) else tuple(namespace)

    def read(ns: tuple, question: str, ask: bool):
        name = to_c3m_namespace(ns)

        def run():
            mem = store.worker.tenant(name)
            if not mem.version:
                return None
            return mem.ask(question, budget or store.budget) if ask else mem.retrieve(question, budget or store.budget)
        return store.worker.call(run)

    @tool
    def remember(text: str, config: RunnableConfig) -> str:
        """Save a fact about the user to long-term memory (kept across conversations, with its time)."""
        ns = ns_of(config)
        key = uuid.uuid4().hex
        store.put(ns, key, {"text": text})
        return f"Remembered (key {key})."

    @tool
    def recall(query: str, config: RunnableConfig) -> str:
        """Search long-term memory; returns evidence lines [session#turn time role] text, oldest first."""
        ctx = read(ns_of(config), query, ask=False)
        return "Nothing relevant in memory." if ctx is None else evidence_text(ctx)

    @tool
    def ask(question: str, config: RunnableConfig) -> str:
        """Answer a question from long-term memory only, citing the turns it used (or say it is not there)."""
        ans = read(ns_of(config), question, ask=True)
        if ans is None:
            return "Not in memory."
        return f"{ans.text}\nEvidence:\n{evidence_text(ans.context)}"

    return [remember, recall, ask]
