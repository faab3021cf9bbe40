"""Vertical evidence composition (HiVe-Mem §3.3): per retrieved memory, which evidence forms reach the reader.

A *memory* (``Candidate``) is what a read path retrieved — a HiVe-Mem episode, or one Raw Node of a C3M entry —
with the forms it can show:

========================  ==========================================  ==================================
form                      item(s) handed to the answerer              charged (reader budget)
========================  ==========================================  ==================================
``raw_text``              each node's stored text                     1 Raw Node (once per node), tokens
``summary``               the memory's summary (derived)              text tokens
``caption``               ``[image: ...]`` per node with images       text tokens
``raw_image``             each node's original images                 1 Raw Node (once per node), images
``grounded_crop``         the node's crop blobs (derived)             images (+ their image tokens)
========================  ==========================================  ==================================

Raw forms charge the Raw-Node dimension (a node shown as text and image counts once: the solver groups them);
derived forms are compact views and charge only what they are. Image tokens follow a per-model formula
(``c3m.models.tokens.image_tokens``; a crop costs a fraction of its image); they are reported by the harness
and enter the objective through ``lam_tokens``, since the reader budget has no image-token dimension.

**Selectors** share one interface, ``probabilities(question, q_vec, candidates) -> [n, 5]`` (one forward pass
over all memories; columns in ``FORMS`` order). ``MLPSelector`` is the paper's MLP on
[query emb; summary emb] (its PPO training is ``training/``); ``RuleSelector`` ("rule-v1") is the documented
heuristic shipped until trained weights exist. A form is offered when its probability ≥ ``threshold`` and
the memory has it; the joint choice under the budget is the selection stage's solve (``c3m.read.select``;
coverage mode over source sessions), solved on the memory's device (``read.select.solve_many``: the CPU DP on "cpu",
Triton on CUDA).

**What an item is worth** (``compose_plan``): item value = p(form) · form weight · (1 + relevance) − λ · tokens / 1000,
relevance = ``node_weight`` · cos(q, node) + (1 − ``node_weight``) · memory score (for the reranked reader the score
is the rank: 1 for the first, falling linearly). A node's forms add up: for a question about looks, a photo's raw
image and caption are evidence its words may not carry. Two rules keep that from valuing a node twice:

- **Precedence** (issue #43), for a question about the present state (``temporal_intent`` "now": "… now?",
  "currently", "latest"): a node that shows an image view (raw image, caption, crop) is never worth more, all its
  items together, than a *newer, better-ranked* node about the same subject (their offered text or caption share a
  content word of the question, visual cue words and stop words aside): its items are scaled to ``1 − PRECEDENCE_GAP`` of that node's
  total. Why: valued per form, a photo turn summed raw text, raw image and caption (0.9 + 0.56 + 0.39 of its
  relevance for a visual question, 2× a text turn), so older photo turns of the sign took the last Raw-Node slot from
  the newer, higher-ranked turn that said its new colour in words. For a question about a state, the newest
  statement supersedes older pictures of it; against turns about something else, or older ones, and for questions
  about the first time, a count or a period ("when I first showed you …", "how often …"), the photo keeps its forms'
  value. Measured on the synthetic hard dev split, whose evidence is photo turns: valuing a node only by its rank
  (images as tie-breaks) cost 9 points of raw Support Recall, and so did this rule applied to every question (small
  talk newer than the photo names the same object). Nodes are valued in order of relevance, so the cap is the other
  node's final value.
- **Duplicates** (below): a turn that shows nothing new gets no item.

**Duplicates add nothing twice.** Nodes are valued in order of relevance; each claims what it shows: its text (normalised:
case-folded word sequence, so spacing and punctuation do not matter), its caption, its images and crops (by
sha256). A text is *already shown* when its normalised form was claimed, or when it is a near duplicate of a claimed
text: token-set Jaccard ≥ ``NEAR_JACCARD`` (0.9), both texts with ≥ ``NEAR_MIN_TERMS`` (4) distinct terms (numbers
are terms: "paid 30" and "paid 45" differ). A node that shows nothing new (its text repeats one already valued and
it has no new image, caption or crop on offer) gets no item, so its Raw-Node slot and tokens go to other turns
(small talk repeated word for word took 8–11 of 12 slots in issue #43's histories). A repeated text with a *different
image* is not a duplicate when an image form is offered: it is a new turn, valued in full with its words (they say
what the photo is; raw-text Support Recall counts them); only views already shown (the same image, caption or crop)
are dropped from it.
The check is O(pool²) set comparisons on ≤ 48 short texts (~0.4 ms CPU per question with the precedence rule). Claims
follow relevance, not the solver's choice: a copy whose better twin does not fit (tokens) is not revived.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Mapping, Protocol, Sequence

import numpy as np

from ..models.tokens import image_tokens
from ..language.question import temporal_intent
from .features import STOP_WORDS
from ..types import BudgetUse, Context, ContextItem, EvidenceForm, ImagePerception, RawNode, ReaderBudget, RouteTrace

FORMS = (EvidenceForm.RAW_TEXT, EvidenceForm.SUMMARY, EvidenceForm.CAPTION, EvidenceForm.RAW_IMAGE,
         EvidenceForm.GROUNDED_CROP)
FORM_NAMES = tuple(f.value for f in FORMS)
#: how much one item of each form is worth relative to the raw text of the same memory (rule-v1; named knobs)
FORM_WEIGHTS = {EvidenceForm.RAW_TEXT: 1.0, EvidenceForm.SUMMARY: 0.5, EvidenceForm.CAPTION: 0.7,
                EvidenceForm.RAW_IMAGE: 0.8, EvidenceForm.GROUNDED_CROP: 0.75}


@dataclass(frozen=True)
class Candidate:
    """One retrieved memory and the evidence it can show. ``score`` is the retrieval relevance (a cosine-like
    number); ``perceptions`` maps node ids to their derived records (captions, crops)."""

    memory_id: str
    nodes: tuple[RawNode, ...]
    score: float
    summary: str = ""
    summary_vec: np.ndarray | None = field(default=None, repr=False, compare=False)
    perceptions: Mapping[str, Sequence[ImagePerception]] = field(default_factory=dict, compare=False)
    origin: str = "seed"
    page: int | None = None

    def available(self) -> np.ndarray:
        """[5] bool: which forms this memory has at all."""
        live = [n for n in self.nodes if not n.redacted]
        has_text = any(n.text.strip() for n in live)
        has_img = any(n.images for n in live)
        recs = [r for n in self.nodes for r in self.perceptions.get(n.node_id, ())]
        return np.array([has_text, bool(self.summary.strip()), any(r.caption for r in recs), has_img,
                         any(r.crop is not None for r in recs)])


@dataclass(frozen=True)
class ComposeConfig:
    forms: tuple[str, ...] = FORM_NAMES      # ablations drop forms (HiVe-Mem Table 3)
    threshold: float = 0.5                   # a form is offered when its probability reaches this
    lam_tokens: float = 0.0                  # λ: cost per 1000 context tokens (text + image); 0 = paper default
    lam_cov: float = 0.05                    # coverage weight over source sessions in the solver
    image_token_model: str = "qwen2-vl"
    node_weight: float = 0.5                 # relevance of a node item = w·cos(q, node) + (1−w)·memory score

    def __post_init__(self):
        bad = [f for f in self.forms if f not in FORM_NAMES]
        if bad:
            from ..errors import InvalidInput

            raise InvalidInput("forms", f"unknown evidence form {bad[0]!r}", fix=f"use forms from {FORM_NAMES}")


class Selector(Protocol):
    name: str

    def probabilities(self, question: str, q_vec: np.ndarray, candidates: Sequence[Candidate]) -> np.ndarray: ...


# -- rule-v1 -----------------------------------------------------------------------------------------------
_WORD = re.compile(r"[a-z]+")
#: words that ask about what something looked like (generic English, not a benchmark's templates), and about
#: what it shows in writing (a brand, a logo, a number plate, a sign, a label): a photo turn whose words only name
#: the thing holds such a value in its image alone. Without the second group a "What brand is my trunk?" read
#: the photo turn's text and no image: on photo dev 48K the IE answers were visible in c3m's contexts for 50 % of
#: questions (dense-topk 95 %), with it for 100 % (hard dev 48K, 4 histories: 75 → 100), Support Recall unchanged
#: (``evidence_acc``, the harness's evidence check)
VISUAL_CUES = frozenset("colour color coloured colored look looks looked looking appearance shape shaped photo "
                        "photos picture pictures pic pics image images snapshot shot shown showed show see saw "
                        "seen visible wear wearing wore pattern made material painted paint drawn "
                        "brand logo plate sign label".split())


def _words(text: str) -> set[str]:
    return {w[:-1] if w.endswith("s") and len(w) > 3 else w for w in _WORD.findall(text.lower())}


class RuleSelector:
    """rule-v1, the heuristic policy until PPO weights exist (measured against the MLP in the results):
    raw text always (the paper's most important form); a summary for multi-turn memories; a caption for an
    image-only turn (its only text view); for an appearance question, the grounded crop when its object is
    named in the question, else the raw image and its caption. Chosen on the dev split: showing every caption
    and crop added ~140 text tokens per question there without adding evidence."""

    name = "rule-v1"

    def probabilities(self, question: str, q_vec: np.ndarray, candidates: Sequence[Candidate]) -> np.ndarray:
        qw = _words(question)
        visual = bool(qw & VISUAL_CUES)
        # a question about the present state ("now", "currently") offers the image of a photo turn that names its
        # subject, cue words or not: "Look, my study, a minute ago" shows the new wall colour only in its photo,
        # and "What's the current name of the shop?" reads a sign (#43: answers visible in c3m's contexts, KU, photo
        # dev 48K 85 → 95 %, hard dev 48K 37.5 → 87.5 %; Support Recall and text tokens unchanged)
        subject = qw - VISUAL_CUES - STOP_WORDS if not visual and temporal_intent(question) == "now" else set()
        out = np.zeros((len(candidates), len(FORMS)))
        for i, c in enumerate(candidates):
            phrases = [r.crop_phrase or "" for n in c.nodes for r in c.perceptions.get(n.node_id, ()) if r.crop]
            named = any(_words(p) & qw for p in phrases)
            image_only = any(n.images and not n.text.strip() for n in c.nodes)
            caption = 0.8 if image_only else (0.55 if visual and not named else 0.2)
            raw_image = (0.4 if named else 0.7) if visual else 0.1
            if subject and any(n.images and _words(n.text) & subject for n in c.nodes):
                raw_image = 0.7
            crop = 0.8 if named else (0.3 if visual else 0.1)
            out[i] = (0.9, 0.7 if len(c.nodes) > 1 else 0.2, caption, raw_image, crop)
        return out * candidates_available(candidates)


def candidates_available(candidates: Sequence[Candidate]) -> np.ndarray:
    return np.stack([c.available() for c in candidates]).astype(float) if candidates else np.zeros((0, len(FORMS)))


# -- the paper's MLP -------------------------------------------------------------------------------------
#: per-memory scalars appended to [query emb; summary emb] by the v2 (PPO) selector, in this order. Why: a
#: unified-reader memory is one Raw Node whose "summary" vector is its text embedding, which says nothing
#: about what the memory can *show*; availability and the image-only flag tell the policy which forms exist
#: (a text-only turn has no image to choose), the retrieval score / query cosine / pool rank say how likely
#: the memory is evidence at all (what a form is worth), and the lexical overlaps of the question with the
#: crop phrase and the caption are what rule-v1 keys on (is the grounded object the one asked about?), and
#: the overlap with the memory's own text says whether the turn names what is asked.
SCALARS = ("score", "cos", "rank", "avail_raw_text", "avail_summary", "avail_caption", "avail_raw_image",
           "avail_grounded_crop", "image_only", "crop_named", "caption_overlap", "text_overlap", "visual_question",
           "text_len")


def memory_scalars(question: str, q_vec: np.ndarray, candidates: Sequence[Candidate], node_vecs: np.ndarray) -> np.ndarray:
    """[n, len(SCALARS)] float32 (see ``SCALARS``); ``node_vecs`` [n, dim] is each memory's summary vector."""
    qw = _words(question)
    visual = float(bool(qw & VISUAL_CUES))
    n = len(candidates)
    out = np.zeros((n, len(SCALARS)), np.float32)
    if not n:
        return out
    avail = candidates_available(candidates)
    cos = np.asarray(node_vecs, np.float32) @ np.asarray(q_vec, np.float32)
    rank = np.empty(n, np.float32)  # by retrieval score, not list position (order-independent)
    rank[np.argsort([-c.score for c in candidates], kind="stable")] = np.arange(n) / max(1, n - 1)
    for i, c in enumerate(candidates):
        recs = [r for nd in c.nodes for r in c.perceptions.get(nd.node_id, ())]
        phrases = _words(" ".join(r.crop_phrase or "" for r in recs if r.crop is not None))
        caption = _words(" ".join(r.caption for r in recs if r.caption))
        image_only = float(any(nd.images and not nd.text.strip() for nd in c.nodes))
        text_len = sum(len(nd.text) for nd in c.nodes)
        words = _words(" ".join(nd.text for nd in c.nodes))
        out[i] = (c.score, cos[i], rank[i], *avail[i], image_only, float(bool(phrases & qw)),
                  len(caption & qw) / max(1, len(qw)), len(words & qw) / max(1, len(qw)), visual,
                  np.log1p(text_len) / 8.0)
    return out


def _selector_net(in_dim: int, hidden: int):
    """The v2 network: a two-layer trunk with a policy head (five Bernoulli logits) and a value head (one
    number, used only by PPO as the baseline; inference never calls it)."""
    from torch import nn

    class _Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.trunk = nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
            self.pi = nn.Linear(hidden, len(FORMS))
            self.v = nn.Linear(hidden, 1)

        def forward(self, x):
            h = self.trunk(x)
            return self.pi(h), self.v(h).squeeze(-1)

    return _Net()


class MLPSelector:
    """HiVe-Mem's selector: an MLP on [query emb; summary emb] -> five inclusion probabilities, one forward pass
    for all memories. Weights come from ``training/`` (``save``/``load``); a fresh one is randomly initialised
    (seeded) for training.

    ``version="v2"`` is the PPO selector (``training/train_selector_ppo.py``): the input also holds the
    per-memory ``SCALARS`` and the net has a value head (training only); ``embeddings=False`` keeps only the
    scalars (no query/summary vectors: nothing split-specific to overfit to)."""

    def __init__(self, dim: int, hidden: int = 256, *, seed: int = 0, name: str = "mlp", version: str = "v1",
                 embeddings: bool = True):
        import torch
        from torch import nn

        torch.manual_seed(seed)
        self.dim, self.hidden, self.name, self.version = dim, hidden, name, version
        self.embeddings = embeddings or version == "v1"  # v2 may drop the two embeddings (scalars only)
        if version == "v1":
            self.net = nn.Sequential(nn.Linear(2 * dim, hidden), nn.ReLU(), nn.Linear(hidden, len(FORMS)))
        elif version == "v2":
            self.net = _selector_net(self.in_dim, hidden)
        else:
            raise ValueError(f"unknown selector version {version!r}")

    @property
    def in_dim(self) -> int:
        return 2 * self.dim * self.embeddings + (len(SCALARS) if self.version == "v2" else 0)

    def summary_vectors(self, candidates: Sequence[Candidate], vectors: Callable | None = None) -> np.ndarray:
        rows = []
        for c in candidates:
            s = c.summary_vec
            if s is None:
                s = np.mean(vectors(list(c.nodes)), axis=0) if vectors is not None else np.zeros(self.dim)
            rows.append(np.asarray(s, np.float32))
        return np.asarray(rows, np.float32).reshape(len(rows), self.dim)

    def features(self, q_vec: np.ndarray, candidates: Sequence[Candidate], vectors: Callable | None = None,
                 question: str = "") -> np.ndarray:
        s = self.summary_vectors(candidates, vectors)
        q = np.broadcast_to(np.asarray(q_vec, np.float32), (len(candidates), self.dim))
        parts = [q, s] if self.embeddings else []
        if self.version == "v2":
            parts.append(memory_scalars(question, q_vec, candidates, s))
        return np.concatenate(parts, axis=1).astype(np.float32).reshape(len(candidates), self.in_dim)

    def logits(self, x):
        out = self.net(x)
        return out[0] if isinstance(out, tuple) else out

    def probabilities(self, question: str, q_vec: np.ndarray, candidates: Sequence[Candidate],
                      vectors: Callable | None = None) -> np.ndarray:
        import torch

        if not candidates:
            return np.zeros((0, len(FORMS)))
        with torch.no_grad():
            x = torch.from_numpy(self.features(q_vec, candidates, vectors, question))
            p = torch.sigmoid(self.logits(x)).numpy()
        return p.astype(float) * candidates_available(candidates)

    def save(self, path: str | Path, meta: Mapping | None = None) -> None:
        import torch

        torch.save({"state_dict": self.net.state_dict(), "dim": self.dim, "hidden": self.hidden,
                    "version": self.version, "embeddings": self.embeddings, "meta": dict(meta or {})}, path)

    @classmethod
    def load(cls, path: str | Path, name: str | None = None) -> "MLPSelector":
        import torch

        blob = torch.load(path, map_location="cpu", weights_only=True)
        sel = cls(int(blob["dim"]), int(blob["hidden"]), name=name or f"mlp:{Path(path).name}",
                  version=blob.get("version", "v1"), embeddings=bool(blob.get("embeddings", True)))
        sel.net.load_state_dict(blob["state_dict"])
        sel.net.eval()
        sel.meta = dict(blob.get("meta", {}))
        return sel


#: the shipped PPO selector (``training/train_selector_ppo.py``; card: ``c3m/models/weights/SELECTOR_PPO_CARD.md``)
PPO_WEIGHTS = Path(__file__).resolve().parents[1] / "models" / "weights" / "selector_ppo.pt"
SELECTORS = ("rule", "ppo", "mlp:PATH", "mlp-init:SEED")


def is_selector_name(name: str) -> bool:
    """Whether ``make_selector`` knows this name's form (weights files are checked when it is built)."""
    return (name in ("rule", "ppo") or name.startswith("mlp:")
            or (name.startswith("mlp-init:") and name[9:].isdigit()))


def make_selector(name: str = "rule", *, dim: int = 384) -> Selector:
    """``rule`` (rule-v1), ``ppo`` (the shipped PPO weights, ``PPO_WEIGHTS``), ``mlp:PATH`` (trained weights),
    ``mlp-init:SEED`` (the untrained MLP PPO starts from: a floor to measure the learned selector against,
    never a default)."""
    from ..errors import InvalidInput

    if name == "rule":
        return RuleSelector()
    if name.startswith("mlp-init:") and name.split(":", 1)[1].isdigit():
        seed = int(name.split(":", 1)[1])
        return MLPSelector(dim, seed=seed, name=f"mlp-init:{seed}")
    if name == "ppo":
        if not PPO_WEIGHTS.is_file():
            raise InvalidInput("selector", f"no shipped PPO selector weights at {PPO_WEIGHTS}",
                               fix="train them with training/train_selector_ppo.py (it writes that file), "
                                   "or use selector='rule'")
        sel = MLPSelector.load(PPO_WEIGHTS, name="ppo")
        if sel.dim != dim:
            raise InvalidInput("selector", f"the PPO selector was trained on {sel.dim}-d text vectors, the text "
                               f"embedder gives {dim}-d", fix="use the MiniLM text embedder, or selector='rule'")
        return sel
    if name.startswith("mlp:"):
        path = Path(name[4:])
        if not path.is_file():
            raise InvalidInput("selector", f"no selector weights at {path}",
                               fix="train them with training/train_selector_ppo.py, or use selector='rule'")
        return MLPSelector.load(path)
    raise InvalidInput("selector", f"unknown selector {name!r}", fix=f"choose one of {SELECTORS}")


# -- composition -----------------------------------------------------------------------------------------
#: how far below a newer, better-ranked node about the same subject an older photo turn's value is capped (relative)
PRECEDENCE_GAP = 1e-3
#: the views whose words say what a node is about (the precedence rule's subject): its text and its caption
_WORDED = (EvidenceForm.RAW_TEXT, EvidenceForm.CAPTION)
#: near-duplicate texts: token-set Jaccard at least this, both texts with at least ``NEAR_MIN_TERMS`` distinct terms
#: (one term in ten may differ; shorter texts must repeat exactly, so "the sign is red now" and "... blue now" differ)
NEAR_JACCARD = 0.9
NEAR_MIN_TERMS = 4
_TERM = re.compile(r"\w+")


def text_key(text: str) -> tuple[str, ...]:
    """A text's normalised form: its case-folded word sequence (spacing and punctuation ignored); a text with no
    word characters is its stripped self."""
    terms = tuple(_TERM.findall(text.casefold()))
    return terms if terms else (text.strip(),)


class _Shown:
    """What the composition has valued so far (module docstring, "Duplicates add nothing twice"): normalised texts,
    the term sets of the longer ones (near duplicates), and image / crop sha256s. Keys are ("t", text_key) or
    ("i", sha256)."""

    def __init__(self):
        self.keys: set = set()
        self.term_sets: list[frozenset[str]] = []

    def is_new(self, keys) -> bool:
        """Whether any of a view's keys is not shown yet (a view of several images is new if one image is)."""
        return any(self._new(k) for k in keys)

    def _new(self, key) -> bool:
        if key in self.keys:
            return False
        if key[0] != "t":
            return True
        a = frozenset(key[1])
        if len(a) < NEAR_MIN_TERMS:
            return True
        for b in self.term_sets:
            small, large = sorted((len(a), len(b)))
            if small < NEAR_JACCARD * large:  # Jaccard ≤ small / large: cannot reach the bar
                continue
            inter = len(a & b)
            if inter >= NEAR_JACCARD * (len(a) + len(b) - inter):
                return False
        return True

    def claim(self, keys) -> None:
        for k in keys:
            if k not in self.keys:
                self.keys.add(k)
                if k[0] == "t" and len(set(k[1])) >= NEAR_MIN_TERMS:
                    self.term_sets.append(frozenset(k[1]))


@dataclass
class _Item:
    mem: int
    form: EvidenceForm
    node: RawNode
    text: str
    images: tuple
    value: float
    tokens: int
    group: int           # raw forms: the node's group (its Raw-Node slot is charged once); derived: -1
    image_tokens: int = 0


@dataclass
class Plan:
    """A composition up to the budget solve: what ``compose_plan`` offered, for ``compose_finish`` to complete
    once the solver (one batched call for many questions) has chosen."""

    question: str
    budget: ReaderBudget
    candidates: list
    items: list
    all_nodes: list
    trace: RouteTrace
    selector_name: str
    n_groups: int = 0
    duplicates: int = 0  # nodes that showed nothing new (module docstring) and were offered no item


def compose(question: str, q_vec: np.ndarray, candidates: Sequence[Candidate], budget: ReaderBudget,
            cfg: ComposeConfig = ComposeConfig(), *, selector: Selector, vectors: Callable, count: Callable[[str], int],
            trace: RouteTrace, device: str = "cpu") -> Context:
    """Choose (memory, form) items under ``budget`` and return the Context (items in time order). ``vectors(nodes)``
    gives the nodes' shared embeddings; ``trace`` carries the read path's routing (pages, entries), and is
    completed here (pool, selected nodes, what the budget dropped). ``device``: the memory's device, where the
    solve runs (``read.select.solve_many``)."""
    from .select import solve_many

    plan = compose_plan(question, q_vec, candidates, budget, cfg, selector=selector, vectors=vectors, count=count,
                        trace=trace)
    if isinstance(plan, Context):
        return plan
    inst = solve_instance(plan, cfg)
    return compose_finish(plan, solve_many([inst], device=device)[0] if inst is not None else np.zeros(0, bool))


def compose_plan(question: str, q_vec: np.ndarray, candidates: Sequence[Candidate], budget: ReaderBudget,
                 cfg: ComposeConfig = ComposeConfig(), *, selector: Selector, vectors: Callable,
                 count: Callable[[str], int], trace: RouteTrace) -> "Plan | Context":
    """Everything ``compose`` does before the solver: the selector's forms and the priced items (or the empty
    Context when nothing was retrieved)."""
    candidates = [c for c in candidates if c.nodes]
    if not candidates:
        return Context(question, (), BudgetUse(), budget, replace(trace, notes=trace.notes + ("nothing retrieved",)))
    if isinstance(selector, MLPSelector):
        probs = selector.probabilities(question, q_vec, candidates, vectors)
    else:
        probs = selector.probabilities(question, q_vec, candidates)
    enabled = np.array([f in cfg.forms for f in FORM_NAMES], dtype=float)
    offer = (probs >= cfg.threshold) & (enabled > 0) & candidates_available(candidates).astype(bool)
    all_nodes = list(dict.fromkeys(n for c in candidates for n in c.nodes))
    V = vectors(all_nodes)
    cos = {n.node_id: float(v @ q_vec) for n, v in zip(all_nodes, V)}
    slot: dict[str, int] = {}
    items: list[_Item] = []
    itok = lambda ims: sum(image_tokens(im.width, im.height, cfg.image_token_model) for im in ims)  # noqa: E731

    def add(m, form, node, text, images, value, tok, itoks=0):
        raw = form in (EvidenceForm.RAW_TEXT, EvidenceForm.RAW_IMAGE)
        group = slot.setdefault(node.node_id, len(slot)) if raw else -1
        items.append(_Item(m, form, node, text, tuple(images), value, tok, group, itoks))

    # every (memory, live node) with the views offered for it: (form, text, images, image tokens, claim keys)
    shown: list[tuple[float, int, int, RawNode, float, list]] = []
    for m, c in enumerate(candidates):
        o = offer[m]
        anchor = next((n for n in c.nodes if not n.redacted), None)  # a summary cites its first live node
        if o[1] and anchor is not None:  # a memory-level derived view: valued as its form, not as a node
            tok = count(c.summary) if c.summary else 0
            value = probs[m, 1] * FORM_WEIGHTS[EvidenceForm.SUMMARY] * (1.0 + max(-1.0, c.score))
            value -= cfg.lam_tokens * tok / 1000.0
            if value > 0:
                add(m, EvidenceForm.SUMMARY, anchor, c.summary, (), value, tok)
        for n in c.nodes:
            if n.redacted:
                continue
            rel = 1.0 + max(-1.0, cfg.node_weight * cos[n.node_id] + (1 - cfg.node_weight) * c.score)
            recs = list(c.perceptions.get(n.node_id, ()))
            views = []
            if o[0] and n.text.strip():
                views.append((EvidenceForm.RAW_TEXT, n.text, (), 0, [("t", text_key(n.text))]))
            if o[2] and any(r.caption for r in recs):
                cap = " ".join(f"[image: {r.caption}]" for r in recs if r.caption)
                views.append((EvidenceForm.CAPTION, cap, (), 0, [("t", text_key(cap))]))
            if o[3] and n.images:
                views.append((EvidenceForm.RAW_IMAGE, "", n.images, itok(n.images), [("i", im.sha256) for im in n.images]))
            for r in recs:
                if o[4] and r.crop is not None:
                    views.append((EvidenceForm.GROUNDED_CROP, f"[crop: {r.crop_phrase or 'object'}]", (r.crop,),
                                  itok((r.crop,)), [("i", r.crop.sha256)]))
            if views:
                shown.append((rel, m, len(shown), n, rel, views))  # rel: the node's base (rank-derived) value
    seen = _Shown()
    duplicates = 0
    # the precedence rule's subject terms: only needed when some node offers an image view
    imaged = any(v[0] is not EvidenceForm.RAW_TEXT for s in shown for v in s[5])
    current = imaged and temporal_intent(question) == "now"
    subject = _words(question) - VISUAL_CUES - STOP_WORDS if current else frozenset()
    valued: list[tuple[float, RawNode, frozenset, list]] = []  # (total, node, subject terms, priced items), by base
    for base, m, _, n, rel, views in sorted(shown, key=lambda s: (-s[0], s[2])):
        new = [seen.is_new(v[4]) for v in views]
        if not any(new):  # everything it would show is already valued: no item, no slot
            duplicates += 1
            continue
        for v in views:
            seen.claim(v[4])
        image_new = any(f and v[0] is not EvidenceForm.RAW_TEXT for v, f in zip(views, new))
        priced = []
        for v, fresh in zip(views, new):
            if not fresh and v[0] is not EvidenceForm.RAW_TEXT:
                continue  # an image, caption or crop already shown by a better node adds nothing
            tok = count(v[1]) if v[1] else 0
            value = probs[m, FORMS.index(v[0])] * FORM_WEIGHTS[v[0]] * rel - cfg.lam_tokens * (tok + v[3]) / 1000.0
            if value > 0:  # else λ·cost outweighs what the form is worth: never offered
                priced.append([v, tok, value])
        if not priced:
            continue
        total = sum(r[2] for r in priced)
        # precedence: an older node is never worth more than a newer, better-ranked node about the same subject
        terms = frozenset(_words(" ".join(v[1] for v in views if v[0] in _WORDED)) & subject) if subject else frozenset()
        if image_new and terms:
            cap = min((t for t, other, o_terms, _ in valued if other.time > n.time and o_terms & terms),
                      default=math.inf)
            if total >= cap:
                scale = cap * (1.0 - PRECEDENCE_GAP) / total
                for r in priced:
                    r[2] *= scale
                total *= scale
        valued.append((total, n, terms, priced))
        for v, tok, value in priced:
            add(m, v[0], n, v[1], v[2], value, tok, v[3])
    return Plan(question, budget, candidates, items, all_nodes, trace, selector.name, len(slot), duplicates)


def compose_finish(plan: Plan, chosen_mask: np.ndarray) -> Context:
    """The Context from a plan and the solver's choice over its items."""
    items, trace, budget = plan.items, plan.trace, plan.budget
    chosen = [i for i in range(len(items)) if len(chosen_mask) and chosen_mask[i]]
    chosen_set = set(chosen)
    picked = [items[i] for i in chosen]
    picked.sort(key=lambda it: (it.node.time, it.node.session_id, it.node.turn_index, FORMS.index(it.form)))
    ctx_items = tuple(ContextItem(it.node.node_id, it.node.provenance, it.node.role, it.form, it.text, it.images,
                                  round(it.value, 4), it.tokens) for it in picked)
    raw = {it.node.node_id for it in picked if it.group >= 0}
    use = BudgetUse(len({p for p, _ in trace.pages}), len(raw), len({im.sha256 for it in picked for im in it.images}),
                    sum(it.tokens for it in picked))
    forms = {f.value: sum(it.form is f for it in picked) for f in FORMS}
    dropped = tuple(dict.fromkeys(items[i].node.node_id for i in range(len(items)) if i not in chosen_set))
    all_nodes = plan.all_nodes
    trace = replace(
        trace,
        candidates=tuple((c.memory_id, round(c.score, 4)) for c in plan.candidates),
        pool=tuple(n.node_id for n in all_nodes),
        expanded_nodes=trace.expanded_nodes or tuple(n.node_id for n in all_nodes),
        expanded_images=tuple(im.sha256 for n in all_nodes for im in n.images),
        selected_nodes=tuple(dict.fromkeys(it.node.node_id for it in picked)),
        covered_sessions=tuple(dict.fromkeys(it.node.session_id for it in picked)),
        dropped_for_budget=dropped,
        scored=trace.scored or len(all_nodes),
        notes=trace.notes + (f"selector {plan.selector_name}: " + ", ".join(f"{k} {v}" for k, v in forms.items() if v),)
        + ((f"{plan.duplicates} turns repeat what a better-valued turn shows: no item",) if plan.duplicates else ()),
    )
    return Context(plan.question, ctx_items, use, budget, trace)


def solve_instance(plan: Plan, cfg: ComposeConfig):
    """The plan's solver instance (``read.select.SolveInstance``, coverage mode): raw forms of one node share its Raw-Node slot (a group
    charged once); pages are charged by routing, not here. None when nothing was offered."""
    from .select import RAW_NODE, SolveInstance, cost_row

    items = plan.items
    if not items:
        return None
    sessions = sorted({it.node.session_id for it in items})
    cover = np.zeros((len(items), len(sessions)), dtype=bool)
    for i, it in enumerate(items):
        cover[i, sessions.index(it.node.session_id)] = True
    return SolveInstance(np.array([it.value for it in items], np.float64),
                         np.array([cost_row(images=len(it.images), tokens=it.tokens) for it in items],
                                  dtype=np.float64),
                         np.array([it.group for it in items], dtype=np.int64),
                         np.tile(np.array(RAW_NODE, dtype=np.float64), (max(1, plan.n_groups), 1)),
                         cover, np.array(plan.budget.as_tuple(), dtype=np.float64), cfg.lam_cov)
