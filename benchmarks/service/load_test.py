"""Load test of ``c3m serve``: the real server in a subprocess, N concurrent HTTP clients on loopback.

For each method (``--methods``, default ``c3m,dense-topk``) the script starts ``c3m serve --store S --port P
--method M`` (the CLI's own ``main``; a thin probe around it reports the engine reader's retrieve batch
sizes on SIGUSR1 — ``--no-probe`` runs the plain ``c3m`` entry point), with an API key made by
``c3m keys add --store S -n 'load/*' --json`` (or ``--no-auth``), and waits for ``/health``.

Store: by default a fresh temporary store per method, seeded through the API with K namespaces
(``load/u000`` ...) of a few short sessions each. ``--store PATH`` serves an existing store instead: reads go
to its namespaces (``GET /v1/namespaces``; questions are made from index entry texts), writes go to new
``load/w###`` namespaces in it (``--write-frac 0`` to leave it unchanged); pass a key granting them with
``--key`` or ``--key-file`` (a JSON file with a ``key`` field).

Then, for each client count in ``--clients`` (default 1,8,32; one row group each), N asyncio clients
(one ``httpx.AsyncClient`` each) run for ``--seconds`` (default 30) a mix of

* ``POST .../sessions`` (``--write-frac``, default 0.2): a new 2-6 turn session in the client's own namespace,
  some turns with a small PNG (base64);
* ``POST .../retrieve``: a question about something the client (or the seed) wrote;
* ``GET .../index`` (``--index-frac``) and ``GET`` an image URL taken from an earlier retrieve
  (``--image-frac``).

Per endpoint: requests, errors (non-2xx or exceptions), responses or server-log lines containing
"database is locked", req/s, latency p50/p95/p99. Plus the reader's retrieve batch sizes per level.
The client runs on the same machine as the server (it takes CPU from it: on 2 cores that matters).

    python benchmarks/service/load_test.py                       # c3m + dense-topk, 1/8/32 clients, 30 s each
    python benchmarks/service/load_test.py --store /tmp/svc/hard-store --key-file /tmp/svc/hard-admin-key.json
    python benchmarks/service/load_test.py --smoke --out /tmp/x  # seconds: 2 clients, 3 s, one level
"""
from __future__ import annotations

import argparse
import asyncio
import base64
import csv
import io
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

LOCKED = "database is locked"
ENDPOINTS = ("sessions", "retrieve", "index", "image")

# The probe: `c3m serve` exactly (c3m.cli.main), plus a SIGUSR1 handler that writes the engine reader's
# retrieve batch sizes (Engine.reader.batches) to a file, so the load test can read them per level.
PROBE = r"""
import json, signal, sys
import c3m.server.engine as E
engines = []
_init = E.Engine.__init__
def init(self, *a, **k):
    _init(self, *a, **k)
    engines.append(self)
E.Engine.__init__ = init
out = sys.argv[1]
def dump(*_):
    import threading
    with open(out + ".tmp", "w") as f:
        json.dump({"batches": [list(e.reader.batches) for e in engines],
                   "threads": {t.name: t.native_id for t in threading.enumerate()}}, f)
    import os
    os.replace(out + ".tmp", out)
signal.signal(signal.SIGUSR1, dump)
from c3m.cli import main
sys.exit(main(sys.argv[2:]))
"""

# -- synthetic sessions -------------------------------------------------------------------------
ITEMS = ["bike", "car", "backpack", "sofa", "front door", "kettle", "umbrella", "jacket", "guitar", "mug"]
COLORS = ["red", "blue", "green", "yellow", "black", "white", "orange", "purple", "grey", "teal"]
CITIES = ["Lisbon", "Oslo", "Kyoto", "Denver", "Nairobi", "Lyon", "Austin", "Tallinn", "Porto", "Seoul"]
PETS = ["Biscuit", "Mango", "Pixel", "Juniper", "Rocket", "Olive", "Ziggy", "Pepper", "Nori", "Clover"]
FOODS = ["ramen", "tacos", "paella", "dumplings", "risotto", "falafel", "pho", "curry", "pierogi", "sushi"]
HOBBIES = ["bouldering", "pottery", "chess", "sailing", "birdwatching", "baking", "running", "knitting"]


