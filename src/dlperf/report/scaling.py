"""Figures of a scaling study (matplotlib Agg, files only): throughput with the ideal line
(and, with --synthetic, the chunks' mean and its 95% interval), the time to train one epoch,
speedup, efficiency, the step split into compute and exposed communication, and cost. Each
figure draws one line per series (mode and batch, comm, strategy, bucket): a study of both
modes draws weak and strong scaling in the same figures.

Every figure is titled with the study, carries error bars from the spread of each point's
timed steps (the slowest rank's fastest and slowest step: `step_time_min_s`,
`step_time_max_s`), and says so on the figure when all workers shared one host. A point
marked unreliable (contended, too spread, faster than ideal: its `reliable` and
`reliability_note`) is drawn hollow over its line, with a note under the figure.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from matplotlib.axes import Axes
from matplotlib.figure import Figure  # no pyplot: figures that need no global state
from matplotlib.ticker import MaxNLocator

from dlperf.distributed.contracts import PointRow
from dlperf.distributed.scaling import series_name
from dlperf.paths import save_figure
from dlperf.report import tight_layout
from dlperf.store import RunStore

SPREAD_LABEL = "min-max over timed steps"
SERIES_GAP = 0.8  # bars of a gap between two series' groups on the step split
SERIES_WIDTH = 1.7  # inches each series' group of bars needs under it for its name


def _groups(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The finished rows by series, each named: "weak, 32 per worker: ddp/allreduce"."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        if row.get("status") == "finished":
            bucket = f" {row['bucket_mb']:g}MB" if row.get("bucket_mb") else ""
            name = series_name(row)
            label = f"{name}: " if name else ""
            label += f"{row['strategy']}/{row['comm']}{bucket}"
            groups.setdefault(label, []).append(row)
    return groups


def step_range(row: dict[str, Any]) -> tuple[float, float] | None:
    """(low, high) of the point's per-step throughput relative to its throughput: the
    global batch over the slowest and the fastest timed step, divided by samples / wall
    time. None when the row holds no spread."""
    fastest, slowest = row.get("step_time_min_s"), row.get("step_time_max_s")
    throughput, batch = row.get("throughput"), row.get("global_batch")
    if not (fastest and slowest and throughput and batch):
        return None
    return batch / slowest / throughput, batch / fastest / throughput


def _yerr(values: list[float], ranges: list[tuple[float, float]]) -> list[list[float]]:
    """Below/above distances for errorbar, from (low, high) factors of each value (never
    negative: the throughput over the whole wall time may sit just outside the steps')."""
    lows = [max(0.0, v - min(lo, hi) * v) for v, (lo, hi) in zip(values, ranges, strict=True)]
    highs = [max(0.0, max(lo, hi) * v - v) for v, (lo, hi) in zip(values, ranges, strict=True)]
    return [lows, highs]


def shared_host(rows: list[dict[str, Any]]) -> str | None:
    """The note for a study whose workers all ran on one host (one node, or every rank
    reporting the same host name); None when they did not."""
    finished = [r for r in rows if r.get("status") == "finished"]
    if not finished:
        return None
    hosts = {rank.get("host") for r in finished for rank in r.get("ranks") or []} - {None}
    if len(hosts) > 1:
        return None
    if len(hosts) == 1 or all(r.get("nodes", 1) == 1 for r in finished):
        where = f" ({next(iter(hosts))})" if hosts else ""
        return (
            f"single-host emulation: all workers shared one host{where}, its cores and "
            "memory bandwidth"
        )
    return None


UNRELIABLE_LABEL = "hollow: unreliable (see reliability_note)"


def unreliable_note(rows: list[dict[str, Any]]) -> str | None:
    """The figure's note when points are marked unreliable: which, and the CPU wait."""
    shaky = [r for r in rows if r.get("status") == "finished" and r.get("reliable") is False]
    if not shaky:
        return None
    waits = [r["cpu_wait_share"] for r in rows if r.get("cpu_wait_share") is not None]
    worst = f", threads waited for a CPU up to {max(waits):.0%} of their time" if waits else ""
    return f"hollow markers: {len(shaky)} unreliable point(s){worst}"


def hollow(ax: Axes, rows: list[dict[str, Any]], key: str, colour: int, marker: str = "o") -> None:
    """Draw the unreliable points of `rows` hollow over their line, once in the legend."""
    shaky = [r for r in rows if r.get("reliable") is False and r.get(key) is not None]
    if not shaky:
        return
    seen = UNRELIABLE_LABEL in ax.get_legend_handles_labels()[1]
    ax.plot([r["workers"] for r in shaky], [r[key] for r in shaky], marker, ms=9,
            mfc="white", mec=f"C{colour}", mew=1.5, linestyle="none",
            label=None if seen else UNRELIABLE_LABEL)  # fmt: skip


def study_figures(
    rows: list[dict[str, Any]], title: str = "scale study"
) -> list[tuple[str, Figure]]:
    """The study's figures as (artifact kind, matplotlib Figure), not yet saved."""
    groups = _groups(rows)
    if not groups:
        return []
    note = "; ".join(n for n in (shared_host(rows), unreliable_note(rows)) if n) or None

    def series(
        key: str,
        ideal: Callable[[list[dict[str, Any]], int], float] | None = None,
        inverse: bool = False,
    ) -> Callable[[Axes], None]:
        """One line per group, with the per-step spread (inverse: a value that falls as
        throughput rises, such as cost) as error bars, and the ideal line dotted."""

        def draw(ax: Axes) -> None:
            spread_label: str | None = SPREAD_LABEL
            for i, (label, mine) in enumerate(groups.items()):
                w = [r["workers"] for r in mine]
                ax.plot(w, [r[key] for r in mine], "o-", color=f"C{i}", label=label)
                hollow(ax, mine, key, i)
                spread = [
                    (r, s)
                    for r in mine
                    if r.get(key) is not None and (s := step_range(r)) is not None
                ]
                if spread:
                    ranges = [(1 / hi, 1 / lo) if inverse else (lo, hi) for _, (lo, hi) in spread]
                    values = [r[key] for r, _ in spread]
                    ax.errorbar(
                        [r["workers"] for r, _ in spread], values, yerr=_yerr(values, ranges),
                        fmt="none", capsize=3, color=f"C{i}", alpha=0.7, label=spread_label,
                    )  # fmt: skip
                    spread_label = None  # one legend entry for all groups
                if ideal is not None:
                    ideal_w = [ideal(mine, n) for n in w]
                    ax.plot(w, ideal_w, ":", color=f"C{i}", label=f"{label} ideal")

        return draw

    def linear(mine: list[dict[str, Any]], n: int) -> float:
        return float(mine[0]["throughput"] * n / mine[0]["workers"])

    def inverse_linear(mine: list[dict[str, Any]], n: int) -> float:
        return float(mine[0]["epoch_time_s"] * mine[0]["workers"] / n)

    def efficiency(ax: Axes) -> None:
        """Both definitions the course uses, each labelled: on throughput (solid) and on
        step time (dashed; weak scaling: T_base / T_N)."""
        series("efficiency")(ax)
        for i, (label, mine) in enumerate(groups.items()):
            timed = [r for r in mine if r.get("efficiency_time") is not None]
            if timed:
                ax.plot(
                    [r["workers"] for r in timed],
                    [r["efficiency_time"] for r in timed],
                    "s--",
                    color=f"C{i}",
                    alpha=0.8,
                    label=f"{label}, on step time",
                )
                hollow(ax, timed, "efficiency_time", i, marker="s")  # fmt: skip
        ax.axhline(1.0, linestyle=":", color="0.4", label="ideal")  # one for every series

    def throughput(ax: Axes) -> None:
        series("throughput", linear)(ax)
        label: str | None = "chunk mean, 95% CI (Student's t)"
        for i, mine in enumerate(groups.values()):
            chunked = [r for r in mine if r.get("throughput_ci95") is not None]
            if chunked:
                w = [r["workers"] for r in chunked]
                mean = [r["throughput_mean"] for r in chunked]
                ci = [r["throughput_ci95"] for r in chunked]
                ax.errorbar(
                    w,
                    mean,
                    yerr=ci,
                    fmt="none",
                    capsize=5,
                    elinewidth=2,
                    color=f"C{i}",
                    label=label,
                )
                label = None  # one legend entry for all groups

    # The step split: bars grouped by series, a gap between groups; each bar labelled with
    # its worker count, each group once with its series' name under them.
    positions, centres, at = [], [], 0.0
    for mine in groups.values():
        positions += [at + i for i in range(len(mine))]
        centres.append(at + (len(mine) - 1) / 2)
        at += len(mine) + SERIES_GAP

    def split(ax: Axes) -> None:
        flat = [r for mine in groups.values() for r in mine]
        compute = [(r["compute_s"] or r["step_time_s"]) * 1e3 for r in flat]
        comm = [(r["comm_exposed_s"] or 0.0) * 1e3 for r in flat]
        ax.bar(positions, compute, label="compute")
        ax.bar(positions, comm, bottom=compute, label="exposed communication")
        timed = [
            (x, r)
            for x, r in zip(positions, flat, strict=True)
            if r.get("step_time_min_s") and r.get("step_time_s")
        ]
        if timed:
            median = [r["step_time_s"] * 1e3 for _, r in timed]
            low = [max(0.0, (r["step_time_s"] - r["step_time_min_s"]) * 1e3) for _, r in timed]
            high = [max(0.0, (r["step_time_max_s"] - r["step_time_s"]) * 1e3) for _, r in timed]
            ax.errorbar(
                [x for x, _ in timed], median, yerr=[low, high], fmt="_", color="k", capsize=4,
                label=f"step time, median and {SPREAD_LABEL}",
            )  # fmt: skip
        ax.set_xticks(positions, [str(r["workers"]) for r in flat])
        for centre, name in zip(centres, groups, strict=True):
            ax.annotate(
                name.replace(": ", "\n"), (centre, 0), xycoords=("data", "axes fraction"),
                xytext=(0, -22), textcoords="offset points", ha="center", va="top", fontsize=7,
            )  # fmt: skip
        ax.xaxis.labelpad = 34  # below the series' names
        ax.margins(y=0.3)  # room above the tallest bar for the legend

    flat = [r for mine in groups.values() for r in mine]
    # Training images of an epoch: epoch_time_s is defined as images / throughput.
    images = {round(r["epoch_time_s"] * r["throughput"]) for r in flat}
    of = f" of {images.pop():,} images" if len(images) == 1 else ""
    figures = [
        ("plot/throughput", "samples/s", throughput),
        ("plot/train_time", f"s to train one epoch{of}", series("epoch_time_s", inverse_linear,
                                                                inverse=True)),
    ]  # fmt: skip
    # scale max-batch compares no points: no speedup or efficiency to draw.
    if any(r.get("speedup") is not None for r in flat):
        figures += [
            ("plot/speedup", "speedup", series("speedup", lambda mine, n: n / mine[0]["workers"])),
            ("plot/efficiency", "efficiency (solid: on throughput, dashed: on time)", efficiency),
        ]  # fmt: skip
    figures.append(("plot/step_split", "ms per step", split))
    if all(r.get("cost_per_epoch") is not None for r in flat):
        figures.append(("plot/cost", "cost per epoch", series("cost_per_epoch", inverse=True)))
    # The step split widens with its series, so that their names fit side by side.
    wide = max(6.0, 1.0 + SERIES_WIDTH * len(groups))
    return [
        (kind, _figure(title, ylabel, draw, note, wide if kind == "plot/step_split" else 6.0))
        for kind, ylabel, draw in figures
    ]


def _figure(
    title: str, ylabel: str, draw: Callable[[Axes], None], note: str | None, width: float = 6.0
) -> Figure:
    fig = Figure(figsize=(width, 4.3 if note else 4))
    ax = fig.subplots()
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # before draw: it may set its own
    draw(ax)
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("workers")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    if note:
        fig.text(0.01, 0.01, note, fontsize=7, style="italic", color="0.3", va="bottom")
        tight_layout(fig, rect=(0, 0.04, 1, 1))
    else:
        tight_layout(fig)
    return fig


def plot_study(
    directory: Path, rows: list[dict[str, Any]], study: tuple[int, str]
) -> list[tuple[str, Path]]:
    """Write the figures of study `study` = (id, name) into `directory`; returns (artifact
    kind, path) pairs."""
    figures = study_figures(rows, f"scale study {study[0]}: {study[1]}")
    if not figures:
        return []
    directory.mkdir(parents=True, exist_ok=True)
    saved = []
    for kind, fig in figures:
        path = directory / f"{kind.split('/')[1]}.png"
        save_figure(fig, path)
        saved.append((kind, path))
    return saved


def save_study_figures(
    store: RunStore, study_id: int, rows: list[PointRow], out_dir: Path
) -> list[tuple[int, str, Path]]:
    """Draw a stored study's figures under `out_dir`/scale-ID/plots: (its first run, kind,
    path) of each, for the caller to record (the store keeps artifacts per run; the report
    only reads it). Nothing when no point finished."""
    run_id = rows[0].run_id if any(r.status == "finished" for r in rows) else None
    if run_id is None:  # no point finished, or not node 0, which stores them
        return []
    study = store.get_study(study_id)
    saved: list[tuple[int, str, Path]] = []
    directory = out_dir / f"scale-{study_id}" / "plots"
    for kind, path in plot_study(directory, [r.to_dict() for r in rows], (study_id, study["name"])):
        saved.append((run_id, kind, path.resolve()))
    return saved
