"""Store housekeeping: `runs delete`, `runs tag`, `runs list --where`, `lost` runs, and what
`runs show` and `runs compare` print."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import text

from dlperf.procs import this_process
from dlperf.store import RunStore
from dlperf.store.query import CELL_CHARS
from dlperf.store.record import current_status
from tests.cli.test_app import one_line_error
from tests.conftest import CliResult, trained_run

DEADLINE_S = 30


def count(store: RunStore, table: str, run_id: int) -> int:
    with store.engine.connect() as conn:
        query = text(f"SELECT count(*) FROM {table} WHERE run_id = :r")
        return conn.execute(query, {"r": run_id}).scalar_one()


def finished(store: RunStore, name: str, config: dict, summary: dict | None = None) -> int:
    run = store.create_run(name, "run", config, None, {"host": "h"})
    store.finish_run(run, "finished", summary=summary or {})
    return run


def table_rows(out: str) -> dict[str, list[str]]:
    """A printed table's rows by their first cell: the other cells as printed."""
    cells = [[cell.strip() for cell in line.split("│")] for line in out.splitlines() if "│" in line]
    return {row[0]: row[1:] for row in cells}


# --- runs delete ----------------------------------------------------------------------------


@pytest.fixture
def real_run(tmp_path: Path) -> tuple[RunStore, int]:
    """A real one-epoch run with its checkpoint, in the store the `cli` fixture uses."""
    store, run_id, _ = trained_run(tmp_path)
    return store, run_id


def test_delete_removes_the_runs_rows_and_own_files_only(
    cli: Callable[..., CliResult], real_run: tuple[RunStore, int], tmp_path: Path
) -> None:
    store, keep = real_run
    kept_ckpt = Path(store.artifacts(keep)[0]["path"])
    assert kept_ckpt.is_file() and kept_ckpt.parent.name == f"run-{keep}"

    root = store.artifact_dir(tmp_path / "runs")
    gone = finished(store, "gone", {"train": {"lr": 0.1}})
    other = finished(store, "other", {})
    own = root / f"run-{gone}" / "checkpoint.pt"
    figure = root / "scale-9" / "plots" / "speedup.png"
    shared = root / "shared.json"
    outside = tmp_path / "devices.toml"  # the user's own file, recorded by a run
    for path in (own, figure, shared, outside):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x")
    (own.parent / "extra.log").write_text("the run's own directory goes whole")
    for path in (own, figure, shared, outside):
        store.add_artifact(gone, "file", path)
    store.add_artifact(other, "figure", shared)
    store.log_metrics(gone, [("train/loss", 1, 1.0)])
    store.set_tags(gone, {"a": "1"})

    result = cli("runs", "delete", str(gone), "--yes")
    assert result.code == 0, result.err
    assert result.out.splitlines()[0] == f"deleted run {gone}"
    assert not own.parent.exists() and not (root / "scale-9").exists()
    assert shared.is_file() and outside.is_file() and kept_ckpt.is_file() and root.is_dir()
    assert f"kept {shared}: another run records it too" in result.err
    assert f"kept {outside}: not under this store's artifact directory" in result.err
    for table in ("metrics", "artifacts", "tags"):
        assert count(store, table, gone) == 0
    assert count(store, "metrics", keep) > 0 and store.artifacts(other)
    assert [r.id for r in store.list_runs()] == [other, keep]

    # The real run goes too, checkpoint and directory; the other runs' files stay.
    assert cli("runs", "delete", str(keep), "-y").code == 0
    assert not kept_ckpt.parent.exists() and shared.is_file()


def test_delete_checks_every_id_first(cli: Callable[..., CliResult], store: RunStore) -> None:
    a = finished(store, "a", {})
    one_line_error(cli("runs", "delete", str(a), "98", "99", "--yes"), "no run 98, 99 in the store")
    assert store.get_run(a).name == "a"


