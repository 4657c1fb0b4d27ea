"""Break-it round 48, fixer G3: a stop while an epoch's line waits on an unread stderr; one stop
after a scaling study is stored.

- T3 C1 (data-loss): `dlperf run` (or a sweep's point) whose stderr is a pipe nobody reads
  blocked writing its `epoch E/N` line inside the epoch's shielded block: every stop signal
  but SIGKILL only waited (TERM x3, INT, HUP did nothing) and the run was left `lost`. Now the
  line is `stopping.stoppable`: a signal that lands while it is written cuts it, the run is
  marked killed and the command exits 128 + the signal; stderr goes quiet (its reader does
  not read), so the stopped run's resume hint does not block the exit in turn. The signal is
  sent to the main thread once it is seen blocked in its write to the full pipe, not on a
  timer.
- T3 C5 (message): `scale` exited 143 when one stop landed after its study was stored and
  its --json went out whole, where `run` exits 0 (`stopping.settle`). Now `run_study` (and
  the batch search) settle once every point is stored: one stop later does not count, exit 0
  with the whole document; a second still ends the command, 128 + the first. A study's
  `StudyStop` says no "stopped; continue it ... --resume" line once its outcome is settled
  (`stopping.settled`); `dlperf sweep`'s settle, once its figures are drawn, is cli/sweep.py's
  (fixer G1's file, left to the lead).
"""

from __future__ import annotations

import fcntl
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from dlperf import stopping
from dlperf.cli import console
from tests.conftest import CliResult
from tests.faults.test_break_it_41_signals import _status
from tests.faults.test_break_it_48_serve import fill

BLOCKED_S = 120  # the run's start (data loaded, model built) on a busy machine
STOPPED_S = 60  # from the signal to the command's end: it marks the run and exits


def _writing_to(tid: int, fd: int) -> bool:
    """Whether thread `tid` of this process waits in a write(2) to `fd`."""
    try:
        fields = Path(f"/proc/self/task/{tid}/syscall").read_text().split()
    except OSError:
        return False
    # write(2) is 1 on x86-64, 64 on arm64; "running" while it runs
    return len(fields) > 1 and fields[0] in ("1", "64") and int(fields[1], 16) == fd


def _stopped_while_blocked(
    cli: Callable[..., CliResult], monkeypatch: pytest.MonkeyPatch, *args: str, after: str = ""
) -> tuple[CliResult, list[str]]:
    """`dlperf ARGS` in this process, its stderr console writing into a pipe nobody reads, full
    (from the start, or once a line with `after` was read from it); SIGTERM to the main thread
    once it waits there. Returns the result and what happened: "hung" if the command had not
    ended STOPPED_S after the signal (the pipe is then drained, so that the test ends)."""
    r, w = os.pipe()
    fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, 4096)  # a page: quick to fill
    if not after:
        fill(w)
    stream = open(w, "w", buffering=1)  # noqa: SIM115 (closed below, after the command)
    monkeypatch.setattr(console.err, "_file", stream)  # rich's: `file` falls back to stderr
    monkeypatch.setattr(console.err, "quiet", False)  # put back after
    main = threading.main_thread()
    done, seen = threading.Event(), []

    def stop() -> None:
        deadline = time.monotonic() + BLOCKED_S
        said = b""
        while after and after.encode() not in said:
            said += os.read(r, 65536)  # the command's lines up to `after`
        if after:
            fill(w)
        while not _writing_to(main.native_id or 0, w):
            if done.is_set() or time.monotonic() > deadline:
                seen.append("never blocked")
                return _drain(r)
            time.sleep(0.05)
        seen.append("blocked")
        signal.pthread_kill(main.ident or 0, signal.SIGTERM)  # where the kernel would
        if not done.wait(STOPPED_S):
            seen.append("hung")
        _drain(r)

    helper = threading.Thread(target=stop, daemon=True)
    helper.start()
    try:
        result = cli(*args)
    finally:
        done.set()
        stream.close()
        helper.join(BLOCKED_S)
        os.close(r)
    return result, seen


def _drain(r: int) -> None:
    """Read the pipe to its end (its writer closed), so that a held write goes on."""
    while os.read(r, 65536):
        pass


