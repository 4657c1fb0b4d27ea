"""dlperf.store.runstore: RunStore's contract in small pieces: how --db is read, what a write
refuses in one line, what comes back of what was written, and `repair`'s checks. The whole
life of a run and both backends are tests/store/test_store.py's."""

from __future__ import annotations

import math
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest

from dlperf.errors import UserError
from dlperf.store import RunStore, runstore
from dlperf.store.runstore import DEFAULT_DB, TAG_VALUE_MAX, _busy_timeout_s, _parsed, _url


@pytest.fixture
def fresh(tmp_path: Path) -> RunStore:
    return RunStore.open(str(tmp_path / "s.db"))


@pytest.mark.parametrize(
    ("db", "url"),
    [
        (None, f"sqlite:///{DEFAULT_DB}"),
        ("  ", f"sqlite:///{DEFAULT_DB}"),  # blank: the default, not a file named ' '
        ("postgres://u@h/db", "postgresql://u@h/db"),
        ("mysql://u@h/db", "mysql://u@h/db"),
        ("/tmp/a b.db", "sqlite:////tmp/a b.db"),
    ],
)
def test_url_reads_what_db_can_name(db: str | None, url: str) -> None:
    assert _url(db) == url


def test_a_plain_path_names_exactly_that_file(tmp_path: Path) -> None:
    # ?, # and % are part of the file's name, not the URL's query, fragment or escapes.
    for name in ("q?.db", "h#1.db", "a%20b.db"):
        assert _parsed(_url(str(tmp_path / name))).database == str(tmp_path / name)
    assert _parsed(_url("~/x.db")).database == str(Path.home() / "x.db")


def test_a_port_that_is_not_a_number_is_one_line() -> None:
    with pytest.raises(UserError, match="its port is not a number") as e:
        _parsed("postgresql://u:secret@host:port/db")
    assert "secret" not in str(e.value)  # the password masked


def test_busy_timeout_is_the_urls_seconds_or_the_default() -> None:
    assert _busy_timeout_s(_parsed("sqlite:///x.db")) == float(runstore.BUSY_TIMEOUT_S)
    assert _busy_timeout_s(_parsed("sqlite:///x.db?timeout=2.5")) == 2.5
    for bad in ("abc", "-1", "inf"):
        with pytest.raises(UserError, match=f"timeout={bad} is not a number of seconds"):
            _busy_timeout_s(_parsed(f"sqlite:///x.db?timeout={bad}"))


@pytest.mark.parametrize(
    ("db", "text"),
    [
        ("sqlite://", "is in memory: it would keep nothing"),
        ("sqlite:///:memory:", "is in memory"),
        ("sqlite:///{tmp}/s.db?mode=rw", "SQLite mode=rw is not supported"),
    ],
)
def test_stores_that_would_keep_nothing_are_refused(tmp_path: Path, db: str, text: str) -> None:
    with pytest.raises(UserError, match=text):
        RunStore.open(db.format(tmp=tmp_path))


def test_a_missing_file_opened_to_read_is_an_empty_store_and_no_file(tmp_path: Path) -> None:
    store = RunStore.open(str(tmp_path / "none.db"), create=False)
    assert store.list_runs() == []
    assert not (tmp_path / "none.db").exists()


def test_a_writer_that_never_makes_a_store_keeps_the_file_of_one_that_is_there(
    tmp_path: Path,
) -> None:
    # runs tag / delete: a missing file is not made, and each write says why it cannot be
    missing = RunStore.open(str(tmp_path / "none.db"), create=False, writes=True)
    assert missing.read_only and not (tmp_path / "none.db").exists()
    RunStore.open(str(tmp_path / "s.db")).engine.dispose()
    # one that is there is held as a run's store holds it, in one open (it took two)
    there = RunStore.open(str(tmp_path / "s.db"), create=False, writes=True)
    assert not there.read_only and there._file is not None
    assert RunStore.open(str(tmp_path / "s.db"), create=False)._file is None  # a reader's


def test_metric_values_come_back_as_written_nan_included(fresh: RunStore) -> None:
    run_id = fresh.create_run("r", "train", {})
    fresh.log_metrics(
        run_id, [("loss", 1, 0.5, 10.0), ("loss", 0, -0.0), ("loss", 2, math.nan), ("acc", 0, 1)]
    )
    values = fresh.metrics(run_id, "loss")
    assert [s for s, _ in values] == [0, 1, 2]  # in step order
    assert values[0] == (0, 0.0) and math.copysign(1, values[0][1]) == 1  # -0.0 kept as 0.0
    assert values[1] == (1, 0.5) and math.isnan(values[2][1])
    assert fresh.metric_keys(run_id) == ["acc", "loss"]
    assert fresh.last_step(run_id, "loss") == 2 and fresh.last_step(run_id, "x") is None


def test_delete_metrics_after_drops_the_steps_past_a_checkpoint_by_prefix(
    fresh: RunStore,
) -> None:
    run_id = fresh.create_run("r", "train", {})
    fresh.log_metrics(run_id, [(k, s, 1.0) for k in ("train/loss", "val/acc") for s in range(4)])
    fresh.delete_metrics_after(run_id, [("train/", 1)])
    assert [s for s, _ in fresh.metrics(run_id, "train/loss")] == [0, 1]
    assert [s for s, _ in fresh.metrics(run_id, "val/acc")] == [0, 1, 2, 3]


