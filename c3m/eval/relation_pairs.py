"""RAMU relation pairs from the generator's gold labels: what the relation head sees, with the answer beside it.

``c3m synth`` writes ``_hidden/relations.jsonl``: pairs of observations of world entities labelled *same* (the
same object, nothing changed), *update* (the same object after a change) or *distinct* (different objects;
``hard`` = a look-alike twin). Each pair becomes what RAMU compares at write time: the later turn (the user turn
and its reply) as the incoming unit, the earlier one as an index entry, and phi(m, e) between them
(``c3m.write.features``). The pair texts ride along for heads that read them (the cross-encoder).

Subsets that matter for Eq. 3 are tagged: ``twin`` (a look-alike distinct pair), ``image_change`` (an update the
later turn's text does not state: only its photo shows it), ``reshared`` (the same photo shown again).

Document frequencies come from all units of the history (the live index only knows the past: a slight
advantage here, the same for every head). ``text_image`` is the real text–image agreement when an image
embedder is given; ``drop_image`` adds each image pair a second time without it, so one head serves configs
with and without an image embedder.
"""
from __future__ import annotations

import hashlib
import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from types import SimpleNamespace
from typing import Sequence

import numpy as np

from ..dataset.format import history_from_dict
from ..index import normalize
from ..write.features import FEATURE_NAMES, relation_features
from ..write.units import Unit, describer

LABELS = ("same", "update", "distinct")


@dataclass
class RelationPairs:
    """Feature matrix ``X`` [n, len(FEATURE_NAMES)], gold class index ``y`` (``LABELS``), subset tags, pair texts
    (entry text, unit text), the history of each pair (for cluster statistics), ``image_vec`` (1 where the
    text–image feature was computed from a real image vector) and the pair's vectors (for heads and studies that
    read them)."""

    X: np.ndarray
    y: np.ndarray
    twin: np.ndarray
    image_change: np.ndarray
    reshared: np.ndarray
    image_vec: np.ndarray
    history: list[str] = field(default_factory=list)
    texts: list[tuple[str, str]] = field(default_factory=list)
    feature_names: tuple[str, ...] = FEATURE_NAMES
    #: [n, 4, dim] float16: entry text vector, unit text vector, entry image vector, unit image vector (0 = none)
    vectors: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.y)

    def save(self, path: str | Path) -> None:
        np.savez_compressed(path, X=self.X, y=self.y, twin=self.twin, image_change=self.image_change,
                            reshared=self.reshared, image_vec=self.image_vec, history=np.array(self.history),
                            texts=np.array(self.texts, dtype=object).reshape(-1, 2).astype(str),
                            feature_names=np.array(self.feature_names),
                            **({"vectors": self.vectors} if self.vectors is not None else {}))

    @classmethod
    def load(cls, path: str | Path) -> "RelationPairs":
        z = np.load(path, allow_pickle=False)
        return cls(z["X"], z["y"], z["twin"], z["image_change"], z["reshared"], z["image_vec"],
                   [str(h) for h in z["history"]], [tuple(map(str, t)) for t in z["texts"]],
                   tuple(str(f) for f in z["feature_names"]), z["vectors"] if "vectors" in z.files else None)

    def subset(self, mask: np.ndarray) -> "RelationPairs":
        idx = np.flatnonzero(mask)
        return RelationPairs(self.X[idx], self.y[idx], self.twin[idx], self.image_change[idx], self.reshared[idx],
                             self.image_vec[idx], [self.history[i] for i in idx], [self.texts[i] for i in idx],
                             self.feature_names, self.vectors[idx] if self.vectors is not None else None)


