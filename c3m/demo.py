"""The demo: a small multimodal history, ingested session by session, then questioned.

The history holds the paper's motivating cases (C3M Fig. 4): a detail visible only in a photo (the
bottles beside the cooler), a state that changes (the mug repainted), a spatial sign layout, filler,
and a question nothing answers. Images are drawn with Pillow so the demo needs no files or network.
"""
from __future__ import annotations

import io
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Callable

from .types import EvidenceRef, History, Question, ReaderBudget, Session, Turn

#: The demo history has only 12 Raw Nodes, so it reads under a tight budget to make selection visible.
DEMO_READER_BUDGET = ReaderBudget(pages=3, raw_nodes=4, images=2, text_tokens=512)


def _canvas(draw_fn: Callable, size=(256, 192), bg=(235, 230, 220)) -> bytes:
    from PIL import Image, ImageDraw

    img = Image.new("RGB", size, bg)
    draw_fn(ImageDraw.Draw(img))
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


def _studio(d) -> None:
    d.rectangle((0, 150, 256, 192), fill=(150, 110, 80))  # floor
    for x in (40, 150):  # two arched windows
        d.rectangle((x, 60, x + 60, 130), fill=(170, 210, 240), outline=(60, 60, 60), width=3)
        d.pieslice((x, 30, x + 60, 90), 180, 360, fill=(170, 210, 240), outline=(60, 60, 60), width=3)


def _mug(colour):
    def draw(d) -> None:
        d.rectangle((0, 140, 256, 192), fill=(120, 90, 60))  # desk
        d.rectangle((150, 60, 160, 140), fill=(80, 80, 80))  # lamp stem
        d.polygon([(125, 60), (185, 60), (170, 30), (140, 30)], fill=(250, 220, 120))
        d.rectangle((60, 90, 110, 140), fill=colour, outline=(30, 30, 30), width=2)  # mug
        d.arc((100, 100, 125, 125), 270, 90, fill=(30, 30, 30), width=4)
    return draw


def _cooler(d) -> None:
    d.rectangle((0, 150, 256, 192), fill=(230, 210, 160))  # sand
    d.rectangle((50, 80, 150, 150), fill=(40, 120, 200), outline=(20, 20, 20), width=3)
    d.rectangle((45, 70, 155, 82), fill=(240, 240, 240), outline=(20, 20, 20), width=2)
    for x in (170, 200):  # two water bottles on the cooler's right side
        d.rectangle((x, 95, x + 18, 150), fill=(200, 230, 255), outline=(40, 90, 160), width=2)
        d.rectangle((x + 5, 85, x + 13, 95), fill=(40, 90, 160))


def _street(d) -> None:
    from PIL import ImageFont

    font = ImageFont.load_default()
    d.rectangle((40, 20, 216, 70), fill=(200, 30, 30))
    d.text((70, 38), "McDONALD'S", fill=(255, 210, 0), font=font)
    d.rectangle((40, 100, 216, 150), fill=(30, 30, 30))
    d.text((105, 118), "WEGO", fill=(255, 255, 255), font=font)


def _obj(name: str, box, **attributes) -> dict:
    return {"name": name, "type": name, "entity": None, "bbox": list(box), "attributes": attributes}


