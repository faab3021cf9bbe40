"""The C3M paper's Table-1 layout (``c3m.eval.table1``) from hand-built harness results."""
from __future__ import annotations

import json
import re
from dataclasses import asdict

from c3m.eval.harness import load_results
from c3m.eval.metrics import QuestionResult
from c3m.eval.replay import HistoryResult
from c3m.eval.table1 import (compute_aggregates, length_order, metric_table, paired_vs_strongest,
                             strongest_opponent, table1_markdown, write_table1)

CATS = ("IE", "MSR", "TR", "KU", "AR")


def _q(hid, i, cat, acc, route=None, evidence=None, raw=None):
    route = acc if route is None else route
    return QuestionResult(f"ns-{hid}", f"q{i}", cat, None if cat == "AR" else route,
                          None if cat == "AR" else acc, acc, 100, 1, 2, 5.0, image_tokens=50,
                          evidence_acc=evidence, raw_support_recall=None if cat == "AR" else raw)


def _history(method, length, hid, score, *, bounded=True, evidence=False, raw=True):
    """One history: two questions per category; ``score(cat, i)`` -> (oracle acc, route_hit). Raw-text Support
    Recall is half the caption-inclusive one (half the gold turns shown only as captions), None without ``raw``."""
    qs = []
    for c in CATS:
        for k in range(2):
            acc, route = score(c, k)
            qs.append(_q(hid, f"{c}{k}", c, acc, route, evidence=acc if evidence else None,
                         raw=acc / 2 if raw else None))
    return HistoryResult(hid, method, length, qs, write_seconds=[0.01, 0.02], bounded=bounded,
                         index_peak=[10, 2, 300, 4096])


def _results(evidence=False, raw=True):
    """c3m: perfect on IE/MSR/KU, loses TR (route 0 on one, 1 on the other); dense-topk: 0.5 everywhere,
    perfect TR; bm25 (unbounded): only 32k, perfect on AR."""
    hs = [f"h{i}" for i in range(6)]
    c3m = lambda c, k: ((0.0, float(k)) if c == "TR" else (1.0, 1.0))  # noqa: E731
    dense = lambda c, k: ((1.0, 1.0) if c == "TR" else (float(k), float(k)))  # noqa: E731
    bm25 = lambda c, k: ((1.0, 1.0) if c == "AR" else (0.0, 0.0))  # noqa: E731
    out = {"dense-topk": {}, "c3m": {}, "bm25": {}}
    for length in ("64k", "32k"):  # given out of order on purpose
        out["c3m"][length] = [_history("c3m", length, h, c3m, evidence=evidence, raw=raw) for h in hs]
        out["dense-topk"][length] = [_history("dense-topk", length, h, dense, bounded=False, evidence=evidence,
                                              raw=raw) for h in hs]
    out["bm25"]["32k"] = [_history("bm25", "32k", h, bm25, bounded=False, evidence=evidence, raw=raw)
                          for h in hs[:3]]
    return out


def _table(md: str, heading: str) -> list[list[str]]:
    block = md.split(f"## {heading}", 1)[1].split("\n\n", 2)[1]
    return [[c.strip() for c in row.strip("|").split("|")] for row in block.splitlines() if row.startswith("|")]


def test_length_order_puts_paper_lengths_first():
    assert length_order(["1k", "128k", "32k", "zz", "64k", "256k"]) == ["32k", "64k", "128k", "1k", "256k", "zz"]