def test_delete_asks_and_refuses_to_hang_without_a_terminal(
    cli: Callable[..., CliResult], store: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = finished(store, "a", {})
    one_line_error(cli("runs", "delete", str(a)), "stdin is not a terminal")

    monkeypatch.setattr("dlperf.cli.runs._interactive", lambda: True)
    monkeypatch.setattr(sys, "stdin", io.StringIO("n\n"))
    declined = cli("runs", "delete", str(a))
    assert declined.code == 1 and "Delete 1 run(s)?" in declined.err
    assert "nothing deleted" in declined.err and store.get_run(a)
    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n"))
    assert cli("runs", "delete", str(a)).code == 0
    assert store.list_runs() == []


LIVE = """
import sys, time
from dlperf import stopping
from dlperf.store import RunStore
def live():  # a command as dlperf runs one: SIGTERM marks the run killed, exit 143
    store = RunStore.open(sys.argv[1])
    # the sections every dlperf run's config holds: a config without them is a
    # dlperf.track run's, whose process --force does not signal
    config = {"model": {}, "data": {}, "train": {}, "run": {}}
    with store.new_run("live", "run", config, None, {"host": "h"}) as record:
        print(record.id, flush=True)
        time.sleep(600)
    return 0
stopping.run(live, process=True)
"""


def test_delete_refuses_a_running_run_and_force_stops_it_first(
    cli: Callable[..., CliResult], store: RunStore, db: str
) -> None:
    """A run that a live process writes is not deleted under it: refused in one line, or
    with --force its process is told to stop, marks it killed, and then it goes."""
    child = subprocess.Popen([sys.executable, "-c", LIVE, db], stdout=subprocess.PIPE, text=True)
    try:
        run = int(child.stdout.readline())
        result = cli("runs", "delete", str(run), "--yes")
        one_line_error(result, f"run {run} (pid {child.pid} on ")
        assert "is still running; nothing deleted" in result.err and "--force" in result.err
        forced = cli("runs", "delete", str(run), "--yes", "--force")
        assert forced.code == 0, forced.err
        assert forced.out.splitlines() == [
            f"stopped run {run}: pid {child.pid} marked it killed",
            f"deleted run {run}",
        ]
        assert child.wait(timeout=DEADLINE_S) == 143  # 128 + SIGTERM
    finally:
        child.kill()
        child.wait(timeout=DEADLINE_S)
        child.stdout.close()
    assert store.list_runs() == []


def test_a_run_of_another_host_is_deleted_under_it_only_when_forced(
    cli: Callable[..., CliResult], store: RunStore
) -> None:
    run = store.create_run("far", "run", {}, None, {"host": "h"})
    elsewhere = json.dumps({**this_process(), "host": "another-host"}, sort_keys=True)
    with store.engine.begin() as conn:
        system = json.dumps({"process": json.loads(elsewhere)})
        conn.execute(
            text("UPDATE runs SET owner = :o, system = :s WHERE id = :r"),
            {"o": elsewhere, "s": system, "r": run},
        )
    one_line_error(cli("runs", "delete", str(run), "--yes"), "is still running")
    forced = cli("runs", "delete", str(run), "--yes", "--force")
    assert forced.code == 0 and forced.out == f"deleted run {run}\n"
    assert "on another-host, which cannot be stopped from here: deleted under it" in forced.err
    assert store.list_runs() == []


def test_a_deleted_id_is_never_handed_out_again(store: RunStore) -> None:
    first = store.create_run("a", "run", {})
    newest = store.create_run("b", "run", {})
    store.delete_runs([newest])
    assert store.create_run("c", "run", {}) == newest + 1
    store.delete_runs([first])
    assert store.create_run("d", "run", {}) == newest + 2


# --- runs tag -------------------------------------------------------------------------------


def test_tags_set_show_list_and_remove(cli: Callable[..., CliResult], store: RunStore) -> None:
    run = finished(store, "a", {"model": {"name": "smallcnn"}})
    result = cli("runs", "tag", str(run), "baseline=yes", "note=lr too high")
    assert result.code == 0, result.err
    assert "baseline" in result.out and "lr too high" in result.out
    assert json.loads(cli("runs", "list", "--json").out)[0]["tags"] == {
        "baseline": "yes",
        "note": "lr too high",
    }
    shown = cli("runs", "show", str(run)).out
    assert "tag baseline" in shown and "lr too high" in shown
    assert "baseline=yes" in cli("runs", "list").out

    assert cli("runs", "tag", str(run), "note=", "baseline=no").code == 0
    assert store.get_run(run).tags == {"baseline": "no"}
    assert "has no tags" in cli("runs", "tag", str(run), "baseline=").out


def test_list_cuts_a_long_model_data_or_tags_cell(
    cli: Callable[..., CliResult], store: RunStore
) -> None:
    # Every row was padded to the widest: one model.name of 1 MB made 54 MB for 50 runs
    # (round 35 C4's cause in runs list).
    long = finished(store, "long", {"model": {"name": "m" * 10**5}, "data": {"name": "d" * 300}})
    for _ in range(3):
        finished(store, "short", {})
    store.set_tags(long, {"a": "t" * 300})
    out = cli("runs", "list").out
    assert len(out) < 6 * 1200
    cells = table_rows(out)[str(long)]
    assert cells[3] == f"{'m' * CELL_CHARS}... (100,000 characters; --json holds it whole)"
    assert cells[4].endswith("... (300 characters; --json holds it whole)")
    assert cells[-1].endswith("... (302 characters; --json holds it whole)")  # a=ttt...


def test_show_cuts_a_long_config_model_or_tag_cell(
    cli: Callable[..., CliResult], store: RunStore
) -> None:
    # A config value of 100,000 characters beside 20 top-level keys padded each of their rows
    # to it, as did a long model.name each row of the run's table (round 35 C4's cause).
    config = {"model": {"name": "m" * 10**5}, "v": "x" * 10**5, **{f"k{i}": i for i in range(20)}}
    run = finished(store, "long", config)
    store.set_tags(run, {"a": "t" * 300})
    out = cli("runs", "show", str(run)).out
    assert len(out) < 40 * 1200
    shown, _, config = out.partition("\nconfig\n")
    rows = table_rows(shown)
    assert rows["model"] == [f"{'m' * CELL_CHARS}... (100,000 characters; --json holds it whole)"]
    assert rows["tag a"][0].endswith("... (300 characters; --json holds it whole)")
    rows = table_rows(config)
    assert rows["model"][0].endswith("... (100,005 characters; --json holds it whole)")  # name=
    assert rows["v"][0].endswith("... (100,000 characters; --json holds it whole)")
    assert rows["k0"] == ["0"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["7", "a=1"], "no run 7 in the store"),
        (["{run}", "novalue"], "runs tag 'novalue': expected KEY=VALUE"),
        (["{run}", "=1"], "expected KEY=VALUE"),
        (["{run}", "a b=1"], "expected KEY=VALUE"),
        (["{run}", "a=1", "a=2"], "a is given twice"),
    ],
)
def test_bad_tags_are_one_line(
    cli: Callable[..., CliResult], store: RunStore, args: list[str], message: str
) -> None:
    run = finished(store, "a", {})
    one_line_error(cli("runs", "tag", *(a.format(run=run) for a in args)), message)
    assert store.get_run(run).tags == {}


