"""``c3m serve``: the HTTP API (FastAPI) over one store, through ``Engine`` → ``Memory``.

Every ``/v1`` route but ``/health`` needs an API key (``Authorization: Bearer c3m_…`` or ``X-API-Key``) that
grants the namespace in the path; blob URLs and traces are checked the same way, so a key never reads
another namespace. Errors are JSON: ``{"error": {"type", "field", "message", "fix"}}`` with a 4xx status for
the caller's mistakes. The inspector page (``/inspector``) is plain HTML + a script that calls this API.
"""
from __future__ import annotations

import asyncio
import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Optional
from urllib.parse import quote

from fastapi import Depends, FastAPI, File, Form, Header, Query, UploadFile
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field

from .. import __version__
from ..config import MemoryConfig
from ..errors import BudgetExceeded, C3MError, InvalidInput, SessionConflict, StoreError
from ..store import check_namespace
from ..types import ReaderBudget, as_json_dict
from .auth import KeyRecord, KeyRing
from .engine import Engine
from .limits import RequestLimits, check_question, session_from_json
from .views import context_view, entry_history, index_view, node_view, trace_view

STATIC = Path(__file__).parent / "static"
ADMIN = KeyRecord("no-auth", "", ("*",), "auth disabled")


# -- request bodies (their JSON Schemas are the OpenAPI spec's) ------------------------------------
class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ImageIn(_Strict):
    data: str = Field(description="the encoded image (PNG, JPEG, GIF, WebP, BMP, TIFF), base64")


class TurnIn(_Strict):
    role: str = Field(description="user, assistant or system")
    text: str = ""
    images: list[ImageIn] = []


class SessionIn(_Strict):
    id: Optional[str] = Field(None, description="session id; default: a hash of the content (retries are idempotent)")
    time: Optional[str] = Field(None, description="ISO 8601; default: now (UTC)")
    turns: list[TurnIn]


class BudgetIn(_Strict):
    """Reader-budget overrides; a field left out keeps the server's default (C3M §3.2: 3 pages, 12 Raw Nodes,
    8 images, 12,288 text tokens)."""

    pages: Optional[int] = Field(None, ge=0)
    raw_nodes: Optional[int] = Field(None, ge=0)
    images: Optional[int] = Field(None, ge=0)
    text_tokens: Optional[int] = Field(None, ge=0)


class QueryIn(_Strict):
    question: str
    budget: Optional[BudgetIn] = None


class ForgetIn(_Strict):
    node_ids: list[str] = []
    session_id: Optional[str] = None
    reason: str = Field(description="why, for the audit log (e.g. 'user request')")


# -- errors -------------------------------------------------------------------------------------
def _error(status: int, kind: str, message: str, *, field: str | None = None, fix: str | None = None) -> JSONResponse:
    return JSONResponse({"error": {"type": kind, "field": field, "message": message, "fix": fix}}, status_code=status)


class HTTPError(Exception):
    def __init__(self, status: int, message: str, *, fix: str | None = None, field: str | None = None,
                 headers: dict | None = None):
        self.status, self.message, self.fix, self.field, self.headers = status, message, fix, field, headers


def _loc(loc) -> str:
    parts = [p for p in loc if p not in ("body", "query", "path", "header")]
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "body"


class _TooLarge(BaseException):
    """Raised from inside ``receive`` when a body grows past the limit. A BaseException so that no handler
    between here and ``BodyLimit`` (FastAPI's body parsing catches ``Exception``) turns it into another error."""


class BodyLimit:
    """Refuse a request body over ``limit`` bytes with 413, before it is parsed: by its Content-Length when it
    has one, else by counting the chunks as they arrive (a chunked upload cannot slip past)."""

    def __init__(self, app, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope["headers"]).get(b"content-length", b"")
        if length.isdigit() and int(length) > self.limit:
            return await self._refuse(send, int(length))
        seen, started = 0, False

        async def counted():
            nonlocal seen
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > self.limit:
                    raise _TooLarge()
            return msg

        async def tracked(msg):
            nonlocal started
            started = started or msg["type"] == "http.response.start"
            await send(msg)

        try:
            await self.app(scope, counted, tracked)
        except _TooLarge:
            if not started:
                await self._refuse(send, seen)

    async def _refuse(self, send, size: int) -> None:
        await _error(413, "RequestTooLarge", f"request body is {size}+ bytes, over the limit of {self.limit}",
                     field="body", fix="send fewer or smaller images per request (one session per request), or "
                                       "raise `c3m serve --max-body-mib`")({"type": "http"}, None, send)


