"""Measure and calibrate the offline ``extractive`` answerer on dev data, with c3m's own contexts (#42).

Two steps, so the answerer can be re-scored in seconds while the contexts (the slow part) are built once:

    # 1. contexts: write each history into a fresh c3m store, then read every question (no answering)
    python benchmarks/answer_calibration.py build --dataset /work/shared/data/memgallery-dev --histories 4 \
        --out /tmp/ans/real.pkl
    python -m c3m.cli synth /tmp/ans/syn-dev --length 16000 --episodes 4 --seed 11 --split dev --preset hard -q
    python benchmarks/answer_calibration.py build --dataset /tmp/ans/syn-dev --out /tmp/ans/syn.pkl
    # 2. score (and count each route's answers and how many were right: ``CALIBRATION`` in
    # ``c3m/models/answer.py`` is these rates)
    python benchmarks/answer_calibration.py score /tmp/ans/real.pkl /tmp/ans/syn.pkl [--show N]

What ``score`` reports, per dataset and category (docs/answerers.md says how to read it):

- coverage: share of questions answered (not declined); precision among answered: share of answered questions
  judged correct by token F1 >= 0.5 on the answer's ``span`` (its ``text`` when there is none) — AR questions
  never count as answered-correct (their gold is a refusal); a gold answer that is one image id (``D6:IMG_001``)
  is judged by the harness's rule instead (``c3m.eval.metrics.image_verdict``: the id the span names, else the
  first cited node is a gold evidence turn of that session), and so is a declined photo route's pick;
- AR refusal recall: share of AR questions declined (any decline) and declined as "Not in memory";
- answerable declined: share of non-AR questions whose gold evidence is in the context that were declined (any,
  and as "Not in memory");
- mark errors (synthetic KU): a gold evidence turn of a "current" question marked ``superseded``, or a chain step
  naming a turn whose text does not name the chain's subject (or one of its names).

Nothing here is a test result: both datasets are the dev halves the answerer was tuned on.
"""
from __future__ import annotations

import argparse
import json
import pickle
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path


def build(args) -> None:
    from c3m import Memory
    from c3m.config import MemoryConfig
    from c3m.dataset.format import load_dataset
    from c3m.models import Models
    from c3m.eval.metrics import image_gold_nodes
    from c3m.read.answer_view import with_captions
    from c3m.types import node_id_for

    histories = load_dataset(args.dataset)[: args.histories or None]
    cfg = MemoryConfig(method="c3m", text_embedder=args.embedder, perception=args.perception)
    models = Models.from_names(text_embedder=args.embedder, token_counter="approx", answerer="extractive",
                               perception=args.perception)
    out = []
    for h in histories:
        t0 = time.time()
        with tempfile.TemporaryDirectory() as tmp, Memory(Path(tmp) / "s", h.id, config=cfg, models=models) as mem:
            for s in h.sessions:
                mem.add_session(s)
            qs = list(h.questions)
            ctxs = mem.retrieve_many([(mem.namespace, q.question) for q in qs], check=False)
            for q, ctx in zip(qs, ctxs):
                ctx = with_captions(ctx, mem.method)
                gold = {node_id_for(mem.namespace, e.session, e.turn) for e in q.evidence}
                shown = {i.node_id for i in ctx.items}
                out.append({"history": h.id, "question": q.question, "answer": q.answer, "category": q.category,
                            "qid": q.id, "gold_nodes": sorted(gold), "gold_in_context": bool(gold) and gold <= shown,
                            "image_nodes": sorted(image_gold_nodes(mem.namespace, q)),
                            "context": ctx, "index_chains": mem.method.update_chains(ctx)})
        print(f"{h.id}: {len(h.sessions)} sessions, {len(qs)} questions, {time.time() - t0:.0f}s", file=sys.stderr)
    with open(args.out, "wb") as f:
        pickle.dump({"dataset": str(args.dataset), "rows": out}, f)


