"""Rerankers: order a question's fused candidate turns before the budget solver spends the reader budget on them.

Retrieval and ranking are separate stages (faiss ``search`` → ``IndexRefine``; sentence-transformers retrieve →
rerank): the channels find candidates with one similarity each, and a reranker scores every candidate from all of
``c3m.read.features.FEATURES`` at once. One interface, ``scores(X) -> [n]`` (higher = better), over the stacked
feature rows of a whole batch of questions (one call).

- ``lgbm`` (``LgbmReranker``, "lgbm-lambdarank-v1"): a LightGBM LambdaRank model trained by
  ``training/train_reranker.py`` (synthetic train split + the real development dialogs, grouped cross-validation
  by history) and shipped as ``c3m/models/weights/reranker_lgbm.txt`` with its card ``RERANKER_CARD.md``.
  ``lgbm:PATH`` loads another model file. Its feature names are checked against ``FEATURES`` (or the columns a
  registered channel or feature adds: it reads its columns by name). The model is
  evaluated in numpy (``c3m.read.trees``): LightGBM is needed to train it, not to read with it.
- ``rrf`` (``FusionReranker``, "rrf-v1"): reciprocal-rank fusion (k = 60) of the channel rankings (dense cosine,
  Cold-Store BM25, the index's relevance, pool BM25) — the named fallback when no model file is there, and the
  baseline the learned model is measured against.
- ``auto`` (default): ``lgbm`` when the shipped model file is there, else ``rrf``.
- ``xfit:DIR`` (evaluation only): cross-fitted models from ``training/train_reranker.py``'s grouped
  cross-validation — ``DIR/folds.json`` maps each history (namespace) to the fold model that never saw it, so a
  development set can be scored out of fold through the real harness. A namespace it does not list is refused at
  its first read (``UnlistedHistory``), so the harness's warm-up write in a scratch namespace passes.

c3m's reader before this stage (BMER relevance over the bounded index alone) stays available as
``reranker="bmer"`` on the ``c3m`` method.
"""
from __future__ import annotations

from pathlib import Path
from typing import Protocol

import numpy as np

from ..errors import InvalidInput
from .features import FEATURES

SHIPPED = Path(__file__).resolve().parent.parent / "models" / "weights" / "reranker_lgbm.txt"
RERANKERS = ("auto", "lgbm", "rrf", "bmer")
RRF_K = 60.0


class Reranker(Protocol):
    name: str

    def scores(self, X: np.ndarray, groups: np.ndarray) -> np.ndarray: ...


def known_features() -> set[str]:
    """Every feature column a reader can compute: ``FEATURES``, the registered channels' signals and the registered
    extra features (``c3m.read.channels``, ``c3m.read.features.register_feature``)."""
    from .channels import CHANNELS
    from .features import EXTRA_FEATURES

    return set(FEATURES) | set(EXTRA_FEATURES) | {f for ch in CHANNELS.values() for f in ch.features}


def _col(name: str) -> int:
    return FEATURES.index(name)


class FusionReranker:
    """rrf-v1 (module docstring): per question (``groups``: each row's question), sum 1 / (k + rank) over the
    channel rankings a candidate is in."""

    name = "rrf-v1"
    SIGNALS = ("dense_cos", "fts_score", "idx_rel", "pool_bm25")

    def scores(self, X: np.ndarray, groups: np.ndarray) -> np.ndarray:
        out = np.zeros(len(X))
        for g in np.unique(groups):
            rows = np.flatnonzero(groups == g)
            for name in self.SIGNALS:
                s = X[rows, _col(name)].astype(float)
                if name == "pool_bm25":
                    s = np.where(s > 0, s, np.nan)
                ok = np.flatnonzero(~np.isnan(s))
                order = ok[np.argsort(-s[ok], kind="stable")]
                out[rows[order]] += 1.0 / (RRF_K + np.arange(1, len(order) + 1))
        return out


class LgbmReranker:
    """A LightGBM ranking model file (module docstring), evaluated by ``c3m.read.trees.TreeEnsemble`` in numpy:
    one call over all rows, no LightGBM import at read time."""

    def __init__(self, path: Path = SHIPPED):
        from .trees import TreeEnsemble

        if not Path(path).is_file():
            raise InvalidInput("reranker", f"no reranker model at {path}",
                               fix="train one with training/train_reranker.py, or use reranker='rrf'")
        self.path = Path(path)
        self.trees = TreeEnsemble(path)
        names = self.trees.feature_names
        if names != FEATURES and not set(names) <= known_features():
            raise InvalidInput("reranker", f"the model at {path} was trained on other features "
                               f"({len(names)} columns)",
                               fix="retrain it with training/train_reranker.py for this version of c3m")
        #: the columns it reads, by name (``read.pipeline.rerank`` hands it exactly these)
        self.feature_names = names
        self.name = "lgbm-lambdarank-v1" if self.path == SHIPPED else f"lgbm:{self.path.name}"

    def scores(self, X: np.ndarray, groups: np.ndarray) -> np.ndarray:
        return self.trees.predict(X)


_CACHE: dict[str, Reranker] = {}


class UnlistedHistory:
    """``xfit:DIR`` for a namespace its ``folds.json`` does not list: it refuses when asked to rank, not when made,
    so a store that only writes under that reader (the harness's warm-up session in a scratch namespace before a
    history's first timed write) works, and a read of an unlisted history still fails instead of being scored by a
    model that may have seen it."""

    def __init__(self, folder: str, namespace: str):
        self.folder, self.namespace = folder, namespace
        self.name = f"xfit:{folder} (unlisted {namespace!r})"

    def scores(self, X: np.ndarray, groups: np.ndarray) -> np.ndarray:
        raise InvalidInput("reranker", f"the cross-fitted models in {self.folder} do not list history "
                           f"{self.namespace!r}", fix="use xfit: only on the histories the models were "
                                                     "cross-validated on")


def _cross_fitted(folder: str, namespace: str) -> str | None:
    """The fold model that never saw ``namespace`` (``lgbm:PATH``), or None when ``folds.json`` does not list it."""
    import json

    path = Path(folder) / "folds.json"
    if not path.is_file():
        raise InvalidInput("reranker", f"no folds.json in {folder}",
                           fix="point xfit: at the cv/ folder training/train_reranker.py wrote")
    folds = json.loads(path.read_text())
    return f"lgbm:{Path(folder) / folds[namespace]}" if namespace in folds else None


def make_reranker(name: str, namespace: str = "") -> Reranker:
    """``auto`` | ``lgbm`` | ``lgbm:PATH`` | ``rrf`` | ``xfit:DIR`` (module docstring); loaded once per process."""
    if name.startswith("xfit:"):
        fold = _cross_fitted(name[5:], namespace)
        return UnlistedHistory(name[5:], namespace) if fold is None else make_reranker(fold)
    if name in _CACHE:
        return _CACHE[name]
    if name == "auto":
        got: Reranker = make_reranker("lgbm") if SHIPPED.is_file() else make_reranker("rrf")
    elif name == "rrf":
        got = FusionReranker()
    elif name == "lgbm":
        got = LgbmReranker()
    elif name.startswith("lgbm:"):
        got = LgbmReranker(Path(name[5:]))
    else:
        raise InvalidInput("reranker", f"unknown reranker {name!r}",
                           fix=f"choose one of {RERANKERS}, lgbm:PATH or xfit:DIR")
    _CACHE[name] = got
    return got
