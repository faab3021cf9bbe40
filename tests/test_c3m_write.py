"""Unit tests of C3M's write path: units, descriptors, the index and its snapshot, the relation head,
RAMU's Eq. 3 decision and the capacity policy."""
from __future__ import annotations

import json
import math
from collections import Counter
from datetime import datetime, timedelta

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from c3m.config import MemoryConfig
from c3m.errors import InvalidInput
from c3m.memory import Memory
from c3m.models.anchors import HeuristicAnchorExtractor, make_anchor_extractor
from c3m.models.relation_head import FeatureRelationHead
from c3m.types import Action, Provenance, RawNode, Relation, Session, Turn, WriteBudget, node_id_for
from c3m.index import active as windex
from c3m.write import capacity, ramu, units
from c3m.write.features import FEATURE_NAMES
from c3m.index.active import ActiveIndex, IndexEntry, Version, decode_turns, encode_turns, normalize

T0 = datetime(2026, 1, 1, 9, 0)


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------
def _node(session: str, turn: int, role: str, text: str) -> RawNode:
    return RawNode(node_id_for("u", session, turn), Provenance("u", session, turn, T0), role, text)


def _count(text: str) -> int:
    return len(text.split())


def _unit(session="s1", turns=(0, 1), *, z=None, entities=(), states=(), change=False, time=T0) -> units.Unit:
    z = normalize(np.ones(8, np.float32) if z is None else np.asarray(z, np.float32))
    return units.Unit(session, list(turns), [node_id_for("u", session, t) for t in turns], time, "text", z,
                      set(entities), set(states), change)


def _entry(index: ActiveIndex, *, z=None, pointers=None, entities=("mug",), states=("blue",)) -> IndexEntry:
    e = IndexEntry(index.new_id(), normalize(np.ones(index.dim, np.float32) if z is None else z),
                   pointers or {"s0": {0, 1}}, T0, T0, "my blue mug", entities=Counter(entities),
                   states=list(states))
    index.entries[e.entry_id] = e
    index.pages = index.pages or [windex.IndexPage(e.z)]
    return e


@pytest.fixture(scope="module")
def anchors():
    """spaCy when installed (dev), the heuristic otherwise."""
    return make_anchor_extractor("auto")


roles = st.lists(st.sampled_from(["user", "assistant", "system"]), min_size=0, max_size=12)


# ---------------------------------------------------------------------------------------------
# write.units.segment
# ---------------------------------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(roles=roles, unit_tokens=st.integers(0, 30), words=st.lists(st.integers(0, 6), min_size=12, max_size=12))
def test_segment_covers_every_node_once_in_order(roles, unit_tokens, words):
    nodes = [_node("s1", i, r, " ".join(["w"] * words[i])) for i, r in enumerate(roles)]
    groups = units.segment(nodes, unit_tokens, _count)
    flat = [n for g in groups for n in g]
    assert [n.node_id for n in flat] == [n.node_id for n in nodes]  # each node exactly once, order kept
    assert all(groups)  # no empty unit
    for g in groups[1:]:
        assert g[0].role == "user"  # every unit but the first starts at a user turn


def test_segment_zero_tokens_is_one_unit_per_user_turn():
    roles_ = ["user", "assistant", "user", "user", "assistant", "assistant", "user"]
    nodes = [_node("s1", i, r, f"turn {i}") for i, r in enumerate(roles_)]
    groups = units.segment(nodes, 0, _count)
    assert [[n.turn_index for n in g] for g in groups] == [[0, 1], [2], [3, 4, 5], [6]]


def test_segment_leading_assistant_turns_form_their_own_unit():
    nodes = [_node("s1", i, r, "hi") for i, r in enumerate(["assistant", "user", "assistant"])]
    assert [[n.turn_index for n in g] for g in units.segment(nodes, 0, _count)] == [[0], [1, 2]]


def test_segment_huge_budget_is_one_unit():
    nodes = [_node("s1", i, r, "some words here") for i, r in enumerate(["user", "assistant"] * 5)]
    groups = units.segment(nodes, 10**9, _count)
    assert len(groups) == 1 and [n.turn_index for n in groups[0]] == list(range(10))
    assert units.segment([], 0, _count) == []


