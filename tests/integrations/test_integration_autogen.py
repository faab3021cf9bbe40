"""AutoGen: C3MMemory on an AssistantAgent with ReplayChatCompletionClient (recording what the model was given):
a fact with a photo added in one session is put into the model context in another, cited; query returns the
original image; isolation; forget and clear; errors."""
from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("autogen_core")
pytest.importorskip("autogen_agentchat")
pytest.importorskip("autogen_ext.models.replay")

from autogen_agentchat.agents import AssistantAgent  # noqa: E402
from autogen_agentchat.messages import MemoryQueryEvent  # noqa: E402
from autogen_core import Image  # noqa: E402
from autogen_core.memory import MemoryContent, MemoryMimeType  # noqa: E402
from autogen_core.models import SystemMessage  # noqa: E402
from autogen_ext.models.replay import ReplayChatCompletionClient  # noqa: E402

from c3m.integrations.autogen import C3MMemory  # noqa: E402


class RecordingReplay(ReplayChatCompletionClient):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seen = []

    async def create(self, messages, **kwargs):
        self.seen.append(list(messages))
        return await super().create(messages, **kwargs)


def ask(memory, task):
    client = RecordingReplay(["OK."])
    agent = AssistantAgent("assistant", model_client=client, memory=[memory])
    result = asyncio.run(agent.run(task=task))
    system = "\n".join(m.content for m in client.seen[0] if isinstance(m, SystemMessage))
    events = [e for e in result.messages if isinstance(e, MemoryQueryEvent)]
    return system, events


def test_added_in_one_session_in_context_in_another(mem, png):
    alice = C3MMemory(mem, namespace="alice")
    asyncio.run(alice.add(MemoryContent(content="My kayak is red and lives in the garage.", mime_type=MemoryMimeType.TEXT,
                                        metadata={"session_id": "chat-1"})))
    asyncio.run(alice.add(MemoryContent(content=Image.from_base64(__import__("base64").b64encode(png).decode()),
                                        mime_type=MemoryMimeType.IMAGE, metadata={"text": "photo of my red kayak"})))
    system, events = ask(alice, "Where is my kayak?")
    line = next(ln for ln in system.splitlines() if "garage" in ln)
    assert line.startswith("[chat-1#0 20") and " user]" in line          # session#turn, time, role
    assert events and any("garage" in str(c.content) for c in events[0].content)

    found = asyncio.run(alice.query("what does my kayak look like?")).results
    texts = [r for r in found if r.mime_type == MemoryMimeType.TEXT]
    assert texts and all({"session_id", "turn_index", "time", "images"} <= set(r.metadata) for r in texts)
    pics = [r for r in found if r.mime_type == MemoryMimeType.IMAGE]
    assert pics and isinstance(pics[0].content, Image)
    assert __import__("base64").b64decode(pics[0].content.to_base64()) == png   # the original image
    assert mem.tenant("alice").image_bytes(pics[0].metadata["image_sha256"]) == png

    bob_system, _ = ask(C3MMemory(mem, namespace="bob"), "Where is my kayak?")
    assert "garage" not in bob_system

    mem.tenant("alice").forget(session_id="chat-1", reason="user request")
    after, _ = ask(alice, "Where is my kayak?")
    assert "garage" not in after
    asyncio.run(alice.clear())
    assert all(n.redacted for n in mem.tenant("alice").nodes())
    asyncio.run(alice.close())


def test_bad_input_is_a_value_error(mem):
    with pytest.raises(ValueError, match="valid namespace"):
        C3MMemory(mem, namespace="bad namespace")
    m = C3MMemory(mem, namespace="carol")
    with pytest.raises(ValueError, match="cannot store"):
        asyncio.run(m.add(MemoryContent(content=b"\x00\x01", mime_type=MemoryMimeType.BINARY)))
    with pytest.raises(ValueError, match="non-empty"):
        asyncio.run(m.query(""))
