"""Converters from public memory benchmarks into the c3m dataset format (docs/architecture.md, Formats).

Each converter reads the benchmark's own JSON file and writes a dataset folder with
``write_dataset`` (so the output always validates), returning a ``ConversionSummary`` of what was
converted and what was dropped. Mapping decisions are documented in each module's docstring.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from ...errors import InvalidInput
from .common import ConversionSummary
from .locomo import convert_locomo
from .longmemeval import convert_longmemeval
from .memlens import convert_memlens

#: benchmark name -> converter(src, out) -> ConversionSummary
LOADERS: dict[str, Callable[[str | Path, str | Path], ConversionSummary]] = {
    "locomo": convert_locomo,
    "longmemeval": convert_longmemeval,
    "memlens": convert_memlens,
}
SUMMARY_FILE = "conversion.json"


def convert(kind: str, src: str | Path, out: str | Path) -> Path:
    """Convert ``src`` (a ``kind`` benchmark file) into the dataset folder ``out`` and return it.

    The summary is also written to ``out/conversion.json`` so what was dropped stays on record next to
    the data (the dataset reader ignores the file).
    """
    if kind not in LOADERS:
        raise InvalidInput("kind", f"unknown benchmark {kind!r}", fix=f"use one of {', '.join(LOADERS)}")
    summary = LOADERS[kind](src, out)
    (Path(out) / SUMMARY_FILE).write_text(json.dumps(summary.to_dict(), indent=2) + "\n", encoding="utf-8")
    return Path(out)


__all__ = ["LOADERS", "SUMMARY_FILE", "ConversionSummary", "convert", "convert_locomo", "convert_longmemeval",
           "convert_memlens"]
