"""Break-it round 43, fixer F5: --learners past the cap, a CSV cut by a stop signal, and a
long key echoed whole.

F2's note 1 (no exit for a minute). `dlperf staleness --train EXP --learners 30000000` listed
one speed per learner before any check: 60 s and 2 GB, still running, where `--speeds` and
`--horizon` are refused in one line past the cap of simulated gradients. Now the library's
`equal_speeds` asks the same cap first (each learner finishes a gradient at least): one
line, exit 2, before the experiment is read.
F2's note 2 (wrong output). A CSV on stdout (`analyze --csv`, `scale --csv`) was written row
by row, and `converge fit --to-csv /dev/stdout` straight into the pipe: a stop signal while
the pipe was full left a CSV cut in a row. Now `console.print_csv` (and `write_table` into a
pipe or device) writes the whole text in one `stopping.spared` block, as `print_json` writes
its document: a first stop signal waits for its end, then exits 128 + it.
Round 41, T2 C2 (cosmetic). A key or value the user typed was echoed whole in a one-line
error: a 10,000-character `--where` key or `--set` key gave a line of 10 KB (20 KB where the
line named it twice). Now `parsing.quoted` shows such text by its start and its length
("'kkk...'... (10,000 characters)"); paths are still named whole.
"""

from __future__ import annotations

import csv
import io
import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from dlperf import stopping
from dlperf.cli import console
from dlperf.config import DataConfig
from dlperf.converge import fitting, staleness
from dlperf.data import load_data
from dlperf.errors import UserError
from dlperf.parsing import quoted
from tests.faults.test_break_it_43_output import _blocked_writer

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
LONG = "k" * 10_000


def _one_line(r: Any, said: str, most: int = 300) -> None:
    assert r.code == 2, r.err
    assert r.out == ""
    assert len(r.err.splitlines()) == 1, r.err[:500]
    assert len(r.err) < most, r.err[:500]
    assert said in r.err, r.err[:500]


# --- F2's note 1: --learners past the cap ------------------------------------------------------


