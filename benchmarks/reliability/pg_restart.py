"""The PostgreSQL server stopped mid-ingest and restarted, over N trials, on a private throwaway cluster.

Each trial: ``c3m ingest`` of a dataset into a ``postgresql://`` store runs as a subprocess; after a random delay
the sessions committed so far are read on a separate connection and the server is stopped (``immediate`` — a
crash, no shutdown checkpoint — or ``fast``, alternating), then started again. Checks:

* the interrupted ingest ends with c3m's clear message (``error: … fix: …``), never a Python traceback;
* every session committed before the stop is still there, whole (``verify`` OK);
* a rerun of the same ingest completes the rest (re-ingest is idempotent), and a ``Memory`` opened before the
  restart carries on after it (the connection is re-made outside a transaction).

    python benchmarks/reliability/pg_restart.py --trials 20 --json benchmarks/results/reliability-pg.json
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def pg_bin() -> Path | None:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
    return found[-1].parent if found else None


def _as_pg(cmd: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


def start(data: Path, port: int) -> str:
    out = subprocess.run(["bash", str(ROOT / ".ci" / "start-postgres"), str(data), str(port)], check=True,
                         capture_output=True, text=True)
    return out.stdout.strip().splitlines()[-1]


def stop(data: Path, mode: str) -> None:
    subprocess.run(_as_pg([str(pg_bin() / "pg_ctl"), "-D", str(data), "-m", mode, "-w", "stop"]), check=True,
                   capture_output=True)


def _committed(url: str) -> dict[tuple[str, str], str]:
    import psycopg

    from c3m.store.db import split_blobs_param

    try:
        with psycopg.connect(split_blobs_param(url)[0], connect_timeout=5) as conn:
            return {(r[0], r[1]): r[2] for r in conn.execute("SELECT namespace, session_id, content_sha256 FROM sessions")}
    except psycopg.Error:  # the schema may not exist yet in the first moments
        return {}


def _ingest(dataset: Path, url: str, method: str, embedder: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-m", "c3m.cli", "ingest", str(dataset), "--store", url, "--method", method,
                             "--text-embedder", embedder, "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def trial(i: int, dataset: Path, base_url: str, data: Path, port: int, blobs: Path, method: str, embedder: str,
          delay: tuple[float, float], rng: random.Random) -> dict:
    import psycopg

    from c3m.store import ColdStore, verify_store

    schema = f"restart_{i}"
    with psycopg.connect(base_url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        conn.execute(f"CREATE SCHEMA {schema}")
    url = f"{base_url}?options=-csearch_path%3D{schema}&blobs={blobs / schema}"
    ColdStore(url).close()
    held = ColdStore(url)  # a connection open across the restart, idle outside a transaction
    proc = _ingest(dataset, url, method, embedder)
    time.sleep(rng.uniform(*delay))
    before = _committed(url)
    mode = "immediate" if i % 2 == 0 else "fast"
    stop(data, mode)
    _, err = proc.communicate(timeout=300)
    finished_first = proc.returncode == 0 and not err.strip()
    start(data, port)
    problems = []
    if not finished_first:
        if "Traceback" in err:
            problems.append(f"traceback from the interrupted ingest: {err[-800:]}")
        elif "error:" not in err or "fix:" not in err:
            problems.append(f"no clear error from the interrupted ingest (rc {proc.returncode}): {err[-400:]}")
    try:
        held.namespaces()  # reconnects
    except Exception as exc:
        problems.append(f"an idle connection did not carry on after the restart: {exc}")
    held.close()
    after_restart = _committed(url)
    lost = [k for k, h in before.items() if after_restart.get(k) != h]
    rerun = _ingest(dataset, url, method, embedder)
    _, err2 = rerun.communicate(timeout=900)
    if rerun.returncode != 0:
        problems.append(f"rerun failed: {err2[-400:]}")
    with ColdStore(url, create=False) as store:
        rep = verify_store(store)
        problems += [f"verify: {e}" for e in rep.errors]
        n = sum(len(store.sessions(ns)) for ns in store.namespaces())
    final = _committed(url)
    lost += [k for k, h in before.items() if final.get(k) != h and k not in lost]
    return {"trial": i, "stop": mode, "committed_before_stop": len(before), "sessions_after_rerun": n,
            "interrupted": not finished_first, "lost": len(lost), "problems": problems,
            "message": err.strip().splitlines()[-2:] if err.strip() else []}


def run(trials: int, *, method: str = "c3m", embedder: str = "hashing", delay: tuple[float, float] = (2.0, 6.0),
        seed: int = 0, workdir: Path | None = None, port: int = 55471, episodes: int = 2) -> dict:
    if pg_bin() is None:
        raise SystemExit("PostgreSQL is not installed (Debian: apt-get install postgresql)")
    rng = random.Random(seed)
    work = Path(workdir or tempfile.mkdtemp(prefix="c3m-pg-restart-"))
    work.mkdir(parents=True, exist_ok=True)
    os.chmod(work, 0o755)
    # the server runs as the postgres user when we are root: its data folder must not sit under a private tmp dir
    pg_root = Path(tempfile.mkdtemp(prefix="c3m-pgdata-"))
    os.chmod(pg_root, 0o755)
    data, blobs, dataset = pg_root / "data", work / "blobs", work / "dataset"
    if not dataset.exists():
        subprocess.run([sys.executable, "-m", "c3m.cli", "synth", str(dataset), "--preset", "hard", "--split", "dev",
                        "--length", "32k", "--episodes", str(episodes), "--seed", "0", "-q"], check=True,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)))
    base = start(data, port)
    rows = []
    try:
        for i in range(trials):
            rows.append(trial(i, dataset, base, data, port, blobs, method, embedder, delay, rng))
            r = rows[-1]
            print(f"trial {i}: stop={r['stop']} committed={r['committed_before_stop']} lost={r['lost']} "
                  f"problems={len(r['problems'])}", flush=True)
    finally:
        stop(data, "fast")
        shutil.rmtree(pg_root, ignore_errors=True)
        if workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    return {"trials": len(rows), "method": method, "embedder": embedder, "interrupted": sum(r["interrupted"] for r in rows),
            "lost": sum(r["lost"] for r in rows), "failures": sum(bool(r["problems"]) for r in rows),
            "committed_before_stop": [r["committed_before_stop"] for r in rows], "rows": rows}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--method", default="c3m")
    ap.add_argument("--text-embedder", default="hashing", help="the store is the subject, not the model")
    ap.add_argument("--delay", type=float, nargs=2, default=(2.0, 6.0), metavar=("MIN", "MAX"),
                    help="seconds from the ingest's start to the stop")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workdir", type=Path)
    ap.add_argument("--port", type=int, default=55471)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    res = run(args.trials, method=args.method, embedder=args.text_embedder, delay=tuple(args.delay), seed=args.seed,
              workdir=args.workdir, port=args.port)
    summary = {k: v for k, v in res.items() if k != "rows"}
    print(json.dumps(summary, indent=2))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(res, indent=2) + "\n")
    return 0 if res["lost"] == 0 and res["failures"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
