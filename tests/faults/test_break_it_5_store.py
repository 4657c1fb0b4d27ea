"""The store defects of the fifth break-it round (issue 41), each reproduced first: a plain
store path pasted into a URL unescaped, a path checked only after resolving it, a dangling
link's missing directory, the target of `runs repair`, SQLite URL options SQLAlchemy drops
with a warning, a repair killed midway, and the round's smaller findings."""

from __future__ import annotations

import importlib.util
import json
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import pytest
from sqlalchemy.exc import SAWarning

from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.faults.test_break_it_4_store import _run_with_checkpoint, a_run
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]

EVENT_S = 300  # how long a busy machine may take to get somewhere: a deadline, not a wait
ROOT = Path(__file__).resolve().parents[2]  # where `tests` and the checkout's dlperf import


def files_in(directory: Path) -> list[str]:
    """The files in `directory`, but the -wal and -shm files SQLite keeps beside a store."""
    return sorted(p.name for p in directory.iterdir() if not p.name.endswith(("-wal", "-shm")))


def tags_in(path: Path) -> int:
    with closing(sqlite3.connect(path)) as conn:
        (count,) = conn.execute("SELECT count(*) FROM tags").fetchone()
    return int(count)


def listed(cli: Cli, *db: str) -> list[int]:
    result = cli(*db, "runs", "list", "--json")
    assert result.code == 0, result.err
    return [run["id"] for run in json.loads(result.out)]


# --- a10, e07: a plain path pasted into a URL unescaped -------------------------------------


@pytest.mark.parametrize("name", ["a?b#c d.db", "q?.db", "a%20b.db", "x#y.db"])
def test_a_plain_store_path_names_exactly_that_file(cli: Cli, tmp_path: Path, name: str) -> None:
    """`--db 'a?b#c d.db'` made a store file named a (the rest read as the URL's query and
    fragment), `q?.db` one named q, `a%20b.db` one named 'a b.db'."""
    directory = tmp_path / "d"
    directory.mkdir()
    path = directory / name
    run_id = a_run(path)  # RunStore.open takes the path as --db does
    assert files_in(directory) == [name]
    result = cli("--db", str(path), "runs", "tag", str(run_id), "k=v")
    assert result.code == 0, result.err
    assert files_in(directory) == [name] and tags_in(path) == 1
    assert listed(cli, "--db", str(path)) == [run_id]


# --- a02, e03: a path checked after resolving it --------------------------------------------


@pytest.mark.parametrize("command", [["runs", "list"], ["runs", "tag", "1", "a=b"]])
def test_a_path_through_a_missing_directory_and_dotdot_is_refused(
    cli: Cli, tmp_path: Path, command: list[str]
) -> None:
    """`nope/../x.db` with nope missing: the OS says ENOENT, dlperf made x.db (runs tag) or
    listed it (runs list)."""
    result = cli("--db", f"{tmp_path}/nope/../x.db", *command)
    one_line(result, 2, f"run store directory {tmp_path}/nope does not exist")
    assert not (tmp_path / "x.db").exists()


@pytest.mark.parametrize("shape", ["x.db/.", "x.db//"])
@pytest.mark.parametrize("command", [["runs", "list"], ["runs", "tag", "1", "a=b"]])
def test_a_path_through_the_store_file_is_refused(
    cli: Cli, tmp_path: Path, shape: str, command: list[str]
) -> None:
    """`x.db/.` (the OS: ENOTDIR) listed and tagged the store x.db."""
    a_run(tmp_path / "x.db")
    result = cli("--db", f"{tmp_path}/{shape}", *command)
    one_line(result, 2, f"{tmp_path}/x.db")
    assert tags_in(tmp_path / "x.db") == 0
    assert files_in(tmp_path) == ["x.db"]


def test_a_path_through_the_store_file_says_it_is_no_directory(cli: Cli, tmp_path: Path) -> None:
    a_run(tmp_path / "x.db")
    result = cli("--db", "x.db/.", "runs", "tag", "1", "a=b")  # the cli's directory: tmp_path
    one_line(result, 2, "run store x.db/.: x.db is not a directory")


# --- a06: a dangling link into a missing directory ------------------------------------------


