"""The one output sink: data to stdout (a table or one JSON document),
progress, warnings and errors to stderr; no colour off a terminal or with NO_COLOR."""

from __future__ import annotations

import csv
import functools
import io
import json
import os
import shutil
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, redirect_stdout
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from rich.cells import cell_len
from rich.console import Console, JustifyMethod
from rich.table import Table
from rich.text import Text

from dlperf import stopping
from dlperf.cli.stderr import Stderr
from dlperf.formatting import as_written, fmt
from dlperf.parsing import one_line, readable_json
from dlperf.std_streams import holds, settle_std_streams

if TYPE_CHECKING:
    from dlperf.table import Table as DataTable


# Streams closed at start, and stdout's errors where its encoding lacks a character.
settle_std_streams()


def _line_width(stream: Any) -> int | None:
    """Off a terminal rich assumes 80 columns; logs and pipes have room (None: rich's own)."""
    return None if stream.isatty() or os.environ.get("COLUMNS") else 160


# No markup: what is printed is data (a run's name, a path), never rich's [style] tags.
out = Console(highlight=False, markup=False, width=_line_width(sys.stdout))
# soft_wrap: what goes to stderr is lines (a warning, a note, a progress line, a path), each
# one line at any width; rich broke them at the width (160 in a log, COLUMNS, a terminal's),
# so `grep warning:` got half of the library's warnings (RichReporter.log). A terminal folds a
# long line itself, and the live bar is a table that keeps to the width as before.
err = Stderr(
    stderr=True, highlight=False, markup=False, width=_line_width(sys.stderr), soft_wrap=True
)
err_line = functools.partial(err.print, soft_wrap=True)  # one line at any terminal width
GAP = 3  # between two table columns: a space, the rule, a space (no edges, no edge padding)
# The narrowest a table's blocks are laid out: under it (COLUMNS=1) rich gave each value no
# columns at all, printing lines of spaces; a terminal that narrow wraps the lines itself.
BLOCKS_MIN_WIDTH = 20


# Where the JSON document goes while `documents_only` sends every other print to stderr.
_documents: TextIO | None = None


@contextmanager
def documents_only(active: bool, stream: TextIO | None = None) -> Iterator[None]:
    """With --json, stdout for the one document alone (`stream`, where `cli._name_stdout` made
    one): whatever else Python prints meanwhile (a model's forward) goes to stderr."""
    global _documents
    if not active:
        yield
        return
    _documents = stream or sys.stdout
    try:
        with redirect_stdout(sys.stderr):
            yield
    finally:
        _documents = None


def print_json(document: Any) -> None:
    """Exactly one JSON document on stdout (non-finite floats become null), whole or not at
    all: a stop signal that lands once it has begun waits for its end (a document larger than
    a pipe's buffer, its reader slow, was cut at 64 KiB: invalid JSON, exit 143), then ends
    the command as ever. Spared, not shielded: a reader that never reads holds the write for
    good, and a second stop signal then ends it, leaving part of the document."""
    _print_whole(json.dumps(readable_json(document), indent=2, default=str) + "\n")


def print_csv(rows: Iterable[Sequence[Any]], lineterminator: str = "\r\n") -> None:
    """`rows` (the first its header) as one CSV on stdout, whole or not at all as
    `print_json`'s document is: written row by row, a stop signal while a slow reader's pipe
    was full left a CSV cut in a row. The csv module's excel lines by default, as
    `csv.writer(sys.stdout)` wrote them."""
    text = io.StringIO()
    csv.writer(text, lineterminator=lineterminator).writerows(rows)
    _print_whole(text.getvalue(), utf8=True)


def _print_whole(text: str, utf8: bool = False) -> None:
    """`text` on stdout (the document's stream with --json) in a spared block: a first stop
    signal waits for its end, a second cuts it (see `print_json`). With `utf8`, a text that
    stdout's encoding cannot hold (a layer `faltung_ä` under PYTHONIOENCODING=ascii or a C
    locale) is written whole as UTF-8 bytes: the stream's `\\xe4` escapes altered the data."""
    stream = _documents or sys.stdout
    with stopping.spared():
        if utf8 and not holds(stream, text):
            stream.flush()
            stream.buffer.write(text.encode("utf-8"))
            stream.buffer.flush()
            return
        stream.write(text)
        stream.flush()


def printed_json(as_json: bool, document: Any) -> bool:
    """With --json, `document` as the one JSON document on stdout; whether it was printed."""
    if as_json:
        print_json(document)
    return as_json


