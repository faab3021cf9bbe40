"""The harness measures, the method does not report: reader and write budgets, Route-Hit, paired differences,
and query-blindness through every route the harness controls."""
from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from c3m import Memory
from c3m.budget import measure_context, measure_index
from c3m.config import MemoryConfig
from c3m.demo import demo_history
from c3m.errors import BudgetExceeded
from c3m.eval import QueryBlindnessViolation, run_eval
from c3m.eval.metrics import aggregate, paired_difference, score_context
from c3m.eval.replay import HistoryResult
from c3m.methods import register
from c3m.methods.dense_topk import DenseTopK
from c3m.types import (BudgetUse, Context, ContextItem, EvidenceForm, EvidenceRef, Question, ReaderBudget, RouteTrace,
                       WriteBudget)
from c3m.eval.metrics import QuestionResult

CFG = MemoryConfig(text_embedder="hashing", token_counter="approx")


@pytest.fixture
def dataset(demo_dataset):
    return demo_dataset


@register
class UnderReporting(DenseTopK):
    """Returns every node it has but reports a context within budget."""

    name = "test-under-reporting"

    def retrieve(self, question, budget):
        ctx = super().retrieve(question, ReaderBudget(raw_nodes=10_000, images=10_000, text_tokens=10**9))
        return replace(ctx, use=BudgetUse(0, 1, 0, 1))


@register
class Rewriting(DenseTopK):
    """Within budget, but shortens the stored text it shows (and so under-charges tokens)."""

    name = "test-rewriting"

    def retrieve(self, question, budget):
        ctx = super().retrieve(question, budget)
        return replace(ctx, items=tuple(replace(i, text=i.text[:5]) for i in ctx.items))


@register
class Fabricating(DenseTopK):
    """Adds an item that is not a stored Raw Node."""

    name = "test-fabricating"

    def retrieve(self, question, budget):
        ctx = super().retrieve(question, budget)
        if not ctx.items:
            return ctx
        fake = replace(ctx.items[0], node_id="n-00000000000000000000", text="the answer is red")
        return replace(ctx, items=ctx.items + (fake,))


@register
class OverWriteBudget(DenseTopK):
    """Declares itself bounded while its flat index grows with every Raw Node."""

    name = "test-over-write-budget"
    bounded = True


def _questions(results):
    return [q for r in results for q in r.questions]


def test_under_reporting_is_caught_and_scored_zero(dataset, tmp_path):
    budget = ReaderBudget(raw_nodes=2)
    res = run_eval([dataset], ["test-under-reporting", "dense-topk"], tmp_path / "out", config=CFG,
                   budget=budget, progress=False)
    cheat, honest = _questions(res["test-under-reporting"]["1k"]), _questions(res["dense-topk"]["1k"])
    assert all(q.violation and "over raw_nodes" in q.violation for q in cheat)
    assert all(q.oracle_reader_acc == 0.0 and q.support_recall in (None, 0.0) and q.route_hit in (None, 0.0)
               for q in cheat)
    assert all(q.raw_nodes_read == 12 for q in cheat)  # measured: every node it showed, not its report of 1
    assert not any(q.violation for q in honest)
    assert aggregate(res["test-under-reporting"]["1k"])["overall"]["read_violations"] == len(cheat)


def test_memory_retrieve_raises_budget_exceeded(store_path, models):
    h = demo_history()
    for method, match in (("test-under-reporting", "over raw_nodes"), ("test-rewriting", "raw_text differs"),
                          ("test-fabricating", "not in the store")):
        with Memory(store_path / method, "u", config=CFG, models=models, method=method) as mem:
            for s in h.sessions:
                mem.add_session(s)
            with pytest.raises(BudgetExceeded, match=match):
                mem.retrieve("What is next to my cooler?", ReaderBudget(raw_nodes=3))
    with Memory(store_path / "honest", "u", config=CFG, models=models, method="dense-topk") as mem:
        for s in h.sessions:
            mem.add_session(s)
        ctx = mem.retrieve("What is next to my cooler?", ReaderBudget(raw_nodes=3))
        assert ctx.use == mem.measure(ctx).use and ctx.use.raw_nodes == 3


