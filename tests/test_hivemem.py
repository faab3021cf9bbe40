"""HiVe-Mem (``hivemem``): episodes, the anchor graph (IDF weights, K_edge, refresh), expansion, the method."""
from __future__ import annotations

import hashlib
import json
import math
from datetime import datetime, timedelta

import numpy as np
import pytest
from factories import png_bytes
from hypothesis import given, settings
from hypothesis import strategies as st

from c3m.config import MemoryConfig
from c3m.errors import InvalidInput
from c3m.index.active import idf as active_idf
from c3m.index.anchor_graph import AnchorGraph, idf_vector
from c3m.memory import Memory
from c3m.methods import available_methods
from c3m.methods.hivemem import HiveMem, HiveMemConfig, text_anchor_keys, visual_anchor_keys
from c3m.models.anchors import Anchor
from c3m.types import (EvidenceForm, ImagePerception, ImageRef, Provenance, RawNode, ReaderBudget, Session, Turn,
                       VisualAnchor, node_id_for)
from c3m.write.episodes import episode_id, segment_episodes

BASE = datetime(2026, 3, 1, 9, 0)
L2, L15, L53 = math.log(2), math.log(1.5), math.log(5 / 3)


def _words(text: str) -> int:
    return len(text.split())


def _node(session: str, turn: int, tokens: int) -> RawNode:
    prov = Provenance("u", session, turn, BASE)
    return RawNode(node_id_for("u", session, turn), prov, "user", " ".join(["w"] * tokens))


# -- episodes ------------------------------------------------------------------------------------------------
@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(0, 40), max_size=12), max_size=5), st.integers(1, 60))
def test_episodes_never_cut_a_turn_and_respect_sessions(sessions, target):
    nodes = [_node(f"s{i}", j, k) for i, toks in enumerate(sessions) for j, k in enumerate(toks)]
    eps = segment_episodes(nodes, _words, target)
    assert [n for e in eps for n in e] == nodes  # every turn exactly once, in order (never split)
    for e in eps:
        assert e and len({n.session_id for n in e}) == 1
        assert sum(_words(n.text) for n in e[:-1]) < target  # it closes at the first turn end reaching target
    for a, b in zip(eps, eps[1:]):
        if a[-1].session_id == b[0].session_id:
            assert sum(_words(n.text) for n in a) >= target  # cut inside a session only once the target is met


def test_episodes_edge_cases():
    assert segment_episodes([], _words, 256) == []
    long = [_node("s", 0, 300), _node("s", 1, 5), _node("s", 2, 5)]
    assert [len(e) for e in segment_episodes(long, _words, 256)] == [1, 2]  # a long turn is one episode
    assert episode_id("u", "s1", 0) == episode_id("u", "s1", 0) != episode_id("u", "s1", 1)
    assert episode_id("u", "s1", 0) != episode_id("v", "s1", 0)


# -- the anchor graph ------------------------------------------------------------------------------------------
HAND = [["dog", "park", "rex"], ["dog", "ball"], ["park", "ball", "dog"], ["rex"]]


def _edges(g: AnchorGraph) -> dict[tuple[int, int], float]:
    return {(i, j): w for i, row in enumerate(g.edges) for j, w in row if i < j}


def test_idf_is_the_active_index_formula():
    df = {"a": 3, "b": 0, "c": 9}
    got = idf_vector(np.array([3, 0, 9]), 7)
    assert got.tolist() == pytest.approx([active_idf(k, df, 7) for k in "abc"])


def test_edge_weights_hand_example():
    g = AnchorGraph(4)
    g.add(HAND)
    # N = 4; df: dog 3, park 2, rex 2, ball 2 -> idf(dog) = log(6/4), the others log(6/3)
    assert dict(zip(g.keys, g.idf())) == pytest.approx({"dog": L15, "park": L2, "rex": L2, "ball": L2})
    want = {(0, 1): L15, (0, 2): L15 + L2, (0, 3): L2, (1, 2): L15 + L2}
    assert _edges(g) == {k: round(v, 4) for k, v in want.items()}
    assert g.rebuilds == 1 and g.num_edges() == 4
    for i, row in enumerate(g.edges):  # undirected, heaviest first
        assert all((i, w) in g.edges[j] for j, w in row)
        assert [w for _, w in row] == sorted((w for _, w in row), reverse=True)