def test_a_stop_ends_a_run_blocked_on_its_epoch_line(
    cli: Callable[..., CliResult],
    db: str,
    tiny_exp: Callable[..., Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before: the SIGTERM waited in the epoch's shielded block for the write that never
    returned ("hung"); only SIGKILL ended the process, and the run read `lost`."""
    exp = tiny_exp(epochs=50)
    result, seen = _stopped_while_blocked(
        cli, monkeypatch, "run", str(exp), "--set", "data.limit=128"
    )
    assert seen == ["blocked"], (seen, result.err)
    assert result.code == 143, result.err
    assert _status(db, 1) == "killed"
    assert "Traceback" not in result.err


def test_a_stop_ends_a_sweep_blocked_on_its_point_s_epoch_line(
    cli: Callable[..., CliResult],
    db: str,
    tiny_exp: Callable[..., Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same in a sweep's point (before: "hung", the point's run `lost`)."""
    exp = tiny_exp(epochs=50)
    sweep = tmp_path / "sw.toml"
    sweep.write_text(f'name = "sw"\nbase = "{exp}"\n[grid]\n"train.lr" = [0.05]\n')
    result, seen = _stopped_while_blocked(cli, monkeypatch, "sweep", str(sweep), "--set",
                                          "data.limit=128", after="started:")  # fmt: skip
    assert seen == ["blocked"], (seen, result.err)
    assert result.code == 143, result.err
    assert _status(db, 1) == "killed"
    assert "Traceback" not in result.err


class _Stored:
    """A scaling study of no points whose rows are all stored: `run_study`'s checks pass and its
    result is `"stored"` (no torchrun is started)."""

    def __init__(self, *args: Any) -> None:
        self.opts = SimpleNamespace(nnodes=1, repeat=1, steps=1, on_failure="continue")
        self.backend, self.tensorflow, self.most_per_node = "gloo", False, 1
        self.exp = SimpleNamespace(model=SimpleNamespace(name="smallcnn"))

    def shard_error(self, point: Any) -> None:
        return None

    def __getattr__(self, name: str) -> Callable[..., None]:  # check_*, plan_threads, open
        return lambda *args: None

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None

    def result(self) -> str:
        return "stored"


@pytest.mark.parametrize("stops", [1, 2])
def test_one_stop_after_a_scaling_study_is_stored_does_not_count(
    monkeypatch: pytest.MonkeyPatch, stops: int
) -> None:
    """`run_study` settles once every point is stored: one stop as its document is printed
    leaves exit 0 and the whole document (before: 143, as if the study had stopped); a second
    still ends the command, 128 + the first."""
    from dlperf.distributed import study

    monkeypatch.setattr(study, "Study", _Stored)
    monkeypatch.setattr(study, "plan", lambda *args: [])
    monkeypatch.setattr(study, "check_names", lambda *args: None)
    printed: list[str] = []

    def command() -> int:
        assert study.run_study(None, None, Path()) == "stored"  # type: ignore[arg-type]
        for _ in range(stops):
            os.kill(os.getpid(), signal.SIGTERM)  # its handler runs here, in this frame
        printed.append("the whole document")
        return 0

    with pytest.raises(SystemExit) as ended:
        stopping.run(command)  # as `dlperf scale` runs in its process
    assert ended.value.code == (0 if stops == 1 else 143)
    assert printed == (["the whole document"] if stops == 1 else [])


@pytest.mark.parametrize("settled", [False, True])
def test_a_settled_study_says_no_continue_line(settled: bool) -> None:
    """A study's stop line is said of a study stopped before its outcome, not of one whose
    outcome is settled and whose output a second stop cut ("continue it ... --resume 1" with
    nothing left to run). For the sweep, `dlperf sweep` settles once its figures are drawn."""
    from dlperf.study_stop import StudyStop

    said: list[str] = []
    store: Any = SimpleNamespace(create_study=lambda name, kind: 1)
    if settled:
        stopping.settle()
    with pytest.raises(KeyboardInterrupt), StudyStop("sweep", 1, False, said.append) as stop:
        stop.watch(store, "sw")
        raise KeyboardInterrupt
    assert said == ([] if settled else [said[0]])
    assert settled or said[0].startswith("sweep study 1 stopped; continue it")