# --- runs list --where ----------------------------------------------------------------------


@pytest.fixture
def three(store: RunStore) -> list[int]:
    ids = [
        finished(
            store,
            f"r{lr}",
            {"model": {"name": m}, "train": {"lr": lr, "nesterov": False, "epochs": 1}},
            {"test_accuracy": acc},
        )
        for m, lr, acc in (("smallcnn", 0.1, 0.5), ("resnet20", 0.1, 0.9), ("smallcnn", 0.01, 0.7))
    ]
    store.set_tags(ids[0], {"baseline": "yes"})
    return ids


def where(cli: Callable[..., CliResult], *args: str) -> list[int]:
    result = cli("runs", "list", *(a for w in args for a in ("--where", w)), "--json")
    assert result.code == 0, result.err
    return [r["id"] for r in json.loads(result.out)]


def test_where_reads_values_as_set_does(cli: Callable[..., CliResult], three: list[int]) -> None:
    a, b, c = three
    assert where(cli, "train.lr=0.1") == [b, a]
    assert where(cli, "train.lr=0.10", "model.name=smallcnn") == [a]
    assert where(cli, "train.lr=1e-2") == [c]
    assert where(cli, "train.nesterov=false") == [c, b, a]
    assert where(cli, "train.epochs=true") == []  # true is not 1
    assert where(cli, "train.epochs=1.0") == [c, b, a]
    assert where(cli, "status=finished", "kind=run", "name=r0.01") == [c]
    assert where(cli, "test_accuracy=0.9") == [b]
    assert where(cli, "tag.baseline=yes") == [a]
    assert where(cli, "model.name=resnet50") == []
    # The limit counts runs that match: the newest one of those, not of all runs.
    limited = cli("runs", "list", "--where", "model.name=smallcnn", "--limit", "1", "--json")
    assert [r["id"] for r in json.loads(limited.out)] == [c]


