"""The report's figures, as (caption, PNG data URI) pairs. Curves of stored metrics come from
`dlperf.report.runs.draw_runs`, scaling figures from `dlperf.report.scaling.study_figures`,
a sweep's from `dlperf.report.sweep`, a staleness study's from `dlperf.report.staleness` and
a distill study's from `dlperf.report.distill` (a largest-batch search's, from
`dlperf.report.max_batch`, pages.py draws); what only the report draws (phase breakdown,
all-reduce against the α-β model, predicted against measured) is here.
matplotlib without pyplot; no file is written."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from matplotlib.figure import Figure

from dlperf.distributed.contracts import AllreduceSummary
from dlperf.errors import UserError
from dlperf.report import fold
from dlperf.report.runs import (
    MAX_DRAWN,
    default_keys,
    draw_runs,
    drawable,
    fraction_note,
    left_out_note,
    line_style,
    nan_note,
    rows_of,
    short_name,
    ylabel,
)
from dlperf.report.site.html import FIG_WIDTH_IN, png
from dlperf.store import RunStore
from dlperf.store.keys import per_epoch
from dlperf.store.record import RunRecord

if TYPE_CHECKING:
    from dlperf.distill.summary import BaselineRow, Student, Trained

Figures = list[tuple[str, str]]  # (caption, data URI)
# The order the training step runs its phases in (dlperf.engine.timers.PHASES, which imports
# torch; a test holds the two equal): the stacked bars and their legend follow it.
PHASES = ("data", "h2d", "forward", "backward", "optimizer")


def _finish(fig: Figure, ax: Any, title: str, xlabel: str, ylabel: str) -> str:
    ax.set_title(title, fontsize=9)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=9)
    return png(fig)


def run_curves(store: RunStore, run: RunRecord) -> tuple[Figures, list[str]]:
    """Training loss, validation accuracy and learning rate against the epoch; loss and
    accuracy against the wall time (the schedule is drawn once); notes for what the run
    cannot show."""
    stored = set(store.metric_keys(run.id))
    figures, notes = [], []
    try:
        fig, done = draw_runs(store, [run.id], [], "epoch", fitted=False)
    except UserError as e:  # its hint names `runs plot`'s --key, which a report has not
        notes.append(f"no curves against epoch: {e.message}; its metrics: "
                     f"{', '.join(sorted(stored)) or 'none'}")  # fmt: skip
    else:
        notes += done.warnings
        figures.append((f"{', '.join(done.keys)} against epoch", png(fig)))
    timed = [k for k in default_keys("time", stored) if not k.endswith("/lr")]
    if timed:
        figures.append(against_time(store, run, timed))
    return figures, notes


def spread(rows: list[tuple[int, float]]) -> tuple[list[float], bool]:
    """The wall time of each (step, wall time) row, in the order they were logged (wall time,
    then row), and whether any row was moved. Rows written to the store in one batch share
    the batch's time, which is when its last step ended; each is placed instead between the
    batch before's time and its own in proportion to its step (the batch's steps taken at an
    even pace), the first batch at the second's pace; a batch whose steps do not follow the
    one before's (a loop that went back and logged steps again), in proportion to its place
    in the batch. A row alone at its time keeps it."""
    groups: list[list[tuple[int, float]]] = []
    for step, wall in rows:
        if groups and groups[-1][0][1] == wall:
            groups[-1].append((step, wall))
        else:
            groups.append([(step, wall)])
    ends = [group[-1] for group in groups]  # (last step, time) of each batch
    times: list[float] = []
    for i, group in enumerate(groups):
        last, wall = ends[i]
        if len(group) == 1:
            times.append(wall)
        elif i > 0:
            before, then = ends[i - 1]
            if all(before < s <= last for s, _ in group):
                times += [then + (wall - then) * (s - before) / (last - before) for s, _ in group]
            else:  # steps logged again: by place, never before the batch before's time
                times += [then + (wall - then) * (k + 1) / len(group) for k in range(len(group))]
        elif len(groups) > 1 and ends[1][0] > last and all(s <= last for s, _ in group):
            pace = (ends[1][1] - wall) / (ends[1][0] - last)  # seconds per step
            times += [wall - pace * (last - s) for s, _ in group]
        else:  # one batch and nothing to pace it by
            times += [wall] * len(group)
    return times, len(groups) < len(rows)


def against_time(store: RunStore, run: RunRecord, keys: list[str]) -> tuple[str, str]:
    """`keys` against the wall time since the run's first step, one subplot each, the rows of
    a batch spread by `spread` (the x axis then says so), joined in the order they were
    logged."""
    rows, _ = rows_of(store, run.id, keys, in_time=True)
    placed, moved = {}, False
    for key in keys:
        placed[key], spread_out = spread([(step, wall) for step, _, wall in rows[key]])
        moved |= spread_out
    origin = min(min(times) for times in placed.values() if times)
    fig = Figure(figsize=(FIG_WIDTH_IN, 1.2 + 2.2 * len(keys)))
    axes = fig.subplots(len(keys), 1, sharex=True, squeeze=False)[:, 0]
    left_out = 0
    nan: dict[str, int] = {}  # NaN values per key: kept in the line (a gap), but no point
    fractions: list[str] = []  # an accuracy in percent drawn on its fraction axis
    for ax, key in zip(axes, keys, strict=True):
        shown = drawable([t - origin for t in placed[key]], [v for _, v, _ in rows[key]])
        if gone := len(rows[key]) - len(shown):
            left_out += gone
            left_out_note(ax, gone)
        ys = [y for _, y in shown]
        if count := sum(1 for y in ys if math.isnan(y)):
            nan[key] = count
        if note := fraction_note(run.id, key, ys):
            fractions.append(note)
        if not any(math.isfinite(y) for y in ys):
            # An empty subplot said nothing of why.
            ax.text(0.5, 0.5, "no value to draw", transform=ax.transAxes, ha="center",
                    va="center", fontsize=9, color="0.4")  # fmt: skip
        # A line draws nothing of a point with no finite neighbour (one point, or one between
        # NaNs): those get a marker, as `runs plot` gives them.
        marks = line_style(ys, per_epoch(key))
        ax.plot([x for x, _ in shown], ys, "-", ms=3, lw=1.2, color="C0", **marks)
        fold(ax.set_ylabel(ylabel(key)), fig.bbox.height / len(keys) * 0.85)  # a 100-char key
        ax.grid(alpha=0.3)
    axis = "wall time since the run's first logged step (s)"
    if moved:
        axis += "; steps written to the store together placed between the writes by step"
    axes[-1].set_xlabel(axis)
    title = axes[0].set_title(f"{short_name(run.name)}: {', '.join(keys)} against wall time",
                              fontsize=10)  # fmt: skip
    fold(title, fig.bbox.width * 0.8)
    caption = f"{', '.join(keys)} against wall time"
    if moved:
        caption += (
            " (the store holds one time per batch of rows: the steps of a batch are spread "
            "evenly between its time and the batch before's)"
        )
    if left_out:
        caption += f" ({left_out} point{'s' * (left_out > 1)} beyond ±{MAX_DRAWN:g} left out)"
    if nan:
        caption += (
            f" ({nan_note(sum(nan.values()))}: "
            + ", ".join(f"{count} of {key}" for key, count in nan.items())
            + ")"
        )
    for note in fractions:
        caption += f" ({note})"
    return caption, png(fig)


def phases(store: RunStore, run: RunRecord) -> Figures:
    """Seconds per step by phase as stacked bars in the order the step runs them (data at the
    bottom): one bar per epoch from the stored phase/* metrics, else one bar from the
    summary's phases."""
    stored = {
        key.removeprefix("phase/").removesuffix("_s"): store.metrics(run.id, key)
        for key in store.metric_keys(run.id)
        if key.startswith("phase/")
    }
    # A NaN bar is no bar, and every bar stacked on it (its bottom NaN) was left out too; an
    # infinite one is a bar to infinity, every bar stacked on it at infinity: both left out.
    left_out = [v for values in stored.values() for _, v in values if not math.isfinite(v)]
    by_phase = {
        name: finite
        for name, values in stored.items()
        if (finite := {e: v for e, v in values if math.isfinite(v)})
    }
    if by_phase:
        epochs = sorted({e for values in by_phase.values() for e in values})
        labels = [str(e) for e in epochs]
        xlabel = "epoch"
    else:
        summary_phases = run.trained.phases or {}
        # The store keeps a summary's NaN or infinity as null (strict JSON): left out alike.
        left_out = [s for s in summary_phases.values() if not _finite(s)]
        by_phase = {name: {0: s} for name, s in summary_phases.items() if _finite(s)}
        if not by_phase:
            return []
        epochs, labels, xlabel = [0], ["whole run"], "run"
    order = sorted(by_phase, key=lambda p: PHASES.index(p) if p in PHASES else len(PHASES))
    fig = Figure(figsize=(FIG_WIDTH_IN, 3.6))
    ax = fig.subplots()
    bottom = [0.0] * len(epochs)
    for i, name in enumerate(order):
        heights = [by_phase[name].get(e, 0.0) * 1e3 for e in epochs]
        ax.bar(labels, heights, bottom=bottom, label=name, color=f"C{i % 10}")
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    ax.set_title(f"{run.name}: time per step by phase", fontsize=10)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("ms per step")
    ax.grid(alpha=0.3, axis="y")
    # Beside the bars, top to bottom in the step's order: the stack reads bottom to top.
    ax.legend(title="phase, in step order", loc="upper left", bbox_to_anchor=(1.01, 1),
              fontsize=9)  # fmt: skip
    caption = "phase breakdown, milliseconds per step (stacked, first phase at the bottom)"
    if left_out:
        caption += f" ({_not_finite_note(left_out, 'phase value')})"
    return [(caption, png(fig))]


def _finite(value: object) -> bool:
    """Whether `value` is a number a bar can be drawn of: not NaN, infinite or null."""
    return isinstance(value, int | float) and math.isfinite(value)


def _not_finite_note(values: Sequence[float | None], what: str) -> str:
    """What a caption says of `values` left out for not being finite: `nan_note`'s line when
    all are NaN; "2 phase values are infinite, left out" when all are infinite; NaN and
    infinite counted apart when both; "not finite" alone for a null (a stored summary's NaN
    or infinity, which it does not tell apart)."""
    nan = sum(1 for v in values if v is not None and math.isnan(v))
    if nan == len(values):
        return nan_note(nan, what)
    count = f"{len(values)} {what}{'s are' if len(values) > 1 else ' is'}"
    infinite = sum(1 for v in values if v is not None and math.isinf(v))
    if infinite == len(values):
        return f"{count} infinite, left out"
    if nan + infinite == len(values):
        return f"{count} not finite ({nan} NaN, {infinite} infinite), left out"
    return f"{count} not finite, left out"


def predicted(run: RunRecord, measured: list[float]) -> Figures:
    """A `predict --measure` run: the PALEO prediction beside the measured step time."""
    summary = run.summary
    if summary.get("predicted_s") is None or not measured:
        return []
    fig = Figure(figsize=(FIG_WIDTH_IN, 3.4))
    ax = fig.subplots()
    median = summary.get("measured_median_s") or sorted(measured)[len(measured) // 2]
    low, high = min(measured), max(measured)
    ax.bar(["predicted (PALEO)"], [summary["predicted_s"] * 1e3], color="C0", label="predicted")
    ax.bar(["measured"], [median * 1e3], color="C1", label="measured median")
    ax.errorbar(
        ["measured"], [median * 1e3], yerr=[[(median - low) * 1e3], [(high - median) * 1e3]],
        fmt="none", color="k", capsize=4, label=f"min-max over {len(measured)} repetitions",
    )  # fmt: skip
    error = summary.get("error_pct")
    title = f"{run.name}: predicted vs measured" + (
        f" (error {error:+.0f}%)" if error is not None else ""
    )
    return [("predicted against measured time per step", _finish(fig, ax, title, "", "ms"))]


def allreduce(runs: list[RunRecord], title: str) -> Figures:
    """All-reduce time and bus bandwidth against message size per worker count, with the
    fitted α-β ring model T(n, S) = 2(n−1)·α + 2(n−1)/n · S/B (dlperf.distributed.allreduce)."""
    summaries = [s for run in runs if (s := AllreduceSummary.stored(run.summary))]
    rows = [r for s in summaries for r in s.rows]
    if not rows:
        return []
    ring = next((s.ring_model for s in summaries), None)
    fig = Figure(figsize=(FIG_WIDTH_IN, 3.8))
    left, right = fig.subplots(1, 2)
    for i, n in enumerate(sorted({int(r["workers"]) for r in rows})):
        mine = sorted((r for r in rows if int(r["workers"]) == n), key=lambda r: r["bytes"])
        sizes = [r["bytes"] for r in mine]
        left.plot(sizes, [r["time_s"] * 1e6 for r in mine], "o", color=f"C{i}",
                  label=f"{n} workers, measured")  # fmt: skip
        right.plot(sizes, [r.get("busbw_gbps") or 0.0 for r in mine], "o", color=f"C{i}",
                   label=f"{n} workers, measured")  # fmt: skip
        if ring and n > 1:
            alpha, bandwidth = ring["alpha_s"], ring["bandwidth_bytes_per_s"]
            model = [2 * (n - 1) * alpha + 2 * (n - 1) / n * s / bandwidth for s in sizes]
            # A line of one message size draws nothing: the model's point is a bar across it.
            style = "-" if len(sizes) > 1 else "_"
            left.plot(sizes, [t * 1e6 for t in model], style, color=f"C{i}", ms=14,
                      label=f"{n} workers, α-β ring model")  # fmt: skip
            busbw = [s / t * 2 * (n - 1) / n / 1e9 for s, t in zip(sizes, model, strict=True)]
            right.plot(sizes, busbw, style, color=f"C{i}", ms=14,
                       label=f"{n} workers, α-β ring model")  # fmt: skip
    for ax in (left, right):
        ax.set_xscale("log", base=2)
    left.set_yscale("log")
    fit = ""
    if ring:
        fit = (
            f" (α = {ring['alpha_s'] * 1e6:.1f} µs, B = {ring['bandwidth_bytes_per_s'] / 1e9:.2f}"
            f" GB/s, fit error {ring['rmse_pct']:.0f}%)"
        )
    _finish(fig, left, title + fit, "message size (bytes)", "all-reduce time (µs)")
    uri = _finish(fig, right, "bus bandwidth", "message size (bytes)", "bus bandwidth (GB/s)")
    return [("all-reduce time and bus bandwidth against message size" + fit, uri)]


def comm_model(rows: list[dict[str, Any]], title: str) -> Figures:
    """Predicted (ring model; bucket/overlap model where stored) against measured
    communication per step, for the points whose prediction was stored; the exposed time
    with its 95% interval where the point measured one."""
    points = [
        r for r in rows if r.get("ring_predicted_s") is not None and r.get("status") != "failed"
    ]
    if not points:
        return []
    fig = Figure(figsize=(FIG_WIDTH_IN, 3.8))
    ax = fig.subplots()
    labels = [f"{r['workers']} w {r.get('strategy', '')}/{r.get('comm', '')}" for r in points]
    overlap = any(r.get("overlap_predicted_s") is not None for r in points)
    bars = 4 if overlap else 3
    width = 0.8 / bars
    x = [i - 0.4 + width / 2 for i in range(len(points))]  # the first bar of each point

    def bar(k: int, values: list[float], label: str, **kw: Any) -> None:
        ax.bar([i + k * width for i in x], values, width, label=label, **kw)

    bar(0, [r["ring_predicted_s"] * 1e3 for r in points], "predicted: α-β ring model")
    if overlap:
        bar(1, [(r.get("overlap_predicted_s") or 0.0) * 1e3 for r in points],
            "predicted: bucket/overlap model")  # fmt: skip
    comm = [((r.get("ddp_logging_s") or {}).get("backward_comm_time") or 0.0) * 1e3 for r in points]
    bar(bars - 2, comm, "measured: DDP backward communication")
    exposed = [(r.get("comm_exposed_s") or 0.0) * 1e3 for r in points]
    ci = [(r.get("comm_exposed_ci95_s") or 0.0) * 1e3 for r in points]
    bar(bars - 1, exposed, "measured: exposed communication (95% interval)",
        yerr=ci, capsize=3)  # fmt: skip
    ax.set_xticks(range(len(points)), labels, fontsize=9)
    uri = _finish(fig, ax, title, "point", "ms per step")
    return [("communication per step, predicted against measured", uri)]


def sweep(
    curves: list[tuple[dict[str, Any], list[tuple[int, float]]]],
    groups: list[dict[str, Any]],
    axes: dict[str, list[Any]],
    target: float | None,
) -> Figures:
    """The figures `dlperf sweep` draws, drawn again from the stored runs."""
    from dlperf.report.sweep import draw_sweep

    captions = {
        "val_error": "validation error against epoch, each point's mean over its seeds",
        "time_to_target": "wall time to the target accuracy per point",
    }
    drawn = draw_sweep(curves, groups, axes, target)
    return [(captions.get(name, name.replace("_", " ")), png(fig)) for name, fig in drawn.items()]


def staleness(
    curves: Mapping[str, Sequence[float | None]], histogram: Mapping[str, int]
) -> Figures:
    """Synchronous against emulated asynchronous SGD, beside the staleness histogram."""
    from dlperf.report.staleness import draw_staleness

    caption = "validation accuracy per epoch, sync vs async; staleness histogram"
    return [(caption, png(draw_staleness(curves, histogram)))]


def distill(
    study: tuple[int, str],
    teacher: Trained | None,
    baseline: BaselineRow | None,
    students: Sequence[Student],
) -> Figures:
    """A distill study's figure as `dlperf distill` draws it: student test accuracy against K,
    the teacher and the baseline as lines (arguments as `draw_distill` takes them)."""
    from dlperf.report.distill import draw_distill

    caption = "student test accuracy against K (images kept per class), teacher and baseline"
    return [(caption, png(draw_distill(study, teacher, baseline, students)))]
