"""Train the evidence selector of the unified reader (HiVe-Mem §3.3, vertical composition) with PPO.

One readable file (cleanrl / nanoGPT style): arguments, pools, a vectorised environment, PPO, evaluation.

**Policy.** ``c3m.read.compose.MLPSelector(version="v2")``: per retrieved memory, features
[query emb; summary emb; ``SCALARS``] -> five Bernoulli logits (one per evidence form, ``FORMS`` order) and a
value head (training only). A form the memory does not have is never sampled and is left out of log-probs
and entropy. ``--embeddings=false`` (the shipped policy) drops the two 384-d vectors and keeps the scalars:
trained on 12 train-split histories, the embedding policy reached dev oracle-reader 0.46 at λ=0.1 where the
scalar-only one reached 0.725 — the splits have disjoint vocabularies, and the vectors let the MLP memorise
the train split's words.

**Episodes are one step.** A question's pool is the state, the joint form choice the action, the reward
comes at once and nothing follows: a contextual bandit, so GAE (γ, λ_GAE) is moot. The advantage is
``r − V(x)`` per memory (the value head is the baseline), normalised over the batch.

**Credit assignment: a difference reward per memory.** The question's quality Q is the share of its
support items satisfied by the chosen forms (the evidence check, ``c3m.eval.evidence``). Memory m gets
``D_m = Q(all choices) − Q(all choices but m's)`` — the items only m satisfies — minus its own cost. The sum
of the D_m is not Q (an item shown twice credits neither showing), which is the point: a redundant second
form of the same evidence earns nothing and pays its tokens.

**Reward.** ``r_m = D_m − λ · c̃_m``, with c_m the memory's context tokens (text tokens + image tokens,
qwen2-vl), clipped at the 5th/95th percentiles of a sliding window of recent batches and rescaled by
std(D)/std(clipped cost) over the same window (HiVe-Mem), so λ is unitless. ``--rescale=false`` uses
``c/1000`` instead (the toy bandit, whose optimum must not depend on the policy).

**Quality signal.** Named in every output as ``evidence-check-v1`` (perception-aware: a caption that lacks
the detail does not count; ``c3m/eval/evidence.py``). No answerer + judge is run here (the SmolLM2 and API
answerers are too slow for 2 CPU cores / not reachable offline).

**Environment.** Batched over precomputed pools (``--mode=build-pools`` opens committed stores once;
training never touches a store): padded [B, M, 5] selections, the coverage tensor [B, M, 5, K], the
reader budget approximated by cumulative sums in retrieval order (Raw-Node slots, images, text tokens).
Evaluation uses the *real* ``compose`` (``budget_solve`` under the reader budget) on the cached candidates.

**Outputs.** ``--out`` is the run folder (default ``runs/selector-ppo-<time>/``): ``selector.pt``,
``checkpoint.pt`` (resumed when the same ``--out`` is run again), ``metrics.csv``, ``summary.json`` (seconds,
device, world size, final loss), evaluations. ``--ship`` copies the trained (train mode) or chosen (sweep mode)
selector over the shipped ``c3m/models/weights/selector_ppo.pt``; nothing else touches it. ``--smoke`` is the
toy bandit for a few iterations (seconds on a CPU; tests and the GPU script). ``--device``: auto | cpu | cuda |
cuda:N (``training/runkit.py``: the device and process rules every trainer shares).

    python training/train_selector_ppo.py --mode=build-pools --dataset=DS --stores=OUT/stores/c3m/16k --name=train
    python training/train_selector_ppo.py --mode=sweep --sweep=0,0.5,1,2 --out=runs/ppo
    python training/train_selector_ppo.py --mode=eval --weights=c3m/models/weights/selector_ppo.pt --eval_pools=test
    python training/train_selector_ppo.py --smoke --device cpu --out /tmp/ppo-smoke
    torchrun --nproc_per_node 2 training/train_selector_ppo.py --mode=train   # gloo on CPU, nccl on GPU
    accelerate launch --multi_gpu --num_processes 2 training/train_selector_ppo.py --mode=train
    # (on a CPU-only machine accelerate needs --multi_gpu to start 2 ranks, which then use gloo; --cpu alone
    # starts one process)

DDP: every rank draws the same global batch, sampling noise and minibatch order from one seeded generator,
rolls out its share of the positions, and gradients are all-reduced *sums* of per-rank sums over a global
count, so N processes compute what one does up to float summation order (tests/test_selector_ppo.py, slow:
parameters within 1e-5 after 6 iterations; accelerate on CPU: max |Δ| 4.5e-8).
"""
from __future__ import annotations

import csv
import json
import os
import pickle
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import runkit  # noqa: E402
from runkit import opt  # noqa: E402

from c3m.read.compose import FORM_NAMES, FORMS, PPO_WEIGHTS, SCALARS, MLPSelector, memory_scalars  # noqa: E402

QUALITY = "evidence-check-v1"


