"""Break-it round 10, epochs: a tracked run's val/* keys are drawn at the steps it logged them
(not read as epochs), and a stop signal right after an epoch ends keeps that epoch's
checkpoint, as "loses at most the epoch in progress" promises."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

import dlperf
from dlperf.store import RunStore
from tests.conftest import TINY, CliResult
from tests.forked import dlperf_process
from tests.hooks import install

Cli = Callable[..., CliResult]
DEADLINE_S = 600  # generous: the machine is shared and busy


def _one_line(result: CliResult, code: int) -> str:
    assert result.code == code, (result.out, result.err)
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.err, result.err
    return lines[0]


# --- a tracked run on the plot's axes ---------------------------------------------------------


def _tracked(db: str) -> None:
    """Run 1: dlperf.track logging loss and val/acc1 at steps 1-200."""
    with dlperf.track("mine", {"lr": 0.1}, store=db) as run:
        for step in range(1, 201):
            run.log(step, loss=1.0 / step, **{"val/acc1": step / 200})


def test_a_tracked_runs_val_key_is_drawn_at_its_steps(cli: Cli, db: str) -> None:
    _tracked(db)
    # before: exit 2, "nothing to draw: ... no steps_per_epoch in its summary to put it on
    # the step axis (try --x epoch or --x time)"
    r = cli("runs", "plot", "1", "--key", "val/acc1", "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["runs"][0]["points"] == {"val/acc1": 200}
    assert doc["warnings"] == []
    r = cli("runs", "plot", "1", "--json")  # the default keys, all at the steps given
    assert r.code == 0, r.err
    assert json.loads(r.out)["runs"][0]["points"] == {"train/loss": 200, "val/acc1": 200}


def test_a_tracked_run_on_the_epoch_axis_says_it_records_steps(cli: Cli, db: str) -> None:
    _tracked(db)
    # before: exit 0, val/acc1 drawn as 200 "epochs"
    line = _one_line(cli("runs", "plot", "1", "--x", "epoch"), 2)
    assert line.startswith("error: nothing to draw: run 1 records steps, not epochs"), line
    assert "try --x step or --x time" in line
    line = _one_line(cli("runs", "plot", "1", "--key", "val/acc1", "--x", "epoch"), 2)
    assert "run 1 records steps, not epochs" in line


def test_the_positions_of_a_tracked_runs_keys() -> None:
    from dlperf.report.runs import _x_values

    rows = [(20, 0.5, 105.0), (40, 0.7, 107.5)]
    assert _x_values("val/acc1", "step", rows, 100.0, None, tracked=True) == [20, 40]
    assert _x_values("train/loss", "step", rows, 100.0, None, tracked=True) == [20, 40]
    assert _x_values("val/acc1", "epoch", rows, 100.0, None, tracked=True) is None
    assert _x_values("val/acc1", "time", rows, 100.0, None, tracked=True) == [5.0, 7.5]
    # dlperf's own runs as before: val/* at the epoch number
    assert _x_values("val/acc1", "epoch", rows, 100.0, None) == [20, 40]


# --- a stop signal as an epoch ends -----------------------------------------------------------

EPOCHS = 3
STEPS_PER_EPOCH = 20  # digits at batch 64


def _run(tmp_path: Path, db: str, sig: str) -> tuple[int, str]:
    """`dlperf run` of 3 epochs that sends itself SIG as its first checkpoint starts to be
    written (the epoch evaluated and logged): an exact moment, however busy the machine."""
    (tmp_path / "exp.toml").write_text(TINY.format(epochs=EPOCHS))  # tmp_path: the cwd (db)
    args = ["--db", db, "run", "exp.toml", "--set", "train.batch_size=64"]
    err = tmp_path / "stderr.txt"
    with pytest.MonkeyPatch.context() as env:  # the hook is the child's alone
        install(env, "signal_at_save", f"1:{sig}")
        proc = dlperf_process(args, err)
    try:
        proc.join(timeout=DEADLINE_S)
    finally:
        proc.kill()
        proc.join()
    assert proc.exitcode is not None
    return proc.exitcode, err.read_text()


def _checkpoints(store: RunStore) -> list[Path]:
    return [Path(a["path"]) for a in store.artifacts(1) if a["kind"] == "checkpoint"]


@pytest.mark.faults
def test_sigterm_as_the_first_checkpoint_is_saved_keeps_it(
    cli: Cli, db: str, store: RunStore, tmp_path: Path
) -> None:
    code, err = _run(tmp_path, db, "TERM")
    assert code == 143, err
    assert "Traceback" not in err
    assert f"epoch 1/{EPOCHS}" in err  # the epoch's line: its checkpoint is on disk
    run = store.get_run(1)
    assert (run.status, run.error) == ("killed", "interrupted")
    # before: no checkpoint artifact, and --resume said the run "stopped before its first
    # epoch ended"
    [path] = _checkpoints(store)
    saved = torch.load(path, map_location="cpu", weights_only=True)
    assert saved["progress"]["epoch"] == 1
    assert [e for e, _ in store.metrics(1, "val/acc1")] == [1]
    resumed = cli("run", "--resume", "1")
    assert resumed.code == 0, resumed.err
    assert f"epoch 1/{EPOCHS}" not in resumed.err and f"epoch 2/{EPOCHS}" in resumed.err
    store.engine.dispose()
    again = RunStore.open(db)
    try:
        assert again.get_run(1).status == "finished"
        assert [e for e, _ in again.metrics(1, "val/acc1")] == list(range(1, EPOCHS + 1))
        steps = [s for s, _ in again.metrics(1, "train/loss")]
        assert steps == list(range(1, EPOCHS * STEPS_PER_EPOCH + 1))  # each step once
    finally:
        again.engine.dispose()


@pytest.mark.faults
def test_a_run_killed_before_its_first_checkpoint_was_written_says_so(
    cli: Cli, db: str, store: RunStore, tmp_path: Path
) -> None:
    """SIGKILL, which nothing can shield, as the first checkpoint starts to be written: the
    epoch's rows are stored, its checkpoint is not, and --resume says just that."""
    code, err = _run(tmp_path, db, "KILL")
    assert code == -signal.SIGKILL, err
    assert store.last_step(1, "epoch/train_loss") == 1
    assert _checkpoints(store) == []
    line = _one_line(cli("run", "--resume", "1"), 2)
    # before: "it stopped before its first epoch ended; start it again", which was false
    assert line == (
        "error: run 1 has no checkpoint to resume from: its first epoch ended but its "
        "checkpoint was not written (start it again)"
    )
