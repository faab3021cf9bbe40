"""Adversarial methods against the evaluation harness: each cheats in one way, is registered like any method
(``@register``) and runs through the real harness (``run_eval``) on a tiny synthetic history with oracle
perception. Each must end flagged — a read violation, a write violation, or reads that change after the reload
— with zero credit for what it forged, while honest methods on the same history are flagged for nothing and
score exactly what their items show (docs/evaluation.md, "Threat model")."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from c3m import Memory
from c3m.budget import SnapshotView, caption_matches, measure_context, measure_index
from c3m.config import MemoryConfig
from c3m.dataset import load_dataset
from c3m.eval.harness import run_eval
from c3m.eval.runtime import _models
from c3m.eval.metrics import score_context
from c3m.eval.report import compute_metrics, markdown
from c3m.eval.synth import generate_dataset
from c3m.methods.base import MemoryMethod, register
from c3m.methods.c3m import C3MPaper
from c3m.methods.dense_topk import DenseTopK
from c3m.methods.summary_only import SummaryOnly
from c3m.types import BudgetUse, Context, ContextItem, EvidenceForm, ReaderBudget, RouteTrace

CONFIG = MemoryConfig(text_embedder="hashing", token_counter="approx")
#: honest methods run beside the adversaries: every family of snapshot (flat, active-index, episodes, derived)
HONEST = ("dense-topk", "c3m-paper", "hivemem", "summary-only")


def _all_nodes(method: MemoryMethod):
    return [n for n in method.store.iter_nodes(method.namespace) if not n.redacted]


def _item(node, form, text, images=(), covers=(), provenance=None) -> ContextItem:
    return ContextItem(node.node_id, provenance or node.provenance, node.role, form, text, tuple(images), 1.0, 0,
                       tuple(covers))


class _Forger(DenseTopK):
    """dense-topk's honest read, then ``forge`` rewrites it (subclasses: one cheat each)."""

    def retrieve(self, question: str, budget: ReaderBudget) -> Context:
        return self.forge(super().retrieve(question, budget))

    def forge(self, ctx: Context) -> Context:
        raise NotImplementedError


@register
class ForgedCaptions(_Forger):
    """Every node of the history as a CAPTION item holding its full text: no Raw-Node slot, tokens only."""

    name = "adv-forged-captions"

    def forge(self, ctx):
        items = tuple(_item(n, EvidenceForm.CAPTION, n.text) for n in _all_nodes(self))
        return replace(ctx, items=items)


@register
class EmptyCaptions(_Forger):
    """The same with empty text: measured cost 0 tokens, 0 Raw Nodes."""

    name = "adv-empty-captions"

    def forge(self, ctx):
        return replace(ctx, items=tuple(_item(n, EvidenceForm.CAPTION, "") for n in _all_nodes(self)))


@register
class ForgedProvenance(_Forger):
    """One real node shown again and again, each copy claiming another (session, turn): one Raw Node charged."""

    name = "adv-forged-provenance"

    def forge(self, ctx):
        nodes = _all_nodes(self)
        one = nodes[0]
        return replace(ctx, items=tuple(_item(one, EvidenceForm.RAW_TEXT, one.text, provenance=n.provenance)
                                        for n in nodes))


@register
class ForgedRoute(_Forger):
    """Honest items, but the route trace's pool names every node plus made-up ids (Route-Hit 1.0 for free)."""

    name = "adv-forged-route"

    def forge(self, ctx):
        pool = tuple(n.node_id for n in _all_nodes(self)) + tuple(f"n-made-up-{i}" for i in range(20))
        return replace(ctx, trace=replace(ctx.trace, pool=pool))


@register
class EmptyRawImages(_Forger):
    """RAW_IMAGE items that show no image: a Raw-Node slot each, 0 tokens, and raw Support Recall for nothing."""

    name = "adv-empty-raw-images"

    def forge(self, ctx):
        return replace(ctx, items=tuple(replace(i, form=EvidenceForm.RAW_IMAGE, text="", images=())
                                        for i in ctx.items))


