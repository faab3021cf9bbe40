"""The synthetic benchmark's vocabulary that models read: split pools, shared perception words, number
words and the hidden folder's name.

It lives here, below both ``c3m.models`` and ``c3m.eval``, because perception backends (``oracle``, the
scene encoder) need these words and must not import the evaluation package. It imports nothing from c3m.
The phrasing templates (dialogue, filler, questions) stay in ``c3m.eval.synth.vocab``, which re-exports
everything here.
"""
from __future__ import annotations

from dataclasses import dataclass

#: Folder of a synthetic dataset holding hidden ground truth (evaluation and the ``oracle`` backend only).
HIDDEN = "_hidden"

SPLITS = ("train", "dev", "test")

# --- shared: words perception must handle in every split ----------------------------------------------
SHAPES = ("round", "square", "triangular", "hexagonal", "oval", "tall")
ROOMS = ("kitchen", "living room", "bedroom", "study", "hallway", "garage", "balcony", "attic")
SPECIES = ("dog", "cat", "rabbit", "parrot", "hamster", "turtle")
VEHICLES = ("car", "scooter", "van", "motorbike")
RELATIONS = ("sister", "brother", "colleague", "neighbour", "cousin", "friend")
SIDES = ("left", "right")
NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
                "twelve")


def number_word(n: int) -> str:
    """Spelled-out count for small numbers, digits beyond (long histories repaint things many times)."""
    return NUMBER_WORDS[n] if 0 <= n < len(NUMBER_WORDS) else str(n)

# Accessory glyphs the renderer knows; each split's items map onto them in order.
GLYPHS = ("bottle", "ball", "book", "candle", "box", "cup")


@dataclass(frozen=True)
class Pool:
    """The split-specific vocabulary: one per split, pairwise disjoint."""

    colours: dict[str, tuple[int, int, int]]
    materials: tuple[str, ...]
    kinds: tuple[str, ...]          # object kinds ("mug")
    kind_plurals: dict[str, str]
    accessories: tuple[tuple[str, str], ...]  # (plural noun, glyph)
    brands: tuple[str, ...]
    people: tuple[str, ...]
    pets: tuple[str, ...]
    jobs: tuple[str, ...]
    shops: tuple[str, ...]
    streets: tuple[str, ...]


