"""Break-it round 34, P3 (the run store): the review of its fixes.

R1. `runs delete` of a distill select run keeps its pseudo-labelled npz while the pretrain run
    trains on it (C2), but then deleting the pretrain run left the npz behind without a word:
    no run recorded it any more. The runs that train on a kept file record it now, so it goes
    with the last of them.
    On PostgreSQL a delete of that run meanwhile (another process) is waited for: the file then
    has no user and goes, where the row recorded to the vanished run failed its foreign key.
R2. A project folder moved whole (C1): a run's recorded files were found beside the store, but
    the pseudo-labelled npz a distill pretrain run trains on is named by its config (data.root)
    at the old place: `export` of that run said "not a readable .npz file (no such file) (set
    data.root to the path of one)". A stored run's data.root is read where it is now too.
R3. `runs delete` names the runs that start from a deleted run's weights given as run:N (C2),
    but not those given as the file (model.weights = ".../run-3/checkpoint.pt", a path the
    config keeps absolute): its run's directory went without a word. Both are named.
R4. `dlperf runs show 1 --db` (the store left out too) said "--db goes before the command:
    dlperf --db runs show 1", a line that takes "runs" for the store: the missing value is
    named as such (C4's line).
R5. A study's directory goes with the last of its runs (C3): `_take`, which checks a plan
    again (one read from the store's meta), removed any directory named study-N under the
    store's directory, one inside a run's own or the user's included, not only the study's.
    And a study's directory kept for the npz a run outside the study trains on stayed, with
    its figures, once that run went too: it goes with that file when no run of it is left.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from dlperf.store import RunStore
from dlperf.store.runstore import _take
from tests.conftest import CliResult, fresh_store_url
from tests.faults.test_break_it_4_store import _closed
from tests.faults.test_break_it_34_store import pseudo_labels, selected


def test_a_file_kept_for_the_run_that_trains_on_it_goes_with_that_run(tmp_path: Path) -> None:
    store = RunStore.open(str(tmp_path / "dlperf.db"))
    pseudo, select = selected(store, tmp_path / "dlperf_runs")
    config = {"data": {"root": str(pseudo)}}
    pretrain, other = (store.create_run(n, "run", config) for n in ("d-pretrain-k10", "again"))
    for run_id in (select, pretrain, other):
        store.finish_run(run_id)
    kept = store.delete_runs([select]).kept
    assert kept == [(str(pseudo), f"runs {pretrain}, {other} train on it (its data.root)")]
    assert store.artifacts(pretrain) == [{"kind": "pseudo-labels", "path": str(pseudo)}]
    deleted = store.delete_runs([pretrain])
    assert deleted.kept == [(str(pseudo), "another run records it too")] and pseudo.is_file()
    assert store.delete_runs([other]).removed == [str(pseudo)] and not pseudo.exists()
    _closed(store)


@pytest.fixture
def postgres_url(tmp_path: Path) -> Iterator[str]:
    yield from fresh_store_url("postgresql", tmp_path, "bk34_review")


def test_a_delete_meanwhile_of_the_run_a_kept_file_is_kept_for(
    postgres_url: str, tmp_path: Path
) -> None:
    store = RunStore.open(postgres_url)
    pseudo, select = selected(store, tmp_path / "dlperf_runs")
    pretrain = store.create_run("d-pretrain-k10", "run", {"data": {"root": str(pseudo)}})
    for run_id in (select, pretrain):
        store.finish_run(run_id)
    other = create_engine(postgres_url)
    done: list[object] = []
    with other.connect() as conn:  # another process deleting the pretrain run, not committed
        conn.execute(text(f"SELECT id FROM runs WHERE id = {pretrain} FOR UPDATE"))
        conn.execute(text(f"DELETE FROM runs WHERE id = {pretrain}"))
        worker = threading.Thread(target=lambda: done.append(_deleted(store, select)))
        worker.start()
        waits = (
            "SELECT count(*) FROM pg_locks WHERE locktype = 'tuple' AND relation = "
            "'runs'::regclass AND pid <> pg_backend_pid()"
        )
        deadline = time.monotonic() + 60
        while not conn.execute(text(waits)).scalar() and time.monotonic() < deadline:
            time.sleep(0.01)  # the delete waits on the row this transaction holds
        conn.commit()
    worker.join(60)
    other.dispose()
    assert done == [[str(pseudo)]] and not pseudo.exists()
    _closed(store)


def _deleted(store: RunStore, run_id: int) -> object:
    try:
        return store.delete_runs([run_id]).removed
    except Exception as e:  # said by the test's assert
        return e


def test_a_project_moved_whole_reads_its_runs_data_root_where_it_is_now(tmp_path: Path) -> None:
    old, new = tmp_path / "w", tmp_path / "w2"
    old.mkdir()
    store = RunStore.open(str(old / "dlperf.db"))
    pseudo = pseudo_labels(store, old / "dlperf_runs")
    pretrain = store.create_run("d-pretrain-k10", "run", {"data": {"root": str(pseudo)}})
    elsewhere = store.create_run("r", "run", {"data": {"root": str(tmp_path / "gone.npz")}})
    _closed(store)
    old.rename(new)
    moved = RunStore.open(str(new / "dlperf.db"), create=False)
    now = new / pseudo.relative_to(old)
    assert moved.get_run(pretrain).config == {"data": {"root": str(now)}}
    assert moved.get_run(elsewhere).config == {"data": {"root": str(tmp_path / "gone.npz")}}
    assert [r.config for r in moved.list_runs()] == [  # newest first; report's run pages
        moved.get_run(elsewhere).config,
        moved.get_run(pretrain).config,
    ]
    _closed(moved)


def test_deleting_a_checkpoint_another_run_starts_from_by_its_path_names_it(
    tmp_path: Path,
) -> None:
    store = RunStore.open(str(tmp_path / "dlperf.db"))
    pretrain = store.create_run("pre", "run", {})
    checkpoint = store.artifact_dir(tmp_path / "dlperf_runs") / f"run-{pretrain}" / "checkpoint.pt"
    store.add_artifact(pretrain, "checkpoint", checkpoint)
    config = {"model": {"weights": str(checkpoint)}}
    finetune = store.create_run("ft", "run", config)
    assert store.delete_runs([pretrain]).notes == [
        f"run {finetune} starts from run {pretrain}'s weights (model.weights = {checkpoint}), "
        "which are deleted now"
    ]
    _closed(store)


def test_an_option_of_dlperf_after_the_command_without_its_value(
    cli: Callable[..., CliResult],
) -> None:
    said = cli("runs", "show", "1", "--db")
    assert (said.code, said.out) == (2, "")
    assert said.err == (
        "error: --db goes before the command: dlperf --db DB runs show 1 (or set DLPERF_DB)\n"
    )


def test_only_a_studys_own_directory_is_taken_as_one(tmp_path: Path) -> None:
    root = tmp_path / "dlperf_runs" / "0123abcd"
    inner, study = root / "mine" / "study-1", root / "study-1"
    for folder in (inner, study):
        folder.mkdir(parents=True)
        (folder / "f.png").write_bytes(b"png")
    removed: list[str] = []
    kept: list[tuple[str, str]] = []
    for target in (inner, study):
        _take(1, target, root, {root.name}, removed, kept)
    assert kept == [(str(inner), "a directory the run does not own")] and inner.is_dir()
    assert removed == [str(study)] and not study.exists()


def test_a_studys_directory_kept_for_a_file_goes_with_that_file(tmp_path: Path) -> None:
    store = RunStore.open(str(tmp_path / "dlperf.db"))
    study = store.create_study("d", "distill")
    config = {"run": {"out_dir": str(tmp_path / "dlperf_runs")}}
    select = store.create_run("d-select-k10", "select", config, study_id=study)
    folder = store.artifact_dir(tmp_path / "dlperf_runs") / f"study-{study}"
    folder.mkdir(parents=True)
    (folder / "distill.png").write_bytes(b"png")
    pseudo = folder / "pseudo-0.npz"
    pseudo.write_bytes(b"images")
    store.add_artifact(select, "pseudo-labels", pseudo)
    user = store.create_run("mine", "run", {**config, "data": {"root": str(pseudo)}})
    for run_id in (select, user):
        store.finish_run(run_id)
    assert store.delete_runs([select]).removed == [] and pseudo.is_file()
    assert store.delete_runs([user]).removed == [str(folder)] and not folder.exists()
    _closed(store)
