"""Break-it round 59, fixer G10: a store path past SQLite's length limit, and a leading ~ in
three path options.

T2 C2. A SQLite store whose full path was longer than SQLite allows (the unix VFS's 512-byte
mxPathname, less the 8 of the "-journal" name it must be able to form: 504 bytes), in a
writable folder, was told "unable to open database file (SQLite writes -wal and -shm files
beside the store: is its directory writable? ...)", blaming permissions that were fine. Now
the store path is refused in one line naming its length and the limit, with the fix (a
shorter path: SQLite resolves links and relative names to the full path, so neither helps);
a path at the limit opens.

T2 C3. `report --out '~/rep'`, `runs export --to tensorboard --out '~/tb'` and
`--set run.out_dir=~/od` took the ~ literally (a folder named ~ in the working directory, or
"cannot use ~/rep0: No such file or directory"), where every other path option and config key
(--db, data.root, model.name, `runs plot --out`) is the home folder. Now these are too: the
two options are Typer paths that `cli.app._expand_home` expands, and run.out_dir is expanded
as the config is read, as data.root is.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from dlperf.config.experiment import Experiment
from dlperf.errors import UserError
from dlperf.store import RunStore
from tests.conftest import CliResult

Cli = Callable[..., CliResult]

LIMIT = 504  # SQLite's mxPathname (512) less len("-journal")


def long_path(root: Path, length: int) -> Path:
    """A store path of exactly `length` bytes under `root`, its folders made (each name well
    under NAME_MAX)."""
    folder = root.resolve()
    while length - len(str(folder)) - 1 > 200:
        folder = folder / ("d" * 150)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / ("s" * (length - len(str(folder)) - 1))
    assert len(os.fsencode(path)) == length
    return path


# --- C2: a store path past SQLite's limit -------------------------------------------------------


def test_a_store_path_past_sqlites_limit_is_refused_naming_the_limit(tmp_path: Path) -> None:
    path = long_path(tmp_path, LIMIT + 1)
    with pytest.raises(UserError) as caught:
        RunStore.open(str(path))
    said = str(caught.value)
    assert f"is {LIMIT + 1} bytes, longer than the {LIMIT} SQLite can open" in said, said
    assert "writable" not in said
    assert not path.exists()  # refused before SQLite made anything


def test_a_store_moved_to_a_long_path_is_refused_in_one_line(cli: Cli, db: str) -> None:
    store = Path(db.removeprefix("sqlite:///"))
    RunStore.open(db).engine.dispose()
    path = long_path(store.parent, 630)
    store.rename(path)  # mv has no such limit: the store is there, and SQLite cannot open it
    result = cli("--db", str(path), "runs", "list")
    assert result.code == 2, result
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and "630 bytes" in lines[0] and "writable" not in lines[0], result.err


def test_a_relative_store_path_counts_its_full_length(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = long_path(tmp_path, 600)
    monkeypatch.chdir(path.parent)
    with pytest.raises(UserError, match="600 bytes"):
        RunStore.open(path.name)


def test_a_store_path_at_the_limit_opens(tmp_path: Path) -> None:
    path = long_path(tmp_path, LIMIT)
    store = RunStore.open(str(path))
    run_id = store.create_run("r", "train", {})
    store.finish_run(run_id)
    store.engine.dispose()
    assert RunStore.open(str(path)).get_run(run_id).name == "r"


# --- C3: a leading ~ in report --out, runs export --out, run.out_dir --------------------------


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """$HOME a folder of its own, the working directory another, where no ./~ may appear."""
    home = tmp_path / "home"
    home.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    return home


@pytest.fixture
def run_id(db: str) -> int:
    store = RunStore.open(db)
    run_id = store.create_run("r", "train", {})
    store.finish_run(run_id)
    store.engine.dispose()
    return run_id


def test_report_out_expands_home(cli: Cli, home: Path, run_id: int) -> None:
    # Was "cannot use ~/rep: No such file or directory", $HOME there; or a site in ./~/rep
    result = cli("report", str(run_id), "--out", "~/rep")
    assert result.code == 0, result.err
    assert (home / "rep" / "index.html").is_file()
    assert not Path("~").exists()


def test_report_out_blank_is_still_refused(cli: Cli, home: Path, run_id: int) -> None:
    result = cli("report", str(run_id), "--out", " ")
    assert result.code == 2
    assert "report writes its site into a directory" in result.err, result.err


def test_runs_export_tensorboard_out_expands_home(cli: Cli, home: Path, run_id: int) -> None:
    pytest.importorskip("torch.utils.tensorboard", reason="the tensorboard extra")
    result = cli("runs", "export", str(run_id), "--to", "tensorboard", "--out", "~/tb")
    assert result.code == 0, result.err
    assert [p.name for p in (home / "tb").iterdir()] == [f"run-{run_id}-r"]
    assert not Path("~").exists()


def test_runs_export_tensorboard_blank_out_is_still_refused(
    cli: Cli, home: Path, run_id: int
) -> None:
    result = cli("runs", "export", str(run_id), "--to", "tensorboard", "--out", "")
    assert result.code == 2
    assert "TensorBoard's event files" in result.err, result.err


def test_run_out_dir_expands_home(home: Path) -> None:
    exp = Experiment.model_validate({"run": {"out_dir": "~/od"}})
    assert exp.run.out_dir == str(home / "od")