def test_use_idf_false_counts_shared_anchors():
    g = AnchorGraph(4, use_idf=False)
    g.add(HAND)
    assert _edges(g) == {(0, 1): 1.0, (0, 2): 2.0, (0, 3): 1.0, (1, 2): 2.0}
    assert _edges(g) != _edges(_built(HAND))


def _built(eps, **kw) -> AnchorGraph:
    g = AnchorGraph(kw.pop("k_edge", 4), **kw)
    g.add(eps)
    return g


def test_incremental_edges_use_the_current_idf_and_the_rebuild_refreshes_old_ones():
    g = AnchorGraph(4, rebuild_growth=10.0)  # the first add rebuilds; the second is incremental
    g.add(HAND[:3])
    g.add(HAND[3:])
    assert g.rebuilds == 1
    old = round(math.log(5 / 4) + L53, 4)  # (0, 2) computed at N = 3: df dog 3, park 2
    assert _edges(g)[(0, 2)] == old
    assert _edges(g)[(0, 3)] == round(L2, 4)  # the new episode's edge: N = 4, df(rex) = 2
    g.rebuild()
    assert _edges(g) == _edges(_built(HAND)) and g.rebuilds == 2


def test_rebuild_when_the_graph_has_grown_by_a_quarter():
    g = AnchorGraph(2)
    rebuilt_at = []
    for i in range(20):
        before = g.rebuilds
        g.add([[f"a{i % 3}", f"b{i % 5}"]])
        if g.rebuilds > before:
            rebuilt_at.append(g.num_episodes)
    assert rebuilt_at == [1, 2, 3, 4, 5, 7, 9, 12, 15, 19]
    s = g.stats()
    assert s["rebuilds"] == 10 and s["sessions_timed"] == 20 and s["seconds_per_session"] >= 0


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.integers(0, 7), max_size=5), min_size=1, max_size=25), st.integers(1, 3),
       st.integers(1, 4))
def test_k_edge_respected_for_every_node(eps, k, per_session):
    g = AnchorGraph(k)
    lists = [[f"x{a}" for a in e] for e in eps]
    for i in range(0, len(lists), per_session):
        g.add(lists[i:i + per_session])
        cand = {(min(e, n), max(e, n)) for e, row in enumerate(g.out) for n, _ in row}
        for i_, row in enumerate(g.edges):
            assert len(row) <= k and i_ not in [j for j, _ in row]
            for j, w in row:
                assert (i_, w) in g.edges[j]  # undirected
                assert (min(i_, j), max(i_, j)) in cand  # kept by one side's candidate list
                assert set(g.ep_anchors[i_]) & set(g.ep_anchors[j])  # shares an anchor


def test_visual_anchors_false_drops_visual_only_links():
    text = [["kitchen"], ["garden"]]
    visual = [["cat"], ["cat"]]
    on = AnchorGraph(4)
    on.add(text, visual)
    off = AnchorGraph(4, visual=False)
    off.add(text, visual)
    assert _edges(on) == {(0, 1): round(math.log(4 / 3), 4)}
    assert _edges(off) == {} and "cat" not in off.vocab


def test_cross_modal_anchor_is_one_vocabulary_entry():
    g = AnchorGraph(4)
    g.add([["dog", "park"], ["photo"]], [[], ["dog"]])
    assert g.keys.count("dog") == 1 and (0, 1) in _edges(g)


# -- expansion ---------------------------------------------------------------------------------------------------
def test_expansion_only_one_hop_and_never_a_seed():
    from c3m_kernels.anchor_scores import anchor_scores

    g = AnchorGraph(1)
    g.add([["a", "b"], ["a", "b"], ["b"]])  # 2 shares "b" with 0 but the K_edge = 1 cap leaves it unlinked
    assert _edges(g) == {(0, 1): pytest.approx(_edges(g)[(0, 1)])} and g.edges[2] == []
    sim = np.ones(g.num_anchors)
    indptr, anchors = g.csr()
    _, raw = anchor_scores(indptr, anchors, g.idf(), sim[None], np.array([[0]]), 5)
    assert 2 in raw[0]  # the kernel alone would return the non-neighbour
    assert [e for e, _ in g.expand([0], sim, 5)] == [1]
    assert g.expand([0, 1], sim, 5) == []  # the only neighbour is a seed
    assert g.expand([2], sim, 5) == []
    assert g.expand([0], sim, 0) == []


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, 6), max_size=4), min_size=2, max_size=20), st.integers(1, 3),
       st.data())
