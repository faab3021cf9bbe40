"""``c3m mcp``: the memory as a Model Context Protocol server (the official ``mcp`` SDK, stdio or streamable HTTP).

Four tools an agent calls across its sessions, all through the one ``Engine`` (so MCP requests batch with any
other reads on the reader thread, and writes are serialised on the writer thread):

* ``remember`` — store one conversation session (text turns, optional base64 images);
* ``recall``   — the budgeted, provenance-linked context for a question: the context text with citation
  headers, each image the context carries as MCP image content, and the provenance as JSON;
* ``ask``      — an answer read from that context only, with the turns it cites;
* ``forget``   — redact stored turns (privacy), logged with a reason.

``build_mcp(engine, namespace=NS)`` pins the server to one namespace (the desktop case: one user per server):
the tools' ``namespace`` argument then defaults to it and any other namespace is refused. ``allowed`` (a
``namespace -> bool``) refuses namespaces a caller may not use, e.g. ``KeyRecord.allows``.

mcp 2.x renamed ``FastMCP`` to ``mcp.server.mcpserver.MCPServer``; that is what ``build_mcp`` returns. Only
this module imports ``mcp``: the rest of ``c3m.server`` works without the SDK installed.

Stdio: the protocol owns stdout. The SDK points fd 1 at stderr while it serves; the engine (which loads models
before that) is opened with Python's stdout redirected to stderr, and logging goes to stderr.
"""
from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import dataclasses
import functools
import inspect
import json
import logging
import sys
import uuid
from pathlib import Path
from typing import Annotated, Any, Callable, Literal

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, ImageContent, TextContent, ToolAnnotations
from pydantic import BaseModel, Field

from ..config import MemoryConfig
from ..errors import C3MError, InvalidInput
from ..store import check_namespace
from ..types import Context, ReaderBudget, Session, as_json_dict
from .engine import Engine
from .limits import RequestLimits, session_from_json

log = logging.getLogger(__name__)

TRANSPORTS = ("stdio", "streamable-http")
DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 8766

INSTRUCTIONS = (
    "Long-term memory across conversations (c3m). Call `remember` at the end of a conversation (or after an "
    "important exchange) with its turns, so later sessions can use them. Call `recall` before answering a "
    "question that may depend on something the user said or showed earlier (preferences, facts, plans, "
    "photos); cite the [session#turn date role] headers it returns. Call `ask` for a short answer read from "
    "memory only. Call `forget` when the user asks to delete something."
)


# ---------------------------------------------------------------------------------------------
# Tool argument and result types (they become the tools' JSON schemas)
# ---------------------------------------------------------------------------------------------
class TurnIn(BaseModel):
    """One utterance of a conversation session."""

    role: Literal["user", "assistant", "system"] = Field(description="who said it")
    text: str = Field(description="the utterance text (may be empty when the turn only shows images)")
    images: list[str] = Field(default_factory=list,
                              description="images shown in this turn: base64 of the encoded file (PNG, JPEG, "
                                          "...), optionally as a data: URL")


class RememberResult(BaseModel):
    session_id: str = Field(description="the stored session's id (cite or forget it by this id)")
    seq: int = Field(description="the session's position in the namespace's history (1 = first)")
    created: bool = Field(description="False when the identical session was already stored (nothing changed)")
    raw_nodes: int = Field(description="turns stored")
    images: int = Field(description="images stored")


class ForgetResult(BaseModel):
    namespace: str
    node_ids: list[str] = Field(description="the turns (Raw Node ids) redacted")
    blobs_deleted: int = Field(description="original image files deleted")
    snapshots_dropped: int = Field(description="index snapshots dropped (the index is rebuilt without them)")
    derived_redacted: int = Field(default=0, description="derived perception records (captions) redacted")
    crops_deleted: int = Field(default=0, description="grounded-crop images deleted")


Namespace = Annotated[str, Field(description="whose memory: the user or agent namespace, e.g. 'user-42'")]
Question = Annotated[str, Field(description="the question to read memory for, in natural language")]
MaxNodes = Annotated[int | None, Field(ge=0, description="at most this many stored turns (default: the server's)")]
MaxImages = Annotated[int | None, Field(ge=0, description="at most this many images (default: the server's)")]
MaxTokens = Annotated[int | None, Field(ge=0, description="at most this many text tokens (default: the server's)")]
MaxPages = Annotated[int | None, Field(ge=0, description="at most this many index pages (default: the server's)")]