def test_columns_order_bold_dash_and_unbounded_label():
    results = _results()
    aggs = compute_aggregates(results, n_boot=50)
    lines = metric_table(results, aggs, "oracle_reader_acc", "Oracle-reader accuracy")
    rows = [[c.strip() for c in r.strip("|").split("|")] for r in lines if r.startswith("|")]
    head, body = rows[0], rows[2:]
    assert head == ["Method"] + [f"{c} {n}" for c in (*CATS, "Overall") for n in ("32k", "64k")]
    by = {r[0]: dict(zip(head[1:], r[1:])) for r in body}
    assert list(by) == ["c3m", "dense-topk (unbounded)", "bm25 (unbounded)"]  # METHOD_NAMES order, labels
    assert by["c3m"]["IE 32k"] == "**100.0**" and by["dense-topk (unbounded)"]["IE 32k"] == "50.0"
    assert by["bm25 (unbounded)"]["IE 32k"] == "0.0"
    assert by["dense-topk (unbounded)"]["TR 64k"] == "**100.0**" and by["c3m"]["TR 64k"] == "0.0"
    assert by["bm25 (unbounded)"]["IE 64k"] == "–" and by["bm25 (unbounded)"]["Overall 64k"] == "–"
    # AR: bm25 and c3m tie at 100 on 32k: both bold; 64k: c3m 100 vs dense 50
    assert by["c3m"]["AR 32k"] == by["bm25 (unbounded)"]["AR 32k"] == "**100.0**"
    # c3m overall = (IE+MSR+KU perfect, TR 0) = 75; dense = (0.5*3 + 1)/4 = 62.5
    assert by["c3m"]["Overall 32k"] == "**75.0**" and by["dense-topk (unbounded)"]["Overall 32k"] == "62.5"
    # exactly one bold per column except the AR 32k tie
    for col in head[1:]:
        bold = [m for m in by if by[m][col].startswith("**")]
        assert len(bold) == (2 if col == "AR 32k" else 1), col
    assert any("Histories per method and length: c3m 32k 6, 64k 6; dense-topk 32k 6, 64k 6; bm25 32k 3" in x
               for x in lines)
    assert any("AR is reported on its own" in x for x in lines)


def test_strongest_opponent_per_cell_and_paired_table():
    results = _results()
    assert strongest_opponent(results, "c3m", "32k", "TR", "oracle_reader_acc") == "dense-topk"
    assert strongest_opponent(results, "c3m", "32k", "AR", "oracle_reader_acc") == "bm25"
    assert strongest_opponent(results, "c3m", "64k", "AR", "oracle_reader_acc") == "dense-topk"  # bm25 has no 64k
    assert strongest_opponent(results, "c3m", "32k", "IE", "oracle_reader_acc") == "dense-topk"
    paired = paired_vs_strongest(results, "c3m", "oracle_reader_acc", n_boot=200)
    opp, d = paired[("TR", "32k")]
    assert opp == "dense-topk" and d["mean"] == -1.0 and d["win"] == "B"
    opp, d = paired[("IE", "64k")]
    assert opp == "dense-topk" and d["mean"] == 0.5 and d["win"] == "A"
    opp, d = paired[("AR", "32k")]
    assert opp == "bm25" and d["mean"] == 0.0 and d["win"] is None and d["histories"] == 3

    md = table1_markdown(results, n_boot=50)
    rows = _table(md, "Oracle-reader accuracy: c3m − strongest other method (×100)".replace("## ", ""))
    cells = dict(zip(rows[0][1:], rows[2][1:]))
    assert cells["TR 32k"] == "−100.0 [−100.0, −100.0] vs dense-topk **B**"
    assert cells["AR 32k"].endswith("vs bm25") and "**" not in cells["AR 32k"]
    assert cells["IE 64k"].startswith("+50.0") and cells["IE 64k"].endswith("vs dense-topk **A**")


def test_losses_split_by_route_hit():
    md = table1_markdown(_results(), n_boot=50)
    section = md.split("## Where c3m loses", 1)[1]
    rows = [[c.strip() for c in r.strip("|").split("|")] for r in section.splitlines() if r.startswith("| oracle")]
    tr = {r[1]: r for r in rows}
    # per history c3m fails both TR questions: k=0 with route_hit 0 (routing), k=1 with route_hit 1 (selection)
    assert tr["TR 32k"][2] == "dense-topk" and tr["TR 32k"][4:8] == ["12", "6", "6", "0"]
    assert "Overall 32k" not in tr  # c3m wins overall