def test_segment_token_threshold_cuts_at_user_turns():
    # each turn holds 3 tokens: a new unit starts at a user turn once the unit holds >= 6 tokens
    nodes = [_node("s1", i, r, "a b c") for i, r in enumerate(["user", "assistant", "user", "assistant", "user"])]
    assert [[n.turn_index for n in g] for g in units.segment(nodes, 6, _count)] == [[0, 1], [2, 3], [4]]


# ---------------------------------------------------------------------------------------------
# write.units.describe_text
# ---------------------------------------------------------------------------------------------
def _describe(extractor, text):
    """(entities, states, change) — the first three fields, whatever else describe_text reports."""
    return tuple(units.describe_text(text, extractor.extract([text])[0])[:3])


@pytest.mark.parametrize("extractor", ["auto", "heuristic"])
def test_describe_text_entity_and_colour(extractor):
    x = make_anchor_extractor(extractor)
    ents, states, change = _describe(x, "Here's the blue backpack I bought for the garage.")
    assert "backpack" in ents and "blue" in states and not change
    assert "blue backpack" not in ents  # colour words are stripped from entity keys
    assert "blue" not in ents


@pytest.mark.parametrize("extractor", ["auto", "heuristic"])
def test_describe_text_new_name_is_a_state_with_a_change_cue(extractor):
    x = make_anchor_extractor(extractor)
    ents, states, change = _describe(x, "The shop is called Pixel Hut now.")
    assert "pixel hut" in states and change
    if not isinstance(x, HeuristicAnchorExtractor):
        assert "shop" in ents  # spaCy sees the noun chunk; the heuristic's noun list has no "shop"


@pytest.mark.parametrize("extractor", ["auto", "heuristic"])
@pytest.mark.parametrize("text", ["Quick update: the weather was fine, a nice change.",
                                  "Quick update: I tidied up the desk today, a nice change"])
def test_describe_text_small_talk_cues_are_not_changes(extractor, text):
    assert _describe(make_anchor_extractor(extractor), text)[2] is False


@pytest.mark.parametrize("text", ["I repainted my clock red.", "The lamp is no longer in the hall.",
                                  "We moved the sofa to the bedroom.", "I renamed the cat Pixel."])
def test_describe_text_change_cues(anchors, text):
    assert _describe(anchors, text)[2] is True


def test_describe_text_numbers_are_states_and_dates_are_skipped(anchors):
    ents, states, _ = _describe(anchors, "My locker number is 42 since Monday.")
    assert "42" in states
    assert "monday" not in ents


# ---------------------------------------------------------------------------------------------
# write.index: pointer encoding, snapshot round trip, normalize
# ---------------------------------------------------------------------------------------------
@settings(max_examples=200, deadline=None)
@given(st.sets(st.integers(0, 60), max_size=40))
def test_turn_ranges_round_trip(turns):
    s = encode_turns(turns)
    assert decode_turns(s) == turns
    assert encode_turns(decode_turns(s)) == s
    assert " " not in s and (s == "") == (not turns)


def test_turn_ranges_are_compact():
    assert encode_turns([5, 0, 1, 2, 2, 7, 8]) == "0-2,5,7-8"
    assert decode_turns("0-2,5,7-8") == {0, 1, 2, 5, 7, 8}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(-1e3, 1e3, allow_nan=False, width=32), min_size=8, max_size=8))