POOLS: dict[str, Pool] = {
    "test": Pool(
        colours={"red": (205, 35, 35), "blue": (40, 75, 205), "green": (40, 150, 60), "yellow": (238, 205, 40),
                 "purple": (130, 60, 170), "orange": (240, 130, 30), "black": (30, 30, 30), "white": (248, 248, 248)},
        materials=("wood", "metal", "glass", "ceramic"),
        kinds=("mug", "vase", "lamp", "cooler", "backpack", "kettle", "clock", "basket", "jar", "suitcase",
               "toaster", "guitar"),
        kind_plurals={"mug": "mugs", "vase": "vases", "lamp": "lamps", "cooler": "coolers",
                      "backpack": "backpacks", "kettle": "kettles", "clock": "clocks", "basket": "baskets",
                      "jar": "jars", "suitcase": "suitcases", "toaster": "toasters", "guitar": "guitars"},
        accessories=(("water bottles", "bottle"), ("tennis balls", "ball"), ("paperback books", "book"),
                     ("candles", "candle"), ("gift boxes", "box"), ("paper cups", "cup")),
        brands=("Nordvik", "Halcyon", "Brisa", "Korvo", "Lumeo", "Tavari", "Osterby", "Quill"),
        people=("Lena", "Tomas", "Priya", "Marcus", "Ingrid", "Kenji", "Sofia", "Dmitri", "Amara", "Felix",
                "Rosa", "Yusuf"),
        pets=("Biscuit", "Pepper", "Mochi", "Rufus", "Clover", "Ziggy", "Nala", "Otis"),
        jobs=("nurse", "architect", "baker", "pilot", "librarian", "electrician", "dentist", "journalist"),
        shops=("Wego", "Corner Crumb", "Pixel Hut", "Fernway Books", "Saltbox Deli", "Tilly's Thread",
               "Gearloft", "Moonbeam Tea", "Harbor Hardware", "Velvet Spoon", "Kitestring Toys", "Brightside Optics"),
        streets=("Elm Street", "Harbour Road", "Maple Avenue", "Station Lane", "Mill Road", "Queen Street"),
    ),
    "dev": Pool(
        colours={"pink": (240, 140, 185), "brown": (120, 75, 40), "grey": (128, 128, 128), "teal": (0, 128, 128),
                 "navy": (20, 30, 100), "maroon": (120, 20, 45), "olive": (125, 125, 30), "beige": (222, 200, 160)},
        materials=("plastic", "stone", "leather", "wicker"),
        kinds=("teapot", "bucket", "drum", "lantern", "toolbox", "speaker", "pillow", "bowl", "trunk", "fan",
               "blender", "violin"),
        kind_plurals={"teapot": "teapots", "bucket": "buckets", "drum": "drums", "lantern": "lanterns",
                      "toolbox": "toolboxes", "speaker": "speakers", "pillow": "pillows", "bowl": "bowls",
                      "trunk": "trunks", "fan": "fans", "blender": "blenders", "violin": "violins"},
        accessories=(("juice cartons", "bottle"), ("oranges", "ball"), ("notebooks", "book"),
                     ("incense sticks", "candle"), ("shoeboxes", "box"), ("teacups", "cup")),
        brands=("Vantor", "Elswick", "Maribo", "Quenta", "Sorrel", "Dunmore", "Pavlo", "Ixora"),
        people=("Hanna", "Oscar", "Meera", "Jonas", "Leila", "Hiro", "Carmen", "Pavel", "Zainab", "Gustav",
                "Elena", "Kwame"),
        pets=("Noodle", "Juniper", "Waffle", "Basil", "Poppy", "Nugget", "Luna", "Barnaby"),
        jobs=("plumber", "teacher", "chemist", "chef", "surveyor", "florist", "paramedic", "translator"),
        shops=("Nimbus", "Rustic Loaf", "Byte Barn", "Quayside Prints", "Pickle Barrel", "Loom & Needle",
               "Cogwheel", "Lotus Leaf", "Anchor Tools", "Copper Pot Cafe", "Pebble Run", "Clearview Lens"),
        streets=("Birch Road", "Canal Street", "Oak Crescent", "Market Row", "Chapel Hill", "King's Way"),
    ),
    "train": Pool(
        colours={"turquoise": (64, 210, 200), "lavender": (180, 160, 230), "gold": (212, 175, 55),
                 "silver": (192, 192, 200), "coral": (250, 120, 100), "mint": (160, 235, 180),
                 "indigo": (75, 0, 130), "tan": (200, 160, 110)},
        materials=("bamboo", "rubber", "fabric", "marble"),
        kinds=("thermos", "crate", "radio", "candlestick", "satchel", "kettlebell", "hourglass", "hamper",
               "canister", "briefcase", "globe", "ukulele"),
        kind_plurals={"thermos": "thermoses", "crate": "crates", "radio": "radios", "candlestick": "candlesticks",
                      "satchel": "satchels", "kettlebell": "kettlebells", "hourglass": "hourglasses",
                      "hamper": "hampers", "canister": "canisters", "briefcase": "briefcases", "globe": "globes",
                      "ukulele": "ukuleles"},
        accessories=(("soda cans", "bottle"), ("lemons", "ball"), ("comic books", "book"),
                     ("tea lights", "candle"), ("parcels", "box"), ("espresso cups", "cup")),
        brands=("Zephra", "Alderon", "Kivu", "Morrow", "Penhale", "Ruvic", "Sablo", "Tenzo"),
        people=("Astrid", "Bruno", "Chiara", "Dev", "Esther", "Farid", "Greta", "Hugo", "Isla", "Jamal",
                "Katya", "Liam"),
        pets=("Pretzel", "Truffle", "Taco", "Domino", "Willow", "Gizmo", "Saffron", "Button"),
        jobs=("carpenter", "pharmacist", "welder", "accountant", "vet", "geologist", "tailor", "lifeguard"),
        shops=("Orbit", "Crust & Co", "Circuit Stop", "Paperlane", "Fig Tree Deli", "Stitch Works",
               "Sprocket Cycles", "Jade Garden", "Boltyard", "Honeycomb Bakery", "Puzzle Box", "Focal Point"),
        streets=("Ash Lane", "River Walk", "Cedar Drive", "Foundry Street", "Orchard Way", "Bridge Street"),
    ),
}


def pool_words(split: str) -> set[str]:
    """Every lower-cased vocabulary item of a split (for leak and disjointness checks)."""
    p = POOLS[split]
    words = set(p.colours) | set(p.materials) | set(p.kinds) | set(p.kind_plurals.values())
    words |= {a for a, _ in p.accessories} | set(p.brands) | set(p.people) | set(p.pets) | set(p.jobs)
    words |= set(p.shops) | set(p.streets)
    return {w.lower() for w in words}


def shared_words() -> set[str]:
    """Shared vocabulary that filler must also avoid (rooms, species, vehicles, shapes)."""
    return {w.lower() for w in (*SHAPES, *ROOMS, *SPECIES, *VEHICLES)}
