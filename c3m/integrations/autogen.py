"""AutoGen: ``C3MMemory``, an ``autogen_core.memory.Memory`` on c3m (``pip install "c3m[autogen]"``;
docs/integrations/autogen.md).

    from autogen_agentchat.agents import AssistantAgent
    from c3m.integrations.autogen import C3MMemory
    agent = AssistantAgent("assistant", model_client=client, memory=[C3MMemory("./my-store", namespace="alice")])

``add`` stores a ``MemoryContent`` (text, Markdown, JSON, or an image) as a one-turn c3m session;
``update_context`` reads c3m for the context's last user message and adds the cited evidence
(``[session#turn time role] text <image sha>``) as a system message; ``query`` returns it as
``MemoryContent`` items (text with provenance metadata, and each original image as an ``Image``); ``clear``
forgets every turn of the namespace.
"""
from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from ._core import MemoryWorker, cite, merged, now_utc, provenance, require

require("autogen_core.memory", "c3m.integrations.autogen")

from autogen_core import CancellationToken, Image  # noqa: E402
from autogen_core.memory import Memory as _AutoGenMemory  # noqa: E402
from autogen_core.memory import MemoryContent, MemoryMimeType, MemoryQueryResult, UpdateContextResult  # noqa: E402
from autogen_core.model_context import ChatCompletionContext  # noqa: E402
from autogen_core.models import SystemMessage, UserMessage  # noqa: E402

from ..errors import InvalidInput  # noqa: E402
from ..memory import Memory  # noqa: E402
from ..types import ReaderBudget, Session, Turn  # noqa: E402

__all__ = ["C3MMemory"]


class C3MMemory(_AutoGenMemory):
    """An AutoGen ``Memory`` on c3m (module docstring). ``memory``: a store location, an open ``c3m.Memory`` or
    another adapter's ``worker``; ``namespace``: the user's c3m namespace."""

    def __init__(self, memory: Memory | str | Path | MemoryWorker, *, namespace: str | None = None,
                 budget: ReaderBudget | None = None, name: str = "c3m_memory", config=None, models=None):
        self.worker = MemoryWorker.of(memory, namespace, config=config, models=models)
        self.namespace = namespace or self.worker.namespace
        self.budget = budget
        self.name = name
        try:
            self.worker.call(self.worker.tenant, self.namespace)
        except InvalidInput as exc:
            raise ValueError(f"C3MMemory: {exc}") from None

    def _mem(self) -> Memory:
        return self.worker.tenant(self.namespace)

    async def add(self, content: MemoryContent, cancellation_token: CancellationToken | None = None) -> None:
        turn = _turn_of(content)
        sid = (content.metadata or {}).get("session_id") or f"autogen-{uuid.uuid4().hex[:16]}"
        try:
            await self.worker.acall(lambda: self._mem().add_session(
                Session(str(sid), now_utc().replace(tzinfo=None), (turn,))))
        except InvalidInput as exc:
            raise ValueError(f"C3MMemory.add: {exc}") from None

    async def query(self, query: str | MemoryContent = "", cancellation_token: CancellationToken | None = None,
                    **kwargs: Any) -> MemoryQueryResult:
        text = query.content if isinstance(query, MemoryContent) else query
        if not isinstance(text, str) or not text.strip():
            raise ValueError("C3MMemory.query needs a non-empty text query: pass query='what is my dog called?'")

        def run():
            mem = self._mem()
            ctx = mem.retrieve(text, kwargs.get("budget") or self.budget)
            out = []
            for item in merged(ctx):
                meta = provenance(item)
                out.append(MemoryContent(content=cite(item), mime_type=MemoryMimeType.TEXT, metadata=meta))
                for im in item.images:
                    img = Image.from_base64(__import__("base64").b64encode(mem.image_bytes(im)).decode("ascii"))
                    out.append(MemoryContent(content=img, mime_type=MemoryMimeType.IMAGE,
                                             metadata=dict(meta, image_sha256=im.sha256, mime=im.mime)))
            return out
        return MemoryQueryResult(results=await self.worker.acall(run))

    async def update_context(self, model_context: ChatCompletionContext) -> UpdateContextResult:
        messages = await model_context.get_messages()
        last = next((m for m in reversed(messages) if isinstance(m, UserMessage)), None)
        text = None
        if last is not None:
            text = last.content if isinstance(last.content, str) else " ".join(
                c for c in last.content if isinstance(c, str))
        if not text or not text.strip():
            return UpdateContextResult(memories=MemoryQueryResult(results=[]))
        result = await self.query(text)
        lines = [str(r.content) for r in result.results if isinstance(r.content, str)]
        if lines:
            await model_context.add_message(SystemMessage(
                content="Relevant memory from past sessions ([session#turn time role] text, oldest first):\n"
                        + "\n".join(lines)))
        return UpdateContextResult(memories=result)

    async def clear(self) -> None:
        def run():
            mem = self._mem()
            ids = [n.node_id for n in mem.nodes() if not n.redacted]
            if ids:
                mem.forget(node_ids=ids, reason="autogen Memory.clear")
        await self.worker.acall(run)

    async def close(self) -> None:
        self.worker.close()


def _turn_of(content: MemoryContent) -> Turn:
    mime = content.mime_type.value if isinstance(content.mime_type, MemoryMimeType) else str(content.mime_type)
    role = (content.metadata or {}).get("role", "user")
    c = content.content
    if isinstance(c, Image):
        return Turn(role, (content.metadata or {}).get("text", ""), (__import__("base64").b64decode(c.to_base64()),))
    if mime.startswith("image/") and isinstance(c, (bytes, bytearray)):
        return Turn(role, (content.metadata or {}).get("text", ""), (bytes(c),))
    if isinstance(c, dict):
        return Turn(role, json.dumps(c, ensure_ascii=False))
    if isinstance(c, str):
        return Turn(role, c)
    raise ValueError(f"C3MMemory.add: cannot store {type(c).__name__} content with MIME type {mime!r}; pass text "
                     f"(text/plain, text/markdown), a dict (application/json) or an image "
                     f"(autogen_core.Image, or bytes with an image/* MIME type)")
