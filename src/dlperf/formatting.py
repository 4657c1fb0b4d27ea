"""Numbers as text, the one way the terminal's tables and the HTML report both print them."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from dlperf.parsing import printable


def fmt(value: Any, digits: int = 4) -> str:
    """None as "-", booleans as yes/no, a float to `digits` significant digits with thousands
    separators from 10,000 up (12345.6: "12,346"), anything else as str() gives it."""
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
    return printable(str(value))  # a stored name may hold ESC or NUL: show it, never act on it


def few(items: Sequence[str], most: int = 3) -> str:
    """The first `most` of `items`, comma-separated, and how many more: "a, b, c and 2 more"."""
    more = len(items) - most
    return ", ".join(items[:most]) + (f" and {more} more" if more > 0 else "")


def clip(text: str, limit: int, ellipsis: str = "...") -> str:
    """`text`, or its first characters and `ellipsis` within `limit` characters."""
    return text if len(text) <= limit else text[: limit - len(ellipsis)] + ellipsis
