"""What the sixteenth break-it round found in writing outputs, reproduced first:

- `export` on a full disk blamed the model: "the dynamo exporter failed (OSError: [Errno 28] No
  space left on device), and the TorchScript exporter too (...)", exit 2 (C4).
- An OSError naming no file said `error: cannot use: No space left on device`: from `runs
  list > /dev/full` (standard output) and from `data samples` on a full disk, which also left
  a 0-byte PNG that looked like a sample (C5).
- `runs list --where status=bogus` listed nothing, exit 0, where an unknown key is refused.
- From a deleted working directory, `dlperf run` printed oneMKL's "FATAL ERROR: Cannot load
  .../libtorch_cpu.so", exit 2, blaming the library.

The full disk is a small tmpfs (skipped where mounting is refused, always unmounted); a file
size limit (ulimit -f, set in a child) refuses writes the same way without root.
"""

from __future__ import annotations

import errno
import os
import resource
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from dlperf.store import RunStore
from dlperf.store.record import STATUSES
from tests.conftest import CliResult, file_size_limit
from tests.faults.test_store_faults import earlier_run, fill, mounted

Cli = Callable[..., CliResult]

LIMIT_HINT = "(a file size limit (ulimit -f) stopped the write: raise it, or write less)"
# The first sample `data samples digits --per-class 1` writes: class 0's first test image.
FIRST_SAMPLE = "test-00011-0.png"


def _dlperf(tmp_path: Path, *args: str, file_cap: int | None = None, **run: object) -> CliResult:
    """`python -m dlperf ARGS` in tmp_path (the real entry point), under a file size limit of
    `file_cap` bytes when given (set in the child only)."""

    def limit() -> None:  # in the child, between fork and exec
        if file_cap is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_cap, file_cap))

    env = {**os.environ, "DLPERF_DB": str(tmp_path / "dlperf.db"), "COLUMNS": "200"}
    done = subprocess.run(
        [sys.executable, "-m", "dlperf", *args],
        cwd=tmp_path,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
        timeout=240,
        preexec_fn=limit,
        **run,  # type: ignore[call-overload]
    )
    return CliResult(done.returncode, done.stdout or "", done.stderr)


def _last_line(result: CliResult) -> str:
    assert "Traceback" not in result.err, result.err
    return result.err.splitlines()[-1]


# --- C4: export on a full disk ----------------------------------------------------------------


def test_export_on_a_full_disk_is_the_disk_not_the_model(cli: Cli, tmp_path: Path) -> None:
    """Before: 'cannot export model 'smallcnn' to ONNX: the dynamo exporter failed (OSError:
    [Errno 28] No space left on device), and the TorchScript exporter too (...)', exit 2."""
    with mounted("-t", "tmpfs", "-o", "size=1m", "tmpfs", target=tmp_path / "small") as small:
        filler = fill(small)
        out = small / "m.onnx"
        result = cli("export", "smallcnn", "--input", "1,8,8", "--out", str(out))
        assert _last_line(result) == f"error: cannot use {out}: No space left on device"
        assert result.code == 1
        assert list(small.iterdir()) == [filler]  # no model, no hidden staging directory


def test_export_over_a_file_size_limit_names_the_file_and_the_limit(
    cli: Cli, tmp_path: Path
) -> None:
    """The same refusal without root: a file size limit (EFBIG) under the model's weights. In
    this process (a child's torch import would double its time); the samples test below meets
    the limit through `python -m dlperf`."""
    with file_size_limit(4096):
        result = cli("export", "smallcnn", "--input", "1,8,8", "--out", "m.onnx")
    assert _last_line(result) == f"error: cannot use m.onnx: File too large {LIMIT_HINT}"
    assert result.code == 1
    assert list(tmp_path.iterdir()) == []


# --- C5: an OSError naming no file ------------------------------------------------------------


def test_data_samples_on_a_full_disk_names_the_image_and_leaves_none(
    cli: Cli, tmp_path: Path
) -> None:
    """Before: 'error: cannot use: No space left on device', and a 0-byte PNG left."""
    with mounted("-t", "tmpfs", "-o", "size=1m", "tmpfs", target=tmp_path / "small") as small:
        out = small / "samples"
        out.mkdir()
        fill(small)
        result = cli("data", "samples", "digits", "--per-class", "1", "--out", str(out))
        assert _last_line(result) == (
            f"error: cannot use {out / FIRST_SAMPLE}: No space left on device"
        )
        assert result.code == 1
        assert list(out.iterdir()) == []


