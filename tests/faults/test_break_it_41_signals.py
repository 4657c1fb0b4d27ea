"""Break-it round 41, fixer F5: what happens after a stop signal has been handled (T3 C1, C2).

C1. A second Ctrl-C 0.05 s after the first made `dlperf run` drop its resume hint ("run N
stopped; continue it from its last checkpoint: ..."), though it exited 130 with the run
`killed`: the handler of the first read the store (the run, its checkpoint) and said the line
unshielded, and the second interrupt cut it. Now those reads and the line are a
`stopping.spared` block: the second signal waits for the line, and a third still gets out at
once (a store that hangs does not hold every Ctrl-C off). `dlperf demo`'s line the same.
Found beside it: `stopping.unshielded` that raised a waiting stop as it began left the shield
count at 0, and the enclosing block's end took it to -1: a later signal outside any shielded
block waited, one inside a block cut it (a run stopped as its recording began: a second Ctrl-C
then cut `run`'s hint). The count is the caller's again now.
C2. `runs export` (TensorBoard, MLflow) signalled once the export was in place printed
"exported to ..." and exited 130/143, its table cut off: nothing settled the outcome, as `run`
does once its run is stored. Now the export's return settles it: exit 0, the whole table (or
JSON document); a signal before it still stops the export, 130, nothing of it left.

Every signal is one the process sends itself at a named point (a patched store read, print or
export step), so no test races a timer.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dlperf import stopping
from dlperf.cli import console
from dlperf.store import RunStore
from tests.conftest import CliResult

Cli = Callable[..., CliResult]
HANG_S = 120  # how long a "hanging" store read waits for the signal that must end it

# 64 training images in batches of 32: two steps an epoch.
EXP = """
[model]
name = "smallcnn"
[data]
name = "digits"
limit = 64
[train]
epochs = {epochs}
batch_size = 32
lr = 0.05
[run]
threads = 1
warmup_steps = 1
out_dir = "{out}"
"""


def _exp(tmp_path: Path, epochs: int) -> Path:
    path = tmp_path / f"exp{epochs}.toml"
    path.write_text(EXP.format(epochs=epochs, out=tmp_path / "runs"))
    return path


def _stop_after_first_checkpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first Ctrl-C, as epoch 1's checkpoint is saved (raised once its line is said)."""
    from dlperf.engine import checkpoint

    save = checkpoint.save

    def stopped(slot: Any, state: dict[str, Any]) -> None:
        save(slot, state)
        os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(checkpoint, "save", stopped)


def _then(
    monkeypatch: pytest.MonkeyPatch, owner: Any, name: str, *signals: signal.Signals
) -> list[str]:
    """Once the first stop has come, the first call of `owner.name` sends the process
    `signals`, one after the other, before it does its work; with two or more it then waits
    (a store read that hangs) until one of them ends it. Returns a list that says "hung" if
    none did."""
    real = getattr(owner, name)
    sent: list[str] = []

    def signalled(*args: Any, **kw: Any) -> Any:
        if stopping.requested() and not sent:
            sent.append("sent")
            for sig in signals:
                os.kill(os.getpid(), sig)
            if len(signals) > 1:
                deadline = time.monotonic() + HANG_S
                while time.monotonic() < deadline:
                    time.sleep(0.05)
                sent.append("hung")
        return real(*args, **kw)

    monkeypatch.setattr(owner, name, signalled)
    return sent


def _status(db: str, run_id: int) -> str:
    store = RunStore.open(db)
    try:
        return store.get_run(run_id).status
    finally:
        store.engine.dispose()


HINT = "run 1 stopped; continue it from its last checkpoint: dlperf run --resume 1"


# --- C1: a second stop signal as `run` reads its stopped run --------------------------------


def _at(place: str) -> tuple[Any, str]:
    """The object and attribute of the handler's step where the second signal lands."""
    from dlperf.engine import checkpoint

    return {
        "run read": (RunStore, "list_runs"),
        "checkpoint check": (checkpoint, "run_checkpoint"),
        "hint printed": (console, "err_line"),
    }[place]


