"""c3m.read.trees (a LightGBM model file evaluated in numpy) against LightGBM's own Booster.predict, the reference:
the shipped reranker and small models trained here for every missing-value mode, on random rows with NaNs, zeros,
values exactly on thresholds, and edge shapes (no rows, one row, a one-leaf tree)."""
from __future__ import annotations

import numpy as np
import pytest

from c3m.errors import InvalidInput
from c3m.read.rerank import SHIPPED
from c3m.read.trees import ZERO, TreeEnsemble

lightgbm = pytest.importorskip("lightgbm")


def rows(rng, n: int, d: int, thresholds: np.ndarray | None = None) -> np.ndarray:
    X = rng.normal(size=(n, d)) * 2
    X[rng.random(X.shape) < 0.2] = np.nan
    X[rng.random(X.shape) < 0.1] = 0.0
    X[rng.random(X.shape) < 0.05] = -0.0
    tiny = rng.random(X.shape) < 0.05  # around LightGBM's zero threshold (the float 1e-35f)
    X[tiny] = rng.choice([1e-36, -1e-36, ZERO, -ZERO, 2e-35, -2e-35], tiny.sum())
    if thresholds is not None and len(thresholds):  # values exactly on split thresholds go left (x <= t)
        mask = rng.random(X.shape) < 0.1
        X[mask] = rng.choice(thresholds, mask.sum())
    return X


def model_thresholds(path) -> np.ndarray:
    te = TreeEnsemble(path)
    return np.unique(te.threshold[te.left != -1])


def check(path, X) -> None:
    want = lightgbm.Booster(model_file=str(path)).predict(X, num_threads=1)
    got = TreeEnsemble(path).predict(X)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


def test_shipped_reranker_matches_lightgbm():
    rng = np.random.default_rng(0)
    te = TreeEnsemble(SHIPPED)
    assert te.num_trees > 0 and te.feature_names[0] == "dense_cos"
    X = rows(rng, 3000, len(te.feature_names), model_thresholds(SHIPPED))
    check(SHIPPED, X)
    check(SHIPPED, X.astype(np.float32))  # float32 rows, as the read path hands them


@pytest.mark.parametrize("params", [
    {"use_missing": True, "zero_as_missing": False},   # missing type NaN
    {"use_missing": True, "zero_as_missing": True},    # missing type Zero
    {"use_missing": False},                             # missing type None: NaN counts as 0
], ids=["nan", "zero", "none"])
@pytest.mark.parametrize("objective", ["lambdarank", "regression"])
def test_trained_models_match_lightgbm(tmp_path, params, objective):
    rng = np.random.default_rng(1)
    X = rows(rng, 600, 5)
    y = (np.nan_to_num(X[:, 0]) + (X[:, 1] > 0.5) + np.isnan(X[:, 2]) > 1).astype(int)
    data = lightgbm.Dataset(X, y, group=[20] * 30 if objective == "lambdarank" else None, params={"verbose": -1})
    booster = lightgbm.train({"objective": objective, "num_leaves": 7, "min_data_in_leaf": 5, "verbose": -1,
                              **params}, data, num_boost_round=25)
    path = tmp_path / "m.txt"
    booster.save_model(str(path))
    check(path, rows(rng, 2000, 5, model_thresholds(path)))


def test_edge_shapes(tmp_path):
    rng = np.random.default_rng(2)
    X = rng.normal(size=(50, 3))
    booster = lightgbm.train({"objective": "regression", "verbose": -1, "min_data_in_leaf": 100},  # no split fits
                             lightgbm.Dataset(X, X[:, 0], params={"verbose": -1}), num_boost_round=3)
    path = tmp_path / "stump.txt"
    booster.save_model(str(path))
    te = TreeEnsemble(path)
    assert te.single.all()
    check(path, X)
    assert te.predict(np.zeros((0, 3))).shape == (0,)
    check(SHIPPED, rows(rng, 1, len(TreeEnsemble(SHIPPED).feature_names)))


def test_categorical_model_is_refused(tmp_path):
    rng = np.random.default_rng(3)
    X = np.c_[rng.integers(0, 5, 300), rng.normal(size=300)]
    booster = lightgbm.train({"objective": "regression", "verbose": -1, "min_data_in_leaf": 5},
                             lightgbm.Dataset(X, X[:, 0] * 2.0, categorical_feature=[0], params={"verbose": -1}),
                             num_boost_round=3)
    path = tmp_path / "cat.txt"
    booster.save_model(str(path))
    with pytest.raises(InvalidInput, match="categorical"):
        TreeEnsemble(path)


def test_compiled_walk_equals_numpy_walk(monkeypatch):
    """The numba walk and the numpy walk give the same scores, bit for bit (the numpy one runs without numba)."""
    from c3m.read import trees

    te = TreeEnsemble(SHIPPED)
    rng = np.random.default_rng(7)
    X = rows(rng, 500, len(te.feature_names), model_thresholds(SHIPPED))
    compiled = te.predict(X)
    monkeypatch.setattr(trees, "_WALK", [None])
    assert np.array_equal(compiled, te.predict(X))
