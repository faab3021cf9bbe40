"""The fast write path writes exactly the index the plain one wrote.

``ActiveIndex.usage`` is incremental (per-entry cached tokens and bytes, ``IndexEntry.accounting``): every number
it returns must equal the reference, ``measure_index(state(), count)``, or the capacity policy would repair
differently. Checked on every call while a synthetic history is written under tight budgets (many repairs of
every kind), and the committed snapshots are compared byte for byte with a run that uses the reference
accounting and judges every safe-consolidation pair afresh (no ``safe_pair`` memo).
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
from c3m.write import capacity

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

    safe_pair, found = capacity.safe_pair, []

    def counted(*a, **k):
        found.append(safe_pair(*a, **k))
        return found[-1]

    monkeypatch.setattr(ActiveIndex, "usage", checked)
    monkeypatch.setattr(capacity, "safe_pair", counted)
    fast = _states(tmp_path / "fast", history, budget, models)
    monkeypatch.setattr(ActiveIndex, "usage", reference_usage)
    monkeypatch.setattr(capacity, "safe_pair", lambda index, head, delta, k=4, memo=None: safe_pair(index, head, delta, k))
    ref = _states(tmp_path / "ref", history, budget, models)
    assert len(fast) == len(history.sessions)
    assert fast == ref
    assert len(calls) > 2 * len(history.sessions)  # repairs ran (more than one check per commit)
    assert found.count(None) > 1  # the safe-pair search ran (test_safe_pair_memo covers found pairs)


def test_safe_pair_memo_matches_fresh_judgement(models):
    """``safe_pair`` with one memo across edits returns what a fresh search returns, found pairs included."""
    from collections import Counter
    from datetime import datetime, timedelta

    import numpy as np

    from c3m.index.active import IndexEntry, normalize
    from c3m.models.relation_head import FeatureRelationHead

    rng = np.random.default_rng(0)
    t = datetime(2026, 1, 1)
    index = ActiveIndex(16)
    base = [normalize(rng.normal(size=16)) for _ in range(4)]
    for i in range(10):  # pairs of near-duplicates about the same thing
        z = normalize(base[i % 4] + 0.05 * rng.normal(size=16))
        e = IndexEntry(index.new_id(), z, {f"s{i}": {0}}, t + timedelta(days=i), t, f"my thing {i % 4}",
                       entities=Counter({f"thing{i % 4}": 2, f"extra{i}": 1}), states=["blue"])
        index.entries[e.entry_id] = e
        index.observe_df({f"thing{i % 4}", f"extra{i}"})
    head, memo, seen = FeatureRelationHead(), {}, []
    for step in range(6):
        got = capacity.safe_pair(index, head, 0.6, memo=memo)
        assert got == capacity.safe_pair(index, head, 0.6)
        seen.append(got)
        if got is not None:
            capacity._fold(index, got[1], got[0], "same")
        else:
            victim = index.ordered()[step]
            victim.entities.update({"other": 5})
            victim.touch()
    assert any(p is not None for p in seen)


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
