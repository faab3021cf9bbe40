"""The bounded baselines' shared scaffolding and the ReSum / MovieChat / full-context policies, on tiny
hand-made histories: each behaves as its docstring says, stays within the write budget as the harness
measures it, and returns contexts the harness accepts."""
from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from factories import png_bytes

from c3m.budget import measure_context, measure_index
from c3m.config import MemoryConfig
from c3m.errors import InvalidInput
from c3m.memory import Memory
from c3m.methods.moviechat import merge_adjacent
from c3m.types import EvidenceForm, ReaderBudget, Session, Turn, WriteBudget

BASE = datetime(2026, 3, 1, 9, 0)
TOPICS = ["kayak paddle", "violin lessons", "sourdough starter", "garden shed", "chess club", "tram pass",
          "winter boots", "camera lens", "piano tuner", "bike helmet"]


def _session(i: int, *texts: str, images: int = 0) -> Session:
    turns = tuple(Turn("user" if j % 2 == 0 else "assistant", t,
                       tuple(png_bytes((j * 40 % 255, i % 255, 9)) for _ in range(images)))
                  for j, t in enumerate(texts))
    return Session(f"s{i:02d}", BASE + timedelta(days=i), turns)


def _mem(path, models, method, budget=WriteBudget(), **options) -> Memory:
    return Memory(path, "u", models=models, config=MemoryConfig(method=method, method_options=options,
                                                                write_budget=budget))


def _history(mem: Memory, n: int = 10) -> None:
    for i in range(n):
        topic = TOPICS[i % len(TOPICS)]
        mem.add_session(_session(i, f"I finally sorted out the {topic} this week, number {i}.",
                                 f"Good to hear about the {topic}.", images=i % 2))


def _check_budgets(mem: Memory, budget: WriteBudget) -> None:
    use = measure_index(mem.method.state(), mem.models.token_counter.count)
    assert not use.over(budget), (use, budget)


def _check_context(mem: Memory, question: str, budget: ReaderBudget = ReaderBudget()):
    ctx = mem.retrieve(question, budget, check=False)
    measured = measure_context(ctx, budget, mem.store.get_nodes, "u", mem.models.token_counter.count)
    assert measured.violation is None, measured.violation
    return ctx


@pytest.mark.parametrize("method", ["resum", "moviechat"])
def test_bounded_baselines_hold_the_write_budget_after_every_session(store_path, models, method):
    budget = WriteBudget(entries=6, pages=2, index_tokens=400, index_bytes=64 * 1024)
    with _mem(store_path, models, method, budget) as mem:
        for i in range(10):
            mem.add_session(_session(i, f"I finally sorted out the {TOPICS[i]} this week.", "Nice.", images=i % 2))
            _check_budgets(mem, budget)
            assert len({e.page for e in mem.method.index.entries.values()}) <= budget.pages
        ctx = _check_context(mem, "What did I sort out about the violin lessons?")
        assert ctx.items and ctx.trace.pages and len(ctx.trace.pages) <= ReaderBudget().pages


@pytest.mark.parametrize("method", ["resum", "moviechat"])
def test_bounded_baselines_reload_from_their_snapshot(store_path, models, method):
    budget = WriteBudget(entries=5)
    question = "How is the sourdough starter doing?"
    with _mem(store_path, models, method, budget) as mem:
        _history(mem)
        before = mem.retrieve(question)
        state = mem.method.state()
    with _mem(store_path, models, method, budget) as again:
        again.method.load_state(state)
        after = again.retrieve(question)
    assert [(i.node_id, i.form, i.text) for i in before.items] == [(i.node_id, i.form, i.text) for i in after.items]


