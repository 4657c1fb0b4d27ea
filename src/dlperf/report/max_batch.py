"""Figures of `dlperf scale max-batch` (matplotlib Agg, files only): time per step and
throughput against the per-worker batch, each size the search ran one point, with the
spread of its timed steps; a size that did not fit is marked at the foot of the axes, and
why the search stopped is written under the figure. (A scaling study's figures, against
workers, are report/scaling.py's.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matplotlib.axes import Axes
from matplotlib.figure import Figure  # no pyplot: figures that need no global state

from dlperf.distributed.contracts import PointRow
from dlperf.paths import save_figure
from dlperf.report import tight_layout
from dlperf.report.scaling import SPREAD_LABEL, shared_host, step_range
from dlperf.store import RunStore


def _value(row: dict[str, Any], kind: str) -> tuple[float, tuple[float, float] | None]:
    """A finished size's value for figure `kind` ("step_time" in ms, or "throughput") and
    the (low, high) of its timed steps, None where the row holds no spread."""
    if kind == "step_time":
        fastest, slowest = row.get("step_time_min_s"), row.get("step_time_max_s")
        spread = (fastest * 1e3, slowest * 1e3) if fastest and slowest else None
        return row["step_time_s"] * 1e3, spread
    value, factors = row["throughput"], step_range(row)
    return value, None if factors is None else (min(factors) * value, max(factors) * value)


def _draw(ax: Axes, rows: list[dict[str, Any]], kind: str) -> None:
    """One point per finished size, with its timed steps' spread, and a cross at the foot of
    the axes for each size that failed."""
    ok = sorted((r for r in rows if r.get("status") == "finished"),
                key=lambda r: r["per_worker_batch"])  # fmt: skip
    x = [r["per_worker_batch"] for r in ok]
    values = [_value(r, kind) for r in ok]
    ax.plot(x, [v for v, _ in values], "o-", color="C0", label="measured")
    spread = [(b, v, s) for b, (v, s) in zip(x, values, strict=True) if s is not None]
    if spread:
        below = [max(0.0, v - s[0]) for _, v, s in spread]
        above = [max(0.0, s[1] - v) for _, v, s in spread]
        ax.errorbar([b for b, _, _ in spread], [v for _, v, _ in spread], yerr=[below, above],
                    fmt="none", capsize=3, color="C0", alpha=0.7, label=SPREAD_LABEL)  # fmt: skip
    failed = [r for r in rows if r.get("status") != "finished"]
    for r in failed:
        why = "out of memory" if r.get("out_of_memory") else "failed"
        ax.plot([r["per_worker_batch"]], [0.02], "x", color="C3", ms=10, mew=2,
                transform=ax.get_xaxis_transform(), clip_on=False,
                label=f"{r['per_worker_batch']} per worker: {why}")  # fmt: skip
    batches = sorted({*x, *(r["per_worker_batch"] for r in failed)})
    ax.set_xscale("log", base=2)
    ax.set_xticks(batches, [str(b) for b in batches])
    ax.minorticks_off()
    ax.set_ylim(bottom=0)


def max_batch_figures(
    rows: list[dict[str, Any]], title: str, stop: str | None = None
) -> list[tuple[str, Figure]]:
    """The search's figures as (artifact kind, matplotlib Figure), not yet saved: time per
    step and throughput against the per-worker batch; `stop` (why the search stopped) is
    written under each."""
    if not any(r.get("status") == "finished" for r in rows):
        return []
    notes = [note for note in (stop, shared_host(rows)) if note]
    figures = []
    for kind, ylabel in (("step_time", "ms per step (the slowest rank's median)"),
                         ("throughput", "samples/s")):  # fmt: skip
        fig = Figure(figsize=(6.5, 4 + 0.2 * len(notes)))
        ax = fig.subplots()
        _draw(ax, rows, kind)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("per-worker batch (images)")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        for i, note in enumerate(reversed(notes)):
            fig.text(0.01, 0.01 + 0.045 * i, note, fontsize=7, style="italic", color="0.3",
                     va="bottom", wrap=True)  # fmt: skip
        tight_layout(fig, rect=(0, 0.05 * len(notes), 1, 1))
        figures.append((f"plot/{kind}", fig))
    return figures


def save_max_batch_figures(
    store: RunStore, study_id: int, rows: list[PointRow], out_dir: Path, stop: str | None = None
) -> list[tuple[int, str, Path]]:
    """Draw a stored search's figures under `out_dir`/scale-ID/plots: (its first run, kind,
    path) of each, for the caller to record (the report only reads the store). Nothing when
    no size fitted."""
    run_id = next((r.run_id for r in rows if r.status == "finished"), None)
    if run_id is None:  # no size fitted, or not node 0, which stores them
        return []
    study = store.get_study(study_id)
    title = f"largest-batch search, scale study {study_id}: {study['name']}"
    directory = out_dir / f"scale-{study_id}" / "plots"
    directory.mkdir(parents=True, exist_ok=True)
    saved: list[tuple[int, str, Path]] = []
    for kind, fig in max_batch_figures([r.to_dict() for r in rows], title, stop):
        path = (directory / f"{kind.split('/')[1]}.png").resolve()
        save_figure(fig, path)
        saved.append((run_id, kind, path))
    return saved