@pytest.mark.parametrize(
    ("place", "second"),
    [
        ("run read", signal.SIGINT),
        ("checkpoint check", signal.SIGINT),
        ("hint printed", signal.SIGINT),
        ("run read", signal.SIGTERM),
    ],
)
def test_a_second_stop_signal_as_the_stopped_run_is_read_keeps_the_resume_hint(
    cli: Cli,
    db: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    place: str,
    second: signal.Signals,
) -> None:
    _stop_after_first_checkpoint(monkeypatch)
    sent = _then(monkeypatch, *_at(place), second)
    r = cli("run", str(_exp(tmp_path, 2)))
    assert sent == ["sent"]
    assert r.code == 130, (r.code, r.err)  # the first signal's code
    # before: the line was missing, the last line epoch 1's
    assert r.err.strip().splitlines()[-1] == HINT, r.err
    assert "Traceback" not in r.err
    assert _status(db, 1) == "killed"


def test_a_third_stop_signal_gets_out_of_a_hint_whose_store_read_hangs(
    cli: Cli, db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The escape kept: a user who presses Ctrl-C again and again is not held by a store
    that does not answer (the second waits, the third ends the command at once)."""
    _stop_after_first_checkpoint(monkeypatch)
    sent = _then(monkeypatch, RunStore, "list_runs", signal.SIGINT, signal.SIGINT)
    r = cli("run", str(_exp(tmp_path, 2)))
    assert sent == ["sent"], "the third Ctrl-C did not end the hanging read"
    assert r.code == 130, (r.code, r.err)
    assert "Traceback" not in r.err and "continue it" not in r.err
    assert _status(db, 1) == "killed"


def test_a_second_stop_signal_keeps_the_demo_s_line(
    cli: Cli, db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`dlperf demo`'s handler reads the store the same way: its line is kept the same way.
    The demo's training is one tiny run here, stopped after its first epoch."""
    import dlperf.demo
    from dlperf.config import load_experiment
    from dlperf.experiment.run import run_experiment

    path = _exp(tmp_path, 2)

    def tiny_demo(store: RunStore, reporter: Any, out_dir: str | None = None) -> dict[str, Any]:
        run_experiment(load_experiment(path), store, reporter)
        raise AssertionError("the run was not stopped")

    monkeypatch.setattr(dlperf.demo, "run_demo", tiny_demo)
    _stop_after_first_checkpoint(monkeypatch)
    sent = _then(monkeypatch, RunStore, "list_runs", signal.SIGINT)
    r = cli("demo")
    assert sent == ["sent"]
    assert r.code == 130, (r.code, r.err)
    last = r.err.strip().splitlines()[-1]
    assert last.startswith("demo stopped in run 1 ("), r.err  # before: no line at all
    assert last.endswith(": dlperf run --resume 1, or run dlperf demo again to redo the demo")


def test_spared_holds_one_signal_and_lets_the_next_through() -> None:
    """The block's rules, where `run` meets them: outermost, the second signal waits and the
    third raises; inside a shielded block (a write), every signal waits for that block."""
    stopping.install()
    with pytest.raises(KeyboardInterrupt), stopping.spared():
        os.kill(os.getpid(), signal.SIGINT)  # held
        held = True
        os.kill(os.getpid(), signal.SIGINT)  # raised at once
        held = False
    assert held and stopping._state.shields == 0 and not stopping._state.spared
    came = []
    with pytest.raises(KeyboardInterrupt), stopping.spared():
        with stopping.shielded():  # a write inside: not cut
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)
            came.append("write done")
        came.append("block done")  # the stop waiting is raised as the spared block ends
    assert came == ["write done", "block done"]
    with pytest.raises(KeyboardInterrupt), stopping.shielded(), stopping.spared():
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)  # an enclosing shield: held as ever
        came.append("outer block whole")
    assert came[-1] == "outer block whole" and stopping._state.shields == 0