def test_resum_keeps_the_most_recent_nodes_verbatim_and_summarises_older_blocks(store_path, models):
    budget = WriteBudget(entries=8)
    with _mem(store_path, models, "resum", budget, recent=4, block=3) as mem:
        _history(mem, 10)
        index = mem.method.index
        nodes = sorted(mem.nodes(), key=lambda n: (n.time, n.turn_index))
        verbatim = [e for e in index.entries.values() if e.kind != "summary"]
        summaries = [e for e in index.entries.values() if e.kind == "summary"]
        assert summaries and len(index.entries) <= 8
        kept = sorted((s, t) for e in verbatim for s, turns in e.pointers.items() for t in turns)
        assert kept[-4:] == [(n.session_id, n.turn_index) for n in nodes[-4:]]  # the recent window, verbatim
        assert all(len(e.sources()) == 1 and sum(map(len, e.pointers.values())) == 1 for e in verbatim)
        # nothing is dropped: the summaries point at every node the verbatim window no longer holds
        assert mem.method.pointers() == {n.node_id for n in nodes}
        ctx = _check_context(mem, "What about the kayak paddle?")
        forms = {i.form for i in ctx.items}
        assert forms <= {EvidenceForm.RAW_TEXT, EvidenceForm.SUMMARY}
        assert all(not i.images for i in ctx.items if i.form is EvidenceForm.SUMMARY)


def test_resum_expand_summaries_reads_their_raw_nodes(store_path, models):
    budget = WriteBudget(entries=4)
    question = "What about the kayak paddle?"
    with _mem(store_path, models, "resum", budget, recent=2, block=4) as mem:
        _history(mem, 8)
        plain = mem.retrieve(question)
        target = {n.node_id for n in mem.nodes() if "kayak" in n.text}
    with _mem(store_path, models, "resum", budget, recent=2, block=4, expand_summaries=True) as mem:
        wide = mem.retrieve(question)
    assert not target & {i.node_id for i in plain.items if i.form is EvidenceForm.RAW_TEXT}
    assert target & {i.node_id for i in wide.items if i.form is EvidenceForm.RAW_TEXT}


def test_moviechat_merges_only_adjacent_entries(store_path, models):
    """Alternating topics: the most similar pairs are two apart, never neighbours — yet every entry still
    covers one contiguous run of turns, because MovieChat only merges neighbours in time."""
    budget = WriteBudget(entries=5)
    with _mem(store_path, models, "moviechat", budget, short_term=4, consolidated=2) as mem:
        for i in range(12):
            topic = ["kayak paddle", "violin lessons"][i % 2]
            mem.add_session(_session(i, f"The {topic} again, day {i}."))
        order = [(n.session_id, n.turn_index) for n in sorted(mem.nodes(), key=lambda n: (n.time, n.turn_index))]
        position = {k: p for p, k in enumerate(order)}
        for e in mem.method.index.entries.values():
            spots = sorted(position[(s, t)] for s, turns in e.sources().items() for t in turns)
            assert spots == list(range(spots[0], spots[-1] + 1)), e.entry_id
        assert mem.method.pointers() == {n.node_id for n in mem.nodes()}
        assert any(e.support > 1 for e in mem.method.index.entries.values())
        _check_context(mem, "How are the violin lessons?")


def test_merge_adjacent_picks_the_most_similar_neighbours(models):
    import numpy as np

    from c3m.index.active import IndexEntry

    def entry(i, z):
        return IndexEntry(f"e{i}", np.asarray(z, np.float32), {"s": {i}}, BASE, BASE, "")

    a, b, c, d = (entry(0, [1, 0]), entry(1, [0, 1]), entry(2, [1, 0]), entry(3, [0.9, 0.1]))
    assert merge_adjacent([a, b, c, d]) == 2            # c~d, though a and c are identical (not neighbours)
    assert merge_adjacent([a, a, b]) == 0               # ties go to the earlier pair


def test_moviechat_rejects_a_consolidation_target_above_the_buffer(store_path, models):
    with pytest.raises(InvalidInput, match="consolidated"):
        _mem(store_path, models, "moviechat", short_term=4, consolidated=4)


