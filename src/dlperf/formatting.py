"""Numbers as text, the one way the terminal's tables and the HTML report both print them."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, TextIO

from dlperf.errors import MemoryRanOut, allocated_bytes, limit_words
from dlperf.parsing import one_line

# Past this a float is shown to its significant digits (1e+25), as --json gives it: ',.0f'
# printed every digit of its binary value (1e25 as 10,000,000,000,000,000,905,969,664, -1e308
# as 309 digits), digits no one logged. Below it (2**53 is about 9e15) a float's whole part is
# exact, and reads better with separators.
FIXED_MAX = 1e15


def fmt(value: Any, digits: int = 4) -> str:
    """None as "-", booleans as yes/no, a float to `digits` significant digits with thousands
    separators from 10,000 up to FIXED_MAX (12345.6: "12,346"; 1e25: "1e+25"), anything else
    as str() gives it, on one line, its control characters and line breaks escaped
    (`one_line`)."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        if 1e4 <= abs(value) < FIXED_MAX:
            return f"{value:,.0f}"
        if value != 0 and abs(value) < 1e-3:
            return f"{value:.3g}"
        return f"{value:.{digits}g}"
    # A stored name may hold ESC or NUL: show it, never act on it. A newline or tab (a class
    # folder "cat\ndog", a file "new\nline.png") split a table's row in two: one line, as
    # `one_line` writes a name in an error (--json keeps the name as it is).
    return one_line(str(value))


def as_written(text: str, stream: TextIO) -> str:
    """`text` as `stream` writes it when it escapes what its encoding lacks (the CLI's stdout:
    dlperf.cli.console), so that a table measures its cells as they are printed."""
    if getattr(stream, "errors", None) != "backslashreplace":
        return text
    return text.encode(stream.encoding, "backslashreplace").decode(stream.encoding)


# How many of a run's metric keys an error lists: a run may hold thousands.
KEYS_LISTED = 20


def few(items: Sequence[str], most: int = 3) -> str:
    """The first `most` of `items`, comma-separated, and how many more: "a, b, c and 2 more"."""
    more = len(items) - most
    return ", ".join(items[:most]) + (f" and {more} more" if more > 0 else "")


def clip(text: str, limit: int, ellipsis: str = "...") -> str:
    """`text`, or its first characters and `ellipsis` within `limit` characters."""
    return text if len(text) <= limit else text[: limit - len(ellipsis)] + ellipsis


BINARY_UNITS = ((2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB"))


def binary_size(size: float) -> str:
    """`size` bytes in the largest binary unit it holds one of, to one decimal: "6.6 MiB",
    "2.0 GiB"; under 1 KiB in bytes ("512 bytes"). Every size a message says goes through
    here, so that a size that is there never reads "0.0 GiB" nor "5.4e-06 GiB", and two
    messages about one setting say it alike."""
    for scale, name in BINARY_UNITS:
        if abs(size) >= scale:
            return f"{size / scale:,.1f} {name}"
    return f"{size:,.0f} bytes"


def allocation_failed(e: BaseException) -> str | None:
    """What torch's CPU allocator's failure `e` says, "an allocation of 1.5 GiB failed" (of its
    "[enforce fail at alloc_cpu.cpp:127] ... Error code 12" the size is all a reader can act
    on); None for any other error."""
    size = allocated_bytes(e)
    return None if size is None else f"an allocation of {binary_size(size)} failed"


def ran_out(doing: str, e: BaseException, first: str, otherwise: str) -> MemoryRanOut:
    """The one line for memory that ran out `doing` with `e` (building a model, its dry
    forward, an all-reduce worker's message): the machine's or a memory limit's, not the
    input's fault (exit 1); the allocation's size in place of torch's CPU allocator's line,
    else `first` (what `e` says); the limit to raise where one is set (`ulimit -v`) and the
    memory is the host's (a GPU's, torch.cuda.OutOfMemoryError, is not its address space),
    else `otherwise`. Here, imported by a worker short of memory without a model's imports."""
    host = type(e).__name__ != "OutOfMemoryError"
    return MemoryRanOut(
        f"out of memory {doing}: {allocation_failed(e) or first}",
        (limit_words() if host else None) or otherwise,
    )


# Summary keys carry their unit in their name (dlperf's convention: train_time_s,
# peak_memory_bytes, error_pct, scoring_images_per_s), or in their parent's for the values of
# a nested dict (phases.data, step_time_spread.min, throughput_spread.max).
SECONDS = {"phases", "step_time_spread"}
FRACTIONS = {"test_top5", "efficiency", "pseudo_label_precision"}
PREFIXES = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""))