def build_pairs(dataset: str | Path, *, histories: int = 0, embedder=None, image_embedder=None, anchors: str = "auto",
                drop_image: bool = True, progress: bool = False) -> RelationPairs:
    """phi for every gold pair of the first ``histories`` histories (0: all) of a ``c3m synth`` dataset."""
    from ..models import make_text_embedder

    ds = Path(dataset)
    lines = ds.joinpath("episodes.jsonl").read_text(encoding="utf-8").splitlines()
    lines = lines[:histories] if histories else lines
    hist = {h.id: h for h in (history_from_dict(json.loads(line), root=ds) for line in lines)}
    pairs = defaultdict(list)
    for line in ds.joinpath("_hidden/relations.jsonl").read_text(encoding="utf-8").splitlines():
        d = json.loads(line)
        if d["history"] in hist:
            pairs[d["history"]].append(d)
    stated = _stated_attributes(ds / "_hidden/world.jsonl", set(hist))
    emb, memo = embedder or make_text_embedder("auto"), describer(anchors)
    rows: list[tuple] = []
    items = hist.items()
    if progress:
        from tqdm import tqdm

        items = tqdm(items, desc="relation pairs", unit="history")
    for hid, h in items:
        units, df = {}, Counter()
        for s in h.sessions:
            for i, t in enumerate(s.turns):
                if t.role != "user":
                    continue
                reply = s.turns[i + 1].text if i + 1 < len(s.turns) and s.turns[i + 1].role != "user" else None
                texts = [t.text] + ([reply] if reply else [])
                ents, states, change, again, another = memo.describe([t.text])[0]
                units[(s.id, i)] = SimpleNamespace(time=s.time, texts=texts, ents=set(ents), states=set(states),
                                                   change=change, again=again, another=another, images=t.images)
                df.update(set(ents) | set(states))
        need = sorted({(k["session"], k["turn"]) for d in pairs[hid] for k in (d["a"], d["b"])})
        vec = dict(zip(need, (normalize(v) for v in _mean_vectors(emb, [units[k].texts for k in need]))))
        img_vec = {}
        if image_embedder is not None:
            with_img = [k for k in need if units[k].images]
            if with_img:
                for k, v in zip(with_img, image_embedder.embed_images([_bytes(units[k].images[0])
                                                                       for k in with_img])):
                    img_vec[k] = normalize(v)
        n_docs = len(units)
        for d in pairs[hid]:
            a, b = (d["a"]["session"], d["a"]["turn"]), (d["b"]["session"], d["b"]["turn"])
            ua, ub = units[a], units[b]
            entry = SimpleNamespace(z=vec[a], entities=ua.ents, states=sorted(ua.states), time=ua.time, image_z=None)
            y = LABELS.index(d["label"])
            image_change = d["label"] == "update" and not set(d["changed"]) & stated.get((hid, *b), set())
            reshared = bool(ua.images and ub.images and _sha(ua.images[0]) == _sha(ub.images[0]))
            variants = [img_vec.get(b)] + ([None] if drop_image and b in img_vec else [])
            for iv in variants:
                entry.image_z = img_vec.get(a) if iv is not None else None  # no image embedder: neither side
                unit = Unit(b[0], [b[1]], [], ub.time, "\n".join(ub.texts), vec[b], ub.ents, ub.states, ub.change,
                            len(ub.images), again=ub.again, another=ub.another, image_z=iv)
                f = relation_features(unit, entry, df, n_docs)
                zero = np.zeros_like(vec[a])
                rows.append(([f[k] for k in FEATURE_NAMES], y, d["hard"] and y == 2, image_change, reshared,
                             iv is not None, hid, ("\n".join(ua.texts), "\n".join(ub.texts)),
                             np.stack([vec[a], vec[b], img_vec.get(a, zero) if iv is not None else zero,
                                       iv if iv is not None else zero]).astype(np.float16)))
    if not rows:
        from ..errors import InvalidInput

        raise InvalidInput("dataset", f"no gold relation pairs in {ds}",
                           fix="use a dataset written by `c3m synth` (it has _hidden/relations.jsonl)")
    X, y, twin, ic, rs, iv, hs, tx, vs = zip(*rows)
    return RelationPairs(np.asarray(X, np.float32), np.asarray(y, np.int64), np.asarray(twin), np.asarray(ic),
                         np.asarray(rs), np.asarray(iv), list(hs), list(tx), FEATURE_NAMES, np.stack(vs))


def _mean_vectors(emb, groups: Sequence[Sequence[str]]) -> list[np.ndarray]:
    flat = [t for g in groups for t in g]
    V = emb.embed(flat) if flat else np.zeros((0, emb.dim))
    out, i = [], 0
    for g in groups:
        out.append(V[i:i + len(g)].mean(axis=0))
        i += len(g)
    return out


def _bytes(image) -> bytes:
    return image if isinstance(image, bytes) else Path(image).read_bytes()


@lru_cache(maxsize=4096)
def _sha(image) -> str:
    """SHA-256 of an image (a path or bytes); memoised, since one turn's photo recurs in many pairs."""
    return hashlib.sha256(_bytes(image)).hexdigest()


def _stated_attributes(world_file: Path, wanted: set[str]) -> dict[tuple, set[str]]:
    """(history, session, turn) -> the attributes that turn's text states (the generator's ``text_attrs``)."""
    out: dict[tuple, set[str]] = {}
    if not world_file.is_file():
        return out
    for line in world_file.read_text(encoding="utf-8").splitlines():
        w = json.loads(line)
        if w["history"] not in wanted:
            continue
        for ent in w["entities"]:
            for o in ent["observations"]:
                out.setdefault((w["history"], o["session"], o["turn"]), set()).update(o["text_attrs"])
    return out