def test_expansion_scores_are_idf_times_sim_over_anchors_shared_with_the_seeds(eps, k, data):
    g = _built([[f"x{a}" for a in e] for e in eps], k_edge=k)
    seeds = data.draw(st.lists(st.integers(0, len(eps) - 1), min_size=1, max_size=3, unique=True))
    sim = np.array(data.draw(st.lists(st.floats(0, 1), min_size=g.num_anchors, max_size=g.num_anchors)))
    got = g.expand(seeds, sim, 3)
    hop = {n for s in seeds for n, _ in g.edges[s]} - set(seeds)
    union = set().union(*(set(g.ep_anchors[s].tolist()) for s in seeds))
    idf = g.idf()
    want = sorted(((n, float(sum(idf[a] * sim[a] for a in set(g.ep_anchors[n].tolist()) & union))) for n in hop),
                  key=lambda x: (-x[1], x[0]))[:3]
    assert {e for e, _ in got} <= hop and not {e for e, _ in got} & set(seeds)
    assert [s for _, s in got] == pytest.approx([s for _, s in want])  # ids may differ only among equal scores


def test_graph_state_round_trip_is_plain_json():
    g = AnchorGraph(2, rebuild_growth=10.0)
    g.add(HAND[:3])
    g.add(HAND[3:])
    s = json.loads(json.dumps(g.state()))
    h = AnchorGraph.from_state(s)
    assert h.edges == g.edges and h.out == g.out and h.keys == g.keys and h.state() == g.state()
    sim = np.linspace(0, 1, g.num_anchors)
    assert h.expand([0], sim, 2) == g.expand([0], sim, 2)
    h.add([["ball"]])
    g.add([["ball"]])
    assert h.state() == g.state()


# -- anchors from text and perception ---------------------------------------------------------------------------------
def test_anchor_keys_head_nouns_and_visual_labels():
    anchors = [Anchor("the red mug", "NOUN", "noun_chunk", 0, 11, "red mug"), Anchor("it", "PRON", "noun_chunk", 0, 2, "it"),
               Anchor("Hyde Park", "GPE", "entity", 0, 9, "hyde park")]
    assert text_anchor_keys(anchors) == ["red mug", "mug", "hyde park"]
    img = ImageRef("0" * 64, "image/png", 24, 16, 10)
    rec = ImagePerception("n", img, "oracle", "1", "a red mug", (VisualAnchor("Mugs", "colour", "red"),
                                                                  VisualAnchor("dog")))
    assert visual_anchor_keys([rec]) == ["mug", "red mug", "dog"]


# -- the method -----------------------------------------------------------------------------------------------------
def _mem(path, models, **options) -> Memory:
    return Memory(path, "u", models=models, config=MemoryConfig(method="hivemem", method_options=options))


def _history(mem: Memory, n: int = 6) -> None:
    topics = ["my dog Rex chased a ball in Hyde Park", "I bought a red mug at the Leeds market",
              "my sister Anna visited from York", "the Leeds market sells fresh fish on Fridays",
              "Rex the dog needs his vaccination next week", "Anna plays the cello in an orchestra"]
    for i in range(n):
        t = topics[i % len(topics)]
        mem.add_session(Session(f"s{i}", BASE + timedelta(days=i),
                                (Turn("user", f"Today {t}."), Turn("assistant", "Noted, thanks for telling me."),
                                 Turn("user", f"Also, {t} again, believe it or not."), Turn("assistant", "Okay."))))


def _ctx_key(ctx):
    return [(i.node_id, i.form, i.text, i.score) for i in ctx.items], ctx.trace.entries


def test_registered_and_unbounded():
    assert "hivemem" in available_methods()
    assert HiveMem.bounded is False and HiveMem.complete_provenance


