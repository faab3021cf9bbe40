"""Train c3m's small synthetic-domain image–text encoder (``c3m.models.scene_encoder``).

One readable file (cleanrl / nanoGPT style): a dataclass of arguments, a data step, a loss, a loop.

Data: ``c3m.eval.synth.generate_dataset(split="train")`` histories; every rendered scene comes with its
hidden scene graph, from which we take (a) the oracle's deterministic description of the whole scene
(``caption_scene``), (b) one noun phrase per object (what the oracle says about it) and its box, and (c)
per-object attribute values. Only the TRAIN split's vocabulary is ever seen; measure on the test split
(``benchmarks/image_encoder.py``).

Text side: the frozen all-MiniLM-L6-v2 (no learned text projection, so the image vectors live in MiniLM's
own space). All texts are embedded once and cached next to the data.

Losses (all against frozen text vectors, temperatures learned):
- global: symmetric InfoNCE between the image vector and its scene description (identical descriptions in a
  batch are all positives);
- patch attributes: per patch, cross-entropy over the prompt vectors of each attribute type ("a {role}",
  "a {kind}", "{colour} colour", "{shape} shape", "made of {material}", "{count} items") for the object
  that covers the patch; the room ("the {room}") from the global vector;
- grounding: within an image, each object phrase -> softmax over patches (its patches are the positives)
  and each patch -> softmax over the image's phrases.

Outputs: the run folder ``--out`` (default ``runs/image-encoder-<time>/``) gets ``scene_encoder.pt`` and
``summary.json`` (seconds, device, world size, final loss); ``--ship`` also copies the weights over the shipped
``c3m/models/weights/scene_encoder.pt``. ``--device`` auto | cpu | cuda | cuda:N; under torchrun / accelerate each
rank takes ``--batch-size`` images per step (DDP averages the gradients: the global batch is N × that), with gloo on
CPU and nccl on CUDA (``training/runkit.py``). ``--smoke``: 24 images, a tiny net, 2 steps (tests, GPU script).

    python training/train_image_encoder.py                       # ~10 min on 2 CPU threads
    python training/train_image_encoder.py --smoke --device cpu --out /tmp/ie-smoke
    torchrun --nproc_per_node 2 training/train_image_encoder.py  # DDP (gloo on CPU, nccl on CUDA)
"""
from __future__ import annotations

import hashlib
import json
import math
import os
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

from c3m.eval.synth.vocab import number_word  # noqa: E402
from c3m.models import scene_encoder as se  # noqa: E402


@dataclass
class Args:
    out: str = opt("", "run folder: scene_encoder.pt and summary.json (empty: runs/image-encoder-<time>/)")
    ship: bool = opt(False, "also copy the weights over the shipped ones")
    device: str = opt("auto", runkit.DEVICE_HELP)
    smoke: bool = opt(False, "24 images, a tiny net, 2 steps: seconds (tests, GPU script)")
    data_dir: str = opt("/tmp/c3m-scene-encoder-data", "generated train scenes + text-embedding cache")
    episodes: int = opt(240, "synthetic histories (about 25 images each at 4k)")
    length: str = opt("4k", "history length of the generated data")
    data_seed: int = opt(0, "seed of the generated data")
    seed: int = opt(0, "seeds python, numpy, torch (init, batch order), before any data is built")
    epochs: int = opt(6, "passes over the images")
    max_steps: int = opt(0, ">0 stops after this many steps")
    max_images: int = opt(0, ">0 uses only the first N images")
    batch_size: int = opt(64, "images per step and rank")
    lr: float = opt(2e-3, "peak learning rate (warm-up, then cosine)")
    weight_decay: float = opt(0.05, "AdamW weight decay (matrices only)")
    warmup_steps: int = opt(50, "linear warm-up steps")
    width: int = opt(128, "transformer width")
    layers: int = opt(2, "transformer layers")
    threads: int = opt(0, "torch CPU threads (0: torch's default; torchrun sets 1 per rank via OMP_NUM_THREADS)")
    log_every: int = opt(20, "steps between log lines")
    w_global: float = opt(1.0, "weight of the global InfoNCE loss")
    w_attr: float = opt(1.0, "weight of the patch attribute loss")
    w_ground: float = opt(1.0, "weight of the grounding loss")


