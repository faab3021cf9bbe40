"""The library, not a test, runs all three Triton kernels on a real workload (issue #35, item 1).

A tiny c3m memory is ingested and read twice: on the CPU path (``device="cpu"``, automatic backends: numpy and the
numba kernels), and on the CUDA code path — ``device="cuda"`` on a GPU machine; elsewhere ``device="cpu"`` with
``C3M_KERNELS_BACKEND=triton`` under ``TRITON_INTERPRET=1``, where ``c3m_kernels.dispatch.placement`` hands the
kernels torch CPU tensors and Triton's interpreter runs them. ``c3m_kernels.dispatch.counts()`` then says which
(op, backend) pairs the ingest and the reads executed: RAMU's proposals run ``candidate_topk``; routing and the
node pools ``candidate_topk``; anchor expansion ``anchor_scores``; composition ``budget_solve`` — single questions
and the batched multi-tenant read alike. A spy on the ops' entry points checks the library handed them tensors on
the memory's device (the interpreter would also run numpy inputs of two of the ops, so the counters alone would not
show that).

The contexts (items, traces) and the committed index must be the CPU path's. On a GPU they could legitimately
differ where fp32 and fp64 disagree: Triton's candidate_topk and RAMU's proposal sum in fp32 (the CPU RAMU in
fp64), anchor_scores sums fp32 atomics, budget_solve's DP holds fp32 values — so two scores equal (or within an
fp32 ulp) in one precision can order differently in the other, and an exact tie may pick another, equally good
set. This history has no such near-ties (every compared score is rounded to 4 decimals in the trace).
"""
from __future__ import annotations

import importlib
import os
from datetime import datetime, timedelta

import pytest

try:
    import torch

    CUDA = torch.cuda.is_available()
except Exception:  # pragma: no cover - torch is a test dependency of this file
    torch, CUDA = None, False
if not CUDA:  # before anything imports triton (tests/kernels/conftest.py does the same)
    os.environ.setdefault("TRITON_INTERPRET", "1")
pytest.importorskip("torch")
pytest.importorskip("triton")

from c3m import Memory, MemoryConfig  # noqa: E402
from c3m.types import ReaderBudget, Session, Turn  # noqa: E402
from c3m_kernels import dispatch  # noqa: E402

OPS = ("candidate_topk", "anchor_scores", "budget_solve")
#: sessions that share entities (Lisbon, the mug, the kayak, Ana), so the anchor graph has edges to expand along
TEXTS = ("My red mug from Lisbon sits on the kitchen shelf.",
         "I bought a blue kayak in Lisbon last summer.",
         "The kayak lives in the garage next to my bike.",
         "My sister Ana gave me the red mug.",
         "Ana and I paddled the kayak on the river.")
QUESTIONS = ("Where is the red mug from Lisbon?", "Where does the kayak live?")
#: small enough for Triton's interpreter (the DP's states are clipped to what the pool can spend), and it binds
BUDGET = ReaderBudget(pages=1, raw_nodes=2, images=0, text_tokens=40)
#: two routed entries, so the index holds unrouted neighbours on the routed page for expansion to find
OPTIONS = {"entries_k": 2}


def _sessions(offset: int = 0) -> list[Session]:
    base = datetime(2026, 3, 1, 9)
    return [Session(f"s{i}", base + timedelta(days=i), (Turn("user", t), Turn("assistant", "Noted.")))
            for i, t in enumerate(TEXTS[offset:] + TEXTS[:offset])]


def _triton_ready() -> None:
    """Skip when triton was imported (kernels decorated) before TRITON_INTERPRET=1 could take effect."""
    if CUDA:
        return
    for name, kernel in (("candidate_topk", "_ragged_kernel"), ("anchor_scores", "_scatter_kernel"),
                         ("budget_solve", "_dp_kernel")):
        mod = importlib.import_module(f"c3m_kernels.{name}.triton_impl")
        if type(getattr(mod, kernel)).__name__ != "InterpretedFunction":
            pytest.skip("triton was imported before TRITON_INTERPRET=1 was set; run this file on its own")


def _backend(mp, mode: str) -> str:
    """Clear any forced backend, then for ``gpu`` force Triton (interpreted without CUDA); the memory's device."""
    for var in [v for v in os.environ if v.startswith("C3M_KERNELS_BACKEND")]:
        mp.delenv(var)
    if mode == "gpu":
        _triton_ready()
        if not CUDA:
            mp.setenv("C3M_KERNELS_BACKEND", "triton")
    return "cuda" if mode == "gpu" and CUDA else "cpu"


