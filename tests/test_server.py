"""`c3m serve`: every endpoint (happy path and bad input), auth isolation tried from the outside, request limits,
the server returning exactly the Python API's context, and the checked-in OpenAPI spec."""
from __future__ import annotations

import base64
import io
import json
import threading
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")
from fastapi.testclient import TestClient  # noqa: E402
from PIL import Image  # noqa: E402

from c3m.config import MemoryConfig  # noqa: E402
from c3m.memory import Memory  # noqa: E402
from c3m.server.app import create_app, openapi_spec  # noqa: E402
from c3m.server.auth import KeyRing  # noqa: E402
from c3m.server.limits import RequestLimits  # noqa: E402
from c3m.types import as_json_dict  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CFG = MemoryConfig(method="c3m", text_embedder="hashing")


def png(color=(200, 10, 10), size=(32, 24)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, "PNG")
    return buf.getvalue()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


RED, GREEN = png(), png((10, 200, 10))
SESSIONS = [
    {"id": "s1", "time": "2026-03-01T10:00:00", "turns": [
        {"role": "user", "text": "My bike is red and I keep it in the garage."},
        {"role": "user", "text": "Here is a photo of my bike", "images": [{"data": b64(RED)}]}]},
    {"id": "s2", "time": "2026-03-10T09:00:00", "turns": [
        {"role": "user", "text": "I started learning the cello with a teacher called Mira."}]},
    {"id": "s3", "time": "2026-04-01T10:00:00", "turns": [
        {"role": "user", "text": "I painted my bike blue last weekend."}]},
]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("srv")
    ring = KeyRing(root / "keys.json")
    keys = {name: ring.add(pats, name)[0] for name, pats in
            (("alice", ["alice"]), ("bob", ["bob/*"]), ("admin", ["*"]))}
    app = create_app(root / "store", CFG, keys=ring, limits=RequestLimits(max_body_bytes=2 * 1024 * 1024,
                                                                          max_turns=50, max_text_chars=5000))
    with TestClient(app) as client:
        for s in SESSIONS:
            r = client.post("/v1/namespaces/alice/sessions", json=s, headers=auth(keys["alice"]))
            assert r.status_code == 201, r.text
        r = client.post("/v1/namespaces/bob/home/sessions", headers=auth(keys["bob"]), json={
            "id": "b1", "time": "2026-03-02T08:00:00", "turns": [
                {"role": "user", "text": "Bob's secret: the safe code is 4711.", "images": [{"data": b64(GREEN)}]}]})
        assert r.status_code == 201, r.text
        yield client, keys, root / "store"


def auth(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}


def err(r, status: int, field: str | None = None) -> dict:
    assert r.status_code == status, (r.status_code, r.text)
    e = r.json()["error"]
    assert e["message"]
    if field is not None:
        assert e["field"] == field, e
    if status in (400, 403, 413, 422):
        assert e["fix"], e  # every caller mistake says how to fix it
    return e


# -- happy paths ---------------------------------------------------------------------------------
def test_health_and_whoami(server):
    client, keys, _ = server
    h = client.get("/health").json()
    assert h["status"] == "ok" and h["method"] == "c3m" and h["auth"] is True
    me = client.get("/v1/whoami", headers=auth(keys["bob"])).json()
    assert me["namespaces"] == ["bob/*"] and me["admin"] is False


def test_retrieve_returns_items_with_provenance_and_image_urls(server):
    client, keys, _ = server
    r = client.post("/v1/namespaces/alice/retrieve", json={"question": "What color is my bike?"},
                    headers=auth(keys["alice"]))
    assert r.status_code == 200, r.text
    ctx = r.json()
    texts = " ".join(i["text"] for i in ctx["items"])
    assert "blue" in texts and "red" in texts
    assert all(i["provenance"]["namespace"] == "alice" for i in ctx["items"])
    urls = [im["url"] for i in ctx["items"] for im in i["images"]]
    assert urls, ctx["items"]
    img = client.get(urls[0], headers=auth(keys["alice"]))
    assert img.status_code == 200 and img.headers["content-type"] == "image/png" and img.content == RED
    assert ctx["use"]["raw_nodes"] <= ctx["budget"]["raw_nodes"] and ctx["trace"]["method"] == "c3m"


