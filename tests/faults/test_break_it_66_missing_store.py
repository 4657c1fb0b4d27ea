"""Break-it round 66, Z2 cause C: `report` and `doctor` without run ids at a store not there.

Before: `report --out DIR`, `doctor` and `doctor --last N` at a --db path that does not exist
(a typo) said "the run store holds no runs (train one: dlperf run EXP.toml)", exit 2: no path,
as if the store were there and empty, pointing at training; `report 1`, `runs show 1` and the
other readers say the store does not exist and how to give it. Now they say that line too
(`run store PATH does not exist`, `is an empty file`), and "holds no runs" is left to a store
that is there with no run in it. Nothing is written: no store, no site. `--study N` at such a
path said "no study N in the store"; it says the store is not there too.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from dlperf.store import RunStore
from tests.conftest import CliResult

Cli = Callable[..., CliResult]

HOW = "(give the store with --db or DLPERF_DB (by default: ./dlperf.db, in the current directory))"
COMMANDS = [("report", "--out", "site"), ("doctor",), ("doctor", "--last", "3")]


@pytest.mark.parametrize("command", COMMANDS)
def test_a_store_not_there_is_said_with_its_path(
    command: tuple[str, ...], cli: Cli, tmp_path: Path
) -> None:
    """Was "the run store holds no runs (train one: dlperf run EXP.toml)"."""
    typo = tmp_path / "typo.db"
    result = cli("--db", str(typo), *command)
    assert (result.code, result.out) == (2, ""), result.err
    assert result.err == f"error: run store {typo} does not exist {HOW}\n"
    assert not typo.exists() and not (tmp_path / "site").exists()


@pytest.mark.parametrize("command", [("report", "--out", "site"), ("doctor",)])
def test_a_study_of_a_store_not_there_is_said_with_its_path(
    command: tuple[str, ...], cli: Cli, tmp_path: Path
) -> None:
    typo = tmp_path / "typo.db"
    result = cli("--db", str(typo), *command, "--study", "3")
    assert (result.code, result.out) == (2, ""), result.err
    assert result.err == f"error: no study 3: run store {typo} does not exist {HOW}\n"
    assert not typo.exists() and not (tmp_path / "site").exists()


@pytest.mark.parametrize("command", COMMANDS)
def test_an_empty_file_is_said_so(command: tuple[str, ...], cli: Cli, tmp_path: Path) -> None:
    empty = tmp_path / "empty.db"
    empty.touch()
    result = cli("--db", str(empty), *command)
    assert result.code == 2, result.err
    assert result.err == f"error: run store {empty} is an empty file {HOW}\n"
    assert empty.stat().st_size == 0


def test_a_path_ending_with_a_space_is_said_once(cli: Cli, tmp_path: Path) -> None:
    """doctor warned of the space, then said the store holds no runs."""
    given = f"{tmp_path}/f5.db "
    result = cli("--db", given, "doctor")
    assert result.code == 2, result.err
    assert result.err == (
        f"error: run store '{given}' does not exist: its path ends with a space {HOW}\n"
    )


@pytest.mark.parametrize("command", COMMANDS)
def test_a_store_that_is_there_without_runs_still_holds_no_runs(
    command: tuple[str, ...], cli: Cli, store: RunStore
) -> None:
    result = cli(*command)
    assert result.code == 2, result.err
    assert result.err == "error: the run store holds no runs (train one: dlperf run EXP.toml)\n"