def _spy(mp, seen: list) -> None:
    """Wrap the three ops where the library looks them up (``from c3m_kernels.<op> import <op>`` at call time) and
    note, per call, whether the first array was a torch tensor and on which device."""
    for op in OPS:
        mod = importlib.import_module(f"c3m_kernels.{op}")
        real = getattr(mod, op)

        def wrapped(*args, __op=op, __real=real, **kwargs):
            first = args[3] if __op == "anchor_scores" else args[0]  # anchor_scores: sim (its CSR is host data)
            is_t = type(first).__module__.startswith("torch")
            seen.append((__op, is_t, first.device.type if is_t else "numpy"))
            return __real(*args, **kwargs)

        mp.setattr(mod, op, wrapped)


def _delta(before: dict, after: dict) -> dict:
    return {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0)}


def _workload(root, mode: str) -> dict:
    """Ingest two tenants, read single questions and one batched multi-tenant read; counters per phase."""
    seen: list = []
    out: dict = {}
    with pytest.MonkeyPatch.context() as mp:
        device = _backend(mp, mode)
        if mode == "gpu":
            _spy(mp, seen)
        cfg = MemoryConfig(method="c3m", text_embedder="hashing", token_counter="approx", device=device,
                           method_options=OPTIONS)
        dispatch.reset_counts()
        with Memory(root / mode, "u", config=cfg) as mem:
            for s in _sessions():
                mem.add_session(s)
            other = mem.tenant("v")
            for s in _sessions(2)[:4]:
                other.add_session(s)
            out["ingest"] = dispatch.counts()
            out["state"] = (mem.method.state(), other.method.state())
            before = dispatch.counts()
            out["single"] = [mem.retrieve(q, BUDGET) for q in QUESTIONS]
            out["read"] = _delta(before, dispatch.counts())
            before = dispatch.counts()
            requests = [("u", QUESTIONS[0]), ("v", QUESTIONS[1]), ("empty", QUESTIONS[0]), ("v", QUESTIONS[0])]
            out["batched"] = mem.retrieve_many(requests, BUDGET)
            out["read_many"] = _delta(before, dispatch.counts())
            before = dispatch.counts()
            out["one_by_one"] = [mem.tenant(ns).retrieve(q, BUDGET) for ns, q in requests]
            out["read_one_by_one"] = _delta(before, dispatch.counts())
            out["transfers"] = dispatch.transfers()
    out["seen"] = seen
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("kernels-on-workload")
    return {mode: _workload(root, mode) for mode in ("cpu", "gpu")}


def test_the_cpu_path_runs_only_cpu_kernels(runs):
    cpu = runs["cpu"]
    for phase in ("ingest", "read", "read_many"):
        assert all(backend == "cpu" for _, backend in cpu[phase]), (phase, cpu[phase])
    assert {op for op, _ in cpu["read"]} >= set(OPS)  # the read reaches every kernel on the CPU too


def test_ingest_and_read_run_every_triton_kernel(runs):
    gpu = runs["gpu"]
    assert gpu["ingest"].get(("candidate_topk", "triton"), 0) > 0, gpu["ingest"]  # RAMU's proposals
    for op in OPS:
        assert gpu["read"].get((op, "triton"), 0) > 0, (op, gpu["read"])
    for phase in ("ingest", "read", "read_many"):
        assert all(backend == "triton" for _, backend in gpu[phase]), (phase, gpu[phase])
    # the library handed every op tensors on the memory's device (the CUDA code path), never numpy
    want = "cuda" if CUDA else "cpu"
    assert {op for op, _, _ in gpu["seen"]} == set(OPS)
    assert all(is_t and dev == want for _, is_t, dev in gpu["seen"]), sorted(set(gpu["seen"]))


def test_batched_multi_tenant_read_runs_every_triton_kernel(runs):
    gpu = runs["gpu"]
    for op in OPS:
        assert gpu["read_many"].get((op, "triton"), 0) > 0, (op, gpu["read_many"])
    assert all(backend == "triton" for _, backend in gpu["read_many"])
    assert gpu["batched"] == gpu["one_by_one"]  # batch-invariant on the Triton path too
    assert not gpu["batched"][2].items  # the empty tenant