@example([1e-23, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 2e-23])  # float32 squares underflow: the norm was 0 (vector kept)
@example([3e-20, 1e-21, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
def test_normalize_is_idempotent_through_the_snapshot(values):
    z = normalize(np.array(values, np.float32))
    assert z.dtype == np.float32
    back = windex.decode_vec(windex.encode_vec(z))
    assert back.tobytes() == z.tobytes()  # stored exactly as float16 -> float32: bit-identical after a round trip
    assert windex.decode_vec(windex.encode_vec(back)).tobytes() == z.tobytes()
    if np.any(z):
        assert abs(float(np.linalg.norm(z)) - 1.0) < 2e-3
        # normalize(normalize(x)) is only *close* to normalize(x): re-dividing by the float16-rounded norm
        # can move a component by one float16 ulp (e.g. [0,0,0,0,0,1,23,23]); see the report
        assert np.allclose(normalize(z), z, atol=1e-3)
    else:
        assert not np.any(normalize(z))


def _random_index(seed: int, n: int = 7) -> ActiveIndex:
    rng = np.random.default_rng(seed)
    idx = ActiveIndex(16)
    for i in range(n):
        u = _unit(f"s{i:03d}", sorted(rng.choice(10, size=3, replace=False).tolist()), z=rng.normal(size=16),
                  entities={f"thing{i % 3}", "room"}, states={["red", "blue", "green"][i % 3]}, time=T0 + timedelta(i))
        idx.observe_df(u.entities)
        cands = ramu.propose(idx, u, 3, 0.0)
        d = ramu.decide(u, cands, FeatureRelationHead(), idx, 0.6)
        ramu.apply(idx, u, d, f"summary {i}", WriteBudget(entries=8, pages=3), 0.35)
    # make sure there is an update chain, a keep-link, a spill and compaction to round-trip
    e = idx.ordered()[0]
    e.versions.append(Version(T0, {"s900": {1, 2, 3}}, ["old"], "before"))
    e.links.append([idx.ordered()[-1].entry_id, "distinct", 0.7])
    e.compact = 2
    return idx


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 10_000))
def test_active_index_state_round_trip(seed):
    idx = _random_index(seed)
    state = idx.state()
    text = json.dumps(state, sort_keys=True)
    back = ActiveIndex.from_state(json.loads(text))
    assert json.dumps(back.state(), sort_keys=True) == text
    assert back.pointer_ids("u") == idx.pointer_ids("u")
    assert back.sources() == idx.sources()
    assert back.usage(_count) == idx.usage(_count)
    for a, b in zip(idx.ordered(), back.ordered()):
        assert a.z.tobytes() == b.z.tobytes()  # vectors survive bit-for-bit
        assert a.render() == b.render()
    # and a second round trip is stable
    assert ActiveIndex.from_state(back.state()).state() == back.state()


def test_sources_include_predecessor_versions():
    idx = ActiveIndex(4)
    e = _entry(idx, pointers={"s2": {0}})
    e.versions.append(Version(T0, {"s1": {3, 4}}, ["red"], "old"))
    assert e.sources() == {"s2": {0}, "s1": {3, 4}}
    assert idx.pointer_ids("u") == {node_id_for("u", "s2", 0), node_id_for("u", "s1", 3), node_id_for("u", "s1", 4)}


# ---------------------------------------------------------------------------------------------
# models.relation_head.FeatureRelationHead
# ---------------------------------------------------------------------------------------------
def _features(**kw) -> dict[str, float]:
    f = {n: 0.0 for n in FEATURE_NAMES}
    f.update(kw)
    if "novelty" not in kw:  # as relation_features derives it when the unit names states
        f["novelty"] = f["state_new"] if f["state_new"] else f["change"]
    return f


def test_feature_head_readings():
    head = FeatureRelationHead()
    feats = [_features(sim=0.9, entity=1.0, entity_jaccard=1.0, state_same=1.0),          # same thing, nothing new
             _features(sim=0.8, entity=1.0, entity_jaccard=1.0, state_new=1.0, change=1.0),  # new state + cue
             _features(sim=0.9, entity=0.0),                                                 # about something else
             _features(sim=0.2, entity=0.0, state_new=1.0, change=1.0)]
    out = head.predict(feats)
    assert len(out) == len(feats)
    assert [r for r, _ in out] == [Relation.SAME, Relation.UPDATE, Relation.DISTINCT, Relation.DISTINCT]
    assert all(0.0 < c <= 1.0 for _, c in out)
    assert head.predict([]) == []


