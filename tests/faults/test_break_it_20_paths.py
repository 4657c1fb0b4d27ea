"""Break-it round 20, fix task RC: paths in messages.

1. `report --out` a link in a loop of links said "File exists (a file is where a directory
   was to be made ...)": mkdir does not follow the link; it now says "Too many levels of
   symbolic links", and of a dangling link that it is a link to something missing.
2. `export --out $'e\\nx.onnx'` split its "exporting ... to ..." line in two.
3. distill with a directory where its pseudo-label file goes said "cannot use
   .../pseudo-<hex>.part.npz: Is a directory", naming its temporary file; it now names the
   directory and says to remove it.
4. `report --out rep` and `converge fit --plot p.png` from a deleted working directory said
   "cannot use rep: No such file or directory"; they now say that the directory was deleted.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import CliResult, TrainedRun, write_distill_exp

Cli = Callable[..., CliResult]
DLPERF = [sys.executable, "-m", "dlperf"]


# --- 1: report --out a link that leads nowhere ---------------------------------------------------


def test_report_into_a_symlink_loop_says_so(
    cli: Cli, tmp_path: Path, trained_digits: TrainedRun
) -> None:
    """Before: 'cannot use .../lA: File exists (a file is where a directory was to be made:
    move it, or give another --out)'."""
    (tmp_path / "s").mkdir()
    trained_digits.copy_to(tmp_path / "s")
    (tmp_path / "lB").symlink_to("lA")
    (tmp_path / "lA").symlink_to("lB")
    result = cli("--db", str(tmp_path / "s" / "dlperf.db"), "report", "--out", str(tmp_path / "lA"))
    assert result.err == f"error: cannot use {tmp_path / 'lA'}: Too many levels of symbolic links\n"
    assert result.code == 2


def test_report_into_a_dangling_link_names_where_it_leads(
    cli: Cli, tmp_path: Path, trained_digits: TrainedRun
) -> None:
    (tmp_path / "s").mkdir()
    trained_digits.copy_to(tmp_path / "s")
    (tmp_path / "link").symlink_to(tmp_path / "missing")
    result = cli(
        "--db", str(tmp_path / "s" / "dlperf.db"), "report", "--out", str(tmp_path / "link")
    )
    assert result.err == (
        f"error: cannot use {tmp_path / 'link'}: File exists (a symbolic link to "
        f"{tmp_path / 'missing'}, which does not exist: remove the link, or give another --out)\n"
    )
    assert result.code == 2


# --- 2: export's progress line of a name with a newline ------------------------------------------


def test_export_names_an_out_with_a_newline_on_one_line(cli: Cli, tmp_path: Path) -> None:
    """Before: 'exporting smallcnn to .../e' and 'x.onnx' on two lines."""
    out = tmp_path / "e\nx.onnx"
    result = cli("export", "smallcnn", "--input", "1,8,8", "--out", str(out))
    assert result.code == 0, result.err
    assert f"exporting smallcnn to {tmp_path}/e\\nx.onnx ...\n" in result.err
    assert not any(line.startswith("x.onnx") for line in result.err.splitlines())


# --- 3: distill with a directory where its pseudo-label file goes --------------------------------


def test_distill_names_a_directory_in_place_of_its_pseudo_label_file(
    cli: Cli, tmp_path: Path
) -> None:
    """Before: 'cannot use .../pseudo-<hex>.part.npz: Is a directory'."""
    path = write_distill_exp(tmp_path)
    args = ("distill", str(path), "--unlabeled", "digits:holdout=0.5", "--top-k", "3", "--json")
    first = cli(*args)
    assert first.code == 0, first.err
    (pseudo,) = (tmp_path / "dlperf_runs").rglob("pseudo-*.npz")
    pseudo.unlink()
    pseudo.mkdir()
    again = cli(*args)
    said = " ".join(again.err.split())  # the console wraps a long line
    assert (
        f"error: {pseudo} is a directory, where distill keeps a pseudo-labelled file "
        "(remove it, and run distill again)"
    ) in said
    assert ".part" not in said
    assert again.code == 2


# --- 4: outputs named relative to a deleted working directory ------------------------------------


def _from_a_deleted_directory(tmp_path: Path, *args: str) -> CliResult:
    """`python -m dlperf ARGS` started in a directory that is removed just before."""
    gone = tmp_path / "gone"
    gone.mkdir()
    script = 'cd "$1" && rmdir "$1" && shift && exec "$@"'
    env = {k: v for k, v in os.environ.items() if k != "DLPERF_DB"}
    command = ["sh", "-c", script, "-", str(gone), *DLPERF, *args]
    done = subprocess.run(
        command, env={**env, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=240
    )
    return CliResult(done.returncode, done.stdout, done.stderr)


def _deleted(named: str) -> str:
    return (
        f"error: the working directory was deleted, and {named} is named relative to it "
        "(cd somewhere that exists, or give an absolute path)\n"
    )


def test_report_out_relative_to_a_deleted_directory_says_so(
    cli: Cli, tmp_path: Path, trained_digits: TrainedRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: 'cannot use rep: No such file or directory'. In this process, its working
    directory removed under it (the cli fixture's chdir is undone after the test); the plot
    below is the same check from a process started in a deleted directory."""
    trained_digits.copy_to(tmp_path)
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    done = cli("--db", str(tmp_path / "dlperf.db"), "report", "--out", "rep")
    assert (done.code, done.err) == (2, _deleted("rep"))


def test_a_plot_relative_to_a_deleted_directory_says_so(tmp_path: Path) -> None:
    csv = tmp_path / "c.csv"
    csv.write_text("step,loss\n" + "".join(f"{s},{2.0 / (s + 1) + 0.1}\n" for s in range(20)))
    args = ("converge", "fit", "--csv", str(csv), "--x", "step", "--y", "loss", "--plot", "p.png")
    done = _from_a_deleted_directory(tmp_path, *args)
    assert (done.code, done.err) == (2, _deleted("p.png"))