def test_batched_read_scores_each_tenant_graph_once(runs):
    """``read.expand.expand_many``: a batch's questions on one tenant share one ``anchor_scores`` call (here "v" asks
    twice), with the contexts the one-by-one reads give (checked above and below)."""
    for mode, backend in (("cpu", "cpu"), ("gpu", "triton")):
        run = runs[mode]
        batched = run["read_many"][("anchor_scores", backend)]
        alone = run["read_one_by_one"][("anchor_scores", backend)]
        assert batched == 2 and alone == 3, (mode, batched, alone)  # graphs of "u" and "v"; "empty" has none


def test_the_triton_read_keeps_its_tensors_on_the_device(runs):
    """Issue #35: inside ``anchor_scores`` and ``budget_solve`` (exact mode: the unified reader composes with
    ``rerank_lam=0``) no input tensor is copied to the host; each call reads one small tensor of checks and sizes."""
    moved = runs["gpu"]["transfers"]
    for op in ("anchor_scores", "budget_solve"):
        assert moved.get((op, "download"), 0) == 0, moved
        assert moved.get((op, "sync"), 0) > 0, moved
    assert all(kind != "download" for _, kind in runs["cpu"]["transfers"])  # numpy in: nothing to copy


def test_triton_contexts_equal_the_cpu_contexts(runs):
    cpu, gpu = runs["cpu"], runs["gpu"]
    assert gpu["state"] == cpu["state"]  # RAMU took the same actions (module docstring: why it could differ)
    assert gpu["single"] == cpu["single"]
    assert gpu["batched"] == cpu["batched"]
    assert sum(len(c.items) for c in cpu["single"] + cpu["batched"]) > 0
    assert any(c.trace.notes and "expanded entries" in c.trace.notes[0] and " 0 expanded" not in c.trace.notes[0]
               for c in cpu["single"])  # expansion really added an entry


def test_the_c3m_only_reader_solves_on_triton(tmp_path, monkeypatch):
    """``reader="c3m"`` (``bmer.select``: its own pool top-k and a coverage-mode ``budget_solve``) on both paths."""
    got = {}
    for mode in ("cpu", "gpu"):
        device = _backend(monkeypatch, mode)
        cfg = MemoryConfig(method="c3m", text_embedder="hashing", token_counter="approx",
                           device=device, method_options={"reader": "c3m"})
        with Memory(tmp_path / mode, "u", config=cfg) as mem:
            for s in _sessions()[:3]:
                mem.add_session(s)
            dispatch.reset_counts()
            got[mode] = (mem.retrieve(QUESTIONS[0], BUDGET), dispatch.counts())
    assert got["gpu"][1].get(("budget_solve", "triton"), 0) == 1, got["gpu"][1]
    assert got["gpu"][1].get(("candidate_topk", "triton"), 0) == 2, got["gpu"][1]  # routing, the pool
    assert all(b == "triton" for _, b in got["gpu"][1])
    assert got["gpu"][0] == got["cpu"][0] and got["cpu"][0].items


def test_hivemem_anchor_graph_follows_its_device(monkeypatch):
    """``c3m.index.anchor_graph.AnchorGraph`` no longer pins ``backend="cpu"``: its rebuild and expansion run where
    its ``device`` says (the same placement rule), with the CPU path's edges and expansions on this graph."""
    import numpy as np

    from c3m.index.anchor_graph import AnchorGraph

    sessions = [[["mug", "lisbon"], ["kayak", "lisbon"]], [["kayak", "garage"], ["mug", "ana"]],
                [["ana", "kayak", "river"]]]
    runs = {}
    for mode in ("cpu", "gpu"):
        device = _backend(monkeypatch, mode)
        g = AnchorGraph(2, rebuild_growth=0.01)  # every add is a full rebuild (build_anchor_graph)
        g.device = device
        dispatch.reset_counts()
        for s in sessions:
            g.add(s)
        sim = np.linspace(0.2, 0.9, g.num_anchors)
        runs[mode] = (g.state(), g.edges, g.expand([0], sim, 3), dispatch.counts())
    backend = {"cpu": "cpu", "gpu": "triton"}
    for mode, (*_, counts) in runs.items():
        assert counts.get(("build_anchor_graph", backend[mode]), 0) == len(sessions), counts
        assert counts.get(("anchor_scores", backend[mode]), 0) == 1, counts
    assert runs["gpu"][:2] == runs["cpu"][:2]  # edge weights are rounded to 4 decimals: the same graph
    (gpu, cpu) = runs["gpu"][2], runs["cpu"][2]  # expansion scores: fp32 sums on Triton, fp64 on the CPU
    assert [e for e, _ in gpu] == [e for e, _ in cpu] and np.allclose([s for _, s in gpu], [s for _, s in cpu])
