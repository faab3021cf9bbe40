"""The PPO evidence selector (``training/train_selector_ppo.py``) and its quality signal, the perception-aware
evidence check (``c3m.eval.evidence``): the check on a hand-made scene, the vectorised environment's
difference reward, PPO's convergence on a toy bandit with a known optimum, a smoke run of the script (train,
checkpoint/resume, evaluation with the real ``compose``), the shipped-weights name, and (slow) torchrun
2-process == 1-process."""
from __future__ import annotations

import hashlib
import os
import pickle
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest

from c3m.errors import InvalidInput
from c3m.eval.evidence import (CROP_COVER, HiddenGold, SupportItem, box_cover, candidate_coverage, check_context,
                               satisfies, text_shows)
from c3m.models import ApproxTokenCounter, HashingEmbedder
from c3m.read.compose import Candidate, ComposeConfig, MLPSelector, compose, is_selector_name, make_selector
from c3m.types import ImagePerception, ImageRef, Provenance, RawNode, ReaderBudget, RouteTrace, node_id_for

torch = pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "training" / "train_selector_ppo.py"
sys.path.insert(0, str(ROOT / "training"))
import train_selector_ppo as ppo  # noqa: E402

NS = "u"
EMB = HashingEmbedder(32)
COUNT = ApproxTokenCounter().count


def img(tag: str, w: int = 256, h: int = 192) -> ImageRef:
    return ImageRef(hashlib.sha256(tag.encode()).hexdigest(), "image/png", w, h, 100)


def node(session: str, turn: int, text: str, images=()) -> RawNode:
    return RawNode(node_id_for(NS, session, turn), Provenance(NS, session, turn, datetime(2026, 3, 1)), "user", text,
                   tuple(images))


# a hand-made scene: a mug (entity e1, teal, ceramic) with two spoons on its left, and a book in the corner
PHOTO = img("photo")
SCENE = {"image": "images/x.png", "objects": [
    {"entity": None, "name": "wall", "type": "wall", "bbox": [0, 0, 256, 130], "attributes": {"colour": "gold"}},
    {"entity": "e1", "name": "mug", "type": "mug", "bbox": [100, 60, 160, 120],
     "attributes": {"colour": "teal", "material": "ceramic"}},
    {"entity": "e1", "name": "spoons", "type": "accessory", "bbox": [70, 90, 95, 120],
     "attributes": {"count": 2, "side": "left"}},
    {"entity": "e2", "name": "book", "type": "book", "bbox": [200, 140, 250, 190], "attributes": {"colour": "red"}}]}
COLOUR = SupportItem("s1", 0, "e1", "colour", "teal", "image")
SPOONS = SupportItem("s1", 0, "e1", "accessory", (("count", 2), ("item", "spoons"), ("side", "left")), "image")
KIND = SupportItem("s1", 0, "e1", "kind", "mug", "text")


class Gold:
    scenes = {PHOTO.sha256: SCENE}

    def scenes_of(self, images):
        return [self.scenes[im.sha256] for im in images if im.sha256 in self.scenes]


def photo_memory(caption="A gold wall and a cup.", crop_box=(95, 55, 165, 125), phrase="mug"):
    n = node("s1", 0, "Here is my new mug, on the shelf.", (PHOTO,))
    crop = img("crop")
    rec = ImagePerception(n.node_id, PHOTO, "fake", "1", caption, (), crop, crop_box, phrase)
    return Candidate(n.node_id, (n,), 0.8, perceptions={n.node_id: [rec]})


# -- the evidence check ------------------------------------------------------------------------------------
def test_text_forms_need_the_value_on_word_boundaries():
    assert text_shows("teal", "A Teal mug.") and not text_shows("teal", "a steal of a mug")
    assert text_shows(2, "I have two of them") and text_shows(2, "2 spoons")
    assert text_shows(SPOONS.value, "two spoons on the left") and not text_shows(SPOONS.value, "a spoon")
    assert satisfies(KIND, "raw_text", session="s1", turn=0, text="my new mug")
    assert not satisfies(KIND, "raw_text", session="s1", turn=1, text="my new mug"), "another turn never counts"
    # a caption that lacks the detail does not count; one that has it does
    assert not satisfies(COLOUR, "caption", session="s1", turn=0, text="[image: a gold wall and a cup]")
    assert satisfies(COLOUR, "caption", session="s1", turn=0, text="[image: a teal mug]")


