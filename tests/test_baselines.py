"""The unbounded ranked baselines (dense-topk, bm25, hybrid): ranking, pool, budgets, state, forgetting."""
from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
import pytest
from factories import make_session, png_bytes

from c3m.config import MemoryConfig
from c3m.errors import InvalidInput, StoreError
from c3m.memory import Memory
from c3m.methods import available_methods
from c3m.read.scorers import fts_query, query_terms
from c3m.read.scorers import rrf
from c3m.types import ReaderBudget, Session, Turn

METHODS = ("dense-topk", "bm25", "hybrid")
BASE = datetime(2026, 3, 1, 9, 0)


def _session(i: int, *texts: str, images: int = 0) -> Session:
    turns = [Turn("user" if j % 2 == 0 else "assistant", t,
                  tuple(png_bytes((j * 40 % 255, i, 9)) for _ in range(images)))  # repeated within a turn
             for j, t in enumerate(texts)]
    return Session(f"s{i}", BASE + timedelta(days=i), tuple(turns))


def _mem(path, models, method, **options) -> Memory:
    return Memory(path, "u", models=models, config=MemoryConfig(method=method, method_options=options))


def _distractor_history(mem: Memory) -> None:
    """Many turns that share the question's common words, one that shares only a rare word."""
    things = ["keys", "wallet", "phone", "charger", "umbrella", "scarf", "glasses", "notebook"]
    for i, thing in enumerate(things, start=1):
        mem.add_session(_session(i, f"where did I leave my {thing} in the hotel room last night",
                                 f"You left the {thing} in the hotel room."))
    mem.add_session(_session(9, "Zanzibar passport tucked beneath mattress", "Okay."))


def _node_id(mem: Memory, needle: str) -> str:
    return next(n.node_id for n in mem.nodes() if needle in n.text)


def test_registered():
    assert set(METHODS) <= set(available_methods())


def test_bm25_finds_the_rare_word_turn_dense_misses(store_path, models):
    question = "where did I leave my passport in the hotel room?"
    budget = ReaderBudget(raw_nodes=3)
    with _mem(store_path, models, "bm25") as mem:
        _distractor_history(mem)
        target = _node_id(mem, "Zanzibar")
        ctx = mem.retrieve(question, budget)
        assert ctx.trace.pool[0] == target and target in ctx.trace.selected_nodes
    with _mem(store_path, models, "dense-topk") as dense:
        ctx = dense.retrieve(question, budget)
        assert target not in ctx.trace.selected_nodes  # common words and bigrams outweigh one rare word
        assert len(ctx.items) == 3


def test_bm25_query_terms_are_escaped_and_or_ed():
    assert query_terms('Where is "my" kayak, where?? AND NOT ünïcode_x') == [
        "where", "is", "my", "kayak", "and", "not", "ünïcode", "x"]
    assert fts_query(["and", "not"]) == '"and" OR "not"'
    assert query_terms("?!  ...") == []


def test_bm25_question_without_terms_and_image_only_turns(store_path, models):
    with _mem(store_path, models, "bm25") as mem:
        mem.add_session(Session("s1", BASE, (Turn("user", "", (png_bytes(),)), Turn("assistant", "a red square"))))
        ctx = mem.retrieve("?!", ReaderBudget())
        assert ctx.items == () and ctx.trace.pool == () and ctx.trace.scored == 2 and ctx.trace.notes
        ctx = mem.retrieve("what colour is the square?", ReaderBudget())
        assert [i.text for i in ctx.items] == ["a red square"]  # the image-only turn never matches


def test_rrf_rewards_agreement():
    dense = np.array([0.9, 0.8, 0.1, 0.0])   # ranks: 0, 1, 2, 3
    lexical = np.array([-np.inf, 3.0, 2.0, -np.inf])  # ranks: 1, 2; 0 and 3 unmatched
    fused = rrf([dense, lexical], 4, k=60, depth=100)
    assert np.argmax(fused) == 1  # second in one ranking, first in the other, beats first in one only
    assert fused[1] == pytest.approx(1 / 62 + 1 / 61) and fused[2] == pytest.approx(1 / 63 + 1 / 62)
    assert fused[0] == pytest.approx(1 / 61)
    assert np.isneginf(rrf([dense, lexical], 4, k=60, depth=1)[[2, 3]]).all()  # only the top `depth` count


def test_hybrid_ranks_a_turn_found_by_both_first(store_path, models):
    question = "where did I leave my passport in the hotel room?"
    with _mem(store_path, models, "hybrid") as mem:
        _distractor_history(mem)
        mem.add_session(_session(10, "where did I leave my passport in the hotel room last night", "By the door."))
        both = _node_id(mem, "my passport in the hotel")
        assert mem.method.dense.scores(question).argmax() == mem.method.node_ids.index(both)
        bm_order = np.argsort(-mem.method.bm25.scores(question), kind="stable").tolist()
        bm_rank = bm_order.index(mem.method.node_ids.index(both)) + 1
        assert bm_rank <= 2  # BM25 also ranks it high (the rare-word turn competes with it)
        ctx = mem.retrieve(question, ReaderBudget(raw_nodes=2))
        assert ctx.trace.pool[0] == both and both in ctx.trace.selected_nodes
        assert ctx.trace.candidates[0] == (both, round(1 / 61 + 1 / (60 + bm_rank), 4))


