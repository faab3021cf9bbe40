"""Pillow scenes for world events, each with the scene graph of what was drawn.

Scenes are small (256x192) flat drawings: shapes, colours, material patterns, spatial layout and
legible text (brands, plates, shop signs). The scene graph (objects with type, attributes, bounding box
[x0, y0, x1, y1] and pairwise relative positions) is the hidden sidecar that only evaluation and the
``oracle`` perception backend read. A small per-photo camera jitter makes re-shots of an unchanged
entity near-duplicates rather than identical files. PNGs are written without metadata, so the bytes
depend only on the drawing.
"""
from __future__ import annotations

import io
import math
import random
from functools import lru_cache
from typing import Any

from PIL import Image, ImageDraw, ImageFont

from .vocab import POOLS
from .world import Entity, Event, World, visible_attrs

SIZE = (256, 192)
_OUTLINE = (25, 25, 25)
_GLYPH_COLOURS = {"bottle": (170, 215, 250), "ball": (225, 235, 60), "book": (150, 90, 50),
                  "candle": (250, 245, 225), "box": (220, 90, 160), "cup": (235, 235, 235)}


@lru_cache(maxsize=None)
def _font(size: int):
    return ImageFont.load_default(size=size)


def _tint(rgb, amount: float = 0.55):
    """A lighter version of a colour, for walls behind objects."""
    return tuple(int(c + (255 - c) * amount) for c in rgb)


def _shade(rgb, amount: float = 0.45):
    return tuple(int(c * (1 - amount)) for c in rgb)


def _contrast(rgb):
    return (0, 0, 0) if sum(rgb) > 400 else (255, 255, 255)


class Canvas:
    """An image plus the scene graph of what has been drawn on it."""

    def __init__(self, bg):
        self.img = Image.new("RGB", SIZE, bg)
        self.d = ImageDraw.Draw(self.img)
        self.objects: list[dict[str, Any]] = []

    def add(self, label: str, type_: str, bbox, entity: str | None = None, /, **attributes) -> dict:
        x0, y0, x1, y1 = (int(round(v)) for v in bbox)
        box = [max(0, x0), max(0, y0), min(SIZE[0], x1), min(SIZE[1], y1)]  # the visible part
        obj = {"name": label, "type": type_, "entity": entity, "bbox": box,
               "attributes": {k: v for k, v in attributes.items() if v is not None}}
        self.objects.append(obj)
        return obj

    def text(self, xy, text: str, fill, size: int = 12, anchor: str = "mm"):
        self.d.text(xy, text, fill=fill, font=_font(size), anchor=anchor)

    def finish(self) -> tuple[bytes, dict]:
        buf = io.BytesIO()
        self.img.save(buf, "PNG", optimize=False)
        return buf.getvalue(), {"objects": self.objects, "relations": _relations(self.objects)}


def _relations(objects: list[dict]) -> list[dict]:
    """Relative position of every ordered pair of named things, from their box centres."""
    rels = []
    for a in objects:
        for b in objects:
            if a is b or a["type"] in ("wall", "floor", "street") or b["type"] in ("wall", "floor", "street"):
                continue
            ax, ay = (a["bbox"][0] + a["bbox"][2]) / 2, (a["bbox"][1] + a["bbox"][3]) / 2
            bx, by = (b["bbox"][0] + b["bbox"][2]) / 2, (b["bbox"][1] + b["bbox"][3]) / 2
            dx, dy = ax - bx, ay - by
            rel = ("right_of" if dx > 0 else "left_of") if abs(dx) >= abs(dy) else ("below" if dy > 0 else "above")
            rels.append({"subject": a["name"], "relation": rel, "object": b["name"]})
    return rels


# ---------------------------------------------------------------------------------------------------
def _pattern(d: ImageDraw.ImageDraw, box, index: int, rgb) -> None:
    """A material texture: grain lines, diagonal sheen, speckles or cross-hatching."""
    x0, y0, x1, y1 = box
    ink = _shade(rgb, 0.35) if sum(rgb) > 150 else _tint(rgb, 0.35)
    if index == 0:
        for y in range(int(y0) + 6, int(y1) - 3, 7):
            d.line((x0 + 6, y, x1 - 6, y + 2), fill=ink, width=1)
    elif index == 1:
        for k in range(0, int(x1 - x0), 12):
            d.line((x0 + k, y1 - 6, x0 + k + 14, y0 + 6), fill=_tint(rgb, 0.6), width=2)
    elif index == 2:
        for y in range(int(y0) + 8, int(y1) - 4, 9):
            for x in range(int(x0) + 8, int(x1) - 4, 9):
                d.ellipse((x, y, x + 2, y + 2), fill=ink)
    else:
        for k in range(0, int(x1 - x0), 10):
            d.line((x0 + k, y0 + 4, x0 + k, y1 - 4), fill=ink, width=1)
        for k in range(0, int(y1 - y0), 10):
            d.line((x0 + 4, y0 + k, x1 - 4, y0 + k), fill=ink, width=1)


