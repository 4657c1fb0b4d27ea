"""Break-it round 28, fix task C2: the run store, second part (P3 and P4 reports).

P4-5. The working directory deleted while a run recorded into the default ./dlperf.db: a vague
      "No such file or directory" and an atexit traceback (the store's relative path resolved
      against the deleted directory). One line, exit 1, nothing at exit.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

import dlperf
from dlperf.errors import StoreGone
from dlperf.store import integrity, runstore

# P4-5


def test_the_working_directory_deleted_mid_run_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: FileNotFoundError from integrity.store_file at the next write and at exit."""
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    monkeypatch.delenv("DLPERF_DB", raising=False)
    with pytest.raises(StoreGone) as raised, dlperf.track("x", config={}) as r:
        r.log(1, loss=1.0)
        engine = r._store.engine
        shutil.rmtree(os.getcwd())
        r.log(2, loss=0.5)
    assert raised.value.exit_code == 1
    assert str(raised.value.message) == (
        f"run store {gone}/dlperf.db was deleted or replaced with the working directory that "
        "held it while run 1 was recording; nothing was saved"
    )
    assert integrity.store_file(engine) == gone / "dlperf.db"
    runstore._close(engine)  # what the atexit hook does: no FileNotFoundError