@pytest.mark.parametrize("options, field", [({"k_edg": 3}, "k_edg"), ({"k_ret": 0}, "k_ret"),
                                            ({"k_exp": -1}, "k_exp"), ({"expansion": "yes"}, "expansion"),
                                            ({"k_edge": True}, "k_edge"), ({"summarizer": "llm"}, "summarizer"),
                                            ({"selector": "mlp:/nowhere.pt"}, "selector"),
                                            ({"summary_only": True, "no_summary": True}, "summary_only"),
                                            ({"no_raw_text": True, "no_summary": True, "no_caption": True,
                                              "no_raw_image": True, "no_crop": True}, "no_raw_text"),
                                            ({"rebuild_growth": 0}, "rebuild_growth")])
def test_bad_options(store_path, models, options, field):
    with pytest.raises(InvalidInput) as err:
        _mem(store_path, models, **options)
    assert err.value.field == f"method_options.{field}"


def test_config_forms():
    assert HiveMemConfig().forms() == ("raw_text", "summary", "caption", "raw_image", "grounded_crop")
    assert HiveMemConfig(summary_only=True).forms() == ("summary",)
    assert "caption" not in HiveMemConfig(no_caption=True).forms()
    assert HiveMemConfig.from_options({"k_ret": np.int64(3)}).k_ret == 3


def test_end_to_end_within_budget_with_provenance(store_path, models):
    budget = ReaderBudget(raw_nodes=3, images=1, text_tokens=80)
    with _mem(store_path, models, episode_tokens=16, k_ret=2, k_exp=2) as mem:
        _history(mem)
        assert mem.verify().ok, mem.verify().errors  # complete provenance in every snapshot
        m = mem.method
        assert len(m.episodes) == 18 and m.pointers() == {n.node_id for n in mem.nodes()}
        ctx = mem.retrieve("What is the name of my dog?", budget)  # raises BudgetExceeded when over
        assert ctx.use.fits(budget) and ctx.items
        assert ctx.trace.notes[0] == "2 seeds + 2 expanded" and len(ctx.trace.entries) == 4
        assert set(ctx.trace.selected_nodes) <= set(ctx.trace.pool)
        seeds = {e for e, _ in ctx.trace.entries[:2]}
        assert not seeds & {e for e, _ in ctx.trace.entries[2:]}
        d = mem.stats()
        assert d["episodes"] == 18 and d["rebuilds"] >= 1 and d["edges"] > 0
        assert mem.retrieve("Rex?", ReaderBudget(raw_nodes=0, text_tokens=0)).items == ()


def test_observe_actions(store_path, models):
    with _mem(store_path, models, episode_tokens=16) as mem:
        res = mem.add_session(Session("s0", BASE, (Turn("user", "My dog Rex loves Hyde Park on Sundays."),
                                                   Turn("assistant", "Rex sounds happy."))))
        kinds = [a["action"] for a in res.actions]
        assert kinds == ["episode", "graph"] and res.actions[0]["turns"] == "0-1"
        assert mem.method.observe("s0", []) == []  # an empty session gives no episode


def test_state_round_trip_gives_identical_retrieval(store_path, models):
    with _mem(store_path, models, episode_tokens=16, k_ret=2) as mem:
        _history(mem)
        m = mem.method
        state = json.loads(json.dumps(m.state()))
        again = HiveMem(mem.store, "u", models, options={"episode_tokens": 16, "k_ret": 2})
        again.load_state(state)
        assert again.state() == m.state() and again.pointers() == m.pointers()
        for q in ("Where did I buy the mug?", "Who visited from York?", "What does the market sell?"):
            assert _ctx_key(again.retrieve(q, ReaderBudget())) == _ctx_key(m.retrieve(q, ReaderBudget()))
    with _mem(store_path, models, episode_tokens=16, k_ret=2) as reopened:  # loads the committed snapshot
        assert reopened.method.state() == state


def test_expansion_flag_only_matters_where_expansion_adds_something(store_path, models):
    q, budget = "What is the name of my dog?", ReaderBudget()
    with _mem(store_path, models, episode_tokens=16, k_ret=20) as mem:  # every episode is a seed already
        _history(mem)
        base = mem.retrieve(q, budget)
    with _mem(store_path, models, episode_tokens=16, k_ret=20, expansion=False) as mem:
        assert _ctx_key(mem.retrieve(q, budget)) == _ctx_key(base)
    with _mem(store_path, models, episode_tokens=16, k_ret=1) as mem:
        on = mem.retrieve(q, budget)
    with _mem(store_path, models, episode_tokens=16, k_ret=1, expansion=False) as mem:
        off = mem.retrieve(q, budget)
    assert len(on.trace.entries) == 3 and len(off.trace.entries) == 1
    assert on.trace.entries[0] == off.trace.entries[0]


