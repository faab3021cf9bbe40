"""The reranked read path (c3m.read.pipeline / features / rerank): feature cases on fixtures, the shipped model, the
Cold-Store channel under the reader budget, the strictly bounded reader that never searches the Cold Store, and the
trainer's smoke run."""
from __future__ import annotations

import math
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest

from c3m import Memory, MemoryConfig, Session, Turn
from c3m.errors import InvalidInput
from c3m.read import features as F
from c3m.read.features import FEATURE_GROUPS, FEATURES, QueryInfo, Signals, feature_matrix, pool_bm25, stem, terms
from c3m.read.pipeline import search_words
from c3m.read.rerank import SHIPPED, FusionReranker, LgbmReranker, make_reranker
from c3m.language.when import question_windows
from c3m.types import ImageRef, Provenance, RawNode, ReaderBudget

ROOT = Path(__file__).resolve().parents[1]
T0 = datetime(2024, 5, 1, 12)


def node(session: str, turn: int, text: str, role: str = "user", day: int = 1, image: str = "") -> RawNode:
    images = (ImageRef(image * 8, "image/png", 8, 8, 100),) if image else ()
    return RawNode(f"{session}#{turn}", Provenance("u", session, turn, datetime(2024, 5, day, 12)), role, text,
                   images)


def col(X, name):
    return X[:, FEATURES.index(name)]


# -- text and features -----------------------------------------------------------------------------------------
def test_light_stemmer_meets_word_forms():
    assert stem("paintings") == stem("painting") == stem("painted") == "paint"
    assert stem("moved") == stem("move") == stem("moving")
    assert stem("glass") == "glass" and stem("cities") == "city"
    assert terms("Where is my new bike?") == ["new", "bik"]  # stop words dropped
    assert search_words("What is the?") == ["what", "is", "the"]  # only stop words: keep them all


def test_pool_bm25_prefers_rare_terms_and_shorter_docs():
    docs = [terms("my red kayak"), terms("my red bike is red and very very very very long"), terms("weather")]
    s = pool_bm25(terms("red kayak"), docs)
    assert s[0] > s[1] > s[2] == 0.0
    assert pool_bm25([], docs).tolist() == [0.0, 0.0, 0.0] and pool_bm25(["x"], []).size == 0


def test_feature_cases():
    q = QueryInfo("What colour was my kayak on 2024-05-03, the one for 120 dollars?", np.array([1.0, 0.0]),
                  datetime(2024, 5, 10), keys=frozenset({"kayak"}),
                  windows=question_windows("on 2024-05-03", datetime(2024, 5, 10)))
    cands = [
        Signals(node("s2", 0, "I bought a red kayak for 120 dollars", day=3), cos=0.9, fts=5.0, fts_rank=0,
                idx_rel=1.0, idx_rank=0, entry_score=0.8, page_rank=0, expanded=0.0, superseded=0.0, chain_len=1,
                channels=3),
        Signals(node("s2", 1, "Nice, red suits it.", role="assistant", day=3), cos=0.4, via_round=True),
        Signals(node("s1", 0, "The weather is fine", day=1), cos=0.1, channels=1),
    ]
    X = feature_matrix(q, cands, first=datetime(2024, 5, 1, 12), tokens=lambda n: terms(n.text), cold=True)
    assert X.shape == (3, len(FEATURES)) and X.dtype == np.float32
    assert col(X, "dense_gap").tolist() == pytest.approx([0.0, 0.5, 0.8])
    assert col(X, "number_share")[0] == 1.0 and col(X, "number_share")[2] == 0.0
    assert col(X, "key_share")[0] == 1.0 and col(X, "key_share")[2] == 0.0
    assert col(X, "in_window").tolist() == [1.0, 1.0, 0.0]
    assert col(X, "window_days")[2] == pytest.approx(math.log1p(1.5))  # s1 is 1.5 days before the window
    assert col(X, "role_user").tolist() == [1.0, 0.0, 1.0]
    assert col(X, "partner_cos")[0] == pytest.approx(0.4) and col(X, "partner_cos")[1] == pytest.approx(0.9)
    assert math.isnan(col(X, "partner_cos")[2])  # its partner is not a candidate
    assert col(X, "via_round").tolist() == [0.0, 1.0, 0.0]
    assert math.isnan(col(X, "fts_score")[1]) and math.isnan(col(X, "idx_rel")[2])  # channels that did not find it
    assert col(X, "session_hits").tolist() == [2.0, 2.0, 1.0]
    assert col(X, "recency")[2] == 0.0 and 0 < col(X, "recency")[0] < 1
    assert col(X, "cold").tolist() == [1.0] * 3