def unit(key: str) -> str | None:
    """The unit of a (flattened) summary key's value: 's', 'B', '%', 'fraction', 'GB/s' or
    'X/s'; None for a count or a plain number. Each dotted part is read by its name after
    any `/`: a tracked loop's `train/samples_per_s` is in samples/s (the prefix was read as
    the rate's noun, `train/samples/s`) and `train/throughput` in samples/s; a `/` prefix
    is a metric's namespace, not a parent that gives its values a unit."""
    for part in reversed([dotted.rsplit("/", 1)[-1] for dotted in key.split(".")]):
        if part.endswith("_per_s"):
            what = part.removesuffix("_per_s").rsplit("_", 1)[-1]
            return "B/s" if what == "bytes" else f"{what}/s"
        if part.endswith("_bytes"):
            return "B"
        if part.endswith("_gbps"):
            return "GB/s"
        if part.endswith("_s") or part in SECONDS:
            return "s"
        if part.endswith("_pct"):
            return "%"
        if part.startswith("throughput"):
            return "samples/s"
        if part.endswith("accuracy") or part in FRACTIONS:
            return "fraction"
    return None


def _seconds(s: float) -> str:
    size = abs(s)
    if size >= 3600:
        return f"{s / 3600:.3g} h"
    if size >= 60:
        return f"{s / 60:.3g} min"
    for scale, name in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")):
        if size >= scale:
            return f"{s / scale:.3g} {name}"
    return "0 s" if s == 0 else f"{s * 1e9:.3g} ns"


def _si(value: float, name: str) -> str:
    scale, prefix = next(((f, p) for f, p in PREFIXES if abs(value) >= f), PREFIXES[-1])
    return f"{value / scale:.3g} {prefix}{name}"


def scaled(key: str, value: Any) -> str | None:
    """A summary value read by a person, with its unit: sizes and times scaled (1.09 GB,
    12.3 s, 4.59 ms), rates with thousands separators (1,234 samples/s), fractions and
    percentages as % (93.2%). None for a key without a unit, or a value not a finite number:
    the caller shows those its own way."""
    kind = unit(key)
    numeric = isinstance(value, int | float) and not isinstance(value, bool)
    if kind is None or not numeric or not math.isfinite(value):
        return None
    if kind == "s":
        return _seconds(value)
    if kind in ("B", "B/s"):
        return _si(value, kind)
    if kind in ("%", "fraction"):
        percent = 100 * value if kind == "fraction" else value
        return f"{percent:.1f}%" if abs(percent) < FIXED_MAX else f"{percent:.3g}%"
    return f"{value:,.0f} {kind}" if 100 <= abs(value) < FIXED_MAX else f"{value:.3g} {kind}"


# What a spreadsheet reads as the start of a formula (OWASP, "CSV Injection").
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_safe(value: Any) -> Any:
    """A cell's value with text that a spreadsheet would run as a formula prefixed by ', as
    OWASP advises: a stored run's model name "=cmd|' /C calc'!A0" went into the β table raw
    (break-it round 29, P3 C1). Numbers stay numbers: -0.5 is a value, not a formula."""
    return "'" + value if isinstance(value, str) and value.startswith(FORMULA_START) else value