# -- the app ------------------------------------------------------------------------------------
def create_app(store: str | Path, config: MemoryConfig | None = None, *, keys: KeyRing | None = None,
               limits: RequestLimits | None = None, engine: Engine | None = None) -> FastAPI:
    """The API over ``store``. ``keys=None`` disables auth (loopback development only: ``c3m serve --no-auth``)."""
    config = config or MemoryConfig()
    limits = limits or RequestLimits()
    owned = engine is None

    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def lifespan(app):
        yield
        if owned:
            app.state.engine.close()

    app = FastAPI(title="c3m", version=__version__, lifespan=lifespan,
                  description="Cross-session multimodal memory: bounded, query-blind at write time, "
                              "provenance-preserving. Every route but /health needs an API key that grants the "
                              "namespace in its path (`Authorization: Bearer c3m_…` or `X-API-Key`).")
    app.state.engine = engine or Engine(store, config)
    app.state.started = time.time()
    eng: Engine = app.state.engine

    app.add_middleware(BodyLimit, limit=limits.max_body_bytes)

    @app.exception_handler(HTTPError)
    async def _http_error(request, exc: HTTPError):
        r = _error(exc.status, {401: "Unauthorized", 403: "Forbidden", 404: "NotFound"}.get(exc.status, "Error"),
                   exc.message, field=exc.field, fix=exc.fix)
        if exc.headers:
            r.headers.update(exc.headers)
        return r

    @app.exception_handler(RequestValidationError)
    async def _validation(request, exc: RequestValidationError):
        first = exc.errors()[0]
        field = _loc(first.get("loc", ()))
        return _error(422, "InvalidInput", f"field '{field}': {first.get('msg')}", field=field,
                      fix="see the request schema in /openapi.json (or /docs)")

    @app.exception_handler(C3MError)
    async def _c3m_error(request, exc: C3MError):
        if isinstance(exc, InvalidInput):
            return _error(400, "InvalidInput", exc.message, field=exc.field, fix=exc.fix)
        if isinstance(exc, SessionConflict):
            return _error(409, "SessionConflict", exc.message, field="id", fix=exc.fix)
        if isinstance(exc, BudgetExceeded):
            return _error(500, "BudgetExceeded", exc.message, fix=exc.fix)
        status = 503 if isinstance(exc, StoreError) else 500
        return _error(status, type(exc).__name__, exc.message, fix=exc.fix)

    # ---- auth ----
    def key_of(authorization: Optional[str] = Header(None), x_api_key: Optional[str] = Header(None)) -> KeyRecord:
        if keys is None:
            return ADMIN
        token = x_api_key or (authorization[7:].strip() if authorization and authorization.lower().startswith("bearer ")
                              else None)
        rec = keys.lookup(token)
        if rec is None:
            raise HTTPError(401, "missing or unknown API key" if token else "this server needs an API key",
                            fix="send `Authorization: Bearer <key>` (make one with `c3m keys add --store S "
                                "--namespace NS`)", field="authorization", headers={"WWW-Authenticate": "Bearer"})
        return rec

    def scope(namespace: str, key: KeyRecord = Depends(key_of)) -> str:
        try:
            namespace = check_namespace(namespace)
        except InvalidInput as exc:
            raise HTTPError(400, exc.message, fix=exc.fix, field="namespace") from None
        if not key.allows(namespace):
            raise HTTPError(403, f"this key ({key.key_id}) may not use namespace {namespace!r}", field="namespace",
                            fix="use a key granted this namespace (`c3m keys add --namespace ...`)")
        return namespace

    def admin(key: KeyRecord = Depends(key_of)) -> KeyRecord:
        if not key.admin:
            raise HTTPError(403, f"this key ({key.key_id}) is not an admin key", fix="use a key made with "
                            "`c3m keys add --namespace '*'`")
        return key

    def url_for(namespace: str):
        base = f"/v1/namespaces/{quote(namespace, safe='/:@')}/images/"
        return lambda sha: base + sha

    def budget_of(b: BudgetIn | None) -> ReaderBudget:
        if b is None:
            return config.reader_budget
        return replace(config.reader_budget, **{k: v for k, v in b.model_dump().items() if v is not None})

    async def wait(future):
        return await asyncio.wrap_future(future)

    ns_path = "/v1/namespaces/{namespace:path}"

    # ---- routes ----
    @app.get("/health", tags=["service"])
    async def health() -> dict:
        """Liveness and what this server serves (no key needed)."""
        return {"status": "ok", "version": __version__, "method": config.method, "auth": keys is not None,
                "uptime_s": round(time.time() - app.state.started, 1)}

    @app.get("/v1/whoami", tags=["service"])
    async def whoami(key: KeyRecord = Depends(key_of)) -> dict:
        """The presented key: its id, label and the namespaces it grants."""
        return {"key_id": key.key_id, "label": key.label, "namespaces": list(key.namespaces), "admin": key.admin}

    @app.get("/v1/namespaces", tags=["namespaces"])
    async def namespaces(key: KeyRecord = Depends(key_of)) -> list[dict]:
        """The store's namespaces this key may use, with their sizes."""
        def rows(mem):
            return [{"namespace": ns, **mem.store.namespace_stats(ns)} for ns in mem.store.namespaces()
                    if key.allows(ns)]
        return await wait(eng.lookup(rows))

    @app.post(ns_path + "/sessions", tags=["write"], status_code=201)
    async def add_session(body: SessionIn, response: Response, namespace: str = Depends(scope)) -> dict:
        """Store one session (JSON, images base64) and fold it into the index, atomically; an identical retry
        returns the stored session with ``created: false`` (status 200)."""
        session = await asyncio.to_thread(session_from_json, body.model_dump(exclude_none=True), limits)
        return await _add(namespace, session, response)

    @app.post(ns_path + "/sessions/upload", tags=["write"], status_code=201)
    async def upload_session(response: Response, session: str = Form(..., description="the session JSON; an "
                             "image is {\"file\": NAME} naming one of the uploaded files"),
                             files: list[UploadFile] = File(default=[]), namespace: str = Depends(scope)) -> dict:
        """Store one session from a multipart upload: the session JSON plus its image files."""
        try:
            obj = json.loads(session)
        except ValueError as exc:
            raise InvalidInput("session", f"is not JSON ({exc})", fix="send the session as a JSON string") from None
        parts: dict[str, bytes] = {}
        for f in files:
            data = await f.read(limits.images.max_bytes + 1)
            parts[f.filename or f"file{len(parts)}"] = data
        s = await asyncio.to_thread(session_from_json, obj, limits, parts)
        return await _add(namespace, s, response)

    async def _add(namespace: str, session, response: Response) -> dict:
        res = await wait(eng.write(lambda m: m.tenant(namespace).add_session(session)))
        if not res.created:
            response.status_code = 200
        return {"session_id": res.session_id, "seq": res.seq, "created": res.created, "raw_nodes": res.raw_nodes,
                "images": res.images, "actions": [a.get("action") for a in res.actions]}

    @app.get(ns_path + "/sessions", tags=["inspect"])
    async def list_sessions(namespace: str = Depends(scope)) -> list[dict]:
        """The namespace's sessions in commit order."""
        return await wait(eng.lookup(lambda m: [as_json_dict(s) for s in m.store.sessions(namespace)]))

    @app.post(ns_path + "/retrieve", tags=["read"])
    async def retrieve(body: QueryIn, namespace: str = Depends(scope)) -> dict:
        """A budgeted, provenance-linked context (items in time order, measured budget use, route trace)."""
        q = check_question(body.question, limits)
        ctx = await wait(eng.retrieve(namespace, q, budget_of(body.budget)))
        return dict(context_view(ctx, url_for(namespace)), namespace=namespace)

    @app.post(ns_path + "/ask", tags=["read"])
    async def ask(body: QueryIn, namespace: str = Depends(scope)) -> dict:
        """Retrieve, then answer from the context only (the server's answerer)."""
        q = check_question(body.question, limits)
        b = budget_of(body.budget)
        ans = await wait(eng.read(lambda m: m.tenant(namespace).ask(q, b)))
        return {"namespace": namespace, "answer": ans.text, "answerer": ans.answerer, "cited": list(ans.cited),
                "context": context_view(ans.context, url_for(namespace))}

    @app.post(ns_path + "/trace", tags=["inspect"])
    async def trace(body: QueryIn, namespace: str = Depends(scope)) -> dict:
        """The route of a query: pages → entries → node pool → chosen context, and the budget used on each
        dimension."""
        q = check_question(body.question, limits)
        b = budget_of(body.budget)

        def run(m):
            t = m.tenant(namespace)
            return trace_view(t, t.retrieve(q, b), url_for(namespace))
        return await wait(eng.read(run))

    @app.get(ns_path + "/index", tags=["inspect"])
    async def index(namespace: str = Depends(scope), version: Optional[int] = Query(None, ge=1)) -> dict:
        """The index as of ``version`` (latest by default): pages, entries with their Raw Nodes, budget use."""
        return await wait(eng.read(lambda m: index_view(m.tenant(namespace), version)))

    @app.get(ns_path + "/entries/{entry_id}/history", tags=["inspect"])
    async def history(entry_id: str, namespace: str = Depends(scope)) -> dict:
        """An entry's update history: its relation chain (each state, when, from which Raw Nodes) and the
        maintenance actions that named it."""
        return await wait(eng.read(lambda m: entry_history(m.tenant(namespace), entry_id)))

    @app.get(ns_path + "/nodes/{node_id}", tags=["inspect"])
    async def node(node_id: str, namespace: str = Depends(scope)) -> dict:
        """One Raw Node with provenance, its original images and their derived records (captions, crops)."""
        def get(m):
            n = m.store.get_nodes([node_id]).get(node_id)
            if n is None or n.provenance.namespace != namespace:
                return None
            return node_view(n, url_for(namespace), m.store.perceptions([node_id]).get(node_id, ()))
        got = await wait(eng.lookup(get))
        if got is None:
            raise HTTPError(404, f"no Raw Node {node_id!r} in namespace {namespace!r}", field="node_id",
                            fix="take node ids from a context, a trace or the index")
        return got

    @app.get(ns_path + "/images/{sha256}", tags=["read"], response_class=Response,
             responses={200: {"content": {"image/*": {}}, "description": "the original bytes"}})
    async def image(sha256: str, namespace: str = Depends(scope)) -> Response:
        """An image (or grounded crop) of this namespace, byte for byte as stored."""
        def get(m):
            mime = m.store.image_in_namespace(namespace, sha256)
            return (mime, m.image_bytes(sha256)) if mime else None
        got = await wait(eng.lookup(get))
        if got is None:
            raise HTTPError(404, f"no image {sha256[:12]}… in namespace {namespace!r}", field="sha256",
                            fix="take image URLs from a context or a node of this namespace")
        return Response(got[1], media_type=got[0], headers={"Cache-Control": "private, max-age=86400"})

    @app.post(ns_path + "/forget", tags=["write"])
    async def forget(body: ForgetIn, namespace: str = Depends(scope)) -> dict:
        """Redact Raw Nodes (by id, or a whole session) for privacy; logged, and the index is rebuilt."""
        if not body.node_ids and body.session_id is None:
            raise InvalidInput("node_ids", "name what to forget", fix="pass node_ids or session_id")
        rep = await wait(eng.write(lambda m: m.tenant(namespace).forget(
            node_ids=body.node_ids, session_id=body.session_id, reason=body.reason)))
        return as_json_dict(rep)

    @app.get("/v1/stats", tags=["service"])
    async def stats(key: KeyRecord = Depends(admin)) -> dict:
        """Queue depths per engine thread and retrieve batch sizes (admin keys only)."""
        return eng.stats()

    @app.get("/v1/verify", tags=["service"])
    async def verify(key: KeyRecord = Depends(admin)) -> dict:
        """Check the whole store (integrity, blobs, snapshot pointers); admin keys only."""
        return await wait(eng.lookup(lambda m: m.verify().to_dict()))

    # ---- inspector ----
    @app.get("/inspector", include_in_schema=False)
    async def inspector() -> FileResponse:
        return FileResponse(STATIC / "inspector.html", media_type="text/html")

    app.mount("/inspector/static", StaticFiles(directory=STATIC), name="inspector-static")  # package data
    return app


def openapi_spec(config: MemoryConfig | None = None) -> dict[str, Any]:
    """The API's OpenAPI document, built without opening a store (docs/openapi.json is this, checked in)."""
    class _NoEngine:
        def close(self):
            pass
    app = create_app("/nonexistent", config, keys=None, engine=_NoEngine())  # type: ignore[arg-type]
    return app.openapi()
