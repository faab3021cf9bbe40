"""What the write path's anchor extraction costs per backend, and how much of the full pipeline's keys each keeps.

RAMU describes every unit's user turns (``write.units.speakers``) with the text-anchor extractor; on real dialogs
that is most of ``c3m``'s write time (``benchmarks/e2e/write.py --harness``). This measures, on the same texts,
one process, one thread, each backend in turn (best of ``--repeat`` passes, a fresh extractor per backend):

* seconds per 1,000 texts and the ratio to ``spacy`` (the full pipeline: NER + dependency parser);
* the entity and state keys ``write.units.describe_text`` derives, compared with ``spacy``'s per text:
  recall (of ``spacy``'s keys, the share the backend also finds) and precision.

    python benchmarks/anchors_cost.py --dataset benchmarks/data/memgallery-dev --out benchmarks/results/write-cost-cpu/anchors
"""
from __future__ import annotations

import argparse
import os
import platform
import subprocess
import time
from datetime import date
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")  # the harness's one thread per worker

BACKENDS = ("spacy", "spacy-ner", "spacy-tagger", "heuristic")


def user_texts(dataset: Path, limit: int | None) -> list[str]:
    from c3m.dataset import iter_histories

    texts = [t.text for h in iter_histories(dataset) for s in h.sessions for t in s.turns if t.role == "user"]
    texts = list(dict.fromkeys(t for t in texts if t.strip()))
    return texts[:limit] if limit else texts


def measure(backend: str, texts: list[str], repeat: int):
    from c3m.models.anchors import make_anchor_extractor
    from c3m.write.units import describe_text

    ex = make_anchor_extractor(backend)
    ex.extract(texts[:64])  # warm-up: the first batch pays for lazy loading
    best, anchors = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        anchors = ex.extract(texts)
        best = min(best, time.perf_counter() - t0)
    return best, [describe_text(t, a) for t, a in zip(texts, anchors)]


def agreement(ref, got, k: int) -> tuple[float, float]:
    tp = sum(len(a[k] & b[k]) for a, b in zip(ref, got))
    return tp / max(1, sum(len(a[k]) for a in ref)), tp / max(1, sum(len(b[k]) for b in got))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", type=Path, default=Path("benchmarks/data/memgallery-dev"))
    ap.add_argument("--limit", type=int, help="first N distinct user texts only")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--out", type=Path, help="output path without suffix (.md)")
    args = ap.parse_args()
    texts = user_texts(args.dataset, args.limit)
    rows, ref = [], None
    for backend in BACKENDS:
        seconds, described = measure(backend, texts, args.repeat)
        ref = described if ref is None else ref
        er, ep = agreement(ref, described, 0)
        sr, sp = agreement(ref, described, 1)
        rows.append((backend, seconds, er, ep, sr, sp))
        print(f"{backend}: {seconds:.2f} s, entity keys recall {er:.3f} precision {ep:.3f}", flush=True)
    base = rows[0][1]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    lines = [f"# Anchor extraction cost per backend ({date.today()}, {platform.processor() or platform.machine()}, "
             f"{os.cpu_count()} cores)", "",
             f"Command: `python benchmarks/anchors_cost.py --dataset {args.dataset}"
             + (f" --limit {args.limit}" if args.limit else "") + f"` at commit {commit}. {len(texts)} distinct user "
             f"turns ({sum(len(t) for t in texts):,} characters), one thread, best of {args.repeat} passes. Keys are "
             "`write.units.describe_text`'s entity and state keys, compared per text with the full pipeline's.", "",
             "| backend | seconds | ms per 1,000 chars | × spacy | entity keys recall | precision | state keys recall "
             "| precision |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    chars = sum(len(t) for t in texts) / 1000
    for backend, s, er, ep, sr, sp in rows:
        lines.append(f"| {backend} | {s:.2f} | {1000 * s / chars:.2f} | {s / base:.2f} | {er:.3f} | {ep:.3f} | "
                     f"{sr:.3f} | {sp:.3f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".md").write_text(text)


if __name__ == "__main__":
    main()
