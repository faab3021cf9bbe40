"""Data model: paper defaults, immutability, budget arithmetic, JSON views."""
from __future__ import annotations

import dataclasses
from datetime import datetime

import pytest

from c3m.errors import InvalidInput
from c3m.types import (C1_WRITE_BUDGET, BudgetUse, Provenance, RawNode, ReaderBudget, Session, Turn, WriteBudget,
                       as_json_dict, node_id_for)


def test_paper_defaults():
    assert WriteBudget().as_tuple() == (36, 6, 6144, 384 * 1024)
    assert ReaderBudget().as_tuple() == (3, 12, 8, 12 * 1024)
    assert C1_WRITE_BUDGET.entries == 24
    assert WriteBudget().scaled(1.5).as_tuple() == (54, 9, 9216, 589824)


def test_raw_nodes_and_sessions_are_immutable():
    node = RawNode("n-1", Provenance("ns", "s1", 0, datetime(2026, 1, 1)), "user", "hi")
    with pytest.raises(dataclasses.FrozenInstanceError):
        node.text = "changed"
    session = Session("s1", datetime(2026, 1, 1), [Turn("user", "hi")])
    assert isinstance(session.turns, tuple)
    with pytest.raises(dataclasses.FrozenInstanceError):
        session.turns = ()


def test_budget_use_fits_every_dimension():
    budget = ReaderBudget(pages=1, raw_nodes=2, images=1, text_tokens=10)
    assert BudgetUse(1, 2, 1, 10).fits(budget)
    for over in [(2, 0, 0, 0), (0, 3, 0, 0), (0, 0, 2, 0), (0, 0, 0, 11)]:
        assert not BudgetUse(*over).fits(budget)
    assert BudgetUse(1, 1, 0, 3) + BudgetUse(0, 1, 1, 4) == BudgetUse(1, 2, 1, 7)


@pytest.mark.parametrize("bad", [-1, 1.5, True])
def test_budget_rejects_bad_values(bad):
    with pytest.raises(InvalidInput, match="raw_nodes"):
        ReaderBudget(raw_nodes=bad)


def test_node_ids_are_deterministic_and_distinct():
    assert node_id_for("a", "s1", 0) == node_id_for("a", "s1", 0)
    assert len({node_id_for("a", "s1", 0), node_id_for("b", "s1", 0), node_id_for("a", "s1", 1)}) == 3


def test_json_view():
    node = RawNode("n-1", Provenance("ns", "s1", 0, datetime(2026, 1, 1)), "user", "hi")
    assert as_json_dict(node)["provenance"]["time"] == "2026-01-01T00:00:00"


def test_node_id_fast_path_equals_the_json_digest():
    """node_id_for writes the JSON key directly for plain names: it must equal the json.dumps digest for any names
    (quotes, backslashes, control and non-ASCII characters take the json.dumps path)."""
    import hashlib
    import json

    from hypothesis import given, settings
    from hypothesis import strategies as st

    from c3m.types import node_id_for

    @settings(max_examples=400, deadline=None)
    @given(st.text(max_size=12), st.text(max_size=12), st.integers(-3, 10**9))
    def check(ns, session, turn):
        want = f"n-{hashlib.sha256(json.dumps([ns, session, turn]).encode()).hexdigest()[:20]}"
        assert node_id_for(ns, session, turn) == want

    check()
    assert node_id_for("u", "s1", 0) == "n-" + hashlib.sha256(b'["u", "s1", 0]').hexdigest()[:20]
