"""LangGraph: C3MStore against InMemoryStore's behaviour, batch == abatch, an agent on GenericFakeChatModel that
remembers in one thread and recalls in another (with provenance), per-user isolation, forget, images, errors."""
from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("langgraph.store.base")
pytest.importorskip("langchain_core")
pytest.importorskip("langchain.agents")

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel  # noqa: E402
from langchain_core.messages import AIMessage, ToolMessage  # noqa: E402
from langgraph.store.base import GetOp, InvalidNamespaceError, ListNamespacesOp, MatchCondition, PutOp, SearchOp  # noqa: E402
from langgraph.store.memory import InMemoryStore  # noqa: E402

from c3m import Memory  # noqa: E402
from c3m.integrations.langgraph import C3MStore, c3m_tools, from_c3m_namespace, to_c3m_namespace  # noqa: E402


@pytest.fixture
def store(mem):
    with C3MStore(mem) as s:
        yield s


def _view(items):
    return [(tuple(i.namespace), i.key, {k: v for k, v in i.value.items() if k != "_c3m"}) for i in items]


def test_same_answers_as_inmemorystore(store):
    ref = InMemoryStore()
    writes = [(("users", "alice", "prefs"), "k1", {"text": "likes tea"}),
              (("users", "alice", "prefs"), "k2", {"kind": "food", "score": 3, "tags": ["a", "b"]}),
              (("users", "alice", "notes"), "k3", {"text": "kayak in the garage", "kind": "thing"}),
              (("users", "bob", "prefs"), "k1", {"text": "likes jazz", "score": 5}),
              (("docs",), "d1", {"content": {"title": "T", "n": 1}}),
              (("users", "alice", "prefs"), "k1", {"text": "likes coffee now"}),    # overwrite
              (("users", "alice", "prefs"), "k4", {"text": "to be deleted"})]
    for s in (ref, store):
        for ns, key, value in writes:
            s.put(ns, key, value)
        s.delete(("users", "alice", "prefs"), "k4")
    for ns, key in [(("users", "alice", "prefs"), "k1"), (("users", "alice", "prefs"), "k2"),
                    (("users", "alice", "prefs"), "k4"), (("docs",), "d1")]:
        a, b = ref.get(ns, key), store.get(ns, key)
        assert (a is None) == (b is None)
        if a is not None:
            assert _view([a]) == _view([b])
    # unranked search: same items in one namespace (insertion order), same sets across namespaces
    assert _view(ref.search(("users", "alice", "prefs"))) == _view(store.search(("users", "alice", "prefs")))
    for prefix in [(), ("users",), ("users", "alice")]:
        assert sorted(map(repr, _view(ref.search(prefix, limit=50)))) == sorted(map(repr, _view(store.search(prefix, limit=50))))
    for prefix, flt in [((), {"kind": "food"}), (("users", "bob"), {"score": {"$gte": 4}}), ((), {"score": {"$ne": 3}}),
                        ((), {"content": {"n": 1}}), ((), {"tags": ["a", "b"]}), ((), {"text": "likes coffee now"})]:
        assert sorted(map(repr, _view(ref.search(prefix, filter=flt, limit=50)))) == \
            sorted(map(repr, _view(store.search(prefix, filter=flt, limit=50)))), flt
    assert _view(ref.search(("users", "alice", "prefs"), limit=1, offset=1)) == \
        _view(store.search(("users", "alice", "prefs"), limit=1, offset=1))
    for kw in [{}, {"prefix": ("users",)}, {"suffix": ("prefs",)}, {"max_depth": 2}, {"prefix": ("users", "*", "prefs")},
               {"limit": 2, "offset": 1}]:
        assert ref.list_namespaces(**kw) == store.list_namespaces(**kw), kw
    # (InMemoryStore lists a namespace once anything, even a get, touched it; C3MStore lists those holding items)
    assert store.get(("nope",), "k1") is None and ("nope",) not in store.list_namespaces()


