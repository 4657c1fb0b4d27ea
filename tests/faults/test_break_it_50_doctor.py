"""Break-it round 49, left and fixed in round 50: `dlperf doctor` said nothing of a
`calibrate` run whose own summary said it was unreliable (its threads had waited for a CPU
62% of the time). The shared-host rule reads a training run's figures, and a calibration's or
a `predict --measure` run's summary has its own shape. The `unreliable-measurement` rule now
reads the mark those runs store (`reliable`, `reliability_note`), once, and not a training
run's, which shared-host and unsteady-throughput judge from its figures.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from dlperf import doctor
from dlperf.store import RunStore
from tests.conftest import CliResult

NOTE = "contended: its threads waited for a CPU 62% of their runnable time"


def _stored(store: RunStore, kind: str, **summary: Any) -> int:
    run = store.create_run(f"{kind} here", kind, {"name": None}, None, {"host": "h"})
    store.finish_run(run, "finished", summary=summary)
    return run


@pytest.mark.parametrize(
    ("kind", "fix"),
    [
        ("calibrate", "rerun `dlperf calibrate` on an idle host"),
        ("predict", "rerun `dlperf predict --measure` on an idle host"),
        ("detect", "measure it again on an idle host"),
    ],
)
def test_a_measurement_marked_unreliable_is_said(store: RunStore, kind: str, fix: str) -> None:
    run = _stored(store, kind, reliable=False, reliability_note=NOTE, cpu_wait_share=0.62)
    (finding,) = doctor.examine(store, [run])
    assert (finding.rule, finding.severity) == ("unreliable-measurement", "warning")
    assert finding.evidence == f"it marked its own figures unreliable: {NOTE}"
    assert finding.fix.startswith(fix)
    assert finding.figures["cpu_wait_share"] == 0.62


def test_a_reliable_or_unjudged_measurement_is_not(store: RunStore) -> None:
    judged = _stored(store, "calibrate", reliable=True, reliability_note=None)
    older = _stored(store, "calibrate")  # stored before measurements were marked
    assert doctor.examine(store, [judged, older]) == []


def test_a_training_run_s_mark_is_left_to_its_own_rules(store: RunStore) -> None:
    """A trained run's mark comes from the figures shared-host and unsteady-throughput read;
    this rule would only say it twice."""
    run = _stored(store, "run", reliable=False, reliability_note=NOTE)
    assert [f.rule for f in doctor.examine(store, [run])] == []


def test_the_cli_says_it(cli: Callable[..., CliResult], store: RunStore) -> None:
    run = _stored(store, "calibrate", reliable=False, reliability_note=NOTE)
    r = cli("doctor", str(run), "--json")
    assert r.code == 0, r.err  # a warning, not an error
    (finding,) = json.loads(r.out)["findings"]
    assert finding["rule"] == "unreliable-measurement"
