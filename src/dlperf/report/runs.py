"""Overlays of stored metrics for one or many runs (`dlperf runs plot`): one subplot per
metric key, one line per run, against the global step, the (fractional) epoch or the wall
time since the run's first metric row. matplotlib, files only.

Per-step keys (train/loss, train/lr, ...) are stored at the global step; per-epoch keys
(epoch/*, val/*, phase/*) at the epoch number 1..E. The two meet through the run summary's
`steps_per_epoch`: a step s is epoch s / steps_per_epoch, and epoch e ends at step
e * steps_per_epoch.
"""

from __future__ import annotations

import math
import operator
import textwrap
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure  # no pyplot: files only, no global state
from matplotlib.ticker import MaxNLocator
from sqlalchemy import func, select

from dlperf.errors import UserError
from dlperf.formatting import KEYS_LISTED, few
from dlperf.parsing import did_you_mean, flatten, one_line, stored_as
from dlperf.paths import save_figure
from dlperf.report import LOOKS, fold, look, tight_layout
from dlperf.store import RunStore
from dlperf.store.keys import per_epoch
from dlperf.store.query import differing_keys, setting, tracked
from dlperf.store.record import RunRecord
from dlperf.store.runstore import garbled_metrics
from dlperf.store.schema import Metric

FORMATS = ("png", "svg", "pdf")
X_AXES = ("step", "epoch", "time")

# Config keys a legend leaves out: the name is in it already, and where a run wrote its
# files says nothing about how it trained.
UNTOLD = ("run.name", "run.out_dir")
# The largest magnitude drawn: matplotlib's tick locator overflows on an axis of values near
# the float range's end (1.7e308 with 1.0, or 8e307 with -8e307); ±1e307 draws.
MAX_DRAWN = 1e307
VALUE_CHARS = 16  # a longer value is shortened in a legend; a key never is
MOST_KEYS = 6  # differing keys named per run; `dlperf runs compare` lists them all
LEGEND_LINE = 72  # characters per legend line: about half the width of a figure
NAME_CHARS = 60  # a longer run name is shortened in a legend or a title; --json keeps it
LEGEND_PT = 7  # the legend's font size (the report raises it to its least, 9 pt)

# Keys drawn from a stored accuracy as 1 - accuracy: the error curves courses ask for.
ERRORS = {
    "val/error": "val/acc1",
    "val/error5": "val/acc5",
    "epoch/train_error": "epoch/train_acc1",
}

X_LABELS = {
    "step": "global step",
    "epoch": "epoch",
    "time": "wall time since the run's first metric (s)",
}
UNITS = {
    "epoch/time_s": "s",
    "epoch/throughput": "samples/s",
    "val/acc1": "fraction",
    "val/acc5": "fraction",
    "epoch/train_acc1": "fraction",
}


def check_out(path: Path) -> None:
    """The figure's format comes from the name: .png, .svg or .pdf, nothing else."""
    if path.suffix.lstrip(".").lower() not in FORMATS:
        raise UserError(
            f"--out {path}: unknown figure format {path.suffix or '(no suffix)'!r}",
            "end the name in .png, .svg or .pdf",
        )


def once(run_ids: list[int]) -> None:
    """Refuse a run given more than once, in one line, as `runs compare 1 1` refuses it:
    `runs plot 1 1 1` drew run 1 once, no word, into runs-1-1-1.png (a typo for 1 2 3?)."""
    repeated = next((i for i in run_ids if run_ids.count(i) > 1), None)
    if repeated is not None:
        count = run_ids.count(repeated)
        times = "twice" if count == 2 else f"{count} times"
        raise UserError(
            f"runs plot draws each run once, got run {repeated} {times}",
            "give each run ID once, e.g. dlperf runs plot 1 2",
        )


def check_x(x: str) -> None:
    if x not in X_AXES:
        raise UserError(f"--x {x!r}: not an axis", f"choose one of {', '.join(X_AXES)}")


