"""The console of stderr (`console.err`): progress, warnings and errors, and how it goes quiet
when its reader is gone or does not read."""

from __future__ import annotations

from contextlib import suppress
from typing import Any

from rich.console import Console

from dlperf.std_streams import null_over, unread


class Stderr(Console):
    """stderr's, its reader gone (`dlperf run ... 2>&1 | head -1`): rich raised SystemExit(1),
    stored as the model's sys.exit, and put /dev/null over stdout, losing the results. Progress
    is optional: it goes quiet, stderr on /dev/null (no later write meets the closed pipe).
    The process's own stderr goes quiet below rich at any failed write (`std_streams._Stderr`:
    a closed pipe, /dev/full); this is for one it did not wrap (an embedding program's)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        with suppress(OSError, ValueError):  # no descriptor: a test's capture
            null_over(self.file.fileno())

    def print(self, *objects: Any, **kwargs: Any) -> None:
        """A stop signal while a line waits on a reader who does not read (a full pipe): it
        goes quiet too, or the stopped command's last line (run's resume hint) waited as long."""
        try:
            super().print(*objects, **kwargs)
        except KeyboardInterrupt:
            self.quiet = self.quiet or unread(self.file)
            raise
