"""Throughput of the offline model backends on this machine: texts/s, images/s, tokens/s.

Writes benchmarks/results/models-throughput-cpu.md (command, date, commit, machine in the header).
Usage: python benchmarks/models/throughput.py [--quick]
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

from c3m.machine import describe
from c3m.models import HashingEmbedder, make_image_embedder
from c3m.models.minilm import MiniLMEmbedder

TEXTS = [f"On day {i} I moved the {c} mug from the kitchen to the {r}, next to the lamp with {i % 5} books."
         for i, (c, r) in enumerate(zip(["red", "blue", "green", "black"] * 64, ["study", "attic", "hall"] * 86))]


def rate(fn, n: int, min_seconds: float = 2.0) -> float:
    fn()  # warm-up (first-call allocations, lazy imports)
    t0, done = time.perf_counter(), 0
    while time.perf_counter() - t0 < min_seconds:
        fn()
        done += n
    return done / (time.perf_counter() - t0)


def images(count: int) -> list[bytes]:
    import tempfile

    from c3m.eval.synth import generate_dataset

    out = generate_dataset(Path(tempfile.mkdtemp()) / "ds", length=4000, episodes=2, seed=5, split="test",
                           progress=False)
    return [p.read_bytes() for p in sorted((out / "images").rglob("*.png"))][:count]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    secs = 0.5 if args.quick else 2.0
    rows = []
    minilm = MiniLMEmbedder()
    for threads in (1, 2):
        torch.set_num_threads(threads)
        for batch in (1, 16, 64):
            chunk = TEXTS[:batch]
            rows.append(("text", "minilm-l6-v2", f"batch {batch}, {threads} thread(s)",
                         rate(lambda: minilm.embed(chunk), batch, secs), "texts/s"))
    hashing = HashingEmbedder()
    rows.append(("text", hashing.name, "batch 64", rate(lambda: hashing.embed(TEXTS[:64]), 64, secs), "texts/s"))
    enc = make_image_embedder("scene-encoder", text_embedder=minilm)
    imgs = images(64)
    for threads in (1, 2):
        torch.set_num_threads(threads)
        rows.append(("image", enc.name, f"batch {len(imgs)} PNGs (decode included), {threads} thread(s)",
                     rate(lambda: enc.embed_images(imgs), len(imgs), secs), "images/s"))
    try:
        from c3m.models.smollm import SmolLMAnswerer

        torch.set_num_threads(1)
        ans = SmolLMAnswerer(threads=1, max_new_tokens=32)
        msgs = [{"role": "user", "content": "Describe a red mug on a wooden desk in two sentences."}]
        ans.chat(msgs)
        t0 = time.perf_counter()
        res = ans.chat(msgs, max_new_tokens=32)
        toks = res.usage.completion_tokens or 32
        rows.append(("answer", ans.name, "greedy, 1 thread, 32 new tokens", toks / (time.perf_counter() - t0),
                     "tokens/s (incl. prompt)"))
    except Exception as exc:  # optional package
        rows.append(("answer", "smollm2", f"unavailable: {exc}", float("nan"), ""))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    lines = ["# Offline model backends: throughput (CPU)", "",
             f"- command: `python benchmarks/models/throughput.py{' --quick' if args.quick else ''}`",
             f"- date: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; commit: {commit}",
             f"- machine: {describe()}; torch {torch.__version__}", "",
             "| input | backend | setting | rate | unit |", "|---|---|---|---|---|"]
    lines += [f"| {a} | {b} | {c} | {d:,.1f} | {e} |" for a, b, c, d, e in rows]
    out = Path(__file__).resolve().parents[1] / "results" / "models-throughput-cpu.md"
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
