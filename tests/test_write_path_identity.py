"""The fast write path writes exactly the index the plain one wrote.

``ActiveIndex.usage`` is incremental (per-entry cached tokens and bytes, ``IndexEntry.accounting``): every number
it returns must equal the reference, ``measure_index(state(), count)``, or the capacity policy would repair
differently. Checked on every call while a synthetic history is written under tight budgets (many repairs of
every kind), and the committed snapshots are compared byte for byte with a run that uses the reference.
"""
from __future__ import annotations

import copy
import json
import pickle

import pytest

from c3m.budget import measure_index
from c3m.config import MemoryConfig
from c3m.dataset import iter_histories
from c3m.index.active import ActiveIndex
from c3m.memory import Memory
from c3m.types import WriteBudget

BUDGETS = [WriteBudget(entries=6, pages=2), WriteBudget(entries=3, pages=1, index_tokens=120, index_bytes=6000),
           WriteBudget(entries=24, pages=4, index_tokens=100_000, index_bytes=9000)]
FAST_USAGE = ActiveIndex.usage


def reference_usage(index: ActiveIndex, count):
    return measure_index(index.state(), count).as_tuple()


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    from c3m.eval.synth import generate_dataset

    root = generate_dataset(tmp_path_factory.mktemp("ident") / "ds", length=4000, episodes=1, seed=3,
                            progress=False)
    return next(iter(iter_histories(root)))


def _states(path, history, budget, models) -> list[str]:
    cfg = MemoryConfig(method="c3m", write_budget=budget)
    with Memory(path, "u", config=cfg, models=models) as mem:
        for s in history.sessions:
            mem.add_session(s)
        key = mem.method.snapshot_key
        return [json.dumps(mem.store.snapshot("u", key, v).state, sort_keys=True)
                for v in mem.store.snapshot_versions("u", key)]


@pytest.mark.parametrize("budget", BUDGETS, ids=["entries", "all-tight", "bytes"])
def test_snapshots_identical_to_reference_accounting(tmp_path, history, budget, models, monkeypatch):
    calls = []

    def checked(index, count):
        got = FAST_USAGE(index, count)
        assert got == reference_usage(index, count)
        calls.append(got)
        return got

    monkeypatch.setattr(ActiveIndex, "usage", checked)
    fast = _states(tmp_path / "fast", history, budget, models)
    monkeypatch.setattr(ActiveIndex, "usage", reference_usage)
    ref = _states(tmp_path / "ref", history, budget, models)
    assert len(fast) == len(history.sessions)
    assert fast == ref
    assert len(calls) > 2 * len(history.sessions)  # repairs ran (more than one check per commit)


def test_cached_accounting_follows_edits(models):
    """Every kind of edit the write path makes drops the cache: reassigning a field, and ``touch`` after an
    in-place change; copies carry no cache."""
    from collections import Counter
    from datetime import datetime

    import numpy as np

    from c3m.index.active import IndexEntry, Version, normalize

    count = models.token_counter.count
    t = datetime(2026, 1, 1)
    index = ActiveIndex(8, {"embedder": "x"})
    e = IndexEntry(index.new_id(), normalize(np.ones(8)), {"s1": {0, 1}}, t, t, "my blue mug",
                   entities=Counter({"mug": 1}), states=["blue"])
    index.entries[e.entry_id] = e

    def same():
        assert index.usage(count) == reference_usage(index, count)

    same()
    e.compact = 2
    same()
    e.versions = e.versions + [Version(t, {"s0": {3}}, ["red"], "my red mug")]
    same()
    e.entities.update({"kitchen": 2})
    e.touch()
    same()
    e.versions.append(Version(t, {"s0": {4, 5}}, [], "again"))
    e.touch()
    same()
    e.links = [["e00009", "distinct", 0.5]]
    same()
    for clone in (copy.deepcopy(index), pickle.loads(pickle.dumps(index))):
        assert clone.usage(count) == reference_usage(clone, count) == index.usage(count)
