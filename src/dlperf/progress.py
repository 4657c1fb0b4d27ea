"""Progress events: library code reports through a Reporter, the CLI renders it.

Modules below the CLI never print. Long work takes a `Reporter` and calls
`task`, `advance` and `log`; the CLI passes a rich progress bar on a terminal
and plain log lines otherwise, tests pass nothing.
"""

from __future__ import annotations

from typing import Protocol


class Reporter(Protocol):
    def task(self, description: str, total: int | None = None) -> None:
        """Start a new unit of work (replaces the previous one)."""

    def advance(self, n: int = 1, status: str = "") -> None:
        """Mark n units done; `status` is a short live note such as the loss."""

    def log(self, message: str) -> None:
        """A line worth keeping in the scroll-back (an epoch summary, a warning)."""


class NullReporter:
    def task(self, description: str, total: int | None = None) -> None:
        pass

    def advance(self, n: int = 1, status: str = "") -> None:
        pass

    def log(self, message: str) -> None:
        pass