def test_batch_equals_abatch(store):
    store.put(("m", "a"), "k1", {"text": "the red kayak is in the garage"})
    store.put(("m", "a"), "k2", {"text": "my bike is blue", "kind": "x"})
    store.put(("m", "b"), "k1", {"text": "bob has a green kayak"})
    ops = [GetOp(("m", "a"), "k1"), GetOp(("m", "a"), "missing"), SearchOp(("m",), None, 10, 0, "kayak"),
           SearchOp(("m", "a"), {"kind": "x"}), ListNamespacesOp(match_conditions=(MatchCondition("prefix", ("m",)),))]
    sync = store.batch(ops)
    asyn = asyncio.run(store.abatch(ops))
    dump = lambda rs: [r.dict() if hasattr(r, "dict") else [x.dict() if hasattr(x, "dict") else x for x in r]
                       if isinstance(r, list) else r for r in rs]  # noqa: E731
    assert dump(sync) == dump(asyn)
    # a put in a batch lands after the batch's reads, as in InMemoryStore
    ref = InMemoryStore()
    for s in (ref, store):
        out = s.batch([PutOp(("m", "c"), "new", {"text": "fresh"}), GetOp(("m", "c"), "new")])
        assert out == [None, None]
        assert s.get(("m", "c"), "new").value == {"text": "fresh"}


def test_query_search_is_c3m_read_with_provenance(store, mem, png_url, png):
    store.put(("memories", "alice"), "kayak", {"text": "Here is my new kayak, it is red.", "images": [png_url]})
    store.put(("memories", "alice"), "tea", {"text": "I drink green tea every morning."})
    got = store.get(("memories", "alice"), "kayak")
    assert got.value == {"text": "Here is my new kayak, it is red.", "images": [png_url]}  # exactly what was put
    hits = store.search(("memories", "alice"), query="what colour is my kayak?")
    assert hits and hits[0].key == "kayak" and hits[0].score is not None
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    prov = hits[0].value["_c3m"]
    assert prov["namespace"] == "memories.alice" and prov["session_id"] == "lg:kayak:v1" and prov["turn_index"] == 0
    assert prov["time"].endswith("+00:00")
    sha = prov["images"][0]["sha256"]
    assert mem.tenant("memories.alice").image_bytes(sha) == png  # the original image, byte for byte
    assert store.search(("memories", "bob"), query="kayak") == []


def test_overwrite_keeps_history_and_delete_forgets(store, mem):
    ns = ("memories", "alice")
    store.put(ns, "bike", {"text": "My bike is red."})
    store.put(ns, "bike", {"text": "My bike is blue now."})
    assert store.get(ns, "bike").value == {"text": "My bike is blue now."}
    hits = store.search(ns, query="bike colour")
    assert [h.key for h in hits] == ["bike"] and hits[0].value["text"] == "My bike is blue now."
    alice = mem.tenant("memories.alice")
    assert {n.session_id for n in alice.nodes() if not n.redacted} == {"lg:bike:v1", "lg:bike:v2"}
    store.delete(ns, "bike")
    assert store.get(ns, "bike") is None and store.search(ns, query="bike") == []
    assert all(n.redacted for n in alice.nodes())
    with C3MStore(mem, history=False) as flat:
        flat.put(ns, "car", {"text": "a grey car"})
        flat.put(ns, "car", {"text": "a white car"})
        assert [n.text for n in alice.nodes() if n.session_id.startswith("lg:car")] == ["", "a white car"]


def test_namespace_mapping_round_trips():
    for ns in [("memories", "alice"), ("a",), ("x@41",), ("José Pérez", "notes"), ("_private", "1"), ("a/b", "c:d")]:
        name = to_c3m_namespace(ns)
        assert from_c3m_namespace(name) == ns
    assert to_c3m_namespace(("memories", "alice")) == "memories.alice"


def test_bad_input_names_the_fix(store):
    with pytest.raises(InvalidNamespaceError, match="periods"):
        store.put(("a.b",), "k", {"text": "x"})
    with pytest.raises(InvalidNamespaceError, match="empty"):
        store.put((), "k", {"text": "x"})
    with pytest.raises(InvalidNamespaceError, match="langgraph"):
        store.put(("langgraph", "x"), "k", {"text": "x"})
    with pytest.raises(InvalidNamespaceError, match="limit of 128"):
        store.put(("a" * 100, "b" * 40), "k", {"text": "x"})
    with pytest.raises(ValueError, match="must be dicts"):
        store.batch([PutOp(("a",), "k", "just a string")])
    with pytest.raises(ValueError, match="never fetched"):
        store.put(("a",), "k", {"text": "x", "images": ["https://example.com/cat.png"]})
    with pytest.raises(ValueError, match="JSON-serializable"):
        store.put(("a",), "k", {"when": object()})
    with pytest.raises(NotImplementedError, match="TTL"):
        store.put(("a",), "k", {"text": "x"}, ttl=5)
    assert store.list_namespaces() == []  # nothing half-written


