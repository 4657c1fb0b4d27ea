"""The sixteenth break-it round, part D, cause 3: `dlperf doctor` quoted a figure rounded onto
the threshold it had crossed, so that a true finding read as false: "(x2.0 > x2)" for epoch
throughputs of 1000 and 2040 samples/s, "(x1.10 > x1.1)" for a loss that rose from 1.0 to 1.104.
The same held for the shares quoted as percentages (data wait "20% > 20%", an operator's
self time "25% > 25%", busy threads "50% (< 50%)"). Each figure now gets the digits it takes
to read past its threshold."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dlperf
from dlperf import doctor
from dlperf.store import RunStore
from tests.conftest import CliResult


def _evidence(store: RunStore, run_id: int) -> str:
    (finding,) = doctor.examine(store, [run_id])
    return finding.evidence


def _stored(store: RunStore, system: dict[str, Any] | None = None, **summary: Any) -> int:
    run = store.create_run("r", "run", {"train": {"lr": 0.1}}, system=system)
    store.finish_run(run, "finished", summary=summary)
    return run


def test_a_loss_rise_reads_past_its_threshold(cli: Callable[..., CliResult], db: str) -> None:
    """The tester's repro: a tracked run whose epoch loss rose by x1.104 (threshold x1.1). Its
    rows are at the steps its loop gave (round 38: not "epoch 1")."""
    with dlperf.track("r", config={"train": {"lr": 0.1, "epochs": 2}}, store=db) as r:
        r.log(1, **{"epoch/train_loss": 1.0})
        r.log(2, **{"epoch/train_loss": 1.104})
    result = cli("doctor", "1")
    assert result.code == 0, result.err
    assert (
        "  warning  lr-too-high: epoch/train_loss rose from 1.0000 (step 1) to 1.1040 "
        "(step 2) (x1.104 > x1.1) at train.lr 0.1\n"
    ) in result.out


def test_a_throughput_spread_reads_past_its_threshold(store: RunStore) -> None:
    run = _stored(store, throughput_spread={"min": 1000.0, "median": 1500.0, "max": 2040.0})
    assert _evidence(store, run) == (
        "epoch throughputs range from 1000.0 to 2040.0 samples/s (x2.04 > x2): "
        "the throughput cannot be trusted"
    )
    # the digits a figure clear of its threshold always had
    run = _stored(store, throughput_spread={"min": 1000.0, "median": 1500.0, "max": 2500.0})
    assert "(x2.5 > x2)" in _evidence(store, run)


def test_a_data_wait_reads_past_its_share(store: RunStore) -> None:
    run = _stored(store, phases={"data": 0.00203, "forward": 0.00797})
    assert _evidence(store, run).startswith("data wait 2.0 ms of a 10.0 ms step (20.3% > 20%;")


def test_busy_threads_read_below_their_share(store: RunStore) -> None:
    system = {"device": "cpu", "threads": 1, "usable_cores": 1}
    run = _stored(store, system, train_time_s=10.0, cpu_time_s=4.97)
    assert "they were busy 49.7% of the time (< 50%)" in _evidence(store, run)


def test_an_operator_share_reads_past_its_threshold(store: RunStore, tmp_path: Path) -> None:
    """A profiled step of 1000 µs whose largest operator, a copy, takes 254 µs (25.4%)."""
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#7", "ts": 0, "dur": 1000},
        {"ph": "X", "cat": "user_annotation", "name": "dlperf::h2d", "ts": 0, "dur": 300},
        {"ph": "X", "cat": "cpu_op", "name": "aten::copy_", "ts": 10, "dur": 254},
        {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "ts": 400, "dur": 200},
    ]
    for e in events:
        e.update(pid=1, tid=1)
    trace = tmp_path / "a.pt.trace.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    run = _stored(store)
    store.add_artifact(run, "trace", trace)
    assert _evidence(store, run).startswith(
        "aten::copy_ (copy) takes 25.4% of each profiled step (0.25 of 1.00 ms, mostly in h2d; "
        "> 25%)"
    )
