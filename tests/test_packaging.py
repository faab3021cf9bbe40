"""Install mapping: kernels/ is importable as ``c3m_kernels`` and ``transformers`` does not mistake it for
the PyPI package ``kernels`` (which it would then try to import ``get_kernel`` from)."""
from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _run(code: str, cwd: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_c3m_kernels_is_installed_and_kernels_is_not(tmp_path):
    out = _run("import importlib.util as u, c3m_kernels, c3m; "
               "print(u.find_spec('kernels') is None, c3m_kernels.__name__)", tmp_path)
    assert out == "True c3m_kernels"


def test_no_distribution_claims_a_top_level_kernels_package():
    owners = importlib.metadata.packages_distributions().get("kernels", [])
    assert "c3m" not in owners


@pytest.mark.parametrize("where", ["elsewhere", "repo"])
def test_transformers_does_not_see_a_kernels_package(tmp_path, where):
    pytest.importorskip("transformers")
    cwd = tmp_path if where == "elsewhere" else REPO  # from the repo root the kernels/ folder is on sys.path
    out = _run("from transformers.utils import import_utils as iu; print(iu.is_kernels_available())", cwd)
    assert out == "False"


def test_console_script_is_installed():
    eps = [ep for ep in importlib.metadata.entry_points(group="console_scripts") if ep.name == "c3m"]
    assert eps and eps[0].value == "c3m.cli:main"