# ---------------------------------------------------------------------------------------------
# Input conversion
# ---------------------------------------------------------------------------------------------
def session_from_args(turns: list[TurnIn], session_id: str | None, time: str | None,
                      limits: RequestLimits | None = None) -> Session:
    """The tool's arguments as a ``Session``, under the HTTP API's request limits and checks
    (``c3m.server.limits``: turns, text length, images per turn, image bytes and pixels, base64)."""
    obj: dict[str, Any] = {"turns": [{"role": t.role, "text": t.text, "images": [{"data": im} for im in t.images]}
                                     for t in turns]}
    if time is not None:
        obj["time"] = time
    if session_id is not None:
        if not session_id.strip():
            raise InvalidInput("session_id", "must be a non-empty string when given", fix="omit it to get a new id")
        obj["id"] = session_id
    elif time is None:  # no time: every call is a new session (with a time, the content hash makes retries idempotent)
        obj["id"] = f"mcp-{uuid.uuid4().hex[:20]}"
    return session_from_json(obj, limits or RequestLimits())


def budget_from_args(base: ReaderBudget, max_nodes=None, max_images=None, max_text_tokens=None,
                     max_pages=None) -> ReaderBudget:
    changes = {k: v for k, v in (("raw_nodes", max_nodes), ("images", max_images),
                                 ("text_tokens", max_text_tokens), ("pages", max_pages)) if v is not None}
    return dataclasses.replace(base, **changes) if changes else base


def provenance(ctx: Context, cited: tuple[str, ...] | None = None) -> dict[str, Any]:
    """The context's provenance as plain JSON: which stored turn each item cites, and the budget it used."""
    items = [{"node_id": it.node_id, "session_id": it.provenance.session_id,
              "turn_index": it.provenance.turn_index, "time": it.provenance.time.isoformat(), "role": it.role,
              "form": as_json_dict(it.form), "score": round(float(it.score), 6), "status": it.status or None,
              "images": [{"sha256": im.sha256, "mime": im.mime, "width": im.width, "height": im.height}
                         for im in it.images]}
             for it in ctx.items if cited is None or it.node_id in cited]
    return {"question": ctx.question, "method": ctx.trace.method, "items": items,
            "use": as_json_dict(ctx.use), "budget": as_json_dict(ctx.budget)}


def _error_text(exc: C3MError) -> str:
    return str(exc)  # InvalidInput: "field 'x': message (fix: ...)"; others: "message (fix: ...)"