@register
class SmuggledCropText(_Forger):
    """A real grounded crop of each node that has one, its text carrying the whole history's raw text."""

    name = "adv-smuggled-crop-text"

    def forge(self, ctx):
        nodes = _all_nodes(self)
        text = " ".join(n.text for n in nodes)
        recs = self.store.perceptions([n.node_id for n in nodes if n.images])
        by_id = {n.node_id: n for n in nodes}
        items = tuple(_item(by_id[nid], EvidenceForm.GROUNDED_CROP, text, (r.crop,))
                      for nid, rs in recs.items() for r in rs[:1] if r.crop is not None)
        return replace(ctx, items=items)


@register
class ForgedSummaries(SummaryOnly):
    """summary-only's read, each summary replaced by its session's full raw text (not what the snapshot holds)."""

    name = "adv-forged-summaries"

    def retrieve(self, question, budget):
        ctx = super().retrieve(question, budget)
        stored = {n.node_id: n for n in _all_nodes(self)}
        return replace(ctx, items=tuple(
            replace(i, text="\n".join(stored[c].text for c in i.covers)) if i.form is EvidenceForm.SUMMARY else i
            for i in ctx.items))


class _PageForger(C3MPaper):
    """c3m-paper's honest paged read, then ``forge`` rewrites its route trace."""

    def retrieve(self, question, budget):
        return self.forge(super().retrieve(question, budget))


@register
class UnderReportedPages(_PageForger):
    """Names no page: reads pages for free (0 pages charged)."""

    name = "adv-unreported-pages"

    def forge(self, ctx):
        return replace(ctx, trace=replace(ctx.trace, pages=()))


@register
class MadeUpPage(_PageForger):
    """Names a page the index does not have."""

    name = "adv-made-up-page"

    def forge(self, ctx):
        return replace(ctx, trace=replace(ctx.trace, pages=ctx.trace.pages + (("p99", 1.0),)))


@register
class UnreachablePool(_PageForger):
    """A bounded reader whose pool names every stored node, beyond the pages it read (Route-Hit for free)."""

    name = "adv-unreachable-pool"

    def forge(self, ctx):
        return replace(ctx, trace=replace(ctx.trace, pool=tuple(n.node_id for n in _all_nodes(self))))


@register
class HiddenState(MemoryMethod):
    """Declares itself bounded with a near-empty snapshot, and keeps every node in Python memory."""

    name = "adv-hidden-state"
    bounded = True
    complete_provenance = False

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.reset()

    def reset(self):
        self.kept = []

    def observe(self, session_id, nodes):
        self.kept.extend(nodes)
        return []

    def state(self):
        return {"v": 1}

    def load_state(self, state):
        self.reset()

    def pointers(self):
        return set()

    def retrieve(self, question, budget):
        if not self.kept:
            return Context(question, (), BudgetUse(), budget, RouteTrace(self.name, notes=("empty memory",)))
        q = self.models.text_embedder.embed([question])[0]
        best = np.argsort(-(self.node_vectors(self.kept) @ q), kind="stable")[:budget.raw_nodes]
        items = tuple(_item(self.kept[i], EvidenceForm.RAW_TEXT, self.kept[i].text) for i in sorted(best))
        return Context(question, items, BudgetUse(), budget, RouteTrace(self.name, pool=tuple(i.node_id for i in items)))


@register
class HiddenPointers(HiddenState):
    """The same, but its snapshot lists every pointer while declaring a count of 0 (a flat index measured as
    nothing)."""

    name = "adv-hidden-pointers"

    def state(self):
        return {"v": 1, "count": 0}

    def pointers(self):
        return {n.node_id for n in self.kept}


@register
class FreePointers(DenseTopK):
    """Bounded, with an empty paged snapshot (0 entries measured) whose pointer list still names every node."""

    name = "adv-free-pointers"
    bounded = True

    def state(self):
        return {"entries": [], "pages": [], "inner": super().state()}

    def load_state(self, state):
        super().load_state(state["inner"])


