"""The thirteenth break-it round: the process's own limits (ulimit -f, -n, -v).

- A write refused by a file size limit (EFBIG) or a descriptor limit (EMFILE) carries no file
  name: `dlperf report --out R` and `runs plot` said `error: cannot use: File too large`,
  naming nothing and no fix. The line now names what the command was writing and the limit.
- `runs export --to tensorboard` under a file size limit printed the writer thread's
  12-line traceback before that line and left a partial event file.
- Under a memory limit (ulimit -v) torch's own import failed with a 38-line ImportError
  traceback: one line, "cannot load torch: ...", exit 1.

Each limit is set with resource.setrlimit in a child (preexec_fn), so that only the child
meets it; the child runs `python -m dlperf`, the real entry point. A file size limit is also
set in this process around one in-process command (`file_size_limit`: Python ignores SIGXFSZ,
so a write past it fails with EFBIG as in the child), where a child's imports would be most of
the test's time.
"""

from __future__ import annotations

import errno
import os
import random
import resource
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from dlperf.store import RunStore
from tests.conftest import CliResult, file_size_limit
from tests.faults.test_store_faults import earlier_run, one_line

Cli = Callable[..., CliResult]

# Under this file size limit a SQLite store still opens (its -shm is 32 KiB), while a report's
# run page (curves as PNG) and a figure of runs plot of `stored` are larger.
FILE_CAP = 40 * 1024
# torch's libtorch_cpu.so alone maps over 400 MB; Python, Typer and dlperf's CLI fit in this.
MEMORY_CAP = 300 * 1024 * 1024