@pytest.mark.parametrize(
    ("clause", "message"),
    [
        ("train.lrr=0.1", "--where: unknown key 'train.lrr' (did you mean 'train.lr'?)"),
        ("modle.name=x", "did you mean 'model.name'?"),
        ("statuss=lost", "did you mean 'status'?"),
        ("tag.baselin=yes", "no listed run has tag 'baselin' (did you mean tag.baseline?)"),
        ("train.lr", "--where 'train.lr': expected KEY=VALUE"),
        ("train.lr=", "expected KEY=VALUE"),
    ],
)
def test_bad_where_is_one_line(
    cli: Callable[..., CliResult], three: list[int], clause: str, message: str
) -> None:
    one_line_error(cli("runs", "list", "--where", clause), message)


# --- lost runs ------------------------------------------------------------------------------

CHILD = """
import sys, time
from dlperf.store import RunStore
store = RunStore.open(sys.argv[1])
print(store.create_run("doomed", "run", {}, None, {"host": "h"}), flush=True)
time.sleep(600)
"""


def test_a_killed_process_leaves_a_lost_run(
    cli: Callable[..., CliResult], store: RunStore, db: str
) -> None:
    child = subprocess.Popen([sys.executable, "-c", CHILD, db], stdout=subprocess.PIPE, text=True)
    try:
        run_id = int(child.stdout.readline())
        assert json.loads(cli("runs", "show", str(run_id), "--json").out)["status"] == "running"
        child.send_signal(signal.SIGKILL)
        # Not reaped yet, the child is a zombie: that is gone too.
        deadline = time.monotonic() + DEADLINE_S
        while store.get_run(run_id).status != "lost":
            assert time.monotonic() < deadline, "the killed run never read as lost"
        child.wait(timeout=DEADLINE_S)
    finally:
        child.kill()
        child.wait(timeout=DEADLINE_S)
        child.stdout.close()
    assert child.returncode == -signal.SIGKILL

    with store.engine.connect() as conn:  # computed on read, never written
        stored = conn.execute(text("SELECT status FROM runs WHERE id = :r"), {"r": run_id})
        assert stored.scalar() == "running"
    listed = json.loads(cli("runs", "list", "--json").out)
    assert [(r["id"], r["status"]) for r in listed] == [(run_id, "lost")]
    assert where(cli, "status=lost") == [run_id]
    shown = cli("runs", "show", str(run_id)).out
    assert "(lost)" in shown and f"pid {child.pid} is gone" in shown
    assert cli("runs", "delete", str(run_id), "--yes").code == 0  # lost: no --force needed


def test_lost_needs_this_host_and_the_same_process(store: RunStore) -> None:
    me = this_process()
    assert current_status("running", {"process": me}) == "running"
    if me["start"] is not None:  # the pid now held by another process: gone
        reused = {**me, "start": me["start"] + 1}
        assert current_status("running", {"process": reused}) == "lost"
    rebooted = {**me, "boot_id": "another boot"}
    assert current_status("running", {"process": rebooted}) == (
        "lost" if me["boot_id"] else "running"
    )
    elsewhere = {**me, "host": "another-host", "pid": 2**22 + 1}
    assert current_status("running", {"process": elsewhere}) == "running"
    assert current_status("running", {"host": "h"}) == "running"  # nothing recorded
    gone = {**me, "pid": 2**22 + 1}
    assert current_status("running", {"process": gone}) == "lost"
    assert current_status("finished", {"process": gone}) == "finished"

    resumed = store.create_run("r", "run", {}, None, {"host": "h"})
    with store.engine.begin() as conn:  # as if written by a process long gone
        gone = json.dumps({"host": "h", "process": {**me, "pid": 2**22 + 1}})
        conn.execute(text("UPDATE runs SET system = :s WHERE id = :r"), {"s": gone, "r": resumed})
    assert store.get_run(resumed).status == "lost"
    store.take_over(resumed)  # a resume: this process writes it now
    assert store.get_run(resumed).status == "running"


# --- runs show, runs compare ----------------------------------------------------------------


def test_show_prints_config_system_artifacts_memory_and_shares(
    cli: Callable[..., CliResult], store: RunStore, tmp_path: Path
) -> None:
    config = {"model": {"name": "smallcnn"}, "train": {"lr": 0.05, "nesterov": True}}
    summary = {"peak_memory_bytes": 3 * 2**20, "phases": {"forward": 0.003, "backward": 0.001}}
    run = store.create_run("a", "run", config, None, {"host": "h", "gpus": []})
    store.finish_run(run, "finished", summary=summary)
    store.add_artifact(run, "checkpoint", tmp_path / "missing.pt")
    rows = table_rows(cli("runs", "show", str(run)).out)
    assert rows["model"] == ["name=smallcnn"] and rows["train"] == ["lr=0.05 nesterov=true"]
    assert rows["peak memory MiB"] == ["3"]
    assert rows["forward"] == ["3", "75"] and rows["backward"] == ["1", "25"]  # ms, %
    assert rows["process.pid"] == [str(os.getpid())] and rows["gpus"] == ["-"]
    assert rows["checkpoint"] == [str(tmp_path / "missing.pt"), "no"]
    shown = json.loads(cli("runs", "show", str(run), "--json").out)
    assert shown["artifacts"] == [
        {"kind": "checkpoint", "path": str(tmp_path / "missing.pt"), "exists": False}
    ]


