"""The command line end to end: demo, validate, ingest, ask, inspect, verify, forget, eval, errors."""
from __future__ import annotations

import json

import pytest

from c3m.cli import main
from c3m.dataset import write_dataset
from c3m.demo import demo_history


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("ds") / "demo"
    write_dataset([demo_history()], root)
    return root


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_demo_prints_answers_with_provenance(tmp_path, capsys):
    code, out, _ = run(capsys, "demo", "--store", tmp_path / "s", "--text-embedder", "hashing")
    assert code == 0
    assert out.count("Q: ") == 6 and out.count("A: ") == 6
    assert "session s4 turn 0" in out and "budget: pages" in out and "verify: OK" in out


def test_ingest_ask_inspect_verify_forget(dataset, tmp_path, capsys):
    store = tmp_path / "s"
    common = ["--store", store, "--text-embedder", "hashing"]
    code, out, _ = run(capsys, "ingest", dataset, *common, "--quiet")
    assert code == 0 and "6 new sessions" in out
    code, out, _ = run(capsys, "ingest", dataset, *common, "--quiet")
    assert code == 0 and "0 new sessions (6 already stored)" in out

    code, out, _ = run(capsys, "ask", "Which shop is under the McDonald's sign?", "-n", "demo-user", *common,
                       "--json", "--budget", "raw_nodes=3,text_tokens=200")
    data = json.loads(out)
    assert code == 0 and "WEGO" in data["answer"]
    assert data["use"]["raw_nodes"] <= 3 and data["use"]["text_tokens"] <= 200
    assert all({"session_id", "turn_index", "time"} <= set(i["provenance"]) for i in data["items"])

    code, out, _ = run(capsys, "inspect", "--store", store)
    assert code == 0 and "demo-user: 6 sessions, 12 Raw Nodes, 5 images" in out
    code, out, _ = run(capsys, "inspect", "-n", "demo-user", *common, "--version", 2)
    assert code == 0 and "snapshot after session s2 (v2): 4 Raw-Node pointers" in out

    code, out, _ = run(capsys, "verify", "--store", store)
    assert code == 0 and "verify: OK" in out
    code, out, _ = run(capsys, "forget", "-n", "demo-user", "--session", "s5", "--reason", "test", *common)
    assert code == 0 and "redacted 2 Raw Node(s)" in out
    code, out, _ = run(capsys, "ask", "Which shop is under the McDonald's sign?", "-n", "demo-user", *common)
    assert "WEGO" not in out

    blob = next((store / "blobs").glob("??/*"))
    blob.write_bytes(b"corrupted")
    code, out, _ = run(capsys, "verify", "--store", store)
    assert code == 1 and "FAILED" in out


def test_eval_reports_per_category(dataset, tmp_path, capsys):
    code, out, _ = run(capsys, "eval", "--dataset", dataset, "--text-embedder", "hashing", "--json",
                       "--out", tmp_path / "ev")
    data = json.loads(out)
    from c3m.config import DEFAULT_METHOD

    (length, table), = data[DEFAULT_METHOD].items()
    assert code == 0 and set(table) == {"IE", "MSR", "TR", "KU", "AR", "overall"}
    assert table["AR"]["support_recall"]["mean"] is None and table["AR"]["oracle_reader_acc"]["n"] == 1
    assert 0.0 <= table["overall"]["support_recall"]["mean"] <= 1.0
    assert (tmp_path / "ev" / "report.md").is_file() and (tmp_path / "ev" / "metrics.json").is_file()
    assert "| Method | IE " in (tmp_path / "ev" / "table1.md").read_text()
    # the table regenerated from the folder, without rerunning
    code, out, _ = run(capsys, "table1", tmp_path / "ev", "--reference", DEFAULT_METHOD, "--out", tmp_path / "t.md")
    assert code == 0 and "t.md" in out and "## Resources per length" in (tmp_path / "t.md").read_text()
    code, _, err = run(capsys, "table1", tmp_path / "empty")
    assert code == 2 and "no results" in err


def test_errors_name_the_fix(tmp_path, capsys):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "episodes.jsonl").write_text('{"id": "h1", "sessions": [{"id": "s1", "time": "yesterday", '
                                        '"turns": [{"role": "robot", "text": "hi"}]}]}\n')
    code, out, err = run(capsys, "validate", bad)
    assert code == 2 and "time" in err and "role" in err and "2 problem(s)" in out
    code, _, err = run(capsys, "ingest", bad, "--store", tmp_path / "s")
    assert code == 2 and "nothing was ingested" in err and not (tmp_path / "s").exists()
    code, _, err = run(capsys, "ask", "q?", "--store", tmp_path / "s2", "--method", "no-such-method")
    assert code == 2 and "fix:" in err
    code, _, err = run(capsys, "verify", "--store", tmp_path / "missing")
    assert code == 2 and "no c3m store" in err
    code, _, err = run(capsys, "ask", "q?", "--store", tmp_path / "s3", "--budget", "tokens=5")
    assert code == 2 and "--budget" in err


