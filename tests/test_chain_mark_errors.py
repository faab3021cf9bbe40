"""Chain mark errors (#42): a chain step naming a turn that is not about the chain's subject, judged by the harness
from the synthetic generator's hidden world (which turns are events of which entity), never in the method's
process."""
from __future__ import annotations

from dataclasses import replace
from datetime import datetime

import pytest

from c3m.config import MemoryConfig
from c3m.eval import run_eval
from c3m.eval.metrics import WorldTurns, aggregate, chain_mark_errors
from c3m.eval.report import answers_markdown
from c3m.language.question import analyse
from c3m.methods import register
from c3m.methods.dense_topk import DenseTopK
from c3m.types import (BudgetUse, ChainStep, Context, ContextItem, EvidenceForm, Provenance, ReaderBudget,
                       RouteTrace, UpdateChain, node_id_for)

NS = "h1"
T = datetime(2026, 3, 1, 10)
WORLD = {"history": NS, "entities": [
    {"id": "e1", "type": "bicycle", "kind": "bike", "name": "bike", "ref": "my bike",
     "observations": [{"session": "s1", "turn": 0}, {"session": "s3", "turn": 0}]},
    {"id": "e2", "type": "bicycle", "kind": "bike", "name": "bike", "ref": "Anna's bike",
     "observations": [{"session": "s2", "turn": 0}]},
    {"id": "e3", "type": "kettle", "kind": "kettle", "name": "kettle", "ref": "my kettle",
     "observations": [{"session": "s5", "turn": 0}]},
], "mentions": [{"session": "s4", "turn": 0, "kind": "near_miss", "entities": ["e1"]}]}


def read(*steps: tuple[str, ...], subject: str = "bike") -> Context:
    """A read context whose one chain's steps name the given (session) turns, turn 0 each."""
    chain = UpdateChain(subject, tuple(ChainStep(T, tuple(node_id_for(NS, s, 0) for s in step),
                                                 tuple(f"{s}#0" for s in step)) for step in steps))
    items = tuple(ContextItem(node_id_for(NS, s, 0), Provenance(NS, s, 0, T), "user", EvidenceForm.RAW_TEXT, "x",
                              (), 1.0, 1) for step in steps for s in step)
    return Context("What colour is my bike now?", items, BudgetUse(), ReaderBudget(), RouteTrace("t"), chains=(chain,))


@pytest.mark.parametrize("steps,support,expected", [
    ((("s1",), ("s3",)), {"e1"}, (2, 0)),            # both event turns of the user's bike
    ((("s1",), ("s2",)), {"e1"}, (2, 1)),            # Anna's bike is another entity
    ((("s1", "s4"), ("s3",)), {"e1"}, (3, 1)),       # a near miss ("I almost repainted it") is no event
    ((("s1",), ("s5",)), set(), (2, 1)),             # no gold entity: the chain's turns decide (the bike's)
    ((("s2",), ("s3",)), {"e2"}, (2, 1)),            # the gold says Anna's bike: the user's bike turn is wrong
    ((("s4",), ("s6",)), {"e1"}, (2, 2)),            # turns no entity has as an event
])
def test_chain_mark_errors_count_turns_not_about_the_subject(steps, support, expected):
    assert chain_mark_errors(read(*steps), WorldTurns(NS, WORLD), support) == expected


def test_a_chain_whose_subject_is_not_the_gold_entity_is_mapped_by_its_turns():
    """A question about the kettle whose chain is about the bike (subject word "bike"): the gold entity (the
    kettle) does not carry that word, so the chain is judged as the bike's."""
    assert chain_mark_errors(read(("s1",), ("s3",)), WorldTurns(NS, WORLD), {"e3"}) == (2, 0)


def test_no_chain_no_count():
    ctx = replace(read(("s1",), ("s3",)), chains=())
    assert chain_mark_errors(ctx, WorldTurns(NS, WORLD), {"e1"}) == (0, 0)


# -- through the harness ---------------------------------------------------------------------------------------
@register
class ChainEverything(DenseTopK):
    """Forges a chain over its whole context: every user turn a step of the question's subject."""

    name = "test-chain-everything"

    def annotate(self, context: Context) -> Context:
        q = analyse(context.question)
        users = [i for i in context.items if i.role == "user"]
        if len(users) < 2:
            return context
        steps = tuple(ChainStep(i.provenance.time, (i.node_id,), (f"{i.provenance.session_id}#{i.provenance.turn_index}",))
                      for i in sorted(users, key=lambda i: i.provenance.time))
        return replace(context, chains=(UpdateChain(q.subject or "thing", steps),))


CFG = MemoryConfig(text_embedder="hashing", token_counter="approx")


def test_harness_counts_chain_mark_errors_from_the_hidden_world(tmp_path, demo_dataset):
    from c3m.eval.synth import generate_dataset

    ds = generate_dataset(tmp_path / "syn", length=4000, episodes=1, seed=3, progress=False, preset="hard")
    got = run_eval([ds, demo_dataset], ["dense-topk", "test-chain-everything"], tmp_path / "out", config=CFG,
                   progress=False)
    forged = [q for rs in got["test-chain-everything"].values() for r in rs for q in r.questions]
    synthetic = [q for q in forged if q.chain_turns is not None]
    assert synthetic and all(q.namespace == synthetic[0].namespace for q in synthetic)  # the synthetic history only
    assert all(q.chain_turns is None for q in forged if q.namespace != synthetic[0].namespace)
    assert sum(q.chain_turns for q in synthetic) > 0
    assert 0 < sum(q.chain_errors for q in synthetic) <= sum(q.chain_turns for q in synthetic)
    honest = [q for rs in got["dense-topk"].values() for r in rs for q in r.questions if q.chain_turns is not None]
    assert honest and all(q.chain_errors <= q.chain_turns for q in honest)
    metrics = {m: {length: aggregate(rs, n_boot=10) for length, rs in by.items()} for m, by in got.items()}
    table = "\n".join(answers_markdown(metrics))
    assert "Chain mark errors (turns)" in table
    o = next(iter(metrics["test-chain-everything"].values()))["overall"]
    assert o["chain_turns"] >= o["chain_mark_errors"] > 0
