"""Break-it round 39, fixer F6: DataLoader workers past the usable cores.

T3's C4: `dlperf run` with data.loader = torchvision and data.num_workers = 64 on a 2-core host
printed torch's raw UserWarning ("This DataLoader will create 64 worker processes in total. Our
suggested max number of worker in current system is 2, ...") with its file path and source
line, twice (once as the DataLoader was built, once as its iterator started), and dlperf said
nothing of its own. Now torch's check is left out of dlperf's DataLoader, and the run says one
line of its own through the reporter, as it says fewer free cores than run.threads (a warning,
not a refusal: torch only suggests at most a worker a core, and workers that wait on files do
not take one): `warning: data.num_workers = 2 on 1 usable cores: ...`. The tensor loader, which
starts no workers, says nothing of them.

The command is a real `python -m dlperf` whose CPU affinity is one core (set between fork and
exec), so that two workers are already past its cores on any host.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dlperf.config import DataConfig
from dlperf.data import load_data
from dlperf.data import loaders as loaders_module

SYNTHETIC = """[model]
name = "smallcnn"
[data]
name = "synthetic"
shape = [3, 8, 8]
num_classes = 4
size = 64
loader = "{loader}"
num_workers = {workers}
[train]
epochs = 1
batch_size = 32
[run]
threads = 1
"""

SAID = (
    "warning: data.num_workers = 2 on 1 usable cores: workers past the cores take turns on "
    "them, and the steps they feed wait; set data.num_workers = 1 or fewer"
)


def _run_on_one_core(tmp_path: Path, loader: str, workers: int) -> subprocess.CompletedProcess[str]:
    """`python -m dlperf run` of a tiny synthetic experiment, its affinity one core."""
    exp = tmp_path / "exp.toml"
    exp.write_text(SYNTHETIC.format(loader=loader, workers=workers))
    core = min(os.sched_getaffinity(0))

    def one_core() -> None:  # in the child, between fork and exec
        os.sched_setaffinity(0, {core})

    env = {**os.environ, "DLPERF_DB": str(tmp_path / "s.db"), "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "dlperf", "run", str(exp)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=one_core,
    )


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs CPU affinity (Linux)")
def test_workers_past_the_cores_are_one_dlperf_warning(tmp_path: Path) -> None:
    """Before: torch's UserWarning with dataloader.py's path and source line, twice."""
    done = _run_on_one_core(tmp_path, "torchvision", 2)
    assert done.returncode == 0, done.stderr
    assert "UserWarning" not in done.stderr, done.stderr
    assert "dataloader.py" not in done.stderr, done.stderr
    said = [line for line in done.stderr.splitlines() if "num_workers" in line]
    assert said == [SAID], done.stderr


def _synthetic(loader: str, workers: int) -> DataConfig:
    return DataConfig(
        name="synthetic",
        shape=[3, 8, 8],
        num_classes=4,
        size=64,
        loader=loader,
        num_workers=workers,
    )


def test_the_warning_is_a_note_of_the_data_only_where_workers_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The note goes with the data's others (what `run`, `sweep` and `data describe` say as
    warnings); none for workers within the cores, nor for the tensor loader of an in-memory
    set, which starts no workers whatever the count."""
    monkeypatch.setattr(loaders_module, "usable_cores", lambda: 1)
    notes = load_data(_synthetic("torchvision", 2)).notes
    assert [n for n in notes if "num_workers" in n] == [SAID.removeprefix("warning: ")]
    assert not [n for n in load_data(_synthetic("tensor", 64)).notes if "num_workers" in n]
    assert not [n for n in load_data(_synthetic("torchvision", 1)).notes if "num_workers" in n]
