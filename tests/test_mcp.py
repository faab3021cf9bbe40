"""``c3m.server.mcp``: the MCP server, driven by the official SDK's own client over stdio and streamable HTTP.

Each test starts the server as a subprocess (``python -m c3m.server.mcp``) on a fresh store with the cheap
offline models (hashing embedder, dense top-k, extractive answerer), so nothing here downloads or loads a model.
"""
from __future__ import annotations

import base64
import io
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("mcp")

import anyio  # noqa: E402  (after the importorskip: anyio comes with mcp)
from mcp import ClientSession, StdioServerParameters, stdio_client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CONFIG = 'method = "dense-topk"\ntext_embedder = "hashing"\nanswerer = "extractive"\n'
NS = "user-42"


def _png(color=(200, 30, 30)) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (8, 6), color).save(buf, format="PNG")
    return buf.getvalue()


def _server_args(tmp_path: Path, *extra: str) -> list[str]:
    cfg = tmp_path / "c3m.toml"
    cfg.write_text(CONFIG)
    return ["-m", "c3m.server.mcp", "--store", str(tmp_path / "store"), "--config", str(cfg), *extra]


def _env() -> dict[str, str]:
    return {"PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def _stdio(tmp_path: Path, body, *extra: str):
    """Run ``body(session)`` against a stdio server subprocess; returns its result."""

    async def main():
        params = StdioServerParameters(command=sys.executable, args=_server_args(tmp_path, *extra), env=_env(),
                                       cwd=str(REPO))
        with anyio.fail_after(60), (tmp_path / "server.stderr").open("w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    return await body(session)

    return anyio.run(main)


def _texts(result) -> list[str]:
    return [c.text for c in result.content if c.type == "text"]


def _provenance(result) -> dict:
    return json.loads(_texts(result)[-1])["provenance"]


def _session_turns(png: bytes) -> list[dict]:
    return [{"role": "user", "text": "My bike is red and I keep it in the garage."},
            {"role": "assistant", "text": "Noted."},
            {"role": "user", "text": "Here is a photo of my cat Miso.", "images": [base64.b64encode(png).decode()]}]


def test_tools_list_with_schemas_naming_their_parameters(tmp_path):
    async def body(s: ClientSession):
        return {t.name: t for t in (await s.list_tools()).tools}

    tools = _stdio(tmp_path, body)
    assert set(tools) == {"remember", "recall", "ask", "forget"}
    props = {n: t.input_schema["properties"] for n, t in tools.items()}
    assert {"namespace", "turns", "session_id", "time"} <= set(props["remember"])
    assert {"namespace", "question", "max_nodes", "max_images", "max_text_tokens", "max_pages"} <= set(props["recall"])
    assert {"namespace", "question"} <= set(props["ask"])
    assert {"namespace", "node_ids", "session_id", "reason"} <= set(props["forget"])
    assert set(tools["remember"].input_schema["required"]) == {"turns", "namespace"}  # unpinned: namespace needed
    assert set(tools["recall"].input_schema["required"]) == {"question", "namespace"}
    turn = tools["remember"].input_schema["$defs"]["TurnIn"]["properties"]
    assert set(turn) == {"role", "text", "images"} and turn["role"]["enum"] == ["user", "assistant", "system"]
    assert all(t.description and "Use" in t.description for t in tools.values())  # tells an LLM when to call it
    assert tools["recall"].annotations.read_only_hint and tools["forget"].annotations.destructive_hint


def test_remember_recall_ask_forget(tmp_path):
    png = _png()

    async def body(s: ClientSession):
        out = {}
        out["remember"] = await s.call_tool("remember", {"namespace": NS, "turns": _session_turns(png),
                                                         "session_id": "s1", "time": "2026-03-02T10:00:00Z"})
        out["again"] = await s.call_tool("remember", {"namespace": NS, "turns": _session_turns(png),
                                                      "session_id": "s1", "time": "2026-03-02T10:00:00Z"})
        out["recall"] = await s.call_tool("recall", {"namespace": NS, "question": "What colour is my bike?"})
        out["cat"] = await s.call_tool("recall", {"namespace": NS, "question": "photo of my cat Miso",
                                                  "max_nodes": 1})
        out["ask"] = await s.call_tool("ask", {"namespace": NS, "question": "What colour is my bike?"})
        bike = [i["node_id"] for i in _provenance(out["recall"])["items"] if i["turn_index"] == 0]
        out["forget"] = await s.call_tool("forget", {"namespace": NS, "node_ids": bike, "reason": "user asked"})
        out["after"] = await s.call_tool("recall", {"namespace": NS, "question": "What colour is my bike?"})
        out["other"] = await s.call_tool("recall", {"namespace": "someone-else", "question": "bike?"})
        return out, bike

    out, bike = _stdio(tmp_path, body)
    rem = out["remember"]
    assert not rem.is_error
    assert rem.structured_content == {"session_id": "s1", "seq": 1, "created": True, "raw_nodes": 3, "images": 1}
    assert out["again"].structured_content["created"] is False  # identical session: stored once

    rec = out["recall"]
    assert not rec.is_error
    text = _texts(rec)[0]
    assert "My bike is red" in text and "[s1#0 2026-03-02 10:00 user]" in text  # the citation header
    imgs = [c for c in rec.content if c.type == "image"]
    assert imgs and imgs[0].mime_type == "image/png" and base64.b64decode(imgs[0].data) == png
    prov = _provenance(rec)
    assert prov["method"] and prov["use"]["raw_nodes"] == len(prov["items"]) >= 1
    item = next(i for i in prov["items"] if i["turn_index"] == 0)
    assert item["session_id"] == "s1" and item["node_id"].startswith("n-") and item["time"].startswith("2026-03-02")

    cat = out["cat"]  # budget override: one node, the photo turn, and its image
    assert _provenance(cat)["budget"]["raw_nodes"] == 1 and len(_provenance(cat)["items"]) == 1
    assert [base64.b64decode(c.data) for c in cat.content if c.type == "image"] == [png]

    ask = out["ask"]
    assert not ask.is_error and "red" in _texts(ask)[0].lower()
    assert _provenance(ask)["answerer"]

    fg = out["forget"]
    assert not fg.is_error and fg.structured_content["node_ids"] == bike and len(bike) == 1
    after = out["after"]
    assert not after.is_error and "My bike is red" not in _texts(after)[0]
    assert bike[0] not in {i["node_id"] for i in _provenance(after)["items"]}
    assert "My bike is red" not in _texts(out["other"])[0]  # namespaces do not see each other


def test_bad_inputs_are_tool_errors_naming_the_field(tmp_path):
    async def body(s: ClientSession):
        return {
            "question": await s.call_tool("recall", {"namespace": NS, "question": "   "}),
            "namespace": await s.call_tool("recall", {"namespace": "bad namespace!", "question": "bike?"}),
            "image": await s.call_tool("remember", {"namespace": NS, "turns": [
                {"role": "user", "text": "look", "images": ["not base64 !!"]}]}),
            "not_an_image": await s.call_tool("remember", {"namespace": NS, "turns": [
                {"role": "user", "text": "look", "images": [base64.b64encode(b"hello").decode()]}]}),
            "time": await s.call_tool("remember", {"namespace": NS, "time": "yesterday",
                                                   "turns": [{"role": "user", "text": "hi"}]}),
            "role": await s.call_tool("remember", {"namespace": NS, "turns": [{"role": "robot", "text": "hi"}]}),
            "forget": await s.call_tool("forget", {"namespace": NS, "reason": "x"}),
            "missing_ns": await s.call_tool("recall", {"question": "bike?"}),
        }

    got = _stdio(tmp_path, body)
    assert all(r.is_error for r in got.values()), {k: r.content for k, r in got.items() if not r.is_error}
    msg = {k: _texts(r)[0] for k, r in got.items()}
    assert "question" in msg["question"] and "fix" in msg["question"]
    assert "namespace" in msg["namespace"] and "fix" in msg["namespace"]
    assert "turns[0].images[0]" in msg["image"] and "base64" in msg["image"]
    assert "turns[0].images[0]" in msg["not_an_image"]
    assert "time" in msg["time"] and "ISO" in msg["time"]
    assert "role" in msg["role"]
    assert "node_ids" in msg["forget"]
    assert "namespace" in msg["missing_ns"]


def test_pinned_namespace_defaults_and_refuses_others(tmp_path):
    async def body(s: ClientSession):
        tools = {t.name: t for t in (await s.list_tools()).tools}
        rem = await s.call_tool("remember", {"turns": [{"role": "user", "text": "I live in Lisbon."}]})
        mine = await s.call_tool("recall", {"question": "Where do I live?"})
        same = await s.call_tool("recall", {"namespace": "alice", "question": "Where do I live?"})
        other = await s.call_tool("recall", {"namespace": "bob", "question": "Where do I live?"})
        write = await s.call_tool("remember", {"namespace": "bob", "turns": [{"role": "user", "text": "x"}]})
        return tools, rem, mine, same, other, write

    tools, rem, mine, same, other, write = _stdio(tmp_path, body, "--namespace", "alice")
    assert "namespace" not in tools["recall"].input_schema.get("required", [])
    assert tools["recall"].input_schema["properties"]["namespace"]["default"] == "alice"
    assert not rem.is_error and rem.structured_content["created"]
    assert "Lisbon" in _texts(mine)[0] and "Lisbon" in _texts(same)[0]
    for r in (other, write):
        assert r.is_error and "namespace" in _texts(r)[0] and "'alice'" in _texts(r)[0]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_streamable_http(tmp_path):
    port = _free_port()
    errlog = (tmp_path / "http.stderr").open("w")
    proc = subprocess.Popen([sys.executable, *_server_args(tmp_path, "--transport", "streamable-http",
                                                           "--port", str(port))],
                            cwd=REPO, env={**os.environ, **_env()}, stdout=subprocess.DEVNULL, stderr=errlog)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"server did not start: {(tmp_path / 'http.stderr').read_text()}")
                time.sleep(0.1)

        async def main():
            async with streamable_http_client(f"http://127.0.0.1:{port}/mcp") as (read, write):
                async with ClientSession(read, write) as s:
                    await s.initialize()
                    rem = await s.call_tool("remember", {"namespace": NS, "turns": [
                        {"role": "user", "text": "My dentist appointment is on Friday."}]})
                    rec = await s.call_tool("recall", {"namespace": NS, "question": "When is my dentist appointment?"})
                    return rem, rec

        rem, rec = anyio.run(main)
        assert not rem.is_error and not rec.is_error
        assert "dentist appointment is on Friday" in _texts(rec)[0]
        assert _provenance(rec)["items"][0]["session_id"] == rem.structured_content["session_id"]
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        errlog.close()


def test_allowed_refuses_namespaces_in_process(tmp_path):
    """``build_mcp(engine, allowed=...)`` (e.g. an API key's ``KeyRecord.allows``), called in-process."""
    from mcp.server.mcpserver.exceptions import ToolError

    from c3m.config import MemoryConfig
    from c3m.server.engine import Engine
    from c3m.server.mcp import build_mcp

    cfg = MemoryConfig(method="dense-topk", text_embedder="hashing", answerer="extractive")
    with Engine(tmp_path / "store", cfg) as engine:
        server = build_mcp(engine, allowed=lambda ns: ns.startswith("team/"))

        async def main():
            ok = await server.call_tool("remember", {"namespace": "team/a", "turns": [
                {"role": "user", "text": "The launch is on Tuesday."}]})
            rec = await server.call_tool("recall", {"namespace": "team/a", "question": "When is the launch?"})
            with pytest.raises(ToolError, match="namespace.*not allowed"):
                await server.call_tool("recall", {"namespace": "other", "question": "When is the launch?"})
            return ok, rec

        ok, rec = anyio.run(main)
        assert ok.structured_content["created"] and "launch is on Tuesday" in _texts(rec)[0]


def test_streamable_http_refuses_a_public_host(tmp_path):
    from c3m.errors import InvalidInput
    from c3m.server.mcp import run_mcp

    with pytest.raises(InvalidInput) as exc:
        run_mcp(tmp_path / "s", transport="streamable-http", host="0.0.0.0")
    assert exc.value.field == "--host" and "127.0.0.1" in exc.value.fix
