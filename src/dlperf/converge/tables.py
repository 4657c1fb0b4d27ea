"""Reading numeric columns from CSV files, with one-line errors for bad input."""

from __future__ import annotations

import csv
import io
import itertools
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
    at_commas, at_tabs = (_columns(first, sep) for sep in (",", "\t"))
    if at_commas is None and at_tabs is None:  # a field past the limit whichever the separator
        raise unreadable(path, text, ",", 1, 0)
    sep = "\t" if (at_tabs or 0) > (at_commas or 0) else ","
    return sep, text, 0


def _columns(line: str, sep: str) -> int | None:
    """The columns `line` splits into at `sep`; None when a field is then over the csv
    module's limit. A wide header of short columns (20,000 at ',') is one field at a tab,
    over the limit: that reading is not the file's, and the other is."""
    try:
        return len(next(csv.reader(io.StringIO(line, newline=""), delimiter=sep), []))
    except csv.Error:
        return None


def header(path: Path) -> list[str]:
    """The column names of a CSV, white space at their edges stripped (as `read_table` reads
    them)."""
    sep, body, skipped = dialect(path, read_text(path))
    try:
        names = next(csv.reader(io.StringIO(body, newline=""), delimiter=sep), [])
    except csv.Error:  # a quote on the header's line that is never closed, most likely
        raise unreadable(path, body, sep, 1, skipped) from None
    return [name.strip() for name in names]


# A line break as the csv module (reading io.StringIO(newline="")) counts lines.
_BREAK = re.compile(r"\r\n|\r|\n")
_BREAK_CHAR = re.compile(r"[\r\n]")


def _line_start(text: str, line: int) -> int:
    """The offset in `text` of its line `line` (1 is the first)."""
    if line <= 1:
        return 0
    found = next(itertools.islice(_BREAK.finditer(text), line - 2, None), None)
    return len(text) if found is None else found.end()


def _quoted_over_lines(text: str, start: int, sep: str) -> tuple[int, int | None] | None:
    """Where the first quoted field that holds a line break opens, in the record that starts
    at offset `start`, and where it closes (None: never); None when no field of that record
    holds one. Read as the csv module reads (not strict): a quote opens a field only at its
    start, "" inside one is a quote, and after the closing quote the field runs on unquoted to
    the next separator."""
    field_end = re.compile(f"[{re.escape(sep)}\r\n]")
    at = start
    while at < len(text):
        if text[at] == '"':
            end = at + 1
            while (end := text.find('"', end)) != -1 and text.startswith('"', end + 1):
                end += 2  # "" inside a quoted field: one quote
            if end == -1:
                return at, None
            if _BREAK_CHAR.search(text, at, end):
                return at, end
            at = end + 1
        found = field_end.search(text, at)
        if found is None or found.group() != sep:  # the record ends
            return None
        at = found.end()
    return None


def _last_line(text: str) -> str:
    """The last line of `text` that is not blank (line breaks at its end passed over)."""
    body = text.rstrip("\r\n")
    return body[max(body.rfind("\n"), body.rfind("\r")) + 1 :]


def _line_of(text: str, offset: int, start: int, line: int) -> int:
    """The line of `offset` in `text`, given that offset `start` begins line `line`."""
    return line + sum(1 for _ in _BREAK.finditer(text, start, offset))


def _excerpt(text: str, most: int = 60) -> str:
    """`text` on one line, cut to about `most` characters, for a message."""
    shown = one_line(text)
    return shown if len(shown) <= most else shown[:most] + "..."