#: what each drawing shows, as the scene graphs the ``oracle`` perception backend reads (the demo drew them,
#: so it knows): the demo's perception is this ground truth, named "demo-drawings" in the store
_SCENES = {
    "studio": {"objects": [_obj("window", (40, 30, 210, 130), count=2, shape="arched"), _obj("floor", (0, 150, 256, 192))],
               "relations": []},
    "red mug": {"objects": [_obj("mug", (60, 90, 110, 140), colour="red"), _obj("lamp", (125, 30, 185, 140)),
                            _obj("floor", (0, 140, 256, 192))],
                "relations": [{"subject": "mug", "relation": "left_of", "object": "lamp"}]},
    "cooler": {"objects": [_obj("cooler", (45, 70, 155, 150), colour="blue"),
                           {"name": "water bottles", "type": "accessory", "entity": None, "bbox": [170, 85, 218, 150],
                            "attributes": {"count": 2, "side": "right"}}, _obj("floor", (0, 150, 256, 192))],
               "relations": [{"subject": "water bottles", "relation": "right_of", "object": "cooler"}]},
    "blue mug": {"objects": [_obj("mug", (60, 90, 110, 140), colour="blue"), _obj("lamp", (125, 30, 185, 140)),
                             _obj("floor", (0, 140, 256, 192))],
                 "relations": [{"subject": "mug", "relation": "left_of", "object": "lamp"}]},
    "street": {"objects": [{"name": "McDonald's", "type": "sign", "entity": None, "bbox": [40, 20, 216, 70],
                            "attributes": {"colour": "red", "text": "McDONALD'S"}},
                           {"name": "WEGO", "type": "sign", "entity": None, "bbox": [40, 100, 216, 150],
                            "attributes": {"colour": "black", "text": "WEGO"}}, _obj("street", (0, 0, 256, 192))],
               "relations": [{"subject": "McDonald's", "relation": "above", "object": "WEGO"}]},
}


@lru_cache(maxsize=1)
def _drawings() -> dict[str, bytes]:
    """The demo's five PNGs, drawn once (the history and the perception backend both need their bytes)."""
    return {"studio": _canvas(_studio), "red mug": _canvas(_mug((200, 30, 30))), "cooler": _canvas(_cooler),
            "blue mug": _canvas(_mug((40, 70, 200))), "street": _canvas(_street)}


def demo_perception():
    """The demo's perception backend: the ``oracle`` over the drawings' own scene graphs (``_SCENES``), so a
    text-only answerer reads what each photo shows. A real deployment uses a VLM (``--perception local:PATH``
    or ``api``); the packaged ``scene-encoder`` knows only the synthetic benchmark's renderer."""
    import hashlib

    from .models.oracle import OracleExtractor

    scenes = {hashlib.sha256(png).hexdigest(): {**_SCENES[name], "image": name} for name, png in _drawings().items()}
    return OracleExtractor.from_scenes(scenes, "demo-drawings-1", name="oracle")


def demo_history() -> History:
    """Six sessions over seven weeks, with the questions a user might ask afterwards."""
    t = datetime.fromisoformat
    png = _drawings()
    sessions = (
        Session("s1", t("2026-03-02T10:00:00"), (
            Turn("user", "Here is my new studio. The morning light is great.", (png["studio"],)),
            Turn("assistant", "Lovely space, the two arched windows let in a lot of light."))),
        Session("s2", t("2026-03-09T18:30:00"), (
            Turn("user", "I bought a red mug at the flea market; it sits on my desk next to the lamp.",
                 (png["red mug"],)),
            Turn("assistant", "A red mug beside the lamp, nice find."))),
        Session("s3", t("2026-03-20T09:15:00"), (
            Turn("user", "Here's my new cooler for the beach trip.", (png["cooler"],)),
            Turn("assistant", "Great, that should keep drinks cold all day."))),
        Session("s4", t("2026-04-02T20:00:00"), (
            Turn("user", "The red mug chipped, so I repainted the mug blue.", (png["blue mug"],)),
            Turn("assistant", "Blue suits it. Good save."))),
        Session("s5", t("2026-04-15T13:45:00"), (
            Turn("user", "Walking downtown: the McDonald's sign hangs right above the WEGO shop.",
                 (png["street"],)),
            Turn("assistant", "Handy landmark, noted."))),
        Session("s6", t("2026-04-20T08:00:00"), (
            Turn("user", "It is raining today, so I made pancakes."),
            Turn("assistant", "Pancakes on a rainy morning sound perfect."))),
    )
    q = t("2026-05-01T09:00:00")
    questions = (
        Question("q1", "What shape are the window frames in my studio?", "arched", "IE", q,
                 (EvidenceRef("s1", 0), EvidenceRef("s1", 1))),
        Question("q2", "What colour is my mug now?", "blue", "KU", q, (EvidenceRef("s4", 0),)),
        Question("q3", "What colour was the mug before it was repainted?", "red", "TR", q,
                 (EvidenceRef("s2", 0), EvidenceRef("s4", 0))),
        Question("q4", "What is on the right side of my beach cooler?", "two water bottles", "IE", q,
                 (EvidenceRef("s3", 0),)),
        Question("q5", "Which shop is under the McDonald's sign downtown?", "WEGO", "MSR", q,
                 (EvidenceRef("s5", 0),)),
        Question("q6", "What is the name of my dog?", "You never told me about a dog.", "AR", q, ()),
    )
    return History("demo-user", sessions, questions)


