"""The selection stage (``c3m.read.select``): the one place the reader budget is spent and an item's cost defined."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from c3m.read.select import RAW_NODE, SolveInstance, greedy, item_cost, solve_many
from c3m.types import BudgetUse, ImageRef, ReaderBudget

ROOT = Path(__file__).resolve().parents[2]


def _img(sha: str) -> ImageRef:
    return ImageRef(sha256=sha, mime="image/png", width=8, height=8, nbytes=10)


def test_budget_solve_has_one_caller():
    calls = [f"{p.relative_to(ROOT)}:{n}" for p in (ROOT / "c3m").rglob("*.py")
             for n, line in enumerate(p.read_text().splitlines(), 1) if re.search(r"\bbudget_solve\(", line)]
    assert calls == [c for c in calls if c.startswith("c3m/read/select.py:")] and len(calls) == 1, calls


def test_item_cost_charges_an_image_once():
    a, b = _img("a" * 64), _img("b" * 64)
    assert item_cost(raw_node=True, images=(a, b), tokens=7) == BudgetUse(0, 1, 2, 7)
    assert item_cost(raw_node=True, images=(a, b), tokens=7, shown={"a" * 64}) == BudgetUse(0, 1, 1, 7)
    assert item_cost(raw_node=False, tokens=3) == BudgetUse(0, 0, 0, 3)


def test_greedy_skips_what_does_not_fit_and_stops_before_drawing():
    drawn = []

    def items():
        for k, tokens in enumerate([5, 50, 5, 5, 5]):
            drawn.append(k)
            yield k, tokens

    got = greedy(items(), ReaderBudget(pages=0, raw_nodes=10, images=0, text_tokens=12),
                 lambda it, shown: (item_cost(raw_node=True, tokens=it[1]), set()),
                 stop=lambda use, taken: taken >= 2)
    assert [k for k, _ in got.chosen] == [0, 2] and [k for k, _ in got.dropped] == [1]
    assert got.use == BudgetUse(0, 2, 0, 10)
    assert drawn == [0, 1, 2]  # the stop rule ends the fill before the next item is drawn


def test_solve_many_is_each_instance_alone():
    rng = np.random.default_rng(0)
    insts = []
    for m in (5, 9, 3):
        costs = np.zeros((m, 4))
        costs[:, 3] = rng.integers(1, 20, m)
        insts.append(SolveInstance(rng.random(m), costs, np.arange(m), np.tile(np.array(RAW_NODE), (m, 1)),
                                   rng.random((m, 2)) > 0.5, np.array([1, 3, 0, 30.0]), 0.05))
    together = solve_many(insts)
    alone = [solve_many([inst])[0] for inst in insts]
    assert all(np.array_equal(t, a) for t, a in zip(together, alone))
    for inst, chosen in zip(insts, together):
        assert chosen.sum() <= 3 and inst.costs[chosen, 3].sum() <= 30