def unreadable(path: Path, text: str, sep: str, line: int, skipped: int) -> UserError:
    """The line for a record of `text` (starting on its line `line`) that the csv module refused:
    a field over its limit (`csv.field_size_limit`, 131,072 characters), which in a CSV of
    numbers is a quote opened by mistake that swallows the lines after it, or a file that is
    not a CSV of numbers. Named by the line where the quote (or the record) starts."""
    start = _line_start(text, line)
    quoted = _quoted_over_lines(text, start, sep)
    limit = f"{csv.field_size_limit():,} characters"
    if quoted is None:
        head = text[start : start + 200].splitlines()[0] if start < len(text) else ""
        return UserError(
            f"{path}:{line + skipped}: a field of over {limit}: '{_excerpt(head)}'",
            "a CSV of numbers has short fields: is this the file meant?",
        )
    opened, closed = quoted
    at = _line_of(text, opened, start, line)
    if closed is None:
        return unclosed(path, text, at + skipped, _line_start(text, at))
    return UserError(
        f'{path}:{at + skipped}: a quoted field (") runs from here to line '
        f"{_line_of(text, closed, start, line) + skipped}, over {limit}",
        "a stray quote? delete it, or close the field on its own line",
    )


def unclosed(path: Path, text: str, line: int, start: int) -> UserError:
    """The line for a quote on line `line` (at offset `start` of `text`) that is never closed:
    the csv module reads the rest of the file into that one field."""
    shown = text[start:].splitlines()[0] if start < len(text) else ""
    return UserError(
        f"{path}:{line}: an opening quote (\") is never closed: '{_excerpt(shown)}'",
        "delete the stray quote, or close the field it opens",
    )


def semicolons(path: Path, text: str, fieldnames: Sequence[str] | None) -> None:
    """Refuse a ';'-separated file (Excel's CSV where ',' is the decimal mark) in one line when
    its header splits into more columns at ';' than at ','. Called only once reading at ','
    has failed (a row with more fields than the header, a column not found), whose own lines
    ("quote a field that holds a comma", "did you mean 'a;b'?") would point the wrong way; so
    a comma CSV with a ';' in a column's name still reads. Not read at ';': with ','
    decimals, 1.000 may be one or a thousand (a grouping mark), a silently wrong number."""
    try:
        at_semicolons = next(csv.reader(io.StringIO(text, newline=""), delimiter=";"), [])
    except csv.Error:  # not read at ';' either: the caller's own line stands
        return
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


def no_header(path: Path, header: list[str], required: list[str], skipped: int) -> None:
    """Refuse, in one line saying so, a file whose first line is all numbers: it has no header,
    and "no column 'step' (columns: 1, 2.118...)" named its first row as the columns. Called,
    like `comment_header`, once a column was not found."""
    if not header or not all(_is_number(name) for name in header):
        return
    names = ",".join(one_line(name) for name in required)
    fix = (
        f"add a first line naming the columns: {names}"
        if len(required) == len(header)
        else f"add a first line naming its {len(header)} columns, {names} among them"
    )
    raise UserError(
        f"{path}:{skipped + 1}: the first line '{_excerpt(','.join(header))}' is numbers: the "
        "file has no header",
        fix,
    )


def _is_number(text: str) -> bool:
    try:
        plain_number(text)
    except ValueError:
        return False
    return True


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
        except (TypeError, ValueError):  # TypeError: a caller's None
            raise UserError(
                f"{path}:{line}: '{one_line(name)}' is not a number: {_shown(text)}"
            ) from None
        if not math.isfinite(value):
            raise UserError(f"{path}:{line}: '{one_line(name)}' is not finite: {_shown(text)}")
        values.append(value)
    return values


def _shown(text: object, most: int = 60) -> str:
    """A field as a message shows it: its repr, cut short (a quoted field may hold lines)."""
    if isinstance(text, str) and len(text) > most:
        return f"{text[:most]!r}... ({len(text):,} characters)"
    return repr(text)


def _names(fields: list[str]) -> list[str]:
    """A line's fields as the header's names are compared: stripped, trailing empty ones
    dropped (a trailing comma)."""
    names = [field.strip() for field in fields]
    while names and not names[-1]:
        names.pop()
    return names


