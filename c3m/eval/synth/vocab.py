"""Vocabulary and phrasing pools, split into train / dev / test so learned parts are scored on unseen words.

Everything a learned component could memorise is split disjointly: entity names (people, pets, shops,
streets, brands), object kinds, accessory items, jobs, colours, materials and every phrasing template
(dialogue, filler, questions). Only words that a perception model must read in any split stay shared:
shapes, room names, species, vehicle kinds and relations. ``tests/test_synth.py`` checks disjointness and
that filler never uses a pool word (filler must not leak answers or AR subjects).
"""
from __future__ import annotations

from dataclasses import dataclass

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


# --- phrasing: one template set per split --------------------------------------------------------------
# Placeholders: {ref} entity reference ("my mug"), {kind}, {room}, {colour}, {brand}, {name}, {pet},
# {species}, {relation}, {job}, {vehicle}, {shop}, {street}, {old}, {new}.
TEMPLATES: dict[str, dict[str, tuple[str, ...]]] = {
    "test": {
        "q_msr_repaints": ("How many times has {ref} been repainted?",),
        "a_ar_job": ("You never told me what {name} does for work.",),
        "mention_object": ("I used {ref} again today.", "{ref} has been really handy lately."),
        "mention_pet": ("{pet} seems happy these days.",),
        "mention_person": ("I had lunch with {name} today.",),
        "obj_sell": ("I sold {ref} online yesterday.",),
        "obj_replace": ("I replaced {ref} with a new one from {brand}.",),
        "q_tr_room": ("Which room was {ref} in before {date}?",),
        "q_ku_room": ("Which room is {ref} in now?",),
        "q_ku_owned": ("Do I still have {ref}?",),
        "a_ku_sold": ("No, you sold it.",),
        "obj_intro": ("Here's my new {kind}, I put it in the {room}.",
                      "Just got a {kind} for the {room} - here it is."),
        "obj_intro_colour": ("Here's the {colour} {kind} I bought for the {room}.",),
        "obj_twin": ("I found another {kind} that looks almost the same, this one lives in the {room}.",),
        "obj_same": ("Another picture of {ref}, nothing has changed.", "Here is {ref} again from a new angle."),
        "obj_repaint_text": ("I repainted {ref} {colour} this weekend.",),
        "obj_repaint_image": ("I gave {ref} a fresh coat of paint - this is how it looks now.",),
        "obj_move": ("I moved {ref} to the {room}.",),
        "room_intro": ("This is my {room}.",),
        "room_repaint": ("We repainted the walls of the {room} {colour}.",),
        "room_repaint_image": ("We finished redecorating the {room}, have a look at the walls.",),
        "person_intro": ("My {relation} {name} just started working as a {job}.",),
        "pet_owner": ("My {relation} {name} adopted a {species} called {pet}.",),
        "pet_photo": ("{pet} is staying with me this week!",),
        "vehicle_intro": ("Finally picked up my {vehicle} from the dealer, here it is.",),
        "vehicle_repaint_text": ("I had my {vehicle} resprayed {colour}.",),
        "vehicle_repaint_image": ("My {vehicle} came back from the body shop with new paint.",),
        "shop_intro": ("There's a shop called {shop} on {street}, this is its sign.",),
        "shop_rename": ("The shop on {street} that was called {old} has a new name now.",),
        "ack": ("Thanks for sharing!", "Good to know, I'll remember that.", "Got it - thanks for the update."),
        "q_ie_accessory": ("In the first photo of {ref}, what was standing on its {side} side?",),
        "q_ie_attr": ("What {attr} is {ref}?",),
        "q_ie_brand": ("Which brand name is printed on {ref}?",),
        "q_ie_plate": ("What is the licence plate of my {vehicle}?",),
        "q_ie_sign": ("Which shop sign was {position} the {shop} sign on {street}?",),
        "q_ie_job": ("What does my {relation} {name} do for work?",),
        "q_msr_count": ("How many {plural} have I shown you in total?",),
        "q_msr_collar": ("What colour is the collar of my {relation} {name}'s {species}?",),
        "q_tr_before": ("What {attr} was {ref} before {date}?",),
        "q_tr_order": ("Which did I show you first, {ref_a} or {ref_b}?",),
        "q_ku_latest": ("What {attr} is {ref} now?",),
        "q_ku_shop": ("What is the shop on {street} called now?",),
        "q_ar_kind": ("What colour is my {kind}?",),
        "q_ar_person": ("What does my {relation} {name} do for work?",),
        "a_ar_kind": ("You never mentioned a {kind}.",),
        "a_ar_person": ("You never told me about anyone named {name}.",),
    },
    "dev": {
        "q_msr_repaints": ("How often did {ref} get a new coat of paint?",),
        "a_ar_job": ("You haven't said what {name}'s job is.",),
        "mention_object": ("{ref} got some use this week.", "Can't imagine the house without {ref}."),
        "mention_pet": ("Heard that {pet} is doing great.",),
        "mention_person": ("Bumped into {name} at the station.",),
        "obj_sell": ("Sold {ref}, a buyer picked it up.",),
        "obj_replace": ("Swapped {ref} for a {brand} model.",),
        "q_tr_room": ("Before {date}, where in the house was {ref}?",),
        "q_ku_room": ("Where in the house is {ref} at the moment?",),
        "q_ku_owned": ("Is {ref} still mine?",),
        "a_ku_sold": ("No, you got rid of it.",),
        "obj_intro": ("Look at the {kind} I got, it's going in the {room}.",
                      "New {kind} for the {room}, see the photo."),
        "obj_intro_colour": ("Picked up a {colour} {kind} for the {room}.",),
        "obj_twin": ("Funny, there's a second {kind} almost identical to mine, kept in the {room}.",),
        "obj_same": ("Snapped {ref} once more, still the same.", "One more shot of {ref}."),
        "obj_repaint_text": ("{ref} got a new {colour} paint job.",),
        "obj_repaint_image": ("Painted {ref} again, what do you think?",),
        "obj_move": ("{ref} now sits in the {room}.",),
        "room_intro": ("A photo of the {room}.",),
        "room_repaint": ("The {room} walls are {colour} now.",),
        "room_repaint_image": ("Redid the {room} walls, see for yourself.",),
        "person_intro": ("{name}, my {relation}, got a job as a {job}.",),
        "pet_owner": ("{name}, my {relation}, now has a {species} named {pet}.",),
        "pet_photo": ("Looking after {pet} for a few days.",),
        "vehicle_intro": ("Here's my {vehicle}, just bought it.",),
        "vehicle_repaint_text": ("My {vehicle} is {colour} now after the respray.",),
        "vehicle_repaint_image": ("Look at my {vehicle} after the paint job.",),
        "shop_intro": ("Snapped the sign of {shop} on {street}.",),
        "shop_rename": ("{old} on {street} changed its name.",),
        "ack": ("Noted!", "Thanks, I've got that.", "Nice, thanks for telling me."),
        "q_ie_accessory": ("When I first showed you {ref}, what was on its {side} side?",),
        "q_ie_attr": ("What is the {attr} of {ref}?",),
        "q_ie_brand": ("What brand is {ref}?",),
        "q_ie_plate": ("What plate number does my {vehicle} have?",),
        "q_ie_sign": ("Whose sign hung {position} the {shop} sign on {street}?",),
        "q_ie_job": ("What job does {name}, my {relation}, have?",),
        "q_msr_count": ("Across our chats, how many {plural} did I show you?",),
        "q_msr_collar": ("Which colour collar does the {species} of my {relation} {name} wear?",),
        "q_tr_before": ("Before {date}, what was the {attr} of {ref}?",),
        "q_tr_order": ("Which came up first in our chats, {ref_a} or {ref_b}?",),
        "q_ku_latest": ("What is the current {attr} of {ref}?",),
        "q_ku_shop": ("What's the current name of the shop on {street}?",),
        "q_ar_kind": ("Where do I keep my {kind}?",),
        "q_ar_person": ("What is my {relation} {name}'s job?",),
        "a_ar_kind": ("You haven't told me about a {kind}.",),
        "a_ar_person": ("You haven't mentioned anyone called {name}.",),
    },
    "train": {
        "q_msr_repaints": ("Count the repaints of {ref}: how many?",),
        "a_ar_job": ("No profession was ever given for {name}.",),
        "mention_object": ("Dusted off {ref} earlier.", "{ref} came in useful again."),
        "mention_pet": ("{pet} sends greetings, apparently.",),
        "mention_person": ("Caught up with {name} over coffee.",),
        "obj_sell": ("{ref} is gone, I sold it.",),
        "obj_replace": ("Upgraded {ref}; the new one is by {brand}.",),
        "q_tr_room": ("As of just before {date}, which room held {ref}?",),
        "q_ku_room": ("Latest room of {ref}?",),
        "q_ku_owned": ("Do I still own {ref}?",),
        "a_ku_sold": ("No, it was sold.",),
        "obj_intro": ("I just added a {kind} to the {room}, photo attached.",
                      "Meet my {kind}, it belongs in the {room}."),
        "obj_intro_colour": ("Bought a {colour} {kind}; it's in the {room} now.",),
        "obj_twin": ("I also have a look-alike {kind} over in the {room}.",),
        "obj_same": ("Quick photo of {ref} again.", "{ref}, same as before."),
        "obj_repaint_text": ("Changed the colour of {ref} to {colour}.",),
        "obj_repaint_image": ("{ref} has been repainted, take a look.",),
        "obj_move": ("Relocated {ref} to the {room}.",),
        "room_intro": ("Here's how my {room} looks.",),
        "room_repaint": ("Painted the {room} {colour} today.",),
        "room_repaint_image": ("The {room} has new wall paint, photo below.",),
        "person_intro": ("Big news: {name} ({relation}) is a {job} now.",),
        "pet_owner": ("{name} - my {relation} - took in a {species}, its name is {pet}.",),
        "pet_photo": ("{pet} came to visit today.",),
        "vehicle_intro": ("My {vehicle} arrived, have a look.",),
        "vehicle_repaint_text": ("Resprayed my {vehicle}: it's {colour} now.",),
        "vehicle_repaint_image": ("The {vehicle} has a new colour, photo attached.",),
        "shop_intro": ("This is the sign for {shop}, the shop on {street}.",),
        "shop_rename": ("The old {old} shop on {street} got renamed.",),
        "ack": ("Okay, saved that.", "Cool, thanks!", "Understood."),
        "q_ie_accessory": ("Looking back at the first picture of {ref}, which items stood on its {side} side?",),
        "q_ie_attr": ("Tell me the {attr} of {ref}.",),
        "q_ie_brand": ("Whose brand logo is on {ref}?",),
        "q_ie_plate": ("Tell me the registration of my {vehicle}.",),
        "q_ie_sign": ("On {street}, which sign was {position} the {shop} sign?",),
        "q_ie_job": ("What is {name}'s profession ({relation})?",),
        "q_msr_count": ("Count the {plural} I've shown you: how many?",),
        "q_msr_collar": ("Tell me the collar colour of {name}'s {species} (my {relation}).",),
        "q_tr_before": ("As of just before {date}, what {attr} did {ref} have?",),
        "q_tr_order": ("Earlier in our chats: {ref_a} or {ref_b}?",),
        "q_ku_latest": ("Latest {attr} of {ref}?",),
        "q_ku_shop": ("Latest name of the shop on {street}?",),
        "q_ar_kind": ("What brand is my {kind}?",),
        "q_ar_person": ("What's the profession of my {relation} {name}?",),
        "a_ar_kind": ("I have no record of a {kind}.",),
        "a_ar_person": ("No one named {name} has come up.",),
    },
}