@dataclass
class Args:
    mode: str = opt("train", "build-pools | train | sweep | eval")
    out: str = opt("", "run folder: selector.pt, checkpoint, metrics.csv, summary.json, evaluations, plots "
                       "(empty: runs/selector-ppo-<time>/)")
    ship: bool = opt(False, "copy the trained (train) or chosen (sweep) selector over the shipped weights")
    device: str = opt("auto", runkit.DEVICE_HELP)
    smoke: bool = opt(False, "the toy bandit for a few iterations: seconds (tests, GPU script)")
    pools: str = opt("/tmp/c3m-selector-pools", "folder of <name>.pkl pools")
    train_pool: str = opt("train", "pool trained on")
    dev_pool: str = opt("dev", "pool the sweep chooses λ on")
    eval_pools: str = opt("dev", "comma-separated pools evaluated with the real compose")
    # build-pools
    dataset: str = opt("", "build-pools: the c3m synth dataset")
    stores: str = opt("", "build-pools: OUT/stores/c3m/<length> of a `c3m eval --methods c3m` run")
    name: str = opt("train", "build-pools: the pool's name")
    perception: str = opt("scene-encoder", "build-pools: perception of the stores")
    limit: int = opt(0, "build-pools: at most this many histories (0: all)")
    done_from: str = opt("", "build-pools: a harness results .jsonl; only histories it records as finished")
    # PPO
    lam: float = opt(1.0, "λ: cost weight (unitless after rescaling)")
    sweep: str = opt("0,0.5,1,2,4", "sweep: the λ values")
    rescale: bool = opt(True, "HiVe-Mem cost clipping + rescaling (false: cost/1000)")
    cost_window: int = opt(20, "batches in the cost scaler's sliding window")
    iterations: int = opt(300, "PPO iterations")
    batch_size: int = opt(64, "questions per iteration (global, over all ranks)")
    epochs: int = opt(2, "PPO epochs per iteration")
    minibatches: int = opt(4, "minibatches per epoch")
    lr: float = opt(1e-3, "Adam learning rate")
    clip: float = opt(0.2, "PPO ratio clip")
    ent_coef: float = opt(0.02, "entropy bonus")
    vf_coef: float = opt(0.5, "value loss weight")
    max_grad_norm: float = opt(1.0, "gradient clipping")
    hidden: int = opt(64, "MLP width")
    embeddings: bool = opt(True, "false: the policy sees the per-memory scalars only")
    seed: int = opt(0, "seeds python, numpy, torch, the policy init and the rollout generator, before any data")
    threads: int = opt(0, "torch CPU threads (0: torch's default; torchrun sets 1 per rank via OMP_NUM_THREADS)")
    ckpt_every: int = opt(50, "iterations between checkpoints")
    resume: bool = opt(True, "resume from the run folder's checkpoint when it exists")
    log_every: int = opt(10, "iterations between one-line progress logs (0: none; metrics.csv has every one)")
    progress: bool = opt(True, "progress bar")
    weights: str = opt("", "eval mode: the selector to evaluate (empty: shipped)")
    tolerance: float = opt(0.01, "sweep: the chosen policy's dev oracle-reader may trail all-forms by this")
    toy: bool = opt(False, "train on a toy bandit with a known optimum (tests)")
    toy_questions: int = opt(256, "questions of the toy bandit")


def parse_args(argv: list[str] | None) -> Args:
    args = runkit.parse_args(Args, argv, __doc__, shipped=PPO_WEIGHTS)
    if args.smoke:  # the toy bandit, small: a few seconds end to end
        args.mode, args.toy, args.toy_questions, args.resume, args.progress = "train", True, 128, False, False
        args.iterations, args.batch_size, args.hidden = min(args.iterations, 10), 32, 16
        args.minibatches, args.eval_pools = 2, ""
    return args


# --- distributed ------------------------------------------------------------------------------------------
def all_sum(t: torch.Tensor, world: int) -> torch.Tensor:
    if world > 1:
        import torch.distributed as dist

        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t


def all_cat(t: torch.Tensor, world: int) -> torch.Tensor:
    """Rows of every rank, in rank-interleaved order (the order positions were dealt)."""
    if world == 1:
        return t
    import torch.distributed as dist

    parts = [torch.empty_like(t) for _ in range(world)]
    dist.all_gather(parts, t.contiguous())
    return torch.stack(parts, 1).reshape(-1, *t.shape[1:])


# --- pools ------------------------------------------------------------------------------------------------
def _form_costs(c, count):
    """Per form of one memory, as ``compose`` shows it: (text tokens, image tokens, images)."""
    from c3m.models.tokens import image_tokens

    itok = lambda ims: sum(image_tokens(im.width, im.height, "qwen2-vl") for im in ims)  # noqa: E731
    txt, img, n = np.zeros(5), np.zeros(5), np.zeros(5)
    live = [nd for nd in c.nodes if not nd.redacted]
    if c.summary.strip() and live:
        txt[1] = count(c.summary)
    for nd in live:
        recs = list(c.perceptions.get(nd.node_id, ()))
        if nd.text.strip():
            txt[0] += count(nd.text)
        cap = " ".join(f"[image: {r.caption}]" for r in recs if r.caption)
        if cap:
            txt[2] += count(cap)
        img[3] += itok(nd.images)
        n[3] += len(nd.images)
        for r in recs:
            if r.crop is not None:
                txt[4] += count(f"[crop: {r.crop_phrase or 'object'}]")
                img[4] += itok((r.crop,))
                n[4] += 1
    return txt, img, n


def make_record(question, q_vec, cands, node_vecs, items, gold_scenes, evidence, count, **meta) -> dict:
    """One question's pool: what ``compose`` is handed plus everything the environment needs, precomputed."""
    from c3m.eval.evidence import candidate_coverage

    class _Gold:  # candidate_coverage needs scenes by sha only
        scenes = gold_scenes

        @staticmethod
        def scenes_of(images):
            return [gold_scenes[im.sha256] for im in images if im.sha256 in gold_scenes]

    cands = sorted([c for c in cands if c.nodes], key=lambda c: -c.score)  # retrieval order (env budget)
    svec = np.stack([c.summary_vec if c.summary_vec is not None else
                     np.mean([node_vecs[n.node_id] for n in c.nodes], 0) for c in cands]).astype(np.float32) \
        if cands else np.zeros((0, len(q_vec)), np.float32)
    costs = [_form_costs(c, count) for c in cands]
    ev = sorted(set(evidence))
    return {**meta, "question": question, "q_vec": np.asarray(q_vec, np.float32), "candidates": cands,
            "node_vecs": node_vecs, "support": tuple(items), "evidence": ev, "scenes": gold_scenes,
            "svec": svec, "scalars": memory_scalars(question, q_vec, cands, svec),
            "avail": np.stack([c.available() for c in cands]) if cands else np.zeros((0, 5), bool),
            "text_tokens": np.stack([t for t, _, _ in costs]) if cands else np.zeros((0, 5)),
            "image_tokens": np.stack([i for _, i, _ in costs]) if cands else np.zeros((0, 5)),
            "images": np.stack([n for _, _, n in costs]) if cands else np.zeros((0, 5)),
            "cov": np.stack([candidate_coverage(c, items, _Gold) for c in cands]) if cands
            else np.zeros((0, 5, len(items)), bool),
            "turn": np.array([[any((n.session_id, n.turn_index) == e for n in c.nodes) for e in ev] for c in cands],
                             bool).reshape(len(cands), len(ev))}


