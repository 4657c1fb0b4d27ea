"""The twenty-second break-it round, fxL: an experiment file (or its --set overrides, or a
sweep's points) two of whose keys are one dotted key.

`dlperf.track(config=...)` and `dlperf.run(dict)` refuse `{'a.b': 1, 'a': {'b': 2}}`
(parsing.flat_clash), since `runs list --where`, `runs compare` and the MLflow export name config
keys dotted and would keep one of the two values. An experiment loaded from TOML was not
checked: `"a.b" = 1` beside `a = {b = 2}` (or `a.b = 2`) in [model.kwargs] reached the run,
the sweep, the scaling study, distill and `config show`. It is refused now as the experiment is
loaded, in the API's words with the keys spelled as TOML and --set spell them, one line, exit
2, nothing stored.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest

import dlperf
from dlperf.errors import UserError
from dlperf.sweep import load_sweep
from tests.conftest import CliResult

Cli = Callable[..., CliResult]

# The API's words (api._clash) after the two keys.
SAID = (
    "are one key, model.kwargs.a.b, as runs list --where, runs compare and the MLflow export "
    "name keys: one value would be lost (rename one of them)"
)
QUOTED, NESTED = 'model.kwargs."a.b"', "model.kwargs.a.b"


def experiment(kwargs: str) -> str:
    """A one-thread digits experiment whose [model.kwargs] table is `kwargs`."""
    return f"""
