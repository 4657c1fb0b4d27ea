"""dlperf.distributed.hvd_worker without Horovod (built by `make horovod`, absent here): the
worker as horovodrun starts it, in a process of its own (its failure path exits the process
at once), leaves its pid and, failing, its traceback in rank-R.error with exit code 1, for
either binding; and it imports neither torch nor TensorFlow before a binding asks for one.
Its training paths run under `make test-horovod` (tests/distributed/test_horovod.py)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from dlperf.distributed.contracts import WorkerSpec
from dlperf.distributed.hvd_launch import MODULE

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("horovod") is not None,
    reason="Horovod is installed: its paths are tested by tests/distributed/test_horovod.py",
)


def spec(strategy: str) -> WorkerSpec:
    experiment = {"model": {"name": "smallcnn"}, "data": {"name": "digits"}}
    return WorkerSpec(experiment, 8, 1, 2, True, "horovod", "allreduce", None, strategy, 0, 1,
                      False, True, 1, (1, 8, 8), 10)  # fmt: skip


def start(directory: Path, rank: int) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOROVOD_RANK": str(rank)}
    command = [sys.executable, "-m", MODULE, str(directory / "spec.json")]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("strategy", ["torch", "tensorflow"])
def test_a_rank_that_fails_leaves_its_pid_and_traceback_and_exits_1(
    tmp_path: Path, strategy: str
) -> None:
    spec(strategy).write(tmp_path / "spec.json")
    done = start(tmp_path, 3)
    assert done.returncode == 1
    assert (tmp_path / "rank-3.pid").read_text().isdigit()
    error = (tmp_path / "rank-3.error").read_text()
    assert (
        error.startswith("Traceback") and "ModuleNotFoundError: No module named 'horovod'" in error
    )
    assert error in done.stderr  # also on stderr, where horovodrun's log keeps it
    assert not (tmp_path / "rank-3.json").exists()


def test_a_rank_whose_spec_is_bad_leaves_its_traceback_for_the_launcher(tmp_path: Path) -> None:
    (tmp_path / "spec.json").write_text('{"batch": 8}')  # a spec missing its fields
    done = start(tmp_path, 2)
    assert done.returncode == 1
    assert (tmp_path / "rank-2.pid").read_text().isdigit()
    error = (tmp_path / "rank-2.error").read_text()
    assert error.startswith("Traceback") and "ContractError: WorkerSpec: missing field(s)" in error
    assert not (tmp_path / "rank-2.json").exists()


def test_the_worker_module_imports_neither_framework() -> None:
    probe = (
        "import sys, dlperf.distributed.hvd_worker; "
        "print(sorted(m for m in ('tensorflow', 'torch', 'horovod') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=120, check=True)  # fmt: skip
    assert done.stdout.strip() == "[]"


def test_the_spec_it_reads_round_trips() -> None:
    given = spec("torch")
    assert WorkerSpec.from_dict(asdict(given)) == given