ATTRS = ("role", "kind", "colour", "shape", "material", "count")
K = 4  # objects per scene at most


def parse_args(argv: list[str] | None) -> Args:
    args = runkit.parse_args(Args, argv, __doc__, shipped=se.WEIGHTS)
    if args.smoke:
        args.episodes, args.max_images, args.batch_size, args.max_steps = 1, 24, 8, 2
        args.width, args.layers, args.log_every = 32, 1, 1
    return args


# --- data -------------------------------------------------------------------------------------------------
def make_data(args: Args) -> dict:
    from c3m.eval.synth import generate_dataset, load_hidden
    from c3m.models.oracle import _phrase, caption_scene

    root = Path(args.data_dir) / f"train-{args.length}-{args.episodes}-s{args.data_seed}"
    if not (root / "manifest.json").is_file():
        generate_dataset(root, length=args.length, episodes=args.episodes, seed=args.data_seed, split="train",
                         workers=1, progress=False)
    scenes = load_hidden(root)["scenes"]
    if args.max_images:
        scenes = scenes[:args.max_images]
    vocab = se.attribute_vocabulary("train")
    kinds = tuple(dict.fromkeys(k for key, vals in vocab.items() if key.startswith("kind:") for k in vals))
    values = {"role": se.ROLES, "kind": kinds, "colour": vocab["colour"], "shape": vocab["shape"],
              "material": vocab["material"], "count": se.COUNTS}
    cols, rows = se.GRID
    n = len(scenes)
    images = np.zeros((n, 3, se.INPUT[1], se.INPUT[0]), np.uint8)
    targets = {a: np.full((n, rows * cols), -100, np.int64) for a in ATTRS}
    owner = np.full((n, rows * cols), -1, np.int64)
    room = np.full(n, -100, np.int64)
    texts: dict[str, int] = {}
    caption_id = np.zeros(n, np.int64)
    phrase_id = np.full((n, K), -1, np.int64)

    def tid(text: str) -> int:
        return texts.setdefault(text, len(texts))

    for i, scene in enumerate(scenes):
        images[i] = se.preprocess((root / scene["image"]).read_bytes())
        caption_id[i] = tid(caption_scene(scene))
        objs = scene["objects"][:K]
        for k, o in enumerate(objs):
            phrase_id[i, k] = tid(_phrase(o))
            if "room" in o["attributes"]:
                room[i] = se._vocab_shared()["rooms"].index(o["attributes"]["room"])
        areas = [(o["bbox"][2] - o["bbox"][0]) * (o["bbox"][3] - o["bbox"][1]) for o in objs]
        for r in range(rows):
            for c in range(cols):
                x, y = (c + 0.5) * se.SOURCE[0] / cols, (r + 0.5) * se.SOURCE[1] / rows
                inside = [k for k, o in enumerate(objs)
                          if o["bbox"][0] <= x < o["bbox"][2] and o["bbox"][1] <= y < o["bbox"][3]]
                j = r * cols + c
                if not inside:
                    targets["role"][i, j] = 0  # background
                    continue
                k = min(inside, key=lambda q: areas[q])
                o, a = objs[k], objs[k]["attributes"]
                owner[i, j] = k
                role = se.role_of(o)
                targets["role"][i, j] = se.ROLES.index(role)
                if f"kind:{role}" in vocab:
                    targets["kind"][i, j] = kinds.index(se.kind_of(o))
                for attr in ("colour", "shape", "material"):
                    if attr in a and a[attr] in values[attr]:
                        targets[attr][i, j] = values[attr].index(a[attr])
                if "count" in a:
                    targets["count"][i, j] = se.COUNTS.index(number_word(a["count"]))
    prompts = {a: [se.prompt(a, v) for v in values[a]] for a in ATTRS}
    prompts["room"] = [se.prompt("room", v) for v in se._vocab_shared()["rooms"]]
    all_texts = list(texts) + [t for a in prompts for t in prompts[a]]
    emb = embed_cached(all_texts, Path(args.data_dir))
    offset = len(texts)
    prompt_emb = {}
    for a in prompts:
        prompt_emb[a] = emb[offset:offset + len(prompts[a])]
        offset += len(prompts[a])
    return {"images": torch.from_numpy(images), "targets": {a: torch.from_numpy(t) for a, t in targets.items()},
            "owner": torch.from_numpy(owner), "room": torch.from_numpy(room),
            "caption_id": torch.from_numpy(caption_id), "phrase_id": torch.from_numpy(phrase_id),
            "text_emb": torch.from_numpy(emb[:len(texts)]),
            "prompt_emb": {a: torch.from_numpy(e) for a, e in prompt_emb.items()},
            "n_texts": len(texts), "root": str(root)}