class ToolCallingFake(GenericFakeChatModel):
    """GenericFakeChatModel scripted with tool calls; bind_tools is a no-op (the script decides)."""

    def bind_tools(self, tools, **kwargs):
        return self


def test_agent_remembers_in_one_thread_and_recalls_in_another(store, mem):
    from langchain.agents import create_agent
    from langchain_core.tools import tool
    from langgraph.config import get_store

    @tool
    def search_store(query: str) -> str:
        """Search the graph's store (reached with get_store())."""
        return "; ".join(f"{h.key}={h.value['text']}" for h in get_store().search(("memories", "alice"), query=query))

    script = iter([
        AIMessage("", tool_calls=[{"name": "remember", "args": {"text": "My kayak is red and lives in the garage."},
                                   "id": "c1"}]),
        AIMessage("Noted."),
        AIMessage("", tool_calls=[{"name": "recall", "args": {"query": "where is my kayak?"}, "id": "c2"},
                                  {"name": "search_store", "args": {"query": "kayak"}, "id": "c3"}]),
        AIMessage("In the garage."),
        AIMessage("", tool_calls=[{"name": "recall", "args": {"query": "where is my kayak?"}, "id": "c4"}]),
        AIMessage("I don't know."),
        AIMessage("", tool_calls=[{"name": "ask", "args": {"question": "where is my kayak?"}, "id": "c5"}]),
        AIMessage("Forgotten."),
    ])
    agent = create_agent(ToolCallingFake(messages=script), tools=c3m_tools(store) + [search_store], store=store)

    def run(thread, user, text):
        out = agent.invoke({"messages": [("user", text)]},
                           config={"configurable": {"thread_id": thread, "user_id": user}})
        return [m for m in out["messages"] if isinstance(m, ToolMessage)]

    run("t1", "alice", "Remember: my kayak is red and lives in the garage.")
    (recalled, searched) = run("t2", "alice", "Where is my kayak?")
    assert "garage" in recalled.content
    line = next(ln for ln in recalled.content.splitlines() if "garage" in ln)
    assert line.startswith("[lg:") and "#0 20" in line and " user]" in line  # session#turn, time, role
    assert "garage" in searched.content
    (bob,) = run("t3", "bob", "Where is my kayak?")
    assert "garage" not in bob.content
    # forget through c3m itself: gone from the store, the tools and every read
    alice = mem.tenant("memories.alice")
    sid = next(n.session_id for n in alice.nodes() if "garage" in n.text)
    alice.forget(session_id=sid, reason="user request")
    (asked,) = run("t4", "alice", "Where is my kayak?")
    assert "garage" not in asked.content
    assert store.search(("memories", "alice"), query="kayak") == [] and store.list_namespaces() == []


def test_tools_need_a_user(store):
    remember, _, _ = c3m_tools(store)
    with pytest.raises(ValueError, match="user_id"):
        remember.invoke({"text": "x"}, config={"configurable": {}})
    (r, *_) = c3m_tools(store, namespace=("team", "shared"))
    assert "Remembered" in r.invoke({"text": "the wifi password is on the fridge"})
    assert store.search(("team", "shared"))[0].value == {"text": "the wifi password is on the fridge"}


def test_store_on_both_backends(store_location, models, png_url):
    """The same store on SQLite and PostgreSQL (the worker uses a PostgreSQL Memory as it is)."""
    with Memory(store_location, "default", models=models) as m, C3MStore(m) as s:
        s.put(("memories", "alice"), "kayak", {"text": "my kayak is red", "images": [png_url]})
        s.put(("memories", "bob"), "jazz", {"text": "bob likes jazz"})
        assert s.get(("memories", "alice"), "kayak").value == {"text": "my kayak is red", "images": [png_url]}
        assert [h.key for h in s.search(("memories", "alice"), query="kayak")] == ["kayak"]
        assert s.list_namespaces() == [("memories", "alice"), ("memories", "bob")]
        s.delete(("memories", "alice"), "kayak")
        assert s.get(("memories", "alice"), "kayak") is None and s.list_namespaces() == [("memories", "bob")]
