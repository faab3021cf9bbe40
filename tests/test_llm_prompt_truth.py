"""The LLM path gets the same truth as the offline answerer (#42, part 4).

A scripted OpenAI-compatible server on 127.0.0.1 (stdlib ``ThreadingHTTPServer``; nothing leaves the machine)
records every prompt ``Memory.ask`` sends through the ``api`` answerer. For a latest-state question and a
before/after question the newest step is marked ``(current)`` and the older ``(superseded on ...)``, the
``Updates`` line lists the chain oldest first, each step dated by its turn ("last Saturday" resolved against the
session's date); a question about an unrelated subject carries no chain and no mark;
and the evidence is in time order, each excerpt with its date.
"""
from __future__ import annotations

import json
import re
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from factories import serving

from c3m import Memory, Session, Turn
from c3m.config import MemoryConfig
from c3m.models import ApproxTokenCounter, HashingEmbedder, Models
from c3m.models.api import ApiAnswerer, ApiClient
from c3m.types import ReaderBudget

HEADER = re.compile(r"^\[(\S+)#(\d+) (\d{4}-\d\d-\d\d \d\d:\d\d) (\w+)\](?: \((?!current|superseded)[a-z_]+\))?( \((?:current|superseded"
                    r"(?: on \d{4}-\d\d-\d\d)?)\))? (.*)$")


class Recorder(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):
        payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.prompts.append(payload)
        reply = self.server.replies.pop(0) if self.server.replies else "I don't know."
        body = json.dumps({"id": "c", "object": "chat.completion", "model": payload["model"],
                           "choices": [{"index": 0, "message": {"role": "assistant", "content": reply},
                                        "finish_reason": "stop"}],
                           "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def llm():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    srv.daemon_threads = True
    srv.prompts, srv.replies = [], []
    with serving(srv):
        yield srv


DAYS = [datetime(2026, 5, d, 18, 0) for d in (2, 9, 16, 23, 30)]
SESSIONS = [
    Session("d1", DAYS[0], (Turn("user", "My car is silver and it is getting a bit scratched."),
                            Turn("assistant", "Silver hides scratches well."))),
    Session("d2", DAYS[1], (Turn("user", "I put the reading lamp in the study."),
                            Turn("assistant", "Good light for reading."))),
    Session("d3", DAYS[2], (Turn("user", "I baked banana bread for the neighbours."),
                            Turn("assistant", "They must have loved it."))),
    Session("d4", DAYS[3], (Turn("user", "I had my car wrapped in green last Saturday."),
                            Turn("assistant", "Green sounds fun."))),
    Session("d5", DAYS[4], (Turn("user", "I moved the reading lamp to the bedroom."),
                            Turn("assistant", "Cosy."))),
]


def prompt_lines(payload) -> list[str]:
    user = [m for m in payload["messages"] if m["role"] == "user"][0]["content"]
    if isinstance(user, str):
        return user.splitlines()
    return [line for p in user if p["type"] == "text" for line in p["text"].splitlines()]


def evidence(lines) -> list[tuple[str, datetime, str, str]]:
    out = []
    for line in lines:
        m = HEADER.match(line)
        if m:
            out.append((f"{m.group(1)}#{m.group(2)}", datetime.fromisoformat(m.group(3)), (m.group(5) or "").strip(),
                        m.group(6)))
    return out


def ask_all(llm, store_path, questions):
    client = ApiClient(f"http://127.0.0.1:{llm.server_address[1]}/v1", "scripted", api_key="", timeout=5.0,
                       max_retries=0, seed=0)
    models = Models(HashingEmbedder(64), ApproxTokenCounter(), ApiAnswerer(client))
    cfg = MemoryConfig(method="c3m", method_options={"anchors": "heuristic"})
    with Memory(store_path, "me", config=cfg, models=models) as mem:
        for s in SESSIONS:
            mem.add_session(s)
        answers = [mem.ask(q, ReaderBudget(raw_nodes=16)) for q in questions]
    return answers, [prompt_lines(p) for p in llm.prompts]


def test_latest_state_and_before_questions_carry_the_marks(llm, store_path):
    llm.replies = ["green [d4#0]", "silver [d1#0]"]
    answers, prompts = ask_all(llm, store_path, ["What colour is my car now?",
                                                 "What colour was my car before it was wrapped?"])
    assert [a.text for a in answers] == ["green", "silver"] and answers[0].cited
    for lines in prompts:
        marks = {turn: mark for turn, _, mark, _ in evidence(lines)}
        assert marks["d4#0"] == "(current)"
        assert marks["d1#0"] == "(superseded on 2026-05-16)"  # "last Saturday", said on Saturday 23 May
        assert all(marks[t] == "" for t in marks if t not in ("d1#0", "d4#0"))  # the lamp, the bread: no marks
        assert "- car: silver (d1#0, 2026-05-02) -> green (d4#0, 2026-05-16, current)" in lines
        assert sum(line.startswith("- ") for line in lines) == 1  # one chain: the car's
        assert lines[-1].startswith("Question: ")


def test_a_move_is_a_place_chain(llm, store_path):
    answers, (lines,) = ask_all(llm, store_path, ["Where is my reading lamp now?"])
    marks = {turn: mark for turn, _, mark, _ in evidence(lines)}
    assert marks["d5#0"] == "(current)" and marks["d2#0"].startswith("(superseded")
    assert marks["d4#0"] == ""  # the car's turn is not about the lamp
    assert "- lamp: study (d2#0, 2026-05-09) -> bedroom (d5#0, 2026-05-30, current)" in lines


def test_unrelated_subject_carries_no_chain(llm, store_path):
    answers, (lines,) = ask_all(llm, store_path, ["What did I bake for the neighbours?"])
    ev = evidence(lines)
    assert ev and all(mark == "" for _, _, mark, _ in ev)
    assert "Updates (oldest first):" not in lines and not any(line.startswith("- ") for line in lines)


def test_evidence_is_in_time_order_with_dates(llm, store_path):
    answers, prompts = ask_all(llm, store_path, ["What colour is my car now?", "Where is my reading lamp now?",
                                                 "What did I bake for the neighbours?"])
    for lines in prompts:
        ev = evidence(lines)
        times = [t for _, t, _, _ in ev]
        assert len(ev) >= 2 and times == sorted(times)
        assert {turn.split("#")[0] for turn, *_ in ev} <= {"d1", "d2", "d3", "d4", "d5"}
