"""The ``api`` backend against a real OpenAI-compatible HTTP server started here on 127.0.0.1.

The server is stdlib ``ThreadingHTTPServer`` speaking ``POST /v1/chat/completions``. Its answers come
from offline logic (the extractive overlap heuristic for answers, token F1 for judging, capitalised
words for extraction), so replies mean something, and a per-request script injects failures: statuses
with Retry-After, slow replies, invalid JSON, bodies that are not completions. It counts requests in
flight to check the client's concurrency limit and decodes image data URLs to compare bytes.
"""
from __future__ import annotations

import base64
import json
import random
import re
import socket
import threading
import time
from datetime import datetime
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from factories import serving

from c3m.errors import C3MError
from c3m.models.answer import REFUSAL, content_words
from c3m.models.api import (JUDGE_PROMPT_VERSION, ApiAnswerer, ApiClient, ApiError, ApiExtractor, ApiJudge,
                            ApiTimeout, ExtractionError, Usage, UsageMeter, backoff_delay, check_schema,
                            parse_retry_after, validate)
from c3m.models.base import Answerer
from c3m.models.judge import Judge, is_refusal, token_f1
from c3m.types import (BudgetUse, Context, ContextItem, EvidenceForm, ImageRef, Provenance, ReaderBudget,
                       RouteTrace)


def png_bytes(colour=(200, 30, 30), size=(24, 16)) -> bytes:
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", size, colour).save(buf, "PNG")
    return buf.getvalue()

HEADER = re.compile(r"^\[(\S+)#(\d+) [^\]]*\](?: \([a-z_]+\))? (.*)$")


# ---------------------------------------------------------------------------------------------
# The server
# ---------------------------------------------------------------------------------------------
def _user_text(payload) -> str:
    content = [m for m in payload["messages"] if m["role"] == "user"][0]["content"]
    return content if isinstance(content, str) else "\n".join(p["text"] for p in content if p["type"] == "text")


def _system(payload) -> str:
    return next((m["content"] for m in payload["messages"] if m["role"] == "system"), "")


def offline_reply(payload) -> str:
    """Judge / extraction / answer logic of the fake model, chosen by the system prompt."""
    system, user = _system(payload), _user_text(payload)
    if "grade answers" in system:
        gold = re.search(r"^Gold answer: (.*)$", user, re.M).group(1)
        response = re.search(r"^Response: (.*)$", user, re.M).group(1)
        ok = is_refusal(response) if "gold answer is a refusal" in user else token_f1(gold, response) >= 0.5
        return json.dumps({"verdict": "CORRECT" if ok else "WRONG", "reason": "offline f1/refusal rule"})
    if "JSON schema" in system:
        return json.dumps({"entities": sorted(set(re.findall(r"\b[A-Z][a-z]+\b", user)))})
    asked = re.search(r"^Question: (.*)$", user, re.M)
    if not asked:
        return "ok"
    question = asked.group(1)
    wanted, best, best_n = content_words(question), None, 0
    for line in user.splitlines():
        m = HEADER.match(line)
        if m and len(wanted & content_words(m.group(3))) > best_n:
            best, best_n = m, len(wanted & content_words(m.group(3)))
    return f"{best.group(3)} [{best.group(1)}#{best.group(2)}]" if best else REFUSAL


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):  # keep test output clean
        pass

    def _send(self, status: int, body: bytes, headers=()):
        try:
            self.send_response(status)
            for k, v in headers:
                self.send_header(k, v)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except OSError:  # the client gave up (timeout test)
            pass

    def do_POST(self):
        srv: FakeOpenAI = self.server
        payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with srv.lock:
            srv.requests.append((dict(self.headers), payload))
            fault = srv.script.pop(0) if srv.script else {}
            srv.in_flight += 1
            srv.max_in_flight = max(srv.max_in_flight, srv.in_flight)
        try:
            if self.path != "/v1/chat/completions":
                return self._send(404, b'{"error": "not found"}')
            time.sleep(fault.get("sleep", srv.delay))
            if "status" in fault:
                return self._send(fault["status"], b'{"error": "injected"}', fault.get("headers", ()))
            if "raw" in fault:
                return self._send(200, fault["raw"])
            for m in payload["messages"]:
                for part in m["content"] if isinstance(m["content"], list) else ():
                    if part["type"] == "image_url":
                        head, data = part["image_url"]["url"].split(",", 1)
                        with srv.lock:
                            srv.images.append((head, base64.b64decode(data)))
            content = fault["content"] if "content" in fault else offline_reply(payload)
            prompt = sum(len(_user_text({"messages": [m]}).split()) if m["role"] == "user" else
                         len(str(m["content"]).split()) for m in payload["messages"])
            usage = {"prompt_tokens": prompt, "completion_tokens": len(content.split()),
                     "total_tokens": prompt + len(content.split())}
            with srv.lock:
                srv.usages.append(usage)
            body = {"id": "cmpl-1", "object": "chat.completion", "model": payload["model"],
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                                 "finish_reason": "stop"}], "usage": usage}
            self._send(200, json.dumps(body).encode())
        finally:
            with srv.lock:
                srv.in_flight -= 1