def test_help_explains_every_command(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for cmd in ("demo", "validate", "ingest", "ask", "inspect", "verify", "forget", "methods", "eval", "table1"):
        assert cmd in out


def test_methods_lists_every_method_with_budget_reads_and_paper(capsys):
    from c3m.methods import METHOD_NAMES, available_methods, method_class

    code, out, _ = run(capsys, "methods")
    assert code == 0 and all(len(line) <= 100 for line in out.splitlines())
    lines = {line.split()[0]: line for line in out.splitlines()[1:] if line.startswith("  ")}
    for name in {*METHOD_NAMES, *available_methods()}:
        assert name in lines
        word = ("planned" if name not in available_methods() else
                "bounded" if method_class(name).bounded else "unbounded")
        assert lines[name].split()[1] == word
    code, out, _ = run(capsys, "methods", "--json")
    rows = {r["name"]: r for r in json.loads(out)}
    assert rows["c3m"]["status"] == "bounded" and rows["c3m"]["reads"]


def test_methods_all_expands_in_registry_order():
    from c3m.cli import expand_methods
    from c3m.methods import METHOD_NAMES, available_methods

    have = available_methods()
    every = [n for n in METHOD_NAMES if n in have] + [n for n in have if n not in METHOD_NAMES]
    assert expand_methods(["all"]) == every
    assert expand_methods(["bm25", "all", "c3m:expansion=false"]) == (
        ["bm25"] + [n for n in every if n != "bm25"] + ["c3m:expansion=false"])
    assert expand_methods(None) is None and expand_methods(["c3m"]) == ["c3m"]


def test_convert_then_eval_a_public_format(tmp_path, capsys):
    from pathlib import Path

    src = Path(__file__).parent / "fixtures" / "loaders" / "longmemeval.json"
    code, out, _ = run(capsys, "convert", "longmemeval", src, tmp_path / "lme", "--json")
    assert code == 0 and json.loads(out)["histories"] == 2
    code, out, _ = run(capsys, "validate", tmp_path / "lme")
    assert code == 0
    code, out, _ = run(capsys, "eval", "--dataset", tmp_path / "lme", "--text-embedder", "hashing", "--out",
                       tmp_path / "ev", "--json")
    assert code == 0 and "c3m" in json.loads(out)  # the default method


def test_synth_then_eval(tmp_path, capsys):
    code, out, _ = run(capsys, "synth", tmp_path / "syn", "--length", "3000", "--episodes", "2", "--seed", "1",
                       "--quiet", "--json")
    assert code == 0 and json.loads(out)["episodes"] == 2
    code, out, _ = run(capsys, "validate", tmp_path / "syn")
    assert code == 0
    code, out, _ = run(capsys, "eval", "--dataset", tmp_path / "syn", "--text-embedder", "hashing", "--out",
                       tmp_path / "ev", "--json")
    metrics = json.loads(out)["c3m"]  # the default method
    assert code == 0 and list(metrics) == ["3k"]
    assert set(metrics["3k"]) == {"IE", "MSR", "TR", "KU", "AR", "overall"}


def test_eval_console_shows_judged_accuracy(dataset, tmp_path, capsys):
    """With --judge the console table has judged accuracy beside the evidence-only columns (not only report.md)."""
    code, out, _ = run(capsys, "eval", "--dataset", dataset, "--text-embedder", "hashing", "--judge", "contains",
                       "--out", tmp_path / "ev", "--methods", "dense-topk")
    header = next(line for line in out.splitlines() if line.startswith("method"))
    assert code == 0 and header.split()[3] == "judged_acc"
    row = next(line for line in out.splitlines() if line.startswith("dense-topk") and " overall " in line)
    assert 0.0 <= float(row.split()[3]) <= 1.0
    code, out, _ = run(capsys, "eval", "--dataset", dataset, "--text-embedder", "hashing", "--out", tmp_path / "ev2",
                       "--methods", "dense-topk")
    assert "judged_acc" not in out


def test_ingest_of_several_histories_with_perception_shares_one_store(tmp_path, capsys):
    """Every history goes through one store connection: the perception cache of the first history's store used to
    be closed under the second one ('Cannot operate on a closed database')."""
    from c3m.eval.synth import generate_dataset

    ds = generate_dataset(tmp_path / "ds", length=2000, episodes=2, seed=3, progress=False)
    store = tmp_path / "s"
    code, out, err = run(capsys, "ingest", ds, "--store", store, "--text-embedder", "hashing",
                         "--perception", f"oracle:{ds}", "--quiet")
    assert code == 0, err
    assert "ingested 2 histories into 2 namespace(s)" in out
    from c3m.store import ColdStore

    s = ColdStore(store, create=False)
    try:
        with_images = [n.node_id for ns in s.namespaces() for n in s.iter_nodes(ns) if n.images]
        assert with_images and s.perceptions(with_images)  # both histories' images were perceived
    finally:
        s.close()
