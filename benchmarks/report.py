"""What the benchmark scripts' result files share: the commit they name, Markdown table rows, and a plot with one
panel per method (matplotlib is optional: CI's dev install has none)."""
from __future__ import annotations

import subprocess
from pathlib import Path


def git_commit(root: Path) -> str:
    """The short commit of ``root`` ("?" outside a git checkout)."""
    return subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip() or "?"


def md_rows(rows, keys) -> list[str]:
    """One Markdown table row per dict, its ``keys`` in order."""
    return ["| " + " | ".join(str(r[k]) for k in keys) + " |" for r in rows]


def plot_per_method(rows, png: Path, *, x: str, y: str, series_field: str, series, xlabel: str, ylabel: str,
                    xlog_base: int = 10, ylog: bool = False) -> bool:
    """One panel per method, one line per value of ``series_field`` (in ``series`` order), ``y`` against ``x``;
    rows whose ``y`` is empty are skipped. False (nothing drawn) without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    methods = sorted({r["method"] for r in rows})
    fig, axes = plt.subplots(1, len(methods), figsize=(5 * len(methods), 3.6), squeeze=False)
    for ax, method in zip(axes[0], methods):
        for name in series:
            pts = [(r[x], r[y]) for r in rows if r["method"] == method and r[series_field] == name and r[y] != ""]
            if pts:
                ax.plot(*zip(*pts), marker="o", label=name)
        ax.set_xscale("log", base=xlog_base)
        if ylog:
            ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(method)
        ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    plt.close(fig)
    return True
