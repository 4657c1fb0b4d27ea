"""Break-it round 28 (P3), causes C5, C6 and C9: exports into places that are not theirs, and
a sweep's message.

C5. `runs export --to mlflow --uri` naming another program's database (tables, none of them
    MLflow's alembic_version) made MLflow's 60 tables in it, then failed on the other
    program's `experiments`. Now refused in one line before anything is written.
C6. A TensorBoard export of another store's run 1 into the --out of this store's run 1 (both
    `run-1-Alpha`) replaced the earlier export's event files, exit 0, no word. Each run
    directory now says which store its events came from (`.dlperf-store`), and an export of
    another store's run into it is refused before anything is written.
C9. A sweep whose only axis is `run.log_every` (left out of the config hash, as run.name,
    run.out_dir and run.profile are) was told "the same config as point 1 (an axis repeats a
    value...)". Now it says the key does not change what is trained.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect, text

from dlperf.store import RunStore
from dlperf.sweep import load_sweep
from tests.conftest import CliResult, fresh_store_url
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]


def _alpha(url: str) -> None:
    """Run 1, "Alpha", with two loss points, in the store at `url`."""
    store = RunStore.open(url)
    run_id = store.create_run("Alpha", "run", {"lr": 0.1})
    assert run_id == 1
    store.log_metrics(run_id, [("train/loss", s, 1.0 / s) for s in (1, 2)])
    store.finish_run(run_id, "finished")
    store.engine.dispose()


# --- C5: another program's database is not MLflow's ---------------------------------------


@pytest.fixture(params=["sqlite", "postgresql"])
def foreign_db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The URL of a database of another program: a table `experiments`, one row."""
    for url in fresh_store_url(request.param, tmp_path, "other"):
        engine = create_engine(url)
        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE experiments (id INTEGER PRIMARY KEY, name TEXT)"))
            conn.execute(text("INSERT INTO experiments VALUES (1, 'x')"))
        engine.dispose()
        yield url


def _tables(url: str) -> set[str]:
    engine = create_engine(url)
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_an_mlflow_export_into_another_programs_database_is_refused_before_writing(
    cli: Cli, db: str, foreign_db: str
) -> None:
    """Before: MLflow's alembic_version, runs, metrics, ... made in it, then "no such column:
    experiments.experiment_id", exit 2."""
    pytest.importorskip("mlflow", reason="the mlflow extra (pip install 'dlperf[mlflow]')")
    _alpha(db)
    result = cli("runs", "export", "1", "--to", "mlflow", "--uri", foreign_db)
    one_line(
        result,
        2,
        ": --uri names a database that is not MLflow's (tables experiments, but no "
        "alembic_version); MLflow would write its tables among them (give MLflow a database "
        "of its own, e.g. --uri sqlite:///mlflow.db)",
    )
    assert _tables(foreign_db) == {"experiments"}


@pytest.mark.faults  # MLflow makes its 60 tables: about 10 s on a busy machine
def test_an_mlflow_export_into_an_empty_file_still_makes_its_store(
    cli: Cli, db: str, tmp_path: Path
) -> None:
    """A file with no tables yet (`touch mlflow.db`) is not another program's."""
    pytest.importorskip("mlflow", reason="the mlflow extra (pip install 'dlperf[mlflow]')")
    _alpha(db)
    (tmp_path / "mlflow.db").touch()
    result = cli(
        "runs", "export", "1", "--to", "mlflow", "--uri", f"sqlite:///{tmp_path}/mlflow.db"
    )
    assert result.code == 0, result.err
    with closing(sqlite3.connect(tmp_path / "mlflow.db")) as conn:
        assert conn.execute("SELECT name FROM runs").fetchall() == [("Alpha",)]


# --- C6: another store's run is not exported over this store's -----------------------------


def _events(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in directory.iterdir()}


def test_a_tensorboard_export_of_another_stores_run_keeps_the_earlier_one(
    cli: Cli, db: str, tmp_path: Path
) -> None:
    """Before: exit 0, tbx/run-1-Alpha's event file replaced by the other store's."""
    pytest.importorskip("tensorboard", reason="the tensorboard extra is not installed")
    other = f"sqlite:///{tmp_path / 'other.db'}"
    _alpha(db)
    _alpha(other)
    out = tmp_path / "tbx"
    first = cli("runs", "export", "1", "--to", "tensorboard", "--out", str(out))
    assert first.code == 0, first.err
    directory = out / "run-1-Alpha"
    before = _events(directory)

    clash = cli("--db", other, "runs", "export", "1", "--to", "tensorboard", "--out", str(out))
    ours = RunStore.open(db).id
    one_line(
        clash,
        2,
        f"error: {directory} holds the events of run 1 of another store ({ours}); nothing was "
        "exported (give each store its own --out (tensorboard --logdir takes their parent), "
        f"or remove {directory} to replace it)",
    )
    assert _events(directory) == before
    assert sorted(p.name for p in out.iterdir()) == ["run-1-Alpha"]

    # This store's export again still replaces its own; the other store goes beside it.
    again = cli("runs", "export", "1", "--to", "tensorboard", "--out", str(out))
    assert again.code == 0, again.err
    assert _events(directory).keys() != before.keys()
    beside = cli("--db", other, "runs", "export", "1", "--to", "tensorboard", "--out", f"{out}/b")
    assert beside.code == 0, beside.err


# --- C9: a sweep over a key the config hash leaves out -------------------------------------


@pytest.mark.parametrize(
    ("key", "values"),
    [
        ("run.log_every", "[7, 3, 5]"),
        ("run.out_dir", '["a", "b"]'),
        ("run.profile.active", "[2, 4]"),
    ],
)
def test_a_sweep_over_a_key_that_changes_nothing_trained_says_so(
    tmp_path: Path, tiny_exp: Callable[..., Path], key: str, values: str
) -> None:
    """Before: "point 2 (run.log_every=3): the same config as point 1 (an axis repeats a
    value, or sets what [set] or the base already does)"."""
    from dlperf.errors import UserError

    tiny_exp()
    sweep = tmp_path / "sw2.toml"
    sweep.write_text(f'base = "tiny.toml"\n[grid]\n"train.lr" = [0.1, 0.01]\n"{key}" = {values}\n')
    with pytest.raises(UserError) as raised:
        load_sweep(sweep)
    assert str(raised.value) == (
        f"{sweep}: {key} does not change what is trained (sweep a key that does)"
    )


def test_such_a_key_may_still_vary_beside_one_that_does(
    tmp_path: Path, tiny_exp: Callable[..., Path]
) -> None:
    """Zipped with train.lr, every point trains something else: the sweep is made."""
    tiny_exp()
    sweep = tmp_path / "sw.toml"
    sweep.write_text(
        'base = "tiny.toml"\n[zip]\n"train.lr" = [0.1, 0.01]\n"run.log_every" = [7, 3]\n'
    )
    points = load_sweep(sweep).points
    assert [p.exp.run.log_every for p in points] == [7, 3]
