"""A MemLens-style multimodal cross-session benchmark generator (issue 4).

The public multimodal memory benchmarks cannot be downloaded here, so this builds histories that are hard
in the same ways: a world of people, pets, rooms, objects, shops and vehicles whose attributes change over
time (repainted, moved, replaced, sold, renamed), shown in dialogue turns and in Pillow-drawn pictures;
details that exist only in a picture; look-alike twins in different rooms, near-duplicate photos,
entities updated several times, and chit-chat filler up to the requested length. Every history gets the
same number of questions in each MemLens category (IE, MSR, TR, KU, AR) with gold answers and gold
evidence turns derived from the world plan.

    from c3m.eval.synth import generate_dataset, load_hidden
    generate_dataset("data/synth-32k", length="32k", episodes=100, seed=0, split="test", workers=2)

Files written to ``OUT``:

- ``episodes.jsonl`` + ``images/<history>/<session>-<turn>.png``: the dataset (docs/architecture.md, Formats), written
  with ``c3m.dataset.write_dataset``; this is all a memory method may see.
- ``manifest.json``: generator version, arguments, question counts per category, token/session/image stats.
- ``_hidden/``: **for evaluation and the explicitly named ``oracle`` perception backend only.** Memory
  methods and every non-oracle backend must never read it, or perception quality leaks into the memory
  score. ``scenes.jsonl`` (one scene graph per image: objects with type, attributes, bounding box and
  relative positions), ``relations.jsonl`` (gold same / update / distinct labels between observations,
  for training the relation head), ``world.jsonl`` (per history: every entity's attribute timeline and
  observations), ``questions.jsonl`` (per question: type, whether the answer is visual-only, and the
  supporting facts behind its evidence).

History length counts text tokens of all turns with ``ApproxTokenCounter`` (images are counted
separately) and lands within ±10% of the target. Output is byte-identical for the same arguments, for
any number of workers. The ``split`` switch picks disjoint train / dev / test vocabularies and phrasings
(``vocab.py``), so learned parts are never scored on what they were trained on.

``preset="easy"`` (the default) is the original generator, unchanged. ``preset="hard"`` (``--preset hard``)
is built so dense top-k retrieval does not saturate: many statement-free mentions per entity (plain,
near-miss "thought about repainting it", attribute talk, look-alikes side by side), facts wrapped in chat,
a multi-sentence filler grammar, several split-disjoint phrasings per fact and cue (``hard_vocab.py``),
bursts of re-shared photos (sessions over the reader's 8-image budget), more updates per object, and AR
questions with evidence (a change asked of an object it never happened to, or of its look-alike's change).
Its calibration: ``benchmarks/results/hard-synth-cpu/calibration.md``.

``preset="photo"`` (``--preset photo``, issue 43) is ``hard``'s questions in the shape that beat the memory on
held-out multimodal histories: several hundred short sessions; every changed entity changes 2-4 times and
about half the changes are shown only in a photo whose caption is short and generic ("a quick snap of X":
the entity, never the value nor a change word; re-shots get the same captions), the rest said in a long or a
short turn; 8-11 small-talk lines per history name an object and state nothing, each repeated word for word
many times; TR also asks the colour just before the latest repaint (``photo_vocab.py``). ``world.jsonl``
lists the photo-only change turns (``photo_turns``) and the repeats (``small_talk``, also as ``mentions``);
question support rows carry ``photo_only`` and ``text_chars``, so diagnostics can split results by them.
Its calibration: ``benchmarks/results/photo-synth-cpu/calibration.md``.
"""
from .generate import GENERATOR, VERSION, generate_dataset, history_seed, load_hidden, parse_length

__all__ = ["GENERATOR", "VERSION", "generate_dataset", "history_seed", "load_hidden", "parse_length"]
