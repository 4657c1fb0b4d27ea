"""Break-it round 23, P3 causes C1 and C5: what `runs show` and `dlperf sweep` leave out.

C1: `runs show` of a `dlperf.track` run kept only its val/ and epoch/ keys, and its table only
the columns of a training run's epochs: with `log(step, loss=...)`, the API's own example,
both `epochs` and `steps` were {}; a custom val/f1 gave a table of bare step numbers.
C5: two `dlperf sweep` of one study at once each ranked only the points it ran itself and
named a winner that was not the study's best (a point another process held was dropped).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import dlperf
from dlperf.store import RunStore
from tests.conftest import CliResult, fresh_store_url

Cli = Callable[..., CliResult]
EVENT_S = 300  # generous: how long a test waits for another process to reach a point


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from fresh_store_url(request.param, tmp_path, "bi23v")


def _words(out: str) -> list[list[str]]:
    """Each printed line's words, the table's rules left out."""
    return [[w for w in line.split() if w not in "│┃"] for line in out.splitlines()]


# --- C1: every key a tracked run logged ---------------------------------------------------------


def test_runs_show_gives_every_key_a_tracked_run_logged(store_url: str, cli: Cli) -> None:
    with dlperf.track("tv", config={"lr": 0.1}, store=store_url) as r:
        for s in range(3):
            r.log(s, loss=1.0 / (s + 1), **{"val/f1": 0.5 + s / 10})
    document = json.loads(cli("--db", store_url, "runs", "show", "1", "--json").out)
    assert document["epochs"] == {"train/loss": [1.0, 0.5, 1 / 3], "val/f1": [0.5, 0.6, 0.7]}
    assert document["steps"] == {"train/loss": [0, 1, 2], "val/f1": [0, 1, 2]}
    shown = cli("--db", store_url, "runs", "show", "1")
    assert shown.code == 0, shown.err
    lines = _words(shown.out)
    # One column per key, the keys as stored (what `runs plot --key` takes).
    assert ["step", "train/loss", "val/f1"] in lines
    assert ["0", "1", "0.5"] in lines and ["2", "0.3333", "0.7"] in lines


def test_runs_show_of_a_run_logging_only_loss_is_not_empty(store_url: str, cli: Cli) -> None:
    with dlperf.track("loss-only", store=store_url) as r:
        for s in (10, 20):
            r.log(s, loss=2.0 / s)
    document = json.loads(cli("--db", store_url, "runs", "show", "1", "--json").out)
    assert document["epochs"] == {"train/loss": [0.2, 0.1]}
    assert document["steps"] == {"train/loss": [10, 20]}
    lines = _words(cli("--db", store_url, "runs", "show", "1").out)
    assert ["step", "train/loss"] in lines and ["20", "0.1"] in lines


def test_a_training_runs_epoch_table_is_unchanged(store: RunStore, cli: Cli) -> None:
    """A training run's per-step train/ rows stay out of its per-epoch table."""
    config = {"model": {"name": "smallcnn"}, "data": {"name": "digits"}, "train": {}, "run": {}}
    run = store.create_run("trained", "run", config)
    store.log_metrics(run, [("train/loss", 1, 2.0), ("train/loss", 2, 1.0), ("val/acc1", 1, 0.5)])
    store.finish_run(run, "finished", summary={"test_accuracy": 0.5, "epochs": 1})
    document = json.loads(cli("runs", "show", str(run), "--json").out)
    assert document["epochs"] == {"val/acc1": [0.5]} and "steps" not in document