def embed_cached(texts: list[str], folder: Path) -> np.ndarray:
    key = hashlib.sha256("\n".join(texts).encode()).hexdigest()[:16]
    path = folder / f"minilm-{key}.npy"
    if path.is_file():
        return np.load(path)
    from c3m.models.minilm import MiniLMEmbedder
    emb = MiniLMEmbedder(batch_size=128).embed(texts)
    folder.mkdir(parents=True, exist_ok=True)
    np.save(path, emb)
    return emb


# --- loss -------------------------------------------------------------------------------------------------
def loss_fn(model, batch: dict, data: dict, args: Args) -> tuple[torch.Tensor, dict]:
    g, p = model(batch["images"])  # [B, D], [B, P, D]
    net = model.module if hasattr(model, "module") else model
    s_g, s_p = net.logit_scale.exp().clamp(max=100), net.patch_scale.exp().clamp(max=100)
    logs = {}
    # global InfoNCE; equal captions are all positives
    cap = data["text_emb"][batch["caption_id"]]
    same = (batch["caption_id"][:, None] == batch["caption_id"][None, :]).float()
    logits = s_g * g @ cap.T
    l_global = 0.5 * (torch.sum(-same / same.sum(1, keepdim=True) * logits.log_softmax(1), 1).mean()
                      + torch.sum(-same / same.sum(0, keepdim=True) * logits.log_softmax(0), 0).mean())
    logs["global"] = l_global.item()
    # patch attributes + room
    l_attr = 0.0
    for a in ATTRS:
        t = batch["targets"][a].reshape(-1)
        if (t >= 0).any():
            la = F.cross_entropy((s_p * p @ data["prompt_emb"][a].T).reshape(-1, len(data["prompt_emb"][a])), t,
                                 ignore_index=-100)
            logs[a] = la.item()
            l_attr = l_attr + la
    if (batch["room"] >= 0).any():
        lr_ = F.cross_entropy(s_p * g @ data["prompt_emb"]["room"].T, batch["room"], ignore_index=-100)
        logs["room"] = lr_.item()
        l_attr = l_attr + lr_
    # grounding: phrases <-> patches within each image
    pid = batch["phrase_id"]                              # [B, K]
    valid = pid >= 0
    phr = data["text_emb"][pid.clamp(min=0)]              # [B, K, D]
    sims = s_p * torch.einsum("bpd,bkd->bpk", p, phr)     # [B, P, K]
    owner = batch["owner"]                                # [B, P]
    pos = (owner[:, :, None] == torch.arange(K, device=owner.device)[None, None, :]) & valid[:, None, :]
    has = pos.any(1) & valid                              # phrases with at least one patch
    lp = sims.log_softmax(1)                              # phrase -> patches
    l_p2 = -(lp * pos).sum(1)[has] / pos.sum(1)[has]
    lk = sims.masked_fill(~valid[:, None, :], -1e4).log_softmax(2)  # patch -> phrases
    owned = owner >= 0
    l_k = -lk.gather(2, owner.clamp(min=0)[:, :, None])[..., 0][owned]
    l_ground = l_p2.mean() + l_k.mean()
    logs["ground"] = l_ground.item()
    loss = args.w_global * l_global + args.w_attr * l_attr + args.w_ground * l_ground
    return loss, logs


