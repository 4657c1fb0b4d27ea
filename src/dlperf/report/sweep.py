"""Figures of a sweep (matplotlib, files only): validation error per epoch of each point
(the mean over its seeds, their range as a band), final test accuracy against each numeric
axis, and time to target per point when a point reached the sweep's target."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from matplotlib.axes import Axes
from matplotlib.figure import Figure  # no pyplot: files only, no global state
from matplotlib.ticker import MaxNLocator

from dlperf.paths import save_figure
from dlperf.report import look, tight_layout
from dlperf.sweep.summary import mean_curves

if TYPE_CHECKING:
    from dlperf.store import RunStore
    from dlperf.sweep import SweepResult


def _label(params: dict[str, Any], skip: str | None = None) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items() if k != skip) or "all"


def _finish(fig: Figure, ax: Axes, title: str, xlabel: str, ylabel: str) -> Figure:
    """Labels, the title (every figure has one: the sweep's had none on a study page), grid
    and legend, and margins fitted to them."""
    ax.set_title(title, fontsize=9)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    tight_layout(fig)
    return fig


Curve = tuple[dict[str, Any], list[tuple[int, float]]]  # a run's axis values, (epoch, val acc)


def draw_val_error(curves: list[dict[str, Any]]) -> Figure:
    """Validation error (1 - top-1 accuracy) against epoch, one line per point of
    `summary.mean_curves`: the mean over its seeds, and the band from the best seed's error
    to the worst's."""
    fig = Figure(figsize=(7, 4.5))
    ax = fig.subplots()
    for i, curve in enumerate(curves):
        style, seeds = look(i), curve["runs"]  # after ten colours, other dashes
        color = style["color"]
        label = _label(curve["params"]) + (f" (mean of {seeds} seeds)" if seeds > 1 else "")
        error = [1 - a for a in curve["mean"]]
        ax.plot(curve["epochs"], error, marker="o", ms=3, label=label, **style)
        if seeds > 1:
            low, high = [1 - a for a in curve["max"]], [1 - a for a in curve["min"]]
            ax.fill_between(curve["epochs"], low, high, color=color, alpha=0.2, lw=0)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
    title = "validation error against epoch"
    if any(c["runs"] > 1 for c in curves):
        title += ": each point's mean over its seeds; band: the seeds' range"
    return _finish(fig, ax, title, "epoch", "validation error (1 - top-1)")


def _numeric(values: list[Any]) -> bool:
    return all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)


def draw_accuracy_vs_axis(axis: str, groups: list[dict[str, Any]]) -> Figure:
    """Mean final test accuracy against `axis`, one line per combination of the other axes'
    values; error bars: the standard deviation over repeats, where there is one."""
    lines: dict[str, list[dict[str, Any]]] = {}
    for g in groups:
        if g["test_accuracy"] is not None:
            lines.setdefault(_label(g["params"], skip=axis), []).append(g)
    fig = Figure(figsize=(6, 4))
    ax = fig.subplots()
    for i, (label, mine) in enumerate(lines.items()):
        mine.sort(key=lambda g: g["params"][axis])
        x = [g["params"][axis] for g in mine]
        y = [g["test_accuracy"] for g in mine]
        err = [g["test_accuracy_std"] or 0.0 for g in mine]
        ax.errorbar(
            x,
            y,
            yerr=err if any(err) else None,
            fmt="o",
            capsize=3,
            label=label,
            **look(i),
        )
    values = [g["params"][axis] for g in groups]
    if min(values) > 0 and max(values) / min(values) >= 10:  # learning rates, say
        ax.set_xscale("log")
    return _finish(fig, ax, f"final test accuracy against {axis}", axis, "final test accuracy")


def draw_time_to_target(groups: list[dict[str, Any]], target: float) -> Figure:
    """Mean wall time to the target accuracy per point, best point first; a point that never
    reached it is marked as such, without a bar."""
    fig = Figure(figsize=(7, max(2.5, 0.35 * len(groups) + 1)))
    ax = fig.subplots()
    labels = [_label(g["params"]) for g in groups]
    times = [g["time_to_target_s"] for g in groups]
    y = range(len(groups))
    ax.barh(y, [t if t is not None else 0.0 for t in times], color="C0")
    for i, t in enumerate(times):
        if t is None:
            ax.text(0, i, " target not reached", va="center", fontsize=7)
    ax.set_yticks(list(y), labels, fontsize=7)
    ax.invert_yaxis()
    reach = f"seconds to {target:.0%} validation accuracy"
    return _finish(fig, ax, f"{reach} per point", reach, "")


def draw_sweep(
    curves: list[Curve],
    groups: list[dict[str, Any]],
    axes: dict[str, list[Any]],
    target: float | None,
) -> dict[str, Figure]:
    """The sweep's figures by name, from its finished runs' validation `curves`. No
    time-to-target figure when no point reached a target: it would hold no bar."""
    figures = {"val_error": draw_val_error(mean_curves(curves))}
    for axis, values in axes.items():
        if _numeric(values) and len(set(values)) > 1:
            figures[f"accuracy_vs_{axis.replace('.', '_')}"] = draw_accuracy_vs_axis(axis, groups)
    if target is not None and any(g["time_to_target_s"] is not None for g in groups):
        figures["time_to_target"] = draw_time_to_target(groups, target)
    return figures


def plot_sweep(
    directory: Path,
    curves: list[Curve],
    groups: list[dict[str, Any]],
    axes: dict[str, list[Any]],
    target: float | None,
) -> list[Path]:
    """Write draw_sweep's figures into `directory`; their paths."""
    figures = draw_sweep(curves, groups, axes, target)
    paths = [directory / f"{name}.png" for name in figures]
    for path, fig in zip(paths, figures.values(), strict=True):
        save_figure(fig, path)
    return paths


def sweep_figures(store: RunStore, result: SweepResult) -> list[Path]:
    """The figures of what `dlperf sweep` ran, in its study's directory, the validation
    curves of its finished points read from `store`; none when no point finished."""
    curves = [
        (r.params, store.metrics(r.run_id, "val/acc1"))
        for r in result.points
        if r.status == "finished"
    ]
    if not curves:
        return []
    ranked = sorted(result.groups, key=lambda g: g["rank"])  # whatever order --sort chose
    return plot_sweep(Path(result.directory), curves, ranked, result.axes, result.target)
