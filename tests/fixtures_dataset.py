"""Helpers that build small c3m datasets (docs/architecture.md, Formats) in a temporary folder for tests."""
from __future__ import annotations

import copy
import json
from io import BytesIO
from pathlib import Path
from typing import Any

from PIL import Image


def png_bytes(width: int = 4, height: int = 3, color: tuple[int, int, int] = (200, 30, 30)) -> bytes:
    """Encoded bytes of a small solid-colour PNG."""
    buf = BytesIO()
    Image.new("RGB", (width, height), color).save(buf, format="PNG")
    return buf.getvalue()


def write_png(path: Path, width: int = 4, height: int = 3, color: tuple[int, int, int] = (200, 30, 30)) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(png_bytes(width, height, color))
    return path


IMAGE = "images/ep-0001/s1-0.png"


def history_dict(hid: str = "ep-0001") -> dict[str, Any]:
    """A valid history line (the README's dataset example, with two sessions); its image is ``IMAGE``."""
    return copy.deepcopy({
        "id": hid,
        "sessions": [
            {"id": "s1", "time": "2026-03-02T10:00:00",
             "turns": [{"role": "user", "text": "Here is my studio.", "images": [IMAGE]},
                       {"role": "assistant", "text": "Nice arched windows!"}]},
            {"id": "s2", "time": "2026-03-05T08:30:00",
             "turns": [{"role": "user", "text": "I painted the frames green."}]},
        ],
        "questions": [
            {"id": "q1", "question": "What shape were the window frames in my studio?", "answer": "arched",
             "category": "IE", "time": "2026-05-01T09:00:00", "evidence": [{"session": "s1", "turn": 0}]},
            {"id": "q2", "question": "What colour are the frames now?", "answer": "green", "category": "KU",
             "evidence": [{"session": "s2", "turn": 0}]},
        ],
    })


def make_dataset(folder: Path, lines: list[Any], *, image: bool = True) -> Path:
    """Write ``lines`` (dicts become JSON, strings are written verbatim) as ``folder/episodes.jsonl``."""
    folder.mkdir(parents=True, exist_ok=True)
    if image:
        write_png(folder / IMAGE)
    text = "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines)
    (folder / "episodes.jsonl").write_text(text, encoding="utf-8")
    return folder