def run_demo(store: str | Path, *, dataset_dir: str | Path | None = None, echo: Callable[[str], None] = print,
             config=None, budget: ReaderBudget = DEMO_READER_BUDGET) -> list[dict]:
    """Ingest the demo history session by session, then answer every question; returns the results."""
    import time

    from tqdm import tqdm

    from .memory import Memory

    history = demo_history()
    if dataset_dir is not None:
        from .dataset import write_dataset

        write_dataset([history], dataset_dir)
        echo(f"dataset written to {dataset_dir}/episodes.jsonl (the format `c3m ingest` reads)")
    from .config import MemoryConfig
    from .models import Models

    t0 = time.perf_counter()
    cfg = config or MemoryConfig()
    models = Models.from_config(cfg)
    own = cfg.perception in ("none", "", None)
    if own:  # no backend chosen: the demo's drawings describe themselves (ground truth, named as such)
        models.perception = demo_perception()
    with Memory(store, namespace=history.id, config=cfg, models=models) as mem:
        echo(f"store {store}  namespace {mem.namespace}  method {mem.method_name}  "
             f"embedder {mem.models.text_embedder.name}  tokens {mem.models.token_counter.name}  "
             f"answerer {mem.models.answerer.name}")
        echo("perception: " + ("oracle over the demo's own drawings (ground truth, not a vision model; "
                               "use --perception local:PATH or api for real photos)" if own else cfg.perception))
        for session in tqdm(history.sessions, desc="ingest", unit="session"):
            mem.add_session(session)
        echo(f"reader budget for the demo: {budget}")
        stats = mem.stats()
        echo(f"ingested {stats['sessions']} sessions -> {stats['raw_nodes']} Raw Nodes, {stats['images']} images "
             f"in {time.perf_counter() - t0:.1f}s")
        results = []
        for q in history.questions:
            answer = mem.ask(q.question, budget)
            ctx = answer.context
            got = {(i.provenance.session_id, i.provenance.turn_index) for i in ctx.items}
            gold = {(e.session, e.turn) for e in q.evidence}
            recall = len(gold & got) / len(gold) if gold else None
            results.append({"id": q.id, "category": q.category, "question": q.question, "answer": answer.text,
                            "gold": q.answer, "support_recall": recall, "use": ctx.use})
            echo("")
            echo(f"[{q.category}] Q: {q.question}")
            echo(f"  A: {answer.text}   (gold: {q.answer})")
            b, u = ctx.budget, ctx.use
            echo(f"  budget: pages {u.pages}/{b.pages}  raw nodes {u.raw_nodes}/{b.raw_nodes}  images "
                 f"{u.images}/{b.images}  text tokens {u.text_tokens}/{b.text_tokens}"
                 + (f"  support recall {recall:.2f}" if recall is not None else ""))
            for item in sorted(ctx.items, key=lambda i: -i.score)[:3]:
                p = item.provenance
                imgs = f"  +{len(item.images)} image(s) {item.images[0].sha256[:10]}" if item.images else ""
                cited = " *cited*" if item.node_id in answer.cited else ""
                echo(f"    - session {p.session_id} turn {p.turn_index} ({p.time:%Y-%m-%d %H:%M}, {item.role}, "
                     f"score {item.score:.2f}){cited}: {item.text[:70]}{imgs}")
            if len(ctx.items) > 3:
                echo(f"    … {len(ctx.items) - 3} more context item(s) (the answerer reads them in time order)")
        report = mem.verify()
        echo("")
        echo(str(report))
        echo(f"demo finished in {time.perf_counter() - t0:.1f}s")
    return results