def test_feature_groups_cover_every_column_once():
    grouped = [f for cols in FEATURE_GROUPS.values() for f in cols]
    assert sorted(grouped) == sorted(FEATURES) and len(grouped) == len(set(grouped))


def _photo_pool(question: str):
    """A "... now?" pool (issue #43): small talk repeated word for word (and once with other words), photo turns
    whose short text says little, the latest photo's reply, and a turn about something else."""
    talk = "Had my breakfast beside my toolbox, the usual start."
    cands = [
        Signals(node("s1", 0, "My toolbox is bright red, I painted it.", day=1), cos=0.7),
        Signals(node("s2", 0, talk, day=2), cos=0.6),
        Signals(node("s3", 0, "Snapped my toolbox today.", day=3, image="a"), cos=0.5),
        Signals(node("s4", 0, talk, day=4), cos=0.6),
        Signals(node("s5", 0, "Snapped my toolbox today.", day=5, image="b"), cos=0.5),  # same text, other photo
        Signals(node("s5", 1, "Nice, thanks for the toolbox photo!", role="assistant", day=5), cos=0.4),
        Signals(node("s6", 0, talk.upper().replace(",", " ;"), day=6), cos=0.6),  # the same words, other case
        Signals(node("s4", 1, "The usual start: breakfast beside my toolbox, had 2.", day=4), cos=0.6),  # near
        Signals(node("s7", 0, "The weather was mild.", day=7), cos=0.1),
    ]
    q = QueryInfo(question, np.array([1.0, 0.0]), datetime(2024, 5, 10))
    return q, feature_matrix(q, cands, first=datetime(2024, 5, 1), tokens=lambda n: terms(n.text), cold=True)


def test_photo_subject_and_duplicate_features():
    q, X = _photo_pool("What colour is my toolbox now?")
    assert q.visual and q.subject == (frozenset({"toolbox"}),)
    assert col(X, "has_image").tolist() == [0, 0, 1, 0, 1, 0, 0, 0, 0]
    assert col(X, "q_visual").tolist() == [1.0] * 9
    # word for word (case and punctuation aside); the two photo turns share a text but not an image
    assert col(X, "dup_count").tolist() == [1, 3, 1, 3, 1, 1, 3, 1, 1]
    # the same content terms without numbers: the reworded line joins the repeats
    assert col(X, "near_dup").tolist() == [1, 4, 1, 4, 1, 1, 4, 4, 1]
    # later sessions naming the toolbox: s6 holds only a repeat, so s5 (the photo and its reply) is the newest;
    # repeated lines are ranked too but do not count as later mentions (s4's reworded line does: not word for word)
    got = col(X, "newest_mention")
    assert got[:8].tolist() == [3, 3, 2, 1, 0, 0, 0, 1] and math.isnan(got[8])


def test_question_without_subject_or_image_cue():
    q, X = _photo_pool("Where did I go on holiday?")
    assert not q.visual and np.isnan(col(X, "newest_mention")).all()
    assert QueryInfo("What does the sign above the bakery show?", np.zeros(2), T0).visual
    assert QueryInfo("Which shop is left of the bakery?", np.zeros(2), T0).visual
    assert not QueryInfo("When did Anna move to Lisbon?", np.zeros(2), T0).visual
    names = QueryInfo("When did Anna move to Lisbon?", np.zeros(2), T0).subject
    assert frozenset({"anna"}) in names and frozenset({"lisbon"}) in names


def test_question_cues():
    assert QueryInfo("What is the current colour of my trunk?", np.zeros(2), T0).cue_now
    q = QueryInfo("What was the colour originally?", np.zeros(2), T0)
    assert q.cue_before and not q.cue_now and not q.numbers


# -- rerankers -------------------------------------------------------------------------------------------------
def test_fusion_reranker_sums_channel_ranks_per_question():
    X = np.full((4, len(FEATURES)), np.nan, np.float32)
    X[:, FEATURES.index("dense_cos")] = [0.9, 0.1, 0.5, 0.4]
    X[:, FEATURES.index("fts_score")] = [np.nan, 3.0, 1.0, np.nan]
    X[:, FEATURES.index("pool_bm25")] = [0, 0, 0, 0]
    s = FusionReranker().scores(X, np.array([0, 0, 1, 1]))
    assert s[0] == pytest.approx(1 / 61) and s[1] == pytest.approx(1 / 62 + 1 / 61)
    assert s[2] == pytest.approx(2 / 61) and s[3] == pytest.approx(1 / 62)  # question 1 ranked on its own


