"""``api`` backends: any OpenAI-compatible chat endpoint (vLLM, Ollama, llama.cpp server, hosted).

One ``ApiClient`` per endpoint, shared by ``ApiAnswerer``, ``ApiJudge`` and ``ApiExtractor`` so that its
concurrency limit and usage meter cover all of them. It POSTs ``{base_url}/chat/completions`` with the
stdlib (urllib; ``httpx`` is not in the dependency stack) and talks to nothing but ``base_url``:

* timeouts per socket operation; retries with exponential backoff and jitter on 429, 5xx, timeouts and
  connection errors, honouring ``Retry-After``; other 4xx fail at once with a fix;
* a semaphore shared by every thread using the client bounds the requests in flight;
* ``usage`` (prompt/completion tokens) of each response is returned with the call and added to a
  ``UsageMeter``; ``with meter.scope() as s:`` accumulates one query's calls (per thread);
* structured extraction checks the reply against a JSON schema (a small validator for the subset in
  ``SCHEMA_KEYWORDS``; ``jsonschema`` is not a dependency), re-asks with the error, then raises
  ``ExtractionError``;
* images go as base64 ``data:`` URLs in ``image_url`` content parts.
"""
from __future__ import annotations

import base64
import http.client
import ipaddress
import json
import os
import random
import re
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any, Callable, Iterator, Mapping, Sequence

from ..errors import C3MError
from ..types import Answer, Context, ImageRef, chain_lines, item_header
from .judge import JudgeResult

PROMPT_VERSION = "c3m-answer-v2"  # v2: current/superseded marks and update chains
JUDGE_PROMPT_VERSION = "c3m-judge-v1"
EXTRACT_PROMPT_VERSION = "c3m-extract-v1"
API_KEY_ENV = ("C3M_API_KEY", "OPENAI_API_KEY")
BASE_URL_ENV = ("C3M_API_BASE_URL", "OPENAI_BASE_URL")
MODEL_ENV = "C3M_API_MODEL"
RETRY_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})


class ApiError(C3MError):
    """The endpoint could not give a usable reply; ``status`` is the HTTP status when there was one."""

    def __init__(self, message: str, *, status: int | None = None, attempts: int = 1, fix: str | None = None):
        self.status = status
        self.attempts = attempts
        super().__init__(message, fix=fix)


class ApiTimeout(ApiError):
    """Every attempt timed out."""


class ExtractionError(C3MError):
    """The model kept replying with JSON that is invalid or does not match the schema."""


