"""A new user's first hour, replayed through the installed ``c3m`` command (subprocesses, default models).

The history: "I painted my bike red", later "the red paint was peeling, so I repainted my bike blue". Each
printed answer, message and exit code is checked, as a user would read them.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SESSIONS = [
    ("s1", "2026-03-01T10:00:00", "I painted my bike red this weekend.", "Red is a bold choice!"),
    ("s2", "2026-03-08T10:00:00", "I started baking sourdough bread on Sundays.", "Sourdough takes patience."),
    ("s3", "2026-04-02T10:00:00", "The red paint was peeling, so I repainted my bike blue.", "Blue should look great."),
    ("s4", "2026-04-20T10:00:00", "My sister visited and we went hiking by the lake.", "Sounds lovely."),
]


def c3m(*args, cwd: Path, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("c3m")
    cmd = [str(exe)] if exe.exists() else [shutil.which("c3m") or "c3m"]
    env = {k: v for k, v in os.environ.items() if k not in ("C3M_STORE", "C3M_NAMESPACE")}
    env.update(env_extra or {})
    return subprocess.run(cmd + [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    """The newcomer's folder with their dataset, ingested once into ./store."""
    root = tmp_path_factory.mktemp("newcomer")
    history = {"id": "me", "questions": [], "sessions": [
        {"id": sid, "time": t, "turns": [{"role": "user", "text": u}, {"role": "assistant", "text": a}]}
        for sid, t, u, a in SESSIONS]}
    (root / "data").mkdir()
    (root / "data" / "episodes.jsonl").write_text(json.dumps(history) + "\n")
    first = c3m("ingest", "data", "--store", "store", "-q", cwd=root)
    assert first.returncode == 0, first.stderr
    return root, first


def test_ingest_says_which_namespace_it_wrote(home):
    root, first = home
    assert "namespace me: 4 new, 0 already stored" in first.stdout
    assert 'c3m ask "QUESTION" -n me --store store' in first.stdout
    assert "unavailable" not in first.stderr and "WARNING" not in first.stderr.upper()  # no warning by default
    again = c3m("ingest", "data", "--store", "store", "-q", cwd=root)
    assert again.returncode == 0 and "namespace me: 0 new, 4 already stored" in again.stdout


@pytest.mark.parametrize("question,starts,quote", [
    ("What colour is my bike now?", "blue", "repainted my bike blue"),
    ("What colour was my bike before I repainted it?", "red", "painted my bike red"),
    ("When did I repaint my bike?", "2 April 2026", "repainted my bike blue"),
])
def test_ask_answers_from_the_state_asked_about(home, question, starts, quote):
    root, _ = home
    out = c3m("ask", question, "-n", "me", "--store", "store", cwd=root)
    assert out.returncode == 0, out.stderr
    answer = next(line for line in out.stdout.splitlines() if line.startswith("A: "))[3:]
    assert answer.startswith(starts) and quote in answer
    assert "- bike: red (s1#0" in out.stdout and "current)" in out.stdout  # the chain is shown
    assert out.stderr.strip() == ""


def test_the_only_namespace_is_the_default_and_dense_topk_agrees(home):
    root, _ = home
    out = c3m("ask", "What colour is my bike now?", "--store", "store", "--method", "dense-topk", cwd=root)
    assert out.returncode == 0, out.stderr
    assert "A: blue (since 2026-04-02)" in out.stdout and "namespace me" in out.stdout


def test_missing_store_or_namespace_fails_and_says_what_exists(home):
    root, _ = home
    out = c3m("ask", "What colour is my bike?", "--store", "nowhere", cwd=root)
    assert out.returncode == 2 and "no c3m store at nowhere" in out.stderr and "fix:" in out.stderr
    assert not (root / "nowhere").exists()  # nothing is created by asking
    out = c3m("ask", "What colour is my bike?", "-n", "default", "--store", "store", cwd=root)
    assert out.returncode == 2 and "no namespace 'default'" in out.stderr and "use one of: me" in out.stderr
    out = c3m("inspect", "-n", "nobody", "--store", "store", cwd=root)
    assert out.returncode == 2 and "use one of: me" in out.stderr
    out = c3m("forget", "--session", "s1", "--reason", "x", "--store", "store", cwd=root)
    assert out.returncode == 2 and "forget needs the namespace" in out.stderr


def test_namespaces_lists_them(home):
    root, _ = home
    out = c3m("namespaces", "--store", "store", cwd=root)
    assert out.returncode == 0 and "me: 4 sessions, 8 Raw Nodes" in out.stdout
    rows = json.loads(c3m("namespaces", "--store", "store", "--json", cwd=root).stdout)
    assert [r["namespace"] for r in rows] == ["me"]


def test_inspect_version_header_is_that_version(home):
    root, _ = home
    out = c3m("inspect", "-n", "me", "--version", "2", "--store", "store", cwd=root)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("namespace me  method c3m  version 2 of 4: 2 sessions, 4 Raw Nodes")
    assert "snapshot after session s2 (v2)" in out.stdout and "  3  s3" not in out.stdout
    latest = c3m("inspect", "-n", "me", "--store", "store", cwd=root).stdout
    assert "version 4 (latest): 4 sessions, 8 Raw Nodes" in latest
    assert "e00001: 2026-03-01" in latest or "relation chains (updates, oldest first): 0" in latest


def test_demo_answers_every_question(tmp_path):
    out = c3m("demo", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    answers = [line.strip()[3:] for line in out.stdout.splitlines() if line.strip().startswith("A: ")]
    # the studio's arched windows are named only in the assistant's reply ("arched windows"), the question asks
    # about "window frames": the offline answerer gives its evidence as "Not sure" instead of guessing
    golds = ["Not sure; the closest evidence", "blue", "red", "water bottles", "WEGO", "Not in memory"]
    assert len(answers) == len(golds)
    for answer, gold in zip(answers, golds):
        assert gold.lower() in answer.lower(), (gold, answer)
    assert answers[1].startswith("blue (since") and answers[2].startswith("red (until")
    assert "verify: OK" in out.stdout and "unavailable" not in out.stderr
