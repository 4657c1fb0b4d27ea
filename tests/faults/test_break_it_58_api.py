"""Break-it round 58, fixer G5: the Python API's fit_curve, track and Store (T1's C1, C4, C5
and C6).

C1. `fit_curve(...).predict_step` on fractional steps (epochs every 0.01) rounded the crossing
up to a whole step (1 for epoch 0.0857, 20 for 19.8), where `dlperf converge predict` on the
same points gives the crossing: the fitted steps were not passed on. Now they are, and the API
gives what the command gives.
C4. Entering the same `dlperf.track(...)` object twice (a notebook cell re-run, or nested in
itself) raised contextlib's AttributeError, and nested it stored the outer run `failed` with
that error. Now each entry is a run of its own, the outer one `finished` too.
C5. A store path holding a NUL raised posixpath's "embedded null byte" from deep inside. Now
one line naming the argument (`Store(url=...)`, `track(store=...)`).
C6. A `Store` held across an `rm` of its SQLite file, a new store then made at that path: the
old `Store`'s reads called the new, healthy store "damaged" and advised a restore or a repair
(its pooled connection read the deleted file, whose -wal and -shm the new store took over). Now
a Store that wrote the file says in one line that it was deleted or replaced, and to open a new
Store; one that only read it reads what is at the path now (it read the deleted file's runs).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import dlperf
from dlperf.errors import StoreGone, UserError

# --- C1: predict_step on fractional steps ------------------------------------------------------


def test_predict_step_on_fractional_steps_gives_the_crossing() -> None:
    epoch = np.arange(1, 41) * 0.01
    loss = 1 / (5.0 * epoch + 1) + 0.2  # 0.9 at epoch 0.0857, 0.21 at 19.8
    fit = dlperf.fit_curve(epoch, loss)
    near = fit.predict_step(0.9)
    far = fit.predict_step(0.21)
    assert near["step"] == pytest.approx(0.3 / 3.5, rel=1e-6)
    assert far["step"] == pytest.approx(19.8, rel=1e-6)
    lo, hi = far["interval"]
    assert lo <= far["step"] <= hi and lo != int(lo)


def test_predict_step_on_whole_steps_still_a_whole_step() -> None:
    steps = np.arange(1, 41) * 10.0
    fit = dlperf.fit_curve(steps, 1 / (0.05 * steps + 1) + 0.2)
    assert fit.predict_step(0.21)["step"] == 1980


# --- C4: one track object entered twice -----------------------------------------------------


def test_track_entered_again_is_a_new_run(tmp_path: Path) -> None:
    db = str(tmp_path / "c4.db")
    tr = dlperf.track("cell", store=db)
    with tr as first:
        first.log(1, loss=1.0)
    with tr as again:  # the notebook cell re-run
        again.log(1, loss=0.5)
    assert again.id != first.id
    runs = {r.id: r for r in dlperf.Store(db).runs()}
    assert [runs[i].status for i in (first.id, again.id)] == ["finished", "finished"]
    assert dlperf.Store(db).metrics(again.id, "loss") == [(1, 0.5)]


def test_track_nested_in_itself_leaves_the_outer_run_finished(tmp_path: Path) -> None:
    db = str(tmp_path / "nested.db")
    tr = dlperf.track("nested", store=db)
    with tr as outer:
        with tr as inner:
            inner.log(1, loss=2.0)
        outer.log(1, loss=1.0)
    assert inner.id != outer.id
    runs = {r.id: r for r in dlperf.Store(db).runs()}
    assert runs[outer.id].status == runs[inner.id].status == "finished"
    assert runs[outer.id].error is None
    assert dlperf.Store(db).metrics(outer.id, "loss") == [(1, 1.0)]


def test_track_entered_again_after_a_failure_marks_only_its_own_run(tmp_path: Path) -> None:
    db = str(tmp_path / "fail.db")
    tr = dlperf.track("cell", store=db)
    with pytest.raises(ZeroDivisionError), tr as first:
        1 / 0  # noqa: B018
    with tr as second:
        second.log(1, loss=1.0)
    runs = {r.id: r for r in dlperf.Store(db).runs()}
    assert runs[first.id].status == "failed" and runs[second.id].status == "finished"


# --- C5: a NUL in a store's path ------------------------------------------------------------


def test_store_path_with_a_nul_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError) as made:
        dlperf.Store("runs.db\x00")
    assert "url" in str(made.value) and "NUL" in str(made.value)
    with pytest.raises(UserError) as tracked, dlperf.track("x", store=Path("runs.db\x00x")):
        pass
    assert "store" in str(tracked.value) and "NUL" in str(tracked.value)
    with pytest.raises(UserError, match="NUL"):
        dlperf.Store("sqlite:///runs\x00.db")
    assert os.listdir(tmp_path) == []


# --- C6: a Store whose file was deleted and made again --------------------------------------


def test_store_held_across_rm_says_deleted_not_damaged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    held = dlperf.Store("gone.db")
    with dlperf.track("a", store=held) as run:
        run.log(1, loss=1.0)
    assert [r.id for r in held.runs()] == [run.id]
    Path("gone.db").unlink()  # its -wal and -shm left, as `rm gone.db` leaves them
    with dlperf.track("c", store="gone.db") as new:
        new.log(1, loss=3.0)
    with pytest.raises(StoreGone) as gone:
        held.runs()
    said = str(gone.value)
    assert "deleted or replaced" in said and "damaged" not in said and "\n" not in said
    assert "new dlperf.Store" in (gone.value.hint or "")
    fresh = dlperf.Store("gone.db")
    assert [(r.name, r.status) for r in fresh.runs()] == [("c", "finished")]


def test_reader_store_across_rm_reads_the_new_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A `Store` that only read reads what is at its path now: nothing once the file is
    gone (it read the deleted file's runs), the new store once one is made there."""
    monkeypatch.chdir(tmp_path)
    with dlperf.track("a", store="r.db") as run:
        run.log(1, loss=1.0)
    reader = dlperf.Store("r.db")
    assert [r.name for r in reader.runs()] == ["a"]
    Path("r.db").unlink()
    assert reader.runs() == []
    with dlperf.track("b", store="r.db"):
        pass
    assert [r.name for r in reader.runs()] == ["b"]