def _shape(c: Canvas, shape: str, cx: float, base: float, rgb, material_index: int):
    """Draw an object of ``shape`` standing on y=``base``; returns its bounding box."""
    w, h = {"tall": (44, 92), "oval": (92, 56), "square": (70, 70)}.get(shape, (74, 74))
    box = (cx - w / 2, base - h, cx + w / 2, base)
    x0, y0, x1, y1 = box
    if shape in ("round", "oval"):
        c.d.ellipse(box, fill=rgb, outline=_OUTLINE, width=2)
    elif shape == "triangular":
        c.d.polygon([(x0, y1), (x1, y1), (cx, y0)], fill=rgb, outline=_OUTLINE, width=2)
    elif shape == "hexagonal":
        r, cy = w / 2, (y0 + y1) / 2
        c.d.polygon([(cx + r * math.cos(math.radians(a)), cy + r * math.sin(math.radians(a)))
                     for a in range(0, 360, 60)], fill=rgb, outline=_OUTLINE, width=2)
    else:
        c.d.rectangle(box, fill=rgb, outline=_OUTLINE, width=2)
    inner = (x0 + w * 0.2, y0 + h * 0.3, x1 - w * 0.2, y1 - h * 0.12)
    _pattern(c.d, inner, material_index, rgb)
    return box


def _glyph(d: ImageDraw.ImageDraw, glyph: str, x: float, base: float):
    rgb = _GLYPH_COLOURS[glyph]
    if glyph == "bottle":
        box = (x, base - 46, x + 16, base)
        d.rectangle((x, base - 38, x + 16, base), fill=rgb, outline=(40, 90, 160), width=2)
        d.rectangle((x + 5, base - 46, x + 11, base - 38), fill=(40, 90, 160))
    elif glyph == "ball":
        box = (x, base - 16, x + 16, base)
        d.ellipse(box, fill=rgb, outline=_OUTLINE)
    elif glyph == "book":
        box = (x, base - 30, x + 12, base)
        d.rectangle(box, fill=rgb, outline=_OUTLINE)
    elif glyph == "candle":
        box = (x + 3, base - 40, x + 13, base)
        d.rectangle((x + 3, base - 32, x + 13, base), fill=rgb, outline=_OUTLINE)
        d.ellipse((x + 5, base - 40, x + 11, base - 32), fill=(250, 160, 20))
    elif glyph == "box":
        box = (x, base - 18, x + 16, base)
        d.rectangle(box, fill=rgb, outline=_OUTLINE)
        d.line((x + 8, base - 18, x + 8, base), fill=(250, 250, 250), width=2)
    else:
        box = (x, base - 18, x + 14, base)
        d.polygon([(x, base - 18), (x + 14, base - 18), (x + 11, base), (x + 3, base)], fill=rgb, outline=_OUTLINE)
    return box


def render_object(world: World, ent: Entity, state: dict, wall: str, with_accessory: bool, rng: random.Random):
    pool = POOLS[world.split]
    colours = pool.colours
    c = Canvas(_tint(colours[wall]))
    c.add("wall", "wall", (0, 0, 256, 130), colour=wall)
    c.d.rectangle((0, 130, 256, 192), fill=(140, 105, 70))  # table top
    c.add("table", "floor", (0, 130, 256, 192))
    # Leave room on the accessory's side so every item stays in the frame.
    centre = 128 if not with_accessory else (100 if state["accessory"]["side"] == "right" else 156)
    cx, base = centre + rng.randint(-10, 10), 150 + rng.randint(-6, 6)
    rgb = colours[state["colour"]]
    box = _shape(c, state["shape"], cx, base, rgb, pool.materials.index(state["material"]))
    label_y = box[3] - 12
    c.d.rectangle((cx - 30, label_y - 7, cx + 30, label_y + 7), fill=(250, 250, 250), outline=_OUTLINE)
    c.text((cx, label_y), state["brand"], fill=(0, 0, 0), size=10)
    c.add(ent.kind, ent.kind, box, ent.id, colour=state["colour"], shape=state["shape"],
          material=state["material"], brand=state["brand"], text=state["brand"])
    if with_accessory:
        acc = state["accessory"]
        boxes, step = [], 18
        for k in range(acc["count"]):
            x = box[2] + 8 + k * step if acc["side"] == "right" else box[0] - 24 - k * step
            boxes.append(_glyph(c.d, acc["glyph"], x, base))
        union = (min(b[0] for b in boxes), min(b[1] for b in boxes), max(b[2] for b in boxes), max(b[3] for b in boxes))
        c.add(acc["item"], "accessory", union, ent.id, count=acc["count"], side=acc["side"])
    return c.finish()


