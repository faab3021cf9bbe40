"""RAMU's relation heads g_r: phi(m, e) (and, for one head, the pair texts) -> (relation, confidence).

Three heads share the ``RelationHead`` protocol, chosen by ``relation_head=``:

- ``feature`` (``FeatureRelationHead``, "feature-v1"): a documented linear scorer with hand-set weights over five
  of the twelve features; the named heuristic the trained heads are measured against.
- ``mlp`` / ``mlp:PATH`` (``MLPRelationHead``): a small MLP over all of phi, including the real text–image
  agreement, trained on the generator's gold pairs (``training/train_relation_head.py``) and temperature-scaled
  on dev. ``mlp`` loads the shipped weights (``models/weights/relation_mlp.npz``). A numpy forward pass: the
  write path needs no torch for it.
- ``cross-encoder:PATH`` (``CrossEncoderRelationHead``): a transformers encoder fine-tuned on the pair texts, its
  pooled output joined with phi; reads ``pairs`` = [(entry text, unit text)].

**Confidence and *uncertain*.** Trained heads output calibrated probabilities over same / update / distinct.
The relation is the argmax, except when the pair is probably about one thing (p_same + p_update > ½) but the
head cannot say whether it changed (neither p_same nor p_update reaches ½): that is *uncertain*, with
confidence p_same + p_update. Eq. 3 Keeps an uncertain pair as a linked new entry, which is the safe action.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from ..types import Relation

#: logit = bias + sum(weight * feature)
WEIGHTS: dict[Relation, dict[str, float]] = {
    Relation.SAME: {"bias": -1.5, "entity": 4.0, "sim": 1.0, "novelty": -4.0, "again": 1.5, "another": -3.0},
    Relation.UPDATE: {"bias": -2.5, "entity": 3.0, "sim": 1.0, "novelty": 2.5, "another": -2.0},
    Relation.DISTINCT: {"bias": 2.5, "entity": -3.0, "another": 2.0},
    Relation.UNCERTAIN: {"bias": 0.5},
}
#: class order of the trained heads' outputs
CLASSES = (Relation.SAME, Relation.UPDATE, Relation.DISTINCT)
SHIPPED_MLP = Path(__file__).resolve().parent / "weights" / "relation_mlp.npz"
RELATION_HEADS = ("feature", "mlp", "mlp:PATH", "cross-encoder:PATH")


class FeatureRelationHead:
    """feature-v1: linear scorer over phi with the hand-set ``WEIGHTS``. Its four logits encode C3M §2.1:
    *same* = same thing (``entity``), nothing new (``novelty`` low), more so with an ``again`` cue; *update* =
    same thing with a new value or a change cue; *distinct* = little entity overlap or an ``another`` cue;
    *uncertain* = a constant floor, so weak evidence stays below δ. Measured against the trained heads in
    ``benchmarks/results/relation-head-synth-cpu.md``."""

    name = "feature-v1"
    reads_text = False

    def __init__(self, weights: Mapping[Relation, Mapping[str, float]] | None = None, temperature: float = 1.0):
        self.weights = {r: dict(w) for r, w in (weights or WEIGHTS).items()}
        self.temperature = temperature

    def logits(self, f: Mapping[str, float]) -> dict[Relation, float]:
        return {r: w.get("bias", 0.0) + sum(v * f.get(k, 0.0) for k, v in w.items() if k != "bias")
                for r, w in self.weights.items()}

    def predict(self, features: Sequence[Mapping[str, float]], pairs=None) -> list[tuple[Relation, float]]:
        out = []
        for f in features:
            z = self.logits(f)
            top = max(z.values())
            exp = {r: math.exp((v - top) / self.temperature) for r, v in z.items()}
            best = max(exp, key=exp.get)
            out.append((best, exp[best] / sum(exp.values())))
        return out


def decide_relation(p: np.ndarray) -> list[tuple[Relation, float]]:
    """Calibrated [n, 3] probabilities (``CLASSES`` order) -> (relation, confidence), *uncertain* as in the module
    docstring."""
    out = []
    for ps, pu, pd in np.asarray(p, dtype=np.float64):
        if ps + pu > 0.5 and max(ps, pu) < 0.5:
            out.append((Relation.UNCERTAIN, float(ps + pu)))
        else:
            k = int(np.argmax((ps, pu, pd)))
            out.append((CLASSES[k], float((ps, pu, pd)[k])))
    return out


def feature_matrix(features: Sequence[Mapping[str, float]], names: Sequence[str]) -> np.ndarray:
    return np.array([[f.get(k, 0.0) for k in names] for f in features], dtype=np.float32).reshape(len(features),
                                                                                                  len(names))


def softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


class MLPRelationHead:
    """A trained MLP over standardised phi (ReLU layers, three logits), divided by the dev-fitted temperature.
    ``feature_names`` (stored with the weights) fixes which phi features it reads, in order."""

    reads_text = False

    def __init__(self, layers: Sequence[tuple[np.ndarray, np.ndarray]], mean: np.ndarray, std: np.ndarray,
                 temperature: float, feature_names: Sequence[str], name: str = "mlp",
                 meta: Mapping | None = None):
        self.layers = [(np.asarray(W, np.float32), np.asarray(b, np.float32)) for W, b in layers]
        self.mean, self.std = np.asarray(mean, np.float32), np.asarray(std, np.float32)
        self.temperature, self.feature_names, self.name = float(temperature), tuple(feature_names), name
        self.meta = dict(meta or {})

    def logits(self, X: np.ndarray) -> np.ndarray:
        h = (np.asarray(X, np.float32) - self.mean) / self.std
        for i, (W, b) in enumerate(self.layers):
            h = h @ W.T + b
            if i < len(self.layers) - 1:
                h = np.maximum(h, 0.0)
        return h

    def probabilities(self, X: np.ndarray) -> np.ndarray:
        return softmax(self.logits(X) / self.temperature)

    def predict(self, features: Sequence[Mapping[str, float]], pairs=None) -> list[tuple[Relation, float]]:
        if not features:
            return []
        return decide_relation(self.probabilities(feature_matrix(features, self.feature_names)))

    def save(self, path: str | Path) -> None:
        arrays = {f"W{i}": W for i, (W, _) in enumerate(self.layers)} | {f"b{i}": b for i, (_, b) in enumerate(self.layers)}
        np.savez(path, mean=self.mean, std=self.std, temperature=np.float32(self.temperature),
                 feature_names=np.array(self.feature_names), meta=np.array(json.dumps(self.meta)), **arrays)

    @classmethod
    def load(cls, path: str | Path, name: str | None = None) -> "MLPRelationHead":
        z = np.load(path, allow_pickle=False)
        n = sum(1 for k in z.files if k.startswith("W"))
        meta = json.loads(str(z["meta"])) if "meta" in z.files else {}
        return cls([(z[f"W{i}"], z[f"b{i}"]) for i in range(n)], z["mean"], z["std"], float(z["temperature"]),
                   tuple(str(f) for f in z["feature_names"]), name or meta.get("name", f"mlp:{Path(path).name}"), meta)


class CrossEncoderRelationHead:
    """A fine-tuned transformers encoder over "entry text [SEP] unit text", mean-pooled, joined with standardised
    phi, then a linear layer to three logits (temperature-scaled). Saved as a folder by the trainer:
    the backbone (``save_pretrained``), its tokenizer, ``head.pt`` and ``meta.json``."""

    reads_text = True

    def __init__(self, path: str | Path, *, device: str = "cpu", batch_size: int = 32):
        import torch
        from transformers import AutoModel, AutoTokenizer

        self.path = Path(path)
        meta = json.loads((self.path / "meta.json").read_text(encoding="utf-8"))
        self.tokenizer = AutoTokenizer.from_pretrained(self.path, local_files_only=True)
        self.model = AutoModel.from_pretrained(self.path, local_files_only=True).to(device).eval()
        head = torch.load(self.path / "head.pt", map_location=device, weights_only=True)
        self.linear = torch.nn.Linear(head["weight"].shape[1], head["weight"].shape[0]).to(device)
        self.linear.load_state_dict(head)
        self.mean = torch.tensor(meta["mean"], dtype=torch.float32, device=device)
        self.std = torch.tensor(meta["std"], dtype=torch.float32, device=device)
        self.temperature, self.max_length = float(meta["temperature"]), int(meta.get("max_length", 128))
        self.feature_names, self.meta = tuple(meta["feature_names"]), meta
        self.name, self.device, self.batch_size, self._torch = f"cross-encoder:{self.path.name}", device, batch_size, torch

    def logits(self, X: np.ndarray, pairs: Sequence[tuple[str, str]]):
        torch = self._torch
        out = []
        with torch.no_grad():
            for i in range(0, len(pairs), self.batch_size):
                a, b = zip(*pairs[i:i + self.batch_size])
                tok = self.tokenizer(list(a), list(b), truncation=True, max_length=self.max_length, padding=True,
                                     return_tensors="pt").to(self.device)
                h = self.model(**tok).last_hidden_state
                m = tok["attention_mask"].unsqueeze(-1).float()
                pooled = (h * m).sum(1) / m.sum(1).clamp(min=1)
                x = (torch.from_numpy(np.asarray(X[i:i + self.batch_size], np.float32)).to(self.device) - self.mean) / self.std
                out.append(self.linear(torch.cat([pooled, x], dim=1)).cpu().numpy())
        return np.concatenate(out) if out else np.zeros((0, 3), np.float32)

    def predict(self, features: Sequence[Mapping[str, float]], pairs=None) -> list[tuple[Relation, float]]:
        if not features:
            return []
        if pairs is None or len(pairs) != len(features):
            from ..errors import InvalidInput

            raise InvalidInput("pairs", "the cross-encoder relation head reads the pair texts",
                               fix="pass pairs=[(entry text, unit text), ...], one per feature row")
        return decide_relation(self.probabilities(feature_matrix(features, self.feature_names), list(pairs)))

    def probabilities(self, X: np.ndarray, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        return softmax(self.logits(X, pairs) / self.temperature)


def make_relation_head(name: str = "feature"):
    """``feature`` | ``mlp`` (shipped weights) | ``mlp:PATH`` | ``cross-encoder:PATH``; a clear error otherwise."""
    from ..errors import InvalidInput

    if name == "feature":
        return FeatureRelationHead()
    if name == "mlp" or name.startswith("mlp:"):
        path = SHIPPED_MLP if name == "mlp" else Path(name[4:])
        if not path.is_file():
            raise InvalidInput("relation_head", f"no relation-head weights at {path}",
                               fix="train them with training/train_relation_head.py, or use relation_head='feature'")
        return MLPRelationHead.load(path, name="mlp-v1" if name == "mlp" else None)
    if name.startswith("cross-encoder:"):
        path = Path(name.split(":", 1)[1])
        if not (path / "meta.json").is_file():
            raise InvalidInput("relation_head", f"no cross-encoder relation head at {path}",
                               fix="train one with training/train_relation_head.py --head cross-encoder")
        return CrossEncoderRelationHead(path)
    raise InvalidInput("relation_head", f"unknown relation head {name!r}", fix=f"choose one of {RELATION_HEADS}")


def is_relation_head_name(name: str) -> bool:
    return name in ("feature", "mlp") or name.startswith(("mlp:", "cross-encoder:"))