@register
class PlantedCaptions(_Forger):
    """Writes its own "perception records" (each image turn's caption = the whole history's text) into the store
    at write time, then shows them as captions: they would verify against the store."""

    name = "adv-planted-captions"

    def observe(self, session_id, nodes):
        from c3m.types import ImagePerception

        text = " ".join(n.text for n in _all_nodes(self))
        recs = [(ImagePerception(n.node_id, im, "adv", "1", text), None) for n in nodes for im in n.images[:1]]
        if recs:
            self.store.put_perceptions(self.namespace, recs)
        return super().observe(session_id, nodes)

    def forge(self, ctx):
        nodes = [n for n in _all_nodes(self) if n.images]
        mine = {nid: r.caption for nid, recs in self.store.perceptions([n.node_id for n in nodes]).items()
                for r in recs if r.backend == "adv"}
        return replace(ctx, items=tuple(_item(n, EvidenceForm.CAPTION, f"[image: {mine[n.node_id]}]")
                                        for n in nodes if n.node_id in mine))


@register
class PlantedNode(_Forger):
    """Declares a Cold-Store search, and at read time stores a new session whose one turn holds the whole
    history's text, then shows that one Raw Node."""

    name = "adv-planted-node"
    searches_cold_store = True

    def forge(self, ctx):
        from c3m.types import Session, Turn

        nodes = _all_nodes(self)
        if not any(n.session_id == "planted" for n in nodes):
            text = " ".join(n.text for n in nodes)
            session = Session("planted", nodes[-1].time, (Turn("user", text),))
            prepared = self.store.prepare_session(self.namespace, session)
            with self.store.transaction(self.namespace):
                self.store.insert_session(prepared)
        planted = self.store.nodes_for_session(self.namespace, "planted")[0]
        return replace(ctx, items=(_item(planted, EvidenceForm.RAW_TEXT, planted.text),))


ADVERSARIES = {
    "adv-forged-captions": "caption is not a perception record",
    "adv-empty-captions": "caption is not a perception record",
    "adv-forged-provenance": "forged provenance",
    "adv-forged-route": "pool names",
    "adv-empty-raw-images": "raw_image item must show",
    "adv-smuggled-crop-text": "not the crop phrase",
    "adv-forged-summaries": "summary is not one the index snapshot holds",
    "adv-unreported-pages": "not reachable through the pages",
    "adv-made-up-page": "does not hold",
    "adv-unreachable-pool": "pool names",
    "adv-free-pointers": "not reachable through the pages",
}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("adversarial")
    dataset = generate_dataset(root / "ds", length=4000, episodes=1, seed=0, progress=False)
    methods = [*HONEST, *ADVERSARIES, "adv-hidden-state", "adv-hidden-pointers", "adv-planted-captions",
               "adv-planted-node"]
    out = run_eval([dataset], methods, root / "out", config=CONFIG, perception="oracle", progress=False, workers=2)
    results = {m: next(iter(by_len.values()))[0] for m, by_len in out.items()}
    return root, results, out


@pytest.mark.parametrize("name", list(ADVERSARIES))
def test_every_forged_context_is_a_violation_with_zero_credit(run, name):
    _, results, _ = run
    r = results[name]
    assert r.questions and all(q.violation for q in r.questions), [q.violation for q in r.questions]
    assert all(ADVERSARIES[name] in q.violation for q in r.questions), r.questions[0].violation
    for q in r.questions:
        assert q.oracle_reader_acc == 0.0 and not q.support_recall and not q.raw_support_recall
        assert not q.route_hit and not q.evidence_acc and not q.judged_acc
        assert not q.answer_correct and not q.answer_f1


@pytest.mark.parametrize("name, metric", [("adv-forged-captions", "support_recall"),
                                          ("adv-empty-captions", "oracle_reader_acc"),
                                          ("adv-forged-provenance", "support_recall"),
                                          ("adv-forged-route", "route_hit"),
                                          ("adv-empty-raw-images", "raw_support_recall")])