def render_room(world: World, ent: Entity, state: dict, rng: random.Random):
    colours = POOLS[world.split].colours
    c = Canvas(colours[state["colour"]])
    c.add("wall", "wall", (0, 0, 256, 150), ent.id, colour=state["colour"], room=ent.name)
    c.d.rectangle((0, 150, 256, 192), fill=(150, 115, 80))
    x = 30 + rng.randint(-8, 8)
    c.d.rectangle((x, 40, x + 60, 100), fill=(185, 220, 245), outline=(80, 80, 80), width=4)
    c.add("window", "window", (x, 40, x + 60, 100))
    c.d.rectangle((170, 60, 215, 150), fill=(110, 80, 55), outline=_OUTLINE, width=2)
    c.add("door", "door", (170, 60, 215, 150))
    label, box = _FURNITURE[ent.name]
    c.d.rectangle(box, fill=(95, 95, 105), outline=_OUTLINE, width=2)
    c.add(label, "furniture", box)
    return c.finish()


#: One piece of furniture per room, so rooms differ in more than wall colour.
_FURNITURE = {"kitchen": ("stove", (105, 110, 160, 165)), "living room": ("sofa", (95, 125, 165, 165)),
              "bedroom": ("bed", (90, 135, 168, 168)), "study": ("desk", (100, 118, 160, 160)),
              "hallway": ("coat rack", (125, 60, 135, 160)), "garage": ("shelf", (100, 70, 160, 150)),
              "balcony": ("railing", (0, 120, 256, 130)), "attic": ("ladder", (120, 20, 140, 150))}


def render_pet(world: World, ent: Entity, rng: random.Random):
    colours = POOLS[world.split].colours
    c = Canvas((215, 225, 205))
    c.d.rectangle((0, 150, 256, 192), fill=(110, 160, 90))
    fur, collar = colours[ent.static["colour"]], colours[ent.static["collar"]]
    cx = 120 + rng.randint(-12, 12)
    body = (cx - 50, 95, cx + 40, 150)
    c.d.ellipse(body, fill=fur, outline=_OUTLINE, width=2)
    head = (cx + 25, 55, cx + 75, 105)
    if ent.kind == "rabbit":
        c.d.ellipse((cx + 33, 15, cx + 45, 62), fill=fur, outline=_OUTLINE)
        c.d.ellipse((cx + 55, 15, cx + 67, 62), fill=fur, outline=_OUTLINE)
    elif ent.kind == "cat":
        c.d.polygon([(cx + 28, 70), (cx + 35, 40), (cx + 48, 60)], fill=fur, outline=_OUTLINE)
        c.d.polygon([(cx + 72, 70), (cx + 65, 40), (cx + 52, 60)], fill=fur, outline=_OUTLINE)
    c.d.ellipse(head, fill=fur, outline=_OUTLINE, width=2)
    if ent.kind == "parrot":
        c.d.polygon([(cx + 73, 75), (cx + 90, 82), (cx + 72, 88)], fill=(240, 190, 30), outline=_OUTLINE)
    elif ent.kind == "dog":
        c.d.ellipse((cx + 22, 60, cx + 36, 90), fill=_shade(fur, 0.3), outline=_OUTLINE)
    elif ent.kind == "turtle":
        c.d.chord((cx - 45, 75, cx + 35, 140), 180, 360, fill=_shade(fur, 0.35), outline=_OUTLINE)
    c.d.ellipse((cx + 55, 72, cx + 61, 78), fill=(0, 0, 0))
    collar_box = (cx + 27, 96, cx + 70, 106)
    c.d.rectangle(collar_box, fill=collar, outline=_OUTLINE)
    c.add(ent.name, ent.kind, (body[0], head[1], head[2], body[3]), ent.id, colour=ent.static["colour"],
          collar=ent.static["collar"])
    c.add("collar", "collar", collar_box, ent.id, colour=ent.static["collar"])
    return c.finish()


