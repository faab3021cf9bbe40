"""OpenAI Agents SDK: C3MSession and c3m_function_tools under Runner.run with a scripted Model (no network): a fact
with a photo said in one conversation is recalled in another with provenance; per-user isolation; forget; the
Session protocol (get/add/pop/clear); errors are the SDK's UserError naming the fix."""
from __future__ import annotations

import asyncio
import json

import pytest

pytest.importorskip("agents")

from agents import Agent, ModelResponse, Runner, Usage, set_tracing_disabled  # noqa: E402
from agents.exceptions import UserError  # noqa: E402
from agents.memory import Session as SessionProtocol  # noqa: E402
from agents.models.interface import Model  # noqa: E402
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText  # noqa: E402

from c3m.integrations.openai_agents import C3MSession, c3m_function_tools  # noqa: E402

set_tracing_disabled(True)


def say(text):
    return ResponseOutputMessage(id="m", type="message", role="assistant", status="completed",
                                 content=[ResponseOutputText(type="output_text", text=text, annotations=[])])


def call(name, **args):
    return ResponseFunctionToolCall(type="function_call", call_id=f"call-{name}", name=name,
                                    arguments=json.dumps(args))


class ScriptedModel(Model):
    """The SDK's Model interface answering from a script; it records every input it was given."""

    def __init__(self, *outputs):
        self.outputs = list(outputs)
        self.inputs = []

    async def get_response(self, system_instructions, input, model_settings, tools, output_schema, handoffs, tracing,
                           *, previous_response_id=None, conversation_id=None, prompt=None, **kwargs):
        self.inputs.append(input)
        return ModelResponse(output=[self.outputs.pop(0)], usage=Usage(), response_id=None)

    def stream_response(self, *args, **kwargs):
        raise NotImplementedError


def run(model, tools, text, session):
    agent = Agent(name="assistant", instructions="Use recall for anything about the user.", model=model, tools=tools)
    return asyncio.run(Runner.run(agent, text, session=session))


def tool_output(model):
    return next(i["output"] for i in model.inputs[-1] if isinstance(i, dict) and i.get("type") == "function_call_output")


def test_remembered_in_one_conversation_recalled_in_another(mem, png_url, png):
    tools = c3m_function_tools(mem, namespace="alice")
    conv1 = C3MSession("conv-1", mem, namespace="alice")
    assert isinstance(conv1, SessionProtocol)
    photo_msg = {"role": "user", "content": [{"type": "input_text", "text": "Here is my new kayak, it lives in the garage."},
                                             {"type": "input_image", "image_url": png_url, "detail": "auto"}]}
    run(ScriptedModel(say("Nice kayak!")), tools, [photo_msg], conv1)
    items = asyncio.run(conv1.get_items())
    assert items == [photo_msg, {"role": "assistant", "content": "Nice kayak!"}]   # the image comes back as it went in

    model = ScriptedModel(call("recall", query="what does my kayak look like and where is it?"), say("Found it."))
    result = run(model, tools, "Where is my kayak?", C3MSession("conv-2", mem, namespace="alice"))
    assert result.final_output == "Found it."
    out = tool_output(model)
    line = next(ln for ln in out.splitlines() if "garage" in ln)
    assert line.startswith("[conv-1/0001#0 20") and " user]" in line and "<image " in line   # session#turn, time, image
    alice = mem.tenant("alice")
    sha = next(im.sha256 for n in alice.nodes() for im in n.images)
    assert sha[:12] in line and alice.image_bytes(sha) == png

    bob = ScriptedModel(call("recall", query="where is my kayak?"), say("No idea."))
    run(bob, c3m_function_tools(mem, namespace="bob"), "Where is my kayak?", C3MSession("conv-3", mem, namespace="bob"))
    assert "garage" not in tool_output(bob)

    alice.forget(session_id="conv-1/0001", reason="user request")            # forget through c3m itself
    assert asyncio.run(conv1.get_items()) == [{"role": "assistant", "content": "Nice kayak!"}]  # the SDK's 2nd add
    again = ScriptedModel(call("recall", query="where is my kayak?"), say("No idea."))
    run(again, tools, "Where is my kayak?", C3MSession("conv-4", mem, namespace="alice"))
    assert "garage" not in tool_output(again)


def test_history_is_replayed_and_remember_tool(mem):
    s = C3MSession("c", mem, namespace="carol")
    tools = c3m_function_tools(s.worker, namespace="carol")                   # one worker shared by both
    run(ScriptedModel(call("remember", fact="My sister is called Ana."), say("Saved.")), tools, "Remember my sister is Ana.", s)
    model = ScriptedModel(say("Ana."))
    run(model, tools, "What is my sister called?", s)
    texts = [i.get("content") for i in model.inputs[0] if isinstance(i, dict) and i.get("role")]
    assert texts[:2] == ["Remember my sister is Ana.", "Saved."] and texts[-1] == "What is my sister called?"
    assert any(n.session_id.startswith("note-") and "Ana" in n.text for n in mem.tenant("carol").nodes())


def test_session_protocol(mem):
    s = C3MSession("p", mem, namespace="dave")
    asyncio.run(s.add_items([{"role": "user", "content": "one"}, {"role": "assistant", "content": "two"}]))
    asyncio.run(s.add_items([{"type": "function_call", "call_id": "x", "name": "f", "arguments": "{}"},
                             {"role": "user", "content": "three"}]))
    assert [i["content"] for i in asyncio.run(s.get_items())] == ["one", "two", "three"]
    assert [i["content"] for i in asyncio.run(s.get_items(limit=2))] == ["two", "three"]
    assert asyncio.run(s.pop_item()) == {"role": "user", "content": "three"}
    assert [i["content"] for i in asyncio.run(s.get_items())] == ["one", "two"]
    asyncio.run(s.clear_session())
    assert asyncio.run(s.get_items()) == [] and asyncio.run(s.pop_item()) is None
    assert all(n.redacted for n in mem.tenant("dave").nodes())


def test_bad_input_is_a_user_error(mem):
    with pytest.raises(UserError, match="session_id"):
        C3MSession("", mem)
    with pytest.raises(UserError, match="valid namespace"):
        C3MSession("c", mem, namespace="no spaces allowed")
    s = C3MSession("c", mem, namespace="erin")
    with pytest.raises(UserError, match="never fetched"):
        asyncio.run(s.add_items([{"role": "user", "content": [
            {"type": "input_image", "image_url": "https://example.com/cat.png"}]}]))
    assert asyncio.run(s.get_items()) == []


def test_adapters_on_one_store_path_share_one_worker(tmp_path):
    """Given a store location, every adapter in the process uses one worker: the models load once, one connection."""
    pytest.importorskip("autogen_core")
    from c3m.integrations.autogen import C3MMemory

    where = str(tmp_path / "shared-store")
    a, b = C3MSession("c1", where, namespace="u1"), C3MSession("c2", where, namespace="u2")
    auto = C3MMemory(where, namespace="u3")
    assert a.worker is b.worker is auto.worker and (a.namespace, b.namespace, auto.namespace) == ("u1", "u2", "u3")
    asyncio.run(auto.close())                                # closing one adapter leaves the shared worker open
    asyncio.run(a.add_items([{"role": "user", "content": "hello"}]))
    assert asyncio.run(a.get_items()) == [{"role": "user", "content": "hello"}] and asyncio.run(b.get_items()) == []