@pytest.mark.parametrize("method", METHODS)
def test_budgets_respected_on_every_dimension(tmp_path_factory, models, method):
    with _mem(tmp_path_factory.mktemp("s"), models, method, pool=10) as mem:
        for i in range(1, 9):
            mem.add_session(_session(i, f"my mug number {i} is on shelf {i % 3} with a photo",
                                     f"Noted mug {i} " + "and more words " * i, images=i % 3))
        n = 16
        for budget in [ReaderBudget(), ReaderBudget(0, 0, 0, 0), ReaderBudget(3, 4, 1, 10_000),
                       ReaderBudget(0, 12, 0, 10_000), ReaderBudget(3, 12, 8, 30), ReaderBudget(1, 2, 2, 12)]:
            ctx = mem.retrieve("where is mug number 4 on the shelf, and the photo?", budget, check=False)
            assert ctx.use == mem.measure(ctx, budget).use  # the method's own accounting is the harness's
            assert ctx.use.fits(budget) and ctx.use.pages == 0
            assert ctx.use.raw_nodes == len(ctx.items)
            assert ctx.use.images == len({im.sha256 for i in ctx.items for im in i.images})  # charged once each
            assert ctx.use.text_tokens == sum(i.text_tokens for i in ctx.items) == sum(
                models.token_counter.count(i.text) for i in ctx.items)
            t = ctx.trace
            assert set(t.selected_nodes) <= set(t.pool) and len(t.pool) <= 10 and t.scored == n
            assert t.expanded_nodes == t.pool and [c[0] for c in t.candidates] == list(t.pool)
            assert not set(t.dropped_for_budget) & set(t.selected_nodes)
            assert t.expanded_images == tuple(dict.fromkeys(im.sha256 for i in ctx.items for im in i.images))
            times = [i.provenance.time for i in ctx.items]
            assert times == sorted(times)
            nodes = {nd.node_id: nd for nd in mem.nodes()}
            assert all(i.text == nodes[i.node_id].text for i in ctx.items)
            assert set(t.covered_sessions) == {i.provenance.session_id for i in ctx.items}


@pytest.mark.parametrize("method", METHODS)
def test_state_round_trip_in_a_fresh_instance(store_path, models, method):
    q = "where is mug number 3?"
    with _mem(store_path, models, method) as mem:
        for i in range(1, 6):
            mem.add_session(make_session(i))
        before = mem.retrieve(q, ReaderBudget(raw_nodes=4))
        state = mem.method.state()
        assert state["upto_seq"] == 5 and state["count"] == 10
        assert len(mem.method.pointers()) == 10
    with _mem(store_path, models, method) as again:  # loads the latest snapshot, rebuilt from the store
        assert again.method.state() == state
        after = again.retrieve(q, ReaderBudget(raw_nodes=4))
        assert [(i.node_id, round(i.score, 6)) for i in after.items] == [
            (i.node_id, round(i.score, 6)) for i in before.items]
        assert after.trace.pool == before.trace.pool
        with pytest.raises(StoreError, match="snapshot expects"):
            again.method.load_state({**state, "count": 11})


@pytest.mark.parametrize("method", METHODS)
def test_forgotten_nodes_are_never_returned(store_path, models, method):
    with _mem(store_path, models, method) as mem, _mem(store_path, models, method) as stale:
        _distractor_history(mem)
        stale.sync()
        target = _node_id(mem, "Zanzibar")
        q = "Zanzibar passport mattress"
        assert target in mem.retrieve(q, ReaderBudget()).trace.selected_nodes
        mem.forget(node_ids=[target], reason="test")
        for m in (mem, stale):  # the second handle still indexes the old text: the read path checks the store
            ctx = m.retrieve(q, ReaderBudget())
            assert target not in ctx.trace.pool and target not in {i.node_id for i in ctx.items}
            assert all(i.text for i in ctx.items if i.node_id != target)


@pytest.mark.parametrize("method", METHODS)
def test_unknown_and_bad_options(store_path, models, method):
    with pytest.raises(InvalidInput, match="method_options.nope") as exc:
        _mem(store_path, models, method, nope=1)
    assert exc.value.fix and "pool" in exc.value.fix
    with pytest.raises(InvalidInput, match="method_options.pool"):
        _mem(store_path, models, method, pool=0)


def test_hybrid_option_validation(store_path, models):
    with pytest.raises(InvalidInput, match="method_options.rrf_k"):
        _mem(store_path, models, "hybrid", rrf_k="sixty")
    with pytest.raises(InvalidInput, match="method_options.depth"):
        _mem(store_path, models, "hybrid", depth=0)
    with _mem(store_path, models, "hybrid", rrf_k=10, depth=5, pool=3) as mem:
        assert (mem.method.rrf_k, mem.method.depth, mem.method.pool_size) == (10.0, 5, 3)


@pytest.mark.parametrize("method", METHODS)
def test_empty_memory(store_path, models, method):
    with _mem(store_path, models, method) as mem:
        ctx = mem.retrieve("anything?", ReaderBudget())
        assert ctx.items == () and ctx.trace.notes == ("empty memory",) and ctx.trace.pool == ()
        assert mem.method.pointers() == set() and not mem.method.bounded