def test_compare_prints_plain_values_and_a_delta(
    cli: Callable[..., CliResult], store: RunStore
) -> None:
    a = finished(
        store,
        "a",
        {"run": {"timing": "phases"}, "train": {"lr": 0.05}},
        {"test_accuracy": 0.8, "throughput": 1000.0},
    )
    b = finished(
        store,
        "b",
        {"run": {"timing": "coarse"}, "train": {"lr": 0.02}},
        {"test_accuracy": 0.9, "throughput": 1000.0},
    )
    c = finished(
        store,
        "c",
        {"run": {"timing": "coarse"}, "train": {"lr": 0.1}},
        {"test_accuracy": None, "throughput": 500.0},
    )
    out = cli("runs", "compare", str(a), str(b)).out
    rows = table_rows(out)
    assert rows["run.timing"] == ["phases", "coarse", "-"]
    assert rows["train.lr"] == ["0.05", "0.02", "-0.03 (-60.0%)"]
    assert rows["test_accuracy"] == ["0.8", "0.9", "+0.1 (+12.5%)"]
    assert rows["throughput"] == ["1000", "1000", "0"]
    assert "'" not in out and "None" not in out and "epochs_to_target" not in out

    rows = table_rows(cli("runs", "compare", str(a), str(b), str(c)).out)
    assert rows["test_accuracy"] == ["0.8", "0.9", "-", "+12.5% -"]
    assert rows["throughput"] == ["1000", "1000", "500", "+0.0% -50.0%"]


# --- ids no store can hold -----------------------------------------------------------------

HUGE = "99999999999999999999"  # > 2^63: SQLite's driver cannot even bind it


@pytest.mark.parametrize(
    "args",
    [
        ["runs", "show", HUGE],
        ["runs", "show", str(2**63)],
        ["runs", "tag", HUGE, "a=1"],
        ["runs", "delete", HUGE, "--yes"],
        ["runs", "compare", "1", HUGE],
        ["runs", "plot", HUGE],
        ["runs", "export", HUGE, "--to", "tensorboard", "--out", "tb"],
        ["export", HUGE, "--out", "m.onnx"],
        ["run", "--resume", HUGE],
        ["converge", "fit", HUGE],
        ["doctor", HUGE],
    ],
    ids=" ".join,
)
def test_a_run_id_beyond_64_bits_is_no_run(
    cli: Callable[..., CliResult], store: RunStore, args: list[str]
) -> None:
    """These printed an OverflowError traceback (exit 1)."""
    finished(store, "only", {})
    one_line_error(cli(*args), f"no run {HUGE if HUGE in args else 2**63} in the store")


# --- runs repair ---------------------------------------------------------------------------


