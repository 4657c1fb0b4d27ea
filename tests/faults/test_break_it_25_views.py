"""The twenty-fifth break-it round (P3, the store tester: causes 3 to 8): what the API's `Store`
and the views of `dlperf runs` make of a store, of --where and of the values they print.

3: `dlperf.Store('typo.db').runs()` made a 49 KB store file (`Store()`: ./dlperf.db; on an empty
PostgreSQL schema, dlperf's tables). The API's reader now opens a store as the CLI's readers
do: one that is missing or empty is left as it was, and holds no run; `track` and `run` given
such a `Store` still make the store they write.

4: `--where name=123` (or 2026-11-27, true, " lead") selected nothing though the table showed
the run: the value was read as TOML (an int, a date) and stripped. A text field now also
matches the value's text as given.

5: a tag `runs tag` accepted (4,000 '[' or 4,400 digits) made every `--where tag.KEY=...` fail
with a line blaming --set: a stored value (or a --where value) that does not parse compares as
its text.

6: tables printed 1e25 as 10,000,000,000,000,000,905,969,664 (and -1e308 as 309 digits) where
--json said 1e+25: past 1e15 a float is shown to its significant digits.

7: the config line of `runs show` (what --set takes) did not escape a backslash, nor quote a
string --set reads as another value: a stored value now prints as the --set value that reads
back as it.

8: `Store.frame(2**31)` (PostgreSQL) or `frame(2**63)` (SQLite) raised the driver's error: it
is now "no run N in the store", as every other `Store` method says.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import dlperf
from dlperf.errors import UserError
from dlperf.formatting import fmt
from dlperf.store.query import config_settings, setting
from tests.conftest import CliResult, fresh_store_url
from tests.faults.test_break_it_22_views import _tables

Cli = Callable[..., CliResult]


@pytest.fixture(params=["sqlite", "postgresql"])
def unopened(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A store nobody has opened: a missing SQLite file, or an empty PostgreSQL schema."""
    yield from fresh_store_url(request.param, tmp_path, "bk25v")


# --- 3: the API's Store is a reader ---------------------------------------------------------


def test_store_reads_a_missing_store_without_making_it(unopened: str) -> None:
    store, other = dlperf.Store(unopened), dlperf.Store(unopened)
    # before: [] and a 49 KB file (or dlperf's seven tables in the schema)
    assert store.runs() == []
    with pytest.raises(UserError, match="no run 1"):
        store.run(1)
    assert _tables(unopened) == []
    # A writer given that Store makes the store it writes, and the Store reads it after.
    with dlperf.track("first", store=store) as run:
        run.log(1, loss=1.0)
    assert [r.name for r in store.runs()] == ["first"]
    # A Store made before the store was reads it once it is there (a writer elsewhere).
    assert [r.name for r in other.runs()] == ["first"]
    assert [r.name for r in dlperf.Store(unopened).runs()] == ["first"]


def test_default_store_is_not_made_by_a_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DLPERF_DB", raising=False)
    assert dlperf.Store().runs() == []
    assert not (tmp_path / "dlperf.db").exists()


# --- 4: --where on a text field compares its text -------------------------------------------


def test_where_matches_a_text_field_as_written(cli: Cli, db: str) -> None:
    names = ["123", "2026-11-27", "true", " lead", "1e-1"]
    for name in names:
        with dlperf.track(name, config={"s": name}, store=db):
            pass
    store = dlperf.Store(db)
    for name in names:
        # before: name=123 read 123 (an int), name=2026-11-27 a date: no run, no word
        assert [r.name for r in store.runs(where=[f"name={name}"])] == [name]
        assert [r.name for r in store.runs(where=[f"s={name}"])] == [name]
    # The TOML-quoted form still selects the run, and a number still matches as a number.
    assert [r.name for r in store.runs(where=['name="123"'])] == ["123"]
    assert store.runs(where=["name=lead"]) == []  # 'lead' is not ' lead', as the table shows
    listed = cli("runs", "list", "--where", "name=2026-11-27", "--json")
    assert listed.code == 0, listed.err
    assert '"2026-11-27"' in listed.out


