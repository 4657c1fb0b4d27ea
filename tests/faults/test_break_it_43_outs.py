"""Break-it round 43, fixer F6: output paths checked before the work, a job file written
whole, a run given twice to `runs compare` refused.

F1 1 (found by round 43's fixer F1). `scale --emit KIND --out FIFO` wrote the job file with
Path.write_text, past paths.check_writable: with no reader it waited for ever, without a
word; a missing folder or a directory was said only after the study file was read. Now
jobfiles.check_job_options checks --out (one line, exit 2) before the study is read, and the
file is written through paths.atomic_write: a stop during the write leaves an earlier job
file as it was, not cut.
F1 2. `runs compare 1 1 2` showed runs 1 and 2, dropping the repeat without a word (`compare
1 1` refused, `runs plot 1 1 2` refuses since round 43). Now store.query.compare refuses any
run given more than once, in one line: "runs compare shows each run once, got run 1 twice".
F1 3. `export N --out BAD` (a FIFO, a missing folder, a directory) was refused only after
torch's import and the model's load and checks (20 s on a busy machine). Now
dlperf.deploy.check_out refuses it first, before torch is imported.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dlperf import paths
from dlperf.errors import UserError
from dlperf.store import RunStore
from dlperf.store.query import compare
from tests.conftest import REPO, CliResult
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]
EXP = str(REPO / "examples" / "scale_digits_weak.toml")
EARLIER = "#!/bin/bash\n# an earlier job file, whole\n"
# A regression waits for a reader for ever: the timeout fails it instead of hanging the suite.
FIFO_TIMEOUT = pytest.mark.timeout(120)


def _bad_out(kind: str, tmp_path: Path) -> tuple[Path, str]:
    """An output path that cannot be written, and what its refusal says."""
    if kind == "fifo":
        os.mkfifo(tmp_path / "fifo.out")
        return tmp_path / "fifo.out", "is not a regular file (a FIFO)"
    if kind == "missing folder":
        return tmp_path / "nodir" / "job.out", "No such file or directory"
    (tmp_path / "folder").mkdir()
    return tmp_path / "folder", "Is a directory"


BAD_OUTS = pytest.mark.parametrize("kind", ["fifo", "missing folder", "directory"])


def _never(what: str) -> Callable[..., Any]:
    def called(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"{what} before --out was checked")

    return called


# --- F1 1: scale --emit --out -------------------------------------------------------------------


@FIFO_TIMEOUT
@BAD_OUTS
def test_scale_emit_refuses_a_bad_out_before_the_study_is_read(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """Before: a FIFO hung for ever; a folder was refused after the study was loaded."""
    out, said = _bad_out(kind, tmp_path)
    monkeypatch.setattr("dlperf.distributed.planning.load_study", _never("the study was read"))
    r = cli("scale", EXP, "--workers", "1,2", "--emit", "slurm", "--out", str(out))
    one_line(r, 2, str(out), said)


def test_a_stop_during_the_job_file_write_keeps_the_earlier_file(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: Path.write_text wrote onto the user's file, and a stop left it cut."""
    job = tmp_path / "job.sh"
    job.write_text(EARLIER)

    def cut_write_text(path: Path, text: str, *args: Any, **kwargs: Any) -> int:
        with open(path, "w") as f:  # as a stop midway leaves it
            f.write(text[:10])
        raise KeyboardInterrupt

    class CutFile:
        """A file whose write stops midway, as a signal stops it."""

        def __init__(self, *args: Any) -> None:
            self.f = open(*args)  # noqa: SIM115 (closed in __exit__)

        def __enter__(self) -> CutFile:
            return self

        def __exit__(self, *exc: object) -> None:
            self.f.close()

        def write(self, data: bytes) -> int:
            self.f.write(data[:10])
            raise KeyboardInterrupt

    monkeypatch.setattr(Path, "write_text", cut_write_text)
    monkeypatch.setattr(paths, "open", CutFile, raising=False)  # atomic_write's open
    r = cli("scale", EXP, "--workers", "1,2", "--emit", "slurm", "--out", str(job))
    assert r.code != 0
    assert job.read_text() == EARLIER
    assert [p.name for p in tmp_path.iterdir() if p.name != "dlperf.db"] == ["job.sh"]  # no part
    monkeypatch.undo()
    r = cli("scale", EXP, "--workers", "1,2", "--emit", "slurm", "--out", str(job))
    assert r.code == 0, r.err
    assert job.read_text().startswith("#!/bin/bash\n#SBATCH")


# --- F1 2: runs compare 1 1 2 -------------------------------------------------------------------


def _run(store: RunStore) -> int:
    run_id = store.create_run("digits", "run", {})
    store.finish_run(run_id, summary={"steps_per_epoch": 2})
    return run_id


def test_runs_compare_refuses_a_run_given_more_than_once(cli: Cli, store: RunStore) -> None:
    """Before: `compare 1 1 2` compared runs 1 and 2, exit 0, no word of the repeat."""
    a, b = _run(store), _run(store)
    r = cli("runs", "compare", str(a), str(a), str(b))
    one_line(r, 2, f"runs compare shows each run once, got run {a} twice", "give each run ID")
    assert r.out == ""
    one_line(cli("runs", "compare", str(b), str(a), str(b), str(b)), 2, f"run {b} 3 times")
    one_line(cli("runs", "compare", str(a), str(a)), 2, "two or more different runs", "twice")
    with pytest.raises(UserError, match=rf"got run {a} twice"):
        compare(store, [a, b, a])
    assert cli("runs", "compare", str(a), str(b)).code == 0


# --- F1 3: export --out BAD ---------------------------------------------------------------------


@FIFO_TIMEOUT
@BAD_OUTS
def test_export_refuses_a_bad_out_before_the_model_is_loaded(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """Before: the model was built (a run's loaded) and checked, seconds, then refused."""
    out, said = _bad_out(kind, tmp_path)
    monkeypatch.setattr("dlperf.deploy.export.resolve", _never("the model was loaded"))
    one_line(cli("export", "smallcnn", "--out", str(out)), 2, str(out), said)