def _image_history(mem: Memory) -> dict[str, str]:
    """Session s0 talks about a dog; s1 is a photo whose perception record sees a dog (no text about it)."""
    pic = png_bytes((120, 80, 40))
    ref = ImageRef(hashlib.sha256(pic).hexdigest(), "image/png", 24, 16, len(pic))
    n1 = node_id_for("u", "s1", 0)
    rec = ImagePerception(n1, ref, "test", "1", "a brown animal on grass", (VisualAnchor("dog", "colour", "brown"),))
    mem.method.remember_perception({n1: [rec]})
    mem.add_session(Session("s0", BASE, (Turn("user", "My dog barks at the postman every morning."),
                                         Turn("assistant", "That sounds noisy."))))
    mem.add_session(Session("s1", BASE + timedelta(days=1), (Turn("user", "Look at this!", (pic,)),
                                                             Turn("assistant", "Lovely picture."))))
    mem.store.put_perceptions("u", [(rec, None)])  # the store holds the record (the harness checks captions)
    mem.add_session(Session("s2", BASE + timedelta(days=2), (Turn("user", "I started learning the cello."),
                                                             Turn("assistant", "Good luck."))))
    return {"s0": episode_id("u", "s0", 0), "s1": episode_id("u", "s1", 0)}


def test_cross_modal_edge_text_dog_meets_visual_dog(tmp_path, models):
    with _mem(tmp_path / "on", models) as mem:
        ids = _image_history(mem)
        g = mem.method.graph
        assert g.keys.count("dog") == 1 and "brown dog" in g.vocab
        assert [n for n, _ in g.edges[0]] == [1]  # the only link, through the visual anchor
        ctx = mem.retrieve("Does my dog bark at the postman?", ReaderBudget())
        assert ctx.trace.entries[0][0] == ids["s0"]
    with _mem(tmp_path / "off", models, visual_anchors=False) as mem:
        _image_history(mem)
        assert mem.method.graph.edges[0] == [] and "dog" in mem.method.graph.vocab
        assert "brown dog" not in mem.method.graph.vocab


def test_snapshot_with_other_write_options_is_rebuilt(store_path, models):
    with _mem(store_path, models, episode_tokens=16) as mem:
        _history(mem, 3)
        assert len(mem.method.episodes) == 9
    with _mem(store_path, models) as mem:  # episode_tokens 256: the snapshot is not reused
        assert len(mem.method.episodes) == 3 and mem.method.pointers() == {n.node_id for n in mem.nodes()}


def test_ablation_flags_change_only_their_form(tmp_path, models):
    q, budget = "Does my dog bark at the postman? What did the picture look like?", ReaderBudget()
    runs = iter(range(100))

    def run(**opts):
        with _mem(tmp_path / f"r{next(runs)}", models, k_ret=3, **opts) as mem:
            _image_history(mem)
            return mem.retrieve(q, budget)

    base = run()
    forms = {i.form for i in base.items}
    assert {EvidenceForm.RAW_TEXT, EvidenceForm.CAPTION, EvidenceForm.RAW_IMAGE} <= forms
    assert EvidenceForm.GROUNDED_CROP not in forms
    assert _ctx_key(run(no_crop=True)) == _ctx_key(base)  # no crop exists: nothing changes
    for flag, form in (("no_raw_text", EvidenceForm.RAW_TEXT), ("no_caption", EvidenceForm.CAPTION),
                       ("no_raw_image", EvidenceForm.RAW_IMAGE), ("no_summary", EvidenceForm.SUMMARY)):
        ctx = run(**{flag: True})
        got = {i.form for i in ctx.items}
        assert form not in got, flag
        if form in forms:
            assert _ctx_key(ctx) != _ctx_key(base), flag
        else:
            assert _ctx_key(ctx) == _ctx_key(base), flag
    only = run(summary_only=True)
    assert only.items and {i.form for i in only.items} == {EvidenceForm.SUMMARY}
