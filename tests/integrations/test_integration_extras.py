"""Each adapter is an extra: setup.py declares it, and without its framework the import says what to install."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_setup_declares_each_framework_extra():
    text = (ROOT / "setup.py").read_text()
    for extra in ("langgraph", "openai-agents", "llamaindex", "autogen"):
        assert re.search(rf'"{extra}": \[', text), extra
    assert 'EXTRAS["integrations"]' in text


@pytest.mark.parametrize("module,blocked,extra", [("langgraph", "langgraph", "langgraph"),
                                                  ("openai_agents", "agents", "openai-agents"),
                                                  ("llamaindex", "llama_index", "llamaindex"),
                                                  ("autogen", "autogen_core", "autogen")])
def test_missing_framework_names_the_extra(module, blocked, extra):
    code = (f"import sys; sys.modules[{blocked!r}] = None\n"
            f"try:\n    import c3m.integrations.{module}\nexcept ImportError as e:\n    print(e)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert f'pip install -e ".[{extra}]"' in out.stdout, out.stdout + out.stderr
