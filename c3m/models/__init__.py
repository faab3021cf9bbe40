"""Model backends behind small protocols (TextEmbedder, TokenCounter, Answerer).

Only what the foundation needs lives here today: the packaged MiniLM embedder, a hashing fallback, a
tokenizer-based token counter and an extractive answerer. ``make_*`` pick a backend by name;
``auto`` prefers the packaged model and falls back, saying why, when it is not installed.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from .answer import ExtractiveAnswerer
from .base import Answerer, TextEmbedder, TokenCounter
from .hashing import HashingEmbedder
from .tokens import ApproxTokenCounter, HFTokenCounter

log = logging.getLogger(__name__)
TEXT_EMBEDDERS = ("auto", "minilm", "hashing")
TOKEN_COUNTERS = ("auto", "minilm", "approx")
ANSWERERS = ("extractive",)


def make_text_embedder(name: str = "auto") -> TextEmbedder:
    if name == "hashing":
        return HashingEmbedder()
    if name in ("auto", "minilm"):
        try:
            from .minilm import MiniLMEmbedder

            return MiniLMEmbedder()
        except ImportError as exc:
            if name == "minilm":
                raise
            log.warning("text embedder 'minilm' unavailable (%s); using 'hashing'", exc)
            return HashingEmbedder()
    raise ValueError(f"unknown text embedder {name!r}; choose one of {TEXT_EMBEDDERS}")


def make_token_counter(name: str = "auto") -> TokenCounter:
    if name == "approx":
        return ApproxTokenCounter()
    if name in ("auto", "minilm"):
        try:
            from .minilm import packaged_model_path

            return HFTokenCounter(packaged_model_path() / "tokenizer.json", name="minilm-wordpiece")
        except ImportError as exc:
            if name == "minilm":
                raise
            log.info("MiniLM tokenizer unavailable (%s); counting tokens with the 'approx' heuristic", exc)
            return ApproxTokenCounter()
    raise ValueError(f"unknown token counter {name!r}; choose one of {TOKEN_COUNTERS}")


def make_answerer(name: str = "extractive") -> Answerer:
    if name == "extractive":
        return ExtractiveAnswerer()
    raise ValueError(f"unknown answerer {name!r}; choose one of {ANSWERERS}")


@dataclass
class Models:
    """The backends one Memory uses; build once and share (they hold loaded weights)."""

    text_embedder: TextEmbedder
    token_counter: TokenCounter
    answerer: Answerer

    @classmethod
    def from_names(cls, text_embedder: str = "auto", token_counter: str = "auto", answerer: str = "extractive"):
        return cls(make_text_embedder(text_embedder), make_token_counter(token_counter), make_answerer(answerer))


__all__ = ["Answerer", "ApproxTokenCounter", "ExtractiveAnswerer", "HFTokenCounter", "HashingEmbedder", "Models",
           "TextEmbedder", "TokenCounter", "make_answerer", "make_text_embedder", "make_token_counter"]