def test_a_stop_raised_as_an_unshielded_body_begins_leaves_the_shield_count_whole() -> None:
    stopping.install()
    with pytest.raises(KeyboardInterrupt), stopping.shielded():
        os.kill(os.getpid(), signal.SIGINT)  # waits for the shielded block
        with stopping.unshielded():  # raised here, as the body begins
            pass
    assert stopping._state.shields == 0  # before: -1
    with pytest.raises(KeyboardInterrupt):  # and a later signal is raised at once
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(HANG_S)


# --- C2: a stop signal once the export is in place ------------------------------------------


@pytest.fixture
def two_runs(cli: Cli, db: str, tmp_path: Path) -> list[int]:
    path = _exp(tmp_path, 1)
    for _ in range(2):
        r = cli("run", str(path))
        assert r.code == 0, r.err
    return [1, 2]


def _signal_as_printed(monkeypatch: pytest.MonkeyPatch, sig: signal.Signals) -> list[str]:
    """`sig` as the export's result starts to be printed (the table or the JSON document)."""
    sent: list[str] = []
    table, document = console.print_table, console.print_json

    def print_table(title: str | None, *args: Any) -> None:
        if title is not None and title.startswith("exported to"):
            sent.append("table")
            os.kill(os.getpid(), sig)
        table(title, *args)

    def print_json(doc: Any) -> None:
        sent.append("json")
        os.kill(os.getpid(), sig)
        document(doc)

    monkeypatch.setattr(console, "print_table", print_table)
    monkeypatch.setattr(console, "print_json", print_json)
    return sent


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_signal_once_the_tensorboard_export_is_in_place_ends_it_exported(
    cli: Cli, two_runs: list[int], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sig: int
) -> None:
    sent = _signal_as_printed(monkeypatch, signal.Signals(sig))
    r = cli("runs", "export", "1", "2", "--to", "tensorboard", "--out", "tb")
    assert sent == ["table"]
    # before: 130 (143), the title and no row
    assert r.code == 0, (r.code, r.err)
    assert "exported to TensorBoard: tensorboard --logdir tb" in r.out
    for run_id in two_runs:
        assert f"run-{run_id}-" in r.out
        directory = next((tmp_path / "tb").glob(f"run-{run_id}-*"))
        assert list(directory.glob("events.out.tfevents.*"))
    assert "Traceback" not in r.err


def test_a_stop_signal_as_the_export_s_json_is_printed_ends_it_exported(
    cli: Cli, two_runs: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    sent = _signal_as_printed(monkeypatch, signal.SIGINT)
    r = cli("runs", "export", "1", "2", "--to", "tensorboard", "--out", "tb", "--json")
    assert sent == ["json"]
    assert r.code == 0, (r.code, r.err)
    doc = json.loads(r.out)
    assert sorted(doc["runs"]) == ["1", "2"]


def test_a_stop_signal_once_the_mlflow_export_is_written_ends_it_exported(
    cli: Cli, two_runs: list[int], mlflow_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent = _signal_as_printed(monkeypatch, signal.SIGINT)
    r = cli("runs", "export", "1", "2", "--to", "mlflow", "--uri", mlflow_uri)
    assert sent == ["table"]
    assert r.code == 0, (r.code, r.err)  # before: 130, the title and no row
    rows = [line for line in r.out.splitlines() if line.split()[:1] in (["1"], ["2"])]
    assert len(rows) == 2, r.out


def test_a_stop_signal_before_the_export_is_in_place_still_stops_it(
    cli: Cli, two_runs: list[int], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other side: a signal as the second run's events are read stops the export, exit
    130, and leaves nothing of it (the staged events go, and the directories it made)."""
    from dlperf import exporters

    series, calls = exporters.metric_series, []

    def signalled(store: RunStore, run_id: int) -> Any:
        calls.append(run_id)
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGINT)
        return series(store, run_id)

    monkeypatch.setattr(exporters, "metric_series", signalled)
    r = cli("runs", "export", "1", "2", "--to", "tensorboard", "--out", "tb")
    assert r.code == 130, (r.code, r.err)
    assert "exported" not in r.out
    assert not (tmp_path / "tb").exists()