def ylabel(key: str) -> str:
    if key in ERRORS:
        return f"{key} (fraction, 1 - {ERRORS[key]})"
    unit = UNITS.get(key) or ("s" if key.startswith("phase/") and key.endswith("_s") else None)
    return f"{key} ({unit})" if unit else key


def default_keys(x: str, stored: set[str]) -> list[str]:
    """Training loss (per step; per epoch on an epoch axis or when no step was logged),
    validation accuracy and learning rate: those that any of the runs stored."""
    loss = ["train/loss", "epoch/train_loss"]
    if x == "epoch":
        loss.reverse()
    keys = []
    for choices in (loss, ["val/acc1"], ["train/lr", "epoch/lr"]):
        found = next((k for k in choices if k in stored), None)
        if found is not None:
            keys.append(found)
    return keys


@dataclass
class RunsPlot:
    """What `plot_runs` drew: the file, the axis, the keys, and per run its points per key."""

    path: Path
    x: str
    keys: list[str]
    runs: list[dict[str, Any]]
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "path": str(self.path)}


def drawable(xs: list[float], ys: list[float]) -> list[tuple[float, float]]:
    """The (x, y) points a figure can show: a y past ±MAX_DRAWN is left out (matplotlib's
    tick locator overflows on an axis spanning it: 1e308 and -1e308, which `track` takes,
    took `runs plot` and `report` down); the caller says how many."""
    return [(x, y) for x, y in zip(xs, ys, strict=True) if not abs(y) > MAX_DRAWN]


def line_style(ys: list[float], marked: bool) -> dict[str, Any]:
    """The markers of a line of the values `ys` (keywords of `ax.plot`; the line's own colour
    and dashes are the caller's): one on every point where each is `marked` (per-epoch keys),
    else on the finite values with no finite neighbour alone: a line draws nothing of a point
    alone (one point, or one between NaNs, which break a line)."""
    if marked:
        return {"marker": "o"}
    finite = [math.isfinite(y) for y in ys]
    alone = [
        i
        for i, ok in enumerate(finite)
        if ok and not (i > 0 and finite[i - 1]) and not (i + 1 < len(ys) and finite[i + 1])
    ]
    return {"marker": "o", "markevery": alone} if alone else {}


def nan_note(count: int, what: str = "value") -> str:
    """What a caption or a warning says of `count` NaN values: "2 values are NaN (not a
    number), left out"."""
    return f"{count} {what}{'s are' if count > 1 else ' is'} NaN (not a number), left out"


def fraction_note(run_id: int, key: str, values: list[float]) -> str | None:
    """The warning for a key drawn on a fraction axis (an accuracy, or an error drawn as 1 -
    its accuracy) whose stored accuracy leaves [0, 1]: an accuracy logged in percent drew
    1 - 53 = -52 as a fraction with no word (`converge` refuses such values)."""
    source = ERRORS.get(key, key)
    if UNITS.get(source) != "fraction":
        return None
    stored = [1 - v for v in values] if key in ERRORS else values
    outside = [v for v in stored if math.isfinite(v) and not 0 <= v <= 1]
    if not outside:
        return None
    note = (
        f"run {run_id}: {source} holds {outside[0]:g} ({len(outside)} "
        f"value{'s' * (len(outside) > 1)} outside [0, 1]), not a fraction (percent?)"
    )
    return note + (
        f": {key} = 1 - {source} is drawn at {1 - outside[0]:g}" if key in ERRORS else ""
    )


def left_out_note(ax: Any, gone: int) -> None:
    """Says on the subplot how many of its points `drawable` left out."""
    ax.text(0.01, 0.02, f"{gone} point{'s' * (gone > 1)} beyond ±{MAX_DRAWN:g} left out",
            ha="left", va="bottom", transform=ax.transAxes, fontsize=7, color="0.4")  # fmt: skip


def _short(value: Any) -> str:
    """A config value as a legend shows it: as --set takes it (`setting`: 1 and "1" read
    apart, as x=1 and x="1"), None as "-" as a key the run lacks; its head, or for a path its
    tail, within VALUE_CHARS."""
    if value is None:
        return "-"
    text = f"{value:g}" if isinstance(value, float) else setting(value)
    if len(text) <= VALUE_CHARS:
        return text
    if "/" in text:
        return "…" + text[1 - VALUE_CHARS :]
    return text[: VALUE_CHARS - 1] + "…"


