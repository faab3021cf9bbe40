"""LlamaIndex: ``C3MMemoryBlock``, a ``llama_index.core.memory.BaseMemoryBlock`` that brings cited c3m evidence
(and the original images, as image content blocks) into a ``Memory`` (``pip install "c3m[llamaindex]"``;
docs/integrations/llamaindex.md).

    from llama_index.core.memory import Memory
    from c3m.integrations.llamaindex import C3MMemoryBlock
    memory = Memory.from_defaults(session_id="conv-1", memory_blocks=[C3MMemoryBlock("./my-store", namespace="alice")])

``aget`` reads c3m for the latest user message (budgeted, provenance on every line: ``[session#turn time role]
text <image sha>``) and returns a text block followed by one image block per original image (a
``data:<mime>;base64`` URL). ``aput`` (messages the short-term memory flushes) writes them as one c3m session
``<session_id>/<n>``: their text and image blocks become the turns' text and original images.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, List, Optional

from ._core import MemoryWorker, data_url, decode_image, evidence_text, now_utc, require

require("llama_index.core.memory", "c3m.integrations.llamaindex")

from llama_index.core.base.llms.types import ChatMessage, ContentBlock, ImageBlock, TextBlock  # noqa: E402
from llama_index.core.memory import BaseMemoryBlock  # noqa: E402
from pydantic import Field, PrivateAttr  # noqa: E402

from ..errors import InvalidInput  # noqa: E402
from ..memory import Memory  # noqa: E402
from ..types import ReaderBudget, Session, Turn  # noqa: E402

__all__ = ["C3MMemoryBlock"]

_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}


class C3MMemoryBlock(BaseMemoryBlock[List[ContentBlock]]):
    """Long-term memory from c3m as a LlamaIndex memory block (module docstring). ``memory``: a store location,
    an open ``c3m.Memory`` or another adapter's ``worker``; ``namespace``: the user's c3m namespace."""

    name: str = Field(default="c3m_memory", description="The name of the memory block.")
    description: Optional[str] = Field(default="Evidence from past sessions, cited by session, turn and time.")
    namespace: Optional[str] = Field(default=None, description="c3m namespace (one per user)")
    budget: Optional[ReaderBudget] = Field(default=None, description="reader budget (default: the Memory's)")
    include_images: bool = Field(default=True, description="return the evidence's original images as image blocks")
    _worker: MemoryWorker = PrivateAttr()

    def __init__(self, memory: Memory | str | Path | MemoryWorker, **data: Any):
        config, models = data.pop("config", None), data.pop("models", None)
        super().__init__(**data)
        self._worker = MemoryWorker.of(memory, self.namespace, config=config, models=models)
        if self.namespace is None:
            self.namespace = self._worker.namespace
        try:
            self._worker.call(self._worker.tenant, self.namespace)
        except InvalidInput as exc:
            raise ValueError(f"C3MMemoryBlock: {exc}") from None

    @property
    def worker(self) -> MemoryWorker:
        return self._worker

    async def _aget(self, messages: Optional[List[ChatMessage]] = None, **block_kwargs: Any) -> List[ContentBlock]:
        query = next((m.content for m in reversed(messages or []) if m.role == "user" and m.content), None)
        if not query or not query.strip():
            return []
        w = self._worker

        def run():
            mem = w.tenant(self.namespace)
            ctx = mem.retrieve(query, self.budget)
            if not ctx.items:
                return []
            blocks: list = [TextBlock(text="Evidence from past sessions ([session#turn time role] text):\n"
                                           + evidence_text(ctx))]
            if self.include_images:
                seen = set()
                for item in ctx.items:
                    for im in item.images:
                        if im.sha256 not in seen:
                            seen.add(im.sha256)
                            blocks.append(ImageBlock(url=data_url(im.mime, mem.image_bytes(im)),
                                                     image_mimetype=im.mime))
            return blocks
        return await w.acall(run)

    async def _aput(self, messages: List[ChatMessage]) -> None:
        turns = []
        for i, m in enumerate(messages):
            role = _ROLES.get(getattr(m.role, "value", m.role))
            if role is None:
                continue  # tool messages are scaffolding, not turns
            texts, images = [], []
            for k, b in enumerate(m.blocks):
                if isinstance(b, TextBlock):
                    texts.append(b.text)
                elif isinstance(b, ImageBlock):
                    images.append(_image_bytes(b, f"messages[{i}].blocks[{k}]"))
            if texts or images:
                turns.append(Turn(role, "\n".join(texts), tuple(images)))
        if not turns:
            return
        conv = next((m.additional_kwargs.get("session_id") for m in messages if m.additional_kwargs.get("session_id")),
                    "llamaindex")
        w = self._worker

        def run():
            mem = w.tenant(self.namespace)
            n = sum(1 for s in mem.store.sessions(self.namespace) if s.session_id.startswith(f"{conv}/")) + 1
            mem.add_session(Session(f"{conv}/{n:04d}", now_utc().replace(tzinfo=None), turns))
        try:
            await w.acall(run)
        except InvalidInput as exc:
            raise ValueError(f"C3MMemoryBlock.aput: {exc}") from None


def _image_bytes(block: ImageBlock, where: str) -> bytes:
    if block.image is not None:
        data = block.image if isinstance(block.image, bytes) else block.image.read()
        try:  # LlamaIndex keeps image bytes base64-encoded once validated
            return decode_image({"data": data.decode("ascii")}, where)
        except (ValueError, UnicodeDecodeError):
            return data
    if block.path is not None:
        return Path(block.path).read_bytes()
    if block.url is not None and str(block.url).startswith("data:"):
        return decode_image(str(block.url), where)
    raise ValueError(f"{where}: an image block c3m cannot store (remote URLs are never fetched); pass "
                     f"ImageBlock(image=<bytes>) or ImageBlock(path=...) or a data URL")