[model]
name = "smallcnn"
[model.kwargs]
{kwargs}
[data]
name = "digits"
limit = 64
[train]
epochs = 1
[run]
threads = 1
"""


def write(tmp_path: Path, name: str, text: str) -> str:
    (tmp_path / name).write_text(text)
    return name  # the tests run in tmp_path (the db fixture): the name as a user types it


SWEEP = 'base = "exp.toml"\n[grid]\n"train.lr" = [0.1, 0.2]\n'


def refused(result: CliResult, tmp_path: Path) -> str:
    """Exit 2, one `error:` line and no traceback, nothing stored; that line."""
    assert result.code == 2, (result.out, result.err)
    lines = result.err.splitlines()
    assert [line for line in lines if line.startswith("error: ")] == lines[-1:], result.err
    assert "Traceback" not in result.err
    assert not (tmp_path / "dlperf.db").exists()  # refused before the store was opened
    return lines[-1]


@pytest.mark.parametrize(
    ("kwargs", "first", "second"),
    [
        ('"a.b" = 1\na = {b = 2}', QUOTED, NESTED),
        ('a = {b = 2}\n"a.b" = 1', NESTED, QUOTED),
        ('"a.b" = 1\na.b = 2', QUOTED, NESTED),
    ],
    ids=["quoted, then a table", "a table, then quoted", "quoted, then dotted"],
)
@pytest.mark.parametrize(
    "command",
    [["run"], ["config", "show"], ["scale"], ["distill"], ["sweep"]],
    ids=lambda c: " ".join(c),
)
def test_an_experiment_file_whose_keys_clash_once_dotted_is_refused(
    cli: Cli, tmp_path: Path, command: list[str], kwargs: str, first: str, second: str
) -> None:
    # before: loaded as given; run/sweep/scale/distill went on to train (and store) it
    exp = write(tmp_path, "exp.toml", experiment(kwargs))
    where = exp
    if command == ["sweep"]:
        exp = write(tmp_path, "sweep.toml", SWEEP)
        where = "sweep.toml: base exp.toml"  # the base's own fault (round 37: point 1's)
    line = refused(cli(*command, exp), tmp_path)
    assert line == f"error: {where}: {first} and {second} {SAID}"


@pytest.mark.parametrize(
    ("kwargs", "sets", "first", "second"),
    [
        ('"a.b" = 1', ["model.kwargs.a.b=2"], QUOTED, NESTED),
        ("a = {b = 2}", ['model.kwargs."a.b"=1'], NESTED, QUOTED),
        ("", ["model.kwargs.a.b=2", "model.kwargs.'a.b'=1"], NESTED, QUOTED),
    ],
    ids=["--set a.b beside quoted", "--set quoted beside a.b", "two --set"],
)
@pytest.mark.parametrize("command", [["run"], ["config", "show"], ["sweep"]], ids=" ".join)
def test_set_overrides_whose_keys_clash_once_dotted_are_refused(
    cli: Cli,
    tmp_path: Path,
    command: list[str],
    kwargs: str,
    sets: list[str],
    first: str,
    second: str,
) -> None:
    exp = write(tmp_path, "exp.toml", experiment(kwargs))
    where = f"{exp} with --set"
    if command == ["sweep"]:
        exp = write(tmp_path, "sweep.toml", SWEEP)
        where = "sweep.toml point 1 (train.lr=0.1)"
    options = [part for key in sets for part in ("--set", key)]
    line = refused(cli(*command, exp, *options), tmp_path)
    assert line == f"error: {where}: {first} and {second} {SAID}"


def test_a_sweep_axis_that_clashes_with_the_base_is_refused(cli: Cli, tmp_path: Path) -> None:
    write(tmp_path, "exp.toml", experiment("a = {b = 2}"))
    sweep = write(
        tmp_path, "sweep.toml", 'base = "exp.toml"\n[grid]\n\'model.kwargs."a.b"\' = [1, 3]\n'
    )
    line = refused(cli("sweep", sweep), tmp_path)
    assert line == f"error: sweep.toml point 1 ({QUOTED}=1): {NESTED} and {QUOTED} {SAID}"


def test_the_api_names_the_file_it_refuses(db: str, tmp_path: Path) -> None:
    path = tmp_path / write(tmp_path, "exp.toml", experiment('"a.b" = 1\na = {b = 2}'))
    with pytest.raises(UserError) as caught:
        dlperf.run(path, store=db)
    assert str(caught.value) == f"{path}: {QUOTED} and {NESTED} {SAID}"
    # before: refused after loading (api._clash), as experiment['model']..., naming no file
    plain = tmp_path / write(tmp_path, "plain.toml", experiment(""))
    with pytest.raises(UserError) as caught:
        dlperf.run(plain, ["model.kwargs.a.b=1", "model.kwargs.'a.b'=2"], store=db)
    assert str(caught.value) == f"{plain} with --set: {NESTED} and {QUOTED} {SAID}"
    assert dlperf.Store(db).runs() == []


KEPT = '"a.b" = 1\na = {c = 2}\nx = {"y.z" = 3}\n"p.q" = {}'


def test_dotted_keys_that_do_not_clash_are_kept(cli: Cli, tmp_path: Path) -> None:
    exp = write(tmp_path, "exp.toml", experiment(KEPT))
    shown = cli("config", "show", exp, "--set", "model.kwargs.x.w=4")
    assert shown.code == 0, shown.err
    kwargs = {"a.b": 1, "a": {"c": 2}, "x": {"y.z": 3, "w": 4}, "p.q": {}}
    assert tomllib.loads(shown.out)["model"]["kwargs"] == kwargs
    write(tmp_path, "sweep.toml", 'base = "exp.toml"\n[grid]\n\'model.kwargs."a.d"\' = [1, 3]\n')
    points = load_sweep(tmp_path / "sweep.toml", ['model.kwargs.x."y.w"=5']).points
    assert [p.exp.model.kwargs["a.d"] for p in points] == [1, 3]
    assert all(p.exp.model.kwargs["x"] == {"y.z": 3, "y.w": 5} for p in points)


def test_keys_that_hold_a_newline_are_shown_on_one_line(cli: Cli, tmp_path: Path) -> None:
    exp = write(tmp_path, "exp.toml", experiment('"a.b\\n" = 1\na = {"b\\n" = 2}'))
    line = refused(cli("config", "show", exp), tmp_path)
    # Refused for the newline itself since round 31 (a key no command can name), before the clash
    assert line == (
        'error: exp.toml: key model.kwargs."a.b\\n" holds U+000A, a control character: keys '
        "are printable text, shown on one line and named as typed (write it without tabs, line "
        "breaks or invisible characters)"
    )