def test_raw_image_needs_the_entity_to_carry_the_value():
    where = dict(session="s1", turn=0, scenes=[SCENE])
    assert satisfies(COLOUR, "raw_image", **where) and satisfies(SPOONS, "raw_image", **where)
    assert not satisfies(SupportItem("s1", 0, "e1", "colour", "red"), "raw_image", **where), "red is the book's"
    assert not satisfies(SupportItem("s1", 0, "e1", "accessory", (("count", 3), ("item", "spoons"))),
                         "raw_image", **where), "wrong count"
    assert not satisfies(COLOUR, "raw_image", session="s1", turn=0, scenes=[])


def test_grounded_crop_must_cover_the_object():
    assert box_cover((0, 0, 10, 10), (5, 0, 15, 10)) == pytest.approx(0.5)
    where = dict(session="s1", turn=0, scenes=[SCENE])
    assert satisfies(COLOUR, "grounded_crop", crop_box=(100, 60, 160, 120), **where)
    assert satisfies(COLOUR, "grounded_crop", crop_box=(130, 60, 200, 120), **where)  # exactly half the mug
    assert not satisfies(COLOUR, "grounded_crop", crop_box=(131, 60, 200, 120), **where)  # under CROP_COVER
    assert CROP_COVER == 0.5
    assert not satisfies(SPOONS, "grounded_crop", crop_box=(100, 60, 160, 120), **where), "the spoons are outside"


def test_coverage_matrix_and_check_on_a_composed_context():
    c = photo_memory()
    cov = candidate_coverage(c, [COLOUR, SPOONS, KIND], Gold())
    # rows: raw_text, summary, caption, raw_image, grounded_crop; columns: colour, spoons, kind
    assert cov.tolist() == [[False, False, True], [False, False, False], [False, False, False],
                            [True, True, True], [True, False, True]]
    vec = lambda nodes: EMB.embed([n.text for n in nodes]).astype(np.float32)  # noqa: E731
    budget = ReaderBudget(3, 10, 10, 10_000)
    crops = {r.crop.sha256: (r.image.sha256, r.crop_box) for r in c.perceptions[c.nodes[0].node_id]}

    class Only:
        name = "only"

        def __init__(self, forms):
            self.forms = forms

        def probabilities(self, q, qv, cands):
            return np.tile(np.array(self.forms, float), (len(cands), 1))

    def check(forms):
        ctx = compose("What colour is my mug?", vec([c.nodes[0]])[0], [c], budget, ComposeConfig(),
                      selector=Only(forms), vectors=vec, count=COUNT, trace=RouteTrace("t"))
        return check_context(ctx, [COLOUR, SPOONS], Gold(), crops)

    assert check([1, 0, 1, 0, 0]).share == 0.0          # text + a caption without the colour
    r = check([0, 0, 0, 0, 1])                            # the crop shows the mug, not the spoons
    assert r.satisfied == (True, False) and r.all == 0.0
    assert check([0, 0, 0, 1, 0]).all == 1.0             # the photo shows both
    assert check_context(None, [], Gold()).share is None  # nothing to check


def test_hidden_gold_keys_scenes_by_image_sha(tmp_path):
    (tmp_path / "_hidden").mkdir()
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "x.png").write_bytes(b"png-bytes")
    (tmp_path / "_hidden" / "scenes.jsonl").write_text(__import__("json").dumps(SCENE) + "\n")
    (tmp_path / "_hidden" / "questions.jsonl").write_text(__import__("json").dumps(
        {"history": "h", "id": "q1", "support": [{"session": "s1", "turn": 0, "entity": "e1", "attribute": "colour",
                                                  "value": "teal", "modality": "image"}]}) + "\n")
    g = HiddenGold(tmp_path)
    assert list(g.scenes) == [hashlib.sha256(b"png-bytes").hexdigest()]
    assert g.items("h", "q1") == (SupportItem("s1", 0, "e1", "colour", "teal", "image"),)


# -- the environment and PPO -------------------------------------------------------------------------------
def test_difference_reward_credits_only_sole_covers():
    d = ppo.toy_pools(4, seed=0)
    a = d["optimum"].clone()
    res = ppo.env_step(d, a)
    assert torch.allclose(res["quality"], torch.ones(4)) and torch.allclose(res["diff"].sum(1), torch.ones(4))
    # showing the raw image *and* the crop of an image memory: still one cover, twice the cost
    both = a.clone()
    both[..., 3] = d["kind"] == 2
    res2 = ppo.env_step(d, both)
    assert torch.equal(res2["diff"], res["diff"]) and (res2["cost"] >= res["cost"]).all()
    assert (res2["cost"] > res["cost"]).any()
    # two memories covering the same item: neither is the sole cover, so neither gets credit
    d2 = {k: (v.clone() if torch.is_tensor(v) else v) for k, v in d.items()}
    i = 0
    j_ev = int((d2["kind"][i] > 0).nonzero()[0])
    j_other = int((d2["kind"][i] == 0).nonzero()[0])
    d2["cov"][i, j_other, 0] = d2["cov"][i, j_ev, [0, 4]].any(0)
    a2 = a.clone()
    a2[i, j_other, 0] = True
    res3 = ppo.env_step(d2, a2)
    assert res3["diff"][i, j_ev] == 0 and res3["diff"][i, j_other] == 0 and res3["quality"][i] == 1


