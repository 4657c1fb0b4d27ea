"""Reading numeric columns from CSV files, with one-line errors for bad input."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from dlperf.errors import UserError, not_utf8
from dlperf.parsing import did_you_mean
from dlperf.paths import not_regular


def read_text(path: Path, what: str = "") -> str:
    """A file's text as the csv module reads it (newline=""), with one-line errors; `what`
    the file is, for them."""
    kind = not_regular(path)  # stat'ed, never opened: a FIFO would block open() for ever
    if kind is not None and kind != "a directory":  # a directory: open()'s own line
        raise UserError(
            f"{what}{path} is not a regular file ({kind})", "give the path of a regular file"
        )
    try:
        # utf-8-sig: a BOM (Excel's "CSV UTF-8") is not part of the first column's name
        with open(path, newline="", encoding="utf-8-sig") as f:
            return f.read()
    except OSError as e:
        raise UserError(f"cannot read {what}{path}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise not_utf8(path, e) from None


def header(path: Path) -> list[str]:
    """The column names of a CSV."""
    return next(csv.reader(io.StringIO(read_text(path), newline="")), [])


def read_columns(
    path: Path, required: list[str], optional: tuple[str, ...] = ()
) -> dict[str, list[float]]:
    """The named columns of a CSV as lists of floats (optional ones only when present)."""
    rows = list(csv.DictReader(io.StringIO(read_text(path), newline="")))
    if not rows:
        raise UserError(f"{path} has no rows", "a CSV has a header line, then one line per point")
    header = list(rows[0])
    for name in required:
        if name not in header:
            hint = did_you_mean(name, header, f"columns: {', '.join(header)}", quote=True)
            raise UserError(f"{path} has no column '{name}'", hint)
    columns: dict[str, list[float]] = {}
    for name in [*required, *(c for c in optional if c in header)]:
        values = []
        for line, row in enumerate(rows, start=2):
            try:
                value = float(row[name])
            except (TypeError, ValueError):
                raise UserError(f"{path}:{line}: '{name}' is not a number: {row[name]!r}") from None
            if not math.isfinite(value):
                raise UserError(f"{path}:{line}: '{name}' is not finite: {row[name]!r}")
            values.append(value)
        columns[name] = values
    return columns
