"""Out-of-fold check of the offline answerer's tuned thresholds on the real dev dialogs (#42).

The absence rule (``ABSENT_COVER``) and the photo margin (``IMAGE_MARGIN``) in ``c3m/models/answer.py`` were chosen
on the real dev dialogs. To say how much of their effect is fitting, each is re-chosen on one half of the dialogs
(1-5 or 6-10, in the dataset's order) from a fixed grid and scored on the other half; the in-sample row is the
shipped setting scored on all ten.

    python benchmarks/answer_oof.py /tmp/ans/real10.pkl

Selection rule (on the tuning half only):
- ``ABSENT_COVER``: the highest AR "Not in memory" recall among settings that refuse at most 5 % of the answerable
  questions whose gold evidence is in the context (ties: the lower threshold, which refuses less);
- ``IMAGE_MARGIN``: the most photo questions whose picked photo is a gold turn, among margins whose picks are
  right at least 85 % of the time (ties: the higher margin).

Contexts come from ``benchmarks/answer_calibration.py build``; nothing here is a test result (dev data).
"""
from __future__ import annotations

import argparse
import pickle
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

COVERS = (0.5, 0.6, 0.67, 0.75, 0.8, 0.9, 1.0)
MARGINS = (1.0, 1.25, 1.5, 2.0, 3.0)


def measure(rows, cover: float, margin: float) -> dict:
    import c3m.models.answer as A
    from answer_calibration import _answer, image_nodes
    from c3m.eval.metrics import image_verdict
    from c3m.models.judge import token_f1

    A.ABSENT_COVER, A.IMAGE_MARGIN = cover, margin
    answerer = A.ExtractiveAnswerer()
    m = dict(n=0, answered=0, right=0, ar=0, ar_nim=0, gold=0, gold_nim=0, gold_declined=0, img=0, img_right=0)
    for row in rows:
        _, ans = _answer(row, answerer)
        ar = row["category"] == "AR"
        nim = ans.declined and ans.text.startswith("Not in memory")
        m["n"] += 1
        said = ans.span or ans.text
        photo = None if ar else image_verdict(row["answer"], said, ans.cited, image_nodes(row))
        if not ans.declined:
            m["answered"] += 1
            m["right"] += (not ar) and (photo if photo is not None else token_f1(row["answer"], said) >= 0.5)
        if ar:
            m["ar"] += 1
            m["ar_nim"] += nim
        elif row["gold_in_context"]:
            m["gold"] += 1
            m["gold_nim"] += nim
            m["gold_declined"] += ans.declined
        route = answerer.last_route
        if route.split(" ")[0] == "image":  # the photo route cleared the margin (answered, or declined below the bar)
            m["img"] += 1
            m["img_right"] += bool(image_verdict(row["answer"], answerer.last_span, ans.cited,
                                                 image_nodes(row)))
    return m


def pick(rows) -> tuple[float, float]:
    best_cover = max(COVERS, key=lambda c: (lambda m: (m["gold_nim"] / max(1, m["gold"]) <= 0.05,
                                                       m["ar_nim"] / max(1, m["ar"]), -c))(measure(rows, c, 1.5)))
    best_margin = max(MARGINS, key=lambda g: (lambda m: (m["img_right"] / max(1, m["img"]) >= 0.85, m["img_right"],
                                                         g))(measure(rows, best_cover, g)))
    return best_cover, best_margin


def row_of(label: str, m: dict, cover: float, margin: float) -> str:
    prec = f"{m['right'] / m['answered']:.2f}" if m["answered"] else "-"
    img = f"{m['img_right']}/{m['img']} ({m['img_right'] / m['img']:.2f})" if m["img"] else "-"
    return (f"| {label} | {cover} / {margin} | {m['n']} | {m['answered'] / m['n']:.3f} ({m['answered']}) | {prec} | "
            f"{m['ar_nim'] / m['ar']:.2f} ({m['ar_nim']}/{m['ar']}) | "
            f"{m['gold_nim'] / m['gold']:.3f} ({m['gold_nim']}/{m['gold']}) | "
            f"{m['gold_declined'] / m['gold']:.2f} | {img} |")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cache", help="contexts of the real dev dialogs (answer_calibration.py build)")
    args = ap.parse_args(argv)
    import c3m.models.answer as A

    shipped = (A.ABSENT_COVER, A.IMAGE_MARGIN)
    from answer_calibration import _questions, image_nodes

    data = pickle.load(open(args.cache, "rb"))
    rows = data["rows"]
    questions = _questions(data, rows)  # an older cache: the photo questions' gold nodes from the dataset
    for r in rows:
        r.setdefault("image_nodes", sorted(image_nodes(r, questions)))
    order = list(dict.fromkeys(r["history"] for r in rows))
    half = len(order) // 2
    folds = {"1-5": [r for r in rows if r["history"] in order[:half]],
             "6-10": [r for r in rows if r["history"] in order[half:]]}
    print("| scored on | ABSENT_COVER / IMAGE_MARGIN | n | coverage | precision among answered | AR not-in-memory "
          "recall | answerable w/ gold refused (not in memory) | answerable w/ gold declined (any) | photo picked "
          "right |")
    print("|---|---|---|---|---|---|---|---|---|")
    for tune, test in (("1-5", "6-10"), ("6-10", "1-5")):
        cover, margin = pick(folds[tune])
        print(row_of(f"dialogs {test}, tuned on {tune}", measure(folds[test], cover, margin), cover, margin))
    for name, fold in folds.items():
        print(row_of(f"dialogs {name}, shipped", measure(fold, *shipped), *shipped))
    print(row_of("all 10, shipped (in-sample)", measure(rows, *shipped), *shipped))


if __name__ == "__main__":
    main()