def test_the_forgeries_would_have_scored_on_the_items_own_claims(run, name, metric):
    """Control for the zeros above: the same forged contexts, read on their own claims (item provenance, the
    trace's pool), would have scored on ``metric``; the harness's resolved reading gives them nothing."""
    root, results, _ = run
    (history,) = load_dataset(root / "ds")
    cfg = replace(CONFIG, method=name, perception=f"oracle:{(root / 'ds').resolve()}")
    models = _models(cfg.text_embedder, cfg.token_counter, cfg.answerer, cfg.perception, cfg.image_embedder)
    store = root / "out" / "stores" / name / results[name].length / history.id
    claimed, resolved = [], []
    with Memory(store, history.id, config=cfg, models=models) as mem:
        for q in history.questions:
            ctx = mem.retrieve(q.question, check=False)
            claimed.append(getattr(score_context(mem.namespace, q, ctx, 0.0), metric) or 0.0)
            resolved.append(getattr(score_context(mem.namespace, q, ctx, 0.0, mem.measure(ctx)), metric) or 0.0)
    assert sum(claimed) > 0 and sum(resolved) == 0, (claimed, resolved)


def test_hidden_state_is_reported_and_reads_only_its_snapshot(run):
    root, results, out = run
    for name in ("adv-hidden-state", "adv-hidden-pointers"):
        r = results[name]
        assert r.bounded and r.reload_checked == len(r.questions) and r.reload_changed > 0, r.reload_example
        # scored from the instance reloaded from {"v": 1}: it holds nothing, so it shows nothing
        assert all(not q.support_recall and not q.route_hit for q in r.questions if q.support_recall is not None)
    # the one that lists its pointers is measured on them: a flat index of that size is over the write budget
    assert results["adv-hidden-pointers"].write_violations and not results["adv-hidden-state"].write_violations
    text = markdown(compute_metrics(out, n_boot=10), {"command": "test"})
    assert "adv-hidden-state (reads change after reload)" in text and "**changed" in text
    assert "Nodes scored (self-reported)" in text


@pytest.mark.parametrize("perception", ["oracle", "none"])
def test_a_method_that_writes_to_the_store_is_voided(run, tmp_path, perception):
    """Records a method planted itself (any backend, with or without a perception backend configured) and a
    session it stored at read time void every question of the history."""
    root, results, _ = run
    if perception == "oracle":
        got = {m: results[m] for m in ("adv-planted-captions", "adv-planted-node")}
    else:
        out = run_eval([root / "ds"], ["adv-planted-captions"], tmp_path / "out", config=CONFIG, perception="none",
                       progress=False)
        got = {m: next(iter(by_len.values()))[0] for m, by_len in out.items()}
    for name, r in got.items():
        assert r.store_problems and all(q.violation == r.store_problems[0] for q in r.questions), name
        assert all(not q.support_recall and not q.oracle_reader_acc for q in r.questions)
        assert all(not q.answer_correct and not q.answer_f1 for q in r.questions)  # answers earn nothing either
    if perception == "oracle":
        assert "did not write" in got["adv-planted-captions"].store_problems[0]
        assert "during the read phase" in got["adv-planted-node"].store_problems[-1]


def test_free_pointers_are_measured_as_nothing_and_reach_nothing(run):
    _, results, _ = run
    r = results["adv-free-pointers"]
    assert r.index_peak[0] == 0 and not r.write_violations  # 0 entries measured: bounded on paper ...
    assert all(q.violation for q in r.questions)             # ... so its pointers reach nothing


def test_honest_methods_are_never_flagged_and_read_the_same_after_the_reload(run):
    _, results, _ = run
    for name in HONEST:
        r = results[name]
        assert not any(q.violation for q in r.questions), (name, [q.violation for q in r.questions][:3])
        assert r.reload_checked == len(r.questions) and r.reload_changed == 0, (name, r.reload_example)
        assert not r.write_violations


