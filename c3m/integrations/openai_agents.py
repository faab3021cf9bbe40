"""OpenAI Agents SDK: ``C3MSession``, an ``agents.memory.Session`` whose conversation turns are c3m turns, and
``c3m_function_tools`` for long-term recall with provenance (``pip install "c3m[openai-agents]"``;
docs/integrations/openai-agents.md).

    from agents import Agent, Runner
    from c3m.integrations.openai_agents import C3MSession, c3m_function_tools
    agent = Agent(name="assistant", tools=c3m_function_tools("./my-store", namespace="alice"))
    result = await Runner.run(agent, "Hi!", session=C3MSession("conv-1", "./my-store", namespace="alice"))

Each ``add_items`` call (the SDK makes one or two per run) becomes one c3m session ``<session_id>/<n>`` in the
namespace, its messages the turns (text; ``input_image`` data URLs as the turn's original images); tool-call
scaffolding (function calls and their outputs, reasoning items) is not a turn and is not kept. ``get_items``
rebuilds the conversation's messages from the turns (``{"role", "content"}``, images as ``input_image`` data
URLs), ``pop_item`` and ``clear_session`` forget turns (``Memory.forget``: redacted, images deleted).
The tools read every session of the namespace, so a new conversation recalls what an old one said.
"""
from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

from ._core import MemoryWorker, data_url, decode_image, evidence_text, now_utc, require

require("agents", "c3m.integrations.openai_agents")

from agents.exceptions import UserError  # noqa: E402

from ..errors import InvalidInput  # noqa: E402
from ..memory import Memory  # noqa: E402
from ..types import RawNode, ReaderBudget, Session, Turn  # noqa: E402

__all__ = ["C3MSession", "c3m_function_tools"]

_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}


def _plain(item: Any) -> dict:
    if isinstance(item, dict):
        return item
    if hasattr(item, "model_dump"):
        return item.model_dump(exclude_none=True)
    raise UserError(f"C3MSession.add_items: got {type(item).__name__}; pass Responses input items (dicts such as "
                    f"{{'role': 'user', 'content': 'hi'}})")


def _turn_of(item: Any, where: str) -> Turn | None:
    """The c3m turn of a message item; None for items that are not messages (tool calls, reasoning)."""
    item = _plain(item)
    if item.get("type", "message") != "message" or item.get("role") not in _ROLES:
        return None
    content = item.get("content")
    if isinstance(content, str):
        return Turn(_ROLES[item["role"]], content)
    texts, images = [], []
    for k, part in enumerate(content or []):
        part = _plain(part)
        kind = part.get("type")
        if kind in ("input_text", "output_text", "text"):
            texts.append(part.get("text") or "")
        elif kind == "refusal":
            texts.append(part.get("refusal") or "")
        elif kind == "input_image":
            url = part.get("image_url")
            if not url:
                raise UserError(f"{where}.content[{k}]: an input_image without image_url (file_id images are not "
                                f"stored); pass image_url='data:image/png;base64,...'")
            try:
                images.append(decode_image(url, f"{where}.content[{k}].image_url"))
            except ValueError as exc:
                raise UserError(str(exc)) from None
    return Turn(_ROLES[item["role"]], "\n".join(t for t in texts if t), tuple(images))


