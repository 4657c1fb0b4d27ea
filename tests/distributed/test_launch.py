"""dlperf.distributed.launch: torchrun's rendezvous arguments, the pids the workers leave,
the exception a rank's traceback ends with, the first line of a failed launch, the command
run_torchrun builds (its launcher a fake), and run_launcher on a real tiny process: stale
rank files cleared, return code and worker pids back, nothing left running."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

from dlperf.distributed import launch
from dlperf.distributed.launch import (
    Launch,
    Rendezvous,
    _raised,
    error_lines,
    free_port,
    run_launcher,
    run_torchrun,
    worker_pids,
)
from dlperf.procs import alive


def test_a_free_port_can_be_bound() -> None:
    port = free_port()
    assert 1024 <= port < 65536
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", port))


def test_rendezvous_arguments() -> None:
    given = Rendezvous(2, 1, "head:29500").args()
    assert given == ["--nnodes", "2", "--node-rank", "1", "--rdzv-backend", "c10d",
                     "--rdzv-endpoint", "head:29500"]  # fmt: skip
    local = Rendezvous().args()
    assert local[:4] == ["--nnodes", "1", "--node-rank", "0"]
    assert local[-1].startswith("127.0.0.1:") and int(local[-1].split(":")[1]) > 0


def test_worker_pids_are_read_in_rank_file_order(tmp_path: Path) -> None:
    (tmp_path / "rank-1.pid").write_text("202")
    (tmp_path / "rank-0.pid").write_text("101")
    (tmp_path / "rank-0.json").write_text("{}")
    assert worker_pids(tmp_path) == [101, 202]


TRACEBACK = """Traceback (most recent call last):
  File "/x/model.py", line 3, in forward
    raise Lost("shard 7 went away")
    ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
dlperf_user_m.Lost: shard 7 went away
and did not come back
"""


def test_the_exception_a_traceback_ends_with_without_its_module() -> None:
    assert _raised(TRACEBACK) == "Lost: shard 7 went away"
    assert _raised("RuntimeError: no frames here") is None
    bare = 'Traceback (most recent call last):\n  File "x", line 1\nKeyError: 3\n'
    assert _raised(bare) == "KeyError: 3"


def summary_log(rank: int, code: int) -> str:
    return (
        "Failures:\n  <NO_OTHER_FAILURES>\n-----\nRoot Cause (first observed failure):\n[0]:\n"
        f"  rank      : {rank} (local_rank: {rank})\n  exitcode  : {code} (pid: 9)\n"
        "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors\n"
    )


def test_a_failed_rank_with_a_traceback_is_named_by_its_exception(tmp_path: Path) -> None:
    log = tmp_path / "torchrun.log"
    log.write_text(summary_log(1, 1))
    (tmp_path / "rank-1.error").write_text(TRACEBACK)
    lines = error_lines(tmp_path, log, 1).splitlines()
    assert lines[0] == "worker rank 1 failed: Lost: shard 7 went away"
    assert lines[-1] == "and did not come back" and len(lines) == 1 + len(TRACEBACK.splitlines())


def test_only_the_tail_of_a_long_traceback_is_kept(tmp_path: Path) -> None:
    log = tmp_path / "torchrun.log"
    log.write_text(summary_log(0, 1))
    frames = "".join(f'  File "f{i}.py", line 1, in g\n    g()\n' for i in range(20))
    (tmp_path / "rank-0.error").write_text(f"Traceback:\n{frames}ValueError: deep\n")
    lines = error_lines(tmp_path, log, 1).splitlines()
    assert lines[0] == "worker rank 0 failed: ValueError: deep"
    assert len(lines) == 1 + launch.TAIL_LINES and lines[-1] == "ValueError: deep"


def test_run_torchrun_runs_the_module_guarded_under_torchrun(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[list[str], Path, dict[str, str] | None]] = []

    def fake(directory: Path, command: list[str], log: Path, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
        seen.append((command, log, env))
        return 0, [11, 12]

    monkeypatch.setattr(launch, "run_launcher", fake)
    result = run_torchrun(
        tmp_path, 2, "my.module", ["--x", "1"], Rendezvous(1, 0, "h:1"), {"A": "b"}
    )
    assert result == Launch(0, [11, 12], None)
    [(command, log, env)] = seen
    assert log == tmp_path / "torchrun.log" and env == {"A": "b"}
    assert command[:5] == [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"]
    assert command[command.index("--max-restarts") + 1] == "0"
    worker = command[command.index("--no-python") + 1 :]
    assert worker[-5:] == ["-u", "-m", "my.module", "--x", "1"]
    assert "from dlperf.procs import guard; guard()" in worker  # dies with torchrun


def test_a_failed_torchrun_carries_its_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fake(directory: Path, command: list[str], log: Path, env: object = None):  # type: ignore[no-untyped-def]
        log.write_text("torchrun: error: bad flag\n")
        return 2, []

    monkeypatch.setattr(launch, "run_launcher", fake)
    result = run_torchrun(tmp_path, 1, "m", [])
    assert result.returncode == 2
    assert result.error == "torchrun failed (exit code 2)\ntorchrun: error: bad flag"


def test_run_launcher_clears_stale_rank_files_and_returns_the_workers_pids(tmp_path: Path) -> None:
    directory = tmp_path / "point"
    directory.mkdir()
    (directory / "rank-5.pid").write_text("1")  # a previous launch's: must not be signalled
    (directory / "rank-5.error").write_text("old")
    program = (
        "import os, pathlib; d = pathlib.Path(os.environ['D']); "
        "(d / 'rank-0.pid').write_text(str(os.getpid())); print('hello'); raise SystemExit(3)"
    )
    log = directory / "launcher.log"
    code, pids = run_launcher(directory, [sys.executable, "-c", program], log,
                              {"D": str(directory)})  # fmt: skip
    assert code == 3 and len(pids) == 1 and pids[0] > 1
    assert not (directory / "rank-5.error").exists()
    assert "hello" in log.read_text()
    assert not alive(pids[0])
