"""The evaluation harness: methods × datasets, parallel over histories, resumable, rank-aware.

Layout of an output folder::

    OUT/results/<method>/<length>[.rank<r>].jsonl   one HistoryResult per line (appended, fsynced)
    OUT/stores/<method>/<length>/<history>/         the Cold Store each history was replayed into
    OUT/report.md, OUT/metrics.json, OUT/*.png      written by ``report.write_report``

A killed run continues where it stopped: finished histories are read back from the results files, an
unfinished history's store is wiped and replayed from its first session. Under ``torchrun`` (``RANK``
and ``WORLD_SIZE`` set) each rank takes every WORLD_SIZE-th history and writes its own results file.
"""
from __future__ import annotations

import json
import os
import re
import shutil
from concurrent.futures import as_completed
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

from ..config import MemoryConfig
from ..errors import InvalidInput
from ..types import History, ReaderBudget
from .metrics import ROUTE_POOL
from .runtime import load_models, resolve_perception
from .replay import HistoryResult, replay_history

LENGTH_BUCKETS = {"32k": 32_000, "64k": 64_000, "128k": 128_000}


def dataset_length(dataset: Path, histories: list[History]) -> str:
    """The dataset's history-length label: its manifest's, else measured text tokens (approx counter)."""
    manifest = dataset / "manifest.json"
    if manifest.is_file():
        length = json.loads(manifest.read_text()).get("length")
        if isinstance(length, int) and length > 0:
            return f"{length // 1000}k" if length % 1000 == 0 else str(length)
        if length:
            return str(length).lower()
    from ..models.tokens import ApproxTokenCounter

    count = ApproxTokenCounter().count
    mean = sum(count(t.text) for h in histories for s in h.sessions for t in s.turns) / max(1, len(histories))
    return f"{max(1, round(mean / 1000))}k"


def _read_results(path: Path) -> list[HistoryResult]:
    """Results already on disk; a torn last line (killed mid-write) is ignored."""
    out = []
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                out.append(HistoryResult.from_dict(json.loads(line)))
            except (json.JSONDecodeError, TypeError, KeyError):
                continue
    return out


