"""Break-it round 46, lead: a Ctrl-C as a `dlperf.track` block writes its last rows; a stored
run's rebuild is not refused for its untrained weights.

T3's C1 (cases 7-9): the block's end writes the rows `log` still holds (up to FLUSH_ROWS) with
nothing holding off a Ctrl-C; one that landed during that write (seconds of it where the write
waits on another process's lock on the SQLite file) undid it, and the run was marked killed
with none of those rows: 0 of 200. Now the write finishes and the Ctrl-C then stops the script
as it would have: the run `killed`, every row stored.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

import dlperf
from dlperf.config import Experiment
from dlperf.data import load_data
from dlperf.engine.build import build_model
from dlperf.errors import UserError
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


# --- T1's C1: a stored run's rebuild refused for its untrained weights ----------------------

NAN_START = """
import torch
from torch import nn


class EmptyStart(nn.Module):
    def __init__(self, num_classes=10, in_channels=3):
        super().__init__()
        self.head = nn.Linear(in_channels, num_classes)
        # torch.empty's start: whatever memory held, NaN here as it may be by chance
        self.scale = nn.Parameter(torch.full((in_channels,), float("nan")))

    def forward(self, x):
        return self.head(x.mean(dim=(2, 3)) * self.scale)


def empty_start(num_classes=10, in_channels=3):
    return EmptyStart(num_classes, in_channels)
"""


def test_a_stored_runs_rebuild_is_not_refused_for_its_initial_weights(tmp_path: Path) -> None:
    """T1's C1 (round 46, cases 2 and 3): a model whose weights start as torch.empty's trained
    and finished, then `export` refused it at random, exit 2, "gives NaN or inf scores for
    finite images before any training step": the rebuild of a stored run checked its initial
    weights, which the trained ones replace next. Only a new run's build checks them now."""
    model_file = tmp_path / "m.py"
    model_file.write_text(NAN_START)
    exp = Experiment.model_validate(
        {"model": {"name": f"{model_file}:empty_start"}, "data": {"name": "digits", "limit": 32}}
    )
    data = load_data(exp.data)
    with pytest.raises(UserError, match="gives NaN or inf scores for finite images before"):
        build_model(exp, data, torch.device("cpu"))  # a new run: refused, as before
    build_model(exp, data, torch.device("cpu"), fresh=False)  # export's, resume's: built


def test_a_ctrl_c_right_after_a_batch_is_committed_stores_it_once(
    db: str, monkeypatch: pytest.MonkeyPatch, python_sigint: None
) -> None:
    """T2's C3 (round 46): a Ctrl-C landing once `log`'s batch of 256 rows was committed but
    before the batch was let go stored it again at the block's end: 7,552 loss rows for 7,424
    steps, against "each row is stored once". The write and the letting go are one step now."""
    real = RunStore.log_metrics
    calls: list[int] = []

    def committed_then_ctrl_c(self: RunStore, *args: Any, **kwargs: Any) -> Any:
        done = real(self, *args, **kwargs)
        calls.append(1)
        if len(calls) == 1:
            signal.raise_signal(signal.SIGINT)  # Ctrl-C once the first batch is committed
        return done

    monkeypatch.setattr(RunStore, "log_metrics", committed_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt), dlperf.track("ctrl-c after a batch", store=db) as run:
        for step in range(1, 1001):
            run.log(step, loss=1.0 / step)
    monkeypatch.undo()
    store = dlperf.Store(db)
    assert store.run(run.id).status == "killed"
    steps = [step for step, _ in store.metrics(run.id, "train/loss")]
    assert len(steps) == len(set(steps)), "a batch stored twice"
