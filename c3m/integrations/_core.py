"""What the framework adapters share: one ``c3m.Memory`` owned by one worker thread, evidence as cited text,
images as data URLs, and the error that names the extra to install.

Thread ownership: a SQLite store refuses a connection used from a thread other than the one that opened it,
and agent frameworks call memory from wherever they like (LangGraph runs sync tools on a thread pool, async
frameworks on the event loop). So an adapter never calls a ``Memory`` from the caller's thread: it owns a
``MemoryWorker``, whose single thread opens the store (or reopens the caller's store with the caller's models
and configuration) and runs every read and write. Async callers await the worker without blocking their loop.
"""
from __future__ import annotations

import asyncio
import base64
import binascii
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, TypeVar

from ..memory import Memory
from ..types import Context, ContextItem, ImageRef, ReaderBudget, item_header

T = TypeVar("T")

EXTRAS = {"langgraph": "langgraph", "agents": "openai-agents", "llama_index": "llamaindex", "autogen_core": "autogen",
          "autogen_agentchat": "autogen", "autogen_ext": "autogen", "langchain_core": "langgraph"}


def require(module: str, what: str):
    """Import ``module`` or raise ImportError naming the c3m extra that installs it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        extra = EXTRAS.get(module.split(".")[0], "integrations")
        raise ImportError(f"{what} needs the '{module.split('.')[0]}' package ({exc}); "
                          f'install it with: pip install -e ".[{extra}]" in a c3m checkout (pip install "c3m[{extra}]" from a '
                          f'wheel)') from None


class MemoryWorker:
    """A ``Memory`` that lives on one thread; ``call`` / ``acall`` run a function ``fn(root_memory)`` there.

    ``memory`` is a store location (a folder, or a ``postgresql://`` URL) or an open ``Memory``: a SQLite store
    is reopened on the worker thread with that Memory's configuration and models (nothing is loaded twice);
    a PostgreSQL Memory is used as it is (its connection may be used from another thread), one call at a time.
    ``namespace`` is the default namespace (a given Memory's own when left out)."""

    def __init__(self, memory: Memory | str | Path, namespace: str | None = None, *, config=None, models=None):
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="c3m-integration")
        self._ident = self._pool.submit(threading.get_ident).result()
        # the root Memory is opened on a namespace known to be valid; ``namespace`` is checked when first used
        # (``tenant``), so each adapter can raise its framework's error type
        if isinstance(memory, Memory):
            self.namespace = namespace or memory.namespace
            if memory.store.backend == "sqlite":
                self.root = self._pool.submit(Memory, memory.store.path, memory.namespace, config=memory.config,
                                              models=memory.models).result()
                self._owned = True
            else:
                self.root, self._owned = memory, False
        else:
            self.namespace = namespace or "default"
            self.root = self._pool.submit(Memory, memory, "default", config=config, models=models).result()
            self._owned = True
        self.closed = False
        self.shared = False

    @classmethod
    def of(cls, memory: "Memory | str | Path | MemoryWorker", namespace: str | None = None, *, config=None,
           models=None) -> "MemoryWorker":
        """The worker an adapter uses: ``memory`` itself when it is a worker (pass ``adapter.worker`` to share one);
        for a store location given with neither ``config`` nor ``models``, one worker per location in this process
        (so ``C3MSession("c1", "./store")``, ``C3MSession("c2", "./store")`` and their tools load the models once
        and share one connection; closing an adapter leaves a shared worker open); else a new one."""
        if isinstance(memory, MemoryWorker):
            return memory
        if isinstance(memory, (str, Path)) and config is None and models is None:
            key = str(memory) if "://" in str(memory) else str(Path(memory).resolve())
            with _SHARED_LOCK:
                w = _SHARED.get(key)
                if w is None or w.closed:
                    w = _SHARED[key] = cls(memory)
                    w.shared = True
            return w  # adapters keep their own namespace (``namespace or worker.namespace``)
        return cls(memory, namespace, config=config, models=models)

    def call(self, fn: Callable[..., T], *args, **kwargs) -> T:
        if threading.get_ident() == self._ident:
            return fn(*args, **kwargs)
        return self._pool.submit(fn, *args, **kwargs).result()

    async def acall(self, fn: Callable[..., T], *args, **kwargs) -> T:
        if threading.get_ident() == self._ident:
            return fn(*args, **kwargs)
        return await asyncio.wrap_future(self._pool.submit(fn, *args, **kwargs))

    def tenant(self, namespace: str | None = None) -> Memory:
        """The Memory of ``namespace`` (on the worker thread only)."""
        return self.root.tenant(namespace or self.namespace)

    def close(self) -> None:
        if self.closed or self.shared:
            return
        self.closed = True
        if self._owned:
            self._pool.submit(self.root.close).result()
        self._pool.shutdown(wait=True)


_SHARED: dict[str, MemoryWorker] = {}
_SHARED_LOCK = threading.Lock()


def utc(t: datetime) -> datetime:
    """c3m stores naive UTC; frameworks show aware times."""
    return t.replace(tzinfo=timezone.utc) if t.tzinfo is None else t


def now_utc() -> datetime:
    return datetime.now(timezone.utc)


# -- images ---------------------------------------------------------------------------------------
_DATA_URL = re.compile(r"data:(?P<mime>[\w.+-]+/[\w.+-]+)?(?:;[\w=.+-]+)*;base64,(?P<data>.*)\Z", re.S)


def data_url(mime: str, data: bytes) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def decode_image(value: Any, field: str) -> bytes:
    """Image bytes from what frameworks carry: a ``data:`` URL, ``{"data": base64}`` (c3m's HTTP form) or bytes.
    Anything else raises ValueError naming the accepted forms (callers turn it into their framework's error)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, dict) and isinstance(value.get("data"), str):
        value = value["data"]
    elif isinstance(value, str):
        m = _DATA_URL.match(value.strip())
        if m is None:
            raise ValueError(f"{field}: {value[:40]!r} is not an image c3m can store; pass a data URL "
                             f"('data:image/png;base64,...'), {{'data': '<base64>'}} or the encoded bytes "
                             f"(remote URLs are never fetched)")
        value = m.group("data")
    else:
        raise ValueError(f"{field}: got {type(value).__name__}; pass a data URL ('data:image/png;base64,...'), "
                         f"{{'data': '<base64>'}} or the encoded bytes")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"{field}: the base64 does not decode; pass standard base64 (RFC 4648) of a PNG, JPEG, "
                         f"GIF, WebP, BMP or TIFF file") from None


# -- evidence -------------------------------------------------------------------------------------
def provenance(item: ContextItem) -> dict:
    """A context item's provenance as plain JSON: where the evidence was said, and which original images."""
    p = item.provenance
    out = {"namespace": p.namespace, "session_id": p.session_id, "turn_index": p.turn_index,
           "time": utc(p.time).isoformat(), "role": item.role, "node_id": item.node_id,
           "score": round(float(item.score), 6),
           "images": [{"sha256": im.sha256, "mime": im.mime, "width": im.width, "height": im.height}
                      for im in item.images]}
    if item.status:
        out["status"] = item.status
    return out


def cite(item: ContextItem) -> str:
    """``[session#turn date time role] text <image 1a2b3c…>``: the line every adapter shows a model."""
    imgs = "".join(f" <image {im.sha256[:12]}>" for im in item.images)
    return f"{item_header(item)} {item.text}{imgs}".strip()


def merged(ctx: Context) -> list[ContextItem]:
    """The context's items with one item per Raw Node (the reader may select a turn's text and its image as two
    items): text joined, images united, the best score; in the context's (time) order."""
    from dataclasses import replace

    out: dict[str, ContextItem] = {}
    for it in ctx.items:
        prev = out.get(it.node_id)
        if prev is None:
            out[it.node_id] = it
            continue
        text = prev.text if not it.text or it.text == prev.text else (f"{prev.text} {it.text}".strip())
        images = prev.images + tuple(im for im in it.images if im not in prev.images)
        out[it.node_id] = replace(prev, text=text, images=images, score=max(prev.score, it.score),
                                  status=prev.status or it.status)
    return list(out.values())


def evidence_text(ctx: Context, *, empty: str = "Nothing relevant in memory.") -> str:
    """The context as cited lines, one per turn (time order), or ``empty``."""
    items = merged(ctx)
    if not items:
        return empty
    return "\n".join(cite(i) for i in items)


def budget_of(budget: ReaderBudget | dict | None, memory: Memory) -> ReaderBudget:
    if budget is None:
        return memory.config.reader_budget
    if isinstance(budget, dict):
        return ReaderBudget(**budget)
    return budget


def image_ref_bytes(memory: Memory, ref: ImageRef) -> bytes:
    return memory.image_bytes(ref)