def test_python_O_still_catches_budget_violations(tmp_path):
    code = textwrap.dedent(f"""
        import sys; sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_accounting import UnderReporting
        from c3m import Memory
        from c3m.config import MemoryConfig
        from c3m.demo import demo_history
        from c3m.errors import BudgetExceeded
        from c3m.types import ReaderBudget
        assert not __debug__
        with Memory({str(tmp_path / 's')!r}, 'u', config=MemoryConfig(text_embedder='hashing', token_counter='approx'),
                    method='test-under-reporting') as mem:
            for s in demo_history().sessions:
                mem.add_session(s)
            try:
                mem.retrieve('What is next to my cooler?', ReaderBudget(raw_nodes=2))
            except BudgetExceeded:
                print('caught')
    """)
    out = subprocess.run([sys.executable, "-O", "-c", code], capture_output=True, text=True, timeout=300,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith("caught")


def test_bounded_method_over_its_write_budget_is_caught(dataset, tmp_path):
    cfg = replace(CFG, write_budget=WriteBudget(entries=5))
    res = run_eval([dataset], ["test-over-write-budget", "dense-topk"], tmp_path / "out", config=cfg, progress=False)
    cheat = res["test-over-write-budget"]["1k"]
    assert all(r.bounded and r.write_violations for r in cheat)
    assert cheat[0].write_violations[0]["over"] == ["entries"] and cheat[0].index_peak[0] == 12
    honest = res["dense-topk"]["1k"]  # unbounded: measured and reported, never a violation
    assert not any(r.bounded or r.write_violations for r in honest) and honest[0].index_peak[0] == 12


def test_c3m_own_accounting_is_the_harness_definition(store_path, models):
    with Memory(store_path, "u", config=CFG, models=models, method="c3m") as mem:
        for s in demo_history().sessions:
            mem.add_session(s)
        snap = mem.snapshot()
        measured = measure_index(snap.state, models.token_counter.count)
        assert measured.as_tuple() == mem.method.index.usage(models.token_counter.count)
        assert not measured.over(mem.config.write_budget) and measured.entries > 0 and measured.index_tokens > 0


def _qr(hid_q, value, cat="IE"):
    return QuestionResult("ns", hid_q, cat, value, value, value, 0, 0, 0, 0.0)


def _results(method, table):
    return [HistoryResult(h, method, "1k", [_qr(f"q{i}", v) for i, v in enumerate(vals)]) for h, vals in table.items()]


def test_paired_bootstrap_contains_zero_for_self_and_excludes_it_for_a_planted_difference():
    import random

    rng = random.Random(0)
    base = {f"h{h}": [float(rng.random() < 0.6) for _ in range(10)] for h in range(30)}
    a = _results("a", base)
    self_diff = paired_difference(a, _results("a2", base), "support_recall")
    assert self_diff["lo"] <= 0 <= self_diff["hi"] and self_diff["mean"] == 0 and self_diff["win"] is None
    better = {h: [1.0 if (v == 0 and i % 3 == 0) else v for i, v in enumerate(vals)] for h, vals in base.items()}
    planted = paired_difference(_results("b", better), a, "support_recall")
    assert planted["lo"] > 0 and planted["win"] == "A" and planted["histories"] == 30
    # only shared histories and questions are compared
    assert paired_difference(a, _results("c", {"other": [1.0]}), "support_recall") is None


def test_empty_context_scores_zero_and_ar_with_evidence_can_fail():
    empty = Context("q?", (), BudgetUse(), ReaderBudget(), RouteTrace("none"))
    gold = (EvidenceRef("s1", 0),)
    for cat in ("IE", "MSR", "TR", "KU"):
        r = score_context("ns", Question("q", "What colour is my mug?", "red", cat, None, gold), empty, 0.0)
        assert r.support_recall == r.oracle_reader_acc == r.route_hit == 0.0
    ar = score_context("ns", Question("q", "Which room did I move my mug to?", "You never moved it.", "AR", None, gold),
                       empty, 0.0)
    assert ar.oracle_reader_acc == 0.0  # refusing needs the turns that show what did happen
    ar_never = score_context("ns", Question("q", "What colour is my zebra?", "never mentioned", "AR"), empty, 0.0)
    assert ar_never.oracle_reader_acc == 1.0 and ar_never.support_recall is None


def test_ar_is_excluded_from_overall():
    hist = [HistoryResult("h", "m", "1k", [_qr("q1", 0.0), replace(_qr("q2", 1.0, "AR"), support_recall=None)])]
    agg = aggregate(hist, n_boot=10)
    assert agg["overall"]["oracle_reader_acc"]["mean"] == 0.0 and agg["AR"]["oracle_reader_acc"]["mean"] == 1.0


def test_route_hit_is_the_pool_handed_to_selection(store_path, models):
    with Memory(store_path, "u", config=CFG, models=models, method="dense-topk") as mem:
        for s in demo_history().sessions:
            mem.add_session(s)
        ctx = mem.retrieve("What is next to my cooler?", ReaderBudget(raw_nodes=1))
        m = measure_context(ctx, ctx.budget, mem.store.get_nodes, "u", models.token_counter.count)
        node = mem.store.get_nodes([ctx.trace.pool[-1]])[ctx.trace.pool[-1]]
        q = Question("q", "x?", "y", "IE", None, (EvidenceRef(node.session_id, node.turn_index),))
        r = score_context("u", q, ctx, 0.0, m)
        assert r.pool_size == len(set(ctx.trace.pool) | {i.node_id for i in ctx.items}) > 1
        assert r.route_hit == 1.0 and (r.support_recall == 1.0) == (node.node_id in {i.node_id for i in ctx.items})


# --- query-blindness through every route the harness controls ------------------------------------------------
@register
class Snooping(DenseTopK):
    """Tries each route to questions, answers and future sessions while it writes; records what it found in a
    file (it runs in the harness's method process: its route and target come through the environment)."""

    name = "test-snooping"

    def observe(self, session_id, nodes):
        route, target = os.environ["C3M_TEST_SNOOP_ROUTE"], os.environ["C3M_TEST_SNOOP_TARGET"]
        found = []
        if route == "gc":  # questions of the history held in this process
            found += [o.question for o in gc.get_objects() if isinstance(o, Question)]
        elif route == "store":  # later sessions in the Cold Store
            seq = self.store.session_record(self.namespace, session_id).seq
            found += [s.session_id for s in self.store.sessions(self.namespace) if s.seq > seq]
        elif route == "env":  # a path to the data in the environment
            found += [k for k, v in os.environ.items() if k != "C3M_TEST_SNOOP_TARGET"
                      and ("episodes" in v or target in v)]
        elif route == "open":
            open(target, "rb").read()
        with open(os.environ["C3M_TEST_SNOOP_FOUND"], "a") as fh:
            fh.writelines(f"{f}\n" for f in found)
        return super().observe(session_id, nodes)


def _snoop(monkeypatch, tmp_path, route, target):
    found = tmp_path / "found.txt"
    found.write_text("")
    for k, v in (("ROUTE", route), ("TARGET", str(target)), ("FOUND", str(found))):
        monkeypatch.setenv(f"C3M_TEST_SNOOP_{k}", v)
    return found


@pytest.mark.parametrize("route", ["gc", "store", "env"])
def test_a_method_finds_no_question_or_future_session_while_writing(dataset, tmp_path, route, monkeypatch):
    found = _snoop(monkeypatch, tmp_path, route, dataset)
    run_eval([dataset], ["test-snooping"], tmp_path / "out", config=CFG, progress=False)
    assert found.read_text() == ""


@pytest.mark.parametrize("target", ["episodes.jsonl", "an image", "the output folder"])
def test_a_method_that_opens_guarded_files_while_writing_fails(dataset, tmp_path, target, monkeypatch):
    out = tmp_path / "out"
    if target == "the output folder":  # the harness's output (other methods' stores and results)
        out.mkdir()
        path = out / "elsewhere.txt"
        path.write_text("x")
    elif target == "an image":  # images of this or a later session: the harness read them already
        path = next((dataset / "images").rglob("*.png"))
    else:
        path = dataset / "episodes.jsonl"
    _snoop(monkeypatch, tmp_path, "open", path)
    with pytest.raises(QueryBlindnessViolation, match="write path opened"):
        run_eval([dataset], ["test-snooping"], out, config=CFG, progress=False)


def test_empty_context_on_hard_scores_zero_outside_ar_and_is_no_perfect_ar_reader(tmp_path):
    from c3m.dataset import load_dataset
    from c3m.eval.synth import generate_dataset

    ds = generate_dataset(tmp_path / "hard", length="6k", episodes=3, seed=5, split="dev", preset="hard",
                          progress=False)
    empty = Context("q?", (), BudgetUse(), ReaderBudget(), RouteTrace("none"))
    scores = [score_context(h.id, q, empty, 0.0) for h in load_dataset(ds) for q in h.questions]
    assert all(s.oracle_reader_acc == 0.0 and s.support_recall == 0.0 for s in scores if s.category != "AR")
    ar = [s.oracle_reader_acc for s in scores if s.category == "AR"]
    assert ar and sum(ar) / len(ar) < 1.0


def test_intervals_do_not_depend_on_the_order_workers_finished():
    import random

    rng = random.Random(1)
    base = {f"h{h}": [float(rng.random() < 0.5) for _ in range(6)] for h in range(12)}
    other = {h: [1.0 - v for v in vals] for h, vals in base.items()}
    a, b = _results("a", base), _results("b", other)
    shuffled = a[::-1]
    assert aggregate(a, n_boot=200) == aggregate(shuffled, n_boot=200)
    assert paired_difference(a, b, "support_recall") == paired_difference(shuffled, b[::-1], "support_recall")
