"""Phrasing for the ``photo`` preset: short generic photo captions, repeated small talk, and said shop
renames, each split disjoint from the others (and from every split's ``hard_vocab.CUES`` but its own).

Why: on held-out multimodal histories the memory lost where a state changed in a *photo whose text says
little* ("one more picture of X": the new value only in the image) and where the same entities came up again
and again in word-for-word small talk. ``photo_state`` lines name the entity and nothing else: no value, no
change word. The same lines caption re-shots of an unchanged entity, so the words never tell a change from a
re-shot; only the picture (or the order of turns) does. ``small_talk`` lines name an entity and state
nothing about it; one history draws 8-11 of them and repeats each word for word many times.

Templates not listed here come from ``hard_vocab.HARD_TEMPLATES`` and then ``vocab.TEMPLATES``.
"""
from __future__ import annotations

PHOTO_TEMPLATES: dict[str, dict[str, tuple[str, ...]]] = {
    "test": {
        # a second entity named in the same line, statement-free: "{ref} was right there too"
        "small_talk_also": ("{ref} was right there too, as usual.", "Of course {ref} was in the way as ever.",
                            "I kept glancing over at {ref} the whole time.", "{ref} sat nearby, just like always.",
                            "My eyes drifted to {ref} more than once."),
        "q_tr_previous": ("What colour was {ref} before its latest repaint?",),
        # 25-60 characters with the reference filled in; no value, no change word, no split cue of dev/train
        "photo_state": ("Sharing a picture of {ref}.", "Here is {ref} this afternoon.", "Took a snap of {ref} earlier.",
                        "{ref}, photographed today.", "A photo of {ref} for you to see.", "This is {ref} today, pic attached."),
        "photo_shop": ("Sharing a picture of the shop on {street}.", "Took a snap of the shop on {street}.",
                       "The shop on {street}, photographed today."),
        "shop_rename_text": ("The shop on {street} that was {old} is called {shop} now.",
                             "{old} on {street} has been renamed {shop}.",
                             "The shop on {street} goes by {shop} these days, not {old}."),
        "small_talk": ("I had my coffee right next to {ref} before work, like every morning.",
                       "My niece drew a picture of {ref} during her visit, it was adorable.",
                       "Whenever I sit near {ref} I end up daydreaming about holidays.",
                       "The afternoon sun hits {ref} just right around teatime.",
                       "A friend on the phone asked if I still have {ref}, we laughed about it.",
                       "I listened to a podcast while sitting close to {ref} all evening.",
                       "Every guest who comes over seems to notice {ref} first.",
                       "I wrote my shopping list standing beside {ref} this morning.",
                       "The neighbours' music was loud, so I hid next to {ref} with headphones.",
                       "Funny how {ref} has become part of my daily routine.",
                       "I spent the quiet hour after dinner near {ref} with a crossword.",
                       "Someone at the office wanted to know where I got {ref}."),
    },
    "dev": {
        "small_talk_also": ("{ref} was close by too, naturally.", "Naturally {ref} got in my way, as it does.",
                            "I kept peeking at {ref} throughout.", "{ref} was around as well, like every day.",
                            "I caught myself looking at {ref} a few times."),
        "q_tr_previous": ("Which colour did {ref} have just before it last got a new coat?",),
        "photo_state": ("A quick snap of {ref} for you.", "Here's {ref} in a photo from today.", "Snapped {ref} this morning.",
                        "A picture of {ref} for you.", "{ref}, in today's photo.", "Look, {ref}, a minute ago."),
        "photo_shop": ("A quick snap of the shop on {street}.", "The shop on {street}, today's photo.",
                       "Snapped the shop on {street} this morning."),
        "shop_rename_text": ("The shop on {street} is {shop} now; it used to be {old}.",
                             "{old} on {street} goes by {shop} these days.",
                             "No more {old} on {street}: it's called {shop}."),
        "small_talk": ("Had my breakfast sitting beside {ref}, the usual start to the day.",
                       "My nephew sketched {ref} while he waited for his lunch.",
                       "Sitting near {ref} always makes me think of summer trips.",
                       "Late light falls across {ref} in the most lovely way.",
                       "A pal on a call wondered whether I kept {ref}; we giggled.",
                       "Spent the evening with an audiobook, parked close to {ref}.",
                       "Visitors always seem to spot {ref} before anything else.",
                       "Jotted down my errands standing by {ref} before lunch.",
                       "The upstairs flat was noisy, so I hid by {ref} with earplugs.",
                       "It's odd how {ref} turned into part of my everyday life.",
                       "After dinner I did a puzzle next to {ref} for a quiet hour.",
                       "A coworker asked me where {ref} came from."),
    },
    "train": {
        "small_talk_also": ("{ref} was nearby too, obviously.", "Obviously {ref} was underfoot like always.",
                            "My gaze kept landing on {ref} all along.", "{ref} was right beside me, as ever.",
                            "I found myself eyeing {ref} now and then."),
        "q_tr_previous": ("Previous colour of {ref}, before the latest recolour?",),
        "photo_state": ("Quick pic of {ref} for you.", "{ref} in the light of today.", "Pic of {ref} from earlier.",
                        "Shot of {ref} from the doorway.", "Sending you {ref} in a photo.", "Pic of {ref} from after lunch."),
        "photo_shop": ("Quick pic of the shop on {street}.", "Pic of the shop on {street} from earlier.",
                       "Shot of the shop on {street} from across the road."),
        "shop_rename_text": ("The shop on {street} got the name {shop}; it was {old} before.",
                             "{old} on {street} is now called {shop}.",
                             "The sign on {street} says {shop} now instead of {old}."),
        "small_talk": ("Drank my morning juice leaning on the counter by {ref}, same as always.",
                       "A kid from next door doodled {ref} on a napkin.",
                       "Being near {ref} puts me in a holiday mood for some reason.",
                       "Evening light makes {ref} look almost magical.",
                       "A mate on the phone checked if {ref} is around these days; we chuckled.",
                       "Listened to a long audio drama, right by {ref}.",
                       "Whoever drops by always comments on {ref} first.",
                       "Made my to-do list leaning next to {ref} after breakfast.",
                       "The party downstairs was loud, so I sat by {ref} wearing ear muffs.",
                       "Strange how {ref} became a fixture of my day.",
                       "Did a jigsaw after supper beside {ref} in peace.",
                       "A workmate was curious where I found {ref}."),
    },
}