def build_pools(args: Args) -> Path:
    """Open each committed store of ``--stores`` (a `c3m eval --methods c3m` run on ``--dataset``), ask every
    question with support items through ``C3M.retrieval_pool`` and cache what the selector is handed."""
    from tqdm import tqdm

    from c3m.config import MemoryConfig
    from c3m.dataset import load_dataset
    from c3m.eval.evidence import HiddenGold
    from c3m.eval.harness import _safe
    from c3m.eval.runtime import _models, resolve_perception
    from c3m.memory import Memory
    from c3m.store.cold import NAMESPACE_RE

    ds = Path(args.dataset)
    cfg = MemoryConfig(method="c3m", perception=resolve_perception(args.perception, ds))
    models = _models(cfg.text_embedder, cfg.token_counter, cfg.answerer, cfg.perception, cfg.image_embedder)
    count = models.token_counter.count
    gold = HiddenGold(ds)
    hidden = {(r["history"], r["id"]): r for r in map(json.loads, (ds / "_hidden" / "questions.jsonl").open())}
    histories = [h for h in load_dataset(ds) if (Path(args.stores) / _safe(h.id)).is_dir()]
    if args.done_from:  # a store still being written is not opened
        done = {json.loads(line)["history"] for line in Path(args.done_from).read_text().splitlines() if line.strip()}
        histories = [h for h in histories if h.id in done]
    if args.limit:
        histories = histories[:args.limit]
    records = []
    for h in tqdm(histories, desc=f"pools {args.name}", disable=not args.progress):
        ns = h.id if NAMESPACE_RE.match(h.id) else "h-" + _safe(h.id)[:100]
        with Memory(Path(args.stores) / _safe(h.id), ns, config=cfg, models=models) as mem:
            budget = mem.config.reader_budget
            for q in h.questions:
                items = gold.items(h.id, q.id)
                if not items:
                    continue  # nothing to check (AR about a never-mentioned subject)
                q_vec, cands = mem.method.retrieval_pool(q.question, budget)
                nodes = list(dict.fromkeys(n for c in cands for n in c.nodes))
                vecs = dict(zip([n.node_id for n in nodes], mem.method.node_vectors(nodes).astype(np.float32))) \
                    if nodes else {}
                shas = {im.sha256 for n in nodes for im in n.images}
                records.append(make_record(
                    q.question, q_vec, cands, vecs, items, {s: gold.scenes[s] for s in shas if s in gold.scenes},
                    [(e.session, e.turn) for e in q.evidence], count, history=h.id, qid=q.id, category=q.category,
                    visual_only=bool(hidden.get((h.id, q.id), {}).get("visual_only", False)),
                    budget=budget.as_tuple()))
    out = Path(args.pools) / f"{args.name}.pkl"
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"dataset": str(ds), "stores": args.stores, "perception": args.perception,
            "token_counter": cfg.token_counter,
            "token_counter_backend": models.token_counter.name, "text_embedder": getattr(models.text_embedder, "name", ""),
            "histories": len(histories), "questions": len(records), "quality": QUALITY}
    with out.open("wb") as fh:
        pickle.dump({"meta": meta, "records": records}, fh)
    print(f"wrote {out}: {len(records)} questions from {len(histories)} histories", flush=True)
    return out


def load_pool(args: Args, name: str) -> dict:
    with (Path(args.pools) / f"{name}.pkl").open("rb") as fh:
        return pickle.load(fh)


def tensorise(records: list[dict]) -> dict:
    """Pad the pools into [N, M, ...] tensors (features built once: training never rebuilds them)."""
    N = len(records)
    M = max(1, max(len(r["candidates"]) for r in records))
    K = max(1, max(r["cov"].shape[-1] for r in records))
    E = max(1, max(len(r["evidence"]) for r in records))
    D = len(records[0]["q_vec"])
    x = torch.zeros(N, M, 2 * D + len(SCALARS))
    t = {k: torch.zeros(N, M, 5) for k in ("text_tokens", "image_tokens", "images")}
    avail, mask = torch.zeros(N, M, 5, dtype=torch.bool), torch.zeros(N, M, dtype=torch.bool)
    cov, kmask = torch.zeros(N, M, 5, K, dtype=torch.bool), torch.zeros(N, K, dtype=torch.bool)
    turn, emask = torch.zeros(N, M, E, dtype=torch.bool), torch.zeros(N, E, dtype=torch.bool)
    budget = torch.zeros(N, 4)
    for i, r in enumerate(records):
        m, k, e = len(r["candidates"]), r["cov"].shape[-1], len(r["evidence"])
        if m:
            scal = memory_scalars(r["question"], r["q_vec"], r["candidates"], r["svec"])  # current SCALARS
            x[i, :m] = torch.from_numpy(np.concatenate([np.broadcast_to(r["q_vec"], (m, D)), r["svec"], scal], 1))
            for key in t:
                t[key][i, :m] = torch.from_numpy(np.asarray(r[key], np.float32))
            avail[i, :m] = torch.from_numpy(np.asarray(r["avail"], bool))
            cov[i, :m, :, :k] = torch.from_numpy(r["cov"])
            turn[i, :m, :e] = torch.from_numpy(r["turn"])
        mask[i, :m] = True
        kmask[i, :k] = True
        emask[i, :e] = True
        budget[i] = torch.tensor(r.get("budget", (3, 12, 8, 12288)), dtype=torch.float32)
    return {"x": x, "mask": mask, "avail": avail & mask[..., None], "cov": cov, "kmask": kmask, "turn": turn,
            "emask": emask, "budget": budget, **t}