# ---------------------------------------------------------------------------------------------
# Usage accounting
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Usage:
    """Token usage of one or more calls; ``unreported`` counts replies that carried no ``usage``."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    calls: int = 0
    unreported: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: "Usage") -> "Usage":
        return Usage(self.prompt_tokens + other.prompt_tokens, self.completion_tokens + other.completion_tokens,
                     self.calls + other.calls, self.unreported + other.unreported)

    def to_dict(self) -> dict[str, int]:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "total_tokens": self.total_tokens, "calls": self.calls, "unreported": self.unreported}


class UsageScope:
    """Usage of the calls made in one ``UsageMeter.scope()`` block (e.g. one query)."""

    def __init__(self):
        self.usage = Usage()


class UsageMeter:
    """Thread-safe running total of usage, plus per-thread scopes so concurrent queries stay apart."""

    def __init__(self):
        self._lock = threading.Lock()
        self._total = Usage()
        self._local = threading.local()

    def record(self, usage: Usage) -> None:
        with self._lock:
            self._total = self._total + usage
            for scope in getattr(self._local, "stack", ()):
                scope.usage = scope.usage + usage

    @property
    def total(self) -> Usage:
        with self._lock:
            return self._total

    def reset(self) -> Usage:
        """Zero the running total and return what it was."""
        with self._lock:
            total, self._total = self._total, Usage()
            return total

    @contextmanager
    def scope(self) -> Iterator[UsageScope]:
        """Collect the usage of calls made by this thread inside the block (scopes nest)."""
        scope = UsageScope()
        stack = self._local.__dict__.setdefault("stack", [])
        stack.append(scope)
        try:
            yield scope
        finally:
            stack.remove(scope)


# ---------------------------------------------------------------------------------------------
# HTTP client
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ChatResult:
    text: str
    usage: Usage
    model: str
    attempts: int
    seconds: float
    raw: Mapping[str, Any]


def backoff_delay(attempt: int, base: float, cap: float, rng: random.Random) -> float:
    """Exponential backoff with "equal jitter": half fixed, half random, so retries spread out."""
    step = min(cap, base * (2 ** attempt))
    return step / 2 + rng.uniform(0, step / 2)


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or HTTP-date); None when absent/bad."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when - (time.time() if now is None else now))


def _is_loopback(host: str | None) -> bool:
    if host in ("localhost",):
        return True
    try:
        return ipaddress.ip_address(host or "").is_loopback
    except ValueError:
        return False


def _first_env(names: Sequence[str]) -> str | None:
    return next((os.environ[n] for n in names if os.environ.get(n)), None)


class ApiClient:
    """An OpenAI-compatible chat-completions client with retries, a concurrency limit and usage metering.

    ``api_key`` defaults to $C3M_API_KEY, then $OPENAI_API_KEY; none is fine for local servers.
    ``timeout`` bounds each connect/read; ``max_retries`` counts retries after the first attempt; a
    Retry-After longer than ``max_backoff`` is capped at it.
    Loopback endpoints bypass any HTTP(S)_PROXY so a local server is never reached through a proxy.
    """

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None, timeout: float = 60.0,
                 max_retries: int = 4, backoff: float = 0.5, max_backoff: float = 30.0, max_concurrency: int = 4,
                 meter: UsageMeter | None = None, seed: int | None = None):
        parsed = urllib.parse.urlparse(base_url or "")
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise C3MError(f"api base_url {base_url!r} is not an http(s) URL",
                           fix="pass the server's OpenAI-compatible root, e.g. http://127.0.0.1:8000/v1")
        if not model:
            raise C3MError("api model name is empty", fix=f"pass model= or set ${MODEL_ENV}")
        if max_concurrency < 1 or max_retries < 0 or timeout <= 0:
            raise C3MError("api client limits must be positive",
                           fix="use max_concurrency >= 1, max_retries >= 0, timeout > 0")
        self.base_url = base_url.rstrip("/")
        self.url = self.base_url + "/chat/completions"
        self.model = model
        self.api_key = api_key if api_key is not None else _first_env(API_KEY_ENV)
        self.timeout, self.max_retries, self.backoff, self.max_backoff = timeout, max_retries, backoff, max_backoff
        self.max_concurrency = max_concurrency
        self.meter = meter or UsageMeter()
        self._slots = threading.BoundedSemaphore(max_concurrency)
        self._rng = random.Random(seed)
        handlers = [urllib.request.ProxyHandler({})] if _is_loopback(parsed.hostname) else []
        self._opener = urllib.request.build_opener(*handlers)

    @classmethod
    def from_env(cls, **overrides: Any) -> "ApiClient":
        """Build from $C3M_API_BASE_URL (or $OPENAI_BASE_URL), $C3M_API_MODEL and the key variables."""
        base_url = overrides.pop("base_url", None) or _first_env(BASE_URL_ENV)
        model = overrides.pop("model", None) or os.environ.get(MODEL_ENV)
        if not base_url or not model:
            raise C3MError("the api backend needs an endpoint and a model name",
                           fix=f"set ${BASE_URL_ENV[0]} (e.g. http://127.0.0.1:8000/v1) and ${MODEL_ENV}")
        return cls(base_url, model, **overrides)

    def _post_once(self, body: bytes) -> tuple[int, Mapping[str, str], bytes]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
        with self._slots:
            try:
                with self._opener.open(request, timeout=self.timeout) as resp:
                    return resp.status, dict(resp.headers), resp.read()
            except urllib.error.HTTPError as err:
                try:
                    data = err.read()
                except (OSError, AttributeError, http.client.HTTPException):
                    data = b""
                finally:
                    err.close()
                return err.code, dict(err.headers or {}), data

    def chat(self, messages: Sequence[Mapping[str, Any]], *, max_tokens: int | None = 256,
             temperature: float = 0.0, response_format: Mapping[str, Any] | None = None,
             extra: Mapping[str, Any] | None = None) -> ChatResult:
        """One chat completion; retried on transient failures; usage recorded on the meter."""
        payload: dict[str, Any] = {"model": self.model, "messages": list(messages), "temperature": temperature}
        if max_tokens is not None:
            payload["max_tokens"] = max_tokens
        if response_format is not None:
            payload["response_format"] = dict(response_format)
        payload.update(extra or {})
        body = json.dumps(payload).encode("utf-8")
        start = time.monotonic()
        last: tuple[str, int | None, bool] = ("", None, False)
        for attempt in range(self.max_retries + 1):
            wait = None
            try:
                status, headers, data = self._post_once(body)
            except (socket.timeout, TimeoutError) as exc:
                last = (f"timed out after {self.timeout:g}s ({exc})", None, True)
            except (OSError, http.client.HTTPException) as exc:  # URLError, reset, refused, truncated reply
                reason = getattr(exc, "reason", exc)
                timed_out = isinstance(reason, (socket.timeout, TimeoutError))
                last = (f"{'timed out' if timed_out else 'connection failed'}: {reason}", None, timed_out)
            else:
                if status == 200:
                    return self._result(data, attempt + 1, time.monotonic() - start)
                snippet = data[:300].decode("utf-8", "replace")
                if status not in RETRY_STATUS:
                    raise ApiError(f"{self.url} answered HTTP {status}: {snippet}", status=status,
                                   attempts=attempt + 1, fix=self._fix_for(status))
                last = (f"HTTP {status}: {snippet}", status, False)
                retry_after = {k.lower(): v for k, v in headers.items()}.get("retry-after")
                wait = parse_retry_after(retry_after)
            if attempt < self.max_retries:
                delay = backoff_delay(attempt, self.backoff, self.max_backoff, self._rng)
                time.sleep(min(self.max_backoff, max(delay, wait or 0.0)))
        message, status, timed_out = last
        kind = ApiTimeout if timed_out else ApiError
        raise kind(f"{self.url} failed after {self.max_retries + 1} attempt(s): {message}", status=status,
                   attempts=self.max_retries + 1,
                   fix="check that the server is up and reachable, or raise timeout=/max_retries=")

    def _fix_for(self, status: int) -> str:
        if status in (401, 403):
            return f"set a valid key with api_key= or ${API_KEY_ENV[0]}"
        if status == 404:
            return f"check base_url (usually ends in /v1; now {self.base_url}) and that model {self.model!r} is served"
        return "check the request options (model, max_tokens, response_format) against what the server supports"

    def _result(self, data: bytes, attempts: int, seconds: float) -> ChatResult:
        try:
            raw = json.loads(data)
            text = raw["choices"][0]["message"].get("content") or ""
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            raise ApiError(f"{self.url} returned a body that is not a chat completion ({exc!r}): "
                           f"{data[:200].decode('utf-8', 'replace')}", status=200, attempts=attempts,
                           fix="point base_url at an OpenAI-compatible /v1 root") from None
        reported = raw.get("usage") or {}
        usage = Usage(int(reported.get("prompt_tokens") or 0), int(reported.get("completion_tokens") or 0), 1,
                      0 if reported else 1)
        self.meter.record(usage)
        return ChatResult(text, usage, str(raw.get("model") or self.model), attempts, seconds, raw)


def image_part(data: bytes, mime: str = "image/png") -> dict[str, Any]:
    """An OpenAI ``image_url`` content part carrying the image inline as a base64 data URL."""
    return {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"}}


def _message(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    """Text-only messages go as a plain string, which every server (and text-only model) accepts."""
    if all(p["type"] == "text" for p in parts):
        return "\n".join(p["text"] for p in parts)
    return parts


# ---------------------------------------------------------------------------------------------
# Answerer
# ---------------------------------------------------------------------------------------------
ANSWER_SYSTEM = (
    "You answer a user's question about their own past conversations, using ONLY the memory excerpts given. "
    "Each excerpt starts with a header [session#turn date time role]; images follow the excerpt they belong to. "
    "A header marked (current) is the latest state of something that changed; (superseded) means a later excerpt "
    "changed it, and the 'Updates' lines list each change oldest first. Answer questions about now from the "
    "current state, and questions about before, originally or when from the updates. Without marks, later "
    "excerpts may update earlier ones: prefer the latest state unless the question asks about the past. "
    "Reply with a concise answer (a short phrase or one sentence), then the headers of the excerpts you used "
    "as [session#turn]. If the excerpts do not support an answer, reply exactly: "
    "I don't know: nothing in my memory supports an answer.")
_CITE = re.compile(r"\[([^\[\]\s]+)#(\d+)\]")


class ApiAnswerer:
    """Answerer backed by a chat model; reads text and images of the context (versioned prompt).

    ``image_loader`` (e.g. ``ColdStore.image_bytes``) fetches originals; without it images are only named.
    ``[session#turn]`` tags in the reply become ``Answer.cited`` node ids and are stripped from the text.
    Usage goes to ``client.meter`` (wrap a query in ``meter.scope()``); ``last_usage`` is the latest call's.
    """

    prompt_version = PROMPT_VERSION
    sees_images = True  # original images go as data URLs

    def __init__(self, client: ApiClient, *, image_loader: Callable[[ImageRef], bytes] | None = None,
                 max_tokens: int = 128):
        self.client = client
        self.image_loader = image_loader
        self.max_tokens = max_tokens
        self.name = f"api:{client.model}"
        self.last_usage = Usage()

    def messages(self, question: str, context: Context, *,
                 image_loader: Callable[[ImageRef], bytes] | None = None) -> list[dict[str, Any]]:
        image_loader = image_loader or self.image_loader
        parts: list[dict[str, Any]] = [{"type": "text", "text": "Memory excerpts:"}]
        sent: set[str] = set()
        for item in context.items:
            parts.append({"type": "text", "text": f"{item_header(item)} {item.text}"})
            for ref in item.images:
                if image_loader is not None and ref.sha256 not in sent:
                    sent.add(ref.sha256)
                    parts.append({"type": "text", "text": f"<image {ref.sha256[:12]}>"})
                    parts.append(image_part(image_loader(ref), ref.mime))
                else:
                    parts.append({"type": "text", "text": f"<image {ref.sha256[:12]}"
                                  f"{' (shown above)' if ref.sha256 in sent else ' (not shown)'}>"})
        if not context.items:
            parts.append({"type": "text", "text": "(none)"})
        parts += [{"type": "text", "text": line} for line in chain_lines(context.chains)]
        parts.append({"type": "text", "text": f"Question: {question}"})
        return [{"role": "system", "content": ANSWER_SYSTEM}, {"role": "user", "content": _message(parts)}]

    def answer(self, question: str, context: Context, *,
               image_loader: Callable[[ImageRef], bytes] | None = None) -> Answer:
        """``image_loader`` (per call) overrides the constructor's: one answerer can serve many stores."""
        result = self.client.chat(self.messages(question, context, image_loader=image_loader),
                                  max_tokens=self.max_tokens)
        self.last_usage = result.usage
        by_header = {(i.provenance.session_id, i.provenance.turn_index): i.node_id for i in context.items}
        cited = tuple(dict.fromkeys(by_header[(s, int(t))] for s, t in _CITE.findall(result.text)
                                    if (s, int(t)) in by_header))
        text = " ".join(_CITE.sub(" ", result.text).split()) or result.text.strip()
        return Answer(text, context, self.name, cited=cited)


# ---------------------------------------------------------------------------------------------
# Structured extraction
# ---------------------------------------------------------------------------------------------
SCHEMA_KEYWORDS = frozenset({"type", "properties", "required", "additionalProperties", "items", "enum",
                             "minimum", "maximum", "minItems", "maxItems", "minLength", "maxLength"})
_ANNOTATIONS = frozenset({"title", "description", "$schema", "$id", "default", "examples"})
_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}