def test_budget_override_is_applied_and_measured(server):
    client, keys, _ = server
    r = client.post("/v1/namespaces/alice/retrieve", headers=auth(keys["alice"]),
                    json={"question": "What color is my bike?", "budget": {"raw_nodes": 1, "images": 0}})
    ctx = r.json()
    assert ctx["budget"]["raw_nodes"] == 1 and ctx["budget"]["images"] == 0 and ctx["budget"]["pages"] == 3
    assert len(ctx["items"]) <= 1 and ctx["use"]["images"] == 0


def test_server_context_equals_python_api(server):
    """The server and the Python API return the same context for the same store and question."""
    client, keys, store = server
    q = "Who teaches me the cello?"
    got = client.post("/v1/namespaces/alice/retrieve", json={"question": q}, headers=auth(keys["alice"])).json()
    with Memory(store, "alice", config=CFG) as mem:
        want = mem.retrieve(q)
    for it in got["items"]:
        for im in it["images"]:
            im.pop("url")
    assert got["items"] == as_json_dict(want.items)
    assert got["use"] == as_json_dict(want.use) and got["trace"] == want.trace.to_dict()
    assert got["text"] == want.text()


def test_ask_trace_index_history_node_sessions(server):
    client, keys, _ = server
    h = auth(keys["alice"])
    a = client.post("/v1/namespaces/alice/ask", json={"question": "Who teaches me the cello?"}, headers=h).json()
    assert "Mira" in a["answer"] and a["context"]["items"]
    t = client.post("/v1/namespaces/alice/trace", json={"question": "What color is my bike?"}, headers=h).json()
    assert t["pages"] and t["entries"] and t["pool_size"] >= len({i["node_id"] for i in t["context"]["items"]}) > 0
    assert [b["name"] for b in t["budget"]] == ["pages", "raw_nodes", "images", "text_tokens"]
    assert any(p["chosen"] for p in t["pool"])
    ix = client.get("/v1/namespaces/alice/index", headers=h).json()
    assert ix["version"] == ix["head"] == 3 and ix["versions"] == [1, 2, 3]
    assert {u["name"] for u in ix["usage"]} == {"entries", "pages", "index_tokens", "index_bytes"}
    assert all(u["used"] <= u["limit"] for u in ix["usage"])
    nodes = {n for e in ix["entries"] for n in e["nodes"]}
    assert len(nodes) == 4  # every Raw Node is reachable from the index (provenance invariant)
    old = client.get("/v1/namespaces/alice/index?version=1", headers=h).json()
    assert old["version"] == 1 and sum(len(e["nodes"]) for e in old["entries"]) == 2
    again = client.get("/v1/namespaces/alice/index", headers=h).json()
    assert again["version"] == 3  # looking at an old version does not leave the reader on it
    hist = client.get(f"/v1/namespaces/alice/entries/{ix['entries'][0]['id']}/history", headers=h).json()
    assert hist["chain"] and hist["chain"][-1]["current"] and hist["log"]
    nid = next(n for e in ix["entries"] for n in e["nodes"])
    node = client.get(f"/v1/namespaces/alice/nodes/{nid}", headers=h).json()
    assert node["node_id"] == nid and node["provenance"]["namespace"] == "alice"
    sessions = client.get("/v1/namespaces/alice/sessions", headers=h).json()
    assert [s["session_id"] for s in sessions] == ["s1", "s2", "s3"]
    rows = client.get("/v1/namespaces", headers=h).json()
    assert [r["namespace"] for r in rows] == ["alice"] and rows[0]["raw_nodes"] == 4


def test_retry_is_idempotent_and_a_changed_session_conflicts(server):
    client, keys, _ = server
    h = auth(keys["alice"])
    r = client.post("/v1/namespaces/alice/sessions", json=SESSIONS[1], headers=h)
    assert r.status_code == 200 and r.json()["created"] is False and r.json()["seq"] == 2
    changed = dict(SESSIONS[1], turns=[{"role": "user", "text": "something else"}])
    err(client.post("/v1/namespaces/alice/sessions", json=changed, headers=h), 409, "id")