def test_env_respects_the_raw_node_budget_in_retrieval_order():
    d = ppo.toy_pools(2, seed=1)
    d["budget"][:, 1] = 2  # two Raw-Node slots
    a = torch.zeros_like(d["avail"])
    a[..., 0] = True
    res = ppo.env_step(d, a)
    assert res["a"][..., 0].sum(1).tolist() == [2, 2] and res["a"][:, :2, 0].all()


def test_log_every_prints_a_line_every_n_iterations(tmp_path, capsys):
    args = ppo.parse_args(["--toy", "--iterations=5", "--log_every=2", "--batch_size=16", "--hidden=8",
                           f"--out={tmp_path}", "--progress=false", "--threads=1", "--toy_questions=32"])
    ppo.train(args)
    logged = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("iteration ")]
    assert [ln.split(":")[0] for ln in logged] == ["iteration 2/5", "iteration 4/5", "iteration 5/5"]


def test_ppo_reaches_the_toy_bandits_known_optimum(tmp_path):
    """λ=1 with cost/1000: a sole cover is worth 0.5, so text evidence -> raw text (0.05), image evidence ->
    the crop (0.1, cheaper than the raw image's 0.3 and the only other cover), irrelevant -> nothing."""
    args = ppo.parse_args(["--toy", "--rescale=false", "--lam=1", "--iterations=40", "--epochs=2", "--minibatches=2", "--lr=3e-3",
                           f"--out={tmp_path}",
                           "--progress=false", "--hidden=32", "--threads=1"])
    sel = ppo.train(args)
    held_out = ppo.toy_pools(512, seed=7)
    with torch.no_grad():
        greedy = torch.sigmoid(sel.logits(held_out["x"])) > 0.5
    match = (greedy == held_out["optimum"]).all(-1).float().mean().item()
    assert match >= 0.98, match
    untrained = MLPSelector(8, 32, seed=0, version="v2")
    with torch.no_grad():
        base = (torch.sigmoid(untrained.logits(held_out["x"])) > 0.5) == held_out["optimum"]
    assert base.all(-1).float().mean().item() < 0.5, "the test can fail: an untrained policy is far from it"


def test_cost_scaler_clips_and_rescales():
    s = ppo.CostScaler(window=3)
    cost = torch.tensor([[0.0, 10, 20, 1000]])
    diff = torch.tensor([[0.0, 0.5, 0.0, 0.5]])
    out = s(cost, diff, torch.ones(1, 4, dtype=torch.bool))
    lo, hi = torch.quantile(cost[0], 0.05).item(), torch.quantile(cost[0], 0.95).item()
    clipped = cost.clamp(lo, hi)
    assert torch.allclose(out, clipped * (diff.std() / clipped.std()))
    assert ppo.CostScaler(3, rescale=False)(cost, diff, torch.ones(1, 4, dtype=torch.bool)).max() == 1.0


# -- the script, end to end on a tiny pool -------------------------------------------------------------------
def tiny_pool(path: Path, n: int = 6) -> None:
    records = []
    for i in range(n):
        c = photo_memory()
        other = node("s2", i, f"I moved the lamp to room {i}.")
        cands = [c, Candidate(other.node_id, (other,), 0.3)]
        nodes = [x.nodes[0] for x in cands]
        vecs = dict(zip([x.node_id for x in nodes], EMB.embed([x.text for x in nodes]).astype(np.float32)))
        q = "What colour is my mug?"
        records.append(ppo.make_record(q, EMB.embed([q])[0].astype(np.float32), cands, vecs, [COLOUR],
                                       {PHOTO.sha256: SCENE}, [("s1", 0)], COUNT, history=f"h{i % 2}", qid=f"q{i}",
                                       category="IE", visual_only=True, budget=(3, 12, 8, 12288)))
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as fh:
        pickle.dump({"meta": {"token_counter": "approx", "quality": ppo.QUALITY}, "records": records}, fh)


def _run(*argv, env=None):
    return subprocess.run([sys.executable, str(SCRIPT), *argv], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}, cwd=ROOT)