def _limited(tmp_path: Path, which: int, cap: int, *args: str) -> CliResult:
    """`python -m dlperf ARGS` in tmp_path with the soft and hard limit `which` at `cap`."""

    def limit() -> None:  # in the child, between fork and exec
        resource.setrlimit(which, (cap, cap))

    env = {**os.environ, "DLPERF_DB": str(tmp_path / "dlperf.db"), "COLUMNS": "200"}
    done = subprocess.run(
        [sys.executable, "-m", "dlperf", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        preexec_fn=limit,
    )
    return CliResult(done.returncode, done.stdout, done.stderr)


@pytest.fixture
def stored(tmp_path: Path) -> Path:
    """A store file with one finished run of three noisy curves (its report page and its
    figure are over FILE_CAP), closed: its log checkpointed, so that opening it under a file
    size limit writes nothing."""
    db = tmp_path / "dlperf.db"
    store = RunStore.open(str(db))
    run_id = store.create_run("noisy", "run", {"n": 1})
    noise = random.Random(13)
    keys = ("train/loss", "train/lr", "val/acc1")
    store.log_metrics(run_id, [(k, s, noise.random()) for k in keys for s in range(1, 2001)])
    store.finish_run(run_id, "finished")
    store.engine.dispose()
    return db


# C3: a write refused by a limit names what was being written, and the fix.


def test_a_report_stopped_by_a_file_size_limit_names_its_directory_and_the_limit(
    cli: Cli, tmp_path: Path, stored: Path
) -> None:
    """Before: 'error: cannot use: File too large', exit 1. In this process (the runs plot
    test below is the same refusal through `python -m dlperf`)."""
    with file_size_limit(FILE_CAP):
        result = cli("report", "--last", "20", "--out", "R")
    one_line(result, 1, "cannot use R: File too large", "a file size limit (ulimit -f)")
    assert not (tmp_path / "R").exists()  # the report leaves no partial site, as before


def test_runs_plot_stopped_by_a_file_size_limit_names_its_figure(
    tmp_path: Path, stored: Path
) -> None:
    result = _limited(
        tmp_path, resource.RLIMIT_FSIZE, FILE_CAP, "runs", "plot", "1", "--out", "c.png"
    )
    one_line(result, 1, "cannot use c.png: File too large", "a file size limit (ulimit -f)")
    assert not (tmp_path / "c.png").exists()


def _refused(number: int) -> Callable[..., object]:
    def write(*args: object, **kwargs: object) -> object:
        raise OSError(number, os.strerror(number))  # as a refused write: no file name

    return write


def test_too_many_open_files_in_a_report_names_the_directory_and_the_limit(
    cli: Cli, store: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: 'error: cannot use: Too many open files', exit 1. (The descriptor that runs
    out first depends on the libraries' versions: the refusal is made here.)"""
    earlier_run(store)
    monkeypatch.setattr("dlperf.report.site.build_report", _refused(errno.EMFILE))
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    one_line(
        cli("report", "--last", "3", "--out", "R"),
        1,
        "cannot use R: Too many open files",
        f"ulimit -n {soft} is too low",
    )


def test_a_full_disk_without_a_file_name_names_the_figure(
    cli: Cli, store: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    earlier_run(store)
    monkeypatch.setattr("dlperf.report.runs.plot_runs", _refused(errno.ENOSPC))
    one_line(cli("runs", "plot", "1", "--out", "c.png"), 1, "cannot use c.png: No space left")


def test_runs_plot_by_its_default_name_names_that(
    cli: Cli, store: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    earlier_run(store)
    monkeypatch.setattr("dlperf.report.runs.plot_runs", _refused(errno.EFBIG))
    one_line(cli("runs", "plot", "1"), 1, "cannot use runs-1.png: File too large", "ulimit -f")


def test_an_error_naming_its_own_file_keeps_it(
    cli: Cli, store: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The command's output only stands in for a name the error lacks."""
    earlier_run(store)

    def refused(*args: object, **kwargs: object) -> object:
        raise OSError(errno.EMFILE, os.strerror(errno.EMFILE), "/some/library.py")

    monkeypatch.setattr("dlperf.report.site.build_report", refused)
    one_line(cli("report", "--out", "R"), 1, "cannot use /some/library.py: Too many open")


# C4: TensorBoard's writer thread under a file size limit.


def test_a_tensorboard_export_stopped_by_a_file_size_limit_is_one_line_and_leaves_nothing(
    cli: Cli, tmp_path: Path
) -> None:
    """Before: 'Exception in thread Thread-1: Traceback ...' (12 lines), then 'error: cannot
    use: File too large', and a 64 KiB event file with a fraction of the points. In this
    process, whose stderr (the writer thread's traceback went there) the `cli` fixture takes."""
    pytest.importorskip("tensorboard", reason="the tensorboard extra is not installed")
    db = tmp_path / "dlperf.db"
    store = RunStore.open(str(db))
    small = earlier_run(store)  # exported whole before the large one fails
    big = store.create_run("big", "run", {"n": 1})
    # 5000 events of about 50 bytes: several times FILE_CAP
    store.log_metrics(big, [("train/loss", s, 1.0 / s) for s in range(1, 5001)])
    store.finish_run(big, "finished")
    store.engine.dispose()
    (tmp_path / "tb").mkdir()
    (tmp_path / "tb" / "mine.txt").write_text("the user's own file\n")  # not the export's
    with file_size_limit(FILE_CAP):
        result = cli("runs", "export", str(small), str(big), "--to", "tensorboard", "--out", "tb")
    one_line(result, 1, f"cannot use tb/run-{big}-big: File too large", "ulimit -f")
    assert result.err.count("\n") == 1, result.err  # no thread's traceback before it
    left = sorted(str(p.relative_to(tmp_path)) for p in (tmp_path / "tb").rglob("*"))
    assert left == ["tb/mine.txt"]


def test_a_tensorboard_export_into_a_new_directory_removes_it_when_it_fails(
    cli: Cli, store: RunStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same failure in this process, the writer refusing its fourth record: the
    directories the export made are gone, one it did not make is left, and nothing is
    printed but the one line (the writer thread's traceback is not)."""
    pytest.importorskip("tensorboard", reason="the tensorboard extra is not installed")
    from tensorboard.summary.writer import record_writer

    run_id = earlier_run(store)
    real = record_writer.RecordWriter.write
    calls: list[int] = []

    def write(self: object, data: bytes) -> None:
        calls.append(1)
        if len(calls) > 3:
            raise OSError(errno.EFBIG, os.strerror(errno.EFBIG))
        real(self, data)

    monkeypatch.setattr(record_writer.RecordWriter, "write", write)
    (tmp_path / "kept").mkdir()
    out = "kept/new/tb"
    result = cli("runs", "export", str(run_id), "--to", "tensorboard", "--out", out)
    one_line(result, 1, f"cannot use {out}/run-{run_id}-earlier: File too large")
    assert result.err.count("\n") == 1, result.err
    assert len(calls) == 4  # it failed where the fake refused, not before
    assert list((tmp_path / "kept").iterdir()) == []  # new/ and new/tb/ were the export's


# C5: torch that cannot load.


def test_torch_that_cannot_load_under_a_memory_limit_is_one_line(tmp_path: Path) -> None:
    """Before: a 38-line traceback ending 'ImportError: libtorch_cpu.so: failed to map segment
    from shared object', exit 1."""
    result = _limited(
        tmp_path, resource.RLIMIT_AS, MEMORY_CAP, "analyze", "resnet18", "--input", "3,64,64"
    )
    assert result.code == 1, result.err
    assert result.err.startswith("error: cannot load torch: "), result.err
    assert result.err.count("\n") == 1, result.err
    # refused before it loads since round 45 (dlperf.blas): its loader's words before that
    assert "failed to map segment" in result.err or "which torch needs to load" in result.err
    assert f"ulimit -v {MEMORY_CAP // 1024} may be too low" in result.err


def test_run_under_a_memory_limit_stores_nothing(tmp_path: Path) -> None:
    exp = tmp_path / "exp.toml"
    exp.write_text('[model]\nname = "smallcnn"\n[data]\nname = "digits"\n')
    result = _limited(tmp_path, resource.RLIMIT_AS, MEMORY_CAP, "run", str(exp))
    assert result.code == 1, result.err
    assert result.err.startswith("error: cannot load torch: "), result.err
    assert result.err.count("\n") == 1, result.err
    db = tmp_path / "dlperf.db"
    assert not db.exists() or RunStore.open(str(db)).list_runs() == []


def test_an_import_error_of_dlperfs_own_code_is_still_its_traceback(
    cli: Cli, store: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only torch's (or torchvision's) own import is told as 'cannot load': a missing module
    that dlperf imports is dlperf's bug, shown whole."""
    earlier_run(store)

    def broken(*args: object, **kwargs: object) -> object:
        import dlperf.no_such_module  # type: ignore[import-not-found]  # noqa: F401

        return None

    monkeypatch.setattr("dlperf.report.site.build_report", broken)
    result = cli("report", "--out", "R")
    assert result.code == 1
    assert "Traceback" in result.err and "cannot load" not in result.err
    assert "No module named 'dlperf.no_such_module'" in result.err