def test_make_reranker_names_and_errors(tmp_path):
    assert make_reranker("rrf").name == "rrf-v1"
    with pytest.raises(InvalidInput, match="unknown reranker"):
        make_reranker("magic")
    with pytest.raises(InvalidInput, match="no reranker model"):
        make_reranker(f"lgbm:{tmp_path / 'none.txt'}")
    with pytest.raises(InvalidInput, match="folds.json"):
        make_reranker(f"xfit:{tmp_path}")
    (tmp_path / "folds.json").write_text('{"h1": "fold0.txt"}')
    unlisted = make_reranker(f"xfit:{tmp_path}", "h2")  # made (a write-only warm-up store), refused when it ranks
    with pytest.raises(InvalidInput, match="do not list history 'h2'"):
        unlisted.scores(np.zeros((2, len(FEATURES)), np.float32), np.zeros(2, int))


def test_model_trained_on_other_features_is_refused(tmp_path):
    lightgbm = pytest.importorskip("lightgbm")
    X = np.random.default_rng(0).random((40, 3))
    booster = lightgbm.train({"objective": "lambdarank", "verbose": -1, "min_data_in_leaf": 2},
                             lightgbm.Dataset(X, (X[:, 0] > 0.5).astype(int), group=[20, 20]), num_boost_round=2)
    booster.save_model(str(tmp_path / "m.txt"))
    with pytest.raises(InvalidInput, match="other features"):
        LgbmReranker(tmp_path / "m.txt")


def test_shipped_model_loads_and_orders_by_evidence():
    pytest.importorskip("lightgbm")
    assert SHIPPED.is_file(), "the shipped reranker weights are missing"
    r = make_reranker("lgbm")
    assert r.name == "lgbm-lambdarank-v1"
    assert make_reranker("auto") is r
    q = QueryInfo("What brand is my kayak?", np.array([1.0, 0.0]), datetime(2024, 5, 10), keys=frozenset({"kayak"}))
    cands = [Signals(node("s1", 0, "The weather was nice today", day=1), cos=0.35, channels=1),
             Signals(node("s2", 0, "My new kayak is an Old Town, bright red", day=3), cos=0.72, fts=6.0, fts_rank=0,
                     channels=2),
             Signals(node("s3", 0, "We talked about boats in general", day=5), cos=0.5, channels=1)]
    X = feature_matrix(q, cands, first=datetime(2024, 5, 1), tokens=lambda n: terms(n.text), cold=True)
    s = r.scores(X, np.zeros(3, int))
    assert int(np.argmax(s)) == 1


# -- the read path over a real store ---------------------------------------------------------------------------
FACTS = ["I keep my kayak in the garage next to the blue bicycle.", "The kayak paddle is made of carbon fibre.",
         "My sister Priya moved to Lisbon in March.", "I planted tomatoes and basil on the balcony.",
         "The dentist appointment is on Friday at nine.", "My kayak is bright yellow with a black stripe."]


