"""Break-it round 45, fixer F12: a killed repair's rollback journal, and a stop signal as
`calibrate` saves its device (T3 C2, C3).

C2. A `runs repair` killed (SIGKILL) while its copy's schema was made left
`.NEW.repairing-PID-TOKEN-journal` (SQLite's rollback journal: the copy is in rollback mode
until it is switched to WAL) beside its staging file; the next repair removed the staging file
but kept the journal for good, its name not read as a dead repair's. Now every file SQLite
writes beside a store (-journal, -wal, -shm) of a dead repair goes with it, and a failed
repair removes its own journal too.
C3. `calibrate` signalled (SIGTERM) just after the devices file was replaced exited 143,
printed nothing, and stored its run `killed` with no metrics and no artifact, yet the file held
the new device. Now the save is all or nothing as the user sees it: a stop that came before it
(one a library swallowed) keeps the file as it was and the run `killed`; once the device is
saved a stop no longer counts, and the run is stored finished with its metrics and the command
prints its table, exit 0.

Every signal is one the process sends itself at a named point (a patched save), so no test
races a timer.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import dlperf
from dlperf.analytic import devices, recorded
from dlperf.analytic.devices import Device
from dlperf.analytic.interleaved import SameMoment
from dlperf.store import RunStore, runstore
from tests.conftest import CliResult

Cli = Callable[..., CliResult]


# --- C2: a killed repair's -journal -------------------------------------------------------


def _dead_pid() -> int:
    """The id of a process that has ended (and been reaped)."""
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], check=True,
                          capture_output=True, text=True)  # fmt: skip
    return int(done.stdout)


def test_a_killed_repairs_journal_is_removed_by_the_next_repair(db: str, tmp_path: Path) -> None:
    with dlperf.track("a", {"lr": 0.1}, store=db) as run:
        run.log(1, loss=1.0)
    staged = tmp_path / f".new.db.repairing-{_dead_pid()}-07bcc062"
    # As a SIGKILL while the copy's schema is made leaves them: the file and its journal
    # (before: the journal was kept for good), and the WAL files of a kill later on.
    left = [Path(f"{staged}{end}") for end in ("", "-journal", "-wal", "-shm")]
    for path in left:
        path.write_bytes(b"\0" * 512)
    runstore.repair(db, str(tmp_path / "new.db"))
    assert [p.name for p in tmp_path.glob(".new.db*")] == []
    assert RunStore.open(str(tmp_path / "new.db")).get_run(1).name == "a"


def test_a_live_repairs_journal_is_left_to_it(db: str, tmp_path: Path) -> None:
    with dlperf.track("a", {"lr": 0.1}, store=db) as run:
        run.log(1, loss=1.0)
    live = tmp_path / f".new.db.repairing-{os.getppid()}-07bcc062-journal"
    live.write_bytes(b"\0" * 512)
    runstore.repair(db, str(tmp_path / "other.db"))  # another target: its own names only
    runstore.repair(db, str(tmp_path / "new.db"))
    assert live.exists()


# --- C3: a stop signal as calibrate saves its device ---------------------------------------


OLD = "[T4]\nprice_per_hour_usd = 0.29\n"


@pytest.fixture
def calibrating(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`calibrate` with its rounds faked (a fitted device at once) on this CPU; the user's
    devices file, holding one device, in tmp_path."""
    path = tmp_path / "dev.toml"
    path.write_text(OLD)
    monkeypatch.setenv("DLPERF_DEVICES", str(path))
    fitted = Device(
        name="box",
        kind="cpu",
        peak_tflops={"fp32": 0.5},
        memory_bandwidth_gbs=20.0,
        ppp=0.4,
        ppp_mem=0.7,
        op_overhead_us=3.0,
        threads=1,
        source="calibrated",
        date="2026-11-30",
    )
    times = {"matmul_fp32": [1.0, 1.0, 1.0], "copy": [2.0, 2.0, 2.0]}

    def fake(device: torch.device, name: str | None, reporter: Any) -> SameMoment:
        return SameMoment(fitted, [], {}, None, times)

    monkeypatch.setattr(recorded, "calibrate", fake)
    monkeypatch.setattr(recorded, "pick_device", lambda spec: torch.device("cpu"))
    monkeypatch.setattr(recorded, "set_threads", lambda threads: 1)
    return path


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_signal_once_the_device_is_saved_ends_calibrate_done(
    cli: Cli, calibrating: Path, monkeypatch: pytest.MonkeyPatch, sig: int
) -> None:
    saved = []

    def signalled(*args: Any, **kwargs: Any) -> Path:
        path = devices.save_device(*args, **kwargs)
        saved.append(path)
        os.kill(os.getpid(), sig)  # the file is in place, as the rename has just ended
        return path

    monkeypatch.setattr(recorded, "save_device", signalled)
    r = cli("calibrate", "--name", "box")
    assert saved == [calibrating]
    # before: 130/143, nothing printed, the run killed with no metrics, the device saved
    assert r.code == 0, (r.code, r.out, r.err)
    assert "saved to" in r.out and "box" in r.out
    assert "[box]" in calibrating.read_text() and "[T4]" in calibrating.read_text()
    store = RunStore.open(os.environ["DLPERF_DB"])
    run = store.get_run(1)
    assert (run.kind, run.status) == ("calibrate", "finished")
    assert store.metrics(1, "matmul_tflops_fp32") == [(0, 0.5)]
    assert store.artifacts(1) == [{"kind": "devices", "path": str(calibrating)}]


def test_a_stop_that_came_before_the_save_keeps_the_devices_file(
    cli: Cli, calibrating: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    judged = recorded.judged

    def swallowed(*args: Any) -> Any:
        # a library that swallows the interrupt: the stop has still come
        with contextlib.suppress(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
        return judged(*args)

    monkeypatch.setattr(recorded, "judged", swallowed)
    r = cli("calibrate", "--name", "box")
    assert r.code == 143, (r.code, r.out, r.err)
    assert calibrating.read_text() == OLD  # not saved
    assert not list(calibrating.parent.glob("dev.part*"))
    run = RunStore.open(os.environ["DLPERF_DB"]).get_run(1)
    assert (run.status, run.error) == ("killed", "interrupted")