def toy_pools(n: int, seed: int, m: int = 8) -> dict:
    """A toy bandit with a known optimum: each memory is irrelevant (type 0), text evidence (1: raw text
    satisfies its item) or image evidence (2: raw image and grounded crop do, the caption does not). Costs
    (tokens) per form: raw_text 50, summary 30, caption 20, raw_image 300, grounded_crop 100; each question
    has exactly two support items, so a sole cover is worth 1/2. With ``rescale=False`` and λ=1 (cost/1000)
    the optimum is: type 1 -> raw_text only, type 2 -> grounded_crop only (cheapest cover), type 0 -> none."""
    g = torch.Generator().manual_seed(seed)
    D = 8
    kind = torch.zeros(n, m, dtype=torch.long)
    for i in range(n):  # two evidence memories per question, at random slots, of random types
        slots = torch.randperm(m, generator=g)[:2]
        kind[i, slots] = torch.randint(1, 3, (2,), generator=g)
    x = torch.randn(n, m, 2 * D + len(SCALARS), generator=g) * 0.1
    x[..., 2 * D:2 * D + 3] = F.one_hot(kind, 3).float()  # the type is observable (first scalars)
    cost = torch.tensor([50.0, 30, 20, 300, 100])
    cov = torch.zeros(n, m, 5, 2, dtype=torch.bool)
    for i in range(n):
        for k, j in enumerate((kind[i] > 0).nonzero().flatten().tolist()):
            forms = (0,) if kind[i, j] == 1 else (3, 4)
            for f in forms:
                cov[i, j, f, k] = True
    txt = cost.clone()
    txt[3:] = 0
    img = cost - txt
    return {"x": x, "mask": torch.ones(n, m, dtype=torch.bool), "avail": torch.ones(n, m, 5, dtype=torch.bool),
            "cov": cov, "kmask": torch.ones(n, 2, dtype=torch.bool), "turn": cov.any(2),
            "emask": torch.ones(n, 2, dtype=torch.bool), "budget": torch.tensor([3.0, 1e9, 1e9, 1e9]).repeat(n, 1),
            "text_tokens": txt.repeat(n, m, 1), "image_tokens": img.repeat(n, m, 1), "images": torch.zeros(n, m, 5),
            "kind": kind, "optimum": torch.stack([kind == 1, torch.zeros_like(kind, dtype=torch.bool),
                                                  torch.zeros_like(kind, dtype=torch.bool),
                                                  torch.zeros_like(kind, dtype=torch.bool), kind == 2], -1)}


# --- the environment (tensor ops only) --------------------------------------------------------------------
def env_step(b: dict, a: torch.Tensor) -> dict:
    """Rewards of selections ``a`` [B, M, 5] (bool) on pools ``b``. The reader budget is approximated in
    retrieval order: a memory's raw forms need a Raw-Node slot (raw text and raw image share it), its image
    forms need image slots, its text needs text tokens; what does not fit is not shown (and costs nothing)."""
    a = a & b["avail"]
    _, raw_b, img_b, txt_b = b["budget"].unbind(-1)
    raw = (a[..., 0] | a[..., 3]).float()
    fits_raw = torch.cumsum(raw, 1) <= raw_b[:, None]
    a = a & torch.stack([fits_raw, torch.ones_like(fits_raw), torch.ones_like(fits_raw), fits_raw,
                         torch.ones_like(fits_raw)], -1)
    imgs = (a.float() * b["images"]).sum(-1)
    fits_img = (torch.cumsum(imgs, 1) <= img_b[:, None])[..., None]
    is_img = torch.tensor([False, False, False, True, True], device=a.device)
    a = a & (fits_img | ~is_img)
    txt = (a.float() * b["text_tokens"]).sum(-1)
    a = a & (torch.cumsum(txt, 1) <= txt_b[:, None])[..., None]
    cost = (a.float() * (b["text_tokens"] + b["image_tokens"])).sum(-1)             # [B, M]
    hit = (a[..., None] & b["cov"]).any(2) & b["kmask"][:, None, :]                 # [B, M, K]
    n_hit = hit.sum(1)                                                              # [B, K]
    n_items = b["kmask"].sum(1).clamp(min=1).float()
    quality = (n_hit > 0).sum(1).float() / n_items                                  # share of items satisfied
    diff = (hit & (n_hit == 1)[:, None, :]).sum(2).float() / n_items[:, None]       # difference reward
    shown = a[..., [0, 2, 3, 4]].any(-1)                                            # oracle: any non-summary form
    got = (shown[..., None] & b["turn"]).any(1) | ~b["emask"]
    return {"a": a, "cost": cost, "quality": quality, "all": (quality >= 1 - 1e-6).float(), "diff": diff,
            "oracle": got.all(1).float(), "tokens": cost.sum(1)}