def _history() -> list[Session]:
    out = []
    for i in range(24):
        fact = FACTS[i // 4] if i % 4 == 0 else f"Today I read chapter {i} of the novel about sailing ships."
        out.append(Session(f"s{i:02d}", datetime(2024, 1, 1 + i, 10), [
            Turn("user", fact), Turn("assistant", f"Thanks for telling me (note {i})."),
            Turn("user", f"Also, the weather on day {i} was mild."), Turn("assistant", "Good to hear.")]))
    return out


@pytest.fixture(scope="module")
def filled(tmp_path_factory):
    root = tmp_path_factory.mktemp("rerank") / "store"
    cfg = MemoryConfig(method="c3m", text_embedder="hashing", token_counter="approx",
                       write_budget=MemoryConfig().write_budget.scaled(0.25))
    with Memory(root, "u", config=cfg) as mem:
        for s in _history():
            mem.add_session(s)
    return root


def _mem(root, **opts) -> Memory:
    return Memory(root, "u", config=MemoryConfig(method="c3m", text_embedder="hashing", token_counter="approx",
                                                write_budget=MemoryConfig().write_budget.scaled(0.25),
                                                method_options=opts))


@pytest.mark.parametrize("budget", [ReaderBudget(), ReaderBudget(pages=1, raw_nodes=3, images=0, text_tokens=40),
                                    ReaderBudget(pages=2, raw_nodes=1, images=1, text_tokens=1000)],
                         ids=["default", "tight", "one-node"])
@pytest.mark.parametrize("reranker", ["auto", "rrf"])
def test_cold_channel_stays_within_budget(filled, budget, reranker):
    with _mem(filled, reranker=reranker) as mem:
        assert mem.method.searches_cold_store
        for q in ("What colour is my kayak?", "Where does Priya live now?", "What did I plant?"):
            ctx = mem.retrieve(q, budget)  # check=True: the harness's measurement, BudgetExceeded if over
            assert all(u <= b for u, b in zip(ctx.use.as_tuple(), budget.as_tuple()))
            assert "Cold-Store search" in ctx.trace.notes[0]


def test_cold_channel_finds_a_fact_by_its_words(filled):
    with _mem(filled, reranker="rrf") as mem:
        ctx = mem.retrieve("What is the kayak paddle made of?", ReaderBudget(raw_nodes=4))
        assert any("carbon fibre" in i.text for i in ctx.items)


def test_bounded_variant_never_searches_the_cold_store(filled, monkeypatch):
    from c3m.read.scorers import NodeKeys
    from c3m.store.cold import ColdStore

    def refuse(*a, **k):
        raise AssertionError("the strictly bounded reader touched the Cold-Store search")

    monkeypatch.setattr(ColdStore, "search_text", refuse)
    monkeypatch.setattr(NodeKeys, "sync", refuse)
    monkeypatch.setattr(NodeKeys, "__init__", refuse)
    with _mem(filled, cold=False) as mem:
        assert not mem.method.searches_cold_store and mem.method.node_keys is None
        for q in ("What colour is my kayak?", "Where does Priya live now?", "What did I plant?"):
            ctx = mem.retrieve(q, ReaderBudget())  # measured against the snapshot: items reachable via its pages
            assert ctx.items and "bounded: index only" in ctx.trace.notes[0]


def test_reranked_batch_equals_one_by_one(filled):
    qs = ["What colour is my kayak?", "Where does Priya live now?", "When is the dentist?", "What did I plant?"]
    with _mem(filled) as mem:
        batch = mem.method.retrieve_batch(qs, ReaderBudget())
        single = [mem.method.retrieve(q, ReaderBudget()) for q in qs]
    assert [[(i.node_id, i.form) for i in c.items] for c in batch] == \
        [[(i.node_id, i.form) for i in c.items] for c in single]


def test_forgotten_turn_never_comes_back_through_the_cold_channel(tmp_path):
    root = tmp_path / "store"
    with _mem(root, reranker="rrf") as mem:
        for s in _history()[:8]:
            mem.add_session(s)
        before = mem.retrieve("What is the kayak paddle made of?", ReaderBudget(raw_nodes=4))
        target = [i for i in before.items if "carbon" in i.text]
        assert target
        mem.forget(node_ids=[target[0].node_id], reason="test")
        after = mem.retrieve("What is the kayak paddle made of?", ReaderBudget(raw_nodes=4))
        assert all("carbon" not in i.text for i in after.items)
        assert target[0].node_id not in after.trace.pool


def test_bmer_reader_is_the_previous_ordering(filled):
    with _mem(filled, reranker="bmer") as mem:
        assert not mem.method.searches_cold_store
        ctx = mem.retrieve("What colour is my kayak?", ReaderBudget())
        assert "reranker" not in " ".join(ctx.trace.notes)


def test_unknown_reranker_names_the_option():
    with pytest.raises(InvalidInput, match="method_options.reranker"):
        from c3m.methods.c3m import C3MConfig

        C3MConfig.from_options({"reranker": "magic"}, "c3m").validate()


def test_trainer_smoke_runs_end_to_end(tmp_path):
    pytest.importorskip("lightgbm")
    from factories import load_script

    train = load_script(ROOT / "training" / "train_reranker.py", "train_reranker_smoke")
    out = tmp_path / "m" / "reranker_lgbm.txt"
    assert train.main(["--smoke", "--out", str(out), "--drop-groups", "length,image/subject/duplicate"]) == 0
    model = LgbmReranker(out)
    assert model.trees.num_trees > 0
    report = (out.parent / "report.md").read_text()
    assert "SR@12" in report and "cold" in report and "bounded" in report
    assert "By gold turn length" in report and "gold < 60 chars" in report
    assert (out.parent / "cv" / "folds.json").is_file()
    assert F.FEATURES == model.trees.feature_names
    drop = (out.parent / "drop-columns.md").read_text()
    lines = [ln for ln in drop.splitlines() if ln.startswith("| ")]
    for group in ("(none: full model)", "length", "image/subject/duplicate"):
        assert any(ln.startswith(f"| {group} |") for ln in lines), group
    assert "| dense |" not in drop  # only the groups asked for
    assert "KU questions" in drop and "By gold turn length" in drop
    with pytest.raises(SystemExit, match="unknown group"):
        train.drop_groups("length,colour")
    assert train.drop_groups("all") == list(FEATURE_GROUPS)


def test_xfit_map_leaves_out_ids_two_folders_put_in_different_folds():
    from factories import load_script

    train = load_script(ROOT / "training" / "train_reranker.py", "train_reranker_xfit")
    folds = {("memgallery-dev", "Baking"): 1, ("hard", "train-00000"): 0, ("easy", "train-00000"): 2,
             ("hard", "train-00001"): 3, ("easy", "train-00001"): 3}
    assert train.xfit_map(folds) == {"Baking": "fold1.txt", "train-00001": "fold3.txt"}


def test_drop_table_on_made_up_pools(tmp_path):
    """The drop-column machinery without ingesting anything: pools of random rows where only ``has_image`` tells
    the (short) gold turns from the rest, so dropping the image group must cost recall on short gold turns."""
    pytest.importorskip("lightgbm")
    from factories import load_script

    train = load_script(ROOT / "training" / "train_reranker.py", "train_reranker_drop")
    rng = np.random.default_rng(0)
    img, length = FEATURES.index("has_image"), FEATURES.index("text_len")
    pools = []
    for tag in ("a", "b"):
        for h in range(4):
            modes = {}
            for mode in ("cold", "bounded"):
                qs = []
                for q in range(6):
                    X = rng.normal(size=(40, len(FEATURES))).astype(np.float32)
                    y = np.zeros(40, np.int8)
                    y[:2] = 1
                    X[:, img] = 0.0
                    X[:2, img] = 1.0
                    X[:, length] = np.log1p(rng.choice([40, 200], 40))  # half the pool as short as the gold
                    X[:2, length] = np.log1p(40)  # short gold turns
                    qs.append((f"q{q}", "KU" if q % 2 else "TR", 2, 2, X, y, np.full(40, 30, np.int32)))
                modes[mode] = qs
            pools.append({"history": f"h{h}", "dataset": tag, "modes": modes})
    args = train.parse_args(["--folds", "2", "--n-estimators", "20", "--min-child-samples", "5",
                             "--drop-groups", "image/subject/duplicate,role"])
    rows = train.cross_validate(pools, args)
    assert {r["n_short"] for r in rows} == {2} and all(r["lgbm-len_short"] == 2 for r in rows)
    path = tmp_path / "drop.md"
    train.drop_table(pools, args, rows, path, [], 0.0, 48)
    text = path.read_text()
    assert "PARTIAL" not in text and "| role | role_user |" in text
    short_table = text.split("By gold turn length")[1]
    image_row = next(ln for ln in short_table.splitlines() if ln.startswith("| image/subject/duplicate |"))
    assert "(-" in image_row  # without has_image the short gold turns are lost
    with pytest.raises(SystemExit, match="--drop-only needs"):
        train.main(["--drop-only", str(tmp_path / "rows.json")])


def test_cold_channel_on_both_store_backends(store_location):
    cfg = MemoryConfig(method="c3m", text_embedder="hashing", token_counter="approx",
                       write_budget=MemoryConfig().write_budget.scaled(0.25), method_options={"reranker": "rrf"})
    with Memory(store_location, "u", config=cfg) as mem:
        for s in _history()[:12]:
            mem.add_session(s)
        ctx = mem.retrieve("What is the kayak paddle made of?", ReaderBudget(raw_nodes=4))
        assert any("carbon fibre" in i.text for i in ctx.items)
        assert "Cold-Store search" in ctx.trace.notes[0]