class FakeOpenAI(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), Handler)
        self.lock = threading.Lock()
        self.script: list[dict] = []
        self.requests: list = []
        self.usages: list = []
        self.images: list = []
        self.in_flight = self.max_in_flight = 0
        self.delay = 0.0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def handle_error(self, request, client_address):  # a slow reply to a client that timed out
        pass


@pytest.fixture
def server():
    with serving(FakeOpenAI()) as srv:
        yield srv


def make_client(srv: FakeOpenAI, **kw) -> ApiClient:
    kw = {"api_key": "", "timeout": 5.0, "backoff": 0.01, "max_retries": 2, "seed": 0, **kw}
    return ApiClient(srv.base_url, "test-model", **kw)


def item(session: str, turn: int, text: str, images=(), form=EvidenceForm.RAW_TEXT) -> ContextItem:
    prov = Provenance("ns", session, turn, datetime(2026, 3, 1 + turn, 9, 0))
    return ContextItem(f"n-{session}-{turn}", prov, "user", form, text, tuple(images), 1.0, len(text.split()))


def context(question: str, *items: ContextItem) -> Context:
    return Context(question, tuple(items), BudgetUse(), ReaderBudget(), RouteTrace("test"))


def image_ref(data: bytes) -> ImageRef:
    import hashlib

    return ImageRef(hashlib.sha256(data).hexdigest(), "image/png", 24, 16, len(data))


# ---------------------------------------------------------------------------------------------
# Answerer
# ---------------------------------------------------------------------------------------------
def test_answerer_reads_context_with_provenance_and_cites(server):
    ctx = context("Where is my red mug?",
                  item("s1", 0, "I adopted a cat named Miso."),
                  item("s2", 1, "My red mug is on the top shelf."),
                  item("s3", 2, "We talked about the weather.", form=EvidenceForm.SUMMARY))
    answerer = ApiAnswerer(make_client(server))
    assert isinstance(answerer, Answerer)
    ans = answerer.answer(ctx.question, ctx)
    assert ans.text == "My red mug is on the top shelf."
    assert ans.cited == ("n-s2-1",)
    assert ans.answerer == "api:test-model" and ans.context is ctx
    headers, payload = server.requests[-1]
    assert payload["model"] == "test-model" and payload["temperature"] == 0
    user = _user_text(payload)
    assert "[s2#1 2026-03-02 09:00 user] My red mug is on the top shelf." in user
    assert "[s3#2 2026-03-03 09:00 user] (summary) We talked" in user
    assert isinstance(payload["messages"][1]["content"], str)  # text-only context goes as a plain string
    assert "Authorization" not in headers
    assert answerer.last_usage.calls == 1 and answerer.last_usage.completion_tokens > 0