@settings(max_examples=200, deadline=None)
@given(st.lists(st.fixed_dictionaries({n: st.floats(0, 1) for n in FEATURE_NAMES}), max_size=6))
def test_feature_head_is_total_and_bounded(feats):
    out = FeatureRelationHead().predict(feats)
    assert len(out) == len(feats)
    for r, c in out:
        assert isinstance(r, Relation)
        assert 0.25 <= c <= 1.0  # the arg-max of a 4-way softmax


# ---------------------------------------------------------------------------------------------
# write.ramu.decide: every branch of Eq. 3
# ---------------------------------------------------------------------------------------------
class StubHead:
    name = "stub"

    def __init__(self, answers):
        self.answers = list(answers)
        self.seen = []

    def predict(self, features):
        self.seen.append(list(features))
        assert len(features) == len(self.answers)
        return list(self.answers)


def _cands(idx: ActiveIndex, n: int):
    return [(_entry(idx, z=np.eye(idx.dim, dtype=np.float32)[i % idx.dim]), 0.9 - 0.1 * i) for i in range(n)]


DELTA = 0.6
@pytest.mark.parametrize("answers, action, relation, target", [
    ([(Relation.SAME, 0.9)], Action.MERGE, Relation.SAME, 0),
    ([(Relation.UPDATE, 0.8)], Action.UPDATE, Relation.UPDATE, 0),
    ([(Relation.SAME, DELTA)], Action.MERGE, Relation.SAME, 0),                       # c == δ merges
    ([(Relation.UPDATE, DELTA)], Action.UPDATE, Relation.UPDATE, 0),                  # c == δ updates
    ([(Relation.SAME, DELTA - 1e-3)], Action.KEEP, Relation.SAME, 0),                 # just below δ keeps
    ([(Relation.UPDATE, DELTA - 1e-3)], Action.KEEP, Relation.UPDATE, 0),
    ([(Relation.SAME, float(np.nextafter(DELTA, 0)))], Action.KEEP, Relation.SAME, 0),  # no rounding up to δ
    ([(Relation.UPDATE, DELTA - 1e-6)], Action.KEEP, Relation.UPDATE, 0),
    ([(Relation.DISTINCT, 0.99)], Action.KEEP, Relation.DISTINCT, 0),                 # confident distinct
    ([(Relation.UNCERTAIN, 0.99)], Action.KEEP, Relation.UNCERTAIN, 0),
    # e* is the strongest actionable candidate: a confident stranger does not veto the merge
    ([(Relation.DISTINCT, 0.99), (Relation.SAME, 0.7)], Action.MERGE, Relation.SAME, 1),
    ([(Relation.SAME, 0.65), (Relation.UPDATE, 0.9)], Action.UPDATE, Relation.UPDATE, 1),
    ([(Relation.SAME, 0.9), (Relation.UPDATE, 0.65)], Action.MERGE, Relation.SAME, 0),
    ([(Relation.SAME, 0.5), (Relation.UPDATE, 0.55)], Action.KEEP, Relation.UPDATE, 1),
])
def test_decide_eq3(answers, action, relation, target):
    idx = ActiveIndex(8)
    cands = _cands(idx, len(answers))
    head = StubHead(answers)
    d = ramu.decide(_unit(), cands, head, idx, DELTA)
    assert d.action is action and d.relation is relation
    assert d.target == cands[target][0].entry_id
    assert d.confidence == pytest.approx(dict(enumerate(answers))[target][1], abs=1e-4)
    assert len(d.judged) == len(answers) and len(head.seen) == 1 and len(head.seen[0]) == len(answers)
    assert all(set(f) == set(FEATURE_NAMES) for f in head.seen[0])


def test_decide_boundary_is_not_lost_to_rounding():
    """The log rounds c to 4 decimals; the δ comparison must not: a confidence a hair under δ Keeps."""
    idx = ActiveIndex(8)
    d = ramu.decide(_unit(), _cands(idx, 1), StubHead([(Relation.SAME, DELTA - 1e-9)]), idx, DELTA)
    assert d.action is Action.KEEP