def check_schema(schema: Mapping[str, Any], path: str = "$") -> None:
    """Refuse schema keywords the validator does not implement, rather than silently ignore them."""
    unknown = set(schema) - SCHEMA_KEYWORDS - _ANNOTATIONS
    if unknown:
        raise C3MError(f"schema at {path} uses unsupported keywords {sorted(unknown)}",
                       fix=f"use only {sorted(SCHEMA_KEYWORDS)}")
    for key, sub in (schema.get("properties") or {}).items():
        check_schema(sub, f"{path}.{key}")
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), Mapping):
            check_schema(schema[key], f"{path}[{key}]")


def _is_type(value: Any, name: str) -> bool:
    if name == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if name == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, _TYPES[name])


def validate(value: Any, schema: Mapping[str, Any], path: str = "$") -> list[str]:
    """JSON-schema validation for the ``SCHEMA_KEYWORDS`` subset; returns error messages (empty = valid)."""
    types = schema.get("type")
    if types is not None:
        names = [types] if isinstance(types, str) else list(types)
        if not any(_is_type(value, n) for n in names):
            return [f"{path}: expected {' or '.join(names)}, got {type(value).__name__}"]
    errors: list[str] = []
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path}: {value!r} is not one of {schema['enum']}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append(f"{path}: {value} < minimum {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            errors.append(f"{path}: {value} > maximum {schema['maximum']}")
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0) or len(value) > schema.get("maxLength", float("inf")):
            errors.append(f"{path}: string length {len(value)} out of bounds")
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0) or len(value) > schema.get("maxItems", float("inf")):
            errors.append(f"{path}: {len(value)} items out of bounds")
        if isinstance(schema.get("items"), Mapping):
            for i, v in enumerate(value):
                errors += validate(v, schema["items"], f"{path}[{i}]")
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        errors += [f"{path}: missing required property {k!r}" for k in schema.get("required", ()) if k not in value]
        extra = schema.get("additionalProperties", True)
        for k, v in value.items():
            if k in props:
                errors += validate(v, props[k], f"{path}.{k}")
            elif extra is False:
                errors.append(f"{path}: unexpected property {k!r}")
            elif isinstance(extra, Mapping):
                errors += validate(v, extra, f"{path}.{k}")
    return errors


