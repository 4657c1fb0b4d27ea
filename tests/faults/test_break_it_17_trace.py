"""The seventeenth break-it round, part G, cause 4: in `dlperf run --profile` the last
ProfilerStep range held 3-12 ms of host work outside every phase, so `runs trace` said
3.640 ms per step where the phases summed to 2.13 ms (shares adding to 58.6%). The clock
started timing (a device synchronise, contention readings of every thread) as the window's
last step ended, before the window closed that step's range. The window now closes it first:
the clock's start of timing falls outside the trace."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from torch.profiler import record_function

from dlperf import contention
from tests.conftest import CliResult

# 8 steps an epoch: the window after 2 warm-up steps (1 profiler warm-up step, 3 recorded)
# ends at step 6, inside epoch 1, and steps 7 and 8 are timed.
BASE = """
[model]
name = "smallcnn"
[data]
name = "digits"
limit = 256
[train]
epochs = 1
batch_size = 32
lr = 0.05
[run]
threads = 1
warmup_steps = 2
"""

MARK = "test::timing_starts"


@pytest.fixture
def marked_timing_starts(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every start of a timed stretch leaves a range in a trace being recorded."""
    start = contention.Window.start

    def marked(self: contention.Window) -> None:
        with record_function(MARK):
            start(self)

    monkeypatch.setattr(contention.Window, "start", marked)
    yield


def test_the_clock_starts_timing_after_the_last_profiled_step_is_closed(
    cli: Callable[..., CliResult], tmp_path: Path, marked_timing_starts: None
) -> None:
    (tmp_path / "base.toml").write_text(BASE)
    ran = cli("run", "base.toml", "--profile")
    assert ran.code == 0, ran.err
    (trace,) = tmp_path.rglob("rank0.pt.trace.json.gz")
    events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    steps = [e for e in events if e.get("name", "").startswith("ProfilerStep#")]
    assert len(steps) == 3
    inside = [
        e["name"]
        for e in events
        if e.get("name") == MARK
        for s in steps
        if s["ts"] <= e["ts"] <= s["ts"] + s["dur"]
    ]
    assert inside == []


def test_the_timed_phases_start_with_the_clock_after_the_window(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    """The trace is written as the window's last step ends, before the clock starts timing:
    the first timed step's phases must not hold it either (they started at that step's last
    mark, so that they summed to more than the timed seconds they are a share of)."""
    (tmp_path / "base.toml").write_text(BASE)
    ran = cli("run", "base.toml", "--profile", "--timing", "phases", "--json")
    assert ran.code == 0, ran.err
    run = json.loads(ran.out)
    timed_steps = run["timed_samples"] // run["samples_per_step"]
    assert timed_steps == 2
    assert sum(run["phases"].values()) * timed_steps <= run["train_time_s"] + 1e-9
