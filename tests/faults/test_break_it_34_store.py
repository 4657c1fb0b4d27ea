"""Break-it round 34, P3 (the run store), causes C1 and on, and their review.

C1. A project folder moved whole (store file and dlperf_runs/ together): `runs delete` found
    the run's files beside the store, but `runs show` said `exists: no`, `export N` "put the
    run's checkpoint back, or train the run again" and `runs trace` "its trace is gone". A run's
    recorded files are read where `runs delete` finds them (`RunStore.artifacts`).
C2. `runs delete` of a distill select run removed its pseudo-labelled npz, the training data
    (data.root) of the pretrain run still in the store, without a word; `export` of that run
    then said "set data.root". A file that another run's config trains on is kept, saying so.
    And a run whose weights another run starts from (model.weights = "run:N", distill's
    finetune run) went without a word: the delete names the runs that start from it.
C3. Deleting every run of a sweep or distill study left its figures in `study-N/` on disk
    without a word (a staleness study's recorded figure goes with its runs): a study's
    directory goes with the last of its runs.
C4. `dlperf runs list --db x.db` was "No such option: --db (Possible options: --kind) (see
    dlperf runs list --help)", whose help has no --db: an option of dlperf itself given after
    the command says where it goes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dlperf.engine.checkpoint import run_checkpoint
from dlperf.store import RunStore
from dlperf.store.query import show
from dlperf.traces import run_traces
from tests.conftest import CliResult, fresh_store_url
from tests.faults.test_break_it_4_store import _closed


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from fresh_store_url(request.param, tmp_path, "bk34_store")


def test_a_project_moved_whole_reads_its_runs_files_where_they_are_now(tmp_path: Path) -> None:
    old, new = tmp_path / "w", tmp_path / "w2"
    old.mkdir()
    store = RunStore.open(str(old / "dlperf.db"))
    run_id = store.create_run("r", "run", {"a": 1})
    run_dir = store.artifact_dir(old / "dlperf_runs") / f"run-{run_id}"
    checkpoint, trace = run_dir / "checkpoint.pt", run_dir / "trace" / "rank0.pt.trace.json.gz"
    trace.parent.mkdir(parents=True)
    checkpoint.write_bytes(b"weights")
    trace.write_bytes(b"{}")
    store.add_artifact(run_id, "trace", trace)
    store.add_artifact(run_id, "checkpoint", checkpoint)
    store.finish_run(run_id)
    _closed(store)
    old.rename(new)
    checkpoint_now, trace_now = (new / p.relative_to(old) for p in (checkpoint, trace))
    for create in (False, True):  # a reader (show, export, trace), a writer (run --resume)
        moved = RunStore.open(str(new / "dlperf.db"), create=create)
        assert moved.artifacts(run_id) == [
            {"kind": "trace", "path": str(trace_now)},
            {"kind": "checkpoint", "path": str(checkpoint_now)},
        ]
        assert all(a["exists"] for a in show(moved, run_id, values=False).artifacts)
        assert run_checkpoint(moved, run_id, "to export", "") == checkpoint_now
        assert run_traces(moved, run_id) == [trace_now]
        _closed(moved)


def pseudo_labels(store: RunStore, runs_dir: Path) -> Path:
    """A distill study's pseudo-labelled npz, where its select stage writes it."""
    pseudo = store.artifact_dir(runs_dir) / "study-1" / "pseudo-0123.npz"
    pseudo.parent.mkdir(parents=True)
    pseudo.write_bytes(b"images")
    return pseudo


def selected(store: RunStore, runs_dir: Path) -> tuple[Path, int]:
    """The npz and the select run that records it."""
    pseudo = pseudo_labels(store, runs_dir)
    select = store.create_run("d-select-k10", "select", {"top_k": 10})
    store.add_artifact(select, "pseudo-labels", pseudo)
    return pseudo, select


