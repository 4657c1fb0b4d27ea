"""Break-it round 46, lead: Ctrl-C and `dlperf.track`'s writes (its last rows kept, a committed
batch stored once); a stored run's rebuild not refused for its untrained weights; what `runs
tag` and `runs show` print of long values and lists of tables.

T3's C1 (cases 7-9): the block's end writes the rows `log` still holds (up to FLUSH_ROWS) with
nothing holding off a Ctrl-C; one that landed during that write (seconds of it where the write
waits on another process's lock on the SQLite file) undid it, and the run was marked killed
with none of those rows: 0 of 200. Now the write finishes and the Ctrl-C then stops the script
as it would have: the run `killed`, every row stored.
"""

from __future__ import annotations

import signal
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

import dlperf
from dlperf.config import Experiment
from dlperf.data import load_data
from dlperf.engine.build import build_model
from dlperf.errors import UserError
from dlperf.store.query import setting
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


# --- T2's C1 and C2: what runs tag and runs show print ------------------------------------


def test_runs_tag_cuts_a_long_value_as_runs_show_does(db: str, cli: Callable[..., Any]) -> None:
    """T2's C1 (round 46): `runs tag` printed a 5,000-character value whole, every line of its
    table 5,105 characters wide, where `runs show` cuts a tag past 200 characters."""
    with dlperf.track("tagged", store=db) as run:
        run.log(1, loss=1.0)
    result = cli("runs", "tag", str(run.id), "note=" + "x" * 5000)
    assert result.code == 0, result.err
    assert "(5,000 characters; --json holds it whole)" in result.out
    assert max(len(line) for line in result.out.splitlines()) < 400
    assert dlperf.Store(db).run(run.id).tags["note"] == "x" * 5000  # stored whole


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ([{"d": 1}], "[{d = 1}]"),
        ([{"a b": "x", "c": [1, {"e": True}]}], '[{"a b" = "x", c = [1, {e = true}]}]'),
        ([1, "a"], '[1, "a"]'),
    ],
    ids=["table", "nested", "plain"],
)
def test_a_list_of_tables_is_shown_as_set_reads_it_back(value: Any, shown: str) -> None:
    """T2's C2 (round 46): a list holding a table was shown as Python's `[{'d': 1}]`, which
    `--set` and `--where` cannot read; now TOML's inline table, which they read back as stored."""
    assert setting(value) == shown
    assert tomllib.loads(f"v = {shown}")["v"] == value
