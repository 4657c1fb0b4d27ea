"""Break-it round 20, fix task RD: store copies' messages and odd kinds.

1. Deleting, in a copy of a copy, a run the first copy made said its file was kept because
   the store is a copy of the original, whose run it is not: the first copy's (its own
   directory's) is. A repaired copy lost which copy's directory it carried, and said the same.
2. A project moved (that then claimed its home) and copied whole (`cp -r`): deleting a run in
   the copy said only "deleted", the run's file left beside it without a word.
3. `runs repair` to a name that is not UTF-8 named the hidden file it stages, not the target.
4. A run of no kind (the API's create_run(name, "")) broke `export` and `model.weights=run:N`
   with an IndexError traceback.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from dlperf.errors import UserError
from dlperf.store import RunStore, repair
from tests.conftest import CliResult
from tests.faults.test_break_it_4_store import _closed, _run_with_checkpoint
from tests.faults.test_break_it_19_copies import _new_run
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]

# 1


def _copy_of_a_copy(tmp_path: Path) -> tuple[Path, Path, int, Path]:
    """orig.db with run 1; copy1.db, its copy, with run 2 in its own directory."""
    out = tmp_path / "out"
    original, copy = tmp_path / "orig.db", tmp_path / "copy1.db"
    _run_with_checkpoint(original, out)
    shutil.copyfile(original, copy)
    in_copy = RunStore.open(str(copy))
    run_id, checkpoint = _new_run(in_copy, out)
    _closed(in_copy)
    return original, copy, run_id, checkpoint


def test_a_copy_of_a_copy_names_the_copy_whose_run_it_keeps(tmp_path: Path) -> None:
    _, copy, run_id, checkpoint = _copy_of_a_copy(tmp_path)
    second = tmp_path / "copy2.db"
    shutil.copyfile(copy, second)
    deleted = RunStore.open(str(second)).delete_runs([run_id])
    assert deleted.removed == [] and checkpoint.exists()
    assert deleted.kept == [
        (str(checkpoint), f"this store is a copy of {copy}, whose run it is too")
    ]


def test_a_repaired_copy_of_a_copy_names_the_copy_whose_run_it_keeps(tmp_path: Path) -> None:
    _, copy, run_id, checkpoint = _copy_of_a_copy(tmp_path)
    repaired = tmp_path / "r" / "rep4.db"
    repaired.parent.mkdir()
    repair(str(copy), str(repaired))
    deleted = RunStore.open(str(repaired)).delete_runs([run_id])
    assert deleted.removed == [] and checkpoint.exists()
    assert deleted.kept == [
        (str(checkpoint), f"this store is a copy of {copy}, whose run it is too")
    ]


def test_a_repaired_copy_moved_in_place_of_the_copy_owns_its_run(tmp_path: Path) -> None:
    _, copy, run_id, checkpoint = _copy_of_a_copy(tmp_path)
    repaired = tmp_path / "rep.db"
    repair(str(copy), str(repaired))
    copy.rename(tmp_path / "copy1.db.bad")
    repaired.rename(copy)
    deleted = RunStore.open(str(copy)).delete_runs([run_id])
    assert deleted.removed == [str(checkpoint.parent)] and not checkpoint.exists()


# 2


def test_a_moved_project_copied_whole_names_the_file_it_keeps(tmp_path: Path) -> None:
    w, w2, w3 = tmp_path / "w", tmp_path / "w2", tmp_path / "w3"
    w.mkdir()
    store = RunStore.open(str(w / "dlperf.db"))
    first, _ = _new_run(store, w / "dlperf_runs")
    second, checkpoint = _new_run(store, w / "dlperf_runs")
    _closed(store)
    w.rename(w2)
    in_w2 = RunStore.open(str(w2 / "dlperf.db"))
    assert in_w2.delete_runs([first]).kept == []  # w2 claims its home
    _closed(in_w2)
    shutil.copytree(w2, w3)
    deleted = RunStore.open(str(w3 / "dlperf.db")).delete_runs([second])
    left = w3 / checkpoint.relative_to(w)
    assert deleted.removed == [] and left.exists()
    assert deleted.kept == [
        (str(left), f"this store is a copy of {w2 / 'dlperf.db'}, whose run it is too")
    ]


# 3


def test_repair_to_a_name_not_utf8_names_it(tmp_path: Path) -> None:
    source = tmp_path / "ok.db"
    _run_with_checkpoint(source, tmp_path / "out")
    target = os.fsdecode(bytes(tmp_path) + b"/r\xff.db")
    with pytest.raises(UserError) as e:
        repair(str(source), target)
    assert "r\\xff.db" in str(e.value) and "repairing" not in str(e.value)
    assert sorted(os.listdir(tmp_path)) == [
        "ok.db",
        "out",
    ]


# 4


def _run_of_no_kind(store: RunStore) -> int:
    run_id = store.create_run("x", "", {})
    store.finish_run(run_id)
    return run_id


def test_export_of_a_run_of_no_kind_says_it_has_no_model(cli: Cli, store: RunStore) -> None:
    run_id = _run_of_no_kind(store)
    one_line(
        cli("export", str(run_id), "--out", "m.onnx"),
        2,
        f"error: run {run_id} is a run of no kind: it has no model to export",
    )


def test_weights_from_a_run_of_no_kind_say_it_has_no_model(
    cli: Cli, store: RunStore, tiny_exp: Callable[..., Path]
) -> None:
    run_id = _run_of_no_kind(store)
    result = cli("run", str(tiny_exp(1)), "--set", f"model.weights=run:{run_id}")
    one_line(result, 2, f"run {run_id} is a run of no kind: it has no model to start from")
