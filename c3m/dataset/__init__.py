"""Datasets in the c3m format (docs/architecture.md, Formats): a folder with ``episodes.jsonl`` and the images it names."""
from .format import (
    EPISODES,
    ImageLimits,
    history_from_dict,
    history_to_dict,
    iter_histories,
    load_dataset,
    validate_dataset,
    write_dataset,
)

__all__ = [
    "EPISODES",
    "ImageLimits",
    "history_from_dict",
    "history_to_dict",
    "iter_histories",
    "load_dataset",
    "validate_dataset",
    "write_dataset",
]