def test_a_file_another_runs_config_trains_on_is_kept(store_url: str, tmp_path: Path) -> None:
    store = RunStore.open(store_url)
    pseudo, select = selected(store, tmp_path / "dlperf_runs")
    pretrain = store.create_run("d-pretrain-k10", "run", {"data": {"root": str(pseudo)}})
    for run_id in (select, pretrain):
        store.finish_run(run_id)
    deleted = store.delete_runs([select])
    assert deleted.runs == [select] and deleted.removed == [] and pseudo.is_file()
    assert deleted.kept == [(str(pseudo), f"run {pretrain} trains on it (its data.root)")]
    # Its last user gone, the file goes with the run that recorded it.
    again = store.create_run("d-select-k10", "select", {"top_k": 10})
    store.add_artifact(again, "pseudo-labels", pseudo)
    store.finish_run(again)
    deleted = store.delete_runs([again, pretrain])
    assert deleted.removed == [str(pseudo)] and not pseudo.exists()
    _closed(store)


def test_deleting_a_run_whose_weights_another_starts_from_names_it(tmp_path: Path) -> None:
    store = RunStore.open(str(tmp_path / "dlperf.db"))
    pretrain = store.create_run("d-pretrain-k10", "run", {"model": {"weights": None}})
    finetune = store.create_run("ft", "run", {"model": {"weights": f"run:{pretrain}"}})
    by_name = store.create_run("ft2", "run", {"model": {"weights": "run:last:d-pretrain-k10"}})
    for run_id in (pretrain, finetune, by_name):
        store.finish_run(run_id)
    deleted = store.delete_runs([pretrain])
    assert deleted.runs == [pretrain] and deleted.kept == []
    assert deleted.notes == [
        f"run {finetune} starts from run {pretrain}'s weights (model.weights = "
        f"run:{pretrain}), which are deleted now"
    ]
    assert store.delete_runs([finetune]).notes == []
    _closed(store)


def test_an_option_of_dlperf_after_the_command_says_where_it_goes(
    cli: Callable[..., CliResult],
) -> None:
    said = cli("runs", "list", "--db", "x.db", "--kind", "run")
    assert (said.code, said.out) == (2, "")
    assert said.err == (
        "error: --db goes before the command: dlperf --db x.db runs list --kind run "
        "(or set DLPERF_DB)\n"
    )
    said = cli("runs", "show", "1", "--debug")
    assert said.err == "error: --debug goes before the command: dlperf --debug runs show 1\n"
    said = cli("runs", "list", "--db=postgresql://me:secret@h/db")
    assert said.err == (
        "error: --db goes before the command: dlperf '--db=postgresql://me:***@h/db' runs list "
        "(or set DLPERF_DB)\n"
    )
    assert "Possible options: --kind" in cli("runs", "list", "--kindd").err  # Click's, as before


def test_a_studys_directory_goes_with_the_last_of_its_runs(store_url: str, tmp_path: Path) -> None:
    store = RunStore.open(store_url)
    study = store.create_study("swp", "sweep")
    config = {"run": {"out_dir": str(tmp_path / "dlperf_runs")}}
    points = [store.create_run(f"swp-{i}", "run", config, study_id=study) for i in range(2)]
    other = store.create_run("alone", "run", config)
    for run_id in [*points, other]:
        store.finish_run(run_id)
    folder = store.artifact_dir(tmp_path / "dlperf_runs") / f"study-{study}"
    folder.mkdir(parents=True)
    (folder / "val_error.png").write_bytes(b"png")
    assert store.delete_runs([points[0], other]).removed == []
    assert (folder / "val_error.png").is_file()
    deleted = store.delete_runs([points[1]])
    assert (deleted.removed, deleted.kept) == ([str(folder)], []) and not folder.exists()
    _closed(store)


def test_a_studys_directory_stays_while_a_run_trains_on_a_file_in_it(tmp_path: Path) -> None:
    store = RunStore.open(str(tmp_path / "dlperf.db"))
    study = store.create_study("d", "distill")
    config = {"run": {"out_dir": str(tmp_path / "dlperf_runs")}}
    select = store.create_run("d-select-k10", "select", config, study_id=study)
    pseudo = store.artifact_dir(tmp_path / "dlperf_runs") / f"study-{study}" / "pseudo-0.npz"
    pseudo.parent.mkdir(parents=True)
    pseudo.write_bytes(b"images")
    store.add_artifact(select, "pseudo-labels", pseudo)
    user = store.create_run("mine", "run", {**config, "data": {"root": str(pseudo)}})
    for run_id in (select, user):
        store.finish_run(run_id)
    deleted = store.delete_runs([select])
    assert deleted.removed == [] and [p for p, _ in deleted.kept] == [str(pseudo)]
    assert pseudo.is_file()
    _closed(store)