def short_name(name: str) -> str:
    """A run's name as a legend or a title shows it: on one line, its head within NAME_CHARS
    (a 200-character name was a legend wider than the figure)."""
    name = one_line(name)  # a name stored before U+202E was refused
    return name if len(name) <= NAME_CHARS else name[: NAME_CHARS - 1] + "…"


def legend_labels(runs: list[RunRecord]) -> list[str]:
    """ "run 3: digits (train.lr=0.01, augment.cutout=8)": each run's id and (short) name, and
    the config keys whose values differ between the runs (MOST_KEYS of them, then how many
    more), wrapped between keys into lines of LEGEND_LINE characters (a longer key inside)."""
    flat = [flatten(r.config or {}) for r in runs]
    keys = [k for k in differing_keys(flat) if k not in UNTOLD]
    labels = []
    for run, config in zip(runs, flat, strict=True):
        label = f"run {run.id}: {short_name(run.name)}"
        if keys:
            told = [f"{k}={_short(config.get(k))}" for k in keys[:MOST_KEYS]]
            if len(keys) > MOST_KEYS:
                told.append(f"+{len(keys) - MOST_KEYS} more")
            label += f" ({', '.join(told)})"
        lines = textwrap.wrap(label, LEGEND_LINE, break_on_hyphens=False)
        labels.append("\n".join(lines))
    return labels


Row = tuple[int, float, float]  # step, value, wall time


def rows_of(
    store: RunStore, run_id: int, keys: list[str], in_time: bool = False
) -> tuple[dict[str, list[Row]], float | None]:
    """(step, value, wall_time) rows of `keys` (an error key: 1 - its accuracy's), in step
    order, or `in_time` in the order they were logged (wall time, then row), and the wall
    time of the run's first metric row (the time axis' zero). A time axis joins its points in
    time order: in step order, a loop that went back and logged steps again drew a zigzag
    back in time."""
    sources = {ERRORS.get(k, k) for k in keys}
    order = (Metric.wall_time, Metric.id) if in_time else (Metric.step, Metric.id)
    query = (
        select(Metric.key, Metric.step, Metric.value, Metric.wall_time)
        .where(Metric.run_id == run_id, Metric.key.in_(sources))
        .order_by(Metric.key, *order)
    )
    first = select(func.min(Metric.wall_time)).where(Metric.run_id == run_id)
    stored: dict[str, list[Row]] = {k: [] for k in sources}
    with store.engine.connect() as conn:
        read = conn.execute(query).all()
        origin = conn.execute(first).scalar()
    try:
        for key, step, value, wall in read:
            # operator.index: a step set by hand to 1.5 is refused, not read as step 1
            stored[key].append(
                (operator.index(step), math.nan if value is None else float(value), float(wall))
            )
    except (TypeError, ValueError):
        # A row set by hand to another type: the one line naming the run, where it can say it.
        garbled = garbled_metrics(store.engine, run_id, read)
        if garbled is None:
            raise
        raise garbled from None
    rows = {
        k: [(step, 1 - value, wall) for step, value, wall in stored[ERRORS[k]]]
        if k in ERRORS
        else stored[k]
        for k in keys
    }
    return rows, origin


def _x_values(
    key: str,
    x: str,
    rows: list[Row],
    origin: float | None,
    steps_per_epoch: float | None,
    tracked: bool = False,
) -> list[float] | None:
    """The rows' positions on the x axis; None when the run cannot place them there. A
    `tracked` run's rows are at the steps it logged them, so never on the epoch axis."""
    if x == "time":
        return [wall - origin for _, _, wall in rows] if origin is not None else None
    steps = [float(step) for step, _, _ in rows]
    if tracked:
        return steps if x == "step" else None
    if (x == "epoch") == per_epoch(key):
        return steps  # already in the axis' unit
    if not steps_per_epoch:
        return None
    if x == "epoch":
        return [s / steps_per_epoch for s in steps]
    return [s * steps_per_epoch for s in steps]