def test_answerer_refuses_when_context_does_not_support(server):
    ctx = context("What is my sister's favourite opera?", item("s1", 0, "I adopted a cat named Miso."))
    ans = ApiAnswerer(make_client(server)).answer(ctx.question, ctx)
    assert is_refusal(ans.text) and ans.cited == ()


def test_images_arrive_intact_as_data_urls(server):
    red, blue = png_bytes((200, 30, 30)), png_bytes((20, 30, 200), size=(31, 7))
    blobs = {image_ref(b).sha256: b for b in (red, blue)}
    loaded = []

    def loader(ref: ImageRef) -> bytes:
        loaded.append(ref.sha256)
        return blobs[ref.sha256]

    ctx = context("What colour is the mug in the photo?",
                  item("s1", 0, "Here is my mug.", [image_ref(red)]),
                  item("s2", 0, "And the mug again with my bag.", [image_ref(red), image_ref(blue)]))
    ApiAnswerer(make_client(server), image_loader=loader).answer(ctx.question, ctx)
    assert [data for _, data in server.images] == [red, blue]  # bytes intact, duplicate sent once
    assert all(head == "data:image/png;base64" for head, _ in server.images)
    assert len(loaded) == 2
    parts = server.requests[-1][1]["messages"][1]["content"]
    kinds = [p["type"] for p in parts]
    assert kinds == ["text", "text", "text", "image_url", "text", "text", "text", "image_url", "text"]  # interleaved
    assert any(p.get("text", "").endswith("(shown above)>") for p in parts)
    # without a loader the images are named, not sent
    ApiAnswerer(make_client(server)).answer(ctx.question, ctx)
    assert len(server.images) == 2 and "(not shown)" in _user_text(server.requests[-1][1])


# ---------------------------------------------------------------------------------------------
# Usage
# ---------------------------------------------------------------------------------------------
def test_usage_recorded_per_call_and_per_query(server):
    client = make_client(server)
    answerer = ApiAnswerer(client)
    ctx = context("Where is my red mug?", item("s2", 1, "My red mug is on the top shelf."))
    with client.meter.scope() as q1:
        answerer.answer(ctx.question, ctx)
        answerer.answer(ctx.question, ctx)
    with client.meter.scope() as q2:
        answerer.answer(ctx.question, ctx)
    s = server.usages
    assert q1.usage == Usage(s[0]["prompt_tokens"] + s[1]["prompt_tokens"],
                             s[0]["completion_tokens"] + s[1]["completion_tokens"], 2)
    assert q2.usage == Usage(s[2]["prompt_tokens"], s[2]["completion_tokens"], 1)
    assert client.meter.total == q1.usage + q2.usage
    assert client.meter.total.total_tokens == sum(u["total_tokens"] for u in s)
    assert client.meter.reset() == q1.usage + q2.usage and client.meter.total == Usage()


def test_usage_scopes_keep_concurrent_queries_apart(server):
    client = make_client(server, max_concurrency=4)
    results = {}

    def query(n: int):
        with client.meter.scope() as scope:
            for _ in range(n):
                client.chat([{"role": "user", "content": "Question: hello there\n"}])
        results[n] = scope.usage

    threads = [threading.Thread(target=query, args=(n,)) for n in (1, 2, 3)]
    [t.start() for t in threads]
    [t.join(10) for t in threads]
    assert {n: u.calls for n, u in results.items()} == {1: 1, 2: 2, 3: 3}
    assert client.meter.total == results[1] + results[2] + results[3]


def test_missing_usage_is_counted_as_unreported(server):
    body = {"choices": [{"message": {"role": "assistant", "content": "ok"}}]}
    server.script = [{"raw": json.dumps(body).encode()}]
    out = make_client(server).chat([{"role": "user", "content": "hi"}])
    assert out.text == "ok" and out.usage == Usage(0, 0, 1, 1)


# ---------------------------------------------------------------------------------------------
# Retries, timeouts, errors, concurrency
# ---------------------------------------------------------------------------------------------
def test_429_retry_after_is_respected(server):
    server.script = [{"status": 429, "headers": [("Retry-After", "0.3")]}]
    client = make_client(server)
    start = time.monotonic()
    out = client.chat([{"role": "user", "content": "Question: hi"}])
    assert time.monotonic() - start >= 0.3
    assert out.attempts == 2 and len(server.requests) == 2
    assert client.meter.total.calls == 1  # the refused attempt carried no usage