# --- filler: chit-chat that never names an entity, colour or pool word ---------------------------------
FILLER: dict[str, dict[str, tuple[str, ...]]] = {
    "test": {
        "when": ("this morning", "yesterday", "on Monday", "last night", "over the weekend", "today",
                 "on Friday evening", "earlier"),
        "open": ("Anyway,", "By the way,", "So,", "Random thought:", "Quick update:", "Oh,"),
        "topic": ("the weather turned cold and drizzly", "I tried a new pasta recipe with lots of garlic",
                  "work was hectic because of a deadline", "I went for a long run by the river",
                  "I started reading a thriller novel", "my neighbours threw a loud party",
                  "I'm planning a weekend trip to the mountains", "I finally fixed my sleep schedule",
                  "the train was late again", "I binge-watched a documentary series",
                  "I signed up for a pottery class", "my team won the quiz night at the pub",
                  "an old schoolmate keeps changing her wedding plans", "I tried meditating for ten minutes a day",
                  "the gym was surprisingly empty", "I spent hours sorting old photos on my laptop",
                  "someone at work recommended a podcast about history", "I finally booked a haircut"),
        "tail": ("and I feel pretty good about it.", "which took most of my evening.", "so that was my day.",
                 "and honestly it was a nice change.", "though I'm a bit tired now.",
                 "and I want to do it again soon."),
        "reply": ("That sounds like a full day.", "Glad to hear it went well.", "Hope you get some rest.",
                  "That must have been fun.", "Sounds like a good plan.", "Thanks for telling me about your day."),
        "reply_tail": ("Let me know how it goes.", "Anything else on your mind?", "Take care of yourself.",
                       "I'm here if you want to chat more.", "Enjoy the rest of the week."),
    },
    "dev": {
        "when": ("this afternoon", "two days ago", "on Tuesday", "late last night", "on Saturday", "just now",
                 "on Thursday", "this week"),
        "open": ("Also,", "Side note:", "Well,", "Hey,", "Just so you know,", "Funny thing:"),
        "topic": ("it rained nonstop on my commute", "I baked bread for the first time",
                  "my manager moved our meeting twice", "I swam thirty lengths at the pool",
                  "I'm halfway through a fantasy trilogy", "the street festival was packed",
                  "I booked tickets for a concert next month", "I slept in until noon",
                  "the bus broke down near the bridge", "I watched an old western film",
                  "I joined a salsa dance class", "our book club argued about the ending",
                  "my sleep tracker says I need more rest", "I tried a new yoga routine",
                  "the library had a used book sale", "I reorganised all my files at work",
                  "I listened to an audiobook on the commute", "I renewed my passport at last"),
        "tail": ("and it was worth it.", "so the evening flew by.", "which was a surprise.",
                 "and I'm still thinking about it.", "so I'm a little worn out.", "and I'd happily repeat it."),
        "reply": ("What a day!", "Nice, that sounds rewarding.", "Rest up when you can.",
                  "That sounds like a blast.", "Good call.", "Thanks for the update on your week."),
        "reply_tail": ("Keep me posted.", "What's next for you?", "Look after yourself.",
                       "Happy to chat anytime.", "Have a lovely evening."),
    },
    "train": {
        "when": ("at lunchtime", "the other day", "on Wednesday", "before dawn", "on Sunday", "tonight",
                 "at the weekend", "recently"),
        "open": ("Incidentally,", "On another note,", "Right,", "Okay so", "News:", "Hmm,"),
        "topic": ("there was a huge thunderstorm", "I cooked a curry from scratch",
                  "the office wifi was down all afternoon", "I cycled to the lake and back",
                  "I picked up a poetry collection", "the farmers market was busy",
                  "I'm organising a picnic with old classmates", "I went to bed early",
                  "my flight got delayed by three hours", "I rewatched a classic sitcom",
                  "I took a beginner climbing session", "my chess club had a tournament",
                  "I helped an old classmate move flats", "I practised the piano for an hour",
                  "the swimming pool reopened after repairs", "I cleaned out my email inbox",
                  "I attended a webinar on budgeting", "I made a playlist for the road trip"),
        "tail": ("and it went smoothly.", "which filled the whole afternoon.", "so not much else happened.",
                 "and I learned something new.", "so I need a nap.", "and I'll probably do it again."),
        "reply": ("Sounds eventful.", "That's great to hear.", "Make sure you recharge.",
                  "How exciting.", "Seems like a solid idea.", "Thanks for keeping me in the loop."),
        "reply_tail": ("Tell me more later.", "Anything else new?", "Don't overdo it.",
                       "Always happy to listen.", "Enjoy the weekend."),
    },
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