@pytest.mark.parametrize("command", [["runs", "list"], ["runs", "tag", "1", "a=b"]])
def test_a_dangling_link_names_the_directory_that_is_missing(
    cli: Cli, tmp_path: Path, command: list[str]
) -> None:
    """It named the link's own directory, which is there."""
    (tmp_path / "dang.db").symlink_to("target/t.db")
    result = cli("--db", str(tmp_path / "dang.db"), *command)
    one_line(
        result,
        2,
        f"run store directory {tmp_path}/target does not exist",
        f"{tmp_path}/dang.db is a symbolic link to {tmp_path}/target/t.db",
    )
    assert not (tmp_path / "target").exists()


# --- e04: the target of runs repair, checked as --db is -------------------------------------


@pytest.mark.parametrize(
    ("out", "message"),
    [
        ("new.db/", "run store new.db/: a store path that ends in / names a directory"),
        ("file:new.db", "SQLite URI filenames (file:...) are not supported"),
        ("nope/../new.db", "run store directory nope does not exist"),
        ("", "runs repair writes a new SQLite store file, not ''"),
        ("sqlite:///new.db", "runs repair writes a new SQLite store file, not 'sqlite:///new.db'"),
    ],
)
def test_a_repair_target_is_checked_as_a_store_path_is(
    cli: Cli, store: RunStore, tmp_path: Path, out: str, message: str
) -> None:
    """`runs repair new.db/` wrote new.db (Path() dropped the slash), `runs repair file:new.db`
    a file of that name: --db refuses both."""
    store.create_run("r", "exp", {})
    before = files_in(tmp_path)
    one_line(cli("runs", "repair", out), 2, message)
    assert files_in(tmp_path) == before


def test_a_repair_onto_a_dangling_link_is_refused(
    cli: Cli, store: RunStore, tmp_path: Path
) -> None:
    """It wrote the new store through the link."""
    store.create_run("r", "exp", {})
    (tmp_path / "link.db").symlink_to("elsewhere.db")
    one_line(cli("runs", "repair", "link.db"), 2, "link.db exists")
    assert not (tmp_path / "elsewhere.db").exists()


# --- g04: a repair killed midway ------------------------------------------------------------

