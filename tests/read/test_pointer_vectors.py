"""The strictly bounded reader ranks the nodes its index points at before fetching them (``Method.pointer_vectors``,
issue #43's read p95): a spill points at hundreds of nodes, and fetching them all to rank them was most of a read.

What must hold: the contexts are exactly those of the fetch-everything path, only the best nodes are materialised,
and a forget anywhere in the namespace empties the vector memo, so a forgotten node's old vector ranks nothing.
"""
from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
import pytest

from c3m.config import MemoryConfig
from c3m.memory import Memory
from c3m.types import ReaderBudget, Session, Turn, WriteBudget, node_id_for

T0 = datetime(2026, 1, 1, 9, 0)
THINGS = ("kayak", "violin", "teapot", "bicycle", "lantern", "drum", "blender", "trunk", "garage", "balcony")
COLOURS = ("red", "blue", "green", "grey", "yellow", "teal")
QUESTIONS = ("What colour is my kayak now?", "Where do I keep my violin?", "What did I say about the lantern?",
             "Which colour did my garage have?", "Tell me about the drum.")


def _sessions(n: int = 100):
    out = []
    for i in range(n):
        thing, colour = THINGS[i % len(THINGS)], COLOURS[i % len(COLOURS)]
        said = (f"I painted my {thing} {colour} this week, it took {i % 5 + 2} hours." if i else
                "My kayak's secret paint code is QX-7731, painted red this week.")
        out.append(Session(f"s{i:03d}", T0 + timedelta(days=i), (
            Turn("user", said),
            Turn("assistant", f"A {colour} {thing} sounds lovely."))))
    return out


def _bounded(tmp_path, models):
    """A cold=false c3m memory squeezed so most of its history sits behind spill entries."""
    cfg = MemoryConfig(method="c3m", method_options={"cold": False},
                       write_budget=WriteBudget(entries=6, pages=3, index_tokens=100_000, index_bytes=10**7))
    mem = Memory(tmp_path / "store", "u", config=cfg, models=models)
    for s in _sessions():
        mem.add_session(s)
    return mem


def _key(ctx):
    return [(i.node_id, i.form, i.score, i.text) for i in ctx.items], ctx.trace.pool


def test_ranking_before_fetching_gives_the_same_contexts_and_fetches_fewer_nodes(tmp_path, models):
    with _bounded(tmp_path, models) as mem:
        m = mem.method
        assert any(e.kind == "spill" for e in m.index.entries.values()), "precondition: the index has spilled"
        budget = ReaderBudget()
        m.retrieve(QUESTIONS[0], budget)  # warm: every pointed-at node's vector is memoised once
        store = mem.store
        fast, fast_reads = [], []
        for q in QUESTIONS:
            before = store.nodes_read
            fast.append(m.retrieve(q, budget))
            fast_reads.append(store.nodes_read - before)
        batched = m.retrieve_batch(list(QUESTIONS), budget)
        m.pointer_vectors = lambda ids: None  # the old path: fetch every expanded node, then rank
        for q, got, got_b, n_fast in zip(QUESTIONS, fast, batched, fast_reads):
            before = store.nodes_read
            slow = m.retrieve(q, budget)
            assert _key(got) == _key(slow) == _key(got_b), q
            expanded = len(got.trace.expanded_nodes)
            assert expanded > 100, "precondition: the routed entries point at many nodes"
            # the old path materialises every expanded node; the new one about the pool's 48 + 8 more
            assert store.nodes_read - before - n_fast >= expanded - 56, (q, n_fast, store.nodes_read - before)


def test_pointer_vectors_match_node_vectors_and_fetch_only_unseen_ids(tmp_path, models):
    with _bounded(tmp_path, models) as mem:
        m, store = mem.method, mem.store
        ids = [n.node_id for n in store.iter_nodes("u")][:12]
        before = store.nodes_read
        got = m.pointer_vectors(ids)
        assert store.nodes_read - before == len(ids)  # first time: fetched once
        expect = m.node_vectors(list(store.get_nodes(ids)[i] for i in ids))
        np.testing.assert_allclose(got, expect)
        before = store.nodes_read
        np.testing.assert_allclose(m.pointer_vectors(list(reversed(ids))), expect[::-1])
        assert store.nodes_read == before  # memoised: nothing fetched
        assert m.pointer_vectors([]).shape == (0, models.text_embedder.dim)
        assert m.pointer_vectors(["u/no-such-node"]) is None  # unknown id: the caller falls back to fetching


@pytest.mark.parametrize("via_other_connection", [False, True], ids=["same", "other-connection"])
def test_a_forget_empties_the_memo_and_the_forgotten_text_is_never_read(tmp_path, models, via_other_connection):
    with _bounded(tmp_path, models) as mem:
        m = mem.method
        q = "What is the secret paint code of my kayak?"
        assert "QX-7731" in m.retrieve(q, ReaderBudget()).text(), "precondition: the code is read before the forget"
        assert m._node_memo, "precondition: vectors memoised"
        if via_other_connection:
            with Memory(tmp_path / "store", "u", config=mem.config, models=models) as other:
                other.forget(session_id="s000", reason="user request")
        else:
            mem.forget(session_id="s000", reason="user request")
        ctx = mem.retrieve(q)
        assert all(i.provenance.session_id != "s000" for i in ctx.items)
        assert "QX-7731" not in ctx.text()
        mem.method.pointer_vectors([n.node_id for n in mem.store.nodes_for_session("u", "s001")])
        # the forgotten turn's vector of its old text is gone from the memo (its redacted form may come back)
        assert (node_id_for("u", "s000", 0), False) not in mem.method._node_memo