def test_keep_names_the_most_confident_candidate():
    idx = ActiveIndex(8)
    cands = _cands(idx, 2)
    d = ramu.decide(_unit(), cands, StubHead([(Relation.DISTINCT, 0.99), (Relation.UNCERTAIN, 0.4)]), idx, DELTA)
    assert d.action is Action.KEEP
    assert (d.target, d.relation, d.confidence) == (cands[0][0].entry_id, Relation.DISTINCT, 0.99)


def test_decide_without_candidates_adds():
    idx = ActiveIndex(8)
    head = StubHead([])
    d = ramu.decide(_unit(), [], head, idx, DELTA)
    assert d.action is Action.ADD and d.target is None and d.relation is None and d.judged == ()
    assert head.seen == []  # the head is not consulted


def test_apply_merge_update_keep_keep_provenance():
    budget = WriteBudget()
    for action, relation in ((Action.MERGE, Relation.SAME), (Action.UPDATE, Relation.UPDATE)):
        idx = ActiveIndex(8)
        e = _entry(idx, pointers={"s0": {0, 1}})
        before = e.sources()
        u = _unit("s5", (2, 3), states={"red"})
        log = ramu.apply(idx, u, ramu.Decision(action, e.entry_id, relation, 0.9, ()), "new", budget, 0.35)
        assert log["action"] == action.value and log["entry"] == e.entry_id and log["relation"] == relation.value
        src = idx.entries[e.entry_id].sources()
        for s, t in list(before.items()) + [("s5", {2, 3})]:  # Eq. 4: Src(e') ⊇ Src(e*) ∪ P_t
            assert t <= src[s]
        assert len(idx.entries) == 1
        if action is Action.UPDATE:
            assert idx.entries[e.entry_id].versions[-1].states == ["blue"]
            assert idx.entries[e.entry_id].states == ["red"]
    idx = ActiveIndex(8)
    e = _entry(idx)
    u = _unit("s5", (2,))
    log = ramu.apply(idx, u, ramu.Decision(Action.KEEP, e.entry_id, Relation.DISTINCT, 0.7, ()), "k", budget, 0.35)
    new = idx.entries[log["entry"]]
    assert new is not e and new.pointers == {"s5": {2}} and new.links == [[e.entry_id, "distinct", 0.7]]
    assert e.sources() == {"s0": {0, 1}}  # the candidate is untouched by Keep


# ---------------------------------------------------------------------------------------------
# write.capacity.enforce
# ---------------------------------------------------------------------------------------------
OBJECTS = ["mug", "clock", "lamp", "kettle", "backpack", "umbrella", "guitar", "mirror", "pillow", "basket",
           "scarf", "wallet", "camera", "teapot", "vase", "drum"]
COLOURS = ["red", "blue", "green", "yellow", "purple", "orange", "white", "black"]
ROOMS = ["kitchen", "garage", "attic", "hallway", "bedroom", "office", "garden", "cellar"]


def _distinct_session(i: int) -> Session:
    text = f"Here's my {COLOURS[i % 8]} {OBJECTS[i % 16]} in the {ROOMS[(i // 2) % 8]}, it cost {10 + i} euros."
    return Session(f"s{i:03d}", T0 + timedelta(days=i), (Turn("user", text), Turn("assistant", "Nice one!")))


@pytest.fixture
def filled(tmp_path, models):
    """A c3m Memory with 16 distinct sessions under the default (roomy) budget."""
    mem = Memory(tmp_path / "store", "u", config=MemoryConfig(method="c3m"), models=models)
    for i in range(16):
        mem.add_session(_distinct_session(i))
    yield mem
    mem.close()


def _listed(x) -> list:
    return x if isinstance(x, list) else [x]