def table_width() -> int | None:
    """The width a table must fit: COLUMNS when set, else the terminal's; None off a terminal
    (a pipe, a file, a notebook's `!dlperf`), where a table takes the width it needs."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    return shutil.get_terminal_size().columns if sys.stdout.isatty() else None


def _share(fewest: list[int], most: list[int], room: int) -> list[int]:
    """Column widths from each column's fewest (its longest word) up to its most (its longest
    cell), `room` in all: what is left over the fewest goes to each column in proportion to
    what it lacks, so the columns wrap about as much as each other."""
    lack = [m - f for f, m in zip(fewest, most, strict=True)]
    spare = room - sum(fewest)
    widths = [f + spare * need // sum(lack) for f, need in zip(fewest, lack, strict=True)]
    for i in sorted(range(len(widths)), key=lambda i: widths[i] - most[i]):
        if sum(widths) == room:
            break
        widths[i] += widths[i] < most[i]
    return widths


def print_table(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A table on stdout, whole: no cell is ever cut. Wider than `table_width()`, its cells
    wrap between words (a word is never broken, so names, keys and numbers stay whole); when
    even its longest words do not fit side by side, each row is printed as a block of
    `column  value` lines."""
    title = as_written(one_line(title), sys.stdout) if title else title  # names a run, a path
    columns, *cells = [[as_written(fmt(v), sys.stdout) for v in row] for row in [columns, *rows]]
    most = [max([1, *(cell_len(c[i]) for c in [columns, *cells])]) for i in range(len(columns))]
    fewest = [
        max([1, *(cell_len(w) for c in [columns, *cells] for w in c[i].split())])
        for i in range(len(columns))
    ]
    gaps = GAP * (len(columns) - 1)
    width = table_width()
    if width is None or sum(most) + gaps <= width:
        widths = most
    elif sum(fewest) + gaps <= width:
        widths = _share(fewest, most, width - gaps)
    else:
        _print_blocks(title, columns, cells, width)
        return
    table = Table(show_edge=False, pad_edge=False)
    for i, column in enumerate(columns):
        values = [row[i] for row in rows if row[i] is not None]
        numeric = bool(values) and all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in values
        )
        justify: JustifyMethod = "right" if numeric else "left"
        table.add_column(column, justify=justify, width=widths[i], overflow="fold")
    for row in cells:
        table.add_row(*(Text(c) for c in row))  # Text: a value's [brackets] are no markup
    # The title on a line of its own, wrapped only to the width, not to a narrower table.
    shown = sum(widths) + gaps
    sink = Console(highlight=False, width=width or max(shown, cell_len(title or "")))
    if title:
        sink.print(Text(title, style="table.title"))
    sink.print(table)


def print_tables(tables: Iterable[DataTable]) -> None:
    for t in tables:
        print_table(t.title, t.columns, t.rows)


def _print_blocks(
    title: str | None, columns: Sequence[str], cells: list[list[str]], width: int
) -> None:
    """A table too wide for `width` even wrapped: one block of `column  value` lines per row,
    a value longer than its line folded onto the next ones; never narrower than
    BLOCKS_MIN_WIDTH."""
    width = max(width, BLOCKS_MIN_WIDTH)
    sink = Console(highlight=False, width=width)
    if title:
        sink.print(Text(title, style="table.title"))
    names = max(1, min(max(cell_len(c) for c in columns), width // 3))
    for row in cells:
        block = Table.grid(padding=(0, 2))
        block.add_column(width=names, overflow="fold")
        block.add_column(overflow="fold")
        for column, value in zip(columns, row, strict=True):
            block.add_row(Text(column), Text(value))
        sink.print()
        sink.print(block)


def warn(message: str) -> None:
    err_line(f"warning: {message}")  # one line in a log, as an error's is


def gone(run_ids: list[int], command: str) -> None:
    """One note of the runs `command` chose and found deleted as it read them (another
    process's `runs delete`): left out, not the user's error."""
    if run_ids:
        ids = sorted(set(run_ids))
        runs = f"run {ids[0]} was" if len(ids) == 1 else f"runs {', '.join(map(str, ids))} were"
        err.print(f"note: {runs} deleted while {command} read the store; left out")


class RichReporter:
    """A live bar on a terminal (rich's `progress`); plain, rate-limited lines otherwise."""

    interval_s = 5.0

    def __init__(self, progress: Any = None) -> None:
        self._progress = progress
        self._task: Any = None
        self._desc = ""
        self._total: int | None = None
        self._done = 0
        self._last = 0.0

    def task(self, description: str, total: int | None = None) -> None:
        self._desc, self._total, self._done = description, total, 0
        if self._progress is not None:
            if self._task is not None:
                self._progress.remove_task(self._task)
            self._task = self._progress.add_task(description, total=total, status="")
            return
        if total is None:  # counted work reports through advance(); this is worth a line
            err.print(f"{description} ...")
        self._last = time.monotonic()

    def advance(self, n: int = 1, status: str = "") -> None:
        self._done += n
        if self._progress is not None:
            if self._task is not None:
                self._progress.update(self._task, advance=n, status=status)
        elif time.monotonic() - self._last >= self.interval_s:
            of = f"/{self._total}" if self._total else ""
            err.print(f"{self._desc}: {self._done}{of} {status}".rstrip())
            self._last = time.monotonic()

    def log(self, message: str) -> None:
        """One line at any width (a warning, a note), above the live bar where there is one."""
        sink = self._progress.console if self._progress is not None else err
        sink.print(message, soft_wrap=True)


@contextmanager
def reporter() -> Iterator[RichReporter]:
    if not err.is_terminal:
        yield RichReporter()
        return
    from rich import progress as bar

    plain = functools.partial(bar.TextColumn, markup=False)  # a task names paths: "data[/x]"
    columns = (plain("{task.description}"), bar.BarColumn(), bar.MofNCompleteColumn())
    status = (bar.TimeElapsedColumn(), plain("{task.fields[status]}"))
    with bar.Progress(*columns, *status, console=err, transient=True) as progress:
        yield RichReporter(progress)


def tell(warnings: list[str], *saved: Path | str | None) -> None:
    """What the library left to say, on stderr: its warnings, then the files it saved."""
    for warning in warnings:
        warn(warning)
    for path in saved:
        if path is not None:
            err.print(f"saved {one_line(str(path))}")  # a path the user named: one line


def print_phases(summary: dict[str, Any]) -> None:
    """The per-step phase breakdown of a run's summary, when its phases were timed: milliseconds
    per step and each phase's share of the step in %."""
    phases = summary.get("phases") or {}
    total = sum(phases.values())
    rows = [[p, s * 1e3, round(100 * s / total, 1) if total else None] for p, s in phases.items()]
    if rows:
        print_table("per step", ["phase", "ms", "%"], rows)
