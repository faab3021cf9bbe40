"""Commands that need no model load none; the Python API hands back a context image's bytes.

Start-up *time* is measured in benchmarks/results/cli-startup-cpu.md, never asserted here; these tests check
the cause (which heavy modules a command imports), which does not depend on the machine.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from c3m import Memory
from c3m.errors import StoreError

HEAVY = ("torch", "transformers", "sentence_transformers", "spacy", "thinc", "numba")
PROBE = """
import contextlib, io, json, sys
from c3m.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    rc = main({argv!r})
print(json.dumps([rc, sorted(m for m in {heavy!r} if m in sys.modules)]))
"""


def loaded(argv: list[str], cwd) -> tuple[int, list[str]]:
    out = subprocess.run([sys.executable, "-c", PROBE.format(argv=argv, heavy=HEAVY)], cwd=cwd, capture_output=True,
                         text=True, timeout=300, check=True).stdout.strip().splitlines()[-1]
    rc, mods = json.loads(out)
    return rc, mods


@pytest.fixture(scope="module")
def demo_store(tmp_path_factory):
    root = tmp_path_factory.mktemp("startup")
    from c3m.cli import main

    assert main(["demo", "--store", str(root / "store"), "--dataset-out", str(root / "data")]) == 0
    return root


@pytest.mark.parametrize("argv", [
    ["inspect", "-n", "demo-user", "--store", "store"],
    ["inspect", "--store", "store"],
    ["namespaces", "--store", "store"],
    ["verify", "--store", "store"],
    ["methods"],
    ["validate", "data"],
    ["ingest", "data", "--store", "store", "-q"],   # every session already stored: a no-op
])
def test_commands_that_need_no_model_load_none(demo_store, argv):
    rc, mods = loaded(argv, demo_store)
    assert rc == 0 and mods == []


def test_ask_loads_neither_torch_nor_transformers(demo_store):
    rc, mods = loaded(["ask", "What colour is my mug now?", "--store", "store"], demo_store)
    assert rc == 0 and "torch" not in mods and "transformers" not in mods


def test_memory_image_bytes(demo_store):
    import hashlib

    with Memory(demo_store / "store", "demo-user") as mem:
        ctx = mem.retrieve("What is on the right side of my beach cooler?")
        ref = next(im for i in ctx.items for im in i.images)
        data = mem.image_bytes(ref)
        assert hashlib.sha256(data).hexdigest() == ref.sha256 and mem.image_bytes(ref.sha256) == data
        with pytest.raises(StoreError, match="not in the store"):
            mem.image_bytes("0" * 64)
