"""Round 26's slow suite: round 25's loader-worker tests met two races.

A DataLoader worker killed as an epoch's iterator was being made (its workers starting) made
torch's SIGCHLD handler raise "DataLoader worker (pid 428) is killed by signal: Killed." out
of `iter(loader)`, before the watch held that iterator: no worker it knew had ended, so the
line was torch's, without the signal's name or the out-of-memory hint the promise gives
(docs/faults.md, "A worker that dies is one line"). And a group's SIGTERM left the run
`lost` in 2 tries of 3: torch's SIGCHLD handler raised for the dying workers inside the
stopped run's marking."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from dlperf import stopping
from dlperf.data.loaders import WorkerDied, _WorkerWatch


def _die_at_start(worker_id: int) -> None:
    """A worker killed as its iterator is made (the kernel's OOM killer's SIGKILL)."""
    os.kill(os.getpid(), signal.SIGKILL)


@pytest.mark.timeout(120)
def test_a_worker_killed_as_an_epoch_starts_is_named_with_its_signal() -> None:
    """torch's own line came through ("is killed by signal: Killed."), without the signal's
    name or the out-of-memory hint, where its SIGCHLD handler raised out of `iter(loader)`.
    torch's handler is kept out now: the death is found in the wait for the first batch."""
    loader = DataLoader(
        TensorDataset(torch.zeros(8, 1)), batch_size=2, num_workers=1,
        worker_init_fn=_die_at_start,
    )  # fmt: skip
    watch = _WorkerWatch()
    try:
        iterator = watch.start(loader)
        with pytest.raises(WorkerDied) as died, watch.waiting():
            next(iterator)
    finally:
        watch.close()
    pid = watch.iterator._workers[0].pid
    assert died.value.message == f"a DataLoader worker (pid {pid}) was killed by SIGKILL"
    assert died.value.hint is not None and "out-of-memory" in died.value.hint


# A fresh process: torch sets its SIGCHLD handler once per process, at the first iterator.
# Its epochs run first as in a process where none ran before ("fresh"), then again after
# torch's handler was set as a DataLoader of the user's own sets it ("set-before"; the flag
# that keeps torch to one handler a process, which the fresh epochs left set, cleared first).
_EPOCHS = """
import json, signal
import torch
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data._utils import signal_handling
from dlperf.data.loaders import _WorkerWatch
found = {}
for before in ("fresh", "set-before"):
    if before == "set-before":  # a DataLoader of the user's own ran first in the process
        signal_handling._SIGCHLD_handler_set = False
        signal_handling._set_SIGCHLD_handler()
        assert signal.getsignal(signal.SIGCHLD) is not signal.SIG_DFL
    seen = []
    for epoch in range(2):
        watch = _WorkerWatch()
        iterator = watch.start(DataLoader(TensorDataset(torch.zeros(8, 1)), batch_size=2,
                                          num_workers=2))
        for _ in range(4):
            with watch.waiting():
                next(iterator)
            seen.append(signal.getsignal(signal.SIGCHLD))
        watch.close()
        seen.append(signal.getsignal(signal.SIGCHLD))
    found[before] = sorted({str(handler) for handler in seen})
print(json.dumps(found))
"""


@pytest.mark.timeout(120)
def test_no_sigchld_handler_raises_while_an_epoch_runs() -> None:
    """torch's SIGCHLD handler raised for a dead worker wherever the main thread was: once in
    CI inside `Thread.start` of a queue's feeder thread, whose new thread then died on
    `del _limbo[self]` and printed its KeyError traceback above the run's one line (round
    25's killed-worker test in the slow suite). No Python handler runs on SIGCHLD now while
    an epoch's workers live, nor after, whether torch's had been set before or not."""
    done = subprocess.run(
        [sys.executable, "-c", _EPOCHS], capture_output=True, text=True, timeout=100,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    none = [str(signal.SIG_DFL)]
    assert json.loads(done.stdout) == {"fresh": none, "set-before": none}, done.stdout


def test_after_a_stop_a_childs_end_raises_nowhere() -> None:
    """A group's SIGTERM also ends the DataLoader's workers; torch's SIGCHLD handler, active
    between epochs' iterators, raised for them while the stopped run was being marked, which
    cut the mark: the run read `lost` (round 25's group-stop test, 2 failures in 3)."""

    def torchs(signum: int, frame: Any) -> None:
        raise RuntimeError("DataLoader worker (pid 1) is killed by signal: Terminated. ")

    before = signal.getsignal(signal.SIGCHLD)
    signal.signal(signal.SIGCHLD, torchs)
    try:
        stopping.install()
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGTERM)
        assert signal.getsignal(signal.SIGCHLD) == signal.SIG_DFL
        signal.raise_signal(signal.SIGCHLD)  # a worker's end: nothing raises now
    finally:
        signal.signal(signal.SIGCHLD, before)