# ---------------------------------------------------------------------------------------------
# The server
# ---------------------------------------------------------------------------------------------
def build_mcp(engine: Engine, *, namespace: str | None = None,
              allowed: Callable[[str], bool] | None = None) -> MCPServer:
    """An MCP server (``MCPServer``, mcp 2.x's FastMCP) with the ``remember``/``recall``/``ask``/``forget`` tools
    over ``engine``. ``namespace`` pins it to one namespace; ``allowed(ns)`` refuses namespaces it returns False
    for."""
    fixed = check_namespace(namespace) if namespace is not None else None
    base_budget = engine.config.reader_budget

    def resolve(ns: str | None) -> str:
        if ns is None or (isinstance(ns, str) and not ns.strip()):
            if fixed is None:
                raise InvalidInput("namespace", "is required", fix="pass the user's namespace, e.g. 'user-42'")
            ns = fixed
        ns = check_namespace(ns)
        if fixed is not None and ns != fixed:
            raise InvalidInput("namespace", f"this server serves namespace {fixed!r} only, not {ns!r}",
                               fix=f"omit namespace (it defaults to {fixed!r}) or connect to that namespace's server")
        if allowed is not None and not allowed(ns):
            raise InvalidInput("namespace", f"access to {ns!r} is not allowed",
                               fix="use a namespace your credentials grant")
        return ns

    async def remember(*, turns: Annotated[list[TurnIn], Field(description="the session's turns, in order")],
                       namespace: str | None = None,
                       session_id: Annotated[str | None, Field(description="a stable id for the session (default: "
                                                               "derived from its content and time)")] = None,
                       time: Annotated[str | None, Field(description="when the session happened, ISO 8601 "
                                                         "(default: now, UTC)")] = None) -> RememberResult:
        """Store one conversation session in long-term memory so later sessions can recall it.

        Use at the end of a conversation (or after an important exchange): pass its turns in order, with any
        images the user showed as base64. Stored turns are immutable; sending the identical session again
        changes nothing. Returns the session id (for citing or forgetting it)."""
        ns = resolve(namespace)
        session = session_from_args(turns, session_id, time)
        res = await asyncio.wrap_future(engine.write(lambda m: m.tenant(ns).add_session(session)))
        return RememberResult(session_id=res.session_id, seq=res.seq, created=res.created,
                              raw_nodes=res.raw_nodes, images=res.images)

    async def recall(*, question: Question, namespace: str | None = None, max_nodes: MaxNodes = None,
                     max_images: MaxImages = None, max_text_tokens: MaxTokens = None,
                     max_pages: MaxPages = None) -> CallToolResult:
        """Read long-term memory for a question: the stored turns (and images) most relevant to it, within a
        budget.

        Use before answering anything that may depend on earlier conversations: the user's preferences, facts
        they told you, plans, things they showed in photos, or how something changed over time. Returns the
        context text, one block per remembered turn headed [session#turn date time role], then each image
        the turns carry, then a JSON provenance block (node ids, session ids, turn indices, times, budget use).
        Cite the headers when you use a memory."""
        ns = resolve(namespace)
        budget = budget_from_args(base_budget, max_nodes, max_images, max_text_tokens, max_pages)
        ctx = await asyncio.wrap_future(engine.retrieve(ns, _question(question), budget))
        refs = list({im.sha256: im for it in ctx.items for im in it.images}.values())

        def load(m):
            t, out = m.tenant(ns), []
            for ref in refs:
                try:
                    out.append((ref, t.image_bytes(ref)))
                except C3MError as exc:  # forgotten or damaged since the read: say so, show the rest
                    log.warning("recall: image %s unavailable: %s", ref.sha256[:12], exc)
            return out

        images = await asyncio.wrap_future(engine.read(load)) if refs else []
        text = ctx.text() or f"(nothing in memory of {ns!r} matches this question)"
        content: list = [TextContent(type="text", text=text)]
        content += [ImageContent(type="image", data=base64.b64encode(data).decode("ascii"), mime_type=ref.mime)
                    for ref, data in images]
        content.append(TextContent(type="text", text=json.dumps({"provenance": provenance(ctx)}, indent=1)))
        return CallToolResult(content=content)

    async def ask(*, question: Question, namespace: str | None = None, max_nodes: MaxNodes = None,
                  max_images: MaxImages = None, max_text_tokens: MaxTokens = None,
                  max_pages: MaxPages = None) -> CallToolResult:
        """Answer a question from long-term memory only, citing the remembered turns the answer comes from.

        Use for a short factual answer about earlier conversations ("what colour is my bike now?"); use
        `recall` instead when you want to read the evidence (and images) yourself. Returns the answer text,
        then a JSON block with the answerer and the cited turns' provenance."""
        ns = resolve(namespace)
        budget = budget_from_args(base_budget, max_nodes, max_images, max_text_tokens, max_pages)
        q = _question(question)
        ans = await asyncio.wrap_future(engine.read(lambda m: m.tenant(ns).ask(q, budget)))
        prov = provenance(ans.context, tuple(ans.cited))
        prov["answerer"], prov["cited"] = ans.answerer, list(ans.cited)
        return CallToolResult(content=[TextContent(type="text", text=ans.text or "(no answer)"),
                                       TextContent(type="text", text=json.dumps({"provenance": prov}, indent=1))])

    async def forget(*, reason: Annotated[str, Field(description="why (kept in the store's forget log)")],
                     namespace: str | None = None,
                     node_ids: Annotated[list[str] | None, Field(description="turns to forget: node ids from "
                                                                 "recall's provenance")] = None,
                     session_id: Annotated[str | None, Field(description="forget every turn of this "
                                                             "session")] = None) -> ForgetResult:
        """Permanently redact remembered turns (and their images) from long-term memory.

        Use when the user asks you to forget something: pass the node ids from `recall`'s provenance, or a
        whole session id, and the reason. Redaction is logged; later recalls no longer show the turns."""
        ns = resolve(namespace)
        if not node_ids and session_id is None:
            raise InvalidInput("node_ids", "nothing to forget", fix="pass node_ids (from recall's provenance) "
                                                                    "or session_id")
        if not isinstance(reason, str) or not reason.strip():
            raise InvalidInput("reason", "must be a non-empty string", fix="say why, e.g. 'user asked'")
        ids = list(node_ids or ())
        rep = await asyncio.wrap_future(engine.write(
            lambda m: m.tenant(ns).forget(node_ids=ids, session_id=session_id, reason=reason)))
        return ForgetResult(namespace=rep.namespace, node_ids=list(rep.node_ids), blobs_deleted=rep.blobs_deleted,
                            snapshots_dropped=rep.snapshots_dropped, derived_redacted=rep.derived_redacted,
                            crops_deleted=rep.crops_deleted)

    server = MCPServer(name="c3m", instructions=INSTRUCTIONS, version=_version(), log_level="WARNING")
    ro = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
    for fn, ann in ((remember, ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True,
                                               open_world_hint=False)),
                    (recall, ro), (ask, ro),
                    (forget, ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True,
                                             open_world_hint=False))):
        server.add_tool(_tool(fn, fixed), annotations=ann)
    return server


