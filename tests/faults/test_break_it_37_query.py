"""Break-it round 37, T2's C1 and C2 (fixer F4): `--where` and `runs compare`.

C1. A tracked run's top-level config key named like a run field (name, id, status, kind) or a
    config table named `tag` could not be selected: `--where name=resnet` read the run's name
    and selected nothing, exit 0; `status=ok` was "unknown status" without a word of the
    config; `runs compare` showed two rows labelled `status`. `config.KEY` reads the config
    alone; a run field (or tag) that selects nothing where a listed run's config holds the
    value is refused naming `config.KEY`; compare labels a config row apart (`config.status`)
    where another row has its label.
C2. `--where` on a stored float with the value every view shows (4 significant digits)
    selected nothing, exit 0: where a listed run's value shows as the typed one, the line
    names the run and its whole value.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import dlperf
from dlperf.errors import UserError
from tests.conftest import CliResult, fresh_store_url

Cli = Callable[..., CliResult]


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A store nobody opened: a SQLite file, or a PostgreSQL schema of this test's own."""
    yield from fresh_store_url(request.param, tmp_path, "bk37q")


def _ids(store: dlperf.Store, *where: str) -> list[int]:
    return sorted(run.id for run in store.runs(where=list(where)))


def _refused(store: dlperf.Store, where: str) -> str:
    with pytest.raises(UserError) as caught:
        store.runs(where=[where])
    return str(caught.value)


# C1


@pytest.fixture
def clashing(backend: str) -> str:
    """Two tracked runs (exp-a, exp-b) whose configs hold run fields' names at their top."""
    configs = (
        {"name": "resnet", "status": "ok", "id": 7, "kind": "cnn", "tag": {"x": 1}},
        {"name": "vgg", "status": "bad", "id": 1, "kind": "cnn", "tag": {"x": 2}},
    )
    for name, config in zip(("exp-a", "exp-b"), configs, strict=True):
        with dlperf.track(name, config=config, store=backend) as run:
            run.log(1, loss=1.0)
    return backend


def test_a_config_key_named_like_a_run_field_is_selected_as_config_dot_key(
    clashing: str,
) -> None:
    store = dlperf.Store(clashing)
    assert _ids(store, "config.name=resnet") == [1]
    assert _ids(store, "config.id=7") == [1]
    assert _ids(store, "config.status=bad") == [2]
    assert _ids(store, "config.kind=cnn") == [1, 2]
    assert _ids(store, "config.tag.x=2") == [2]
    # the plain keys are the run's own, as documented
    assert _ids(store, "name=exp-b") == [2]
    assert _ids(store, "id=1") == [1]
    assert _ids(store, "status=finished") == [1, 2]
    assert _refused(store, "config.nme=resnet") == (
        "--where: unknown key 'config.nme' (did you mean 'config.name'?)"
    )


@pytest.mark.parametrize(
    ("where", "own"),
    [
        ("name=resnet", "own name"),
        ("id=7", "own id"),
        ("status=ok", "own status"),  # was "unknown status 'ok'", the config unsaid
        ("kind=cnn", "own kind"),
        ("tag.x=1", "tag x"),  # was "no listed run has tag 'x'"
    ],
)
def test_a_run_field_selecting_nothing_that_a_config_holds_names_config_dot_key(
    clashing: str, cli: Cli, where: str, own: str
) -> None:
    """Was an empty table, exit 0 (name, id), or a refusal that never named the config."""
    key, _, value = where.partition("=")
    result = cli("--db", clashing, "runs", "list", "--where", where)
    assert result.code == 2, result.out
    assert result.err == (
        f"error: --where {where}: selects no listed run by its {own}, but run 1's config "
        f"holds {key}={value} (to select by the config's key: --where config.{where})\n"
    )


def test_compare_labels_a_config_row_apart_from_the_runs_status(clashing: str, cli: Cli) -> None:
    """Was two rows labelled `status`: the config's ok/bad, then the run's finished/finished."""
    rows = dlperf.Store(clashing).compare([1, 2]).rows()
    assert [row.label for row in rows] == [
        "id",
        "name",
        "config.status",
        "tag.x",
        "final.train/loss",
        "status",
    ]
    out = cli("--db", clashing, "runs", "compare", "1", "2").out
    assert [line.split()[0] for line in out.splitlines()].count("status") == 1


# C2


@pytest.mark.parametrize(
    ("loss", "typed", "shown", "whole"),
    [(0.123456789, "0.1235", "0.1235", "0.123456789"), (12345.6, "12346", "12,346", "12345.6")],
)
def test_where_on_a_float_by_its_shown_value_names_the_whole_value(
    backend: str, cli: Cli, loss: float, typed: str, shown: str, whole: str
) -> None:
    """Was an empty table, exit 0: the views show 0.1235 (12,346), --where compares whole."""
    for value in (loss, 2.0):
        with dlperf.track("a", config={"lr": 0.1}, store=backend) as run:
            run.log(1, loss=value)
    store = dlperf.Store(backend)
    assert _ids(store, f"final.train/loss={whole}") == [1]
    where = f"final.train/loss={typed}"
    assert _refused(store, where) == (
        f"--where {where}: selects no listed run, but run 1's final.train/loss is {whole}, "
        f"which tables show as {shown} (--where compares the whole value: "
        f"--where final.train/loss={whole})"
    )
    result = cli("--db", backend, "runs", "list", "--json", "--where", where)
    assert result.code == 2 and result.err.startswith(f"error: --where {where}: "), result.err
