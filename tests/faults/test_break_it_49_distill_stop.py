"""Break-it round 49, T3 C1: `dlperf distill` (and `staleness --train`) exited 143 for one stop
that came once every stage was stored, and distill said "stopped; continue it ... --resume 1"
with nothing left to run: round 48 settled `sweep`, `scale` and `max-batch` there, not these.
Both now settle once their runs are stored and their figure drawn. The study's running is faked
(as tests/cli/test_distill.py does); the stop is sent by the process itself as the document is
printed, so nothing races a timer.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from tests.cli.test_distill import EXP, Distilling, _result, distilled
from tests.conftest import CliResult
from tests.faults.test_break_it_48_sweep_stop import stopped_as_printed

__all__ = ["distilled"]  # the fixture, used by name


@pytest.mark.parametrize("stops", [1, 2])
def test_a_stop_after_distill_is_stored_does_not_unsay_it(
    cli: Callable[..., CliResult],
    distilled: Distilling,
    monkeypatch: pytest.MonkeyPatch,
    stops: int,
) -> None:
    distilled.result = _result()
    stopped_as_printed(monkeypatch, stops)
    r = cli("distill", EXP, "--json")
    assert "continue it" not in r.err, r.err
    if stops == 1:  # before: 143, no document
        assert r.code == 0, (r.code, r.err)
        assert json.loads(r.out)["study_id"] == 7
    else:
        assert (r.code, r.out) == (143, ""), (r.code, r.out, r.err)