def test_5xx_retried_with_backoff_then_clear_error(server):
    server.script = [{"status": 500}, {"status": 503}, {"status": 502}]
    with pytest.raises(ApiError) as err:
        make_client(server, max_retries=2).chat([{"role": "user", "content": "hi"}])
    assert err.value.status == 502 and err.value.attempts == 3 and len(server.requests) == 3
    assert err.value.fix and "HTTP 502" in str(err.value)
    server.script = [{"status": 500}]
    assert make_client(server).chat([{"role": "user", "content": "hi"}]).attempts == 2


@pytest.mark.parametrize("status, hint", [(401, "C3M_API_KEY"), (404, "/v1"), (400, "request options")])
def test_other_4xx_fail_at_once_with_a_fix(server, status, hint):
    server.script = [{"status": status}]
    with pytest.raises(ApiError) as err:
        make_client(server).chat([{"role": "user", "content": "hi"}])
    assert err.value.status == status and len(server.requests) == 1 and hint in err.value.fix


def test_wrong_path_gives_404_fix(server):
    client = ApiClient(server.base_url.replace("/v1", ""), "test-model", api_key="", max_retries=0)
    with pytest.raises(ApiError, match="HTTP 404") as err:
        client.chat([{"role": "user", "content": "hi"}])
    assert "/v1" in err.value.fix


def test_timeout_raises_then_retry_recovers(server):
    server.script = [{"sleep": 1.0}]
    start = time.monotonic()
    with pytest.raises(ApiTimeout) as err:
        make_client(server, timeout=0.2, max_retries=0).chat([{"role": "user", "content": "hi"}])
    assert time.monotonic() - start < 0.9 and isinstance(err.value, C3MError) and err.value.fix
    server.script = [{"sleep": 1.0}]
    out = make_client(server, timeout=0.3, max_retries=1).chat([{"role": "user", "content": "Question: hi"}])
    assert out.attempts == 2


def test_connection_errors_are_retried_then_reported():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    client = ApiClient(f"http://127.0.0.1:{port}/v1", "m", api_key="", backoff=0.01, max_retries=2, timeout=2)
    with pytest.raises(ApiError, match="connection failed") as err:
        client.chat([{"role": "user", "content": "hi"}])
    assert err.value.attempts == 3 and err.value.status is None


def test_body_that_is_not_a_completion_is_an_error(server):
    server.script = [{"raw": b"<html>proxy error</html>"}]
    with pytest.raises(ApiError, match="not a chat completion"):
        make_client(server).chat([{"role": "user", "content": "hi"}])


@pytest.mark.parametrize("limit", [2, 8])
def test_concurrency_limit_shared_across_threads(server, limit):
    server.delay = 0.15
    client = make_client(server, max_concurrency=limit)
    threads = [threading.Thread(target=client.chat, args=([{"role": "user", "content": "Question: x"}],))
               for _ in range(8)]
    [t.start() for t in threads]
    [t.join(10) for t in threads]
    assert len(server.usages) == 8
    if limit == 2:
        assert server.max_in_flight == 2
    else:  # the control: without a tight limit the server does see more at once
        assert server.max_in_flight > 2


def test_api_key_from_argument_and_environment(server, monkeypatch):
    monkeypatch.delenv("C3M_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai")
    ApiClient(server.base_url, "m").chat([{"role": "user", "content": "hi"}])
    monkeypatch.setenv("C3M_API_KEY", "sk-c3m")
    ApiClient(server.base_url, "m").chat([{"role": "user", "content": "hi"}])
    ApiClient(server.base_url, "m", api_key="sk-arg").chat([{"role": "user", "content": "hi"}])
    auth = [h.get("Authorization") for h, _ in server.requests]
    assert auth == ["Bearer sk-openai", "Bearer sk-c3m", "Bearer sk-arg"]


