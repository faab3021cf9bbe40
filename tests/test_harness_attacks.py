"""The harness's third pass (docs/evaluation.md, "Threat model"): adversaries registered like any method and run
through the real ``run_eval``. Each one tries a hole the earlier suites did not cover — gold at read time, a way
out past ``open()``, an index labelled by what it declares rather than what its snapshot reaches, a declaration
changed after it was recorded, a route pool that lists every node, and a method that sabotages the others — and
must be flagged or gain nothing, while an honest method's numbers stay those of a run alone.

The methods run in the harness's method process (``c3m.eval.sandbox``), so they take their orders from the
environment (inherited) and report what they found in a file outside the guarded folders."""
from __future__ import annotations

import ctypes
import gc
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from c3m.config import MemoryConfig
from c3m.dataset import load_dataset
from c3m.eval import QueryBlindnessViolation, run_eval
from c3m.eval.synth import generate_dataset
from c3m.methods.base import register
from c3m.methods.dense_topk import DenseTopK
from c3m.types import node_id_for

CONFIG = MemoryConfig(text_embedder="hashing", token_counter="approx")


def _report(found) -> None:
    with open(os.environ["C3M_TEST_FOUND"], "a") as fh:
        fh.writelines(json.dumps(f, default=str) + "\n" for f in found)


@register
class GoldHunter(DenseTopK):
    """At read time, searches everything in its process for the questions' answers and evidence: live objects,
    the call stack's locals, the environment, and (last) the dataset's question file."""

    name = "adv-gold-hunter"

    def retrieve(self, question, budget):
        _report(_hunt())
        if os.environ.get("C3M_TEST_OPEN_AT_READ"):
            try:  # caught here: the tripwire still reports it
                open(os.environ["C3M_TEST_OPEN_AT_READ"]).read()
            except QueryBlindnessViolation:
                pass
        return super().retrieve(question, budget)


def _hunt() -> list[str]:
    """Everything in this process that looks like gold: Question / HiddenGold objects, question-file rows, and
    call-stack locals holding them; environment values that name questions."""
    found = []
    for o in gc.get_objects():
        if type(o).__name__ in ("Question", "EvidenceRef", "HiddenGold"):
            found.append(repr(o)[:200])
        elif (isinstance(o, dict) and "evidence" in o and "answer" in o
              and not any(type(v).__name__ == "Field" for v in o.values())):  # a row of a question file
            found.append(repr(o)[:200])
    frame = sys._getframe()
    while frame is not None:
        for k, v in list(frame.f_locals.items()):
            items = v if isinstance(v, (list, tuple)) else [v]
            if k in ("gold", "hidden") or any(type(x).__name__ in ("Question", "History", "HiddenGold")
                                              for x in items[:50]):
                found.append(f"{frame.f_code.co_name}:{k}={repr(v)[:200]}")
        frame = frame.f_back
    found += [f"{k}={v}" for k, v in os.environ.items() if "question" in v.lower()]
    return found


@register
class WayOut(DenseTopK):
    """At write time, reads the dataset's question file another way than ``open()``."""

    name = "adv-way-out"

    def observe(self, session_id, nodes):
        route, target = os.environ["C3M_TEST_ROUTE"], os.environ["C3M_TEST_TARGET"]
        if route == "subprocess":
            _report([subprocess.run(["cat", target], capture_output=True, text=True).stdout])
        elif route == "os.system":
            os.system(f"cat {target} > /dev/null")
        elif route == "ctypes":
            libc = ctypes.CDLL(None)
            _report([libc.open(target.encode(), 0)])
        elif route == "thread":  # another thread of the same process
            import threading

            box = []
            t = threading.Thread(target=lambda: box.append(open(target).read()))
            t.start()
            t.join()
            _report(box)
        elif route == "proc":  # the harness's memory through /proc
            _report([open(f"/proc/{os.getppid()}/cmdline", "rb").read().decode(errors="replace")])
        elif route == "link":  # a hard link made inside its own store opens as an allowed path
            os.link(target, self.store.path / "copy.jsonl")
            _report([open(self.store.path / "copy.jsonl").read()])
        return super().observe(session_id, nodes)


@register
class EpisodesShaped(DenseTopK):
    """A bounded label on a state shaped like an episodes index whose ``pointers()`` is empty, while it ranks
    every stored node (the old measure charged it 0 entries)."""

    name = "adv-episodes-shaped"
    bounded = True

    def state(self):
        by: dict[str, list[int]] = {}
        for nid in self.node_ids:
            n = self.store.get_nodes([nid])[nid]
            by.setdefault(n.provenance.session_id, []).append(n.provenance.turn_index)
        from c3m.index.active import encode_turns

        return {"episodes": [[s, encode_turns(t), 0, None] for s, t in by.items()], "inner": super().state()}

    def load_state(self, state):
        super().load_state(state["inner"])

    def pointers(self):
        return set()


