"""A judged pass over an eval folder's committed stores: a real answerer + judge, without replaying the writes.

``c3m eval --judge`` answers during the replay, so a second answerer would cost a second write replay of every
history. The stores under ``OUT/stores/<method>/<length>/<history>`` already hold each method's committed
index, so this script asks every question of each store again through the harness's own replay with
``write=False`` (the method in its own process, handed question texts only; contexts measured by the harness,
captions added for a text-only answerer, evidence check when the dataset's hidden gold is given; the questions
come from the dataset folder given per length) and writes the results to
``JUDGED/results/<method>/<length>.jsonl`` in the harness's format — ``c3m table1 JUDGED`` then lays them out.
The write-side measurements (write latency, peak index, write violations) are copied from the replay's results.
``--judge none`` only re-asks (the current read path on the committed index, no answerer).

    python benchmarks/judged_pass.py OUT JUDGED --answerer smollm --judge contains --limit 4 \
        --perception scene-encoder --dataset 32k=/tmp/hard-test/data-32k
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from tqdm import tqdm

from c3m.config import MemoryConfig
from c3m.dataset import load_dataset
from c3m.eval.harness import _append, _hidden_gold, _judge, _read_results, _safe, load_models, method_spec, \
    resolve_perception
from c3m.eval.replay import replay_history


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, help="a c3m eval output folder (holds stores/ and questions/)")
    ap.add_argument("judged", type=Path, help="where the judged results go")
    ap.add_argument("--answerer", default="smollm")
    ap.add_argument("--judge", default="contains", help="em, f1, contains, api, or none (re-ask only)")
    ap.add_argument("--perception", default="scene-encoder", help="the perception the stores were written with")
    ap.add_argument("--methods", nargs="*", help="default: every method folder under OUT/stores")
    ap.add_argument("--limit", type=int, help="histories per method and length (sorted by id)")
    ap.add_argument("--dataset", action="append", default=[], metavar="LENGTH=PATH",
                    help="a length's dataset folder: its questions (required) and hidden gold (the evidence check)")
    args = ap.parse_args(argv)
    roots = dict(d.split("=", 1) for d in args.dataset)
    jobs = []
    for mdir in sorted((args.out / "stores").iterdir()):
        spec = next((r.method for f in (args.out / "results" / mdir.name).glob("*.jsonl") for r in _read_results(f)),
                    mdir.name)
        if args.methods and spec not in args.methods:
            continue
        for ldir in sorted(p for p in mdir.iterdir() if p.is_dir()):
            for hdir in sorted(p for p in ldir.iterdir() if p.is_dir())[:args.limit]:
                jobs.append((spec, ldir.name, hdir))
    done = {(r.method, length, r.history) for f in (args.judged / "results").glob("*/*.jsonl")
            for length in [f.name.split(".")[0]] for r in _read_results(f)}
    jobs = [j for j in jobs if (j[0], j[1], j[2].name) not in done]
    for spec, length, hdir in tqdm(jobs, desc="judged pass", unit="history"):
        name, options = method_spec(spec)
        root = roots.get(length)
        answerer = args.answerer if args.judge != "none" else "extractive"  # re-asking loads no LLM
        cfg = replace(MemoryConfig(), method=name, method_options=options, answerer=answerer,
                      perception=resolve_perception(args.perception, root or "."))
        if root is None:
            ap.error(f"--dataset {length}=PATH is needed: the questions of {length} come from the dataset folder")
        history = next(h for h in load_dataset(Path(root)) if _safe(h.id) == hdir.name)
        replayed = next((r for r in _read_results(args.out / "results" / _safe(spec) / f"{_safe(length)}.jsonl")
                         if r.history == history.id), None)
        judge = _judge(args.judge) if args.judge != "none" else None
        asked = replay_history(history, hdir, config=cfg, models=load_models(cfg), length=length,
                               guard_paths=(root, str(args.out.resolve())), judge=judge, write=False,
                               answer=args.judge != "none", gold=lambda: _hidden_gold(root))
        result = replace(replayed, questions=asked.questions) if replayed is not None else asked
        _append(args.judged / "results" / _safe(spec) / f"{_safe(length)}.jsonl", result)
    print(f"judged results: {args.judged}/results  (c3m table1 {args.judged} --judged-label "
          f"'answerer {args.answerer}, judge {args.judge}')")
    return 0


if __name__ == "__main__":
    sys.exit(main())