def test_smoke_train_resume_and_eval(tmp_path, capsys):
    """The script as a command (one subprocess: train + the real-compose evaluation), then resume and the
    eval mode in-process (importing torch twice more would triple the test's time)."""
    tiny_pool(tmp_path / "pools" / "tiny.pkl")
    common = [f"--pools={tmp_path / 'pools'}", "--train_pool=tiny", "--eval_pools=tiny", f"--out={tmp_path / 'run'}",
              "--batch_size=4", "--hidden=8", "--threads=1", "--progress=false", "--ckpt_every=1"]
    r = _run("--mode=train", "--iterations=2", *common)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "evidence-check-v1" in r.stdout and "| tiny | ppo |" in r.stdout and "| tiny | all-forms |" in r.stdout
    rows = (tmp_path / "run" / "metrics.csv").read_text().splitlines()
    assert len(rows) == 3 and rows[0].startswith("iteration,lam,reward,quality")
    import importlib.util

    # the PNG needs matplotlib ([train] extra); without it the run says so and keeps the CSV
    png = (tmp_path / "run" / "learning_curve.png").is_file()
    assert png if importlib.util.find_spec("matplotlib") else ("learning_curve.png skipped" in r.stdout and not png)
    ppo.main(["--mode=train", "--iterations=3", "--eval_pools=", *common])
    assert "resumed from" in capsys.readouterr().out
    assert len((tmp_path / "run" / "metrics.csv").read_text().splitlines()) == 4
    res = ppo.main(["--mode=eval", f"--weights={tmp_path / 'run' / 'selector.pt'}", *common])
    allf = res["tiny"]["policies"]["all-forms"]["groups"]["overall"]
    assert allf["evidence_acc"] == 1.0 and allf["oracle_reader_acc"] == 1.0  # the photo reaches the reader
    assert (tmp_path / "run" / "paired.json").is_file()
    assert MLPSelector.load(tmp_path / "run" / "selector.pt").version == "v2"


# -- the shipped name --------------------------------------------------------------------------------------
def test_ppo_selector_name(monkeypatch, tmp_path):
    import c3m.read.compose as compose_mod

    assert is_selector_name("ppo")
    monkeypatch.setattr(compose_mod, "PPO_WEIGHTS", tmp_path / "missing.pt")
    with pytest.raises(InvalidInput) as err:
        make_selector("ppo", dim=32)
    assert "train_selector_ppo.py" in err.value.fix
    sel = MLPSelector(32, 8, seed=1, version="v2")
    sel.save(tmp_path / "w.pt")
    monkeypatch.setattr(compose_mod, "PPO_WEIGHTS", tmp_path / "w.pt")
    got = make_selector("ppo", dim=32)
    assert got.name == "ppo" and got.version == "v2"
    with pytest.raises(InvalidInput):
        make_selector("ppo", dim=64)
    c = photo_memory()
    vec = lambda nodes: EMB.embed([n.text for n in nodes]).astype(np.float32)  # noqa: E731
    p = got.probabilities("What colour is my mug?", vec(c.nodes)[0], [c], vec)
    assert p.shape == (1, 5) and p[0, 1] == 0  # no summary: never offered


@pytest.mark.slow
def test_torchrun_two_processes_match_one(tmp_path):
    """Tolerance: parameters within 1e-5 (abs) after 6 iterations — the global batch, its sampling noise and
    the minibatch order are shared, gradients are all-reduced sums over the global batch, so the runs differ
    only in float summation order."""
    common = ["--toy", "--rescale=true", "--lam=0.5", "--iterations=6", "--batch_size=32", "--hidden=16",
              "--threads=1", "--progress=false", "--resume=false"]
    one = _run(*common, f"--out={tmp_path / 'one'}")
    assert one.returncode == 0, one.stderr[-2000:]
    two = subprocess.run([str(Path(sys.executable).with_name("torchrun")), "--nproc_per_node=2", "--master_port=29533",
                          str(SCRIPT), *common, f"--out={tmp_path / 'two'}"], capture_output=True, text=True,
                         timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"}, cwd=ROOT)
    assert two.returncode == 0, two.stderr[-3000:]
    a = torch.load(tmp_path / "one" / "selector.pt", weights_only=True)["state_dict"]
    b = torch.load(tmp_path / "two" / "selector.pt", weights_only=True)["state_dict"]
    for k in a:
        assert torch.allclose(a[k], b[k], atol=1e-5, rtol=0), k
    la = (tmp_path / "one" / "metrics.csv").read_text().splitlines()[-1].split(",")
    lb = (tmp_path / "two" / "metrics.csv").read_text().splitlines()[-1].split(",")
    assert np.allclose([float(x) for x in la[:11]], [float(x) for x in lb[:11]], atol=1e-4)
