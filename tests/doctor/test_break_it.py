"""Break-it round of issue 41 on `dlperf doctor`: a sweep point stopped by SIGTERM, examined,
had nothing said about it but the machine's load; its figures were a partial run's."""

from __future__ import annotations

import pytest

from dlperf import doctor
from dlperf.store import RunStore

# A dlperf run's config sections (store.query.EXPERIMENT_SECTIONS): without them the run reads
# as a dlperf.track one, which the doctor advises in its loop's own terms.
EXP: dict[str, dict[str, object]] = {"model": {}, "data": {}, "train": {}, "run": {}}


@pytest.mark.parametrize(
    ("status", "checkpoint", "fix"),
    [
        ("killed", True, "continue it from its last checkpoint: dlperf run --resume {id}"),
        ("killed", False, "run it again (it kept no checkpoint: run.checkpoint = false); a sweep"),
    ],
)
def test_a_run_stopped_before_its_last_epoch_is_said_to_be_partial(
    store: RunStore, status: str, checkpoint: bool, fix: str
) -> None:
    config = EXP | {"train": {"epochs": 4, "lr": 0.05}, "run": {"checkpoint": checkpoint}}
    run = store.create_run("stopped", "run", config)
    store.log_metrics(run, [("epoch/train_loss", 1, 2.0), ("epoch/train_loss", 2, 1.5)])
    store.finish_run(run, status, error="interrupted")
    findings = [f for f in doctor.examine(store, [run]) if f.rule == "unfinished"]
    assert [(f.severity, f.evidence) for f in findings] == [
        ("warning", f"the run was {status} after 2 of 4 epoch(s): its figures are a partial run's")
    ]
    assert findings[0].fix.startswith(fix.format(id=run))


def test_a_finished_run_is_not_unfinished(store: RunStore) -> None:
    run = store.create_run("done", "run", {"train": {"epochs": 1}})
    store.log_metrics(run, [("epoch/train_loss", 1, 2.0)])
    store.finish_run(run, "finished")
    assert [f for f in doctor.examine(store, [run]) if f.rule == "unfinished"] == []


def test_a_run_stopped_in_its_first_epoch_is_not_sent_to_resume(store: RunStore) -> None:
    """SIGKILLed in epoch 1: there is no checkpoint to resume from (export says so too)."""
    run = store.create_run("early", "run", EXP | {"train": {"epochs": 3}})
    store.finish_run(run, "killed", error="interrupted")
    (finding,) = [f for f in doctor.examine(store, [run]) if f.rule == "unfinished"]
    assert (
        finding.evidence
        == "the run was killed after 0 of 3 epoch(s): its figures are a partial run's"
    )
    assert finding.fix == "run it again: it stopped before its first epoch's checkpoint"