# --- loop -------------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> Path:
    """Train; returns the weights file written in the run folder."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    t0 = time.time()
    # device, process group and seeds first: data, init and batch order are then reproducible
    ctx = runkit.setup(args.device, seed=args.seed, threads=args.threads)
    rank, world, dev = ctx.rank, ctx.world, ctx.device
    run = runkit.run_dir("image-encoder", args.out, ctx)
    if rank > 0:
        runkit.barrier(ctx)  # rank 0 generates the scenes and the text cache first
    data = make_data(args)
    if rank == 0:
        runkit.barrier(ctx)
    n = len(data["images"])
    if rank == 0:
        print(f"data: {n} images, {data['n_texts']} texts from {data['root']} ({time.time() - t0:.0f}s)", flush=True)
    for key in ("text_emb", "owner", "room", "caption_id", "phrase_id"):
        data[key] = data[key].to(dev)
    data["prompt_emb"] = {a: e.to(dev) for a, e in data["prompt_emb"].items()}
    data["targets"] = {a: t.to(dev) for a, t in data["targets"].items()}
    net = se.SceneNet(width=args.width, layers=args.layers).to(dev)
    if rank == 0:
        print(f"model: {sum(p.numel() for p in net.parameters()) / 1e6:.2f}M parameters on {dev}", flush=True)
    model = runkit.ddp(net, ctx)
    decay = [p for name, p in model.named_parameters() if p.ndim >= 2 and "pos" not in name]
    rest = [p for name, p in model.named_parameters() if not (p.ndim >= 2 and "pos" not in name)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay}, {"params": rest, "weight_decay": 0}],
                            lr=args.lr)
    steps_per_epoch = max(1, n // (args.batch_size * world))
    total = steps_per_epoch * args.epochs
    if args.max_steps:
        total = min(total, args.max_steps)
    gen = torch.Generator().manual_seed(args.seed)  # the same order on every rank; each takes its slice
    step, t1, seen, loss = 0, time.time(), 0, None
    model.train()
    while step < total:
        order = torch.randperm(n, generator=gen)[rank::world]
        for b in range(steps_per_epoch):
            if step >= total:
                break
            idx = order[b * args.batch_size:(b + 1) * args.batch_size]
            if len(idx) == 0:
                break
            lr = args.lr * min(1.0, (step + 1) / args.warmup_steps) * 0.5 * (1 + math.cos(math.pi * step / total))
            for group in opt.param_groups:
                group["lr"] = lr
            i = idx.to(dev)
            batch = {"images": data["images"][idx].to(dev),
                     "targets": {a: t[i] for a, t in data["targets"].items()},
                     "owner": data["owner"][i], "room": data["room"][i], "caption_id": data["caption_id"][i],
                     "phrase_id": data["phrase_id"][i]}
            loss, logs = loss_fn(model, batch, data, args)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            step += 1
            seen += len(idx)
            if rank == 0 and (step % args.log_every == 0 or step == total):
                detail = " ".join(f"{k}={v:.3f}" for k, v in logs.items())
                print(f"step {step}/{total} loss={loss.item():.3f} {detail} lr={lr:.2e} "
                      f"({time.time() - t1:.0f}s)", flush=True)
    final = runkit.all_sum(ctx, loss.item() if loss is not None else 0.0) / world
    ranks = runkit.gather(ctx, {"rank": rank, "device": str(dev), "pid": os.getpid(), "images": seen})
    out = run / se.WEIGHTS.name
    if rank == 0:
        meta = {"args": json.dumps(asdict(args)), "train_images": n, "steps": step,
                "train_seconds": round(time.time() - t0, 1), "data": "c3m synth split=train "
                f"length={args.length} episodes={args.episodes} seed={args.data_seed}", "torch": str(torch.__version__)}
        se.save_weights(net.cpu().eval(), out, meta)
        print(f"wrote {out} ({out.stat().st_size / 1e6:.2f} MB) in {time.time() - t0:.0f}s", flush=True)
        shipped = str(runkit.ship(out, se.WEIGHTS)) if args.ship else None
        runkit.write_summary(run, ctx, ranks, trainer="image-encoder", smoke=args.smoke, seed=args.seed,
                             seconds=round(time.time() - t0, 2), steps=step, final_loss=final, weights=str(out),
                             shipped=shipped)
    runkit.finish(ctx)
    return out


if __name__ == "__main__":
    main()
