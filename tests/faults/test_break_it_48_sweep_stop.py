"""Break-it round 48, T3 C5, the sweep's half (fixer G3 settled `scale`'s): `dlperf sweep`
exited 143 and said "stopped; continue it ... --resume" for one stop that came once every point
was stored and its figures drawn, where `run` exits 0 for a stop after its run is stored. The
sweep now settles there: one stop gives exit 0 and the whole document, a second still ends the
command, 128 + the first. The sweep's running is faked (as tests/cli/test_sweep.py does); the
stop is sent by the process itself as the document is printed, so nothing races a timer.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dlperf.cli import console
from tests.cli.test_sweep import Sweeping, _group, _result, _row, sweep_file, swept
from tests.conftest import CliResult

__all__ = ["sweep_file", "swept"]  # the fixtures, used by name


def stopped_as_printed(monkeypatch: pytest.MonkeyPatch, stops: int) -> None:
    """`stops` SIGTERMs the process sends itself as the command prints its --json document."""
    printed = console.printed_json

    def signalled(as_json: bool, document: Any) -> bool:
        for _ in range(stops):
            os.kill(os.getpid(), signal.SIGTERM)  # its handler runs here, in this frame
        return printed(as_json, document)

    monkeypatch.setattr(console, "printed_json", signalled)


@pytest.mark.parametrize("stops", [1, 2])
def test_a_stop_after_the_sweep_is_stored_does_not_unsay_it(
    cli: Callable[..., CliResult],
    sweep_file: Path,
    swept: Sweeping,
    monkeypatch: pytest.MonkeyPatch,
    stops: int,
) -> None:
    swept.result = _result([_row(1, 0.1, test_accuracy=0.9)], [_group(1, 0.1, 0.9)])

    stopped_as_printed(monkeypatch, stops)
    r = cli("sweep", str(sweep_file), "--json")
    assert "continue it" not in r.err, r.err  # before: "stopped; continue it ... --resume 3"
    if stops == 1:  # before: 143, no document
        assert r.code == 0, (r.code, r.err)
        assert json.loads(r.out)["study_id"] == 3
    else:
        assert (r.code, r.out) == (143, ""), (r.code, r.out, r.err)
