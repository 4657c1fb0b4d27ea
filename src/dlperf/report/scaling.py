"""Figures of a scaling study (matplotlib Agg, files only): throughput with the ideal line
(and, with --synthetic, the chunks' mean and its 95% interval), speedup, efficiency, the
step split into compute and exposed communication, and cost."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only: never needs a display
import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.ticker import MaxNLocator


def _groups(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        if row.get("status") == "finished":
            bucket = f" {row['bucket_mb']:g}MB" if row.get("bucket_mb") else ""
            groups.setdefault(f"{row['strategy']}/{row['comm']}{bucket}", []).append(row)
    return groups


def _figure(path: Path, ylabel: str, draw: Callable[[Axes], None]) -> Path:
    fig, ax = plt.subplots(figsize=(6, 4))
    draw(ax)
    ax.set_xlabel("workers")
    ax.set_ylabel(ylabel)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_study(directory: Path, rows: list[dict[str, Any]]) -> list[tuple[str, Path]]:
    """Write the study's figures into `directory`; returns (artifact kind, path) pairs."""
    groups = _groups(rows)
    if not groups:
        return []
    directory.mkdir(parents=True, exist_ok=True)

    def series(key: str, ideal: Callable[[list[dict[str, Any]], int], float] | None = None):
        def draw(ax: Axes) -> None:
            for i, (label, mine) in enumerate(groups.items()):
                w = [r["workers"] for r in mine]
                ax.plot(w, [r[key] for r in mine], "o-", color=f"C{i}", label=label)
                if ideal is not None:
                    ideal_w = [ideal(mine, n) for n in w]
                    ax.plot(w, ideal_w, ":", color=f"C{i}", label=f"{label} ideal")

        return draw

    def linear(mine: list[dict[str, Any]], n: int) -> float:
        return mine[0]["throughput"] * n / mine[0]["workers"]

    def throughput(ax: Axes) -> None:
        series("throughput", linear)(ax)
        label = "chunk mean, 95% CI (Student's t)"
        for i, mine in enumerate(groups.values()):
            chunked = [r for r in mine if r.get("throughput_ci95") is not None]
            if chunked:
                w = [r["workers"] for r in chunked]
                mean = [r["throughput_mean"] for r in chunked]
                ci = [r["throughput_ci95"] for r in chunked]
                ax.errorbar(w, mean, yerr=ci, fmt="none", capsize=3, color=f"C{i}", label=label)
                label = None  # one legend entry for all groups

    def split(ax: Axes) -> None:
        labels = [f"{r['workers']}\n{name}" for name, mine in groups.items() for r in mine]
        flat = [r for mine in groups.values() for r in mine]
        compute = [(r["compute_s"] or r["step_time_s"]) * 1e3 for r in flat]
        comm = [(r["comm_exposed_s"] or 0.0) * 1e3 for r in flat]
        x = range(len(flat))
        ax.bar(x, compute, label="compute")
        ax.bar(x, comm, bottom=compute, label="exposed communication")
        ax.set_xticks(list(x), labels, fontsize=6)

    figures = [
        ("plot/throughput", "samples/s", throughput),
        ("plot/speedup", "speedup", series("speedup", lambda mine, n: n / mine[0]["workers"])),
        ("plot/efficiency", "efficiency", series("efficiency")),
        ("plot/step_split", "ms per step", split),
    ]
    if all(r.get("cost_per_epoch") is not None for mine in groups.values() for r in mine):
        figures.append(("plot/cost", "cost per epoch", series("cost_per_epoch")))
    return [
        (kind, _figure(directory / f"{kind.split('/')[1]}.png", ylabel, draw))
        for kind, ylabel, draw in figures
    ]
