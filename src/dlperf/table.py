"""A table as data: what a library function returns for the command line's console to print
(aligned, wrapped to the terminal) or for `str()` to give as plain text."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dlperf.formatting import fmt
from dlperf.parsing import one_line


@dataclass
class Table:
    title: str | None
    columns: list[str]
    rows: list[list[Any]]  # values as the console formats them (formatting.fmt)

    def text(self) -> str:
        """The table as plain text: the title, then columns padded to their widest cell."""
        lines = [self.columns, *([fmt(v) for v in row] for row in self.rows)]
        widths = [max(len(line[i]) for line in lines) for i in range(len(self.columns))]
        body = ["  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip()
                for line in lines]  # fmt: skip
        return "\n".join(([one_line(self.title)] if self.title else []) + body)
