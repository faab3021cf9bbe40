"""The evaluation harness: query-blindness enforced, metrics, bootstrap, resume, parallel == serial, report."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from c3m.config import MemoryConfig
from c3m.eval import QueryBlindnessViolation, bootstrap_ci, load_results, make_header, run_eval, write_report
from c3m.methods import register
from c3m.methods.dense_topk import DenseTopK

CFG = MemoryConfig(text_embedder="hashing", token_counter="approx")


@pytest.fixture
def dataset(demo_dataset):
    return demo_dataset


@register
class PeekingMethod(DenseTopK):
    """Cheats: reads the dataset file (with its questions) while observing a session. It runs in the harness's
    method process, so it finds the dataset through the environment (inherited), not a class attribute."""

    name = "test-peeking"

    def observe(self, session_id, nodes):
        open(Path(os.environ["C3M_TEST_PEEK"]) / "episodes.jsonl").read()
        return super().observe(session_id, nodes)


def test_harness_refuses_a_method_that_reads_questions_at_write_time(dataset, tmp_path, monkeypatch):
    monkeypatch.setenv("C3M_TEST_PEEK", str(dataset))
    with pytest.raises(QueryBlindnessViolation, match="write path opened"):
        run_eval([dataset], ["test-peeking"], tmp_path / "out", config=CFG, progress=False)
    # the harness's own process reads the dataset as it likes: only the method's process is guarded
    open(dataset / "episodes.jsonl").read()


def test_metrics_and_report(dataset, tmp_path):
    everything = run_eval([dataset], ["dense-topk"], tmp_path / "out", config=CFG, progress=False)
    results = everything["dense-topk"]["1k"]
    assert len(results) == 2 and all(len(r.questions) == 6 for r in results)
    r = results[0]
    assert r.pointers == r.raw_nodes == 12 and len(r.write_seconds) == 6 and r.overflow_repairs == 0
    for q in r.questions:
        if q.category == "AR":
            assert q.support_recall is None and q.route_hit is None and q.oracle_reader_acc in (0.0, 1.0)
        else:
            assert 0 <= q.support_recall <= 1 and q.oracle_reader_acc == float(q.support_recall == 1.0)
            assert q.route_hit >= (q.support_recall > 0)  # evidence in the context was routed first
    header = make_header(CFG, None, seed=3, command="c3m eval --test")
    metrics = write_report(everything, tmp_path / "out", header, n_boot=200)
    data = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert data["header"]["command"] == "c3m eval --test" and data["metrics"] == json.loads(json.dumps(metrics))
    overall = metrics["dense-topk"]["1k"]["overall"]
    assert overall["support_recall"]["lo"] <= overall["support_recall"]["mean"] <= overall["support_recall"]["hi"]
    report = (tmp_path / "out" / "report.md").read_text()
    assert "| Method | IE 1k | MSR 1k | TR 1k | KU 1k | AR 1k | Overall 1k |" in report
    assert "c3m eval --test" in report


def test_eval_resumes_where_it_stopped(dataset, tmp_path):
    out = tmp_path / "out"
    first = run_eval([dataset], ["dense-topk"], out, config=CFG, progress=False, limit=1)
    assert [r.history for r in first["dense-topk"]["1k"]] == ["demo-user"]
    res_file = out / "results" / "dense-topk" / "1k.jsonl"
    with res_file.open("a") as fh:
        fh.write('{"history": "demo-user-2", "torn')  # killed mid-write
    again = run_eval([dataset], ["dense-topk"], out, config=CFG, progress=False)
    histories = sorted(r.history for r in again["dense-topk"]["1k"])
    assert histories == ["demo-user", "demo-user-2"]
    assert sorted(r.history for r in load_results(out)["dense-topk"]["1k"]) == histories


def test_parallel_equals_serial(dataset, tmp_path):
    strip = lambda res: sorted((q.namespace, q.question_id, q.support_recall, q.route_hit, q.text_tokens)
                               for r in res["dense-topk"]["1k"] for q in r.questions)
    serial = run_eval([dataset], ["dense-topk"], tmp_path / "a", config=CFG, progress=False)
    parallel = run_eval([dataset], ["dense-topk"], tmp_path / "b", config=CFG, progress=False, workers=2)
    assert strip(serial) == strip(parallel)


def test_torchrun_ranks_split_histories(dataset, tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    for rank in (0, 1):
        monkeypatch.setenv("RANK", str(rank))
        run_eval([dataset], ["dense-topk"], tmp_path / "out", config=CFG, progress=False)
    files = sorted(p.name for p in (tmp_path / "out" / "results" / "dense-topk").iterdir())
    assert files == ["1k.rank0.jsonl", "1k.rank1.jsonl"]
    assert len(load_results(tmp_path / "out")["dense-topk"]["1k"]) == 2


def test_bootstrap_is_a_cluster_bootstrap():
    mean, lo, hi = bootstrap_ci([[1.0, 1.0, 1.0, 1.0], [0.0]], n_boot=2000)
    assert mean == pytest.approx(0.8) and lo < mean < hi
    assert bootstrap_ci([[0.5, 0.5]]) == (0.5, 0.5, 0.5)
    rng = np.random.default_rng(0)
    clusters = [list(rng.random(5)) for _ in range(40)]
    m, lo, hi = bootstrap_ci(clusters)
    assert lo < m < hi and hi - lo < 0.2


def test_judged_accuracy_is_reported_beside_oracle_reader(dataset, tmp_path):
    everything = run_eval([dataset], ["dense-topk"], tmp_path / "out", config=CFG, progress=False, judge="f1")
    qs = [q for r in everything["dense-topk"]["1k"] for q in r.questions]
    assert all(q.judged_acc in (0.0, 1.0) and q.prediction for q in qs)
    ar = [q for q in qs if q.category == "AR"]
    assert all(q.judged_acc == 1.0 for q in ar)  # the extractive answerer refuses on the dog question
    header = make_header(CFG, None, judge="f1")
    write_report(everything, tmp_path / "out", header, n_boot=100)
    report = (tmp_path / "out" / "report.md").read_text()
    assert "Judged answer accuracy (judged: answerer extractive, judge f1, perception none (text only))" in report
    assert "Oracle-reader accuracy" in report


def test_oracle_perception_captions_reach_the_answerer(tmp_path):
    from c3m.eval.synth import generate_dataset

    ds = generate_dataset(tmp_path / "syn", length=2000, episodes=1, seed=2, progress=False)
    everything = run_eval([ds], ["dense-topk"], tmp_path / "out", config=CFG, progress=False, judge="f1",
                          perception="oracle")
    qs = [q for r in everything["dense-topk"]["2k"] for q in r.questions]
    assert qs and all(q.judged_acc is not None for q in qs)
    assert any("the photo of " in (q.prediction or "") for q in qs)  # the extractive answerer quotes captions
    header = make_header(CFG, None, judge="f1", perception="oracle")
    assert "oracle (hidden ground truth)" in header["answer_accuracy"]


def test_read_only_variants_share_the_write_replay_and_match_a_standalone_run(dataset, tmp_path):
    """A variant that changes only read options is asked on its base's committed index: one store, and the
    same per-question results as replaying it on its own; the results carry the whole spec."""
    specs = ["c3m", "c3m:expansion=false,entries_k=2", "c3m:forms=raw_text"]
    shared = run_eval([dataset], specs, tmp_path / "shared", config=CFG, progress=False)
    alone = run_eval([dataset], specs[1:2], tmp_path / "alone", config=CFG, progress=False)
    stores = {p.name for p in (tmp_path / "shared" / "stores").iterdir()}
    assert stores == {"c3m"}  # the variants wrote nothing of their own
    strip = lambda rs: sorted(((r.history, q.question_id, q.support_recall, q.text_tokens, q.images)  # noqa: E731
                               for r in rs for q in r.questions))
    for length, results in alone[specs[1]].items():
        assert strip(shared[specs[1]][length]) == strip(results)
    loaded = load_results(tmp_path / "shared")
    assert set(loaded) == set(specs) and all(r.method == s for s in specs for rs in loaded[s].values() for r in rs)
    # a variant with a write option is not a rider: it replays on its own
    run_eval([dataset], ["c3m", "c3m:delta=0.5"], tmp_path / "write", config=CFG, progress=False)
    assert {p.name for p in (tmp_path / "write" / "stores").iterdir()} == {"c3m", "c3m_delta_0.5"}


def test_a_single_shared_history_is_never_a_significant_win():
    from c3m.eval.metrics import QuestionResult, paired_difference
    from c3m.eval.replay import HistoryResult

    def result(method, history, value):
        qs = [QuestionResult("ns", f"q{i}", "IE", 1.0, value, value, 0, 0, 0, 1.0) for i in range(4)]
        return HistoryResult(history, method, "32k", questions=qs)

    one = paired_difference([result("a", "h1", 1.0)], [result("b", "h1", 0.0)], "support_recall")
    assert one["mean"] == 1.0 and one["histories"] == 1 and one["win"] is None
    two = paired_difference([result("a", "h1", 1.0), result("a", "h2", 1.0)],
                            [result("b", "h1", 0.0), result("b", "h2", 0.5)], "support_recall")
    assert two["win"] == "A"


def test_report_headline_is_raw_text_support_recall_beside_caption_recall():
    """The first paired section and the first Support Recall table are raw-text SR, computed from
    ``raw_support_recall``; the caption-inclusive SR follows, labelled. A swap of the two would fail here."""
    from c3m.eval.metrics import QuestionResult
    from c3m.eval.replay import HistoryResult
    from c3m.eval.report import compute_metrics, compute_paired, markdown

    def history(method, h, caption, raw):
        qs = [QuestionResult(f"ns-{h}", f"q{i}", "IE", 1.0, caption, caption, 100, 0, 2, 5.0,
                             raw_support_recall=raw) for i in range(3)]
        return HistoryResult(h, method, "32k", qs, write_seconds=[0.01], bounded=True)

    # a shows every gold turn, but only as captions; b shows half of them, raw
    everything = {"a": {"32k": [history("a", h, 1.0, 0.0) for h in ("h1", "h2")]},
                  "b": {"32k": [history("b", h, 0.5, 0.5) for h in ("h1", "h2")]}}
    md = markdown(compute_metrics(everything, n_boot=50), {"command": "c3m eval --test"},
                  compute_paired(everything, n_boot=50))
    sections = md.split("\n## ")[1:]
    heads = [s.split("\n", 1)[0] for s in sections]
    row = lambda section, name: [c.strip() for c in next(line for line in section.splitlines()  # noqa: E731
                                                         if line.startswith(f"| {name} |")).strip("|").split("|")]
    paired = [s for s in sections if s.startswith("Paired differences")]
    assert paired[0].startswith("Paired differences, Raw-text Support Recall (no captions): A − B ×100")
    assert paired[1].startswith("Paired differences, Support Recall incl. captions/crops: A − B ×100")
    assert row(paired[0], "a vs b")[-1] == "-50.0 [-50.0, -50.0] **b**"  # Overall
    assert row(paired[1], "a vs b")[-1] == "+50.0 [+50.0, +50.0] **a**"
    raw = next(i for i, h in enumerate(heads) if h.startswith("Raw-text Support Recall ×100"))
    cap = next(i for i, h in enumerate(heads) if h.startswith("Support Recall incl. captions/crops ×100"))
    assert raw < cap  # IE 32k, Overall 32k
    assert row(sections[raw], "a") == ["a", "0.0", "0.0"] and row(sections[cap], "a") == ["a", "100.0", "100.0"]
    intervals = sections[heads.index("Intervals (overall, 95% cluster bootstrap over histories)")]
    assert row(intervals, "Method")[2:4] == ["Raw-text Support Recall (no captions)",
                                             "Support Recall incl. captions/crops"]
    assert row(intervals, "a")[2:4] == ["0.0 [0.0, 0.0]", "100.0 [100.0, 100.0]"]


@register
class MemoProbe(DenseTopK):
    """Records, as it observes each session, whether its embedder's memo already holds that session's texts (the
    harness embeds a session before timing its write) and whether it holds any text of a *later* session."""

    name = "test-memo-probe"

    def observe(self, session_id, nodes):
        memo = self.models.text_embedder._memo
        texts = self.embedding_texts(nodes)
        later = json.loads(Path(os.environ["C3M_TEST_PROBE"]).with_suffix(".later").read_text())
        row = {"session": session_id, "primed": all(t in memo for t in texts),
               "future": [t for t in later.get(session_id, []) if t in memo]}
        with open(os.environ["C3M_TEST_PROBE"], "a") as fh:
            fh.write(json.dumps(row) + "\n")
        return super().observe(session_id, nodes)


def test_each_session_is_embedded_before_its_timed_write_and_no_later_one_is(tmp_path, monkeypatch):
    """The method process embeds a session's turn texts before it times ``add_session`` (every method pays the
    same, outside its write time), and never a later session's: the memo holds nothing of the future."""
    from c3m.dataset import load_dataset
    from c3m.eval.synth import generate_dataset
    from c3m.methods.base import session_embedding_texts

    ds = generate_dataset(tmp_path / "d", length=4000, episodes=1, seed=3, progress=False, preset="hard",
                          split="dev")
    (h,) = load_dataset(ds)
    probe = tmp_path / "probe.jsonl"
    seen: set[str] = set()
    later = {}
    for k, s in enumerate(h.sessions):
        seen |= set(session_embedding_texts(s))
        rest = {t for s2 in h.sessions[k + 1:] for t in session_embedding_texts(s2)} - seen
        later[s.id] = sorted(rest)
    probe.with_suffix(".later").write_text(json.dumps(later))
    monkeypatch.setenv("C3M_TEST_PROBE", str(probe))
    res = run_eval([ds], ["test-memo-probe"], tmp_path / "out", config=CFG, progress=False)
    rows = [json.loads(line) for line in probe.read_text().splitlines()]
    assert rows[0]["session"] == "warm-up"  # the made-up session written to a scratch store before any timing
    rows = rows[1:]
    assert [r["session"] for r in rows] == [s.id for s in h.sessions]
    assert all(r["primed"] for r in rows) and not any(r["future"] for r in rows)
    (r,) = next(iter(res["test-memo-probe"].values()))
    assert r.shared_embed_seconds > 0 and len(r.write_seconds) == len(h.sessions)


