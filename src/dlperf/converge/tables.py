"""Reading numeric columns from CSV files, with one-line errors for bad input."""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Sequence
from pathlib import Path

from dlperf.errors import UserError, not_utf8
from dlperf.parsing import did_you_mean, one_line, plain_number
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


# Excel's first line naming the separator, e.g. "sep=;" (written by its "CSV" in some
# locales, and read by it); quoted by some writers.
_SEP_LINE = re.compile(r'^"?sep=(.)"?[ \t]*\r?\n?$')


def dialect(path: Path, text: str) -> tuple[str, str, int]:
    """How `text` (the file `path`) is read: (its separator, its text from the header on, the
    lines before the header). A first line `sep=X` (Excel's) names X: ',' and a tab are
    honoured and the line passed over (it was read as the header: "did you mean 'sep='?"),
    any other refused in one line. Without it, a header that splits into more columns at
    tabs than at ',' is tab-separated (a spreadsheet's "Text (Tab delimited)" or a copy from
    one), read at tabs: no decimal mark is a tab, so no number is read wrong."""
    stream = io.StringIO(text, newline="")
    first = stream.readline()
    if (given := _SEP_LINE.match(first)) is not None:
        sep = given.group(1)
        if sep not in (",", "\t"):
            raise UserError(
                f"{path} says sep={one_line(sep)} on its first line: '{one_line(sep)}'-separated",
                "save it as CSV with ',' between fields and '.' for decimals",
            )
        return sep, text[stream.tell() :], 1
    at_commas = next(csv.reader(io.StringIO(first, newline="")), [])
    at_tabs = next(csv.reader(io.StringIO(first, newline=""), delimiter="\t"), [])
    sep = "\t" if len(at_tabs) > len(at_commas) else ","
    return sep, text, 0


def header(path: Path) -> list[str]:
    """The column names of a CSV."""
    sep, body, _ = dialect(path, read_text(path))
    return next(csv.reader(io.StringIO(body, newline=""), delimiter=sep), [])


def semicolons(path: Path, text: str, fieldnames: Sequence[str] | None) -> None:
    """Refuse a ';'-separated file (Excel's CSV where ',' is the decimal mark) in one line when
    its header splits into more columns at ';' than at ','. Called only once reading at ','
    has failed (a row with more fields than the header, a column not found), whose own lines
    ("quote a field that holds a comma", "did you mean 'a;b'?") would point the wrong way; so
    a comma CSV with a ';' in a column's name still reads. Not read at ';': with ','
    decimals, 1.000 may be one or a thousand (a grouping mark), a silently wrong number."""
    at_semicolons = next(csv.reader(io.StringIO(text, newline=""), delimiter=";"), [])
    names = list(fieldnames or [])
    if len(at_semicolons) > max(len(names), 1):
        raise UserError(
            f"{path} looks ';'-separated: its header '{one_line(','.join(names))}' is "
            f"{len(names)} column{'s' if len(names) != 1 else ''} at ',' and "
            f"{len(at_semicolons)} at ';'",
            "save it as CSV with ',' between fields and '.' for decimals",
        )


# A field past the header's that is all digits: the tail of a number split at a decimal comma
# (0,4455) or a thousands separator (1,000), not text that holds a comma.
_DIGIT_TAIL = re.compile(r"\d+")


def comment_header(path: Path, text: str, fieldnames: Sequence[str] | None, skipped: int) -> None:
    """Refuse, in one line naming it, a header line that starts with '#': a comment line
    (`# written by train.py`, numpy.savetxt's `# step,loss`) is read as the header, as a CSV's
    first line is, and the lines that reading then fails with ("N fields where the header has
    M", "no column 'step'") would blame the data. Called, like `semicolons`, only once reading has
    failed; a column merely named '#' is not a comment."""
    first = (fieldnames or [""])[0].strip()
    if not first.startswith("#") or first == "#":
        return
    line = text.splitlines()[0] if text else ""
    raise UserError(
        f"{path}:{skipped + 1}: the first line '{one_line(line)}' is read as the header, "
        "a comment?",
        "a CSV's first line names its columns: delete the lines above the header, or the '#' "
        "before its names",
    )