def test_multipart_upload_and_forget(server):
    client, keys, _ = server
    h = auth(keys["bob"])
    session = {"id": "up1", "time": "2026-05-01T12:00:00", "turns": [
        {"role": "user", "text": "A scan of my passport for the trip", "images": [{"file": "scan.png"}]}]}
    scan = png((1, 2, 3), (40, 30))
    r = client.post("/v1/namespaces/bob/travel/sessions/upload", headers=h, data={"session": json.dumps(session)},
                    files=[("files", ("scan.png", scan, "image/png"))])
    assert r.status_code == 201, r.text
    ctx = client.post("/v1/namespaces/bob/travel/retrieve", json={"question": "passport scan"}, headers=h).json()
    nid = ctx["items"][0]["node_id"]
    url = client.get(f"/v1/namespaces/bob/travel/nodes/{nid}", headers=h).json()["images"][0]["url"]
    assert client.get(url, headers=h).content == scan
    missing = dict(session, id="up2", turns=[{"role": "user", "text": "x", "images": [{"file": "nope.png"}]}])
    err(client.post("/v1/namespaces/bob/travel/sessions/upload", headers=h, data={"session": json.dumps(missing)},
                    files=[("files", ("scan.png", scan, "image/png"))]), 400, "turns[0].images[0].file")
    err(client.post("/v1/namespaces/bob/travel/sessions/upload", headers=h, data={"session": "{not json"}),
        400, "session")
    # forget the session: its text and image are gone from the next read (the reader thread notices the writer's
    # forget), and the blob URL stops working
    rep = client.post("/v1/namespaces/bob/travel/forget", json={"session_id": "up1", "reason": "user request"},
                      headers=h).json()
    assert rep["blobs_deleted"] == 1 and len(rep["node_ids"]) == 1
    after = client.post("/v1/namespaces/bob/travel/retrieve", json={"question": "passport scan"}, headers=h).json()
    assert "passport" not in json.dumps(after["items"]) and not any(i["images"] for i in after["items"])
    err(client.get(url, headers=h), 404, "sha256")
    err(client.post("/v1/namespaces/bob/travel/forget", json={"reason": "x"}, headers=h), 400, "node_ids")
    err(client.post("/v1/namespaces/bob/travel/forget", json={"session_id": "zzz", "reason": "x"}, headers=h),
        400, "session_id")


def test_verify_is_admin_only(server):
    client, keys, _ = server
    err(client.get("/v1/verify", headers=auth(keys["alice"])), 403)
    rep = client.get("/v1/verify", headers={"X-API-Key": keys["admin"]}).json()
    assert rep["ok"] is True and rep["counts"]


# -- auth isolation, tried from the outside ------------------------------------------------------
def test_no_key_or_a_wrong_key_is_refused(server):
    client, keys, _ = server
    for h in ({}, auth("c3m_wrong"), {"Authorization": "Basic abc"}, {"X-API-Key": ""}):
        e = err(client.post("/v1/namespaces/alice/retrieve", json={"question": "bike?"}, headers=h), 401)
        assert "key" in e["message"]
    assert client.get("/v1/namespaces", headers={}).status_code == 401


