"""Throughput of the PPO selector's rollouts: selector decisions per second (one decision = one retrieved
memory's five form choices), the vectorised environment + policy of ``training/train_selector_ppo.py`` vs a
per-item Python loop computing the same thing (same network, same rewards), in the same run.

The loop reference: per question, per memory, a forward pass of the policy on that memory's features, five
Bernoulli draws, then the reward with Python loops over memories, forms and support items (what an
environment written one item at a time does). Both see the same pools; the vectorised rewards are checked
against the loop's on a shared sample (same actions) before timing.

    python benchmarks/selector_ppo.py --pool /tmp/c3m-selector-pools/train.pkl --threads 2
"""
from __future__ import annotations

import argparse
import json
import pickle
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "training"))
sys.path.insert(0, str(ROOT))

import train_selector_ppo as ppo  # noqa: E402
from c3m.read.compose import MLPSelector, SCALARS  # noqa: E402


def loop_rewards(b: dict, a: torch.Tensor, i: int) -> tuple[list[float], float]:
    """Question i's difference rewards and quality, one item at a time (no reader-budget truncation: the
    sample used for the check has budgets that do not bind)."""
    M = int(b["mask"][i].sum())
    K = int(b["kmask"][i].sum())
    hits = [[any(bool(a[i, m, f]) and bool(b["avail"][i, m, f]) and bool(b["cov"][i, m, f, k]) for f in range(5))
             for k in range(K)] for m in range(M)]
    n_hit = [sum(hits[m][k] for m in range(M)) for k in range(K)]
    diff = [sum(1 for k in range(K) if hits[m][k] and n_hit[k] == 1) / max(1, K) for m in range(M)]
    return diff, sum(1 for k in range(K) if n_hit[k] > 0) / max(1, K)


def vectorised(net, b, noise):
    with torch.no_grad():
        logits, value = net(b["x"])
        a = (noise < torch.sigmoid(logits)) & b["avail"]
        res = ppo.env_step(b, a)
    return res


def looped(net, b, noise):
    out = []
    with torch.no_grad():
        for i in range(len(b["x"])):
            M = int(b["mask"][i].sum())
            acts = torch.zeros(M, 5, dtype=torch.bool)
            for m in range(M):
                logit, _ = net(b["x"][i, m][None])
                acts[m] = (noise[i, m] < torch.sigmoid(logit[0])) & b["avail"][i, m]
            full = torch.zeros_like(b["avail"][i:i + 1])
            full[0, :M] = acts
            out.append(loop_rewards({k: v[i:i + 1] for k, v in b.items()}, full, 0))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pool", default="/tmp/c3m-selector-pools/train.pkl")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--loop_questions", type=int, default=16)
    ap.add_argument("--embeddings", action="store_true", help="the [q; summary] policy (default: scalars only, "
                    "as shipped)")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if Path(args.pool).is_file():
        with open(args.pool, "rb") as fh:
            data = ppo.tensorise(pickle.load(fh)["records"])
        source = args.pool
    else:
        data, source = ppo.toy_pools(1024, 0, m=48), "toy pools (48 memories)"
    D = (data["x"].shape[-1] - len(SCALARS)) // 2
    if not args.embeddings:
        data = {**data, "x": data["x"][..., 2 * D:]}
    net = MLPSelector(D, args.hidden, seed=0, version="v2", embeddings=args.embeddings).net.eval()
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, len(data["x"]), (args.batch,), generator=g)
    b = {k: v[idx] for k, v in data.items() if torch.is_tensor(v)}
    noise = torch.rand(*b["avail"].shape, generator=g)
    decisions = int(b["mask"].sum())
    # correctness: the vectorised env agrees with the loop where no budget binds
    nb = dict(b, budget=torch.full_like(b["budget"], 1e9))
    res = vectorised(net, nb, noise)
    ref = looped(net, {k: v[:args.loop_questions] for k, v in nb.items()}, noise[:args.loop_questions])
    for i, (diff, q) in enumerate(ref):
        M = len(diff)
        assert np.allclose(res["diff"][i, :M].numpy(), diff, atol=1e-6) and abs(res["quality"][i].item() - q) < 1e-6
    vectorised(net, b, noise)  # warm-up
    t = time.perf_counter()
    for _ in range(args.repeats):
        vectorised(net, b, noise)
    vec_s = (time.perf_counter() - t) / args.repeats
    sub = {k: v[:args.loop_questions] for k, v in b.items()}
    loop_decisions = int(sub["mask"].sum())
    t = time.perf_counter()
    looped(net, sub, noise[:args.loop_questions])
    loop_s = time.perf_counter() - t
    vec_rate, loop_rate = decisions / vec_s, loop_decisions / loop_s
    result = {"pool": source, "batch_questions": args.batch, "decisions_per_batch": decisions,
              "memories_per_question": round(decisions / args.batch, 1), "hidden": args.hidden,
              "policy_inputs": int(b["x"].shape[-1]),
              "threads": args.threads, "vectorised_decisions_per_s": round(vec_rate), "loop_decisions_per_s":
              round(loop_rate), "ratio": round(vec_rate / loop_rate, 1), "target_decisions_per_s": 30000,
              "meets_target": vec_rate >= 30000, "torch": torch.__version__, "machine": platform.processor() or
              platform.machine(), "python": platform.python_version()}
    print(json.dumps(result, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