def test_learners_past_the_cap_are_refused_before_any_is_listed(
    cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: a speed listed per learner, then the experiment read (60 s, 2 GB, running)."""

    def unread(*args: Any) -> None:
        raise AssertionError("the experiment was read before --learners was checked")

    monkeypatch.setattr("dlperf.config.load_experiment", unread)
    exp = str(EXAMPLES / "digits_smallcnn.toml")
    r = cli("staleness", "--train", exp, "--learners", "30000000")
    _one_line(
        r,
        "error: 30,000,000 learners ask for at least 30,000,000 gradients (one each); at "
        "most 1,000,000 are simulated (lower --learners)",
    )


def test_equal_speeds_is_the_library_s_check() -> None:
    assert staleness.equal_speeds(3) == {"L1": 1.0, "L2": 1.0, "L3": 1.0}
    with pytest.raises(UserError, match=r"^1,000,001 learners ask for at least 1,000,001 "):
        staleness.equal_speeds(staleness.MAX_GRADIENTS + 1)
    with pytest.raises(UserError, match=r"about 1e\+30 gradients"):
        staleness.equal_speeds(10**30)
    with pytest.raises(UserError, match=r"^--learners must be ≥ 1, got 0$"):
        staleness.equal_speeds(0)


# --- F2's note 2: a CSV cut by a stop signal ---------------------------------------------------

# The command line's own stdout (`_name_stdout`) and exit (`stopping.run`), a CSV of about
# 1.2 MB: many times a pipe's buffer.
_CSV_WRITER = """
from dlperf import stopping
from dlperf.cli import _name_stdout, console

def command() -> int:
    _name_stdout(False)
    console.print_csv([["index", "label"], *([i, "x" * 50] for i in range(20000))])
    return 0

stopping.run(command, process=True)
"""


def test_a_stop_signal_waits_for_the_csv_to_be_whole(tmp_path: Path) -> None:
    """SIGTERM with 64 KiB of the CSV in a pipe nobody reads and the rest waiting: all of it
    comes, every row whole, and the exit code is SIGTERM's. Before: cut in a row, exit 143."""
    child = _blocked_writer(tmp_path, _CSV_WRITER)
    child.send_signal(signal.SIGTERM)
    out, err = child.communicate(timeout=120)
    assert child.returncode == 143, err
    rows = list(csv.reader(io.StringIO(out.decode())))
    assert len(rows) == 20001
    assert rows[-1] == ["19999", "x" * 50]
    assert err == b""


@contextmanager
def _spared_recorded(monkeypatch: pytest.MonkeyPatch, module: Any) -> Iterator[list[int]]:
    """Each `stopping.spared` block `module` enters, counted."""
    entered: list[int] = []
    real = stopping.spared

    @contextmanager
    def spared() -> Iterator[None]:
        entered.append(1)
        with real():
            yield

    monkeypatch.setattr(module.stopping, "spared", spared)
    yield entered


def test_analyze_csv_is_written_whole_and_unchanged(
    cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    with _spared_recorded(monkeypatch, console) as entered:
        r = cli("analyze", "smallcnn", "--input", "1,8,8", "--csv")
    assert r.code == 0, r.err
    assert entered == [1]
    assert r.out.startswith("name,type,output_shape,params,macs,flops,")
    assert r.out.endswith("\r\n")  # the csv module's excel lines, as before


def test_to_csv_into_a_pipe_is_written_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`write_table` into a FIFO (as into /dev/stdout): one spared write of the whole table."""
    fifo = tmp_path / "table.csv"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    rows = [{"run": i, "model": "=cmd", "beta": 0.5} for i in range(3)]
    with _spared_recorded(monkeypatch, fitting) as entered:
        fitting.write_table(fifo, rows)
    reader.join(timeout=60)
    assert entered == [1]
    assert got == [b"run,model,beta\r\n" + b"0,'=cmd,0.5\r\n1,'=cmd,0.5\r\n2,'=cmd,0.5\r\n"]


# --- round 41 T2 C2: a long key echoed whole ---------------------------------------------------


def test_quoted_shows_long_text_by_its_start_and_length() -> None:
    assert quoted("train.lr") == "'train.lr'"
    assert quoted("k" * 80) == repr("k" * 80)
    assert quoted(LONG) == f"{'k' * 60!r}... (10,000 characters)"
    assert quoted("a\nb" * 50, most=10).startswith("'a\\nba\\nba\\n")


def test_a_long_where_key_is_named_by_its_start(cli: Callable[..., Any]) -> None:
    """Before: a line of 10,167 characters."""
    r = cli("runs", "list", "--where", f"{LONG}=1")
    _one_line(r, "error: --where: unknown key 'kkkk")
    assert "(10,000 characters)" in r.err


@pytest.mark.parametrize(
    "where",
    [f"{LONG}<1", LONG, f"status={LONG}", f"kind={LONG}", f"tag.{LONG}=1"],
    ids=["compare", "no =", "status", "kind", "tag"],
)
def test_other_where_lines_name_a_long_text_by_its_start(
    cli: Callable[..., Any], where: str
) -> None:
    r = cli("runs", "list", "--where", where)
    _one_line(r, "error: --where")
    assert " characters)" in r.err


@pytest.mark.parametrize(
    "assignments, said",
    [
        ([f"{LONG}=1"], "error: config with --set: unknown key 'kkkk"),
        ([LONG], "error: --set 'kkkk"),
        ([f"train.{LONG}=1"], "error: config with --set: unknown key 'train.kkkk"),
        (["analyze.batch=2", f"analyze.batch.{LONG}=1"], "error: --set: 'analyze.batch.kkkk"),
    ],
    ids=["unknown", "no =", "in a section", "below a value"],
)
def test_a_long_set_key_is_named_by_its_start(
    cli: Callable[..., Any], assignments: list[str], said: str
) -> None:
    """Before: a line of 10,170 characters."""
    sets = [word for a in assignments for word in ("--set", a)]
    r = cli("analyze", "smallcnn", "--input", "1,8,8", *sets)
    _one_line(r, said)


def test_a_long_unknown_model_is_named_by_its_start(cli: Callable[..., Any]) -> None:
    _one_line(cli("analyze", LONG), "error: unknown model 'kkkk")


def test_a_long_unknown_dataset_is_named_by_its_start() -> None:
    """(`data describe NAME` reads a long name as a path, named whole: "File name too long".)"""
    with pytest.raises(UserError) as refused:
        load_data(DataConfig(name=LONG))
    assert str(refused.value).startswith("unknown dataset 'kkkk")
    assert "(10,000 characters)" in str(refused.value)
    assert len(str(refused.value)) < 300