def _png(rng: random.Random) -> str:
    from PIL import Image, ImageDraw

    im = Image.new("RGB", (48, 32), tuple(rng.randrange(256) for _ in range(3)))
    d = ImageDraw.Draw(im)
    x, y = rng.randrange(30), rng.randrange(16)
    d.rectangle([x, y, x + 14, y + 12], fill=tuple(rng.randrange(256) for _ in range(3)))
    buf = io.BytesIO()
    im.save(buf, "PNG")
    return base64.b64encode(buf.getvalue()).decode()


def make_session(rng: random.Random, day: int, image_frac: float = 0.3) -> tuple[dict, list[str]]:
    """A 2-6 turn session about the user, and questions it answers."""
    kind = rng.randrange(5)
    item, color, city = rng.choice(ITEMS), rng.choice(COLORS), rng.choice(CITIES)
    pet, food, hobby = rng.choice(PETS), rng.choice(FOODS), rng.choice(HOBBIES)
    if kind == 0:
        facts = [f"My {item} is {color} now, I repainted it last weekend.", f"Here is the {item}."]
        qs = [f"What color is my {item}?", f"When did I repaint my {item}?"]
    elif kind == 1:
        facts = [f"I moved to {city} this month for a new job.", "The apartment has a small balcony."]
        qs = ["Where do I live now?", "Why did I move?"]
    elif kind == 2:
        facts = [f"We adopted a cat called {pet}.", f"{pet} sleeps on the {item} all day."]
        qs = ["What is my cat's name?", f"Where does {pet} sleep?"]
    elif kind == 3:
        facts = [f"My favourite dinner is {food}.", f"I cooked {food} for my sister on Friday."]
        qs = ["What is my favourite dinner?", "What did I cook for my sister?"]
    else:
        facts = [f"I started {hobby} on Tuesdays.", f"The {hobby} club meets near the station in {city}."]
        qs = ["What hobby did I start?", f"Where does the {hobby} club meet?"]
    turns = []
    n = rng.randint(2, 6)
    for i in range(n):
        if i % 2 == 0:
            text = facts[(i // 2) % len(facts)] if i // 2 < len(facts) else f"Also, I bought a {color} {item}."
            t = {"role": "user", "text": text}
            if rng.random() < image_frac:
                t["images"] = [{"data": _png(rng)}]
            turns.append(t)
        else:
            turns.append({"role": "assistant", "text": rng.choice(["Noted!", "Got it, I'll remember that.",
                                                                   "Sounds nice.", "Thanks for telling me."])})
    hour = rng.randrange(24)
    return {"time": f"2026-{1 + day // 28 % 12:02d}-{1 + day % 28:02d}T{hour:02d}:{rng.randrange(60):02d}:00",
            "turns": turns}, qs


# -- server -------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, store: Path, method: str, args, log: Path, probe_file: Path):
        self.port = free_port()
        self.log_path, self.probe_file = log, probe_file
        serve = ["serve", "--store", str(store), "--port", str(self.port), "--method", method]
        if args.text_embedder:
            serve += ["--text-embedder", args.text_embedder]
        if args.no_auth:
            serve.append("--no-auth")
        if args.no_probe:
            self.cmd = [str(Path(sys.executable).with_name("c3m")), *serve]
        else:
            self.cmd = [sys.executable, "-c", PROBE, str(probe_file), *serve]
        self.log = open(log, "w")
        env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.t0 = time.time()
        self.proc = subprocess.Popen(self.cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env, cwd=str(ROOT))
        self.url = f"http://127.0.0.1:{self.port}"

    def wait_ready(self, timeout_s: float = 180) -> float:
        import httpx

        while time.time() - self.t0 < timeout_s:
            if self.proc.poll() is not None:
                raise SystemExit(f"server exited ({self.proc.returncode}):\n{self.log_path.read_text()[-3000:]}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return time.time() - self.t0
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise SystemExit(f"server not ready in {timeout_s} s:\n{self.log_path.read_text()[-3000:]}")

    def probe(self) -> dict:
        """The reader's retrieve batch sizes so far and the server's thread ids (probe only; {} without it)."""
        if self.proc.poll() is not None or "-c" not in self.cmd:
            return {}
        before = self.probe_file.stat().st_mtime_ns if self.probe_file.exists() else 0
        self.proc.send_signal(signal.SIGUSR1)
        for _ in range(100):
            time.sleep(0.05)
            if self.probe_file.exists() and self.probe_file.stat().st_mtime_ns != before:
                try:
                    got = json.loads(self.probe_file.read_text())
                except ValueError:
                    continue
                got["batches"] = [b for e in got["batches"] for b in e]
                return got
        return {}

    def batches(self) -> list[int]:
        return self.probe().get("batches", [])

    def cpu(self, threads: dict) -> dict:
        """CPU seconds so far of the server's event loop (main thread), reader, writer, and everything else."""
        tick = os.sysconf("SC_CLK_TCK")

        def stat(path):
            try:
                f = Path(path).read_text().rsplit(")", 1)[1].split()
                return (int(f[11]) + int(f[12])) / tick
            except (OSError, IndexError, ValueError):
                return 0.0
        total = stat(f"/proc/{self.proc.pid}/stat")
        out = {"loop": stat(f"/proc/{self.proc.pid}/task/{self.proc.pid}/stat"),
               "reader": stat(f"/proc/{self.proc.pid}/task/{threads.get('c3m-reader')}/stat"),
               "writer": stat(f"/proc/{self.proc.pid}/task/{threads.get('c3m-writer')}/stat")}
        out["other"] = max(0.0, total - sum(out.values()))
        return out

    def log_text(self) -> str:
        self.log.flush()
        return self.log_path.read_text(errors="replace")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode


def make_key(store: Path, patterns: list[str]) -> str:
    cmd = [str(Path(sys.executable).with_name("c3m")), "keys", "add", "--store", str(store), "--json",
           "--label", "load test"]
    for p in patterns:
        cmd += ["-n", p]
    res = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(res.stdout)["key"]


# -- clients ------------------------------------------------------------------------------------
class Stats:
    def __init__(self):
        self.lat: dict[str, list[float]] = {e: [] for e in ENDPOINTS}
        self.err: dict[str, int] = {e: 0 for e in ENDPOINTS}
        self.locked: dict[str, int] = {e: 0 for e in ENDPOINTS}
        self.samples: list[str] = []
        self.empty = 0  # retrieve responses with no context items (every namespace holds sessions: suspicious)
        self.t0 = time.perf_counter()
        self.slowest: tuple[float, str, float] = (0.0, "", 0.0)  # (latency, endpoint, start offset in the level)

    def add(self, ep: str, dt: float, ok: bool, body: str = "") -> None:
        self.lat[ep].append(dt)
        if dt > self.slowest[0]:
            self.slowest = (dt, ep, time.perf_counter() - dt - self.t0)
        if not ok:
            self.err[ep] += 1
            if len(self.samples) < 8:
                self.samples.append(f"{ep}: {body[:300]}")
        if LOCKED in body:
            self.locked[ep] += 1


class Client:
    def __init__(self, i: int, namespace: str, questions: list[str], read_namespaces: list[tuple[str, list[str]]],
                 seed: int):
        self.i, self.ns, self.rng = i, namespace, random.Random(seed * 1000 + i)
        self.questions = list(questions)          # about what this client's namespace holds
        self.reads = read_namespaces              # (namespace, questions) to read when not writing
        self.images: list[str] = []
        self.day = 0


async def request(http, stats: Stats, ep: str, method: str, url: str, **kw):
    t = time.perf_counter()
    try:
        r = await http.request(method, url, **kw)
    except Exception as exc:  # a refused/reset connection or a timeout is an error of the service
        stats.add(ep, time.perf_counter() - t, False, f"{type(exc).__name__}: {exc}")
        return None
    dt = time.perf_counter() - t
    ok = 200 <= r.status_code < 300
    body = "" if ok and ep == "image" else r.text
    stats.add(ep, dt, ok, body if not ok else (body if LOCKED in body else ""))
    return r if ok else None


def ns_url(ns: str) -> str:
    return "/v1/namespaces/" + ns


async def client_loop(c: Client, base: str, headers: dict, stats: Stats, deadline: float, args) -> None:
    import httpx

    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=args.timeout) as http:
        while time.perf_counter() < deadline:
            x = c.rng.random()
            if x < args.write_frac:
                c.day += 1
                sess, qs = make_session(c.rng, 100 + c.day + 7 * c.i, args.session_image_frac)
                r = await request(http, stats, "sessions", "POST", ns_url(c.ns) + "/sessions", json=sess)
                if r is not None:
                    c.questions.extend(qs)
                continue
            x -= args.write_frac
            if c.reads:
                ns, qs = c.rng.choice(c.reads)
            else:
                ns, qs = c.ns, c.questions
            if x < args.index_frac:
                await request(http, stats, "index", "GET", ns_url(ns) + "/index")
            elif x < args.index_frac + args.image_frac and c.images:
                await request(http, stats, "image", "GET", c.rng.choice(c.images))
            elif qs:
                r = await request(http, stats, "retrieve", "POST", ns_url(ns) + "/retrieve",
                                  json={"question": c.rng.choice(qs)})
                if r is not None:
                    items = r.json()["items"]
                    stats.empty += not items
                    urls = [im["url"] for it in items for im in it["images"]]
                    c.images = (c.images + urls)[-32:]


async def run_level(clients: list[Client], base: str, headers: dict, seconds: float, args) -> tuple[Stats, float]:
    stats = Stats()
    t0 = stats.t0
    await asyncio.gather(*(client_loop(c, base, headers, stats, t0 + seconds, args) for c in clients))
    return stats, time.perf_counter() - t0


async def seed(base: str, headers: dict, namespaces: list[str], per_ns: int, rng: random.Random,
               parallel: int = 4) -> dict[str, list[str]]:
    """Write ``per_ns`` sessions into each namespace through the API; the questions they answer."""
    import httpx

    questions: dict[str, list[str]] = {ns: [] for ns in namespaces}
    jobs = [(ns, *make_session(rng, d)) for ns in namespaces for d in range(per_ns)]
    sem = asyncio.Semaphore(parallel)

    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=300) as http:
        async def one(ns, sess, qs):
            async with sem:
                r = await http.post(ns_url(ns) + "/sessions", json=sess)
            if r.status_code not in (200, 201):
                raise SystemExit(f"seeding {ns} failed: {r.status_code} {r.text[:500]}")
            questions[ns].extend(qs)
        await asyncio.gather(*(one(*j) for j in jobs))
    return questions


async def existing_reads(base: str, headers: dict, limit: int) -> list[tuple[str, list[str]]]:
    """An existing store's namespaces (not load/*), with questions made from their index entries' text."""
    import httpx

    out = []
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=300) as http:
        r = await http.get("/v1/namespaces")
        r.raise_for_status()
        for row in r.json():
            ns = row["namespace"]
            if ns.startswith("load/") or not row.get("sessions"):
                continue
            ix = (await http.get(ns_url(ns) + "/index")).json()
            qs = []
            for e in ix.get("entries", []):
                words = e.get("text", "").split("|")[0].split()[:10]
                if len(words) >= 3:
                    qs.append("What did I say about " + " ".join(words) + "?")
            if not qs:
                qs = ["What did I do last week?", "Where do I live?", "What color is my bike?"]
            out.append((ns, qs[:200]))
            if len(out) >= limit:
                break
    return out


