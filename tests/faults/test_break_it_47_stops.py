"""Round 46's Left list: a command that settled its outcome ignored every stop signal after.

`run` once its run is stored finished and `runs export` once the export is in place call
`stopping.settle()`: a stop from then on does not unsay the outcome (exit 0, not 143). But
every later signal was ignored too, so a reader that never read the output's pipe (`run
--json | slow`, a terminal stopped with Ctrl-S) held the command until SIGKILL. Now a second
stop after the outcome ends what is left of the command, exit 128 + the first, as a `spared`
block gives way to a second signal; one stop alone still does not count. The signals are sent
by the process itself at a named point (as the export's warnings are told, after it settled),
so no test races a timer.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from dlperf.cli import console
from tests.conftest import CliResult
from tests.faults.test_break_it_44_stops import two_runs

__all__ = ["two_runs"]  # the fixture, used by name


@pytest.mark.parametrize("stops", [1, 2])
def test_a_second_stop_after_the_export_settled_ends_it(
    cli: Callable[..., CliResult],
    two_runs: list[int],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    stops: int,
) -> None:
    tell = console.tell

    def signalled(lines: list[str]) -> None:
        for _ in range(stops):
            os.kill(os.getpid(), signal.SIGTERM)  # its handler runs here, in this frame
        tell(lines)

    monkeypatch.setattr(console, "tell", signalled)
    r = cli("runs", "export", "1", "2", "--to", "tensorboard", "--out", "tb", "--json")
    for run_id in two_runs:  # the export is in place either way
        assert len(list((tmp_path / "tb").glob(f"run-{run_id}-*/events.out.tfevents.*"))) == 1
    assert "Traceback" not in r.err
    if stops == 1:  # the outcome's exit code and the whole document
        assert r.code == 0, (r.code, r.err)
        assert sorted(json.loads(r.out)["runs"]) == ["1", "2"], r.out
    else:  # before: exit 0, the second signal ignored as the first
        assert (r.code, r.out) == (143, ""), (r.code, r.out, r.err)