def test_honest_scores_equal_what_their_items_claim(run):
    """For honest contexts the harness's resolved reading (stored provenance, verified pool) equals the items'
    own claims: the checks change no honest number. The contexts hold captions, crops and summaries, so the
    derived-record checks were exercised."""
    root, results, _ = run

    (history,) = load_dataset(root / "ds")
    forms = set()
    for name in dict.fromkeys(("c3m", *HONEST)):
        cfg = replace(CONFIG, method=name, perception=f"oracle:{(root / 'ds').resolve()}")
        models = _models(cfg.text_embedder, cfg.token_counter, cfg.answerer, cfg.perception, cfg.image_embedder)
        store = root / "honest" / name
        with Memory(store, history.id, config=cfg, models=models) as mem:
            for s in history.sessions:
                mem.add_session(s)
            for q in history.questions:
                ctx = mem.retrieve(q.question, check=False)
                measured = mem.measure(ctx)
                assert not measured.problems, (name, q.id, measured.problems)
                forms |= {i.form for i in ctx.items}
                a, b = score_context(mem.namespace, q, ctx, 0.0, measured), score_context(mem.namespace, q, ctx, 0.0)
                keys = ("route_hit", "support_recall", "raw_support_recall", "oracle_reader_acc", "pool_size")
                assert [getattr(a, k) for k in keys] == [getattr(b, k) for k in keys], (name, q.id)
    assert {EvidenceForm.CAPTION, EvidenceForm.GROUNDED_CROP, EvidenceForm.SUMMARY} <= forms, forms


def test_the_snapshot_view_reaches_exactly_the_methods_pointers(run):
    """``c3m.index.reach`` reads each family's state shape; its reach equals the method's own pointers (a new or
    changed state shape shows up here), and every page of a paged snapshot is reachable."""
    root, _, _ = run
    (history,) = load_dataset(root / "ds")
    for name in ("c3m", "hivemem", "summary-only", "dense-topk", "facts", "resum"):
        with Memory(root / "view" / name, history.id, config=replace(CONFIG, method=name)) as mem:
            for s in history.sessions[:4]:
                mem.add_session(s)
            view = mem.snapshot_view()
            assert view.format != "unknown" and view.reachable == mem.method.pointers(), name
            if view.pages is not None:
                assert set().union(*view.pages.values()) == view.reachable


def test_caption_matching_allows_a_subsequence_of_stored_captions_only():
    caps = ["a red mug", "", "a mug] [image: a lamp", "a lamp"]
    assert caption_matches("[image: a red mug]", caps)
    assert caption_matches("[image: a red mug] [image: a lamp]", caps)
    assert caption_matches("[image: a mug] [image: a lamp]", caps)  # the odd caption, whole
    assert not caption_matches("[image: a lamp] [image: a red mug]", caps)  # not in stored order
    assert not caption_matches("", caps) and not caption_matches("[image: ]", caps)
    assert not caption_matches("[image: a red mug] extra", caps)


def test_measure_index_counts_the_pointers_a_declared_count_hides():
    assert measure_index({"count": 0}, len, pointers=40).entries == 40
    assert measure_index({"count": 50}, len, pointers=40).entries == 50


def test_without_a_perception_lookup_no_caption_verifies(tmp_path, models):
    """``measure_context`` refuses what it cannot verify: a caption without the store's perception records."""
    from factories import make_session

    with Memory(tmp_path / "s", "u", models=models, method="dense-topk") as mem:
        mem.add_session(make_session(1))
        n = next(n for n in mem.nodes() if n.images)
        ctx = Context("q", (_item(n, EvidenceForm.CAPTION, "[image: a mug]"),), BudgetUse(), ReaderBudget(),
                      RouteTrace("t"))
        m = measure_context(ctx, ReaderBudget(), mem.store.get_nodes, "u", len)
        assert m.problems and "no perception lookup" in m.problems[0]
        flat = SnapshotView("flat", None, frozenset())
        m = measure_context(replace(ctx, items=(_item(n, EvidenceForm.RAW_TEXT, n.text),)), ReaderBudget(),
                            mem.store.get_nodes, "u", len, view=flat)
        assert m.problems and "not reachable from the index snapshot" in m.problems[0]
        assert not measure_context(replace(ctx, items=(_item(n, EvidenceForm.RAW_TEXT, n.text),)), ReaderBudget(),
                                   mem.store.get_nodes, "u", len, view=flat, searches_cold_store=True).problems