@pytest.mark.parametrize("planned", [True, False], ids=["planned", "stepwise"])
def test_enforce_repairs_overflow_and_keeps_every_pointer(filled, models, planned):
    idx = filled.method.index
    count = models.token_counter.count
    assert len(idx.entries) > 4  # roomy budget: nothing folded yet
    before = idx.pointer_ids("u")
    assert len(before) == 32
    budget = WriteBudget(entries=4, pages=2, index_tokens=10_000, index_bytes=10**6)
    log = capacity.enforce(idx, budget, filled.method.head, count, 0.6, planned=planned)
    use = idx.usage(count)
    assert all(u <= b for u, b in zip(use, budget.as_tuple())), (use, budget)
    assert idx.pointer_ids("u") == before
    repairs = [r for r in log if r["action"] == "overflow_repair"]
    assert repairs and all({"moved", "into", "pointers", "over"} <= set(r) for r in repairs)
    assert all(r["action"] in ("overflow_repair", "consolidate", "compact") for r in log)
    if planned:  # one planned step for the commit, however many entries it moves
        assert len(repairs) == 1 and len(repairs[0]["moved"]) == len(repairs[0]["into"]) > 1
    moved = {m for r in repairs for m in _listed(r["moved"])}
    into = {t for r in repairs for t in _listed(r["into"])}
    spills = {e.entry_id for e in idx.entries.values() if e.kind == "spill"}
    assert into <= spills | moved
    assert not moved & set(idx.entries)  # every moved entry is gone, its pointers in a spill
    for e in idx.entries.values():
        if e.kind == "spill":
            assert e.members and e.labels["spilled"] >= 1
    # the repaired index is a valid snapshot and enforcing again is a no-op
    assert ActiveIndex.from_state(idx.state()).pointer_ids("u") == before
    assert capacity.enforce(idx, budget, filled.method.head, count, 0.6) == []


def test_enforce_token_pressure_compacts_first(filled, models):
    idx = filled.method.index
    count = models.token_counter.count
    before = idx.pointer_ids("u")
    tokens = idx.usage(count)[2]
    budget = WriteBudget(entries=100, pages=100, index_tokens=int(tokens * 0.8), index_bytes=10**7)
    log = capacity.enforce(idx, budget, filled.method.head, count, 0.6)
    assert log and log[0]["action"] == "compact"
    assert idx.usage(count)[2] <= budget.index_tokens and idx.pointer_ids("u") == before


def test_enforce_raises_when_nothing_fits(filled, models):
    idx = filled.method.index
    with pytest.raises(capacity.CapacityError, match="index_bytes") as exc:
        capacity.enforce(idx, WriteBudget(index_bytes=50), filled.method.head, models.token_counter.count, 0.6)
    assert "index_bytes" in exc.value.fix


def test_tiny_budget_commit_is_rolled_back(tmp_path, models):
    cfg = MemoryConfig(method="c3m", write_budget=WriteBudget(index_bytes=50))
    with Memory(tmp_path / "store", "u", config=cfg, models=models) as mem:
        with pytest.raises(capacity.CapacityError, match="index_bytes"):
            mem.add_session(_distinct_session(0))
        assert mem.sessions() == [] and mem.nodes() == []


def test_capacity_room_frees_room_for_later_commits_so_repairs_are_rarer(tmp_path, models):
    """``capacity_room``: the fallback frees room for that many commits of the current intake, so the next
    commits fit and it runs less often; every pointer is kept either way."""
    budget = WriteBudget(entries=8, pages=3, index_tokens=100_000, index_bytes=10**7)
    repairs, entries_after = {}, {}
    for room in (1.0, 3.0):
        cfg = MemoryConfig(method="c3m", write_budget=budget, method_options={"capacity_room": room})
        with Memory(tmp_path / f"s{room}", "u", config=cfg, models=models) as mem:
            for i in range(16):
                res = mem.add_session(_distinct_session(i))
                steps = [a for a in res.actions if a["action"] == "overflow_repair"]
                if steps and steps[0]["target"] is not None:
                    entries_after.setdefault(room, []).append(len(mem.method.index.entries))
                    assert steps[0]["target"] == max(2, 8 - math.ceil(room * 1))  # one new entry per session
                repairs[room] = repairs.get(room, 0) + len(steps)
            assert len(mem.method.index.pointer_ids("u")) == 32
    assert 0 < repairs[3.0] < repairs[1.0]
    assert max(entries_after[3.0]) <= 8 - 3  # room for three more commits, made in one step
    with pytest.raises(InvalidInput, match="capacity_room"):
        Memory(tmp_path / "bad", "u", config=MemoryConfig(method="c3m", method_options={"capacity_room": -1}),
               models=models)
