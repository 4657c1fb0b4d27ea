"""The ninth break-it round (issue 41) on sweeps and reading the store: a sweep file's numbers
taken from a bool or a quoted number, `--where` keys accepted and then read nowhere, `--last`
past the integer range, and a sweep name whose points' run names do not fit the store.

`max_points = true` ran (read as 1), `max_points = "4"` and `repeats = true` ran, where every
experiment section refuses them. `--where s=one` of a tracked run whose config holds `s` listed
nothing, exit 0 (a key without a dot was read from the summary only, though the check took it
as a config key), and `--where o.w=null` matched no stored None. `report --last` and `doctor
--last` of 99999999999999999999 were SQLite's OverflowError as a traceback. A sweep named with
190 characters started its first point and failed it on the run's name, 203 characters, with
"give a shorter run.name" (the user never set one), a study of 0 runs left in the store.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import dlperf
from dlperf.errors import UserError
from dlperf.store import RunStore
from dlperf.sweep import load_sweep
from tests.conftest import CliResult, fresh_store_url

Cli = Callable[..., CliResult]

BASE = """
[model]
name = "smallcnn"
[data]
name = "digits"
limit = 200
[train]
epochs = 1
batch_size = 32
lr = 0.05
[run]
threads = 1
checkpoint = false
out_dir = "{out}"
"""


def write_sweep(root: Path, head: str, grid: str = '"train.lr" = [0.1]') -> Path:
    (root / "base.toml").write_text(BASE.format(out=root / "runs"))
    path = root / "sw.toml"
    path.write_text(f'base = "base.toml"\n{head}\n[grid]\n{grid}\n', encoding="utf-8")
    return path


def one_line(result: CliResult, code: int, said: str) -> None:
    assert result.code == code, (result.code, result.out, result.err)
    assert "Traceback" not in result.err, result.err
    err = " ".join(result.err.split())  # the console wraps the line at its width
    assert said in err, result.err


# --- a sweep file's numbers are strict ------------------------------------------------------


@pytest.mark.parametrize(
    ("head", "said"),
    [
        ("max_points = true", "max_points: Input should be a valid integer (got True)"),
        ('max_points = "4"', "max_points: Input should be a valid integer (got '4')"),
        ("repeats = true", "repeats: Input should be a valid integer (got True)"),
        ('repeats = "2"', "repeats: Input should be a valid integer (got '2')"),
    ],
)
def test_a_sweep_file_takes_no_bool_or_quoted_number_for_a_number(
    head: str, said: str, tmp_path: Path
) -> None:
    path = write_sweep(tmp_path, head)
    with pytest.raises(UserError) as caught:
        load_sweep(path)
    assert str(caught.value) == f"{path}: {said}"


def test_a_sweep_file_still_takes_its_numbers(tmp_path: Path) -> None:
    sweep = load_sweep(write_sweep(tmp_path, "max_points = 4\nrepeats = 2"))
    assert [p.seed for p in sweep.points] == [0, 1]


def test_the_sweep_command_refuses_a_bool_max_points_and_stores_nothing(
    cli: Cli, tmp_path: Path
) -> None:
    result = cli("sweep", str(write_sweep(tmp_path, "max_points = true")))
    one_line(result, 2, "max_points: Input should be a valid integer (got True)")
    assert not (tmp_path / "dlperf.db").exists()


# --- --where reads a key where the check found it, and null matches None --------------------


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from fresh_store_url(request.param, tmp_path, "bk9w")


def listed(cli: Cli, url: str, *where: str) -> list[str]:
    args = [arg for w in where for arg in ("--where", w)]
    result = cli("--db", url, "runs", "list", *args, "--json")
    assert result.code == 0, result.err
    return sorted(run["name"] for run in json.loads(result.out))


@pytest.fixture
def tracked(store_url: str) -> Iterator[str]:
    """Tracked runs whose configs hold keys without a dot and a None, and a run with a
    summary key (as `dlperf run` stores them), in a store of either backend."""
    for name, config in (
        ("a", {"s": "one", "o": {"w": None}, "n": None}),
        ("b", {"s": "two", "o": {"w": "x"}, "n": 3}),
    ):
        with dlperf.track(name, config=config, store=store_url) as run:
            run.log(1, loss=1.0)
    store = RunStore.open(store_url)
    try:
        config = {"s": "one", "model": {"name": "smallcnn", "weights": None}}
        with store.new_run("c", "run", config) as record:
            record.summary = {"test_accuracy": 0.5}
    finally:
        store.engine.dispose()
    yield store_url


@pytest.mark.parametrize(
    ("where", "names"),
    [
        (["s=one"], ["a", "c"]),  # listed nothing: read from the summary only
        (["s=two"], ["b"]),
        (["o.w=null"], ["a"]),  # listed nothing: "null" is not None
        (["n=null"], ["a"]),
        (["n=3"], ["b"]),
        (["o.w=x"], ["b"]),
        (["s=one", "o.w=null"], ["a"]),
        (["s=three"], []),
        # a dlperf run's model.weights is None unless set: matched no run
        (["model.weights=null"], ["c"]),
        (["test_accuracy=0.5"], ["c"]),  # a summary key without a dot, read as before
        (["s=one", "test_accuracy=0.5"], ["c"]),
    ],
)
def test_where_reads_a_config_key_without_a_dot_and_matches_null(
    where: list[str], names: list[str], tracked: str, cli: Cli
) -> None:
    assert listed(cli, tracked, *where) == names


# --- --last past the integer range ----------------------------------------------------------


@pytest.mark.parametrize("command", ["report", "doctor"])
@pytest.mark.parametrize("last", ["99999999999999999999", "2147483648"])
def test_last_past_the_integer_range_is_one_line(
    command: str, last: str, cli: Cli, db: str, tmp_path: Path
) -> None:
    with dlperf.track("a", config={"s": "one"}, store=db) as run:
        run.log(1, loss=1.0)
    args = ["--out", str(tmp_path / "site")] if command == "report" else []
    result = cli(command, "--last", last, *args)
    one_line(result, 2, f"error: --last must be at most 2147483647, got {last}")
    assert result.err.count("\n") == 1
    assert not (tmp_path / "site").exists()


def test_last_at_the_integer_range_still_reads_every_run(cli: Cli, db: str, tmp_path: Path) -> None:
    with dlperf.track("a", config={"s": "one"}, store=db) as run:
        run.log(1, loss=1.0)
    result = cli("doctor", "--last", "2147483647", "--json")
    assert result.code == 0, result.err
    assert json.loads(result.out)["runs"] == [1]


# --- a sweep name that makes run names too long ---------------------------------------------

LONG = (
    ("s" * 190, "train.lr=0.1", 203),
    ("\N{ROCKET}" * 200, "train.lr=0.1", 213),
)


@pytest.mark.parametrize(("name", "label", "length"), LONG)
def test_a_sweep_name_that_makes_run_names_too_long_is_refused_up_front(
    name: str, label: str, length: int, tmp_path: Path
) -> None:
    path = write_sweep(tmp_path, f'name = "{name}"')
    with pytest.raises(UserError) as caught:
        load_sweep(path)
    assert str(caught.value) == (
        f"{path}: sweep name of {len(name)} characters + point label {label!r} makes run "
        f"names of {length} characters; the run store keeps at most 200 "
        "(give a sweep name of at most 187 characters)"
    )


def test_the_longest_point_label_is_the_one_told(tmp_path: Path) -> None:
    grid = '"train.lr" = [0.1, 0.0001]'
    with pytest.raises(UserError, match=re.escape("'train.lr=0.0001' makes run names of 206 char")):
        load_sweep(write_sweep(tmp_path, f'name = "{"s" * 190}"', grid))
    sweep = load_sweep(write_sweep(tmp_path, f'name = "{"s" * 184}"', grid))
    assert max(len(p.exp.run.name or "") for p in sweep.points) == 200  # 184 + 1 + 15 fits


@pytest.mark.parametrize(("name", "label", "length"), LONG)
def test_the_sweep_command_leaves_no_study_for_a_too_long_name(
    name: str, label: str, length: int, cli: Cli, tmp_path: Path
) -> None:
    result = cli("sweep", str(write_sweep(tmp_path, f'name = "{name}"')))
    one_line(result, 2, f"makes run names of {length} characters; the run store keeps at most 200")
    assert "point 1/1" not in result.err
    assert not (tmp_path / "dlperf.db").exists()