# --- 5: a stored tag that does not parse compares as its text -------------------------------


def test_where_on_a_tag_toml_cannot_read(cli: Cli, db: str) -> None:
    with dlperf.track("r", store=db):
        pass
    deep, digits = "[" * 4000, "9" * 4400
    assert cli("runs", "tag", "1", f"deep={deep}", f"dig={digits}").code == 0
    for key, value in (("deep", deep), ("dig", digits)):
        # before: exit 2, "error: --set value '[[[[...': nested too deeply"
        none = cli("runs", "list", "--where", f"tag.{key}=1", "--json")
        assert (none.code, none.out.strip()) == (0, "[]"), none.err
        assert "--set" not in none.err
        same = cli("runs", "list", "--where", f"tag.{key}={value}", "--json")
        assert same.code == 0, same.err
        assert '"id": 1' in same.out


# --- 6: large floats in tables --------------------------------------------------------------


def test_tables_show_large_floats_to_their_digits(cli: Cli, db: str) -> None:
    assert fmt(1e25) == "1e+25"
    assert fmt(-1e308) == "-1e+308"
    assert fmt(1.5e17) == "1.5e+17"
    assert fmt(12345.6) == "12,346"  # below the bound: as before
    assert fmt(999_999_999_999_999.0) == "999,999,999,999,999"
    with dlperf.track("big", store=db) as run:
        run.log(1, loss=1e25)
    shown = cli("runs", "show", "1")
    assert shown.code == 0, shown.err
    # before: 10,000,000,000,000,000,905,969,664
    assert "1e+25" in shown.out.split()
    assert "905,969,664" not in shown.out


# --- 7: the config line is what --set reads back --------------------------------------------


def _read_back(text: str) -> Any:
    """`text` as --set reads a value (dlperf.config.parse_value of the stripped text)."""
    from dlperf.config import parse_value

    return parse_value(text.strip())


@pytest.mark.parametrize(
    "value",
    [
        "/tmp/a b\\new",
        "p q\nr",
        "a\\b",
        "p\nq",
        "123",
        "true",
        "1e-1",
        "2026-11-27",
        'x"y',
        "tab\there",
        "del\x7f",
        "é ü",
        "[1]",
        " lead",
        "",
    ],
)
def test_setting_reads_back_as_the_stored_value(value: str) -> None:
    shown = setting(value)
    # before: "/tmp/a b\new" (a newline when pasted), 123 (an int), p\nq unquoted
    assert _read_back(shown) == value
    assert type(_read_back(shown)) is str
    # what a table prints (no control character for it to escape) is what is pasted
    assert shown.isprintable(), shown


def test_runs_show_config_line_escapes_backslashes(cli: Cli, db: str) -> None:
    config = {"data": {"root": "a=b\\new", "nl": "p\nq"}}
    with dlperf.track("bs", config=config, store=db):
        pass
    shown = cli("runs", "show", "1")
    assert shown.code == 0, shown.err
    words = shown.out.split()
    assert 'root="a=b\\\\new"' in words, shown.out
    assert 'nl="p\\nq"' in words, shown.out
    # what --set reads back as the stored values
    assert dict(config_settings(config))["data"] == 'root="a=b\\\\new" nl="p\\nq"'


# --- 8: Store.frame of an id past the column's range ----------------------------------------


@pytest.mark.parametrize("run_id", [2**31, 2**63, 2**64])
def test_frame_of_an_id_out_of_range_is_no_run(unopened: str, run_id: int) -> None:
    with dlperf.track("r", store=unopened) as run:
        run.log(1, loss=1.0)
    store = dlperf.Store(unopened)
    # before: sqlalchemy DataError (PostgreSQL) or OverflowError (SQLite)
    with pytest.raises(UserError, match=f"no run {run_id} in the store"):
        store.frame(run_id)
    assert list(store.frame(1).columns) == ["train/loss"]
