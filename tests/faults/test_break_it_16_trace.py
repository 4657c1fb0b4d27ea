"""The sixteenth break-it round, part D, the inconclusive case: `dlperf runs trace` of a
smallcnn run (2 convolutions) listed aten::mkldnn_convolution at 5.33 calls per step in
phase "other", and 16.7 ms per step where a training step took about 3 ms. The phase
attribution was right: the profiled window crossed the end of epoch 1, so that one of its
ProfilerStep ranges also held the evaluation (5 batches, 10 convolutions, no dropout) and the
checkpoint, which are no training phase. But the summary counted that work as the steps':
their time, their operators' calls, their idle time. The window now labels the work between
epochs `dlperf::epoch_end`, and the summary leaves it out, saying how long it was."""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from dlperf import traces
from dlperf.errors import UserError
from tests.conftest import CliResult

# The tester's base.toml: 8 steps an epoch, so that the window after the 5 warm-up steps
# (1 profiler warm-up step, 3 recorded) records steps 7, 8 and, after epoch 1's end, 9.
BASE = """
[model]
name = "smallcnn"
[data]
name = "digits"
limit = 256
[train]
epochs = 2
batch_size = 32
lr = 0.05
momentum = 0.9
[run]
threads = 1
checkpoint = true
"""


def test_a_window_across_an_epoch_end_summarises_training_steps_only(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    (tmp_path / "base.toml").write_text(BASE)
    ran = cli("run", "base.toml", "--profile")
    assert ran.code == 0, ran.err
    listed = cli("runs", "trace", "1", "--json", "--top", "1000")
    assert listed.code == 0, listed.err
    (summary,) = json.loads(listed.out)["traces"]
    ops = {op["name"]: op for op in summary["operators"]}
    assert summary["steps"] == 3
    conv = ops["aten::convolution"]  # the dispatcher's, on any backend: 2 a forward pass
    assert conv["calls"] == 6 and set(conv["by_phase_us"]) == {"forward"}
    assert ops["aten::max_pool2d_with_indices"]["calls"] == 3  # one pooling layer
    assert summary["epoch_end_us"] > 0
    shown = cli("runs", "trace", "1")
    title = shown.out.splitlines()[0]
    assert re.fullmatch(
        r".*rank0\.pt\.trace\.json\.gz: 3 steps profiled on cpu, \d+\.\d{3} ms per step; "
        r"\d+\.\d{3} ms between epochs \(evaluation, checkpoint\) left out",
        title,
    ), title


def _event(name: str, cat: str, ts: float, dur: float) -> dict[str, object]:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": 1}


def _written(tmp_path: Path, events: list[dict[str, object]]) -> Path:
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode()))
    return path


def test_the_time_between_epochs_is_left_out_of_the_steps(tmp_path: Path) -> None:
    """Worked by hand: step 1 is 100 µs with a 30 µs mm in forward; step 2 is 300 µs, 200 of
    them between epochs (an evaluation's 180 µs mm), then a 40 µs mm in forward."""
    events = [
        _event("ProfilerStep#1", "user_annotation", 0, 100),
        _event("dlperf::forward", "user_annotation", 10, 50),
        _event("aten::mm", "cpu_op", 20, 30),
        _event("ProfilerStep#2", "user_annotation", 100, 300),
        _event("dlperf::epoch_end", "user_annotation", 110, 200),
        _event("aten::mm", "cpu_op", 120, 180),
        _event("dlperf::forward", "user_annotation", 320, 60),
        _event("aten::mm", "cpu_op", 330, 40),
    ]
    path = _written(tmp_path, events)
    s = traces.summarise(path)
    assert (s.steps, s.step_us, s.epoch_end_us) == (2, 200.0, 200.0)
    assert s.phases_us == {"forward": 110.0}
    (mm,) = s.operators
    assert (mm.calls, mm.cpu_self_us, mm.by_phase_us) == (2, 70.0, {"forward": 70.0})
    assert [(o.step_us, o.compute_only_us, o.idle_us) for o in s.overlap] == [
        (100.0, 30.0, 70.0),
        (100.0, 40.0, 60.0),
    ]
    assert s.phase_table().title == (
        f"{path}: 2 steps profiled on cpu, 0.100 ms per step; "
        "0.200 ms between epochs (evaluation, checkpoint) left out"
    )


def test_steps_that_hold_only_the_time_between_epochs_are_refused(tmp_path: Path) -> None:
    """Nothing would be left to divide by: said in one line, as for steps of no time."""
    path = _written(
        tmp_path,
        [
            _event("ProfilerStep#1", "user_annotation", 0, 100),
            _event("dlperf::epoch_end", "user_annotation", 0, 100),
        ],
    )
    with pytest.raises(UserError) as e:
        traces.summarise(path)
    assert str(e.value) == (
        f"the trace {path}'s 1 ProfilerStep ranges last no time but the time between epochs "
        "(it is not a trace torch.profiler wrote as it is: profile the run again)"
    )
