"""What every trainer in ``training/`` shares: ``--help`` from the dataclass of arguments, the device rule,
torchrun / accelerate process groups, seeds, the run folder, ``--ship`` and ``summary.json``.

Why one module: the trainers must agree on these rules (where they run, what they overwrite, what they
record); written once, they cannot drift apart. Each trainer stays one readable file that calls these helpers.

- **Arguments.** Every dataclass field is a flag: ``--max-steps 5``, ``--max-steps=5`` or ``--max_steps=5``;
  a boolean is ``--flag`` (true), ``--flag true`` or ``--flag=false``. Help text comes from ``opt(default, help)``.
- **Device.** ``auto``: ``cuda`` when ``torch.cuda.is_available()``, else ``cpu``. Under ``torchrun`` /
  ``accelerate launch`` (``RANK`` and ``WORLD_SIZE`` set) a CUDA device means ``cuda:$LOCAL_RANK``. Asking
  for CUDA where there is none is an error, never a silent CPU run.
- **Processes.** Launched by torchrun / accelerate: NCCL on CUDA, Gloo on CPU (chosen by the device, not by
  whether a GPU exists). Only rank 0 writes files.
- **Outputs.** ``--out`` is a run folder; the default is ``runs/<trainer>-<UTC time>/`` in the repository
  (``runs/`` is git-ignored). Shipped weights under ``c3m/models/weights/`` change only with ``--ship``.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import shutil
import sys
from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "runs"
WEIGHTS = ROOT / "c3m" / "models" / "weights"
TRUE, FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")
DEVICE_HELP = ("auto | cpu | cuda | cuda:N. auto: cuda when torch.cuda.is_available(), else cpu; under torchrun / "
               "accelerate launch each rank uses cuda:$LOCAL_RANK (NCCL), or the CPU (Gloo)")
FLAGS_NOTE = """Flags: --name VALUE or --name=VALUE, with dashes or underscores (--max-steps, --max_steps); a boolean
is --flag (true), --flag true or --flag=false. Outputs go to a run folder (default runs/<trainer>-<UTC time>/,
git-ignored); only --ship replaces the shipped weights under c3m/models/weights/. See training/README.md."""


def opt(default, help: str):
    """A dataclass field and its ``--help`` text."""
    return field(default=default, metadata={"help": help})


# --- arguments ------------------------------------------------------------------------------------------------
def _flag(name: str, shipped: Path | None):
    def parse(value: str) -> bool:
        v = value.strip().lower()
        if v in TRUE:
            return True
        if v in FALSE:
            return False
        if shipped is not None and Path(value).resolve() == Path(shipped).resolve():
            return True  # the older spelling --ship=<the shipped path>
        raise argparse.ArgumentTypeError(f"--{name} takes true or false, got {value!r}"
                                         + (f" (--ship writes {shipped})" if shipped else ""))
    return parse


def parse_args(cls, argv: list[str] | None, doc: str | None, shipped: Path | None = None):
    """``cls`` (a dataclass) from the command line. ``doc`` (the trainer's docstring) is the help text: its first
    paragraph above the options, the rest below them. ``shipped``: what ``--ship`` overwrites (named in --help)."""
    head, _, rest = (doc or "").strip().partition("\n\n")
    script = Path(getattr(sys.modules.get(cls.__module__), "__file__", None) or "trainer.py").name
    ap = argparse.ArgumentParser(prog=f"python training/{script}", description=head, epilog=(rest + "\n\n" + FLAGS_NOTE).strip(),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    for f in fields(cls):
        kind = type(f.default)
        text = f.metadata.get("help", "")
        if f.name == "ship" and shipped is not None:
            text = f"{text} ({Path(shipped).relative_to(ROOT) if Path(shipped).is_relative_to(ROOT) else shipped})"
        kw = {"dest": f.name, "help": f"{text} (default: {f.default!r})".replace("%", "%%")}
        if kind is bool:
            kw.update(nargs="?", const=True, type=_flag(f.name, shipped if f.name == "ship" else None),
                      metavar="BOOL")
        else:
            kw.update(type=kind, metavar=kind.__name__.upper())
        dash, under = f"--{f.name.replace('_', '-')}", f"--{f.name}"
        ap.add_argument(dash, default=f.default, **kw)
        if under != dash:  # the underscore spelling, accepted and not listed twice
            ap.add_argument(under, default=argparse.SUPPRESS, **{**kw, "help": argparse.SUPPRESS})
    # the deepspeed launcher appends --local_rank=N; $LOCAL_RANK (set by every launcher) is what is used
    ap.add_argument("--local-rank", "--local_rank", type=int, dest="local_rank", help=argparse.SUPPRESS)
    ns = vars(ap.parse_args(argv))
    ns.pop("local_rank", None)
    return cls(**ns)


# --- device and processes -------------------------------------------------------------------------------------
def launched() -> bool:
    """Started by torchrun / accelerate launch / the deepspeed launcher (they all set RANK and WORLD_SIZE)."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def resolve_device(name: str):
    """The torch device for ``--device`` (module docstring: the device rule)."""
    import torch

    want = (name or "auto").strip().lower()
    if want == "auto":
        want = "cuda" if torch.cuda.is_available() else "cpu"
    if want == "cpu":
        return torch.device("cpu")
    if want != "cuda" and not (want.startswith("cuda:") and want[5:].isdigit()):
        raise SystemExit(f"--device must be auto, cpu, cuda or cuda:N, got {name!r}")
    if not torch.cuda.is_available():
        raise SystemExit(f"--device {name}: this torch ({torch.__version__}) sees no CUDA device; "
                         "use --device cpu (or auto)")
    dev = torch.device(want)
    if launched() and int(os.environ["WORLD_SIZE"]) > 1:
        local = int(os.environ.get("LOCAL_RANK", 0))
        if dev.index not in (None, local):
            raise SystemExit(f"--device {name} under a launcher: each rank uses cuda:$LOCAL_RANK "
                             f"(here cuda:{local}); pass --device cuda (CUDA_VISIBLE_DEVICES picks the GPUs)")
        dev = torch.device("cuda", local)
    elif dev.index is None:
        dev = torch.device("cuda", 0)
    if dev.index >= torch.cuda.device_count():
        raise SystemExit(f"--device {name}: only {torch.cuda.device_count()} CUDA device(s) visible")
    torch.cuda.set_device(dev)
    return dev


@dataclass
class Ctx:
    """Where this process runs: rank, world size, device, process-group backend (None: one plain process)."""

    rank: int
    world: int
    device: object
    backend: str | None

    @property
    def main(self) -> bool:
        return self.rank == 0


def setup(device: str, seed: int | None = None, threads: int = 0) -> Ctx:
    """Resolve the device, join the process group when launched, then seed — before any data is built."""
    import torch

    dev = resolve_device(device)
    if threads:
        torch.set_num_threads(threads)
    ctx = Ctx(0, 1, dev, None)
    if launched():
        import torch.distributed as dist

        backend = "nccl" if dev.type == "cuda" else "gloo"
        if not dist.is_initialized():
            dist.init_process_group(backend)
        ctx = Ctx(dist.get_rank(), dist.get_world_size(), dev, dist.get_backend())
    if seed is not None:
        seed_everything(seed)
    return ctx


def seed_everything(seed: int) -> None:
    """Python, numpy and torch (every CUDA device too). Generators a trainer makes are seeded from ``seed``."""
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def ddp(model, ctx: Ctx):
    """``model`` (already on ``ctx.device``) wrapped in DDP when launched; as is otherwise."""
    if ctx.backend is None:
        return model
    import torch

    ids = [ctx.device.index] if ctx.device.type == "cuda" else None
    return torch.nn.parallel.DistributedDataParallel(model, device_ids=ids)


def barrier(ctx: Ctx) -> None:
    if ctx.backend is not None:
        import torch.distributed as dist

        dist.barrier()


def gather(ctx: Ctx, obj) -> list:
    """``obj`` of every rank, in rank order (on rank 0 and everywhere else)."""
    if ctx.backend is None:
        return [obj]
    import torch.distributed as dist

    out = [None] * ctx.world
    dist.all_gather_object(out, obj)
    return out


def all_sum(ctx: Ctx, value: float) -> float:
    """``value`` summed over the ranks (a logged number, not a gradient)."""
    if ctx.backend is None:
        return value
    import torch
    import torch.distributed as dist

    t = torch.tensor([float(value)], dtype=torch.float64, device=ctx.device)
    dist.all_reduce(t)
    return float(t.item())


def finish(ctx: Ctx) -> None:
    """Leave the process group together: a rank that tears gloo down while rank 0 is still writing its files
    can abort ("terminate called without an active exception"), so all wait for rank 0 first."""
    if ctx.backend is not None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.barrier()
            dist.destroy_process_group()


# --- outputs --------------------------------------------------------------------------------------------------
def run_dir(trainer: str, out: str, ctx: Ctx | None = None) -> Path:
    """``--out``, else a fresh ``runs/<trainer>-<UTC time>/``; rank 0 picks the name and the others take it."""
    path = Path(out) if out else None
    if path is None and (ctx is None or ctx.main):
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
        path, n = RUNS / f"{trainer}-{stamp}", 1
        while path.exists():  # two runs in one second
            n += 1
            path = RUNS / f"{trainer}-{stamp}-{n}"
    if ctx is not None and ctx.backend is not None and not out:
        import torch.distributed as dist

        box = [str(path) if ctx.main else None]
        dist.broadcast_object_list(box, src=0)
        path = Path(box[0])
    if ctx is None or ctx.main:
        path.mkdir(parents=True, exist_ok=True)
    return path


def ship(src: Path, dst: Path) -> Path:
    """Copy a run's weights over the shipped file (``--ship``), atomically."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(dst.name + ".tmp")
    if Path(src).is_dir():
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(src, tmp)
        shutil.rmtree(dst, ignore_errors=True)
    else:
        shutil.copyfile(src, tmp)
    os.replace(tmp, dst)
    print(f"shipped {src} -> {dst}", flush=True)
    return dst


def write_summary(folder: Path, ctx: Ctx, ranks: list, **info) -> Path:
    """``summary.json``: what ran where (device, backend, world size, each rank's share) and how it ended."""
    path = Path(folder) / "summary.json"
    doc = {**info, "device": str(ctx.device), "backend": ctx.backend, "world_size": ctx.world, "ranks": ranks}
    path.write_text(json.dumps(doc, indent=1, default=float), encoding="utf-8")
    return path