def _answer(row, answerer):
    from c3m.language.timeline import annotate

    ctx = annotate(row["context"], index_chains=row["index_chains"])
    return ctx, answerer.answer(row["question"], ctx)


def mark_errors(row, ctx) -> list[str]:
    """Synthetic KU: a gold evidence turn marked superseded; any chain step naming a turn not about its subject."""
    from c3m.language.timeline import mentions

    errs = []
    by_id = {i.node_id: i for i in ctx.items if i.text.strip() and i.form.value in ("raw_text", "caption")}
    if row["category"] == "KU":
        for n in row["gold_nodes"]:
            if n in by_id and by_id[n].status == "superseded":
                errs.append(f"gold {n} superseded")
    for c in ctx.chains:
        names = (c.subject,) + tuple(getattr(c, "aliases", ()))
        for s in c.steps:
            for n in s.node_ids:
                if n in by_id and not mentions(by_id[n].text, c.subject):
                    errs.append(f"step {n} not about {c.subject!r}: {by_id[n].text[:80]}")
    return errs


def image_nodes(row, questions=None) -> frozenset[str]:
    """The gold evidence nodes of a "which photo" question in the session its gold image id names (the harness's
    rule, ``c3m.eval.metrics.image_gold_nodes``): stored by ``build``, else read from the dataset's question
    (``questions``: (history, question id) -> Question) for a cache built before they were stored."""
    from c3m.eval.metrics import image_gold_nodes

    if "image_nodes" in row:
        return frozenset(row["image_nodes"])
    q = (questions or {}).get((row["history"], row["qid"]))
    return image_gold_nodes(row["history"], q) if q is not None else frozenset()


def _questions(data, rows) -> dict:
    """(history, question id) -> Question of the cache's dataset, when some row lacks ``image_nodes`` (an older
    cache) and the dataset is still where it was built from."""
    if all("image_nodes" in r for r in rows) or not Path(data["dataset"]).exists():
        return {}
    from c3m.dataset.format import load_dataset

    return {(h.id, q.id): q for h in load_dataset(data["dataset"]) for q in h.questions}


