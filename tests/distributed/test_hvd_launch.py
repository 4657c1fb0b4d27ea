"""dlperf.distributed.hvd_launch without Horovod: where horovodrun is looked for, the command
and environment of a point (the launcher a fake), and the first line of a failed job read
from horovodrun's account, the ranks' tracebacks or its own log."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from dlperf.distributed import hvd_launch
from dlperf.distributed.contracts import MainPhase, RankResult
from dlperf.distributed.hvd_launch import MODULE, START_TIMEOUT_S, _error, horovodrun, run_horovod
from dlperf.distributed.launch import TAIL_LINES


def test_horovodrun_beside_the_interpreter_comes_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    venv, elsewhere = tmp_path / "venv" / "bin", tmp_path / "path"
    for folder in (venv, elsewhere):
        folder.mkdir(parents=True)
        (folder / "horovodrun").write_text("#!/bin/sh\n")
        (folder / "horovodrun").chmod(0o755)
    monkeypatch.setattr(hvd_launch.sys, "executable", str(venv / "python"))
    monkeypatch.setenv("PATH", str(elsewhere))
    assert horovodrun() == str(venv / "horovodrun")
    (venv / "horovodrun").unlink()
    assert horovodrun() == str(elsewhere / "horovodrun")
    monkeypatch.setenv("PATH", str(tmp_path / "none"))
    assert horovodrun() is None


FAILED = (
    "Primary job  terminated normally, but 1 process returned\n"
    "a non-zero exit code. The first process to do so was:\n\n"
    "  Process name: {rank}\n  Exit code: {code}\n"
)


def test_the_process_horovodrun_saw_fail_first_is_blamed(tmp_path: Path) -> None:
    log = tmp_path / "horovodrun.log"
    log.write_text(FAILED.format(rank=1, code=137))
    (tmp_path / "rank-0.error").write_text("Traceback:\nRuntimeError: peer gone\n")
    # rank 1 was SIGKILLed (128 + 9) and wrote nothing; rank 0's error is its consequence
    assert _error(tmp_path, log, 1) == "Horovod worker rank 1 failed (killed by SIGKILL)"
    log.write_text(FAILED.format(rank=0, code=1))
    assert _error(tmp_path, log, 1).splitlines() == [
        "Horovod worker rank 0 failed (exit status 1)", "Traceback:", "RuntimeError: peer gone"
    ]  # fmt: skip


def test_a_killed_worker_is_blamed_before_the_peer_horovodrun_saw_exit_first(
    tmp_path: Path,
) -> None:
    """CI, under load: rank 1 SIGKILLed itself, rank 0 lost its peer and exited 1, and
    horovodrun saw rank 0's exit first."""
    log = tmp_path / "horovodrun.log"
    exits = "Process 0 exit with status code 1.\nProcess 1 exit with status code 137.\n"
    log.write_text(exits + FAILED.format(rank=0, code=1))
    (tmp_path / "rank-0.error").write_text("Traceback:\nRuntimeError: peer gone\n")
    assert _error(tmp_path, log, 1) == "Horovod worker rank 1 failed (killed by SIGKILL)"
    # horovodrun's own SIGTERM to the rest after a failure blames nobody.
    exits = "Process 0 exit with status code 1.\nProcess 1 exit with status code 143.\n"
    log.write_text(exits + FAILED.format(rank=0, code=1))
    assert (
        _error(tmp_path, log, 1).splitlines()[0] == "Horovod worker rank 0 failed (exit status 1)"
    )
    exits = "Process 0 exit with status code 1.\nProcess 1 exit with status code -11.\n"
    log.write_text(exits + FAILED.format(rank=0, code=1))
    assert _error(tmp_path, log, 1) == "Horovod worker rank 1 failed (killed by SIGSEGV)"


def test_without_horovodruns_account_the_first_traceback_written(tmp_path: Path) -> None:
    log = tmp_path / "horovodrun.log"
    log.write_text("something else\n")
    (tmp_path / "rank-1.error").write_text("Traceback:\nValueError: first\n")
    (tmp_path / "rank-0.error").write_text("Traceback:\nValueError: later\n")
    os.utime(tmp_path / "rank-1.error", ns=(1, 1))
    assert _error(tmp_path, log, 1).splitlines()[0] == "Horovod worker rank 1 failed"
    assert _error(tmp_path, log, 1).splitlines()[-1] == "ValueError: first"


def test_else_the_tail_of_horovodruns_own_log(tmp_path: Path) -> None:
    log = tmp_path / "horovodrun.log"
    log.write_text("\n".join(f"line {i}" for i in range(30)) + "\n\n")
    lines = _error(tmp_path, log, 2).splitlines()
    assert lines[0] == "horovodrun failed (exit code 2)"
    assert lines[1:] == [f"line {i}" for i in range(30 - TAIL_LINES, 30)]


def rank(r: int, prints: tuple[float, ...]) -> RankResult:
    main = MainPhase((0.1,), 0.1, 8, 0.0, 8, fingerprint=prints)
    return RankResult(r, "h", 100 + r, 2, main)


def test_a_point_runs_horovodrun_with_gloo_and_the_fusion_threshold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[list[str], dict[str, str] | None]] = []

    def fake(directory: Path, command: list[str], log: Path, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
        seen.append((command, env))
        for r in range(2):
            rank(r, (1.0, 2.0)).write(directory / f"rank-{r}.json")
        return 0, [5, 6]

    monkeypatch.setattr(hvd_launch, "run_launcher", fake)
    monkeypatch.setattr(hvd_launch, "horovodrun", lambda: "/opt/horovodrun")
    result = run_horovod(tmp_path, 2, threads=3, bucket_mb=1.5)
    assert (result.returncode, result.pids, result.error) == (0, [5, 6], None)
    [(command, env)] = seen
    assert command[:4] == [sys.executable, "/opt/horovodrun", "-np", "2"]
    assert command[4:10] == ["-H", "localhost:2", "--gloo", "--start-timeout",
                             str(START_TIMEOUT_S), sys.executable]  # fmt: skip
    assert command[-3:] == ["-m", MODULE, str(tmp_path / "spec.json")]
    assert env == {"OMP_NUM_THREADS": "3", "TF_CPP_MIN_LOG_LEVEL": "2",
                   "HOROVOD_FUSION_THRESHOLD": str(int(1.5 * 2**20))}  # fmt: skip
    ranks = json.loads((tmp_path / "result.json").read_text())["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1]
    assert all(r["main"]["fingerprint"] is None for r in ranks)  # compared, then dropped


def test_a_failed_point_writes_no_result_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fake(directory: Path, command: list[str], log: Path, env: object = None):  # type: ignore[no-untyped-def]
        log.write_text(FAILED.format(rank=0, code=2))
        return 1, [5]

    monkeypatch.setattr(hvd_launch, "run_launcher", fake)
    result = run_horovod(tmp_path, 2, threads=1)
    assert result.error == "Horovod worker rank 0 failed (exit status 2)"
    assert not (tmp_path / "result.json").exists()
