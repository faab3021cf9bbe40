"""The batched multi-tenant read path (``Memory.retrieve_many``, ``MemoryMethod.retrieve_many``) gives exactly the
per-question contexts — ragged tenants, an empty tenant, budgets that bind on each dimension, redacted nodes,
any batch order — and never exceeds a budget."""
from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest

from c3m import Memory, MemoryConfig
from c3m.read.arena import KeyArena
from c3m.types import ReaderBudget

LENGTHS = (2000, 3000, 5000)
BUDGETS = {"default": ReaderBudget(), "pages": replace(ReaderBudget(), pages=1),
           "raw_nodes": replace(ReaderBudget(), raw_nodes=2), "images": replace(ReaderBudget(), images=0),
           "tokens": replace(ReaderBudget(), text_tokens=60)}


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """One store per method, three synthetic tenants of different lengths plus an empty one, oracle perception
    (captions and crops, so composition has every form to choose from)."""
    from c3m.dataset import load_dataset
    from c3m.eval.synth import generate_dataset

    root = tmp_path_factory.mktemp("batched")
    histories, questions = [], {}
    for i, length in enumerate(LENGTHS):
        ds = generate_dataset(root / f"ds{i}", length=length, episodes=1, seed=i, progress=False,
                              split="dev")
        (h,) = load_dataset(ds)
        histories.append((f"u{i}", h, ds))
        questions[f"u{i}"] = [q.question for q in h.questions][:6]
    questions["empty"] = ["What colour is my mug?"]
    out = {}
    for method in ("c3m", "dense-topk"):
        mems = {}
        for ns, h, ds in histories:
            cfg = MemoryConfig(method=method, text_embedder="hashing", token_counter="approx",
                               perception=f"oracle:{ds}")
            with Memory(root / method, ns, config=cfg) as m:
                m.add_history(h)
        cfg = MemoryConfig(method=method, text_embedder="hashing", token_counter="approx")
        mem = Memory(root / method, "u0", config=cfg)
        for ns in questions:
            mems[ns] = mem.tenant(ns)
        out[method] = (mem, mems)
    yield out, questions
    for mem, _ in out.values():
        mem.close()


def _requests(questions):
    return [(ns, q) for ns, qs in questions.items() for q in qs]


@pytest.mark.parametrize("method", ["c3m", "dense-topk"])
@pytest.mark.parametrize("budget", list(BUDGETS))
def test_batched_contexts_equal_per_question_contexts(stores, method, budget):
    (mem, tenants), questions = stores[0][method], stores[1]
    b = BUDGETS[budget]
    reqs = _requests(questions)
    single = [tenants[ns].retrieve(q, b) for ns, q in reqs]
    batched = mem.retrieve_many(reqs, b)
    assert len(batched) == len(reqs)
    for (ns, q), s, c in zip(reqs, single, batched):
        assert c == s, f"{method} {budget}: {ns} {q!r}"
        measured = tenants[ns].measure(c, b)
        assert measured.violation is None
        assert all(x <= y for x, y in zip(measured.use.as_tuple(), b.as_tuple()))
    assert not batched[-1].items  # the empty tenant
    assert sum(len(c.items) for c in batched) > 0


@pytest.mark.parametrize("method", ["c3m", "dense-topk"])
def test_batch_order_and_mixed_budgets_do_not_change_a_context(stores, method):
    (mem, tenants), questions = stores[0][method], stores[1]
    reqs = [(ns, q, b) for (ns, q), b in zip(_requests(questions), list(BUDGETS.values()) * 10)]
    rng = random.Random(0)
    shuffled = reqs[:]
    rng.shuffle(shuffled)
    cls = type(tenants["u0"].method)
    for order in (reqs, shuffled):
        got = cls.retrieve_many([(tenants[ns].method, q, b) for ns, q, b in order])
        for (ns, q, b), ctx in zip(order, got):
            assert ctx == tenants[ns].method.retrieve(q, b)