def _append(path: Path, result: HistoryResult) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    torn = path.is_file() and path.stat().st_size and not path.read_bytes().endswith(b"\n")
    with path.open("a", encoding="utf-8") as fh:
        fh.write(("\n" if torn else "") + json.dumps(result.to_dict(), sort_keys=True) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


@lru_cache(maxsize=2)
def _hidden_gold(root: str):
    """The dataset's hidden gold (support items, scene graphs) when it has one: read once per worker, and only
    when asked — after a history's write phase (``replay_history``'s ``gold``)."""
    from .evidence import HiddenGold

    hidden = Path(root) / "_hidden"
    if not ((hidden / "questions.jsonl").is_file() and (hidden / "scenes.jsonl").is_file()):
        return None
    return HiddenGold(root)


@lru_cache(maxsize=4)
def _judge(name: str | None):
    from ..models import make_judge

    return make_judge(name) if name else None


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def method_spec(spec: str) -> tuple[str, dict]:
    """``"c3m:reader=c3m,expansion=false"`` -> ("c3m", {"reader": "c3m", "expansion": False}): a method variant
    (an ablation) is a name plus option values, reported under the whole spec."""
    name, _, rest = spec.partition(":")
    options: dict = {}
    for part in filter(None, rest.split(",")):
        key, eq, value = part.partition("=")
        if not eq:
            raise InvalidInput("methods", f"variant {spec!r}: {part!r} is not key=value",
                               fix="write variants as name:key=value,key=value, e.g. c3m:expansion=false")
        low = value.strip().lower()
        options[key.strip()] = (True if low == "true" else False if low == "false" else
                                int(low) if low.lstrip("-").isdigit() else
                                float(low) if low.replace(".", "", 1).lstrip("-").isdigit() else value.strip())
    return name, options


def _read_only_variants(methods: list[str]) -> dict[str, str]:
    """{spec: base spec} for every spec whose options beyond its base's are all read-only for its method
    (``MemoryMethod.read_options``) and whose base spec — the same name and write options — is also run."""
    from ..methods import method_class

    out = {}
    parsed = {m: method_spec(m) for m in methods}
    for spec, (name, options) in parsed.items():
        try:
            read_only = method_class(name).read_options
        except InvalidInput:  # unknown names fail later, with the registry's message
            continue
        write = {k: v for k, v in options.items() if k not in read_only}
        if write == options:
            continue
        for base, (bname, boptions) in parsed.items():
            if base != spec and bname == name and boptions == write:
                out[spec] = base
                break
    return out


def _run_job(history: History, store: str, config: MemoryConfig, budget: ReaderBudget | None, length: str,
             guard: tuple[str, ...], judge: str | None, variants: tuple, answer: bool, threads: int,
             route_pool: int) -> list[HistoryResult]:
    """One method on one history: its own process writes and reads (``replay_history``); scored here."""
    shutil.rmtree(store, ignore_errors=True)  # unfinished before: start this history from scratch
    config = replace(config, perception=resolve_perception(config.perception, guard[0]))
    out = replay_history(history, store, config=config, models=load_models(config), budget=budget, length=length,
                         guard_paths=guard, judge=_judge(judge), variants=variants, answer=answer, threads=threads,
                         route_pool=route_pool, gold=lambda: _hidden_gold(guard[0]))
    return out if isinstance(out, list) else [out]


def run_eval(datasets: list[str | Path], methods: list[str], out: str | Path, *, config: MemoryConfig | None = None,
             budget: ReaderBudget | None = None, workers: int = 1, progress: bool = True,
             limit: int | None = None, judge: str | None = None, perception: str | None = None,
             answer: bool = True, route_pool: int = ROUTE_POOL) -> dict[str, dict[str, list[HistoryResult]]]:
    """Replay every history of every dataset through every method; returns {method: {length: results}}.

    Each (method, history) runs in a process of its own that is handed one session at a time and then the
    questions' texts, and never the answers, the evidence or another method's models (``c3m.eval.sandbox``); it
    cannot reach the dataset folder or ``out`` beyond its own store (``c3m.eval.guard``). This process keeps the
    gold and scores what comes back. ``workers`` method processes run at once (each with its share of the cores).

    ``answer`` (default): the configured answerer answers every question in the method's process, scored here
    (token F1, exact match, selective accuracy, refusals, mark errors); ``answer=False`` skips it for speed.
    With ``judge`` (``em``, ``f1``, ``api``) the judge also scores each answer (``judged_acc``). ``perception``
    (``none``, ``oracle`` = the replayed dataset's hidden scene graphs, ``scene-encoder``, ``local:PATH``,
    ``api``) overrides ``config.perception``: the write path's perception backend for every method (captions,
    visual anchors, grounded crops as derived records), whose captions a text-only answerer also reads for
    context images that carry none (charged). ``route_pool``: Route-Hit counts the first this many pool ids."""
    from concurrent.futures import ThreadPoolExecutor

    from tqdm import tqdm

    from ..dataset import load_dataset

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    config = config or MemoryConfig()
    if perception is not None:
        config = replace(config, perception=perception)
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    suffix = f".rank{rank}" if world > 1 else ""
    threads = max(1, (os.cpu_count() or 1) // max(1, workers))
    everything: dict[str, dict[str, list[HistoryResult]]] = {}
    jobs: list[tuple[list, tuple]] = []  # (result tags, _run_job arguments)
    for ds in map(Path, datasets):
        histories = load_dataset(ds)[:limit]
        length = dataset_length(ds if ds.is_dir() else ds.parent, histories)
        root = (ds if ds.is_dir() else ds.parent).resolve()
        guard = (str(root), str(out.resolve()))
        pending: dict[str, list[str]] = {}  # spec -> histories it still needs
        for method in methods:
            res_file = out / "results" / _safe(method) / f"{_safe(length)}{suffix}.jsonl"
            done = {r.history: r for r in _read_results(res_file)}
            everything.setdefault(method, {}).setdefault(length, []).extend(done.values())
            pending[method] = [h.id for i, h in enumerate(histories) if i % world == rank and h.id not in done]
        riders = _read_only_variants(methods)  # spec -> base spec whose write replay it shares
        for method in methods:
            if method in riders and set(pending[method]) <= set(pending[riders[method]]):
                continue  # asked on its base's committed index, in the base's job
            name, options = method_spec(method)
            cfg = replace(config, method=name, method_options={**config.method_options, **options})
            res_file = out / "results" / _safe(method) / f"{_safe(length)}{suffix}.jsonl"
            mine = [s for s, base in riders.items() if base == method and set(pending[s]) <= set(pending[method])]
            for h in histories:
                if h.id in pending[method]:
                    store = out / "stores" / _safe(method) / _safe(length) / _safe(h.id)
                    variants = tuple((s, method_spec(s)[1]) for s in mine if h.id in pending[s])
                    tags = [(res_file, method, length)] + [
                        (out / "results" / _safe(s) / f"{_safe(length)}{suffix}.jsonl", s, length)
                        for s, _ in variants]
                    jobs.append((tags, (h, str(store), cfg, budget, length, guard, judge, variants, answer, threads,
                                        route_pool)))
    bar = tqdm(total=sum(len(t) for t, _ in jobs), desc="eval", unit="history", disable=not progress)

    def record(tags, results):
        for (res_file, method, length), result in zip(tags, results):
            result.method = method  # the whole spec ("c3m:expansion=false"), not only the method's name
            _append(res_file, result)
            everything[method][length].append(result)
            bar.update(1)

    if workers <= 1:
        for tags, args in jobs:
            record(tags, _run_job(*args))
    else:
        with ThreadPoolExecutor(max_workers=workers) as pool:  # each job's work is in its own method process
            futures = {pool.submit(_run_job, *args): tags for tags, args in jobs}
            for fut in as_completed(futures):
                record(futures[fut], fut.result())
    bar.close()
    return everything


def load_results(out: str | Path) -> dict[str, dict[str, list[HistoryResult]]]:
    """All results under OUT/results (every rank), for reporting."""
    everything: dict[str, dict[str, list[HistoryResult]]] = {}
    for path in sorted((Path(out) / "results").glob("*/*.jsonl")):
        length = path.name.split(".")[0]
        for r in _read_results(path):  # a variant's folder name is its spec made file-safe; its results hold the spec
            key = r.method if _safe(r.method) == path.parent.name else path.parent.name
            everything.setdefault(key, {}).setdefault(length, []).append(r)
    return everything
