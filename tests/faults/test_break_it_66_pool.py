"""Break-it round 66, Z1's cause B: the processes multiprocessing starts for a model file.

Before: a model file that made a `multiprocessing.Pool(2)` at import got, per worker, "warning:
model file m_pool2.py started process N (...) as it was imported: it is the model's, left
running, and outlives this command unless the model ends it". The workers, multiprocessing's
daemonic children, were gone when dlperf exited (its exit handler ends them): the line sent
the user hunting for processes that were not there. A plain `multiprocessing.Process` (not
daemonic) got the same line, while dlperf in fact waited for it to end as it exited. And
under the "fork" start method that child, forked inside dlperf's guard on os._exit, could not
end: multiprocessing's os._exit at its end was refused as the model's, and the child ran on
into dlperf's error handling, printing "error: model file m_proc.py called os._exit(0) while
importing" as a second dlperf.

Now: a daemonic child of multiprocessing (a Pool's worker) is not named; a non-daemonic one is
named for what happens ("dlperf waits for it to end as it exits"); a forked child's os._exit
ends that child. A process that does outlive dlperf (subprocess.Popen) is named as before.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dlperf.models.registry import create_model, noting
from dlperf.procs import alive

POOL = """\
import multiprocessing as mp
import torch.nn as nn
POOL = mp.get_context("fork").Pool(2)
def make(num_classes=10, in_channels=1):
    m = nn.Sequential(nn.Flatten(), nn.Linear(64 * in_channels, num_classes))
    m.pool = POOL
    return m
"""


def test_a_pools_workers_are_not_said_to_outlive_the_command(tmp_path: Path) -> None:
    (tmp_path / "m_pool2.py").write_text(POOL)
    with noting() as notes:
        model = create_model(f"{tmp_path / 'm_pool2.py'}:make", in_channels=1)
    workers = [p.pid for p in model.pool._pool]
    model.pool.terminate()  # as multiprocessing's exit handler does at the process's exit
    model.pool.join()
    # before: two lines, "... it is the model's, left running, and outlives this command"
    assert notes == []
    assert len(workers) == 2 and not any(alive(pid) for pid in workers if pid)


PROCESSES = """\
import multiprocessing as mp, subprocess, sys, time
import torch.nn as nn
FORK = mp.get_context("fork")
POOL = FORK.Pool(2)
WORKER = FORK.Process(target=time.sleep, args=(0.2,))
WORKER.start()
OWN = subprocess.Popen(
    [sys.executable, "-c", "import time; time.sleep(30)"],
    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,  # not holding the test's pipes
)
with open("pids.txt", "w") as f:
    f.write(" ".join(str(p.pid) for p in [*POOL._pool, WORKER, OWN]))
def make(num_classes=10, in_channels=1):
    return nn.Sequential(nn.Flatten(), nn.Linear(64 * in_channels, num_classes))
"""


@pytest.mark.faults
def test_each_child_of_a_model_file_is_told_as_what_happens_to_it(tmp_path: Path) -> None:
    (tmp_path / "m_proc.py").write_text(PROCESSES)
    args = ["--db", str(tmp_path / "s.db"), "analyze", "m_proc.py:make", "--input", "1,8,8"]
    done = subprocess.run(
        [sys.executable, "-m", "dlperf", *args, "--json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    *workers, worker, own = (int(p) for p in (tmp_path / "pids.txt").read_text().split())
    try:
        lines = [line for line in done.stderr.splitlines() if "started process" in line]
        assert done.returncode == 0, done.stderr
        # before: also "error: model file m_proc.py called os._exit(0) while importing", from
        # the forked child that could not end
        assert "os._exit" not in done.stderr, done.stderr
        assert [line.split()[6] for line in lines] == [str(worker), str(own)], lines
        assert lines[0].endswith(
            "as it was imported: it is the model's, left running, and dlperf waits for it to "
            "end as it exits (multiprocessing joins the processes it started), unless the "
            "model ends it"
        ), lines
        assert lines[1].endswith(
            "it is the model's, left running, and outlives this command unless the model ends it"
        ), lines
        # what each line says is so: the pool's workers and the joined child gone, its own on
        assert not any(alive(pid) for pid in [*workers, worker])
        assert alive(own)
    finally:
        os.kill(own, 9)
