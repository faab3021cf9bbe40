"""What every process of an evaluation sets up for itself: its share of the cores and its loaded models.

The harness's own process loads models to measure (token counts, the perception backend's name); each method
process (``c3m.eval.sandbox``) loads its own, so no method shares a model object or a memo with another.
"""
from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from ..config import MemoryConfig


@lru_cache(maxsize=4)
def _models(text_embedder: str, token_counter: str, answerer: str, perception: str = "none",
            image_embedder: str = "none"):
    """One set of loaded models per worker process (the oracle's scene table is read here, before any guarded
    write phase; its outputs are pure functions of the image bytes)."""
    from ..models import Models
    from ..models.memo import MemoEmbedder, MemoExtractor

    models = Models.from_names(text_embedder=text_embedder, token_counter=token_counter, answerer=answerer,
                               perception=perception, image_embedder=image_embedder)
    models.text_embedder = MemoEmbedder(models.text_embedder, max_items=200_000)  # shared across histories
    if models.perception is not None:  # the same derived records for every method's store (pure functions)
        models.perception = MemoExtractor(models.perception, max_items=200_000)
    return models


#: thread-pool variables read by BLAS / OpenMP libraries that load after a worker starts
THREAD_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS")


def _init_worker(threads: int) -> None:
    """Give each worker its share of the cores, once for the process: oversubscribed BLAS / OpenMP threads spin
    against each other (MiniLM fell from ~125 to ~6 texts/s with 2 threads per process on a busy 2-core machine,
    and a 36x36 sgemm in RAMU's candidate search took ~7 ms instead of microseconds).

    The environment variables only reach libraries loaded later: the forkserver that starts the workers has
    already imported numpy (the CLI imports it), so its OpenBLAS pool is sized for every core. threadpoolctl
    resizes the pools already loaded; torch's own pool is set through torch when torch is already loaded (a torch
    imported later reads ``OMP_NUM_THREADS``; importing it here would cost a method process that never uses it
    about 1.3 s)."""
    import sys

    for var in THREAD_ENV:
        os.environ[var] = str(threads)
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=threads)
    except ImportError:  # a core install without threadpoolctl: the environment variables are all there is
        pass
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(threads)


def resolve_perception(name: str, dataset_root: str | Path) -> str:
    """``oracle`` means the oracle of the dataset being replayed."""
    return f"oracle:{Path(dataset_root).resolve()}" if name == "oracle" else name


def load_models(config: MemoryConfig):
    """The models a config names, loaded once per process (``_models``): the harness's own, for measuring, and
    in each method process that method's own (``c3m.eval.sandbox``)."""
    return _models(config.text_embedder, config.token_counter, config.answerer, config.perception,
                   config.image_embedder)