_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.S)


def parse_json_reply(text: str) -> Any:
    """JSON from a model reply, tolerating a Markdown code fence around it."""
    match = _FENCE.match(text)
    return json.loads(match.group(1) if match else text)


@dataclass(frozen=True)
class Extraction:
    data: Any
    usage: Usage
    attempts: int
    model: str


class ApiExtractor:
    """Structured extraction: JSON replies validated against a schema, re-asked with the error on failure.

    ``response_format`` is sent as ``{"type": "json_object"}`` by default (vLLM, Ollama and OpenAI accept
    it); pass ``json_mode=False`` for servers that reject it — the prompt asks for JSON either way.
    """

    prompt_version = EXTRACT_PROMPT_VERSION

    def __init__(self, client: ApiClient, *, max_attempts: int = 3, max_tokens: int = 512, json_mode: bool = True):
        if max_attempts < 1:
            raise C3MError("max_attempts must be >= 1", fix="pass max_attempts=1 or more")
        self.client, self.max_attempts, self.max_tokens, self.json_mode = client, max_attempts, max_tokens, json_mode
        self.name = f"api:{client.model}"

    def extract(self, instruction: str, text: str, schema: Mapping[str, Any], *,
                images: Sequence[tuple[bytes, str]] = ()) -> Extraction:
        """Run ``instruction`` over ``text`` (+ (bytes, mime) images); returns data matching ``schema``."""
        check_schema(schema)
        system = (f"{instruction}\nReply with ONLY a JSON value (no prose, no code fence) that matches this "
                  f"JSON schema:\n{json.dumps(schema, sort_keys=True)}")
        parts = [{"type": "text", "text": text}] + [image_part(data, mime) for data, mime in images]
        messages: list[dict[str, Any]] = [{"role": "system", "content": system},
                                          {"role": "user", "content": _message(parts)}]
        fmt = {"type": "json_object"} if self.json_mode else None
        usage, problem = Usage(), ""
        for attempt in range(1, self.max_attempts + 1):
            result = self.client.chat(messages, max_tokens=self.max_tokens, response_format=fmt)
            usage = usage + result.usage
            try:
                data = parse_json_reply(result.text)
                errors = validate(data, schema)
            except ValueError as exc:
                errors = [f"not valid JSON ({exc})"]
            if not errors:
                return Extraction(data, usage, attempt, result.model)
            problem = "; ".join(errors[:5])
            messages = messages[:2] + [{"role": "assistant", "content": result.text},
                                       {"role": "user", "content": f"That reply is invalid: {problem}. Reply again "
                                                                   f"with ONLY JSON matching the schema."}]
        raise ExtractionError(f"model {self.client.model!r} gave no valid JSON in {self.max_attempts} attempt(s); "
                              f"last problem: {problem}",
                              fix="use a model that follows JSON instructions (or serve it with guided decoding), "
                                  "or raise max_attempts=")


