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


def _pypi_kernels_installed() -> bool:
    try:
        importlib.metadata.distribution("kernels")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def test_c3m_kernels_is_installed_and_kernels_is_not(tmp_path):
    # a top-level `kernels` may exist only as PyPI's package (transformers >= 5.25 depends on it), never as ours
    out = _run("import importlib.util as u, c3m_kernels, c3m; s = u.find_spec('kernels'); "
               f"print(s is None or not s.origin.startswith({str(REPO / 'kernels')!r}), c3m_kernels.__name__)", tmp_path)
    assert out == "True c3m_kernels"


def test_no_distribution_claims_a_top_level_kernels_package():
    owners = importlib.metadata.packages_distributions().get("kernels", [])
    assert "c3m" not in owners


@pytest.mark.parametrize("where", ["elsewhere", "repo"])
def test_transformers_does_not_see_a_kernels_package(tmp_path, where):
    pytest.importorskip("transformers")
    cwd = tmp_path if where == "elsewhere" else REPO  # from the repo root the kernels/ folder is on sys.path
    if not _pypi_kernels_installed():
        out = _run("from transformers.utils import import_utils as iu; print(iu.is_kernels_available())", cwd)
        assert out == "False"
        return
    # installed: transformers imports it at start-up, and must get PyPI's package, not the repo's folder
    out = _run("import transformers.activations, kernels; print(kernels.__file__)", cwd)
    assert not out.startswith(str(REPO / "kernels")), out


def test_kernels_imported_from_the_repo_root_hands_over_to_an_installed_package(tmp_path):
    """From the repo root `import kernels` finds this repo's folder first; it must hand over to the installed
    package of that name (a stand-in here, placed right after the root on sys.path)."""
    fake = tmp_path / "site" / "kernels"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("WHO = 'installed'\n")
    code = ("import sys; sys.path.insert(1, %r); import kernels; "
            "print(kernels.WHO, sys.modules['kernels'] is kernels)" % str(tmp_path / "site"))
    assert _run(code, REPO) == "installed True"
    # without a stand-in: PyPI's package when installed, else (nothing to hand over to) the repo's folder
    ours = _run(f"import kernels; print(kernels.__file__.startswith({str(REPO / 'kernels')!r}))", REPO)
    assert ours == str(not _pypi_kernels_installed())


def test_console_script_is_installed():
    eps = [ep for ep in importlib.metadata.entry_points(group="console_scripts") if ep.name == "c3m"]
    assert eps and eps[0].value == "c3m.cli:main"