class C3MSession:
    """An ``agents.memory.Session`` on c3m (module docstring). ``memory``: a store location, an open
    ``c3m.Memory`` or another adapter's ``worker``; ``namespace``: the user's c3m namespace (default: the
    Memory's)."""

    def __init__(self, session_id: str, memory: Memory | str | Path | MemoryWorker, *, namespace: str | None = None,
                 session_settings=None, config=None, models=None):
        if not isinstance(session_id, str) or not session_id.strip():
            raise UserError("C3MSession needs a non-empty session_id: pass e.g. C3MSession('conv-1', './my-store')")
        self.session_id = session_id
        self.session_settings = session_settings
        self.worker = MemoryWorker.of(memory, namespace, config=config, models=models)
        self.namespace = namespace or self.worker.namespace
        try:
            self.worker.call(self.worker.tenant, self.namespace)
        except InvalidInput as exc:
            raise UserError(f"C3MSession: {exc}") from None
        self._pattern = re.compile(re.escape(session_id) + r"/([0-9]+)\Z")

    def _mem(self) -> Memory:
        return self.worker.tenant(self.namespace)

    def _sessions(self) -> list[str]:
        return [s.session_id for s in self._mem().store.sessions(self.namespace) if self._pattern.match(s.session_id)]

    def _nodes(self) -> list[RawNode]:
        store = self._mem().store
        return [n for sid in self._sessions() for n in store.nodes_for_session(self.namespace, sid) if not n.redacted]

    def _item_of(self, node: RawNode) -> dict:
        if node.images and node.role == "user":
            store = self._mem().store
            parts = ([{"type": "input_text", "text": node.text}] if node.text else []) + [
                {"type": "input_image", "image_url": data_url(im.mime, store.image_bytes(im)), "detail": "auto"}
                for im in node.images]
            return {"role": "user", "content": parts}
        return {"role": node.role, "content": node.text}

    def _limit(self, limit: int | None) -> int | None:
        if limit is None and self.session_settings is not None:
            limit = getattr(self.session_settings, "limit", None)
        return limit

    async def get_items(self, limit: int | None = None) -> list[dict]:
        limit = self._limit(limit)

        def run():
            nodes = self._nodes()
            if limit is not None:
                nodes = nodes[-limit:] if limit > 0 else []
            return [self._item_of(n) for n in nodes]
        return await self.worker.acall(run)

    async def add_items(self, items: list) -> None:
        turns = [t for i, item in enumerate(items) if (t := _turn_of(item, f"items[{i}]")) is not None]
        if not turns:
            return

        def run():
            n = len(self._sessions()) + 1
            self._mem().add_session(Session(f"{self.session_id}/{n:04d}", now_utc().replace(tzinfo=None), turns))
        try:
            await self.worker.acall(run)
        except InvalidInput as exc:
            raise UserError(f"C3MSession.add_items: {exc}") from None

    async def pop_item(self) -> dict | None:
        def run():
            nodes = self._nodes()
            if not nodes:
                return None
            item = self._item_of(nodes[-1])
            self._mem().forget(node_ids=[nodes[-1].node_id], reason=f"openai-agents pop_item ({self.session_id})")
            return item
        return await self.worker.acall(run)

    async def clear_session(self) -> None:
        def run():
            ids = [n.node_id for n in self._nodes()]
            if ids:
                self._mem().forget(node_ids=ids, reason=f"openai-agents clear_session ({self.session_id})")
        await self.worker.acall(run)


def c3m_function_tools(memory: Memory | str | Path | MemoryWorker, *, namespace: str | None = None,
                       budget: ReaderBudget | None = None, config=None, models=None) -> list:
    """``recall(query)`` and ``remember(fact)`` as Agents SDK function tools on the namespace's long-term memory.
    ``recall`` returns c3m's budgeted evidence, one cited line per turn (``[session#turn time role] text
    <image sha>``), from every session of the namespace; ``remember`` stores a fact as a session of its own."""
    from agents import function_tool

    worker = MemoryWorker.of(memory, namespace, config=config, models=models)
    ns = namespace or worker.namespace

    async def recall(query: str) -> str:
        """Search the user's long-term memory (all past conversations). Returns evidence lines
        [session#turn date time role] text, oldest first, each citing where it was said."""
        if not query.strip():
            raise UserError("recall needs a non-empty query")
        ctx = await worker.acall(lambda: worker.tenant(ns).retrieve(query, budget))
        return evidence_text(ctx)

    async def remember(fact: str) -> str:
        """Save a fact about the user to long-term memory so later conversations can recall it."""
        sid = f"note-{uuid.uuid4().hex[:16]}"
        try:
            await worker.acall(lambda: worker.tenant(ns).add_session(
                Session(sid, now_utc().replace(tzinfo=None), (Turn("user", fact),))))
        except InvalidInput as exc:
            raise UserError(f"remember: {exc}") from None
        return f"Remembered ({sid})."

    return [function_tool(recall), function_tool(remember)]