def test_a_metric_step_edited_by_hand_is_one_line_naming_the_run(
    fresh: RunStore, tmp_path: Path
) -> None:
    run_id = fresh.create_run("r", "train", {})
    fresh.log_metrics(run_id, [("loss", 0, 1.0)])
    with closing(sqlite3.connect(tmp_path / "s.db")) as conn:
        conn.execute("UPDATE metrics SET step = 'abc'")
        conn.commit()
    with pytest.raises(UserError, match=f"run {run_id}'s metrics in run store .* hold a step"):
        fresh.metrics(run_id, "loss")


def test_finish_run_keeps_non_finite_summary_values_as_null_and_clears_the_owner(
    fresh: RunStore,
) -> None:
    run_id = fresh.create_run("r", "train", {})
    fresh.finish_run(run_id, "failed", {"loss": math.inf, "x": [1.0, math.nan]}, "boom\x00")
    run = fresh.get_run(run_id)
    assert run.status == "failed" and run.summary == {"loss": None, "x": [1.0, None]}
    assert run.error == "boom\\x00"  # NUL, which PostgreSQL refuses, escaped
    assert run.ended is not None


def test_text_the_store_cannot_keep_is_refused_before_writing(fresh: RunStore) -> None:
    with pytest.raises(UserError, match=r"run name 'x{20}'\.\.\. is 201 characters"):
        fresh.create_run("x" * 201, "train", {})
    with pytest.raises(UserError, match="holds a NUL character"):
        fresh.create_run("a\x00b", "train", {})
    assert fresh.list_runs() == []
    run_id = fresh.create_run("r", "train", {})
    with pytest.raises(UserError, match=f"keeps at most {TAG_VALUE_MAX}"):
        fresh.set_tags(run_id, {"note": "y" * (TAG_VALUE_MAX + 1)})


def test_set_tags_sets_replaces_and_removes(fresh: RunStore) -> None:
    run_id = fresh.create_run("r", "train", {})
    assert fresh.set_tags(run_id, {"a": "1", "b": "2"}) == {"a": "1", "b": "2"}
    assert fresh.set_tags(run_id, {"a": "3", "b": None}) == {"a": "3"}
    assert fresh.set_tags(run_id, {"a": ""}) == {}
    with pytest.raises(UserError, match="no run 99"):
        fresh.set_tags(99, {"a": "1"})


def test_writer_refusal_says_why_a_run_cannot_be_taken_over(fresh: RunStore) -> None:
    done = fresh.create_run("done", "train", {})
    fresh.finish_run(done)
    live = fresh.create_run("live", "train", {}, system={})
    killed = fresh.create_run("killed", "train", {})
    fresh.finish_run(killed, "killed")
    refusal = runstore.writer_refusal(fresh.get_run(done))
    assert refusal is not None and refusal.message == f"run {done} already finished"
    refusal = runstore.writer_refusal(fresh.get_run(live))
    assert refusal is not None
    assert refusal.message.startswith(f"run {live} is running in pid ")
    assert runstore.writer_refusal(fresh.get_run(killed)) is None


@pytest.mark.parametrize(
    ("db", "out", "text"),
    [
        ("postgresql://u@h/db", "new.db", "runs repair reads a SQLite store file"),
        ("{tmp}/none.db", "new.db", "does not exist"),
        ("{tmp}/s.db", " ", "runs repair writes a new SQLite store file"),
        ("{tmp}/s.db", "sqlite:///x.db", "runs repair writes a new SQLite store file"),
        ("{tmp}/s.db", "{tmp}/s.db", "exists (repair writes a new store"),
    ],
)
def test_repair_refuses_in_one_line(
    fresh: RunStore, tmp_path: Path, db: str, out: str, text: str
) -> None:
    with pytest.raises(UserError) as e:
        runstore.repair(db.format(tmp=tmp_path), out.format(tmp=tmp_path))
    assert text in str(e.value) and "\n" not in str(e.value)


def test_repair_writes_the_copy_under_its_name_and_leaves_nothing_else(
    fresh: RunStore, tmp_path: Path
) -> None:
    run_id = fresh.create_run("r", "train", {"a": 1})
    fresh.finish_run(run_id)
    out = tmp_path / "out" / "new.db"
    out.parent.mkdir()
    done = runstore.repair(str(tmp_path / "s.db"), str(out))
    assert done.runs == 1 and done.store_id == fresh.id
    assert [p.name for p in out.parent.iterdir()] == ["new.db"]  # no .new.db.repairing
    assert RunStore.open(str(out)).get_run(run_id).config == {"a": 1}


def test_stores_opened_in_a_loop_share_one_exit_handler_that_still_empties_the_wal(
    tmp_path: Path,
) -> None:
    """Before, every open registered its own atexit handler: a notebook opening stores in a
    loop held one closure per open, all run at exit (round 18)."""
    code = (
        "import atexit, sys\n"
        "from dlperf.store import RunStore\n"
        "RunStore.open(sys.argv[1]).create_study('s', 'sweep')\n"
        "n = atexit._ncallbacks()\n"
        "stores = [RunStore.open(sys.argv[1]) for _ in range(20)]\n"
        "print(atexit._ncallbacks() - n)\n"
    )
    path = tmp_path / "s.db"
    out = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "0"
    wal = path.with_name(path.name + "-wal")  # checkpointed into the file at exit
    assert not wal.exists() or wal.stat().st_size == 0
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("select count(*) from studies").fetchone() == (1,)
