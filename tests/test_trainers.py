"""The trainers in ``training/`` run where they say (issue #35): ``--help`` lists every option, the device rule,
seeds set before any data (one seed: identical weights; another: different), outputs in a run folder (the shipped
weights change only with ``--ship``), and a two-process Gloo ``torchrun`` smoke run of the relation head and of
the selector (both ranks ran, one writer, the single-process weights)."""
from __future__ import annotations

import hashlib
import importlib
import json
import os
import socket
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[1]
TRAINING = ROOT / "training"
sys.path.insert(0, str(TRAINING))
import runkit  # noqa: E402

TRAINERS = ("train_relation_head", "train_selector_ppo", "train_image_encoder", "train_reranker")
TORCH_TRAINERS = TRAINERS[:3]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """In-process runs on one torch thread (as each torchrun rank), restored afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def trainer(name: str):
    return importlib.import_module(name)


def _sha(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None


# -- --help --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", TRAINERS)
def test_help_lists_every_option_with_its_default(name, capsys):
    mod = trainer(name)
    with pytest.raises(SystemExit) as done:
        mod.parse_args(["--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith(f"usage: python training/{name}.py")
    for f in fields(mod.Args):
        assert f"--{f.name.replace('_', '-')}" in text, f.name
        assert f.metadata.get("help"), f"{name}: --{f.name} has no help text"
    assert text.count("(default:") >= len(fields(mod.Args))
    assert ("\n  --device" in text) == (name in TORCH_TRAINERS)  # the reranker is LightGBM: its docstring says why
    assert "--ship" in text and "c3m/models/weights/" in text


def test_help_from_the_command_line():
    """The two trainers whose hand-written parsers answered "unknown argument help"."""
    procs = [subprocess.Popen([sys.executable, str(TRAINING / f"{n}.py"), "--help"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, cwd=ROOT, env=ENV)
             for n in ("train_selector_ppo", "train_image_encoder")]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err[-2000:]
        assert "usage:" in out and "--device" in out and "--smoke" in out


def test_flags_take_dashes_underscores_and_bare_booleans():
    ppo = trainer("train_selector_ppo")
    a = ppo.parse_args(["--toy", "--rescale=false", "--batch_size=8", "--max-grad-norm", "0.5"])
    assert a.toy is True and a.rescale is False and a.batch_size == 8 and a.max_grad_norm == 0.5
    assert ppo.parse_args(["--ship=c3m/models/weights/selector_ppo.pt"]).ship is True  # the older spelling
    with pytest.raises(SystemExit):
        ppo.parse_args(["--ship=/tmp/elsewhere.pt"])
    with pytest.raises(SystemExit):
        ppo.parse_args(["--no-such-flag"])
    # the deepspeed launcher appends --local_rank=N
    assert trainer("train_relation_head").parse_args(["--local_rank=0", "--smoke"]).smoke


# -- the device rule -----------------------------------------------------------------------------------------
def test_device_rule(monkeypatch):
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(var, raising=False)
    if not torch.cuda.is_available():
        assert runkit.resolve_device("auto") == torch.device("cpu")
        with pytest.raises(SystemExit, match="--device cpu"):
            runkit.resolve_device("cuda")
    assert runkit.resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(SystemExit, match="auto, cpu, cuda or cuda:N"):
        runkit.resolve_device("gpu")
    # a machine with 4 GPUs, rank 1 of 2 under torchrun: every CUDA choice is cuda:$LOCAL_RANK
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: None)
    assert runkit.resolve_device("auto") == torch.device("cuda", 0)
    assert runkit.resolve_device("cuda:3") == torch.device("cuda", 3)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert runkit.resolve_device("auto") == runkit.resolve_device("cuda") == torch.device("cuda", 1)
    assert runkit.resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(SystemExit, match="LOCAL_RANK"):
        runkit.resolve_device("cuda:0")


# -- seeds: one seed, identical weights ------------------------------------------------------------------------
def _relation_head(out: Path, *extra) -> dict:
    mod = trainer("train_relation_head")
    mod.train(mod.parse_args(["--smoke", "--device", "cpu", "--quiet", "--out", str(out), *extra]))
    return dict(np.load(out / "relation_mlp.npz"))


def _selector(out: Path, *extra) -> dict:
    trainer("train_selector_ppo").main(["--smoke", "--device", "cpu", "--out", str(out), *extra])
    return torch.load(out / "selector.pt", weights_only=True)["state_dict"]


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    """Seed-0 smoke runs in this process: the reference for determinism and for the two-process runs."""
    root = tmp_path_factory.mktemp("single")
    return {"relation_head": _relation_head(root / "rh"), "selector": _selector(root / "ppo"), "root": root}


def test_relation_head_same_seed_same_weights(single, tmp_path):
    a, again, other = single["relation_head"], _relation_head(tmp_path / "b"), _relation_head(tmp_path / "c",
                                                                                              "--seed", "1")
    assert a.keys() == again.keys()
    for k in a:
        if a[k].dtype.kind in "fiu":
            assert np.array_equal(a[k], again[k]), k
    assert not np.array_equal(a["W0"], other["W0"])


def test_selector_same_seed_same_weights(single, tmp_path):
    a, again, other = single["selector"], _selector(tmp_path / "b"), _selector(tmp_path / "c", "--seed", "1")
    assert all(torch.equal(a[k], again[k]) for k in a)
    assert not all(torch.equal(a[k], other[k]) for k in a)


def test_smoke_runs_write_weights_and_a_summary(single):
    for sub, trainer_name, weights in (("rh", "relation-head", "relation_mlp.npz"),
                                       ("ppo", "selector-ppo", "selector.pt")):
        s = json.loads((single["root"] / sub / "summary.json").read_text())
        assert s["trainer"] == trainer_name and s["device"] == "cpu" and s["world_size"] == 1
        assert s["backend"] is None and s["seconds"] > 0 and np.isfinite(s["final_loss"])
        assert Path(s["weights"]) == single["root"] / sub / weights and s.get("shipped") is None


# -- outputs: a run folder, the shipped weights only with --ship ----------------------------------------------
def test_default_out_is_a_run_folder_never_the_shipped_weights(monkeypatch, tmp_path):
    from c3m.models.relation_head import SHIPPED_MLP
    from c3m.read.compose import PPO_WEIGHTS

    assert runkit.RUNS == ROOT / "runs" and "runs/" in (ROOT / ".gitignore").read_text().split()
    for name in TRAINERS:
        assert trainer(name).Args().out == "" and trainer(name).Args().ship is False, name
    before = {p: _sha(p) for p in (SHIPPED_MLP, PPO_WEIGHTS)}
    monkeypatch.setattr(runkit, "RUNS", tmp_path / "runs")  # where "runs/" is, for this test only
    mod = trainer("train_relation_head")
    mod.train(mod.parse_args(["--smoke", "--device", "cpu", "--quiet"]))
    trainer("train_selector_ppo").main(["--smoke", "--device", "cpu"])
    made = sorted(p.relative_to(tmp_path / "runs").as_posix() for p in (tmp_path / "runs").rglob("*.*")
                  if p.suffix in (".npz", ".pt") and p.name != "checkpoint.pt")
    assert [m.split("/")[1] for m in made] == ["relation_mlp.npz", "selector.pt"], made
    assert made[0].startswith("relation-head-") and made[1].startswith("selector-ppo-")
    assert {p: _sha(p) for p in before} == before
    # --ship: the run folder keeps its copy and the shipped path gets the same bytes
    monkeypatch.setattr(mod, "SHIPPED_MLP", tmp_path / "shipped" / "relation_mlp.npz")
    monkeypatch.setattr(mod, "CARD", tmp_path / "shipped" / "RELATION_HEAD_CARD.md")
    res = mod.train(mod.parse_args(["--smoke", "--device", "cpu", "--quiet", "--ship", "--out", str(tmp_path / "s")]))
    assert res["shipped"] == str(tmp_path / "shipped" / "relation_mlp.npz")
    assert _sha(tmp_path / "s" / "relation_mlp.npz") == _sha(tmp_path / "shipped" / "relation_mlp.npz")
    assert (tmp_path / "shipped" / "RELATION_HEAD_CARD.md").is_file()


# -- two processes, Gloo -----------------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun(script: str, out: Path) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
           "--master_port", str(_free_port()), str(TRAINING / script), "--smoke", "--device", "cpu", "--out", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT, env=ENV)
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-3000:])
    return r


def _two_ranks_one_writer(r, out: Path, weights: str, work: str) -> dict:
    s = json.loads((out / "summary.json").read_text())
    assert s["world_size"] == 2 and s["backend"] == "gloo" and s["device"] == "cpu"
    assert [x["rank"] for x in s["ranks"]] == [0, 1] and len({x["pid"] for x in s["ranks"]}) == 2
    assert all(x[work] > 0 for x in s["ranks"]), s["ranks"]          # both ranks did their share
    assert r.stdout.count(f"wrote {out / weights}") == 1             # rank 0 alone writes
    names = {p.name for p in out.iterdir()} - {"learning_curve.png"}
    assert names == {weights, "summary.json", "checkpoint.pt", "metrics.csv"}, names
    return s


def test_relation_head_torchrun_two_gloo_ranks(single, tmp_path):
    out = tmp_path / "two"
    _two_ranks_one_writer(_torchrun("train_relation_head.py", out), out, "relation_mlp.npz", "train_rows")
    two, one = np.load(out / "relation_mlp.npz"), single["relation_head"]
    for k in ("W0", "b0", "W1", "W2"):  # each global batch is split over the ranks: the one-process steps
        np.testing.assert_allclose(two[k], one[k], atol=1e-5)


def test_selector_torchrun_two_gloo_ranks(single, tmp_path):
    out = tmp_path / "two"
    _two_ranks_one_writer(_torchrun("train_selector_ppo.py", out), out, "selector.pt", "questions")
    two, one = torch.load(out / "selector.pt", weights_only=True)["state_dict"], single["selector"]
    for k in one:  # the global batch, its noise and the minibatch order are shared; gradients all-reduced
        assert torch.allclose(two[k], one[k], atol=1e-5, rtol=0), k