@register
class FlipsItsLabel(DenseTopK):
    """Built bounded without a Cold-Store search, declares one once it is asked (after the harness recorded it)."""

    name = "adv-flips-label"
    bounded = True

    def retrieve(self, question, budget):
        self.searches_cold_store = True
        return super().retrieve(question, budget)


@register
class RanksTheColdStore(DenseTopK):
    """Bounded, its snapshot reaching only the first session; at read time it ranks every stored node (fetched from
    the Cold Store) and shows only the best it can reach: it never declared a Cold-Store search."""

    name = "adv-ranks-cold-store"
    bounded = True

    def state(self):
        return {"inner": super().state(), "first": self._first()}

    def _first(self):
        first = min(self.store.sessions(self.namespace), key=lambda s: s.seq).session_id
        return [n.node_id for n in self.store.nodes_for_session(self.namespace, first)]

    def pointers(self):
        return set(self._first())

    def load_state(self, state):
        super().load_state(state["inner"])
        self.reachable = set(state["first"])

    def retrieve(self, question, budget):
        everything = list(self.store.iter_nodes(self.namespace))  # the whole Cold Store, ranked
        ctx = super().retrieve(question, budget)
        reach = getattr(self, "reachable", None) or set(self._first())  # the live instance was never reloaded
        items = tuple(i for i in ctx.items if i.node_id in reach)
        pool = tuple(p for p in ctx.trace.pool if p in reach)
        return replace(ctx, items=items, trace=replace(ctx.trace, pool=pool, scored=len(everything)))


@register
class RoutesEverything(DenseTopK):
    """The honest read, with a route pool that lists every stored node (no made-up ids), in store order."""

    name = "adv-routes-everything"

    def retrieve(self, question, budget):
        ctx = super().retrieve(question, budget)
        every = tuple(n.node_id for n in self.store.iter_nodes(self.namespace))
        return replace(ctx, trace=replace(ctx.trace, pool=every))


@register
class Saboteur(DenseTopK):
    """Poisons what other methods would share if they ran in its process: the embedder classes, the harness's
    model cache and its memo. It reads honestly itself."""

    name = "adv-saboteur"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        import numpy as np

        from c3m.eval import runtime
        from c3m.models.hashing import HashingEmbedder

        HashingEmbedder.embed = lambda self, texts: np.zeros((len(texts), self.dim), np.float32)  # noqa: ARG005
        runtime._models.cache_clear()  # the process's model cache: every method after this would load afresh
        memo = getattr(self.models.text_embedder, "_memo", None)
        if memo is not None:
            for k in list(memo):
                memo[k] = memo[k] * 0


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("attacks")
    return generate_dataset(root / "ds", length=9000, episodes=1, seed=4, progress=False, preset="hard", split="dev")


@pytest.fixture
def found(tmp_path, monkeypatch):
    path = tmp_path / "found.jsonl"
    path.write_text("")
    monkeypatch.setenv("C3M_TEST_FOUND", str(path))
    return path


def _questions_file(dataset: Path) -> Path:
    return next(p for p in (dataset / "questions.jsonl", *dataset.rglob("questions.jsonl")) if p.is_file())


def _records(results):
    """Everything a method's result says about its questions, minus timings."""
    return sorted((r.history, q.question_id, q.support_recall, q.raw_support_recall, q.route_hit, q.text_tokens,
                   q.pool_size, q.prediction, q.violation) for r in results for q in r.questions)


def test_gold_is_not_in_the_method_process_while_it_reads(dataset, tmp_path, found):
    res = run_eval([dataset], ["adv-gold-hunter"], tmp_path / "out", config=CONFIG, progress=False)
    (r,) = next(iter(res["adv-gold-hunter"].values()))
    assert r.questions and not any(q.violation for q in r.questions)
    hits = [json.loads(line) for line in found.read_text().splitlines()]
    (history,) = load_dataset(dataset)
    answers = {q.answer for q in history.questions if len(q.answer) > 3}
    assert not hits, hits[:3]  # no Question, evidence or answer dict, no gold in the stack or the environment
    assert not any(a in line for a in answers for line in found.read_text().splitlines())
    assert _hunt() and history.questions  # control: where the gold is (this process), the same search finds it


def test_opening_the_question_file_at_read_time_is_caught_even_when_the_method_catches_it(dataset, tmp_path, found,
                                                                                           monkeypatch):
    monkeypatch.setenv("C3M_TEST_OPEN_AT_READ", str(_questions_file(dataset)))
    with pytest.raises(QueryBlindnessViolation, match="read path opened"):
        run_eval([dataset], ["adv-gold-hunter"], tmp_path / "out", config=CONFIG, progress=False)


