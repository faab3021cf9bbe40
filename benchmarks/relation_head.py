"""Measure RAMU's feature relation head against the synthetic generator's gold relation labels.

``c3m synth`` writes ``_hidden/relations.jsonl``: pairs of turns about world entities labelled *same* (the
same object, nothing changed), *update* (the same object after a change) or *distinct* (different objects;
``hard`` = a look-alike). Each pair is turned into what RAMU sees — the later turn as the incoming unit
(the user turn and its reply), the earlier one as an entry — and judged by the head.

Reported: the confusion matrix, accuracy, and what matters for Eq. 3 — the precision of the *actions* the
head would trigger at each δ (a Merge on a pair that is not *same* conflates records; an Update on a
distinct pair links the wrong chain) and their recall. Document frequencies come from all units of the
history (the live index only knows the past; a slight advantage here, measurement only).

    python benchmarks/relation_head.py --dataset /tmp/data-32000 --histories 20
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from c3m.dataset.format import history_from_dict  # noqa: E402
from c3m.methods.c3m import _memo  # noqa: E402
from c3m.models import make_text_embedder  # noqa: E402
from c3m.models.relation_head import FeatureRelationHead  # noqa: E402
from c3m.write.features import relation_features  # noqa: E402
from c3m.index import normalize  # noqa: E402
from c3m.write.units import Unit  # noqa: E402

LABELS = ("same", "update", "distinct")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--histories", type=int, default=20)
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/relation-head-synth-cpu.md"))
    args = ap.parse_args()
    ds = Path(args.dataset)
    lines = ds.joinpath("episodes.jsonl").read_text().splitlines()[: args.histories]
    histories = {h.id: h for h in (history_from_dict(json.loads(line), root=ds) for line in lines)}
    pairs = defaultdict(list)
    for line in ds.joinpath("_hidden/relations.jsonl").read_text().splitlines():
        d = json.loads(line)
        if d["history"] in histories:
            pairs[d["history"]].append(d)
    emb, memo, head = make_text_embedder("auto"), _memo("auto"), FeatureRelationHead()
    rows = []  # (gold, hard, predicted relation, confidence)
    for hid, h in histories.items():
        units, df = {}, Counter()
        for s in h.sessions:
            for i, t in enumerate(s.turns):
                if t.role != "user":
                    continue
                texts = [t.text] + ([s.turns[i + 1].text] if i + 1 < len(s.turns) and s.turns[i + 1].role != "user" else [])
                ents, states, change, again, another = memo.describe([t.text])[0]
                units[(s.id, i)] = (s.time, texts, ents, states, change, len(t.images), again, another)
                df.update(set(ents) | set(states))
        keys = [k for d in pairs[hid] for k in (d["a"], d["b"])]
        need = sorted({(k["session"], k["turn"]) for k in keys})
        vec = {k: normalize(emb.embed(units[k][1]).mean(axis=0)) for k in need}
        n_docs = len(units)
        for d in pairs[hid]:
            a, b = (d["a"]["session"], d["a"]["turn"]), (d["b"]["session"], d["b"]["turn"])
            ta, _, ea, sa, *_ = units[a]
            tb, textb, eb, sb, cb, ib, gb, ob = units[b]
            unit = Unit(b[0], [b[1]], [], tb, "\n".join(textb), vec[b], set(eb), set(sb), cb, ib, again=gb, another=ob)
            entry = SimpleNamespace(z=vec[a], entities=set(ea), states=list(sa), time=ta)
            (r, c), = head.predict([relation_features(unit, entry, df, n_docs)])
            rows.append((d["label"], d["hard"], r.value, c))
    write_report(rows, args, len(histories))


def write_report(rows, args, n_hist: int) -> None:
    conf = Counter((g, p) for g, _, p, _ in rows)
    preds = ("same", "update", "distinct", "uncertain")
    acc = sum(conf[(g, g)] for g in LABELS) / max(1, len(rows))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    out = [f"# Feature relation head vs gold relation labels (synthetic, {n_hist} histories, {len(rows)} pairs)", "",
           f"- command: `python benchmarks/relation_head.py --dataset {args.dataset} --histories {args.histories}`",
           f"- date: {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC, commit {commit}, "
           f"{platform.processor() or platform.machine()}, Python {platform.python_version()}",
           f"- head: `{FeatureRelationHead.name}` (hand-set weights, `c3m/models/relation_head.py`); "
           "dataset from `c3m synth DIR --length 32000 --episodes 50 --seed 0`", "",
           "## Confusion (rows: gold, columns: predicted)", "",
           "| gold \\ predicted | " + " | ".join(preds) + " | n |", "|---" * (len(preds) + 2) + "|"]
    for g in LABELS:
        n = sum(conf[(g, p)] for p in preds)
        out.append(f"| {g} | " + " | ".join(str(conf[(g, p)]) for p in preds) + f" | {n} |")
    hard = [r for r in rows if r[1]]
    out += ["", f"Accuracy (argmax relation): **{acc:.3f}**. Look-alike (hard) distinct pairs predicted same: "
            f"{sum(1 for r in hard if r[2] == 'same')}/{len(hard)}.", "",
            "## Actions at threshold δ (Eq. 3)", "",
            "| δ | Merge precision | Merge recall (of gold same) | Update precision | Update recall (of gold update) "
            "| unsafe Merges (on non-same) |", "|---|---|---|---|---|---|"]
    for delta in (0.4, 0.5, 0.6, 0.7, 0.8):
        m = [r for r in rows if r[2] == "same" and r[3] >= delta]
        u = [r for r in rows if r[2] == "update" and r[3] >= delta]
        n_same = sum(1 for r in rows if r[0] == "same")
        n_upd = sum(1 for r in rows if r[0] == "update")
        mp = sum(1 for r in m if r[0] == "same") / len(m) if m else float("nan")
        up = sum(1 for r in u if r[0] == "update") / len(u) if u else float("nan")
        out.append(f"| {delta} | {mp:.3f} ({len(m)}) | {sum(1 for r in m if r[0] == 'same') / max(1, n_same):.3f} | "
                   f"{up:.3f} ({len(u)}) | {sum(1 for r in u if r[0] == 'update') / max(1, n_upd):.3f} | "
                   f"{sum(1 for r in m if r[0] != 'same')} |")
    out += ["", "Below δ the head's verdict is Keep (an independent entry): safe, but it costs an entry.", ""]
    Path(args.out).write_text("\n".join(out) + "\n", encoding="utf-8")
    print("\n".join(out))


if __name__ == "__main__":
    main()
