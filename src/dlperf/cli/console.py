"""The one output sink: data to stdout (a table or one JSON document),
progress, warnings and errors to stderr; no colour off a terminal or with NO_COLOR."""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

# Off a terminal rich assumes 80 columns and squeezes tables; logs and pipes have room.
out = Console(highlight=False, width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True, highlight=False, width=None if sys.stderr.isatty() else 160)


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def print_json(document: Any) -> None:
    """Exactly one JSON document on stdout (non-finite floats become null)."""
    sys.stdout.write(json.dumps(_jsonable(document), indent=2, default=str) + "\n")
    sys.stdout.flush()


def fmt(value: Any, digits: int = 4) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        if abs(value) >= 1e4:
            return f"{value:,.0f}"
        if value != 0 and abs(value) < 1e-3:
            return f"{value:.3g}"
        return f"{value:.{digits}g}"
    return str(value)


def print_table(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    table = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
    for i, column in enumerate(columns):
        values = [row[i] for row in rows if row[i] is not None]
        numeric = bool(values) and all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in values
        )
        table.add_column(column, justify="right" if numeric else "left")
    for row in rows:
        table.add_row(*(Text(fmt(v)) for v in row))  # Text: a value's [brackets] are no markup
    out.print(table)


def warn(message: str) -> None:
    err.print(f"warning: {message}", markup=False)


class RichReporter:
    """A live bar on a terminal; plain, rate-limited lines otherwise."""

    def __init__(self, interval_s: float = 5.0) -> None:
        self.live = err.is_terminal
        self.interval_s = interval_s
        self._progress: Any = None
        self._task: Any = None
        self._desc = ""
        self._total: int | None = None
        self._done = 0
        self._last = 0.0

    def task(self, description: str, total: int | None = None) -> None:
        self._desc, self._total, self._done = description, total, 0
        if self.live and self._progress is not None:
            if self._task is not None:
                self._progress.remove_task(self._task)
            self._task = self._progress.add_task(description, total=total, status="")
        elif not self.live:
            # Counted work reports through advance(); an open-ended step is worth a line.
            if total is None:
                err.print(f"{description} ...", markup=False)
            self._last = time.monotonic()

    def advance(self, n: int = 1, status: str = "") -> None:
        self._done += n
        if self.live and self._task is not None:
            self._progress.update(self._task, advance=n, status=status)
        elif not self.live and time.monotonic() - self._last >= self.interval_s:
            of = f"/{self._total}" if self._total else ""
            err.print(f"{self._desc}: {self._done}{of} {status}".rstrip(), markup=False)
            self._last = time.monotonic()

    def log(self, message: str) -> None:
        target = self._progress.console if self.live and self._progress else err
        target.print(message, markup=False)


@contextmanager
def reporter() -> Iterator[RichReporter]:
    rep = RichReporter()
    if not rep.live:
        yield rep
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[status]}"),
        console=err,
        transient=True,
    ) as progress:
        rep._progress = progress
        yield rep


def _plot_path(path: Path | None) -> Path | None:
    """--plot is checked as it is parsed, so that a figure that cannot be saved costs no fit."""
    if path is not None:
        from dlperf.report.curves import check_path

        check_path(path)
    return path


PLOT = typer.Option(
    None, "--plot", help="Save a figure to this file (PNG, PDF, SVG).", callback=_plot_path
)


def tell(warnings: list[str], saved: Path | str | None = None) -> None:
    """What the library left to say, on stderr: its warnings, then the figure it saved."""
    for warning in warnings:
        warn(warning)
    if saved is not None:
        err.print(f"saved {saved}", markup=False)


def print_phases(summary: dict[str, Any]) -> None:
    """The per-step phase breakdown of a run's summary, when its phases were timed: milliseconds
    per step and each phase's share of the step in %."""
    phases = summary.get("phases") or {}
    total = sum(phases.values())
    if phases:
        print_table(
            "per step",
            ["phase", "ms", "%"],
            [[p, s * 1e3, round(100 * s / total, 1) if total else None] for p, s in phases.items()],
        )
