"""Break-it round 18, task H1: what the terminal can show.

F1: with an output encoding that cannot hold a character (PYTHONIOENCODING=ascii or latin-1),
every command printing one (dlperf's own "Δ" and "÷", a run's name, a path) crashed with a
UnicodeEncodeError traceback; such a character is now written as a Python escape, as stderr
already did, and --json stays valid JSON.
F7: under python -OO, which strips docstrings, each command's --help lost its description and
its "Example:" line (Typer takes them from the docstring); they are read back from the source.
F11: a newline in a path the user named was printed raw, splitting a "saved ..." line, report's
summary line or a table's title in two; it is written as \\n.

These run dlperf in a child process: the encoding and -OO are the interpreter's, set at start.
F11's tests run it in this process (`cli`): a path is escaped whatever the interpreter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from dlperf.store import RunStore
from tests.conftest import CliResult

pytestmark = pytest.mark.usefixtures("fewer_bootstrap_fits")  # 20 refits, not 200

Cli = Callable[..., CliResult]

RUN_NAME = "ü Δ run"


def dlperf(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`dlperf ARGS` in a fresh interpreter, with `env` added to this one's environment; its
    output read in the encoding PYTHONIOENCODING names there (UTF-8 without one)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    encoding = env.get("PYTHONIOENCODING", "utf-8").split(":")[0]
    return subprocess.run(
        [sys.executable, "-m", "dlperf", *args],
        env=env,
        capture_output=True,
        encoding=encoding,
        timeout=120,
        check=False,
    )


@pytest.fixture
def two_runs(tmp_path: Path) -> str:
    """A store of two finished runs named RUN_NAME, with results that differ (compare's Δ)."""
    url = f"sqlite:///{tmp_path / 'dlperf.db'}"
    store = RunStore.open(url)
    for lr, accuracy in ((0.05, 0.9), (0.01, 0.8)):
        config = {"model": {"name": "smallcnn"}, "train": {"lr": lr}}
        run_id = store.create_run(RUN_NAME, "run", config)
        store.finish_run(run_id, summary={"test_accuracy": accuracy, "train_s": 1.5})
    store.engine.dispose()
    return url


@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
@pytest.mark.parametrize(
    "command",
    [["runs", "compare", "1", "2"], ["runs", "list"], ["runs", "show", "1"]],
    ids=["compare", "list", "show"],
)
def test_a_table_with_a_character_the_encoding_lacks_is_printed_escaped(
    two_runs: str, encoding: str, command: list[str]
) -> None:
    done = dlperf("--db", two_runs, *command, env={"PYTHONIOENCODING": encoding})
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert "\\u0394" in done.stdout  # Δ: in the run's name, and compare's column
    shown = "ü" if encoding == "latin-1" else "\\xfc"  # ü as latin-1 holds it, or escaped
    if command[1] != "compare":  # compare names runs by their IDs
        assert shown in done.stdout
    if command[1] != "show":  # one table: its columns line up, measured as printed
        rows = [line for line in done.stdout.splitlines() if " | " in line]
        assert len({tuple(i for i, c in enumerate(row) if c == "|") for row in rows}) == 1


def test_predict_prints_its_division_sign_escaped_in_ascii() -> None:
    done = dlperf(
        "predict", "smallcnn", "--device", "V100", "--input", "1,8,8",
        env={"PYTHONIOENCODING": "ascii"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "\\xf7" in done.stdout  # ÷


def test_json_stays_valid_json_in_ascii(two_runs: str) -> None:
    done = dlperf(
        "--db", two_runs, "runs", "show", "1", "--json", env={"PYTHONIOENCODING": "ascii"}
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["name"] == RUN_NAME


def test_an_encoding_error_mode_the_user_chose_is_kept(two_runs: str) -> None:
    done = dlperf("--db", two_runs, "runs", "list", env={"PYTHONIOENCODING": "ascii:replace"})
    assert done.returncode == 0, done.stderr
    assert "? ? run" in done.stdout


@pytest.mark.parametrize(
    "command", [["run"], ["runs", "list"], ["converge", "fit"], ["report"], ["analyze"]]
)
def test_help_under_python_oo_keeps_each_commands_description_and_example(
    command: list[str],
) -> None:
    done = dlperf(*command, "--help", env={"PYTHONOPTIMIZE": "2"})
    assert done.returncode == 0, done.stderr
    assert "Example: dlperf " + " ".join(command) in done.stdout


def test_report_shows_a_newline_in_its_directory_escaped(
    cli: Cli, two_runs: str, tmp_path: Path
) -> None:
    out = tmp_path / "r\nx"
    done = cli("--db", two_runs, "report", "1", "--out", str(out))
    assert done.code == 0, done.err
    assert (out / "index.html").is_file()
    shown = str(tmp_path / "r\\nx")
    assert done.out.splitlines() == [f"1 run(s), 0 study(ies): 2 pages in {shown}"]
    assert done.err.splitlines() == [f"saved {shown}/index.html"]


def test_converge_fit_shows_a_newline_in_its_plot_path_escaped(cli: Cli, tmp_path: Path) -> None:
    curve = tmp_path / "curve.csv"
    curve.write_text("metric\n" + "".join(f"{1 / (0.1 * k + 1):.4f}\n" for k in range(1, 30)))
    plot = tmp_path / "f\nx.png"
    done = cli("converge", "fit", "--csv", str(curve), "--y", "metric", "--plot", str(plot))
    assert done.code == 0, done.err
    assert plot.is_file()
    assert f"saved {tmp_path / 'f'}\\nx.png" in done.err.splitlines()


def test_analyze_titles_a_model_file_with_a_newline_in_its_path_on_one_line(
    cli: Cli, tmp_path: Path
) -> None:
    folder = tmp_path / "n\nd"
    folder.mkdir()
    (folder / "m.py").write_text(
        "import torch\n\ndef net():\n    return torch.nn.Sequential(torch.nn.Flatten(),"
        " torch.nn.Linear(64, 10))\n"
    )
    done = cli("analyze", f"{folder}/m.py:net", "--input", "1,8,8")
    assert done.code == 0, done.err
    first = done.out.splitlines()[0]
    assert "n\\nd/m.py" in first, done.out
