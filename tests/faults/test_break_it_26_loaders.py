"""Round 26's slow suite: round 25's loader-worker tests met two races.

A DataLoader worker killed as an epoch's iterator was being made (its workers starting) made
torch's SIGCHLD handler raise "DataLoader worker (pid 428) is killed by signal: Killed." out
of `iter(loader)`, before the watch held that iterator: no worker it knew had ended, so the
line was torch's, without the signal's name or the out-of-memory hint the promise gives
(docs/faults.md, "A worker that dies is one line"). And a group's SIGTERM left the run
`lost` in 2 tries of 3: torch's SIGCHLD handler raised for the dying workers inside the
stopped run's marking."""

from __future__ import annotations

import signal
from typing import Any

import pytest

from dlperf import stopping
from dlperf.data.loaders import WorkerDied, _WorkerWatch


class _Starting:
    """A loader whose iterator's start meets torch's handler for a worker killed meanwhile."""

    def __init__(self, said: str) -> None:
        self.said = said

    def __iter__(self) -> Any:
        raise RuntimeError(self.said)


@pytest.mark.parametrize(
    ("said", "line", "hint"),
    [
        (
            "DataLoader worker (pid 428) is killed by signal: Killed. ",
            "a DataLoader worker (pid 428) was killed by SIGKILL",
            True,
        ),
        (
            "DataLoader worker (pid 9) is killed by signal: Bus error. It is possible that "
            "dataloader's workers are out of shared memory.",
            "a DataLoader worker (pid 9) was killed by SIGBUS",
            False,
        ),
    ],
)
def test_a_worker_killed_as_an_epoch_starts_is_named_with_its_signal(
    said: str, line: str, hint: bool
) -> None:
    with pytest.raises(WorkerDied) as died:
        _WorkerWatch().start(_Starting(said))  # type: ignore[arg-type]
    assert died.value.message == line
    assert (died.value.hint is not None and "out-of-memory" in died.value.hint) is hint


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