def _question(q: str) -> str:
    if not isinstance(q, str) or not q.strip():
        raise InvalidInput("question", "must be a non-empty string", fix="ask a question")
    return q


def _tool(fn: Callable, fixed: str | None) -> Callable:
    """``fn`` as a tool: c3m errors become tool errors (field + fix), and ``namespace`` is required unless the
    server is pinned to one (then it defaults to it)."""

    @functools.wraps(fn)
    async def tool(**kwargs):
        try:
            return await fn(**kwargs)
        except ToolError:
            raise
        except C3MError as exc:
            raise ToolError(_error_text(exc)) from None

    sig = inspect.signature(fn, eval_str=True)
    params = []
    for p in sig.parameters.values():
        if p.name == "namespace":
            if fixed is None:
                p = p.replace(annotation=Namespace, default=inspect.Parameter.empty)
            else:
                p = p.replace(annotation=Annotated[str | None, Field(
                    description=f"whose memory; this server serves {fixed!r} only (the default)")], default=fixed)
        params.append(p)
    tool.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
    del tool.__wrapped__  # the SDK reads the signature above, not fn's
    return tool


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("c3m")
    except Exception:
        return ""


# ---------------------------------------------------------------------------------------------
# Running it
# ---------------------------------------------------------------------------------------------
def run_mcp(store: str | Path, config: MemoryConfig | None = None, *, transport: str = "stdio",
            host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, namespace: str | None = None) -> None:
    """Serve ``store`` over MCP until the client disconnects (stdio) or the process is stopped (HTTP, at
    ``http://HOST:PORT/mcp``)."""
    if transport not in TRANSPORTS:
        raise InvalidInput("--transport", f"unknown transport {transport!r}", fix=f"use one of {list(TRANSPORTS)}")
    if namespace is not None:
        check_namespace(namespace)
    if transport == "streamable-http" and host not in ("127.0.0.1", "localhost", "::1"):
        # the MCP transport here has no API keys: anyone who reaches the port could read every namespace
        raise InvalidInput("--host", f"streamable HTTP on a non-loopback host ({host}) would be open to anyone",
                           fix="bind --host 127.0.0.1 (and put an authenticating proxy in front for remote "
                               "clients), or use `c3m serve` with API keys")
    if not logging.getLogger().handlers:
        logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    with contextlib.redirect_stdout(sys.stderr):  # stdio: model loading must not write on the protocol stream
        engine = Engine(store, config or MemoryConfig())
    try:
        server = build_mcp(engine, namespace=namespace)
        if transport == "stdio":
            server.run("stdio")
        else:
            print(f"c3m mcp: serving {engine.store_path} at http://{host}:{port}/mcp"
                  + (f" (namespace {namespace!r} only)" if namespace else ""), file=sys.stderr, flush=True)
            server.run("streamable-http", host=host, port=port)
    finally:
        engine.close()


def _main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m c3m.server.mcp", description="c3m memory as an MCP server")
    p.add_argument("--store", required=True, help="store folder (created if missing)")
    p.add_argument("--namespace", default=None, help="serve this namespace only (default: any, per call)")
    p.add_argument("--transport", choices=TRANSPORTS, default="stdio")
    p.add_argument("--host", default=DEFAULT_HOST)
    p.add_argument("--port", type=int, default=DEFAULT_PORT)
    p.add_argument("--config", default=None, help="MemoryConfig TOML/YAML file")
    p.add_argument("--method", default=None)
    p.add_argument("--text-embedder", default=None)
    p.add_argument("--answerer", default=None)
    a = p.parse_args(argv)
    try:
        config = MemoryConfig.load(a.config) if a.config else MemoryConfig()
        changes = {k: v for k, v in (("method", a.method), ("text_embedder", a.text_embedder),
                                     ("answerer", a.answerer)) if v is not None}
        run_mcp(a.store, config.with_(**changes), transport=a.transport, host=a.host, port=a.port,
                namespace=a.namespace)
    except C3MError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(_main())
