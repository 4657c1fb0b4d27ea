"""Break-it round 5 (issue 41): a user's thread, and the Python API's `track` and `analyze`.

A model that starts a non-daemon thread kept `dlperf run` alive after its run was stored
finished, deaf to SIGTERM and SIGINT (F4). `TrackedRun.log` let float()'s and int()'s errors
through, took a key the store refuses and failed the whole run at the block's end, losing its
earlier metrics, and dropped a call after the block silently (F10). A sys.exit in a forward
escaped `dlperf.analyze` (F11); `track` recorded a run on the meta device (F12, a27).

The command that could hang runs in a process (group) of its own under a guard: a regression
fails its test instead of hanging the suite (a guard, not a timing assertion).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

import dlperf

GUARD_S = 300  # far past what a one-epoch run on 96 digits takes on the busy shared machine

EXPERIMENT = """\
[model]
name = "smallcnn"
[data]
name = "digits"
limit = 96
[train]
epochs = 1
batch_size = 32
[run]
threads = 1
warmup_steps = 1
"""

THREAD_MODEL = """\
import threading
import time

from torch import nn


class Net(nn.Module):
    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        threading.Thread(target=time.sleep, args=(3600,), name="user-sleeper").start()
        self.f = nn.Sequential(nn.Flatten(), nn.Linear(64, num_classes))

    def forward(self, x):
        return self.f(x)
"""


@pytest.mark.faults  # over 10 s under load: make test-faults
def test_a_models_non_daemon_thread_does_not_keep_a_finished_run_alive(tmp_path: Path) -> None:
    """F4 (m18): the run ends with its code, a warning naming the thread, and no process left."""
    model = tmp_path / "threaded.py"
    model.write_text(THREAD_MODEL)
    exp = tmp_path / "exp.toml"
    exp.write_text(EXPERIMENT)
    db = tmp_path / "runs.db"
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "dlperf", "--db", str(db), "run", str(exp),
            "--set", "run.threads=1", "--set", f"model.name={model}:Net",
        ],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        cwd=tmp_path,
    )  # fmt: skip
    try:
        out, err = proc.communicate(timeout=GUARD_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"dlperf run still running after {GUARD_S} s (its model's thread held it)")
    assert proc.returncode == 0, (out, err)
    assert "user-sleeper" in err.splitlines()[-1], err
    assert "Traceback" not in err
    with pytest.raises(ProcessLookupError):  # nothing of the group is left
        os.killpg(proc.pid, 0)
    [run] = dlperf.Store(str(db)).runs()
    assert run.status == "finished"


@pytest.mark.parametrize(
    ("step", "metrics", "named"),
    [
        (1, {"loss": "abc"}, "'abc'"),
        (1, {"loss": "1.5"}, "'1.5'"),
        ("x", {"loss": 1.0}, "'x'"),
        (1.5, {"loss": 1.0}, "1.5"),
        (True, {"loss": 1.0}, "True"),
        (1, {"acc": None}, "None"),
        (1, {"loss": 1.0, "a/b/c": [1, 2]}, "[1, 2]"),
        (1, {"loss": torch.ones(2)}, "Tensor"),
        (1, {"val/" + "x" * 150: 0.5}, "154 characters"),
        (1, {"val/a\x00b": 0.5}, "NUL"),
    ],
    ids=[
        "text",
        "number-as-text",
        "step-text",
        "step-fraction",
        "step-bool",
        "none",
        "list",
        "tensor",
        "long",
        "nul",
    ],
)
def test_log_refuses_bad_input_at_once_and_keeps_the_runs_metrics(
    db: str, step: Any, metrics: dict[str, Any], named: str
) -> None:
    """F10 (a14, a20, a21): one UserError at the call, nothing of it half-logged, and the run's
    earlier metrics kept once the block ends."""
    with dlperf.track("bad-log") as run:
        run.log(1, loss=2.0)
        with pytest.raises(dlperf.UserError) as caught:
            run.log(step, **metrics)
        run.log(2, loss=1.0)
    assert named in str(caught.value)
    store = dlperf.Store(db)
    assert store.run(run.id).status == "finished"
    assert store.metric_keys(run.id) == ["train/loss"]
    assert store.metrics(run.id, "loss") == [(1, 2.0), (2, 1.0)]


def test_log_still_takes_what_it_took(db: str) -> None:
    """Numbers of every kind a loop has at hand: NumPy's, a one-element tensor (a bool is
    refused since round 6, F6)."""
    import numpy as np

    with dlperf.track("good-log") as run:
        run.log(np.int64(1), loss=torch.tensor(0.5), acc=np.float32(0.25))
        run.log(torch.tensor(2), loss=0.25)
    store = dlperf.Store(db)
    assert store.metrics(run.id, "loss") == [(1, 0.5), (2, 0.25)]
    assert store.metrics(run.id, "acc") == [(1, 0.25)]


def test_log_and_phase_after_the_block_are_refused(db: str) -> None:
    """F10 (a28): a call after the run ended was dropped silently."""
    with dlperf.track("after") as run:
        run.log(1, loss=1.0)
    with pytest.raises(dlperf.UserError, match=f"run {run.id} has ended"):
        run.log(2, loss=0.5)
    with pytest.raises(dlperf.UserError, match=f"run {run.id} has ended"), run.phase("forward"):
        pass
    assert dlperf.Store(db).metrics(run.id, "loss") == [(1, 1.0)]


class Exits(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(12, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        sys.exit(4)


def test_analyze_tells_a_forwards_sys_exit_as_a_user_error() -> None:
    """F11 (a12): every other error of the forward already was one."""
    with pytest.raises(dlperf.UserError, match=r"sys\.exit\(4\)"):
        dlperf.analyze(Exits(), (3, 2, 2))


@pytest.mark.parametrize("device", ["meta", torch.device("meta")])
def test_track_refuses_the_meta_device(db: str, device: str | torch.device) -> None:
    """F12 (a27): a run recorded on a device that holds no data."""
    with pytest.raises(dlperf.UserError, match="meta"), dlperf.track("m", device=device):
        pass
    assert dlperf.Store(db).runs() == []
