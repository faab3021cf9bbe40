"""The project stands alone: its docs are in the repository and nothing points outside it."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEXT = (".py", ".md", ".toml", ".yml", ".yaml", ".txt", ".sh", ".cfg", ".json")
SKIP = {".git", ".venv", "build", "dist", "__pycache__", "c3m.egg-info", ".pytest_cache"}
OUTSIDE = re.compile(r"DESIGN\.md|\.\./shared|shared/papers|shared/DESIGN")


def project_files():
    for path in ROOT.rglob("*"):
        rel = path.relative_to(ROOT)
        if any(part in SKIP or part.endswith(".egg-info") or part.startswith(".venv") for part in rel.parts):
            continue
        if path.is_file() and (path.suffix in TEXT or path.name == "run") and path.stat().st_size < 2_000_000:
            yield rel, path


def test_nothing_points_outside_the_repository():
    me = Path(__file__).resolve()
    hits = [f"{rel}:{n}" for rel, path in project_files() if path.resolve() != me
            for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1) if OUTSIDE.search(line)]
    assert hits == []


def test_docs_named_by_readme_and_help_exist():
    from c3m.cli import build_parser

    named = set(re.findall(r"docs/[a-z_]+\.md", (ROOT / "README.md").read_text()))
    named |= set(re.findall(r"docs/[a-z_]+\.md", build_parser().format_help()))
    assert {"docs/architecture.md", "docs/evaluation.md"} <= named
    assert [d for d in sorted(named) if not (ROOT / d).is_file()] == []
