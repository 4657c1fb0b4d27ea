"""Break-it round 46, lead: a Ctrl-C as a `dlperf.track` block writes its last rows.

T3's C1 (cases 7-9): the block's end writes the rows `log` still holds (up to FLUSH_ROWS) with
nothing holding off a Ctrl-C; one that landed during that write (seconds of it where the write
waits on another process's lock on the SQLite file) undid it, and the run was marked killed
with none of those rows: 0 of 200. Now the write finishes and the Ctrl-C then stops the script
as it would have: the run `killed`, every row stored.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from typing import Any

import pytest

import dlperf
from dlperf.store.runstore import RunStore


@pytest.fixture
def python_sigint() -> Iterator[None]:
    """Python's own Ctrl-C handler, as a user's script has (a test runner's may differ)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_ctrl_c_during_the_blocks_last_write_keeps_every_row(
    db: str, monkeypatch: pytest.MonkeyPatch, python_sigint: None
) -> None:
    real = RunStore.log_metrics

    def interrupted_write(self: RunStore, *args: Any, **kwargs: Any) -> Any:
        signal.raise_signal(signal.SIGINT)  # Ctrl-C as the write begins
        return real(self, *args, **kwargs)

    with pytest.raises(KeyboardInterrupt), dlperf.track("ctrl-c at the end", store=db) as run:
        for step in range(1, 201):
            run.log(step, loss=1.0 / step)
        monkeypatch.setattr(RunStore, "log_metrics", interrupted_write)
    monkeypatch.undo()
    store = dlperf.Store(db)
    assert store.run(run.id).status == "killed"
    assert len(store.metrics(run.id, "train/loss")) == 200