class CostScaler:
    """HiVe-Mem's cost normalisation: clip at the sliding window's 5th/95th percentiles, rescale by
    std(quality reward)/std(clipped cost) over the window."""

    def __init__(self, window: int, rescale: bool = True):
        self.window, self.rescale, self.stats = window, rescale, []

    def __call__(self, cost: torch.Tensor, diff: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        if not self.rescale:
            return cost / 1000.0
        c, d = cost[valid], diff[valid]
        lo, hi = torch.quantile(c, 0.05).item(), torch.quantile(c, 0.95).item()
        cc = c.clamp(lo, hi)
        self.stats = (self.stats + [(lo, hi, cc.std().item(), d.std().item())])[-self.window:]
        lo, hi, sc, sd = (float(np.mean(v)) for v in zip(*self.stats))
        return cost.clamp(lo, hi) * (sd / max(sc, 1e-8))

    def state_dict(self):
        return {"stats": self.stats}

    def load_state_dict(self, s):
        self.stats = [tuple(x) for x in s["stats"]]


def log_probs(logits: torch.Tensor, a: torch.Tensor, avail: torch.Tensor):
    """Per memory: the log-probability of its five choices and their entropy (available forms only)."""
    lp = torch.where(a, F.logsigmoid(logits), F.logsigmoid(-logits))
    p = torch.sigmoid(logits)
    ent = -(p * F.logsigmoid(logits) + (1 - p) * F.logsigmoid(-logits))
    av = avail.float()
    return (lp * av).sum(-1), (ent * av).sum(-1)


# --- PPO --------------------------------------------------------------------------------------------------
def train(args: Args, data: dict | None = None, out: Path | None = None) -> MLPSelector:
    """PPO on ``data`` (default: the toy bandit or the train pool); ``selector.pt`` and ``summary.json`` in ``out``
    (default: the run folder ``--out``)."""
    t_start = time.time()
    # device, process group and seeds first: everything below (data, init, rollouts) is then reproducible
    ctx = runkit.setup(args.device, seed=args.seed, threads=args.threads)
    rank, world, device = ctx.rank, ctx.world, ctx.device
    out = Path(out) if out else runkit.run_dir("selector-ppo", args.out, ctx)
    if data is None:
        data = toy_pools(args.toy_questions, args.seed + 1000) if args.toy else tensorise(
            load_pool(args, args.train_pool)["records"])
    N = len(data["x"])
    D = (data["x"].shape[-1] - len(SCALARS)) // 2
    if not args.embeddings:
        data = {**data, "x": data["x"][..., 2 * D:]}
    sel = MLPSelector(D, args.hidden, seed=args.seed, name="ppo", version="v2", embeddings=args.embeddings)
    net = sel.net.to(device)
    opt = torch.optim.Adam(net.parameters(), lr=args.lr, eps=1e-5)
    scaler = CostScaler(args.cost_window, args.rescale)
    gen = torch.Generator().manual_seed(args.seed)  # identical on every rank: the global batch and its noise
    start = 0
    ckpt = out / "checkpoint.pt"
    if args.resume and ckpt.is_file():
        s = torch.load(ckpt, map_location="cpu", weights_only=False)
        net.load_state_dict(s["net"])
        opt.load_state_dict(s["opt"])
        scaler.load_state_dict(s["scaler"])
        gen.set_state(s["gen"])
        start = s["iteration"]
        if rank == 0:
            print(f"resumed from {ckpt} at iteration {start}", flush=True)
    if rank == 0:
        out.mkdir(parents=True, exist_ok=True)
    B = args.batch_size
    assert B % world == 0, "batch_size must be a multiple of the world size"
    mine = torch.arange(rank, B, world)  # positions of the global batch this rank rolls out
    log_path = out / "metrics.csv"
    cols = ["iteration", "lam", "reward", "quality", "evidence_acc", "oracle", "tokens", "entropy", "approx_kl",
            "clipfrac", "value_loss", "decisions_per_s", "seconds", "loss"]
    if rank == 0 and (start == 0 or not log_path.is_file()):
        with log_path.open("w", newline="") as fh:
            csv.writer(fh).writerow(cols)
    from tqdm import tqdm

    bar = tqdm(range(start, args.iterations), desc=f"ppo λ={args.lam:g}", disable=rank != 0 or not args.progress)
    t0 = time.time()
    row: dict = {}
    for it in bar:
        idx = torch.randint(0, N, (B,), generator=gen)
        M = int(data["mask"][idx].sum(1).max())
        noise = torch.rand(B, M, 5, generator=gen)
        b = {k: (v[idx[mine]][:, :M] if v.dim() > 1 and v.shape[1] >= M and k not in ("kmask", "emask", "budget")
                 else v[idx[mine]]).to(device) for k, v in data.items() if torch.is_tensor(v)}
        noise = noise.to(device)
        # rollout
        tr = time.perf_counter()
        with torch.no_grad():
            logits, value = net(b["x"])
            a = (noise[mine] < torch.sigmoid(logits)) & b["avail"]
            res = env_step(b, a)
            valid = b["mask"]
            g_cost, g_diff, g_valid = (all_cat(res["cost"], world), all_cat(res["diff"], world),
                                       all_cat(valid, world))
            c_scaled = scaler(g_cost, g_diff, g_valid)[mine.to(device)]  # global statistics, this rank's rows
            reward = res["diff"] - args.lam * c_scaled
            old_lp, _ = log_probs(logits, a, b["avail"])
            adv = reward - value
            vf = valid.float()
            s = all_sum(torch.stack([(adv * vf).sum(), (adv * adv * vf).sum(), vf.sum()]), world)
            mean = s[0] / s[2]
            std = (s[1] / s[2] - mean ** 2).clamp(min=1e-12).sqrt()
            adv = (adv - mean) / (std + 1e-8)
        decisions = float(s[2])
        roll_s = time.perf_counter() - tr
        # update: epochs × minibatches over the global batch; each rank holds its positions' rows
        stats = torch.zeros(5, device=device)
        loss_sum, n_mb = torch.zeros((), device=device), 0  # this rank's part of each minibatch's loss
        perm_all = [torch.randperm(B, generator=gen) for _ in range(args.epochs)]
        pos = torch.full((B,), -1, dtype=torch.long, device=device)
        pos[mine.to(device)] = torch.arange(len(mine), device=device)
        for perm in perm_all:
            for chunk in perm.chunk(args.minibatches):
                rows = pos[chunk.to(device)]
                rows = rows[rows >= 0]
                mv = vf[rows]
                n_all = all_sum(mv.sum().reshape(1).clone(), world).clamp(min=1)[0]
                lg, v = net(b["x"][rows])
                lp, ent = log_probs(lg, a[rows], b["avail"][rows])
                ratio = (lp - old_lp[rows]).exp()
                A = adv[rows]
                pg = -torch.min(ratio * A, ratio.clamp(1 - args.clip, 1 + args.clip) * A)
                v_loss = (v - reward[rows]) ** 2
                loss = ((pg + args.vf_coef * v_loss - args.ent_coef * ent) * mv).sum() / n_all
                opt.zero_grad(set_to_none=True)
                loss.backward()
                if world > 1:
                    for p in net.parameters():
                        if p.grad is not None:
                            all_sum(p.grad, world)
                torch.nn.utils.clip_grad_norm_(net.parameters(), args.max_grad_norm)
                opt.step()
                loss_sum += loss.detach()
                n_mb += 1
                with torch.no_grad():
                    kl = (ratio - 1) - (lp - old_lp[rows])
                    stats += torch.stack([(kl * mv).sum(), (((ratio - 1).abs() > args.clip).float() * mv).sum(),
                                          (v_loss * mv).sum(), (ent * mv).sum(), mv.sum()])
        stats = all_sum(stats, world)
        loss_sum = all_sum(loss_sum, world) / max(1, n_mb)
        row_stats = all_sum(torch.stack([(reward * vf).sum(), res["quality"].sum(), res["all"].sum(),
                                         res["oracle"].sum(), res["tokens"].sum(),
                                         torch.tensor(float(len(mine)), device=device)]), world)
        n_q = row_stats[5]
        row = {"iteration": it + 1, "lam": args.lam, "reward": (row_stats[0] / decisions).item(),
               "quality": (row_stats[1] / n_q).item(), "evidence_acc": (row_stats[2] / n_q).item(),
               "oracle": (row_stats[3] / n_q).item(), "tokens": (row_stats[4] / n_q).item(),
               "entropy": (stats[3] / stats[4]).item(), "approx_kl": (stats[0] / stats[4]).item(),
               "clipfrac": (stats[1] / stats[4]).item(), "value_loss": (stats[2] / stats[4]).item(),
               "decisions_per_s": decisions / max(roll_s, 1e-9), "seconds": round(time.time() - t0, 2),
               "loss": loss_sum.item()}
        if rank == 0:
            with log_path.open("a", newline="") as fh:
                csv.writer(fh).writerow([row[c] for c in cols])
            bar.set_postfix(q=f"{row['quality']:.3f}", tok=f"{row['tokens']:.0f}", ent=f"{row['entropy']:.2f}")
            if args.log_every and ((it + 1) % args.log_every == 0 or it + 1 == args.iterations):
                bar.write(f"iteration {it + 1}/{args.iterations}: quality {row['quality']:.3f}, tokens "
                          f"{row['tokens']:.0f}, reward {row['reward']:.4f}, entropy {row['entropy']:.3f}, "
                          f"kl {row['approx_kl']:.4f}, {row['seconds']:.0f} s")
            if (it + 1) % args.ckpt_every == 0 or it + 1 == args.iterations:
                torch.save({"net": net.state_dict(), "opt": opt.state_dict(), "scaler": scaler.state_dict(),
                            "gen": gen.get_state(), "iteration": it + 1, "args": asdict(args)}, ckpt)
    sel.net = net.cpu()
    ranks = runkit.gather(ctx, {"rank": rank, "device": str(device), "pid": os.getpid(),
                                "questions": len(mine) * (args.iterations - start)})
    if rank == 0:
        sel.net.eval()
        sel.save(out / "selector.pt", meta={"lam": args.lam, "iterations": args.iterations, "quality": QUALITY,
                                            "train_pool": args.train_pool, "args": json.dumps(asdict(args))})
        runkit.write_summary(out, ctx, ranks, trainer="selector-ppo", toy=args.toy, smoke=args.smoke, seed=args.seed,
                             lam=args.lam, seconds=round(time.time() - t_start, 2), iterations=args.iterations,
                             final_loss=row.get("loss"), final_quality=row.get("quality"),
                             final_reward=row.get("reward"), weights=str(out / "selector.pt"))
        print(f"wrote {out / 'selector.pt'} and {out / 'summary.json'}", flush=True)
    sel.net.eval()
    return sel


# --- evaluation with the real compose ---------------------------------------------------------------------
class AllForms:
    """Every form every memory has (the budget solver still decides what fits): the reference policy."""

    name = "all-forms"

    def probabilities(self, question, q_vec, candidates):
        from c3m.read.compose import candidates_available

        return candidates_available(candidates)


def evaluate(records: list[dict], selector, count) -> dict:
    """Compose each question's context with ``selector`` under its reader budget (``budget_solve``) and
    score it: evidence check (``QUALITY``), the harness's oracle reader (every gold turn shown in a
    non-summary form), context tokens (text + unique images' qwen2-vl tokens), form-selection rates."""
    from c3m.eval.evidence import EvidenceResult, check_context  # noqa: F401
    from c3m.models.tokens import image_tokens
    from c3m.read.compose import ComposeConfig, compose
    from c3m.types import EvidenceForm, ReaderBudget, RouteTrace

    class _Gold:
        def __init__(self, scenes):
            self.scenes = scenes

        def scenes_of(self, images):
            return [self.scenes[im.sha256] for im in images if im.sha256 in self.scenes]

    rows = []
    for r in records:
        cands = r["candidates"]
        vec = lambda nodes, r=r: np.stack([r["node_vecs"][n.node_id] for n in nodes])  # noqa: E731
        ctx = compose(r["question"], r["q_vec"], cands, ReaderBudget(*r["budget"]), ComposeConfig(),
                      selector=selector, vectors=vec, count=count, trace=RouteTrace("c3m"))
        crops = {rec.crop.sha256: (rec.image.sha256, rec.crop_box) for c in cands for n in c.nodes
                 for rec in c.perceptions.get(n.node_id, ()) if rec.crop is not None}
        ev = check_context(ctx, r["support"], _Gold(r["scenes"]), crops)
        got = {(i.provenance.session_id, i.provenance.turn_index) for i in ctx.items if i.form is not EvidenceForm.SUMMARY}
        images = {im.sha256: im for i in ctx.items for im in i.images}
        text = sum(count(i.text) for i in ctx.items if i.text)
        itok = sum(image_tokens(im.width, im.height, "qwen2-vl") for im in images.values())
        chosen = np.zeros((len(cands), 5), bool)
        where = {n.node_id: m for m, c in enumerate(cands) for n in c.nodes}
        for i in ctx.items:
            chosen[where[i.node_id], FORMS.index(i.form)] = True
        avail = r["avail"].astype(bool)
        rows.append({"history": r["history"], "qid": r["qid"], "category": r["category"],
                     "visual_only": r["visual_only"], "evidence_share": ev.share, "evidence_acc": ev.all,
                     "oracle_reader_acc": float(set(map(tuple, r["evidence"])) <= got), "text_tokens": text,
                     "image_tokens": itok, "context_tokens": text + itok,
                     "chosen": chosen.sum(0).tolist(), "available": avail.sum(0).tolist()})
    return summarise(rows)


def summarise(rows: list[dict]) -> dict:
    from c3m.eval.metrics import RETRIEVAL_CATEGORIES

    def mean(rs, k):
        return float(np.mean([x[k] for x in rs])) if rs else float("nan")

    groups = {"overall": [x for x in rows if x["category"] in RETRIEVAL_CATEGORIES], "all": rows}
    for cat in sorted({x["category"] for x in rows}):
        groups[cat] = [x for x in rows if x["category"] == cat]
    groups["visual_only"] = [x for x in rows if x["visual_only"]]
    groups["text"] = [x for x in rows if not x["visual_only"]]
    out = {"quality_signal": QUALITY, "questions": len(rows), "groups": {}, "rows": rows}
    for g, rs in groups.items():
        if not rs:
            continue
        ch, av = np.sum([x["chosen"] for x in rs], 0), np.sum([x["available"] for x in rs], 0)
        out["groups"][g] = {"n": len(rs), **{k: mean(rs, k) for k in ("evidence_acc", "evidence_share",
                                                                     "oracle_reader_acc", "context_tokens",
                                                                     "text_tokens", "image_tokens")},
                            "form_rate": {f: float(c / a) if a else None for f, c, a in zip(FORM_NAMES, ch, av)}}
    return out


def token_counter(pool: dict):
    from c3m.models import make_token_counter

    return make_token_counter(pool["meta"].get("token_counter", "auto")).count


def eval_all(args: Args, selector, names: list[str], tag: str) -> dict:
    from c3m.read.compose import RuleSelector

    out = {}
    for name in names:
        pool = load_pool(args, name)
        count = token_counter(pool)
        res = {}
        for label, sel in (("ppo" if tag == "ppo" else tag, selector), ("rule-v1", RuleSelector()),
                           ("all-forms", AllForms())):
            res[label] = evaluate(pool["records"], sel, count)
        out[name] = {"meta": pool["meta"], "policies": res}
    return out


def table(result: dict) -> str:
    lines = [f"quality signal: {QUALITY}", "",
             "| pool | policy | evidence-check acc | evidence share | oracle-reader acc | context tokens | "
             "text | image | questions |", "|---|---|---|---|---|---|---|---|---|"]
    for pool, r in result.items():
        for label, res in r["policies"].items():
            g = res["groups"]["overall"]
            lines.append(f"| {pool} | {label} | {g['evidence_acc']:.3f} | {g['evidence_share']:.3f} | "
                         f"{g['oracle_reader_acc']:.3f} | {g['context_tokens']:.0f} | {g['text_tokens']:.0f} | "
                         f"{g['image_tokens']:.0f} | {g['n']} |")
    return "\n".join(lines)


def paired(a: dict, b: dict, metric: str) -> dict:
    """Mean of A − B per question with a 95% cluster bootstrap over histories (``paired_difference``'s rule)."""
    from c3m.eval.metrics import RETRIEVAL_CATEGORIES, bootstrap_ci

    bb = {(x["history"], x["qid"]): x for x in b["rows"]}
    clusters: dict[str, list[float]] = {}
    for x in a["rows"]:
        y = bb.get((x["history"], x["qid"]))
        if y is not None and x["category"] in RETRIEVAL_CATEGORIES:
            clusters.setdefault(x["history"], []).append(x[metric] - y[metric])
    mean, lo, hi = bootstrap_ci(list(clusters.values()), n_boot=2000)
    return {"mean": mean, "lo": lo, "hi": hi, "n": sum(map(len, clusters.values())), "histories": len(clusters)}


def sweep(args: Args) -> dict:
    """Train one policy per λ on the train pool, evaluate each on the dev pool with the real compose, choose
    the λ with the fewest dev context tokens whose dev oracle-reader accuracy is within ``tolerance`` of the
    all-forms policy's; plots quality vs total tokens."""
    from dataclasses import replace

    from c3m.read.compose import RuleSelector

    ctx = runkit.setup(args.device, seed=args.seed, threads=args.threads)
    out = runkit.run_dir("selector-ppo-sweep", args.out, ctx)
    data = tensorise(load_pool(args, args.train_pool)["records"])
    dev = load_pool(args, args.dev_pool)
    count = token_counter(dev)
    refs = {"rule-v1": evaluate(dev["records"], RuleSelector(), count),
            "all-forms": evaluate(dev["records"], AllForms(), count)}
    points = []
    for lam in [float(x) for x in args.sweep.split(",") if x.strip()]:
        sel = train(replace(args, lam=lam), data, out / f"lam-{lam:g}")
        if not ctx.main:
            continue  # rank 0 evaluates and writes
        res = evaluate(dev["records"], sel, count)
        (out / f"lam-{lam:g}" / "dev.json").write_text(json.dumps({k: v for k, v in res.items() if k != "rows"},
                                                                  indent=1))
        g = res["groups"]["overall"]
        points.append({"lam": lam, **{k: g[k] for k in ("evidence_acc", "evidence_share", "oracle_reader_acc",
                                                           "context_tokens")}, "groups": res["groups"]})
        print(f"λ={lam:g}: dev oracle {g['oracle_reader_acc']:.3f} evidence {g['evidence_acc']:.3f} "
              f"tokens {g['context_tokens']:.0f}", flush=True)
    if not ctx.main:
        runkit.finish(ctx)
        return {}
    ref = refs["all-forms"]["groups"]["overall"]
    ok = [p for p in points if p["oracle_reader_acc"] >= ref["oracle_reader_acc"] - args.tolerance]
    chosen = min(ok, key=lambda p: p["context_tokens"]) if ok else max(points, key=lambda p: p["oracle_reader_acc"])
    summary = {"quality_signal": QUALITY, "chosen_lam": chosen["lam"], "within_tolerance": bool(ok),
               "tolerance": args.tolerance, "points": [{k: v for k, v in p.items() if k != "groups"} for p in points],
               "refs": {k: {m: v["groups"]["overall"][m] for m in ("evidence_acc", "evidence_share",
                                                                   "oracle_reader_acc", "context_tokens")}
                        for k, v in refs.items()},
               "form_rates": {str(p["lam"]): {g: p["groups"][g]["form_rate"] for g in p["groups"]} for p in points},
               "ref_form_rates": {k: {g: v["groups"][g]["form_rate"] for g in v["groups"]} for k, v in refs.items()}}
    (out / "sweep.json").write_text(json.dumps(summary, indent=1))
    with (out / "sweep.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["policy", "lam", "evidence_acc", "evidence_share", "oracle_reader_acc", "context_tokens"])
        for p in points:
            w.writerow(["ppo", p["lam"], p["evidence_acc"], p["evidence_share"], p["oracle_reader_acc"],
                        p["context_tokens"]])
        for k, v in summary["refs"].items():
            w.writerow([k, "", v["evidence_acc"], v["evidence_share"], v["oracle_reader_acc"], v["context_tokens"]])
    plot_sweep(summary, out / "lambda_sweep.png")
    if args.ship:
        runkit.ship(out / f"lam-{chosen['lam']:g}" / "selector.pt", PPO_WEIGHTS)
    runkit.finish(ctx)
    return summary


def plot_sweep(summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    pts = sorted(summary["points"], key=lambda p: p["context_tokens"])
    for key, style, label in (("oracle_reader_acc", "o-", "oracle-reader acc"),
                              ("evidence_acc", "s--", f"evidence-check acc ({QUALITY})")):
        ax.plot([p["context_tokens"] for p in pts], [p[key] for p in pts], style, label=f"PPO, {label}")
        for p in pts:
            if key == "oracle_reader_acc":
                ax.annotate(f"λ={p['lam']:g}", (p["context_tokens"], p[key]), fontsize=7)
    for name, mark in (("rule-v1", "^"), ("all-forms", "*")):
        r = summary["refs"][name]
        ax.scatter([r["context_tokens"]], [r["oracle_reader_acc"]], marker=mark, s=80, label=f"{name} (oracle)")
        ax.scatter([r["context_tokens"]], [r["evidence_acc"]], marker=mark, s=80, facecolors="none",
                   edgecolors="k", label=f"{name} (evidence)")
    ref = summary["refs"]["all-forms"]
    ax.axvline(0.6 * ref["context_tokens"], color="grey", ls=":", lw=1)  # the target: >= 40% fewer tokens ...
    ax.axhline(ref["oracle_reader_acc"] - 0.01, color="grey", ls=":", lw=1)  # ... within 1 point of all-forms
    ax.set_xlabel("context tokens per question (text + image, qwen2-vl)")
    ax.set_ylabel("accuracy (IE/MSR/TR/KU)")
    ax.set_title("λ sweep on dev; dotted: 60% of all-forms tokens, all-forms oracle − 1 pt", fontsize=8)
    ax.legend(fontsize=6, loc="lower right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_curve(csv_path: Path, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = list(csv.DictReader(csv_path.open()))
    it = [int(r["iteration"]) for r in rows]
    fig, ax = plt.subplots(1, 2, figsize=(9, 3.5))
    for k in ("quality", "evidence_acc", "oracle", "reward"):
        ax[0].plot(it, [float(r[k]) for r in rows], label=k)
    ax[0].set_xlabel("iteration")
    ax[0].set_title(f"train rollouts ({QUALITY})", fontsize=9)
    ax[0].legend(fontsize=7)
    ax[1].plot(it, [float(r["tokens"]) for r in rows])
    ax[1].set_xlabel("iteration")
    ax[1].set_title("context tokens per question (env)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.mode == "build-pools":
        return build_pools(args)
    if args.mode == "train":
        ctx = runkit.setup(args.device, seed=args.seed, threads=args.threads)
        out = runkit.run_dir("selector-ppo", args.out, ctx)
        args.out = str(out)
        sel = train(args)
        if ctx.main and not args.toy and args.eval_pools:
            result = eval_all(args, sel, args.eval_pools.split(","), "ppo")
            (out / "eval.json").write_text(json.dumps(strip_rows(result), indent=1))
            print(table(result), flush=True)
        if ctx.main and (out / "metrics.csv").is_file():
            try:
                plot_curve(out / "metrics.csv", out / "learning_curve.png")
            except ImportError:  # the CSV is the record; the PNG needs matplotlib (pip install -e ".[train]")
                print("learning_curve.png skipped: pip install matplotlib to draw it", flush=True)
        if ctx.main and args.ship:
            runkit.ship(out / "selector.pt", PPO_WEIGHTS)
        runkit.finish(ctx)
        return sel
    if args.mode == "sweep":
        return sweep(args)
    if args.mode == "eval":
        out = runkit.run_dir("selector-ppo-eval", args.out)
        sel = MLPSelector.load(args.weights or PPO_WEIGHTS, name="ppo")
        result = eval_all(args, sel, args.eval_pools.split(","), "ppo")
        (out / "eval.json").write_text(json.dumps(strip_rows(result), indent=1))
        (out / "eval_rows.json").write_text(json.dumps(
            {p: {k: v["rows"] for k, v in r["policies"].items()} for p, r in result.items()}))
        paired_out = {p: {f"ppo vs {ref}": {m: paired(r["policies"]["ppo"], r["policies"][ref], m)
                                            for m in ("oracle_reader_acc", "evidence_acc", "context_tokens")}
                          for ref in ("rule-v1", "all-forms")} for p, r in result.items()}
        (out / "paired.json").write_text(json.dumps(paired_out, indent=1))
        print(table(result), flush=True)
        print(json.dumps(paired_out, indent=1), flush=True)
        return result
    raise SystemExit(f"unknown mode {args.mode!r} (build-pools, train, sweep, eval)")


def strip_rows(result: dict) -> dict:
    return {p: {"meta": r["meta"], "policies": {k: {kk: vv for kk, vv in v.items() if kk != "rows"}
                                               for k, v in r["policies"].items()}} for p, r in result.items()}


if __name__ == "__main__":
    main()