def test_raw_text_support_recall_is_the_headline_beside_caption_recall():
    md = table1_markdown(_results(), n_boot=50)
    heads = re.findall(r"^## (.+)$", md, re.M)
    assert heads[0].startswith("Raw-text Support Recall (") and "captions and crops do not count" in heads[0]
    assert heads[1].startswith("Support Recall incl. captions/crops (")
    # values come from each metric's own field: raw SR is half the caption-inclusive SR in these results
    raw, cap = (_table(md, h) for h in heads[:2])
    assert dict(zip(raw[0], raw[2]))["Overall 32k"] == "**37.5**"
    assert dict(zip(cap[0], cap[2]))["Overall 32k"] == "**75.0**"
    paired = re.findall(r"^### (.+): c3m − strongest other method", md, re.M)
    assert paired[:3] == ["Raw-text Support Recall", "Support Recall incl. captions/crops", "Oracle-reader accuracy"]
    first = _table(md, "Raw-text Support Recall: c3m − strongest other method (×100)")
    cells = dict(zip(first[0][1:], first[2][1:]))
    assert first[2][0] == "raw_support_recall" and cells["TR 32k"] == "−50.0 [−50.0, −50.0] vs dense-topk **B**"


def test_resources_and_violations_per_length():
    md = table1_markdown(_results(), n_boot=50)
    res = md.split("## Resources per length", 1)[1]
    t32 = res.split("### 32k", 1)[1].split("###", 1)[0]
    rows = [[c.strip() for c in r.strip("|").split("|")] for r in t32.splitlines() if r.startswith("|")]
    by = {r[0]: r for r in rows[2:]}
    assert set(by) == {"c3m", "dense-topk", "bm25"}
    assert by["c3m"][1] == "yes" and by["bm25"][1] == "no (unbounded)"
    assert by["c3m"][2] == "150 (100 + 50)" and by["c3m"][3] == "1.00"
    assert by["c3m"][4] == "5.0/5.0" and by["c3m"][5] == "15.0/20.0" and by["c3m"][6] == "10 / 2 / 300 / 4.0"
    assert by["c3m"][7] == "0" and by["c3m"][8] == "0"
    assert "bm25" not in res.split("### 64k", 1)[1].split("\n## ", 1)[0]


def test_optional_metrics_only_when_present_and_judged_label():
    md = table1_markdown(_results(), n_boot=20)
    assert "Evidence-check accuracy" not in md and "Judged answer accuracy" not in md
    assert "## Oracle-reader accuracy" in md and "## Support Recall incl. captions/crops" in md
    assert "## Raw-text Support Recall" in md
    md = table1_markdown(_results(raw=False), n_boot=20)  # results written before raw SR existed
    assert "Raw-text Support Recall" not in md and "## Support Recall incl. captions/crops" in md
    md = table1_markdown(_results(evidence=True), n_boot=20)
    assert "## Evidence-check accuracy" in md
    results = _results()
    results["c3m"]["32k"][0].questions[0] = QuestionResult("ns", "q", "IE", 1.0, 1.0, 1.0, 1, 0, 1, 1.0,
                                                           judged_acc=1.0)
    md = table1_markdown(results, n_boot=20, judged_label="answerer extractive, judge em")
    assert "## Judged answer accuracy" in md and "Judged by: answerer extractive, judge em." in md


def test_old_results_without_evidence_acc_load_and_write(tmp_path):
    results = _results()
    for method, by_len in results.items():
        for length, res in by_len.items():
            path = tmp_path / "results" / method / f"{length}.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            rows = []
            for r in res:
                d = asdict(r)
                for q in d["questions"]:
                    q.pop("evidence_acc")  # written before the metric existed
                rows.append(json.dumps(d))
            path.write_text("\n".join(rows) + "\n")
    loaded = load_results(tmp_path)
    assert set(loaded) == {"c3m", "dense-topk", "bm25"} and len(loaded["c3m"]["32k"]) == 6
    path = write_table1(loaded, tmp_path / "table1.md", n_boot=20)
    md = path.read_text()
    assert "Evidence-check" not in md and "## Where c3m loses" in md
    assert re.search(r"\| c3m \| \*\*100\.0\*\* \| \*\*100\.0\*\* \|", md)


def test_no_reference_and_no_results():
    results = _results()
    del results["c3m"]
    md = table1_markdown(results, n_boot=20)
    assert "no results for the reference method 'c3m'" in md
    assert "No results." in table1_markdown({}, n_boot=20)
