"""Break-it round 27, what the lead fixed beside the testers' causes.

- L1: a stopped sweep that continued an older study of its name (the newest ran other
  points) named the newest study in its stop line, and suggested `--resume` of that study,
  which holds other points.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dlperf import stopping
from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.faults.test_break_it_25_loaders import EXAMPLE, SOURCE
from tests.faults.test_break_it_26_stops import BASE, SWEEP, _stop

Cli = Callable[..., CliResult]


def test_a_stopped_sweep_names_the_older_study_it_continued(
    cli: Cli, store: RunStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "base.toml").write_text(BASE)
    (tmp_path / "sw.toml").write_text(SWEEP)
    older = store.create_study("sw", "sweep")  # no runs yet: every run a point of this sweep
    newest = store.create_study("sw", "sweep")
    store.create_run("other", "train", {"not": "a point"}, study_id=newest)
    studies: list[int] = []

    def stopped(self: Any, *rest: Any, **kwargs: Any) -> Any:
        studies.append(self.study_id)
        _stop()

    monkeypatch.setattr("dlperf.sweep.runner.SweepRun.run_here", stopped)
    result = cli("sweep", "sw.toml")
    assert result.code == 130, (result.out, result.err)
    assert studies == [older]
    line = result.err.splitlines()[-1]
    assert line.startswith(f"sweep study {older} stopped"), result.err
    assert line.endswith(f"--resume {older}"), line


# --- L2: dlperf.run drops its run's warnings -----------------------------------------------

SOFTMAX = """
import torch, torch.nn as nn
def build(num_classes=10, in_channels=1):
    return nn.Sequential(nn.Flatten(), nn.LazyLinear(num_classes), nn.Softmax(dim=1))
"""


def test_dlperf_run_gives_its_warnings_as_python_warnings(tmp_path: Path) -> None:
    """Before: `dlperf run` printed "warning: model ... returns probabilities" and dlperf.run
    said nothing (its reporter dropped every line); a notebook shows Python's warnings."""
    import dlperf

    (tmp_path / "net.py").write_text(SOFTMAX)
    config = {
        "model": {"name": f"{tmp_path / 'net.py'}:build"},
        "data": {"name": "digits", "limit": 64},
        "train": {"epochs": 1, "batch_size": 32},
        "run": {"threads": 1, "warmup_steps": 1, "checkpoint": False,
                "out_dir": str(tmp_path / "runs")},
    }  # fmt: skip
    with pytest.warns(UserWarning, match="returns probabilities") as caught:
        result = dlperf.run(config, store=str(tmp_path / "runs.db"))
    assert result.status == "finished"
    said = [str(w.message) for w in caught if "probabilities" in str(w.message)]
    assert len(said) == 1 and not said[0].startswith("warning:"), said


# --- L3: DataLoader workers under a low open-file limit (tester P4, B) ---------------------


@pytest.mark.faults
@pytest.mark.timeout(900)
def test_loader_workers_out_of_file_descriptors_are_one_line(tmp_path: Path) -> None:
    """Before, at `ulimit -n` 18 to 28 with two DataLoader workers: torch's RuntimeError ("Too
    many open files. Communication with the workers is no longer possible") behind up to 28
    tracebacks of the workers' resource_sharer threads, and no `error:` line; or the line and
    then torch's half-made iterator's finaliser ("no attribute '_workers_status'"). Whichever
    limit, the run finishes or says one line naming `ulimit -n`, exit 1. Every limit from 18 to
    28 now meets the same refusal before the workers start (`_room_for_workers`: two workers
    need about 33 files), so only 28 is run: the limit nearest that need, the first to slip
    past the refusal into torch's own failure were the count to shrink."""
    env = {**os.environ, "PYTHONPATH": SOURCE, "OMP_NUM_THREADS": "1"}
    for limit in (28,):
        command = [
            sys.executable, "-m", "dlperf", "--db", f"sqlite:///{tmp_path / 'runs.db'}", "run",
            str(EXAMPLE), "--set", "run.threads=1", "--set", "train.epochs=1",
            "--set", f"run.out_dir={tmp_path / 'out'}", "--set", "data.loader=torchvision",
            "--set", "data.num_workers=2",
        ]  # fmt: skip

        def lowered(limit: int = limit) -> None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

        done = subprocess.run(
            command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
            preexec_fn=lowered,
        )  # fmt: skip
        said = done.stderr
        if done.returncode == 0:
            continue
        lines = [line for line in said.splitlines() if not line.startswith("epoch ")]
        assert done.returncode == 1, (limit, said)
        assert "Traceback" not in said and "Exception ignored" not in said, (limit, said)
        assert len(lines) == 1 and lines[0].startswith("error: "), (limit, said)
        assert f"ulimit -n {limit} is too low" in lines[0], (limit, said)


def test_a_forked_child_does_not_keep_dlperfs_stop_handler() -> None:
    """A DataLoader worker is forked from the training process: before its worker_init_fn
    ran, it had dlperf's stop handler, so the SIGTERM its parent's shutdown sends a worker
    half-started (the iterator's __init__ cut short by `ulimit -n`) raised KeyboardInterrupt
    in multiprocessing's bootstrap, which printed "Process Process-1: Traceback ..."."""
    saved = {sig: signal.getsignal(sig) for sig in stopping.STOP_SIGNALS}
    try:
        stopping.install()
        pid = os.fork()
        if pid == 0:  # the child: report what its stop signals do, by its exit code
            kept = any(signal.getsignal(sig) == stopping._handler for sig in stopping.taken())
            os._exit(1 if kept else 0)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert signal.getsignal(signal.SIGTERM) == stopping._handler  # the parent keeps it
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