def test_a_key_never_reads_or_writes_another_namespace(server):
    client, keys, _ = server
    alice, bob = auth(keys["alice"]), auth(keys["bob"])
    ix = client.get("/v1/namespaces/alice/index", headers=alice).json()
    alice_node = ix["entries"][0]["nodes"][0]
    bob_ctx = client.post("/v1/namespaces/bob/home/retrieve", json={"question": "safe code"}, headers=bob).json()
    bob_node = bob_ctx["items"][0]["node_id"]
    bob_img = client.get(f"/v1/namespaces/bob/home/nodes/{bob_node}", headers=bob).json()["images"][0]["sha256"]
    # every route, alice's key on bob's namespace: 403
    for method, path, body in [
            ("post", "/v1/namespaces/bob/home/retrieve", {"question": "safe code"}),
            ("post", "/v1/namespaces/bob/home/ask", {"question": "safe code"}),
            ("post", "/v1/namespaces/bob/home/trace", {"question": "safe code"}),
            ("post", "/v1/namespaces/bob/home/sessions", {"turns": [{"role": "user", "text": "x"}]}),
            ("post", "/v1/namespaces/bob/home/forget", {"node_ids": [bob_node], "reason": "x"}),
            ("get", "/v1/namespaces/bob/home/index", None), ("get", "/v1/namespaces/bob/home/sessions", None),
            ("get", f"/v1/namespaces/bob/home/nodes/{bob_node}", None),
            ("get", f"/v1/namespaces/bob/home/images/{bob_img}", None),
            ("get", "/v1/namespaces/bob/home/entries/e00001/history", None)]:
        r = getattr(client, method)(path, headers=alice, **({"json": body} if body is not None else {}))
        err(r, 403, "namespace")
    # bob's node, image and forget through alice's own namespace: not found / refused, never served
    err(client.get(f"/v1/namespaces/alice/nodes/{bob_node}", headers=alice), 404, "node_id")
    err(client.get(f"/v1/namespaces/alice/images/{bob_img}", headers=alice), 404, "sha256")
    err(client.post("/v1/namespaces/alice/forget", json={"node_ids": [bob_node], "reason": "x"}, headers=alice),
        400, "node_ids")
    # and the other way round; a prefix key does not reach a namespace that merely starts alike
    err(client.get(f"/v1/namespaces/bob/home/nodes/{alice_node}", headers=bob), 404)
    err(client.get("/v1/namespaces/bobby/index", headers=bob), 403)
    err(client.get("/v1/namespaces/alice/index", headers=bob), 403)
    # traces and contexts of one namespace never name another's nodes
    t = client.post("/v1/namespaces/alice/trace", json={"question": "what is the safe code?"}, headers=alice).json()
    assert "4711" not in json.dumps(t) and bob_node not in json.dumps(t)
    assert [r["namespace"] for r in client.get("/v1/namespaces", headers=bob).json()] == ["bob/home", "bob/travel"]
    # bob's data is intact after all that
    again = client.post("/v1/namespaces/bob/home/retrieve", json={"question": "safe code"}, headers=bob).json()
    assert "4711" in again["items"][0]["text"]


# -- bad input -----------------------------------------------------------------------------------
@pytest.mark.parametrize("body, field", [
    ({"question": ""}, "question"),
    ({"question": "   "}, "question"),
    ({"question": "x" * 5000}, "question"),
    ({}, "question"),
    ({"question": 3}, "question"),
    ({"question": "bike?", "budget": {"pages": -1}}, "budget.pages"),
    ({"question": "bike?", "budget": {"tokens": 5}}, "budget.tokens"),
    ({"question": "bike?", "extra": 1}, "extra"),
])
def test_bad_queries_name_the_field(server, body, field):
    client, keys, _ = server
    r = client.post("/v1/namespaces/alice/retrieve", json=body, headers=auth(keys["alice"]))
    assert r.status_code in (400, 422)
    err(r, r.status_code, field)


def _turn(**kw):
    return {"turns": [dict({"role": "user", "text": "hello"}, **kw)]}


@pytest.mark.parametrize("body, field, status", [
    ({"turns": []}, "turns", 400),
    ({"turns": [{"role": "bot", "text": "x"}]}, "turns[0].role", 400),
    ({"turns": [{"role": "user", "text": ""}]}, "turns[0]", 400),
    (_turn(text="y" * 6000), "turns[0].text", 400),
    (_turn(images=[{"data": "!!notbase64"}]), "turns[0].images[0].data", 400),
    (_turn(images=[{"data": b64(b"not an image at all")}]), "turns[0].images[0]", 400),
    (_turn(images=[{"data": b64(RED)}] * 17), "turns[0].images", 400),
    (_turn(colour="red"), "turns[0].colour", 422),
    ({"turns": [{"role": "user", "text": "x"}], "time": "yesterday"}, "time", 400),
    ({"turns": [{"role": "user", "text": "x"}] * 51}, "turns", 400),
])
def test_bad_sessions_name_the_field_and_store_nothing(server, body, field, status):
    client, keys, _ = server
    h = auth(keys["alice"])
    before = client.get("/v1/namespaces/alice/sessions", headers=h).json()
    err(client.post("/v1/namespaces/alice/sessions", json=body, headers=h), status, field)
    assert client.get("/v1/namespaces/alice/sessions", headers=h).json() == before