def test_batch_over_a_redacted_node_matches_and_hides_it(tmp_path):
    from factories import make_session

    cfg = MemoryConfig(method="dense-topk", text_embedder="hashing", token_counter="approx",
                       method_options={"pool": 3})
    with Memory(tmp_path / "s", "a", config=cfg) as mem:
        for i in range(6):
            mem.add_session(make_session(i, with_image=False))
        b = mem.tenant("b")
        b.add_session(make_session(9, with_image=False))
        top = mem.retrieve("mug number 2 shelf").items
        mem.forget(node_ids=[i.node_id for i in top], reason="test")
        reqs = [("a", "mug number 2 shelf"), ("b", "mug"), ("a", "Noted mug")]
        batched = mem.retrieve_many(reqs)
        assert [c for c in batched] == [mem.tenant(ns).retrieve(q) for ns, q in reqs]
        gone = {i.node_id for i in top}
        assert not gone & {i.node_id for c in batched for i in c.items}
        assert len(batched[0].trace.pool) == 3  # the pool is refilled past the redacted nodes


def test_retrieve_many_names_bad_requests(store_path, models):
    from c3m.errors import InvalidInput

    with Memory(store_path, "a", models=models, method="dense-topk") as mem:
        with pytest.raises(InvalidInput, match=r"requests\[1\]"):
            mem.retrieve_many([("a", "q"), "q"])
        with pytest.raises(InvalidInput, match=r"requests\[0\]\.question"):
            mem.retrieve_many([("a", " ")])
        with pytest.raises(InvalidInput, match=r"requests\[1\]\.namespace"):
            mem.retrieve_many([("a", "q"), ("bad ns!", "q")])
        assert mem.retrieve_many([]) == []


def test_retrieve_batch_broadcasts_one_budget_and_checks_the_count(store_path, models):
    from c3m.errors import InvalidInput
    from factories import make_session

    with Memory(store_path, "a", models=models, method="c3m") as mem:
        mem.add_session(make_session(1))
        got = mem.method.retrieve_batch(["mug", "shelf"], ReaderBudget())
        assert got == [mem.method.retrieve("mug", ReaderBudget()), mem.method.retrieve("shelf", ReaderBudget())]
        with pytest.raises(InvalidInput, match="budgets"):
            mem.method.retrieve_batch(["a", "b"], [ReaderBudget()])


# -- the key arena -------------------------------------------------------------------------------------------
def test_arena_keeps_every_tenant_rows_through_moves_and_compaction():
    rng = np.random.default_rng(0)
    arena = KeyArena(4, capacity=8)
    truth: dict[str, np.ndarray] = {}
    for step in range(600):
        t = f"t{rng.integers(0, 12)}"
        op = rng.random()
        if op < 0.75:
            rows = rng.random((int(rng.integers(1, 40)), 4)).astype(np.float32)
            arena.extend(t, rows)
            truth[t] = np.concatenate([truth.get(t, np.zeros((0, 4), np.float32)), rows])
        elif op < 0.9:
            arena.clear(t)
            truth[t] = np.zeros((0, 4), np.float32)
        else:
            arena.drop(t)
            truth.pop(t, None)
        if step % 50 == 0 or step == 599:
            spans = []
            for name, want in truth.items():
                assert np.array_equal(arena.rows(name), want), (step, name)
                s, e = arena.span(name)
                if e > s:
                    spans.append((s, e))
            spans.sort()
            assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))  # no two tenants overlap
    assert len(arena) == sum(len(v) for v in truth.values())
    assert arena.rows("never").shape == (0, 4)


def test_segments_topk_and_scores_are_batch_invariant():
    from c3m.read.batch import segments_scores, segments_topk

    rng = np.random.default_rng(1)
    segs = [rng.standard_normal((n, 16)).astype(np.float32) for n in (0, 1, 7, 30, 5)]
    segs[3][4] = segs[3][9]  # an exact tie: the earlier row first
    Q = rng.standard_normal((len(segs), 16)).astype(np.float32)
    batch = segments_topk(Q, segs, [3, 3, 10, 12, 0])
    for b, seg in enumerate(segs):
        (s1, i1), = segments_topk(Q[b:b + 1], [seg], [3, 3, 10, 12, 0][b])
        assert np.array_equal(batch[b][0], s1) and np.array_equal(batch[b][1], i1)
        assert len(i1) == min([3, 3, 10, 12, 0][b], len(seg))
        if len(i1):
            assert np.allclose(s1, (seg @ Q[b])[i1], atol=1e-5)
    full = segments_scores(Q, segs)
    for b, seg in enumerate(segs):
        assert np.allclose(full[b], seg @ Q[b], atol=1e-5)
    order = batch[3][1].tolist()
    if 4 in order and 9 in order:
        assert order.index(4) < order.index(9)