async def warm(base: str, headers: dict, targets: list[tuple[str, list[str]]]) -> None:
    """One retrieve and one index read per namespace (tenant load, page cache) before anything is timed."""
    import httpx

    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=300) as http:
        for ns, qs in targets:
            if qs:
                await http.post(ns_url(ns) + "/retrieve", json={"question": qs[0]})
            await http.get(ns_url(ns) + "/index")


# -- reporting ----------------------------------------------------------------------------------
def percentile(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    k = (len(s) - 1) * q / 100
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def batch_summary(bs: list[int]) -> str:
    if not bs:
        return ""
    return f"{len(bs)} batches, mean {sum(bs) / len(bs):.2f}, max {max(bs)}, >1: {sum(b > 1 for b in bs)}"


def write_markdown(rows, extras, out: Path, stem: str, args, argv) -> None:
    from c3m.machine import describe

    from benchmarks.report import git_commit, md_rows

    commit = git_commit(ROOT)
    dirty = [line for line in subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                                             capture_output=True, text=True).stdout.splitlines()
             if f"/{stem}." not in line]  # this script's own earlier outputs do not count
    store = args.store or "a fresh temporary store per method"
    lines = ["# `c3m serve` under load: concurrent HTTP clients on loopback", "",
             f"`{' '.join(['python benchmarks/service/load_test.py', *argv])}` — {time.strftime('%Y-%m-%d')}, at commit "
             f"{commit}{' (+ uncommitted changes)' if dirty else ''}, {describe()}, "
             f"load average (1/5/15 min) before the run {extras['loadavg']}, after it {extras.get('loadavg_after', '?')} "
             f"(this run alone adds about 1). Server: `c3m serve` (one process, "
             f"{'no auth' if args.no_auth else 'API key'}), text embedder {args.text_embedder or 'auto'}; store: "
             f"{store}; {args.seconds:g} s per level; mix: {args.write_frac:.0%} session writes, "
             f"{args.index_frac:.0%} index reads, {args.image_frac:.0%} image fetches, the rest retrieves. "
             f"Clients and server share the machine's cores.", "",
             "| method | clients | endpoint | requests | errors | locked | req/s | p50 ms | p95 ms | p99 ms |",
             "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    lines += md_rows(rows, ("method", "clients", "endpoint", "requests", "errors", "locked", "req_s", "p50_ms",
                            "p95_ms", "p99_ms"))
    lines += ["", "An empty latency cell: no request of that kind in that level. errors: non-2xx responses and client exceptions; locked: responses or server-log lines "
              "containing \"database is locked\" (server-log lines are counted on the level's `all` row). "
              "`all` = every endpoint together. Latency is per request, measured by the client.", ""]
    if extras.get("levels"):
        lines += ["| method | clients | retrieve batches (reader thread) | empty contexts | slowest request | CPU cores: "
                  "event loop / reader / writer / other server threads / load client | server log lines |",
                  "|---|---:|---|---:|---|---|---:|"]
        for lv in extras["levels"]:
            c = lv.get("cpu")
            cores = " / ".join(f"{c[k]:.2f}" for k in ("loop", "reader", "writer", "other", "client")) if c else ""
            lines.append(f"| {lv['method']} | {lv['clients']} | {lv['batches'] or '(no probe)'} | {lv['empty']} | "
                         f"{lv['slowest']} | "
                         f"{cores} | {lv['log_lines']} |")
        lines.append("")
    for m, info in extras.get("servers", {}).items():
        lines.append(f"- {m}: server ready in {info['ready_s']} s; {info['seed']}; exit code {info['rc']}")
    if extras.get("samples"):
        lines += ["", "First error bodies:", ""] + [f"- `{s}`" for s in extras["samples"][:10]]
    (out / f"{stem}.md").write_text("\n".join(lines) + "\n")