def read_numbers(
    path: Path, required: list[str], optional: tuple[str, ...] = ()
) -> tuple[list[int], dict[str, list[float]]]:
    """The named columns of a CSV as lists of floats (optional ones only when present), with
    the file's line of each row (for lines that name a row). A column named twice, or a row
    with more fields than the header, is refused: either would leave which value is meant to
    a guess (csv.DictReader keeps the last of two columns of one name, and drops a row's extra
    fields)."""
    lines, texts = read_table(path, required, optional)
    return lines, {name: numbers(path, name, lines, column) for name, column in texts.items()}


def numbers(path: Path, name: str, lines: list[int], texts: list[str]) -> list[float]:
    """The fields `texts` of column `name` (on `lines` of `path`) as finite floats. A field
    holding '_' is not a number: float() takes it as a digit separator ('2_0' is 20), which no
    CSV writer puts there, so it is a typo or two fields run together."""
    values = []
    for line, text in zip(lines, texts, strict=True):
        try:
            value = plain_number(text)
        except (TypeError, ValueError):  # TypeError: a short row's missing field, None
            raise UserError(
                f"{path}:{line}: '{one_line(name)}' is not a number: {text!r}"
            ) from None
        if not math.isfinite(value):
            raise UserError(f"{path}:{line}: '{one_line(name)}' is not finite: {text!r}")
        values.append(value)
    return values


def read_table(
    path: Path, required: list[str], optional: tuple[str, ...] = ()
) -> tuple[list[int], dict[str, list[str]]]:
    """The file's line of each row and the named columns' fields as text (optional columns
    only when present), checked as `read_numbers` says; ',' or tab-separated (`dialect`)."""
    sep, text, skipped = dialect(path, read_text(path))
    reader = csv.DictReader(io.StringIO(text, newline=""), delimiter=sep)
    rows: list[tuple[int, dict[str, str]]] = []
    for row in reader:
        if None in row:  # restkey: the fields past the header's
            comment_header(path, text, reader.fieldnames, skipped)
            semicolons(path, text, reader.fieldnames)
            named = len(reader.fieldnames or [])
            extra = row[None]
            fields = named + len(extra)
            line = reader.line_num + skipped
            where = f"{path}:{line}: {fields} fields where the header has {named}"
            if sep == "," and all(_DIGIT_TAIL.fullmatch(f.strip()) for f in extra):
                # 0,4455 read as 0 and 4455: quoting it would only move the refusal to "not a
                # number", so the hint is the decimal mark (or a thousands separator)
                given = sep.join(str(v) for k, v in row.items() if k is not None)
                raise UserError(
                    f"{where}: '{one_line(sep.join([given, *extra]))}'",
                    "decimal commas? write '.' for decimals and no thousands separator",
                )
            raise UserError(
                where,
                "quote a field that holds a comma"
                if sep == ","
                else "quote a field that holds a tab",
            )
        rows.append((reader.line_num + skipped, row))
    if not rows:
        raise UserError(f"{path} has no rows", "a CSV has a header line, then one line per point")
    header = list(reader.fieldnames or [])
    for name in required:
        if name not in header:
            comment_header(path, text, header, skipped)
            semicolons(path, text, header)
            shown = [one_line(c) for c in header]
            hint = did_you_mean(one_line(name), shown, f"columns: {', '.join(shown)}", quote=True)
            raise UserError(f"{path} has no column '{one_line(name)}'", hint)
    read = [*required, *(c for c in optional if c in header)]
    for name in read:
        if (times := header.count(name)) > 1:
            raise UserError(
                f"{path}: column '{one_line(name)}' is named {times} times in the header",
                "give each column its own name",
            )
    # A short row's missing fields are None (DictReader's restval): `numbers` says so.
    return [line for line, _ in rows], {name: [row[name] for _, row in rows] for name in read}