def test_full_context_reads_the_latest_turns_that_fit(store_path, models):
    with _mem(store_path, models, "full-context") as mem:
        _history(mem, 10)
        nodes = sorted(mem.nodes(), key=lambda n: (n.time, n.turn_index))
        ctx = _check_context(mem, "anything at all", ReaderBudget(raw_nodes=5))
        assert [i.node_id for i in ctx.items] == [n.node_id for n in nodes[-5:]]
        ctx = _check_context(mem, "anything", ReaderBudget(raw_nodes=12, images=1))
        shown = [i for i in ctx.items if i.images]
        assert len(shown) == 1 and shown[0].node_id == max((n for n in nodes if n.images),
                                                            key=lambda n: (n.time, n.turn_index)).node_id
        assert not mem.method.bounded


def test_memo_extractor_answers_like_its_backend_and_calls_it_once_per_input():
    from c3m.models.memo import MemoExtractor

    class Backend:
        name, version = "stub", "1"

        def __init__(self):
            self.calls = 0

        def caption(self, image):
            self.calls += 1
            return f"caption of {len(image)} bytes"

        def visual_anchors(self, image):
            self.calls += 1
            return ["a", "b"]

        def ground(self, image, phrase):
            self.calls += 1
            return (0, 0, len(phrase), 1)

        def summarize(self, text, max_tokens=64):
            self.calls += 1
            return text[:max_tokens]

        def extra(self):
            return "forwarded"

    inner = Backend()
    memo = MemoExtractor(inner, max_items=8)
    img = png_bytes()
    for _ in range(3):
        assert memo.caption(img) == inner.caption(img)
        assert memo.visual_anchors(img) == ["a", "b"]
        assert memo.ground(img, "mug") == (0, 0, 3, 1) and memo.ground(img, "lamp") == (0, 0, 4, 1)
        assert memo.summarize("hello world", 5) == "hello"
    assert inner.calls == 3 + 5  # the direct caption calls, then one per distinct memo input
    assert (memo.name, memo.version, memo.extra()) == ("stub", "1", "forwarded") and memo.hits == 10


def test_summary_items_declare_what_they_cover_and_the_harness_checks_it(store_path, models):
    from dataclasses import replace as dc_replace

    from c3m.eval.evidence import SupportItem, check_context

    with _mem(store_path, models, "resum", WriteBudget(entries=4), recent=2, block=4) as mem:
        _history(mem, 8)
        ctx = mem.retrieve("What about the kayak paddle?", check=False)
        summaries = [i for i in ctx.items if i.form is EvidenceForm.SUMMARY]
        assert summaries
        reachable = mem.method.index.pointer_ids("u")
        for item in summaries:
            assert item.covers and set(item.covers) <= reachable and item.node_id in item.covers
        count = mem.models.token_counter.count
        assert measure_context(ctx, ReaderBudget(), mem.store.get_nodes, "u", count).violation is None
        forged = dc_replace(ctx, items=(dc_replace(summaries[0], covers=summaries[0].covers + ("u:nope:0",)),))
        assert "covers 1 nodes" in measure_context(forged, ReaderBudget(), mem.store.get_nodes, "u", count).violation

        class NoGold:
            scenes: dict = {}

            def scenes_of(self, images):
                return []

        item = summaries[0]
        word = next(w for w in item.text.split() if w.isalpha() and len(w) > 4)
        one = dc_replace(ctx, items=(item,))
        nodes = mem.store.get_nodes(list(item.covers))
        inside = nodes[item.covers[0]]
        outside = next(n for n in mem.nodes() if n.node_id not in item.covers)
        held = SupportItem(inside.session_id, inside.turn_index, None, "x", word)
        other = SupportItem(outside.session_id, outside.turn_index, None, "x", word)
        assert check_context(one, [held], NoGold()).all == 1.0   # a covered turn whose value it states
        assert check_context(one, [other], NoGold()).all == 0.0  # a turn it does not cover
