"""The read path's extension points: a new channel is one class plus the ``channels`` option, a new reranker feature
is one function plus the ``features`` option. Both are defined here, in the test file, and plugged in through the
option alone; the default reader is unchanged by their existence."""
from __future__ import annotations

import math
from datetime import datetime

import numpy as np
import pytest

from c3m.config import MemoryConfig
from c3m.errors import InvalidInput
from c3m.memory import Memory
from c3m.read.channels import DEFAULT_CHANNELS, Hit, register_channel
from c3m.read.features import FEATURES, register_feature
from c3m.types import ReaderBudget, Session, Turn

FACTS = ["I keep my kayak in the garage next to the blue bicycle.", "The kayak paddle is made of carbon fibre.",
         "My sister Priya moved to Lisbon in March.", "I planted tomatoes and basil on the balcony."]
QUESTIONS = ["What colour is my kayak?", "Where does Priya live now?", "What did I plant?"]


@register_channel
class EarliestTurns:
    """A toy channel: the tenant's first three turns, whatever the question (signal: their order)."""

    name = "earliest"
    features = ("earliest_rank",)
    cold = True  # it reads the Cold-Store keys, so it runs only when the reader searches the Cold Store

    def find(self, reqs, device):
        return [[Hit(nid, {"earliest_rank": k}) for k, nid in enumerate(r.keys_of.ids[:3])] for r in reqs]


@register_feature("question_words")
def question_words(query, cands):
    """A toy feature: how many content terms the question has (the same for every candidate)."""
    return [len(query.terms)] * len(cands)


def _history() -> list[Session]:
    out = []
    for i in range(12):
        fact = FACTS[i // 3] if i % 3 == 0 else f"Today I read chapter {i} of the novel about sailing ships."
        out.append(Session(f"s{i:02d}", datetime(2024, 1, 1 + i, 10), [
            Turn("user", fact), Turn("assistant", f"Thanks for telling me (note {i}).")]))
    return out


def _cfg(**opts) -> MemoryConfig:
    return MemoryConfig(method="c3m", text_embedder="hashing", token_counter="approx",
                        write_budget=MemoryConfig().write_budget.scaled(0.25), method_options=opts)


@pytest.fixture(scope="module")
def filled(tmp_path_factory):
    root = tmp_path_factory.mktemp("channels") / "store"
    with Memory(root, "u", config=_cfg()) as mem:
        for s in _history():
            mem.add_session(s)
    return root


def _items(ctx):
    return [(i.node_id, i.form, i.score) for i in ctx.items]


def test_a_new_channel_is_one_class_and_one_option(filled):
    channels = "+".join(DEFAULT_CHANNELS + ("earliest",))
    with Memory(filled, "u", config=_cfg(channels=channels)) as mem:
        mem.method.node_keys.sync()
        first = mem.method.node_keys.ids[:3]
        got = mem.method.rerank_inputs(QUESTIONS, ReaderBudget())
        for g in got:
            assert g.columns == FEATURES + ("earliest_rank",) and g.X.shape[1] == len(FEATURES) + 1
            by_id = {c.node.node_id: row for c, row in zip(g.cands, g.X)}
            assert set(first) <= set(by_id)  # the channel's turns are candidates, whatever the question
            assert [by_id[n][-1] for n in first] == [0, 1, 2]
            assert all(math.isnan(row[-1]) for n, row in by_id.items() if n not in first)
        for q in QUESTIONS:
            ctx = mem.retrieve(q, ReaderBudget())  # measured and checked against the budget
            assert ctx.items


def test_a_new_feature_is_one_function_and_one_option(filled):
    with Memory(filled, "u", config=_cfg(features="question_words")) as mem:
        (g,) = mem.method.rerank_inputs(["What did I plant on the balcony?"], ReaderBudget())
        assert g.columns == FEATURES + ("question_words",)
        assert np.all(g.X[:, -1] == len(g.query.terms)) and len(g.query.terms) > 0
        assert mem.retrieve("What did I plant on the balcony?", ReaderBudget()).items


def test_the_default_reader_is_the_default_channels(filled):
    with Memory(filled, "u", config=_cfg()) as mem:
        default = [_items(mem.retrieve(q, ReaderBudget())) for q in QUESTIONS]
        (g,) = mem.method.rerank_inputs(QUESTIONS[:1], ReaderBudget())
        assert g.columns == FEATURES
    with Memory(filled, "u", config=_cfg(channels="+".join(DEFAULT_CHANNELS))) as mem:
        assert [_items(mem.retrieve(q, ReaderBudget())) for q in QUESTIONS] == default


def test_channels_can_be_left_out(filled):
    """Only the index channel: no Cold-Store candidate, though the reader may search the Cold Store."""
    with Memory(filled, "u", config=_cfg(channels="index")) as mem:
        for g in mem.method.rerank_inputs(QUESTIONS, ReaderBudget()):
            assert all(not math.isnan(c.idx_rel) or c.via_round for c in g.cands)


def test_unknown_channel_or_feature_names_the_option():
    from c3m.methods.c3m import C3MConfig

    with pytest.raises(InvalidInput, match="method_options.channels"):
        C3MConfig.from_options({"channels": "index+nope"})
    with pytest.raises(InvalidInput, match="method_options.features"):
        C3MConfig.from_options({"features": "nope"})