# `dlperf --db SOURCE runs repair OUT` that parks when it begins copying rows into the new
# store: writes the file MARKER, then waits for the signal that ends it.
PARKED_REPAIR = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from dlperf.cli import main
    from dlperf.store import integrity

    marker, source, out = sys.argv[1:]

    def copy_readable(*args, **kwargs):
        Path(marker).write_text("copying")
        while True:
            time.sleep(60)

    integrity.copy_readable = copy_readable
    sys.argv = ["dlperf", "--db", source, "runs", "repair", out]
    main()
    """
)


def test_a_killed_repair_leaves_nothing_that_opens_as_the_store(cli: Cli, tmp_path: Path) -> None:
    """SIGKILLed while copying, `runs repair n.db` left n.db holding no runs, which opened as
    an empty store; it now writes beside it and renames the copy once whole. The leftover is
    removed by the next repair."""
    source, out, marker = tmp_path / "x.db", tmp_path / "n.db", tmp_path / "copying"
    run_id = a_run(source)
    args = [str(marker), str(source), str(out)]
    repairing = subprocess.Popen([sys.executable, "-c", PARKED_REPAIR, *args], cwd=ROOT)
    try:
        deadline = time.monotonic() + EVENT_S
        while not marker.exists():
            assert repairing.poll() is None, "the repair ended before it copied"
            assert time.monotonic() < deadline, "timed out waiting for the repair to copy"
            time.sleep(0.05)
    finally:
        repairing.send_signal(signal.SIGKILL)
        repairing.wait()
    assert not out.exists()
    assert listed(cli, "--db", str(out)) == []  # nothing there, not a store that lost its runs
    assert list(tmp_path.glob(".n.db.repairing-*"))  # hidden, and no *.db
    result = cli("--db", str(source), "runs", "repair", str(out))
    assert result.code == 0, result.err
    assert listed(cli, "--db", str(out)) == [run_id]
    assert files_in(tmp_path) == ["copying", "n.db", "x.db"]
    assert not list(tmp_path.glob(".n.db.repairing*"))


def test_a_repair_writes_its_target_only_once_the_copy_is_whole(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same in this process: while the rows are copied there is no n.db."""
    from dlperf.store import integrity

    source, out = tmp_path / "x.db", tmp_path / "n.db"
    run_id = a_run(source)
    copy_readable = integrity.copy_readable
    seen: list[bool] = []

    def copying(*args: object) -> integrity.Repaired:
        seen.append(out.exists())
        return copy_readable(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(integrity, "copy_readable", copying)
    result = cli("--db", str(source), "runs", "repair", "n.db", "--json")
    assert result.code == 0, result.err
    assert seen == [False]
    assert json.loads(result.out)["out"] == str(out)
    assert listed(cli, "--db", str(out)) == [run_id]
    assert files_in(tmp_path) == ["n.db", "x.db"]
    assert not list(tmp_path.glob(".n.db.repairing*"))  # no temporary left, nor its WAL


# --- h01, a12, a13: the options of a sqlite:/// URL -----------------------------------------


@pytest.mark.parametrize(
    "option", ["cache=shared", "uri=true", "check_same_thread=false", "mode=ro&cache=shared"]
)
def test_an_unknown_sqlite_url_option_is_refused_in_one_line(
    cli: Cli, tmp_path: Path, recwarn: pytest.WarningsRecorder, option: str
) -> None:
    """`?cache=shared` printed SQLAlchemy's two-line SAWarning (the option dropped) and went
    on; other driver arguments were taken silently."""
    path = tmp_path / "x.db"
    run_id = a_run(path)
    result = cli("--db", f"sqlite:///{path}?{option}", "runs", "tag", str(run_id), "a=b")
    key = option.split("&")[-1].split("=")[0]
    one_line(result, 2, f"the option {key} is not supported", "?timeout=SECONDS and ?mode=ro")
    assert tags_in(path) == 0
    assert not [w for w in recwarn if issubclass(w.category, SAWarning)]


def test_a_repeated_option_is_said_plainly(cli: Cli, tmp_path: Path) -> None:
    """It said `timeout=('5', '6') is not a number of seconds`."""
    result = cli("--db", f"sqlite:///{tmp_path}/x.db?timeout=5&timeout=6", "runs", "list")
    one_line(result, 2, "timeout is given 2 times (5, 6)", "give it once")


def test_the_options_dlperf_takes_still_work(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "a b.db"
    run_id = a_run(path)
    result = cli("--db", f"sqlite:///{path}?timeout=5", "runs", "tag", str(run_id), "k=v")
    assert result.code == 0, result.err
    assert listed(cli, "--db", f"sqlite:///{path}?mode=ro&timeout=1") == [run_id]


# --- a20: a database driver that is not installed -------------------------------------------


def test_a_missing_database_driver_names_the_package_to_install(cli: Cli) -> None:
    """It said `No module named 'MySQLdb'`: mysql:// needs the package mysqlclient."""
    if importlib.util.find_spec("MySQLdb") is not None:
        pytest.skip("mysqlclient is installed here")
    result = cli("--db", "mysql://u:secret@127.0.0.1:1/db", "runs", "list")
    one_line(
        result,
        2,
        "mysql://u:***@127.0.0.1:1/db",
        "its database driver MySQLdb is not installed",
        "pip install mysqlclient",
    )
    assert "secret" not in result.err


# --- a21: a blank DLPERF_DB -----------------------------------------------------------------


def test_a_blank_dlperf_db_is_the_default_store_as_an_empty_one_is(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DLPERF_DB=' ' made a store file named ' ' (docs/faults.md: an empty DLPERF_DB is the
    default ./dlperf.db)."""
    run_id = a_run(tmp_path / "dlperf.db")  # the cli's directory is tmp_path
    monkeypatch.setenv("DLPERF_DB", " ")
    result = cli("runs", "tag", str(run_id), "k=v")
    assert result.code == 0, result.err
    assert tags_in(tmp_path / "dlperf.db") == 1
    assert listed(cli) == [run_id]
    assert files_in(tmp_path) == ["dlperf.db"]


# --- e02: a copy's warning about a file already deleted -------------------------------------


def test_a_copy_does_not_say_it_kept_a_file_already_deleted(tmp_path: Path) -> None:
    """Deleting a run in a byte copy after the original deleted it (and its checkpoint) warned
    `kept .../checkpoint.pt`, a file no longer there."""
    original, copy = tmp_path / "a.db", tmp_path / "b.db"
    run_id, checkpoint = _run_with_checkpoint(original, tmp_path / "out")
    shutil.copyfile(original, copy)
    assert RunStore.open(str(original)).delete_runs([run_id]).removed == [str(checkpoint.parent)]
    deleted = RunStore.open(str(copy)).delete_runs([run_id])
    assert (deleted.runs, deleted.removed, deleted.kept) == ([run_id], [], [])