def render_vehicle(world: World, ent: Entity, state: dict, with_plate: bool, rng: random.Random):
    colours = POOLS[world.split].colours
    c = Canvas((200, 215, 235))
    c.d.rectangle((0, 140, 256, 192), fill=(90, 90, 95))
    c.add("road", "street", (0, 140, 256, 192))
    rgb = colours[state["colour"]]
    dx = rng.randint(-10, 10)
    big = ent.kind in ("car", "van")
    body = (30 + dx, 80 if big else 95, 226 + dx, 135) if big else (60 + dx, 95, 196 + dx, 125)
    c.d.rectangle(body, fill=rgb, outline=_OUTLINE, width=2)
    if big:
        roof = 35 if ent.kind == "van" else 50
        c.d.polygon([(60 + dx, 80), (90 + dx, roof), (190 + dx, roof), (215 + dx, 80)], fill=rgb,
                    outline=_OUTLINE, width=2)
    for wx in ((60 + dx, 180 + dx) if big else (70 + dx, 160 + dx)):
        c.d.ellipse((wx, 122, wx + 30, 152), fill=(20, 20, 20))
    c.text(((body[0] + body[2]) / 2, body[1] + 12), state["brand"], fill=_contrast(rgb), size=12)
    c.add(ent.kind, ent.kind, (body[0], body[1] - (45 if big else 0), body[2], 152), ent.id,
          colour=state["colour"], brand=state["brand"], text=state["brand"],
          plate=state["plate"] if with_plate else None)
    if with_plate:
        plate = ((body[0] + body[2]) / 2 - 34, 140, (body[0] + body[2]) / 2 + 34, 158)
        c.d.rectangle(plate, fill=(250, 250, 250), outline=_OUTLINE, width=2)
        c.text(((plate[0] + plate[2]) / 2, 149), state["plate"], fill=(0, 0, 0), size=12)
        c.add("licence plate", "plate", plate, ent.id, text=state["plate"])
    return c.finish()


def render_shop(world: World, ent: Entity, state: dict, rng: random.Random):
    colours = POOLS[world.split].colours
    c = Canvas((190, 185, 180))
    c.add("street", "street", (0, 0, 256, 192))
    sign_rgb = colours[state["sign_colour"]]
    other_rgb = (40, 40, 40) if sum(sign_rgb) > 200 else (235, 235, 225)
    top, bottom = (18, 68), (100, 150)
    mine, theirs = (bottom, top) if state["position"] == "above" else (top, bottom)
    dx = rng.randint(-8, 8)
    signs = {}
    for key, (y0, y1), fill, text in (("mine", mine, sign_rgb, state["name"]),
                                      ("theirs", theirs, other_rgb, state["neighbour"])):
        box = (28 + dx, y0, 228 + dx, y1)
        c.d.rectangle(box, fill=fill, outline=_OUTLINE, width=3)
        c.text(((box[0] + box[2]) / 2, (y0 + y1) / 2), text, fill=_contrast(fill), size=15)
        signs[key] = box
    # The neighbouring sign belongs to no world entity; the shop's own sign carries the relation too.
    c.add(state["name"], "sign", signs["mine"], ent.id, colour=state["sign_colour"], text=state["name"],
          name=state["name"], sign_colour=state["sign_colour"], neighbour=state["neighbour"],
          position=state["position"])
    c.add(state["neighbour"], "sign", signs["theirs"], None, text=state["neighbour"])
    return c.finish()


def render_event(world: World, index: int, rng: random.Random) -> tuple[bytes, dict]:
    """The picture attached to event ``index`` and its scene graph."""
    event: Event = world.events[index]
    ent = world.entities[event.entity]
    state = world.state_at(ent.id, index)
    if ent.type == "object":
        room = next(e for e in world.entities.values() if e.type == "room" and e.name == state["room"])
        wall = world.state_at(room.id, index)["colour"]
        return render_object(world, ent, state, wall, "accessory" in visible_attrs(event, ent), rng)
    if ent.type == "room":
        return render_room(world, ent, state, rng)
    if ent.type == "pet":
        return render_pet(world, ent, rng)
    if ent.type == "vehicle":
        return render_vehicle(world, ent, state, "plate" in visible_attrs(event, ent), rng)
    if ent.type == "shop":
        return render_shop(world, ent, state, rng)
    raise ValueError(f"no picture for a {ent.type}")