def read_table(
    path: Path, required: list[str], optional: tuple[str, ...] = ()
) -> tuple[list[int], dict[str, list[str]]]:
    """The file's line of each row and the named columns' fields as text (optional columns
    only when present), checked as `read_numbers` says; ',' or tab-separated (`dialect`).
    Names are matched with the white space at their edges stripped: the old Ultralytics
    results.csv pads every field to 23 characters ("          epoch"), which float() reads in
    a value but no one types in a name. A row is named by the line it starts on (a quoted
    field may hold line breaks)."""
    sep, text, skipped = dialect(path, read_text(path))
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=sep)
    names: list[str] | None = None
    repeated: list[str] = []  # the header as `_names` reads a line, to tell it repeated
    lines: list[int] = []
    rows: list[list[str]] = []
    last = (1, 0)  # the lines the last record read starts and ends on
    while True:
        first = reader.line_num + 1
        try:
            fields = next(reader)
        except StopIteration:
            break
        except csv.Error:  # a field over the module's limit: named where it starts
            raise unreadable(path, text, sep, first, skipped) from None
        last = (first, reader.line_num)
        if names is None:
            names = [name.strip() for name in fields]
            repeated = _names(names)
            continue
        if not fields:  # a blank line, passed over as csv.DictReader does
            continue
        if _names(fields) == repeated:
            # two logs concatenated, the second's header and all: read as a row, it was
            # blamed as "'step' is not a number: 'step'"
            raise UserError(
                f"{path}:{first + skipped}: the line repeats the header (two logs concatenated?)",
                "remove it: if two logs were joined, check that the rows after it go on from "
                "those before",
            )
        if len(fields) > len(names):
            comment_header(path, text, names, skipped)
            semicolons(path, text, names)
            where = (
                f"{path}:{first + skipped}: {len(fields)} fields where the header has {len(names)}"
            )
            extra = fields[len(names) :]
            if sep == "," and all(_DIGIT_TAIL.fullmatch(f.strip()) for f in extra):
                # 0,4455 read as 0 and 4455: quoting it would only move the refusal to "not a
                # number", so the hint is the decimal mark (or a thousands separator)
                raise UserError(
                    f"{where}: '{one_line(sep.join(fields))}'",
                    "decimal commas? write '.' for decimals and no thousands separator",
                )
            raise UserError(
                where,
                "quote a field that holds a comma"
                if sep == ","
                else "quote a field that holds a tab",
            )
        lines.append(first + skipped)
        rows.append(fields)
    if last[1] > last[0] or '"' in _last_line(text):
        # The last record spans lines: a quote that is never closed reads the rest of the
        # file into one field (its line break and all), so it is named where it opens. On
        # the last line alone (40,"0.6) the csv module ends the field at the end of the file
        # and it read as 0.6: refused the same way.
        start = _line_start(text, last[0])
        quoted = _quoted_over_lines(text, start, sep)
        if quoted is not None and quoted[1] is None:
            at = _line_of(text, quoted[0], start, last[0])
            raise unclosed(path, text, at + skipped, _line_start(text, at))
    if not rows:
        raise UserError(f"{path} has no rows", "a CSV has a header line, then one line per point")
    header = names or []
    for name in required:
        if name.strip() not in header:
            comment_header(path, text, header, skipped)
            semicolons(path, text, header)
            no_header(path, header, required, skipped)
            shown = [one_line(c) for c in header]
            hint = did_you_mean(one_line(name), shown, f"columns: {', '.join(shown)}", quote=True)
            raise UserError(f"{path} has no column '{one_line(name)}'", hint)
    read = [*required, *(c for c in optional if c.strip() in header)]
    for name in read:
        if (times := header.count(name.strip())) > 1:
            raise UserError(
                f"{path}: column '{one_line(name)}' is named {times} times in the header",
                "give each column its own name",
            )
    index = {name: header.index(name.strip()) for name in read}
    need = max(index.values()) + 1
    if (short := next((i for i, row in enumerate(rows) if len(row) < need), None)) is not None:
        given = len(rows[short])
        raise UserError(
            f"{path}:{lines[short]}: {given} field{'s' if given != 1 else ''} where the header "
            f"has {len(header)}",
            "a row gives one field per column: is it cut short?",
        )
    return lines, {name: [row[i] for row in rows] for name, i in index.items()}