def test_image_pixel_limit_and_body_limit(server):
    client, keys, _ = server
    h = auth(keys["alice"])
    buf = io.BytesIO()
    Image.new("1", (8000, 6000)).save(buf, "PNG")  # 48 M pixels in a few KB: over the validator's 40 M
    e = err(client.post("/v1/namespaces/alice/sessions", json=_turn(images=[{"data": b64(buf.getvalue())}]),
                        headers=h), 400, "turns[0].images[0]")
    assert "pixels" in e["message"]
    big = {"turns": [{"role": "user", "text": "z" * (3 * 1024 * 1024)}]}
    e = err(client.post("/v1/namespaces/alice/sessions", json=big, headers=h), 413, "body")
    assert "max-body" in e["fix"]
    err(client.post("/v1/namespaces/Bad Name!/retrieve", json={"question": "x"}, headers=auth(keys["admin"])),
        400, "namespace")
    err(client.get("/v1/namespaces/alice/entries/nope/history", headers=h), 400, "entry_id")
    err(client.get("/v1/namespaces/alice/index?version=99", headers=h), 400, "version")
    err(client.get("/v1/namespaces/alice/nodes/n-0000", headers=h), 404, "node_id")


# -- engine --------------------------------------------------------------------------------------
def test_concurrent_retrieves_are_batched_and_equal_one_by_one(server):
    client, keys, store = server
    eng = client.app.state.engine
    questions = ["What color is my bike?", "Who teaches me the cello?", "Where is the bike kept?"] * 8
    before = len(eng.reader.batches)
    gate = threading.Event()
    eng.read(lambda m: gate.wait(10))  # hold the reader so the retrieves queue up behind it
    futures = [eng.retrieve("alice", q) for q in questions]
    gate.set()
    got = [f.result(60) for f in futures]
    assert max(eng.reader.batches[before:]) > 1  # they were read as a batch
    with Memory(store, "alice", config=CFG) as mem:
        for q, ctx in zip(questions, got):
            assert as_json_dict(ctx.items) == as_json_dict(mem.retrieve(q).items)


# -- the OpenAPI spec ----------------------------------------------------------------------------
def test_openapi_spec_is_checked_in_and_current():
    spec = openapi_spec()
    checked_in = json.loads((ROOT / "docs" / "openapi.json").read_text())
    assert checked_in == spec, "docs/openapi.json is stale: run `c3m serve --openapi docs/openapi.json`"
    paths = spec["paths"]
    for p in ("/health", "/v1/namespaces/{namespace}/sessions", "/v1/namespaces/{namespace}/retrieve",
              "/v1/namespaces/{namespace}/ask", "/v1/namespaces/{namespace}/trace",
              "/v1/namespaces/{namespace}/entries/{entry_id}/history", "/v1/namespaces/{namespace}/forget",
              "/v1/verify"):
        assert p in paths
    assert "SessionIn" in spec["components"]["schemas"]


# -- the CLI's refusals --------------------------------------------------------------------------
def test_serve_refuses_without_keys_and_no_auth_off_loopback(tmp_path, capsys):
    from c3m.cli import main

    assert main(["serve", "--store", str(tmp_path / "s")]) == 2
    assert "c3m keys add" in capsys.readouterr().err
    assert main(["serve", "--store", str(tmp_path / "s"), "--no-auth", "--host", "0.0.0.0"]) == 2
    assert "non-loopback" in capsys.readouterr().err
    assert main(["keys", "add", "--store", str(tmp_path / "s"), "-n", "team/*", "--json"]) == 0
    key = json.loads(capsys.readouterr().out)["key"]
    ring = KeyRing(tmp_path / "s" / "api_keys.json")
    rec = ring.lookup(key)
    assert rec is not None and rec.allows("team/x") and not rec.allows("teamx")
    assert key not in (tmp_path / "s" / "api_keys.json").read_text()  # hashed at rest
    assert oct((tmp_path / "s" / "api_keys.json").stat().st_mode & 0o777) == "0o600"
    assert main(["keys", "revoke", "--store", str(tmp_path / "s"), "--id", rec.key_id]) == 0
    assert KeyRing(tmp_path / "s" / "api_keys.json").lookup(key) is None