def test_from_env_and_bad_configuration(server, monkeypatch):
    monkeypatch.setenv("C3M_API_BASE_URL", server.base_url)
    monkeypatch.setenv("C3M_API_MODEL", "env-model")
    client = ApiClient.from_env(api_key="")
    assert client.model == "env-model" and client.url == server.base_url + "/chat/completions"
    monkeypatch.delenv("C3M_API_MODEL")
    with pytest.raises(C3MError, match="C3M_API_MODEL"):
        ApiClient.from_env()
    with pytest.raises(C3MError, match="not an http"):
        ApiClient("127.0.0.1:8000", "m")


def test_backoff_and_retry_after_parsing():
    rng = random.Random(1)
    for attempt in range(8):
        step = min(4.0, 0.5 * 2 ** attempt)
        delays = [backoff_delay(attempt, 0.5, 4.0, rng) for _ in range(50)]
        assert all(step / 2 <= d <= step for d in delays) and len(set(delays)) > 1  # jittered, capped
    assert parse_retry_after("2") == 2.0 and parse_retry_after("0.5") == 0.5
    assert parse_retry_after(None) is None and parse_retry_after("soon") is None
    now = time.time()
    assert 9 <= parse_retry_after(formatdate(now + 10, usegmt=True), now=now) <= 10


# ---------------------------------------------------------------------------------------------
# Structured extraction and the LLM judge
# ---------------------------------------------------------------------------------------------
ENTITIES = {"type": "object", "required": ["entities"], "additionalProperties": False,
            "properties": {"entities": {"type": "array", "items": {"type": "string"}}}}


def test_extraction_validated_against_schema(server):
    out = ApiExtractor(make_client(server)).extract("List the named entities.", "Alice met Bob in Paris.", ENTITIES)
    assert out.data == {"entities": ["Alice", "Bob", "Paris"]} and out.attempts == 1 and out.usage.calls == 1
    assert server.requests[-1][1]["response_format"] == {"type": "json_object"}


def test_extraction_retries_invalid_json_then_succeeds(server):
    server.script = [{"content": "Sure! The entities are Alice and Bob."}, {"content": '{"names": ["Alice"]}'}]
    out = ApiExtractor(make_client(server), max_attempts=3).extract("List entities.", "Alice met Bob.", ENTITIES)
    assert out.data == {"entities": ["Alice", "Bob"]} and out.attempts == 3 and out.usage.calls == 3
    second, third = server.requests[1][1]["messages"], server.requests[2][1]["messages"]
    assert "not valid JSON" in second[-1]["content"] and second[-2]["role"] == "assistant"
    assert "missing required property 'entities'" in third[-1]["content"] and len(third) == 4


def test_extraction_gives_a_clear_error_after_max_attempts(server):
    server.script = [{"content": "no"}, {"content": '{"entities": "Alice"}'}]
    with pytest.raises(ExtractionError) as err:
        ApiExtractor(make_client(server), max_attempts=2).extract("List entities.", "Alice.", ENTITIES)
    assert "2 attempt(s)" in str(err.value) and "expected array" in str(err.value) and err.value.fix


def test_extraction_accepts_a_code_fence_and_images(server):
    server.script = [{"content": '```json\n{"entities": []}\n```'}]
    img = png_bytes()
    out = ApiExtractor(make_client(server), json_mode=False).extract("List entities.", "x", ENTITIES,
                                                                     images=[(img, "image/png")])
    assert out.data == {"entities": []} and server.images == [("data:image/png;base64", img)]
    assert "response_format" not in server.requests[-1][1]