def test_data_samples_over_a_file_size_limit_leave_no_partial_image(tmp_path: Path) -> None:
    # A sample of the digits is a PNG of about 120 bytes.
    result = _dlperf(tmp_path, "data", "samples", "digits", "--out", "s", file_cap=64)
    assert _last_line(result) == f"error: cannot use s/{FIRST_SAMPLE}: File too large {LIMIT_HINT}"
    assert result.code == 1
    assert list((tmp_path / "s").iterdir()) == []


@pytest.mark.parametrize("json", [False, True])
def test_runs_list_into_a_full_device_names_standard_output(tmp_path: Path, json: bool) -> None:
    """Before: 'error: cannot use: No space left on device', exit 1."""
    store = RunStore.open(str(tmp_path / "dlperf.db"))
    earlier_run(store)
    store.engine.dispose()
    with open("/dev/full", "w") as full:
        result = _dlperf(tmp_path, "runs", "list", *(["--json"] if json else []), stdout=full)
    assert result.err == "error: cannot use standard output: No space left on device\n"
    assert result.code == 1


def test_an_os_error_naming_nothing_says_what_the_system_said(
    cli: Cli, store: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An error the OS gives without a file (here a listing's read) is not 'cannot use: '."""

    def refused(*args: object, **kwargs: object) -> object:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr("dlperf.store.query.list_runs", refused)
    result = cli("runs", "list")
    assert result.err == (
        "error: Input/output error (the system named no file: dlperf --debug ... shows where)\n"
    )
    assert result.code == 1


# --- --where status=VALUE ---------------------------------------------------------------------


def test_a_where_status_outside_the_known_ones_is_refused(cli: Cli, store: RunStore) -> None:
    """Before: an empty table, exit 0."""
    earlier_run(store)
    result = cli("runs", "list", "--where", "status=bogus")
    assert result.err == (
        "error: --where: unknown status 'bogus' "
        "(statuses: running, finished, failed, killed, lost)\n"
    )
    assert result.code == 2
    for status in [*STATUSES, "lost"]:  # every status a run can read as is a filter
        assert cli("runs", "list", "--where", f"status={status}", "--json").code == 0
    assert "finished" in cli("runs", "list", "--where", "status=finished").out


# --- a deleted working directory --------------------------------------------------------------


def _from_a_deleted_directory(tmp_path: Path, *args: str) -> CliResult:
    """`python -m dlperf ARGS` started in a directory that is removed just before."""
    gone = tmp_path / "gone"
    gone.mkdir()
    script = 'cd "$1" && rmdir "$1" && shift && exec "$@"'
    env = {**os.environ, "DLPERF_DB": str(tmp_path / "dlperf.db")}
    command = ["sh", "-c", script, "-", str(gone), sys.executable, "-m", "dlperf", *args]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240)
    return CliResult(done.returncode, done.stdout, done.stderr)


def test_run_from_a_deleted_working_directory_says_so(
    tmp_path: Path, tiny_exp: Callable[..., Path]
) -> None:
    """Before: 'Intel oneMKL FATAL ERROR: Cannot load .../libtorch_cpu.so.', exit 2: torch
    cannot load from a deleted directory."""
    ran = _from_a_deleted_directory(tmp_path, "run", str(tiny_exp(epochs=1)))
    assert ran.err == (
        "error: the working directory was deleted, and torch cannot load there "
        "(cd somewhere that exists)\n"
    )
    assert ran.code == 2


def test_a_command_that_needs_no_torch_still_works_from_a_deleted_directory(
    tmp_path: Path,
) -> None:
    store = RunStore.open(str(tmp_path / "dlperf.db"))
    earlier_run(store)
    store.engine.dispose()
    listed = _from_a_deleted_directory(tmp_path, "runs", "list", "--json")
    assert (listed.code, listed.err) == (0, "")
    assert '"name": "earlier"' in listed.out
