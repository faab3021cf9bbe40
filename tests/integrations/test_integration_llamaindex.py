"""LlamaIndex: C3MMemoryBlock in a llama_index Memory behind SimpleChatEngine on MockLLM (which echoes its prompt,
so the test sees exactly what the model was given): a fact with a photo flushed from one chat session is cited
in another, images come back as image blocks, isolation, forget, errors."""
from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("llama_index.core")

from llama_index.core.base.llms.types import ChatMessage, ImageBlock, TextBlock  # noqa: E402
from llama_index.core.chat_engine import SimpleChatEngine  # noqa: E402
from llama_index.core.llms import MockLLM  # noqa: E402
from llama_index.core.memory import Memory as LlamaMemory  # noqa: E402

from c3m.integrations.llamaindex import C3MMemoryBlock  # noqa: E402


def chat(block, session_id, text, **kw):
    memory = LlamaMemory.from_defaults(session_id=session_id, memory_blocks=[block], **kw)
    engine = SimpleChatEngine.from_defaults(llm=MockLLM(), memory=memory)
    return engine, memory, engine.chat(text).response


def test_flushed_turns_are_recalled_in_another_session(mem, png, png_url):
    block = C3MMemoryBlock(mem, namespace="alice")
    # session 1: a photo message, then chat until the short-term memory flushes it into the block (c3m)
    mem1 = LlamaMemory.from_defaults(session_id="chat-1", memory_blocks=[block], token_limit=40,
                                     chat_history_token_ratio=0.5, token_flush_size=10)
    mem1.put(ChatMessage(role="user", blocks=[TextBlock(text="Here is my new kayak, it lives in the garage."),
                                              ImageBlock(image=png, image_mimetype="image/png")]))
    mem1.put(ChatMessage(role="assistant", content="Nice kayak!"))
    for i in range(4):
        mem1.put(ChatMessage(role="user", content=f"filler message number {i} about nothing much at all"))
    alice = mem.tenant("alice")
    stored = [n for n in alice.nodes() if "garage" in n.text]
    assert stored and stored[0].session_id.startswith("chat-1/") and stored[0].images  # the photo is an original image

    # session 2: the block cites the fact (session#turn, time, role) and hands back the photo as an image block
    _, _, echoed = chat(block, "chat-2", "What does my kayak look like and where is it?")
    line = next(ln for ln in echoed.splitlines() if "garage" in ln)
    assert line.lstrip().startswith(f"[{stored[0].session_id}#0 20") and " user]" in line and "<image " in line
    blocks = asyncio.run(block.aget([ChatMessage(role="user", content="What does my kayak look like?")]))
    assert isinstance(blocks[0], TextBlock) and "garage" in blocks[0].text
    images = [b for b in blocks if isinstance(b, ImageBlock)]
    assert images and images[0].url is not None and str(images[0].url) == png_url

    _, _, bob = chat(C3MMemoryBlock(mem, namespace="bob"), "chat-3", "Where is my kayak?")
    assert "garage" not in bob

    alice.forget(session_id=stored[0].session_id, reason="user request")
    _, _, after = chat(block, "chat-4", "Where is my kayak?")
    assert "garage" not in after


def test_bad_input_is_a_value_error(mem):
    with pytest.raises(ValueError, match="valid namespace"):
        C3MMemoryBlock(mem, namespace="not valid!")
    block = C3MMemoryBlock(mem, namespace="carol")
    with pytest.raises(ValueError, match="never fetched"):
        asyncio.run(block.aput([ChatMessage(role="user", blocks=[ImageBlock(url="https://example.com/cat.png")])]))
    assert asyncio.run(block.aget([])) == []