# ---------------------------------------------------------------------------------------------
# LLM judge
# ---------------------------------------------------------------------------------------------
JUDGE_SYSTEM = (
    "You grade answers to questions about a user's past conversations. Given the question, the gold answer and "
    "a response, decide whether the response is CORRECT: it states the same fact as the gold answer (wording, "
    "extra detail and format may differ; a date, number or name must match). If the gold answer says the "
    "question cannot be answered from the conversations, the response is CORRECT only if it also declines to "
    "answer. Otherwise it is WRONG. Reply with JSON: {\"verdict\": \"CORRECT\" or \"WRONG\", \"reason\": "
    "\"<one short sentence>\"}.")
JUDGE_SCHEMA = {"type": "object", "required": ["verdict"],
                "properties": {"verdict": {"type": "string", "enum": ["CORRECT", "WRONG"]},
                               "reason": {"type": "string"}}}


class ApiJudge:
    """LLM-as-judge with a fixed prompt (``JUDGE_PROMPT_VERSION``); its name records model and prompt."""

    def __init__(self, client: ApiClient, *, max_attempts: int = 3, json_mode: bool = True):
        self.client = client
        self._extractor = ApiExtractor(client, max_attempts=max_attempts, max_tokens=128, json_mode=json_mode)
        self.name = f"llm:{client.model}:{JUDGE_PROMPT_VERSION}"

    def judge(self, question: str, gold: str, prediction: str, category: str | None = None) -> JudgeResult:
        lines = [f"Question: {question}", f"Gold answer: {gold}", f"Response: {prediction}"]
        if category == "AR":
            lines.insert(2, "(The gold answer is a refusal: the subject never came up.)")
        out = self._extractor.extract(JUDGE_SYSTEM, "\n".join(lines), JUDGE_SCHEMA)
        correct = out.data["verdict"] == "CORRECT"
        return JudgeResult(correct, float(correct), self.name,
                           {"model": out.model, "reason": out.data.get("reason", ""), "usage": out.usage.to_dict(),
                            "prompt_version": JUDGE_PROMPT_VERSION})