def plot_runs(store: RunStore, run_ids: list[int], keys: list[str], x: str, path: Path) -> RunsPlot:
    """Overlay `keys` (default: training loss, val/acc1, learning rate) of the runs and save
    the figure to `path` (PNG, SVG or PDF by its suffix)."""
    fig, plot = draw_runs(store, run_ids, keys, x)
    save_figure(fig, path)
    plot.path = path
    return plot


def draw_runs(
    store: RunStore, run_ids: list[int], keys: list[str], x: str, fitted: bool = True
) -> tuple[Figure, RunsPlot]:
    """The figure `plot_runs` saves, not yet saved (its RunsPlot's path is empty). `fitted`:
    margins fitted to the labels (tight_layout, which draws the figure once more), else fixed
    margins that fit dlperf's own labels (the report draws hundreds of these)."""
    once(run_ids)
    runs = [store.get_run(run_id) for run_id in run_ids]  # unknown: error
    stored_by_run = {r.id: set(store.metric_keys(r.id)) for r in runs}
    stored = set().union(*stored_by_run.values())
    stored |= {error for error, accuracy in ERRORS.items() if accuracy in stored}
    which = ", ".join(str(r.id) for r in runs)
    if not stored:
        raise UserError(f"run(s) {which} stored no metrics", "see `dlperf runs show`")
    # The first few: a run of 10,000 keys was a 129,000-character "one line".
    listing = f"stored keys: {few(sorted(stored), KEYS_LISTED)}"
    # café typed (NFC), stored as cafe\u0301 (NFD): the stored key
    keys = [stored_as(key, stored) or key for key in keys]
    for key in keys:
        if key not in stored:
            hint = did_you_mean(key, stored, listing)
            raise UserError(f"no metric {key!r} in run(s) {which}", hint)
    keys = list(dict.fromkeys(keys)) or default_keys(x, stored)
    if not keys:
        raise UserError(
            f"run(s) {which} stored none of the default metrics "
            "(train/loss or epoch/train_loss, val/acc1, train/lr)",
            f"choose with --key; {listing}",
        )

    warnings: list[str] = []
    fig = Figure(figsize=(7, 1.2 + 2.4 * len(keys)))
    axes = fig.subplots(len(keys), 1, sharex=True, squeeze=False)
    drawn = []
    off_axis = False  # whether a run's key was left out for the axis (another one may place it)
    left_out: dict[Any, int] = {}  # points past MAX_DRAWN per subplot
    lines: dict[str, Any] = {}  # a line of each run drawn, by its legend label
    for i, (run, label) in enumerate(zip(runs, legend_labels(runs), strict=True)):
        rows, origin = rows_of(store, run.id, keys, in_time=x == "time")
        spe = run.summary.get("steps_per_epoch")
        by_steps = tracked(run)
        points: dict[str, int] = {}
        steps_only = []  # keys of a tracked run asked on the epoch axis
        for ax, key in zip(axes[:, 0], keys, strict=True):
            mine = rows[key]
            if not mine:  # said: plotted with others that have it, the run was dropped unsaid
                warnings.append(f"run {run.id} has no {key}")
                continue
            xs = _x_values(key, x, mine, origin, spe, by_steps)
            off_axis |= xs is None
            if xs is None and by_steps:
                steps_only.append(key)
                continue
            if xs is None:
                warnings.append(
                    f"run {run.id}: {key} left out: no steps_per_epoch in its summary "
                    f"to put it on the {x} axis"
                )
                continue
            shown = drawable(xs, [v for _, v, _ in mine])
            if len(shown) < len(mine):
                gone = len(mine) - len(shown)
                left_out[ax] = left_out.get(ax, 0) + gone
                warnings.append(
                    f"run {run.id}: {gone} {key} point{'s' * (gone > 1)} beyond ±{MAX_DRAWN:g} "
                    "left out: a figure's axis cannot span them"
                )
            # NaN is kept in the line (a gap in it) but is no point: counted, it made "points:
            # 1" of an empty figure, and the subplot never said it had no points.
            ys = [v for _, v in shown]
            finite = sum(1 for v in ys if math.isfinite(v))
            if nan := len(ys) - finite:
                warnings.append(f"run {run.id}: {nan_note(nan, f'{key} value')}")
            if not finite:
                continue
            if note := fraction_note(run.id, key, ys):
                warnings.append(note)
            marks = line_style(ys, per_epoch(key) and not by_steps)
            (line,) = ax.plot([px for px, _ in shown], ys, ms=3, lw=1.2, label=label,
                              **look(i), **marks)  # fmt: skip
            lines.setdefault(label, line)
            points[key] = finite
        if steps_only:
            warnings.append(
                f"run {run.id} records steps, not epochs (dlperf.track keeps each key at the "
                f"step it was logged): {', '.join(steps_only)} left out"
            )
        drawn.append({"id": run.id, "name": run.name, "label": label, "points": points})
    if not any(r["points"] for r in drawn):
        others = " or ".join(f"--x {a}" for a in X_AXES if a != x)
        # Another axis helps only a key this one could not place, never NaN values.
        raise UserError(
            f"nothing to draw: {'; '.join(warnings)}", f"try {others}" if off_axis else None
        )
    if len(runs) > LOOKS:
        warnings.append(
            f"{len(runs)} runs: from run {runs[LOOKS].id} on, a run is drawn as the run "
            f"{LOOKS} before it is (colours and line styles for {LOOKS} runs)"
        )
    slot = fig.bbox.height / len(keys) * 0.85  # a subplot's share of the height
    for ax, key in zip(axes[:, 0], keys, strict=True):
        fold(ax.set_ylabel(ylabel(key)), slot)
        ax.grid(alpha=0.3)
        if not ax.lines:
            ax.text(0.5, 0.5, "no points of these runs on this axis", ha="center", va="center",
                    transform=ax.transAxes, color="0.4")  # fmt: skip
    for ax, gone in left_out.items():
        left_out_note(ax, gone)
    axes[-1, 0].set_xlabel(X_LABELS[x])
    if x == "epoch":  # shared by every subplot
        axes[-1, 0].xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
    title = short_name(runs[0].name) if len(runs) == 1 else f"{len(runs)} runs"
    text = axes[0, 0].set_title(f"{title}: {', '.join(keys)} against {x}", fontsize=9)
    fold(text, fig.bbox.width * 0.8)
    height = fig.get_figheight()
    under = legend_under(fig, list(lines.values()), list(lines))  # inches, the figure grown
    if fitted:
        tight_layout(fig, rect=(0, under / fig.get_figheight(), 1, 1))
    else:
        grown = fig.get_figheight()
        fig.subplots_adjust(left=0.12, right=0.97, bottom=(0.1 * height + under) / grown,
                            top=1 - 0.08 * height / grown, hspace=0.3, wspace=0.3)  # fmt: skip
    return fig, RunsPlot(Path(), x, keys, drawn, warnings)


def legend_under(fig: Figure, lines: list[Any], labels: list[str]) -> float:
    """One legend for all the subplots (a run has one look in each), under them, in as many
    columns as fit the figure's width, the figure grown by its height; that height, in
    inches. A legend inside each subplot ran off the figure with 25 runs or a long name."""
    columns = len(labels)
    while True:
        legend = fig.legend(lines, labels, loc="outside lower center", fontsize=LEGEND_PT,
                            ncols=columns)  # fmt: skip
        for text in legend.get_texts():
            text.set_parse_math(False)  # the user's text, as literal_text draws it
        box = legend.get_window_extent()
        if box.width <= fig.bbox.width * 0.95 or columns == 1:
            break
        legend.remove()
        # The widest column sets every column's width: as many columns as it fits.
        columns = min(columns - 1, max(1, int(columns * fig.bbox.width * 0.95 / box.width)))
    under = box.height / fig.dpi + 0.1
    fig.set_figheight(fig.get_figheight() + under)
    return under