def test_schema_validator_subset():
    schema = {"type": "object", "required": ["label", "score"],
              "properties": {"label": {"enum": ["same", "update"]}, "score": {"type": "number", "minimum": 0,
                                                                             "maximum": 1},
                             "n": {"type": "integer"}, "tags": {"type": "array", "maxItems": 1},
                             "note": {"type": ["string", "null"], "maxLength": 3}}}
    assert validate({"label": "same", "score": 0.5, "n": 2, "tags": ["a"], "note": None}, schema) == []
    errors = validate({"label": "x", "score": 2, "n": True, "tags": [1, 2], "note": "long"}, schema)
    assert len(errors) == 5 and any("$.n: expected integer" in e for e in errors)
    assert validate({}, schema) == ["$: missing required property 'label'", "$: missing required property 'score'"]
    with pytest.raises(C3MError, match="unsupported keywords"):
        check_schema({"type": "object", "properties": {"a": {"pattern": "x+"}}})


def test_llm_judge_records_model_and_prompt(server):
    judge = ApiJudge(make_client(server))
    assert isinstance(judge, Judge)
    yes = judge.judge("Where is the mug?", "on the top shelf", "It is on the top shelf.", "IE")
    no = judge.judge("Where is the mug?", "on the top shelf", "In the kitchen sink.", "IE")
    assert yes.correct and yes.score == 1.0 and not no.correct
    assert yes.judge == f"llm:test-model:{JUDGE_PROMPT_VERSION}" and yes.detail["model"] == "test-model"
    assert yes.detail["usage"]["calls"] == 1 and yes.detail["reason"]
    assert judge.judge("What is my dog's name?", "Not mentioned.", "I don't know.", "AR").correct
    assert not judge.judge("What is my dog's name?", "Not mentioned.", "Rex.", "AR").correct
    assert "grade answers" in server.requests[-1][1]["messages"][0]["content"]


def test_meter_can_be_shared_between_clients(server):
    meter = UsageMeter()
    make_client(server, meter=meter).chat([{"role": "user", "content": "Question: a b"}])
    make_client(server, meter=meter).chat([{"role": "user", "content": "Question: a b"}])
    assert meter.total.calls == 2


# ---------------------------------------------------------------------------------------------
# Perception through the endpoint (ApiPerception, the Extractor protocol)
# ---------------------------------------------------------------------------------------------
from c3m.models.api import ApiPerception  # noqa: E402
from c3m.models.base import Extractor  # noqa: E402
from c3m.types import VisualAnchor  # noqa: E402


def _reply(obj) -> dict:
    return {"content": json.dumps(obj)}


def test_perception_caption_sends_the_image_and_strips(server):
    img = png_bytes(size=(24, 16))
    server.script = [_reply({"caption": "  A red mug on a shelf. "})]
    p = ApiPerception(make_client(server))
    assert isinstance(p, Extractor)
    assert p.name == "api:test-model" and p.version.startswith("perception-1/")
    assert p.caption(img) == "A red mug on a shelf."
    assert server.images == [("data:image/png;base64", img)]
    payload = server.requests[-1][1]
    assert payload["response_format"] == {"type": "json_object"}
    assert "Describe this image" in _system(payload) and '"caption"' in _system(payload)


def test_perception_visual_anchors_clamp_boxes_to_the_image(server):
    img = png_bytes(size=(24, 16))
    server.script = [_reply({"objects": [
        {"label": " Mug ", "attribute": "colour", "value": "red", "bbox": [-5, 2, 30.4, 40]},  # clamped
        {"label": "lamp", "bbox": [20, 15, 3, 1]},                 # corners swapped
        {"label": "book", "bbox": [10, 10, 10, 12]},               # zero width: no box
        {"label": "cup", "bbox": [1, 2, 3]},                       # not four numbers: no box
        {"label": "ghost", "bbox": [30, 20, 40, 30]},              # wholly outside: no box
        {"label": "  ", "bbox": [0, 0, 5, 5]},                     # no label: dropped
        {"label": "plate", "attribute": "", "value": ""}]})]       # empty strings: None
    anchors = ApiPerception(make_client(server)).visual_anchors(img)
    assert anchors == [VisualAnchor("mug", "colour", "red", 1.0, (0, 2, 24, 16)),
                       VisualAnchor("lamp", None, None, 1.0, (3, 1, 20, 15)),
                       VisualAnchor("book", None, None, 1.0, None),
                       VisualAnchor("cup", None, None, 1.0, None),
                       VisualAnchor("ghost", None, None, 1.0, None),
                       VisualAnchor("plate", None, None, 1.0, None)]
    for a in anchors:
        if a.bbox is not None:
            x0, y0, x1, y1 = a.bbox
            assert 0 <= x0 < x1 <= 24 and 0 <= y0 < y1 <= 16
    assert "24x16" in _system(server.requests[-1][1])