def test_answer_metrics_tell_refusals_from_not_sure_and_score_the_span():
    """A span is scored, not the sentence around it; "not in memory" is a refusal, "not sure" only a decline; on AR
    declining is right; selective accuracy and refusal figures follow (c3m.eval.metrics, "answers")."""
    from types import SimpleNamespace as NS

    from c3m.eval.metrics import QuestionResult, aggregate, score_answer
    from c3m.eval.replay import HistoryResult
    from c3m.types import EvidenceRef, Question

    def q(cat, answer="blue", evidence=(("s1", 0),)):
        return Question("q", "What colour is my bike now?", answer, cat, None,
                        tuple(EvidenceRef(s, t) for s, t in evidence))

    def base(cat, oracle=1.0):
        return QuestionResult("ns", "q", cat, 1.0, oracle, oracle, 10, 0, 1, 1.0)

    def ans(text, span=None, declined=False, refused=False):
        return NS(text=text, span=span, declined=declined, refused=refused, confidence=0.5)

    right = score_answer(base("KU"), q("KU"), ans("blue (since 2026-04-02): I repainted it blue.", span="blue"))
    assert right.answer_f1 == 1.0 and right.answer_em == 1.0 and right.answer_correct == 1.0 and right.answered == 1
    quote = score_answer(base("KU"), q("KU"), ans("I repainted my bike blue last spring, it was red."))
    assert quote.answer_f1 < 0.5 and quote.answer_correct == 0.0  # a sentence is not the answer
    unsure = score_answer(base("KU"), q("KU"), ans("Not sure; the closest evidence: ...", declined=True))
    assert unsure.answered == 0 and unsure.unsure_with_evidence == 1 and unsure.declined_with_evidence == 0
    refusal = score_answer(base("AR", 0.0), q("AR", "", ()), ans("Not in memory.", declined=True, refused=True))
    assert refusal.answer_correct == 1.0 and refusal.refused_should == 1 and refusal.answered is None
    wrong_ar = score_answer(base("AR", 0.0), q("AR", "", ()), ans("It is red.", span="red"))
    assert wrong_ar.answer_correct == 0.0 and wrong_ar.refused_should == 0
    lexicon = score_answer(base("IE"), q("IE"), ans("I don't know."))  # an answerer that does not say: the lexicon
    assert lexicon.declined and lexicon.refused
    agg = aggregate([HistoryResult("h", "m", "1k", [right, quote, unsure, refusal, wrong_ar])], n_boot=10)
    o = agg["overall"]
    assert o["answered"]["mean"] == pytest.approx(2 / 3) and o["precision_answered"]["mean"] == 0.5
    assert o["refusal_recall"]["mean"] == 0.5 and o["refusal_precision"]["mean"] == 1.0
