"""The selection stage: every method that spends the reader budget spends it here, and what costs what is defined here.

**What an item costs** (``item_cost``), on the four dimensions of ``ReaderBudget`` (the harness's definition,
``c3m.budget.measure_context``, measures the same): a Raw-Node item (raw text, raw image, or both forms of one node:
one slot, ``RAW_NODE``) takes one Raw-Node slot; derived text (a summary, a fact, a caption, a crop's phrase) takes
none; every distinct image shown costs one image, charged once however many items show it; text costs its tokens
(the memory's token counter). Pages are charged by routing — once per page the trace names, never per item — except
in the C3M-only reader, where a page is charged when the solver takes an item from it (``PAGE_GROUP``).

**How the budget is spent** (``solve_many`` / ``greedy``):

- ``solve_many``: ``c3m_kernels.budget_solve`` for a batch of instances (``SolveInstance``), one padded call per
  (λ, mode); coverage mode maximises Σ value + λ · Cov (sessions, entries) under the budget, λ = 0 the exact
  knapsack. ``c3m``'s composition and the C3M-only reader (``read.bmer.select``) select this way.
- ``greedy`` (a named mode of the same stage): take items best-first while they fit, skipping one that does not. The
  published behaviour of the yardsticks and the bounded baselines (``dense-topk``, ``bm25``, ``hybrid``, ``resum``,
  ``moviechat``, ``memrefine``, ``cdrs``) and of the derived-text readers (``summary-only``, ``facts``) is this
  fill over their own candidates in their own order, so they keep it; each says its own stop rule.

This is the only module that calls ``budget_solve`` (``grep -rn budget_solve c3m/``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Sequence, TypeVar

import numpy as np

from ..types import BudgetUse, ReaderBudget

T = TypeVar("T")

#: the cost columns of a solver instance, in ``ReaderBudget.as_tuple()`` order
PAGES, RAW_NODES, IMAGES, TOKENS = range(4)
#: what one Raw-Node slot costs (a group of the solver: a node's raw forms share it)
RAW_NODE = (0.0, 1.0, 0.0, 0.0)
#: what opening a page costs when the solver charges pages (the C3M-only reader)
PAGE_GROUP = (1.0, 0.0, 0.0, 0.0)


def item_cost(*, raw_node: bool, images: Iterable = (), tokens: int, shown: set[str] | None = None) -> BudgetUse:
    """What one item costs (module docstring): a Raw-Node slot if it shows a Raw Node, its images not already
    ``shown`` (sha256s), its text tokens. No pages: routing charges those."""
    shas = {im.sha256 for im in images}
    return BudgetUse(0, 1 if raw_node else 0, len(shas - shown) if shown is not None else len(shas), tokens)


def cost_row(*, images: int, tokens: int, raw_node: bool = False) -> list[float]:
    """An item's row of a solver instance's ``costs`` ([pages, raw nodes, images, tokens]). A Raw-Node item whose
    slot is a solver group (composition: raw text and raw image of one node) carries 0 here, the group 1."""
    return [0, 1 if raw_node else 0, images, tokens]


@dataclass
class SolveInstance:
    """One budget selection (``c3m_kernels.budget_solve``'s per-instance arrays)."""

    values: np.ndarray       # [M]
    costs: np.ndarray        # [M, 4]
    groups: np.ndarray       # [M] int, -1 = none
    group_costs: np.ndarray  # [G, 4]
    cover: np.ndarray        # [M, L] bool
    budget: np.ndarray       # [4]
    lam: float
    #: "auto": the exact knapsack when λ = 0 (nothing to cover: the same objective), else coverage; "coverage":
    #: coverage mode whatever λ (the C3M-only reader, as published)
    mode: str = "auto"


def solve_many(instances: Sequence[SolveInstance], *, device: str = "cpu") -> list[np.ndarray]:
    """Every instance's chosen mask [M_b] bool, from one padded ``budget_solve`` call per distinct (λ, mode) (padding
    is inert: ``lengths=``), each exactly what the instance gets alone. ``device``: the memory's device
    (``c3m_kernels.dispatch.placement``): on CUDA the padded batch goes up once and the DP runs in Triton (fp32
    values: an exact tie may pick another, equally good set); the masks come back once."""
    from c3m_kernels.budget_solve import budget_solve
    from c3m_kernels.dispatch import placement

    at = placement(device, "budget_solve")

    out: list[np.ndarray | None] = [None] * len(instances)
    by_lam: dict[tuple[float, str], list[int]] = {}
    for i, inst in enumerate(instances):
        if len(inst.values) == 0:
            out[i] = np.zeros(0, bool)
        else:
            by_lam.setdefault((float(inst.lam), inst.mode), []).append(i)
    for (lam, mode), idx in by_lam.items():
        group = [instances[i] for i in idx]
        B = len(group)
        M = max(len(g.values) for g in group)
        G = max(1, max(len(g.group_costs) for g in group))
        L = max(1, max(g.cover.shape[1] for g in group))
        values, costs = np.zeros((B, M)), np.zeros((B, M, 4))
        groups, gcost = np.full((B, M), -1, np.int64), np.zeros((B, G, 4))
        cover, budgets = np.zeros((B, M, L), bool), np.zeros((B, 4))
        for b, g in enumerate(group):
            m = len(g.values)
            values[b, :m], costs[b, :m], groups[b, :m] = g.values, g.costs, g.groups
            gcost[b, :len(g.group_costs)] = g.group_costs
            cover[b, :m, :g.cover.shape[1]] = g.cover
            budgets[b] = g.budget
        coverage = bool(lam) or mode == "coverage"
        lengths = np.array([len(g.values) for g in group])
        if at.tensors:
            values, costs, budgets, groups, gcost, cover, lengths = (
                at.put(x) for x in (values, costs, budgets, groups, gcost, cover, lengths))
        chosen = at.host(budget_solve(values, costs, budgets, groups=groups, group_costs=gcost,
                                      mode="coverage" if coverage else "exact", coverage=cover if coverage else None,
                                      lam=lam, lengths=lengths))
        for b, i in enumerate(idx):
            out[i] = np.asarray(chosen[b, :len(instances[i].values)], bool)
    return out  # type: ignore[return-value]


_END = object()


@dataclass
class Filled:
    """``greedy``'s answer: the items taken (in the order offered), those skipped for the budget, and the use."""

    chosen: list
    dropped: list
    use: BudgetUse


def greedy(items: Iterable[T], budget: ReaderBudget, cost: Callable[[T, set[str]], tuple[BudgetUse, set[str]]], *,
           stop: Callable[[BudgetUse, int], bool] | None = None) -> Filled:
    """Take ``items`` best-first (the order given) while they fit ``budget``; an item that does not fit is skipped
    (``dropped``) and the fill goes on. ``cost(item, shown)`` is (its ``item_cost``, the image sha256s it shows);
    ``stop(use, taken)`` ends the fill before the next item (a method's own stop rule: its Raw-Node slots full, a
    document limit). ``items`` may be lazy: nothing after the stop is drawn."""
    use, shown, chosen, dropped = BudgetUse(), set(), [], []
    it = iter(items)
    while not (stop is not None and stop(use, len(chosen))):
        item = next(it, _END)
        if item is _END:
            break
        step, images = cost(item, shown)
        if not (use + step).fits(budget):
            dropped.append(item)
            continue
        use, shown = use + step, shown | images
        chosen.append(item)
    return Filled(chosen, dropped, use)