def test_perception_ground(server):
    img = png_bytes(size=(24, 16))
    p = ApiPerception(make_client(server))
    server.script = [_reply({"found": False, "bbox": [1, 1, 5, 5]}), _reply({"found": True, "bbox": [2, 3, 100, 100]}),
                     _reply({"found": True}), _reply({"found": True, "bbox": [5, 5, 5, 9]})]
    assert p.ground(img, "red mug") is None
    assert p.ground(img, "red mug") == (2, 3, 24, 16)
    assert p.ground(img, "red mug") is None
    assert p.ground(img, "red mug") is None
    assert "'red mug'" in _system(server.requests[0][1]) and "24x16" in _system(server.requests[0][1])


def test_perception_summarize(server):
    server.script = [_reply({"summary": " Alice moved to Paris in May. "})]
    out = ApiPerception(make_client(server)).summarize("Alice: I moved to Paris in May!", max_tokens=32)
    assert out == "Alice moved to Paris in May."
    payload = server.requests[-1][1]
    assert "at most 32 tokens" in _system(payload) and _user_text(payload) == "Alice: I moved to Paris in May!"
    assert server.images == []  # text only


def test_perception_schema_invalid_reply_is_retried(server):
    img = png_bytes()
    server.script = [_reply({"caption": 5}), {"content": "a mug, I think"}, _reply({"caption": "a mug"})]
    assert ApiPerception(make_client(server), max_attempts=3).caption(img) == "a mug"
    assert len(server.requests) == 3
    second, third = server.requests[1][1]["messages"], server.requests[2][1]["messages"]
    assert "expected string" in second[-1]["content"] and second[-2]["role"] == "assistant"
    assert "not valid JSON" in third[-1]["content"]
    server.script = [_reply({"objects": [{"bbox": [0, 0, 4, 4]}]}), _reply({"objects": "mug"})]
    with pytest.raises(ExtractionError):
        ApiPerception(make_client(server), max_attempts=2).visual_anchors(img)
    server.script = [_reply({"bbox": [0, 0, 4, 4]})]
    with pytest.raises(ExtractionError, match="found"):
        ApiPerception(make_client(server), max_attempts=1).ground(img, "mug")


def test_perception_runner_over_the_endpoint(server):
    """perceive() with ApiPerception: caption, anchors, then a grounding call for the object the turn names."""
    import hashlib as _hashlib

    from c3m.types import ImageRef, Provenance, RawNode
    from c3m.write.perception import perceive

    img = png_bytes(size=(200, 100))
    ref = ImageRef(_hashlib.sha256(img).hexdigest(), "image/png", 200, 100, len(img))
    node = RawNode("n1", Provenance("ns", "s1", 0, datetime(2026, 3, 1)), "user", "Here is my red mug.", (ref,))
    server.script = [_reply({"caption": "a red mug"}),
                     _reply({"objects": [{"label": "mug", "attribute": "colour", "value": "red",
                                          "bbox": [20, 20, 60, 60]}, {"label": "table", "bbox": [0, 0, 200, 100]}]}),
                     _reply({"found": True, "bbox": [22, 21, 58, 61]})]
    ((rec, crop),) = perceive([node], ApiPerception(make_client(server)), lambda r: img)
    assert rec.caption == "a red mug" and rec.backend == "api:test-model" and rec.crop_phrase == "red mug"
    assert "'red mug'" in _system(server.requests[2][1])
    assert rec.crop_box == (18, 17, 62, 65)  # the grounded box padded by 10% per side
    assert crop is not None and rec.crop.width == 44 and rec.crop.height == 48