def test_repair_of_a_sound_store_is_a_faithful_copy(
    cli: Callable[..., CliResult], store: RunStore, tmp_path: Path
) -> None:
    """Every table comes across: studies, runs (with a study), metrics, artifacts, tags and
    the store's id; and a deleted run's id stays retired."""
    study = store.create_study("lr", "sweep")
    first = store.create_run("a", "run", {"train": {"lr": 0.1}}, "cafe", {"host": "h"}, study)
    store.log_metrics(first, [("train/loss", s, 1.0 / s) for s in range(1, 2001)])
    store.add_artifact(first, "checkpoint", "/x/checkpoint.pt")
    store.set_tags(first, {"baseline": "yes"})
    store.finish_run(first, "finished", summary={"test_accuracy": 0.9})
    gone = finished(store, "gone", {})
    store.delete_runs([gone])
    result = cli("runs", "repair", "copy.db")
    assert result.code == 0, result.err
    rows = table_rows(result.out)
    assert rows["runs"] == ["1", "0", "0"] and rows["metrics"] == ["2000", "0", "0"], result.out
    assert result.out.rstrip().endswith(
        f"wrote {tmp_path / 'copy.db'}: 1 run(s) of store {store.id}"
    )

    copy = RunStore.open(str(tmp_path / "copy.db"))
    assert copy.id == store.id and copy.get_run(first) == store.get_run(first)
    assert copy.get_study(study) == store.get_study(study)
    assert copy.metrics(first, "train/loss") == store.metrics(first, "train/loss")
    assert copy.artifacts(first) == store.artifacts(first)
    assert copy.create_run("next", "run", {}) == gone + 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["runs", "repair", "dlperf.db"], "dlperf.db exists (repair writes a new store"),
        (["--db", "none.db", "runs", "repair", "new.db"], "none.db does not exist"),
        (
            ["--db", "postgresql+psycopg://u:secret@h/db", "runs", "repair", "new.db"],
            "runs repair reads a SQLite store file, not postgresql+psycopg://u:***@h/db",
        ),
    ],
)
def test_bad_repairs_are_one_line(
    cli: Callable[..., CliResult], store: RunStore, tmp_path: Path, args: list[str], message: str
) -> None:
    one_line_error(cli(*args), message)
    assert not (tmp_path / "new.db").exists()


# --- stores that must not be written --------------------------------------------------------


def test_sqlite_read_only_mode_is_honoured(
    cli: Callable[..., CliResult], store: RunStore, tmp_path: Path, tiny_exp: Callable[..., Path]
) -> None:
    """`?mode=ro` opens the file read-only: every writing command is refused in one line and
    the file is untouched; readers read. Before, the driver ignored the mode with a warning
    and a run was written into the store."""
    run = finished(store, "kept", {})
    store.engine.dispose()
    path = tmp_path / "dlperf.db"
    before = path.read_bytes()
    ro = f"sqlite:///{path}?mode=ro"
    for args in (
        ["runs", "tag", str(run), "a=b"],
        ["runs", "delete", str(run), "--yes"],
        ["run", str(tiny_exp(epochs=1))],
    ):
        one_line_error(
            cli("--db", ro, *args), f"run store sqlite:///{path} is open read-only (drop ?mode=ro"
        )
    listed = cli("--db", ro, "runs", "list", "--json")
    assert listed.code == 0 and listed.err == ""
    assert [r["name"] for r in json.loads(listed.out)] == ["kept"]
    assert path.read_bytes() == before
    one_line_error(cli("--db", f"sqlite:///{path}?mode=rwc", "runs", "list"), "mode=rwc is not")


def test_readers_never_make_a_store(cli: Callable[..., CliResult], tmp_path: Path) -> None:
    """`runs list/show/compare` read a missing or zero-byte store file as a store without runs,
    and leave it as it was. Before, `runs list` wrote a schema into a zero-byte file."""
    empty = tmp_path / "empty.db"
    empty.touch()
    for db in (empty, tmp_path / "missing.db"):
        listed = cli("--db", str(db), "runs", "list", "--json")
        assert (listed.code, json.loads(listed.out)) == (0, [])
        one_line_error(cli("--db", str(db), "runs", "show", "1"), "no run 1: run store ")
    assert empty.stat().st_size == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.db"]


def test_a_store_path_that_is_a_symlink_loop_is_one_line(
    cli: Callable[..., CliResult], tmp_path: Path, tiny_exp: Callable[..., Path]
) -> None:
    (tmp_path / "loop.db").symlink_to("loop.db")
    for args in (["runs", "list"], ["runs", "tag", "1", "a=b"], ["run", str(tiny_exp())]):
        result = cli("--db", str(tmp_path / "loop.db"), *args)
        one_line_error(result, f"cannot open run store sqlite:///{tmp_path / 'loop.db'}: ")
        assert "loop" in result.err.lower()


LISTING = """
import sys
from dlperf.cli import main

sys.argv = ["dlperf", "--db", sys.argv[1], "runs", "list"]
try:
    main()
except SystemExit as e:
    if e.code not in (0, None):
        raise
print(" ".join(sorted(m for m in ("dlperf.config", "torch", "numpy") if m in sys.modules)))
"""


def test_runs_list_reads_without_the_config_models(store: RunStore, db: str) -> None:
    """A listing pays for the store, not for building the experiment's pydantic models
    (dlperf.config); `--where` still loads them. No clock: what is imported is the property."""
    finished(store, "a", {"train": {"lr": 0.1}})
    done = subprocess.run(
        [sys.executable, "-c", LISTING, db], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == ""