__all__ = ["ApiAnswerer", "ApiClient", "ApiError", "ApiExtractor", "ApiJudge", "ApiTimeout", "ChatResult",
           "Extraction", "ExtractionError", "JUDGE_PROMPT_VERSION", "PROMPT_VERSION", "Usage", "UsageMeter",
           "backoff_delay", "check_schema", "image_part", "parse_retry_after", "validate"]


# ---------------------------------------------------------------------------------------------
# Perception through an endpoint (the Extractor protocol over ApiExtractor)
# ---------------------------------------------------------------------------------------------
_CAPTION_SCHEMA = {"type": "object", "required": ["caption"], "properties": {"caption": {"type": "string"}}}
_ANCHORS_SCHEMA = {"type": "object", "required": ["objects"], "properties": {"objects": {"type": "array", "items": {
    "type": "object", "required": ["label"],
    "properties": {"label": {"type": "string"}, "attribute": {"type": "string"}, "value": {"type": "string"},
                   "bbox": {"type": "array", "items": {"type": "number"}}}}}}}
_BOX_SCHEMA = {"type": "object", "required": ["found"],
               "properties": {"found": {"type": "boolean"}, "bbox": {"type": "array", "items": {"type": "number"}}}}
_SUMMARY_SCHEMA = {"type": "object", "required": ["summary"], "properties": {"summary": {"type": "string"}}}


