"""Page routing's mass prior (``BmerConfig.page_mass``, issue #43): for a reader that sees only the index, a page
holding most of the history's support is read unless the question clearly points elsewhere; the full reader (which
searches the Cold Store) and the paper preset route by relevance alone."""
from __future__ import annotations

from collections import Counter
from datetime import datetime

import numpy as np
import pytest

from c3m.index.active import ActiveIndex, IndexEntry, normalize
from c3m.methods.c3m import PAPER, C3MConfig
from c3m.read.bmer import BmerConfig, route
from c3m.types import ReaderBudget

T0 = datetime(2026, 1, 1)
DIM = 4


def _index() -> tuple[ActiveIndex, np.ndarray]:
    """Page 0: one spill folding 90 turns, its mean vector far from the question; page 1: one small entry a bit
    closer to the question."""
    idx = ActiveIndex(DIM)
    q = normalize(np.array([1.0, 0.0, 0.0, 0.0], np.float32))
    spill = IndexEntry("e001", normalize(np.array([0.05, 1.0, 0.0, 0.0], np.float32)),
                       {"s1": set(range(90))}, T0, T0, "", page=0, kind="spill", support=90, entities=Counter())
    small = IndexEntry("e002", normalize(np.array([0.15, 0.0, 1.0, 0.0], np.float32)),
                       {"s2": {0}}, T0, T0, "small talk", page=1, support=1, entities=Counter())
    idx.entries = {"e001": spill, "e002": small}
    idx.refresh_pages()
    return idx, q


def test_the_page_holding_most_of_the_history_is_read_with_the_mass_prior():
    idx, q = _index()
    one = ReaderBudget(pages=1)
    pages, _ = route(idx, q, set(), one, BmerConfig(page_mass=0.0))
    assert [p for p, _ in pages] == [idx.entries["e002"].page]  # relevance alone: the small entry's page
    pages, routed = route(idx, q, set(), one, BmerConfig(page_mass=0.2))
    assert [p for p, _ in pages] == [idx.entries["e001"].page] and routed[0][0].entry_id == "e001"


def test_a_clearly_relevant_page_still_wins():
    idx, q = _index()
    idx.entries["e002"].z = q.copy()  # the small entry now states what is asked
    idx.refresh_pages()
    pages, _ = route(idx, q, set(), ReaderBudget(pages=1), BmerConfig(page_mass=0.2))
    assert [p for p, _ in pages] == [idx.entries["e002"].page]


@pytest.mark.parametrize("options, want", [({}, 0.0), ({"cold": False}, 0.2), ({"reranker": "bmer"}, 0.2),
                                           ({"cold": False, "bounded_page_mass": 0.5}, 0.5)])
def test_only_a_reader_that_sees_only_the_index_gets_the_prior(options, want):
    assert C3MConfig.from_options(options).bmer().page_mass == want


def test_the_paper_preset_routes_by_relevance_alone():
    assert PAPER.bmer().page_mass == 0.0