def score(args) -> None:
    from c3m.eval.metrics import image_verdict
    from c3m.models.answer import ExtractiveAnswerer
    from c3m.models.judge import token_f1

    answerer = ExtractiveAnswerer()
    routes = defaultdict(lambda: [0, 0])
    per_set = {}
    for path in args.caches:
        data = pickle.load(open(path, "rb"))
        rows = data["rows"]
        questions = _questions(data, rows)
        per = defaultdict(lambda: defaultdict(float))
        shown = 0
        t0 = time.time()
        for row in rows:
            ctx, ans = _answer(row, answerer)
            cat = row["category"]
            ar = cat == "AR"
            not_in_memory = ans.declined and ans.text.startswith("Not in memory")
            pred = ans.span if ans.span is not None else ans.text
            photo = None if ar else image_verdict(row["answer"], pred, ans.cited, image_nodes(row, questions), ans.declined)
            f1 = 0.0 if ar else float(photo) if photo is not None else token_f1(row["answer"], pred)
            correct = (not ans.declined) and not ar and f1 >= 0.5
            for key in (cat, "all"):
                p = per[key]
                p["n"] += 1
                p["answered"] += not ans.declined
                p["correct_answered"] += correct
                p["f1_answered"] += f1 if not ans.declined else 0.0
                if ar:
                    p["ar"] += 1
                    p["ar_declined"] += ans.declined
                    p["ar_nim"] += not_in_memory
                elif row["gold_in_context"]:
                    p["ans_gold"] += 1
                    p["ans_gold_declined"] += ans.declined
                    p["ans_gold_nim"] += not_in_memory
                errs = mark_errors(row, ctx) if "syn" in data["dataset"] else []
                p["mark_errors"] += len(errs)
                p["ku_marked"] += cat == "KU" and bool(ctx.chains)
            route = getattr(answerer, "last_route", "?")
            would = image_verdict(row["answer"], answerer.last_span, ans.cited, image_nodes(row, questions)) if (
                route.startswith("image") and not ar) else None
            if would is not None:  # which photo: the harness's rule (c3m.eval.metrics.image_verdict), as if answered
                right = would
            elif route.endswith("(declined)"):  # a span below the bar: would it have been right?
                right = not ar and token_f1(row["answer"], answerer.last_span) >= 0.5
            elif ans.declined:
                right = ar if not_in_memory else row["gold_in_context"] and not ar
            else:
                right = correct
            r = routes[route]
            per_set.setdefault(path, defaultdict(lambda: [0, 0]))
            ds = per_set[path][route]
            ds[0] += 1
            ds[1] += right
            r[0] += 1
            r[1] += right
            if args.show and (not ans.declined and not correct or errs) and shown < args.show:
                shown += 1
                print(f"  [{cat}] {row['question']} | gold: {row['answer'][:60]} | got: {ans.text[:140]}"
                      f" | span={ans.span!r} conf={ans.confidence} {errs[:2]}")
            if args.show_declined and ans.declined and not ar and row["gold_in_context"] and shown < args.show_declined:
                shown += 1
                print(f"  D[{cat}] {row['question']} | gold: {row['answer'][:60]} | got: {ans.text[:140]}")
        print(f"\n## {data['dataset']} ({len(rows)} questions, {time.time() - t0:.1f}s)")
        print("| category | n | coverage | precision among answered | mean F1 answered | AR refusal recall (any / "
              "not-in-memory) | answerable w/ gold in ctx declined (any / not-in-memory) | mark errors |")
        print("|---|---|---|---|---|---|---|---|")
        for key in sorted(per, key=lambda k: (k == "all", k)):
            p = per[key]
            cov = p["answered"] / p["n"]
            prec = p["correct_answered"] / p["answered"] if p["answered"] else float("nan")
            mf1 = p["f1_answered"] / p["answered"] if p["answered"] else float("nan")
            arr = f"{p['ar_declined'] / p['ar']:.2f} / {p['ar_nim'] / p['ar']:.2f}" if p["ar"] else "-"
            dec = (f"{p['ans_gold_declined'] / p['ans_gold']:.2f} / {p['ans_gold_nim'] / p['ans_gold']:.2f} "
                   f"(of {int(p['ans_gold'])})" if p["ans_gold"] else "-")
            print(f"| {key} | {int(p['n'])} | {cov:.2f} ({int(p['answered'])}) | {prec:.2f} | {mf1:.2f} | {arr} | "
                  f"{dec} | {int(p['mark_errors'])} |")
    names = list(per_set)
    print("\n| route | " + " | ".join(f"{Path(n).name} n / right" for n in names) + " | all n / right | rate |")
    print("|---" * (len(names) + 3) + "|")
    for k, (n, c) in sorted(routes.items()):
        cells = " | ".join(f"{per_set[d][k][0]} / {per_set[d][k][1]}" if k in per_set[d] else "-" for d in names)
        print(f"| {k} | {cells} | {n} / {c} | {c / n:.2f} |")
    print("(answers, and spans declined below the bar: token F1 >= 0.5; not-in-memory: the question was AR; "
          "not-sure: gold evidence was in context)")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("--dataset", required=True)
    b.add_argument("--histories", type=int, default=0)
    b.add_argument("--embedder", default="minilm")
    b.add_argument("--perception", default="none")
    b.add_argument("--out", required=True)
    s = sub.add_parser("score")
    s.add_argument("caches", nargs="+")
    s.add_argument("--show", type=int, default=0)
    s.add_argument("--show-declined", type=int, default=0)
    args = ap.parse_args(argv)
    {"build": build, "score": score}[args.cmd](args)


if __name__ == "__main__":
    main()