def _mime(image: bytes) -> str:
    return "image/png" if image[:8] == b"\x89PNG\r\n\x1a\n" else ("image/jpeg" if image[:2] == b"\xff\xd8" else
                                                                     "image/webp" if image[8:12] == b"WEBP" else "image/png")


def _box(values, width: int, height: int) -> tuple[int, int, int, int] | None:
    if not isinstance(values, list) or len(values) != 4:
        return None
    x0, y0, x1, y1 = (int(round(float(v))) for v in values)
    x0, x1 = max(0, min(x0, x1)), min(width, max(x0, x1))
    y0, y1 = max(0, min(y0, y1)), min(height, max(y0, y1))
    return (x0, y0, x1, y1) if x1 > x0 and y1 > y0 else None


class ApiPerception:
    """Write-time perception (captions, visual anchors, grounding boxes, summaries) from any OpenAI-compatible
    VLM endpoint, as JSON validated against a schema. Boxes are asked for in the image's own pixels."""

    def __init__(self, client: ApiClient, **kwargs):
        self.extractor = ApiExtractor(client, **kwargs)
        self.name = f"api:{client.model}"
        self.version = f"perception-1/{EXTRACT_PROMPT_VERSION}"

    def _size(self, image: bytes) -> tuple[int, int]:
        import io

        from PIL import Image

        with Image.open(io.BytesIO(image)) as im:
            return im.size

    def caption(self, image: bytes) -> str:
        out = self.extractor.extract("Describe this image in one factual sentence: the main objects, their colours, "
                                     "shapes and materials, and any readable text.", "", _CAPTION_SCHEMA,
                                     images=[(image, _mime(image))])
        return str(out.data["caption"]).strip()

    def visual_anchors(self, image: bytes):
        from .base import VisualAnchor

        w, h = self._size(image)
        out = self.extractor.extract(f"List the distinct objects in this {w}x{h} image: a short noun label, one visible "
                                     "attribute (colour, shape, material or count) and its value, and the bounding box "
                                     "[x0, y0, x1, y1] in pixels.", "", _ANCHORS_SCHEMA, images=[(image, _mime(image))])
        anchors = []
        for o in out.data["objects"]:
            label = str(o.get("label", "")).strip().lower()
            if label:
                anchors.append(VisualAnchor(label, o.get("attribute") or None, (o.get("value") or None),
                                            1.0, _box(o.get("bbox"), w, h)))
        return anchors

    def ground(self, image: bytes, phrase: str):
        w, h = self._size(image)
        out = self.extractor.extract(f"Find '{phrase}' in this {w}x{h} image. Reply found=false if it is not there, "
                                     "else its bounding box [x0, y0, x1, y1] in pixels.", "", _BOX_SCHEMA,
                                     images=[(image, _mime(image))])
        return _box(out.data.get("bbox"), w, h) if out.data.get("found") else None

    def summarize(self, text: str, max_tokens: int = 64) -> str:
        out = self.extractor.extract(f"Summarise this conversation excerpt in at most {max_tokens} tokens, keeping "
                                     "names, numbers, dates and changes of state.", text, _SUMMARY_SCHEMA)
        return str(out.data["summary"]).strip()
