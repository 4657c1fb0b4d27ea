"""Figures of the fits and the plan, written to files with matplotlib's Agg backend."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import matplotlib

matplotlib.use("Agg")  # files only: never needs a display
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.backend_bases import FigureCanvasBase
from matplotlib.ticker import MaxNLocator

from dlperf.converge.curve import model, to_decreasing
from dlperf.errors import UserError
from dlperf.paths import check_writable, save_figure
from dlperf.report import tight_layout

if TYPE_CHECKING:
    from dlperf.converge.curve import Curve, FitReport
    from dlperf.converge.fitting import RegressedRun
    from dlperf.converge.plan import Allocation


# Measured points a figure draws per series, at most: a 7-inch figure at 120 dpi is 840 pixels
# wide, and a CSV of 10^6 rows drawn whole took seconds to draw and to place the legend among.
MAX_DRAWN = 2000


def drawn(k: Any, values: Any) -> tuple[np.ndarray, np.ndarray]:
    """The measured points a figure draws: all of them up to MAX_DRAWN, else MAX_DRAWN evenly
    spaced through the series, its first and last point included."""
    k, values = np.asarray(k), np.asarray(values)
    if len(k) <= MAX_DRAWN:
        return k, values
    picked = np.linspace(0, len(k) - 1, MAX_DRAWN).round().astype(int)
    return k[picked], values[picked]


def check_path(path: Path) -> None:
    """Fail before the work, not after it, when no figure can be saved to `path`."""
    check_writable(path, make_parents=False)  # matplotlib saves into existing directories
    if path.suffix.lstrip(".").lower() not in FigureCanvasBase.get_supported_filetypes():
        raise UserError(
            f"{path}: not a figure format matplotlib writes", "end the name in .png, .pdf or .svg"
        )


def _save(fig: Any, ax: Any, path: Path, xlabel: str, ylabel: str) -> None:
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    # loc="best" named: matplotlib warns on stderr when it was left to default and placing
    # the legend took over a second (a busy machine); the points it weighs are bounded
    ax.legend(fontsize=7, loc="best")
    tight_layout(fig)
    try:
        save_figure(fig, path)
    finally:  # closed on a stop too: pyplot keeps every figure it made until then
        plt.close(fig)


def _measured(ax: Any, color: str, label: str, k: np.ndarray, values: np.ndarray, n: int) -> None:
    """Measured points, filled inside the fit window (the first `n`) and hollow after it."""
    ax.plot(*drawn(k[:n], values[:n]), "o", color=color, ms=3, label=f"{label} measured")
    ax.plot(*drawn(k[n:], values[n:]), "o", color=color, ms=3, mfc="none")
    ax.axvline(k[n - 1], color=color, alpha=0.2)


def plot_curves(path: Path, reports: list[FitReport], metric: str) -> None:
    """Measured points (filled inside the fit window, hollow after it) and each fitted form."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, r in enumerate(reports):
        color, label, k = f"C{i}", r.curve.legend, r.curve.steps
        _measured(ax, color, label, k, r.curve.values, r.n_fit)
        grid = np.linspace(k.min(), k.max(), 400)
        for (form, p), style in zip(r.params.items(), ("-", ":"), strict=False):
            fitted = to_decreasing(model(form)(grid, p), metric)  # back to accuracy if needed
            ax.plot(grid, fitted, style, color=color, label=f"{label} {form}")
    _save(fig, ax, path, "step", metric)


def plot_bands(
    path: Path,
    curves: list[tuple[str, np.ndarray, np.ndarray, int, tuple[np.ndarray, ...]]],
    metric: str,
    target: float,
) -> None:
    """Measured points (filled inside the fit window, hollow after it), the ensemble's
    median curve and its 90% band, and the target. A curve is (label, steps, values, points
    in the window, (grid, 5th, 50th, 95th percentile) in the metric's units)."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, (label, k, values, n_fit, (grid, lo, mid, hi)) in enumerate(curves):
        color = f"C{i}"
        _measured(ax, color, label, k, values, n_fit)
        ax.fill_between(grid, lo, hi, color=color, alpha=0.15, label=f"{label} 90% band")
        ax.plot(grid, mid, "-", color=color, label=f"{label} ensemble median")
    ax.axhline(target, color="k", ls="--", lw=0.8, label=f"target {target:g}")
    _save(fig, ax, path, "step", metric)


def plot_plan(path: Path, rows: list[Allocation]) -> None:
    """Time to target versus workers, one line per server count, best allocations marked."""
    fig, ax = plt.subplots(figsize=(6, 4))
    for p in sorted({r.ps for r in rows}):
        mine = [r for r in rows if r.ps == p]
        ax.plot([r.workers for r in mine], [r.time_s / 3600 for r in mine], "o-", label=f"{p} PS")
    for name, marker in (("fastest", "*"), ("cheapest", "D")):
        best = next(r for r in rows if getattr(r, name))
        ax.plot(best.workers, best.time_s / 3600, marker, color="k", ms=11, mfc="none",
                label=f"{name}: {best.workers} workers, {best.ps} PS")  # fmt: skip
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    _save(fig, ax, path, "workers", "time to target (h)")


def plot_regression(
    path: Path,
    runs: list[RegressedRun],
    unseen: tuple[np.ndarray, np.ndarray] | None,
    metric: str,
    predicted: str = "unseen",
    compared: Curve | None = None,
) -> None:
    """Each run measured in its fit window (points) against the curve its features predict
    (line), each named by its configuration; the `predicted` configuration's curve dashed,
    and the measured run of it (`compared`) beside it in black."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, run in enumerate(runs):
        color = f"C{i % 10}"
        ax.plot(
            *drawn(run.steps, run.values), "o", color=color, ms=3, label=f"{run.label} measured"
        )
        ax.plot(run.grid, run.predicted, "-", color=color, label=f"{run.label} fitted")
    if unseen is not None:
        ax.plot(*unseen, "k--", label=f"{predicted} predicted")
    if compared is not None:
        measured = drawn(compared.steps, compared.values)
        ax.plot(*measured, "ks", ms=3, label=f"{compared.legend} measured")
    _save(fig, ax, path, "step", metric)