def test_key_ring_follows_the_file_while_the_server_runs(tmp_path):
    ring = KeyRing(tmp_path / "keys.json")
    key, rec = ring.add(["alice"])
    other = KeyRing(tmp_path / "keys.json")  # another process: `c3m keys revoke` while the server runs
    assert other.lookup(key) == rec
    key2, _ = ring.add(["bob"])
    assert other.lookup(key2) is not None
    ring.revoke(rec.key_id)
    assert other.lookup(key) is None
    (tmp_path / "keys.json").write_text("{damaged")
    assert other.lookup(key2) is not None  # a damaged file keeps the keys loaded before (and logs why)


def test_a_chunked_body_over_the_limit_is_refused_without_content_length(server):
    client, keys, _ = server
    h = dict(auth(keys["alice"]), **{"Content-Type": "application/json"})

    def chunks():  # a generator body: sent chunked, no Content-Length
        yield b'{"turns": [{"role": "user", "text": "'
        for _ in range(40):
            yield b"z" * 65536
        yield b'"}]}'
    before = client.get("/v1/namespaces/alice/sessions", headers=h).json()
    r = client.post("/v1/namespaces/alice/sessions", content=chunks(), headers=h)
    err(r, 413, "body")
    assert client.get("/v1/namespaces/alice/sessions", headers=h).json() == before


# -- fuzzing the request bodies --------------------------------------------------------------------
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                  max_size=4), max_leaves=20)
_turn_like = st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "bot", ""]) | _json,
                                    "text": st.text(max_size=40) | _json},
                                   optional={"images": st.lists(st.fixed_dictionaries({"data": st.text(max_size=30)
                                                                                      | st.just(b64(RED))}) | _json,
                                                                max_size=2)})
_session_like = st.fixed_dictionaries({}, optional={"id": st.text(max_size=12) | _json,
                                                    "time": st.sampled_from(["2026-01-01T00:00:00", "x", ""]) | _json,
                                                    "turns": st.lists(_turn_like, max_size=3) | _json}) | _json


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=_session_like)
def test_random_session_bodies_get_a_clear_answer_never_a_server_error(server, body):
    client, keys, _ = server
    r = client.post("/v1/namespaces/fuzz/sessions", json=body, headers=auth(keys["admin"]))
    assert r.status_code in (200, 201, 400, 409, 422), (r.status_code, r.text, body)
    if r.status_code >= 400:
        e = r.json()["error"]
        assert e["field"] and e["message"] and e["fix"]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.fixed_dictionaries({}, optional={"question": st.text(max_size=60) | _json,
                                                "budget": st.dictionaries(st.sampled_from(["pages", "raw_nodes",
                                                                                           "images", "text_tokens",
                                                                                           "x"]),
                                                                          st.integers(-3, 10**9) | _json,
                                                                          max_size=4) | _json}) | _json)
def test_random_queries_get_a_clear_answer_never_a_server_error(server, body):
    client, keys, _ = server
    r = client.post("/v1/namespaces/alice/retrieve", json=body, headers=auth(keys["alice"]))
    assert r.status_code in (200, 400, 422), (r.status_code, r.text, body)


def test_store_lookups_do_not_wait_behind_the_reader(server):
    """Images, nodes and session lists run on the lookup thread: a held reader (a long retrieve batch) does not
    delay them."""
    client, keys, _ = server
    eng = client.app.state.engine
    h = auth(keys["alice"])
    ctx = client.post("/v1/namespaces/alice/retrieve", json={"question": "photo of my bike"}, headers=h).json()
    url = next(im["url"] for i in ctx["items"] for im in i["images"])
    gate = threading.Event()
    held = eng.read(lambda m: gate.wait(30))
    try:
        assert client.get(url, headers=h).content == RED
        assert client.get("/v1/namespaces/alice/sessions", headers=h).status_code == 200
        st = client.get("/v1/stats", headers=auth(keys["admin"])).json()
        assert st["queued"]["reader"] == 0 and not held.done()  # the reader is still busy with the held job
    finally:
        gate.set()
    held.result(30)
    st = client.get("/v1/stats", headers=auth(keys["admin"])).json()
    assert st["retrieves"] >= 1 and st["max_batch"] >= 1 and set(st["queued"]) == {"reader", "writer", "lookup"}
    err(client.get("/v1/stats", headers=h), 403)