def plot(rows, out: Path, stem: str) -> None:
    from benchmarks.report import plot_per_method

    plot_per_method([r for r in rows if r["requests"]], out / f"{stem}.png", x="clients", y="p95_ms",
                    series_field="endpoint", series=ENDPOINTS, xlabel="concurrent clients",
                    ylabel="p95 latency, ms", xlog_base=2, ylog=True)


# -- main ---------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--methods", default="c3m,dense-topk")
    p.add_argument("--clients", default="1,8,32", help="client counts, one level each")
    p.add_argument("--seconds", type=float, default=30.0, help="duration of each level")
    p.add_argument("--store", help="serve this existing store (default: a fresh temporary one per method)")
    p.add_argument("--key", help="API key for --store (must grant its namespaces and load/*)")
    p.add_argument("--key-file", help="JSON file with the API key in its 'key' field")
    p.add_argument("--no-auth", action="store_true", help="run the server with --no-auth")
    p.add_argument("--no-probe", action="store_true", help="run the plain `c3m` entry point (no batch sizes)")
    p.add_argument("--namespaces", type=int, default=0, help="seeded namespaces K (default: the largest level)")
    p.add_argument("--seed-sessions", type=int, default=4, help="sessions per seeded namespace")
    p.add_argument("--write-frac", type=float, default=0.2)
    p.add_argument("--index-frac", type=float, default=0.05)
    p.add_argument("--image-frac", type=float, default=0.05)
    p.add_argument("--session-image-frac", type=float, default=0.3, help="user turns with an image")
    p.add_argument("--text-embedder", help="passed to c3m serve (default: its own, auto)")
    p.add_argument("--timeout", type=float, default=120.0, help="client timeout per request, s")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    p.add_argument("--stem", default="service-cpu", help="output file names: STEM.md, STEM.csv, STEM.png")
    p.add_argument("--smoke", action="store_true", help="2 clients, 3 s, one level, 2 seeded namespaces")
    args = p.parse_args(argv)
    if args.smoke:
        args.clients, args.seconds = "2", 3.0
        args.namespaces = args.namespaces or 2
        args.seed_sessions = min(args.seed_sessions, 2)
    levels = [int(x) for x in args.clients.split(",")]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="c3m-load-"))
    loadavg = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    rows, extras = [], {"loadavg": loadavg, "levels": [], "servers": {}, "samples": []}
    rng = random.Random(args.seed)
    for method in args.methods.split(","):
        store = Path(args.store) if args.store else tmp / f"store-{method}"
        key = None
        if not args.no_auth:
            if args.key or args.key_file:
                key = args.key or json.loads(Path(args.key_file).read_text())["key"]
            else:
                store.mkdir(parents=True, exist_ok=True)
                key = make_key(store, ["load/*"])
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        srv = Server(store, method, args, tmp / f"server-{method}.log", tmp / f"batches-{method}.json")
        ready, seed_note = float("nan"), ""
        try:
            ready = srv.wait_ready()
            print(f"[{method}] server ready in {ready:.1f} s on port {srv.port}", file=sys.stderr, flush=True)
            base = srv.url
            k = args.namespaces or max(levels)
            t = time.time()
            if args.store:
                reads = asyncio.run(existing_reads(base, headers, limit=64))
                own = {f"load/w{i:03d}": [] for i in range(max(levels))}
                seed_note = f"existing store, reads over {len(reads)} namespace(s)"
            else:
                own = asyncio.run(seed(base, headers, [f"load/u{i:03d}" for i in range(k)], args.seed_sessions, rng))
                reads = []
                seed_note = f"seeded {k} namespaces x {args.seed_sessions} sessions in {time.time() - t:.1f} s"
            print(f"[{method}] {seed_note}", file=sys.stderr, flush=True)
            asyncio.run(warm(base, headers, reads or list(own.items())))
            names = list(own)
            for n in levels:
                clients = [Client(i, names[i % len(names)], own[names[i % len(names)]], reads, args.seed)
                           for i in range(n)]
                pr0 = srv.probe()
                b0 = len(pr0.get("batches", []))
                threads = pr0.get("threads", {})
                cpu0, me0 = srv.cpu(threads), sum(os.times()[:2])
                log0 = len(srv.log_text().splitlines())
                stats, wall = asyncio.run(run_level(clients, base, headers, args.seconds, args))
                cpu1, me1 = srv.cpu(threads), sum(os.times()[:2])
                cpu = {k: (cpu1[k] - cpu0[k]) / wall for k in cpu0}
                cpu["client"] = (me1 - me0) / wall
                for c in clients:  # the next level's clients know what this one wrote
                    own[c.ns] = c.questions
                batches = srv.batches()[b0:]
                new_log = srv.log_text().splitlines()[log0:]
                log_locked = sum(LOCKED in line for line in new_log)
                sl = stats.slowest
                extras["levels"].append({"method": method, "clients": n, "batches": batch_summary(batches),
                                         "log_lines": len(new_log),
                                         "slowest": f"{sl[1]} {1000 * sl[0]:.0f} ms, sent at {sl[2]:.1f} s",
                                         "cpu": cpu if threads else None, "empty": stats.empty})
                extras["samples"] += stats.samples + [f"server log: {line[:300]}" for line in new_log
                                                      if "Error" in line or LOCKED in line][:5]
                every = []
                for ep in ENDPOINTS + ("all",):
                    lat = every if ep == "all" else stats.lat[ep]
                    if ep != "all":
                        every += lat
                    err = sum(stats.err.values()) if ep == "all" else stats.err[ep]
                    locked = (sum(stats.locked.values()) + log_locked) if ep == "all" else stats.locked[ep]
                    row = {"method": method, "clients": n, "endpoint": ep, "requests": len(lat), "errors": err,
                           "locked": locked, "req_s": round(len(lat) / wall, 2),
                           **{f"p{q}_ms": round(1000 * percentile(lat, q), 1) if lat else ""
                              for q in (50, 95, 99)}}
                    rows.append(row)
                    print(json.dumps(row), flush=True)
                print(f"[{method}] {n} clients: retrieve batches {batch_summary(batches)}; CPU cores "
                      + json.dumps({k: round(v, 2) for k, v in cpu.items()}), file=sys.stderr, flush=True)
        finally:
            rc = srv.stop()
            log = srv.log_path.read_text(errors="replace")
            extras["servers"][method] = {"ready_s": round(ready, 1), "seed": seed_note, "rc": rc}
            print(f"[{method}] server exit code {rc}; its log: {srv.log_path}"
                  + (f" (mentions '{LOCKED}')" if LOCKED in log else ""), file=sys.stderr, flush=True)
    extras["loadavg_after"] = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    with open(out / f"{args.stem}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    write_markdown(rows, extras, out, args.stem, args, argv)
    plot(rows, out, args.stem)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