@pytest.mark.parametrize("route, message", [("subprocess", "started a program"), ("os.system", "started a program"),
                                            ("ctypes", "ctypes"), ("thread", "write path opened"),
                                            ("proc", "write path opened /proc/"), ("link", "os.link")])
def test_every_way_out_at_write_time_is_refused(dataset, tmp_path, found, monkeypatch, route, message):
    monkeypatch.setenv("C3M_TEST_ROUTE", route)
    monkeypatch.setenv("C3M_TEST_TARGET", str(_questions_file(dataset)))
    with pytest.raises(QueryBlindnessViolation, match=message):
        run_eval([dataset], ["adv-way-out"], tmp_path / "out", config=CONFIG, progress=False)
    assert "evidence" not in found.read_text()


def test_an_index_is_measured_by_what_its_snapshot_reaches(dataset, tmp_path):
    res = run_eval([dataset], ["adv-episodes-shaped", "dense-topk"], tmp_path / "out", config=CONFIG,
                   progress=False, answer=False)
    (r,) = next(iter(res["adv-episodes-shaped"].values()))
    assert r.raw_nodes > 36 and r.index_peak[0] == r.raw_nodes == r.pointers  # one entry per node it reaches
    assert r.write_violations and "entries" in r.write_violations[-1]["over"]  # bounded label, over the budget


def test_a_declaration_changed_after_it_was_built_voids_every_question(dataset, tmp_path):
    res = run_eval([dataset], ["adv-flips-label"], tmp_path / "out", config=CONFIG, progress=False, answer=False)
    (r,) = next(iter(res["adv-flips-label"].values()))
    assert not r.searches_cold_store  # the label is the one it was built with
    assert r.questions and all("declaration changed" in (q.violation or "") for q in r.questions)
    assert not any(q.route_hit or q.support_recall for q in r.questions)


def test_a_read_that_fetches_nodes_its_snapshot_does_not_reach_is_flagged(dataset, tmp_path):
    res = run_eval([dataset], ["adv-ranks-cold-store"], tmp_path / "out", config=CONFIG, progress=False,
                   answer=False)
    (r,) = next(iter(res["adv-ranks-cold-store"].values()))
    assert r.questions and all("does not reach" in (q.violation or "") for q in r.questions)


def test_route_hit_counts_only_the_first_48_pool_ids(dataset, tmp_path):
    from c3m.eval.metrics import ROUTE_POOL

    res = run_eval([dataset], ["adv-routes-everything"], tmp_path / "out", config=CONFIG, progress=False,
                   answer=False)
    (r,) = next(iter(res["adv-routes-everything"].values()))
    (history,) = load_dataset(dataset)
    ns = next(q.namespace for q in r.questions)
    assert r.raw_nodes > ROUTE_POOL
    # the pool lists every node in store order: only its first 48 (or the selected items) can be a hit
    order = [node_id_for(ns, s.id, t) for s in history.sessions for t in range(len(s.turns))]
    first = set(order[:ROUTE_POOL])
    for q, gold in zip(r.questions, history.questions):
        assert q.pool_size == len(order)
        ids = {node_id_for(ns, e.session, e.turn) for e in gold.evidence}
        if ids and not (ids & first) and not q.support_recall:  # gold past the first 48 and not selected
            assert q.route_hit == 0.0, q.question_id
    assert any(q.route_hit == 0.0 for q in r.questions)  # without the cap every question would be a hit


@pytest.mark.parametrize("order", ["before", "after"])
def test_a_saboteur_changes_nothing_for_an_honest_method(dataset, tmp_path, order):
    methods = ["adv-saboteur", "dense-topk"] if order == "before" else ["dense-topk", "adv-saboteur"]
    together = run_eval([dataset], methods, tmp_path / "together", config=CONFIG, progress=False)
    alone = run_eval([dataset], ["dense-topk"], tmp_path / "alone", config=CONFIG, progress=False)
    honest = _records(next(iter(alone["dense-topk"].values())))
    assert _records(next(iter(together["dense-topk"].values()))) == honest
    assert any(q[2] for q in honest)  # the honest method does find evidence: the comparison can fail


def test_results_inside_the_dataset_folder_work(dataset, tmp_path):
    """``c3m eval --dataset D --out D/results``: the method's own store (its temporary blob files included) may
    open inside the guarded dataset folder; the rest of it may not."""
    import shutil

    ds = tmp_path / "ds"
    shutil.copytree(dataset, ds)
    res = run_eval([ds], ["dense-topk"], ds / "results", config=CONFIG, progress=False, answer=False)
    (r,) = next(iter(res["dense-topk"].values()))
    assert r.questions and not any(q.violation for q in r.questions)
