"""Configuration: plain dataclasses with the papers' defaults, loadable from TOML (or YAML if installed).

Example ``c3m.toml``::

    method = "c3m"
    text_embedder = "auto"
    [write_budget]
    entries = 36
    [reader_budget]
    raw_nodes = 12
    text_tokens = 12288
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from .errors import InvalidInput
from .types import ReaderBudget, WriteBudget

DEFAULT_METHOD = "c3m"
_STR_FIELDS = ("method", "text_embedder", "token_counter", "answerer", "perception", "image_embedder",
               "image_token_model", "device")


@dataclass(frozen=True)
class MemoryConfig:
    method: str = DEFAULT_METHOD
    text_embedder: str = "auto"
    token_counter: str = "auto"
    answerer: str = "extractive"
    #: write-time perception backend (captions, visual anchors, grounded crops -> derived records):
    #: ``none``, ``oracle:DATASET`` (synthetic ground truth, labelled), ``scene-encoder`` (synthetic domain
    #: only), ``local:PATH`` (a transformers VLM folder), ``api`` (an OpenAI-compatible endpoint)
    perception: str = "none"
    #: image vectors for RAMU's text–image agreement: ``none``, ``scene-encoder``, ``local:PATH`` (CLIP/SigLIP)
    image_embedder: str = "none"
    #: how the harness and the reader price an image in tokens (``c3m.models.tokens.image_tokens``)
    image_token_model: str = "qwen2-vl"
    write_budget: WriteBudget = field(default_factory=WriteBudget)
    reader_budget: ReaderBudget = field(default_factory=ReaderBudget)
    max_image_bytes: int = 20 * 1024 * 1024
    #: longest turn text accepted (characters); a longer turn is refused with a clear error, never stored unreadable
    max_turn_chars: int = 100_000
    method_options: dict[str, Any] = field(default_factory=dict)
    #: where the write and read paths run their kernels (RAMU's candidate scoring, routing, anchor expansion, the
    #: reader-budget solver): ``cpu`` (numpy + numba) or a torch CUDA device such as ``cuda`` / ``cuda:1`` (Triton)
    device: str = "cpu"

    def __post_init__(self):
        for name in _STR_FIELDS:
            if not isinstance(getattr(self, name), str):
                raise InvalidInput(name, f"must be a string, got {getattr(self, name)!r}",
                                   fix=f'e.g. {name} = "{getattr(MemoryConfig, name, "auto")}"')
        if not isinstance(self.max_image_bytes, int) or isinstance(self.max_image_bytes, bool) or self.max_image_bytes <= 0:
            raise InvalidInput("max_image_bytes", f"must be a positive integer, got {self.max_image_bytes!r}",
                               fix="e.g. max_image_bytes = 20971520")
        if not isinstance(self.method_options, dict):
            raise InvalidInput("method_options", f"must be a table, got {self.method_options!r}",
                               fix="e.g. [method_options] key = value")
        for name, typ in (("write_budget", WriteBudget), ("reader_budget", ReaderBudget)):
            if not isinstance(getattr(self, name), typ):
                raise InvalidInput(name, f"must be a {typ.__name__}, got {getattr(self, name)!r}",
                                   fix=f"pass {typ.__name__}(...) (a [{name}] table in a config file)")
        if not isinstance(self.max_turn_chars, int) or isinstance(self.max_turn_chars, bool) or self.max_turn_chars <= 0:
            raise InvalidInput("max_turn_chars", f"must be a positive integer, got {self.max_turn_chars!r}",
                               fix="e.g. max_turn_chars = 100000")
        if not isinstance(self.device, str) or not (self.device == "cpu" or self.device.startswith("cuda")):
            raise InvalidInput("device", f"unknown device {self.device!r}", fix="use 'cpu', 'cuda' or 'cuda:N'")

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, source: str = "config") -> "MemoryConfig":
        known = {f.name for f in fields(cls)}
        unknown = {str(k) for k in data if k not in known}  # YAML allows non-string keys (1: 2)
        if unknown:
            raise InvalidInput(sorted(unknown)[0], "unknown configuration key", source=source,
                               fix=f"use only {sorted(known)}")
        kwargs = dict(data)
        for key, typ in (("write_budget", WriteBudget), ("reader_budget", ReaderBudget)):
            if key in kwargs:
                sub = kwargs[key]
                allowed = {f.name for f in fields(typ)}
                if not isinstance(sub, dict) or set(sub) - allowed:
                    raise InvalidInput(key, f"must be a table with keys from {sorted(allowed)}", source=source,
                                       fix=f"e.g. [{key}] {sorted(allowed)[0]} = 1")
                kwargs[key] = typ(**sub)
        return cls(**kwargs)

    @classmethod
    def load(cls, path: str | Path) -> "MemoryConfig":
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidInput("--config", f"cannot read {path}: {exc}",
                               fix="pass a UTF-8 TOML (.toml) or YAML (.yaml) file with MemoryConfig fields") from None
        if path.suffix in (".yaml", ".yml"):
            try:
                import yaml
            except ImportError as exc:
                raise InvalidInput("config", "YAML needs PyYAML", source=str(path),
                                   fix="pip install pyyaml, or write the config as TOML") from exc
            try:
                data = yaml.safe_load(text) or {}
            except RecursionError:
                raise InvalidInput("(file)", "is nested too deeply to be a config", source=str(path),
                                   fix="write key: value pairs, at most a few levels deep") from None
            except yaml.YAMLError as exc:
                mark = getattr(exc, "problem_mark", None)
                raise InvalidInput("(file)", f"is not valid YAML: {getattr(exc, 'problem', None) or exc}",
                                   source=str(path), line=mark.line + 1 if mark is not None else None,
                                   fix="check the indentation and quoting on that line") from None
        else:
            try:
                data = tomllib.loads(text)
            except tomllib.TOMLDecodeError as exc:  # its message already ends "(at line L, column C)"
                raise InvalidInput("(file)", f"is not valid TOML: {exc}", source=str(path),
                                   fix="quote strings, one key = value per line (see README, config files)") from None
            except RecursionError:  # tomllib recurses once per nested array/table
                raise InvalidInput("(file)", "is nested too deeply to be a config", source=str(path),
                                   fix="write key = value pairs, at most a few levels deep") from None
        if not isinstance(data, dict):
            raise InvalidInput("(file)", f"holds a {type(data).__name__}, not a table of settings", source=str(path),
                               fix="write key = value pairs (TOML) or key: value (YAML)")
        return cls.from_dict(data, source=str(path))

    def with_(self, **changes: Any) -> "MemoryConfig":
        return replace(self, **changes)
