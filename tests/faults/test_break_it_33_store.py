"""Break-it round 33, P3 (the run store), causes C1 to C8, and their review.

C1. A PostgreSQL store's metric row ids were 32-bit (SERIAL): once 2^31 metric rows had ever
    been written (ids of deleted runs' rows are not reused), every `dlperf run` and
    `dlperf.track` was a 39-frame traceback of SequenceGeneratorLimitExceeded, where SQLite's
    64-bit rowid goes on. A new store's metrics.id is 64-bit (BIGSERIAL; SQLite's stays its
    rowid); a store made before keeps its 32-bit ids, read and written as before, and when
    they are used up says so in one line with the ALTER that widens them.
C2. `dlperf.track` (and the store itself) stored config keys that are empty or blank, and
    config, metric and tag keys holding `=`, which no `--where KEY=VALUE` can name (it splits
    on the first `=`, and refuses an empty key); `--where`'s did-you-mean then offered the
    stored `final.train/a=b`, the very key that had failed. Such keys are refused up front in
    one line, as keys holding a control character are (`parsing.printable_key`), and a key
    `--where` cannot name is never offered.
C3. `track(config=...)` refused a NumPy number with "give numbers" (np.int64(32) is one) and
    named np.bool_ "bool": the type is named as NumPy's, and the fix is `.item()`.
C4. `log(Decimal('10'), ...)` was refused as "a step is a whole number, got Decimal('10')": a
    whole Decimal is taken as a step, as a whole Fraction or float is.
C5. `runs compare` and the plots' legends listed config keys as differing whose values are
    equal as `--where` judges them (1 and 1.0, 0.0 and -0.0), by their repr: they are
    judged as `--where` judges, a bool still apart from a number.
C6. A key or name stored in NFD (café copied from a macOS file name) was not found by the
    same text typed (NFC): "unknown key 'café' (did you mean 'café'?)", and `--where
    name=café` an empty table. --where, `runs plot --key` and `Store.metrics` take a key in
    another normalisation as the stored one, and --where compares text in NFC.
C7. Run names and config text with an edge space printed alike ("a" and "a " two rows of a)
    in `runs list`, `runs show`'s title and `runs compare`: quoted there as class names are
    (`parsing.name_text`), 'a '.
C8. The Store API refused run ids 1.0 and torch.tensor(1) as "a run id is a whole number",
    the very values `log` takes as steps: one rule (`_as_whole`) for both.
"""

from __future__ import annotations

import functools
import json
import re
import unicodedata
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from sqlalchemy import create_engine, make_url, text

import dlperf
from dlperf.errors import UserError
from dlperf.report.runs import legend_labels
from dlperf.store import RunStore
from dlperf.store.query import compare, select
from tests.conftest import POSTGRES, CliResult, fresh_store_url

Cli = Callable[..., CliResult]

NEAR_INT4_MAX = 2**31 - 8  # a store that has taken that many metric rows in its life


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from fresh_store_url(request.param, tmp_path, "bk33_store")


@pytest.fixture
def pg_url(tmp_path: Path) -> Iterator[str]:
    yield from fresh_store_url("postgresql", tmp_path, "bk33_store")


def _sql(url: str, *statements: str) -> list[Any]:
    """The rows of the last of `statements`, run in one transaction."""
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            for statement in statements:
                result = conn.execute(text(statement))
            return list(result) if result.returns_rows else []
    finally:
        engine.dispose()


def _schema(url: str) -> str:
    """The schema of a `fresh_store_url` store: its URL's -csearch_path=."""
    return str(make_url(url).query["options"]).partition("=")[2]


def _near_the_end(url: str) -> None:
    """The next metric row id just under 2^31."""
    if url.startswith("sqlite"):  # the next rowid is the largest one's + 1
        _sql(url, f"UPDATE metrics SET id = {NEAR_INT4_MAX}")
    else:
        _sql(url, f"SELECT setval(pg_get_serial_sequence('metrics', 'id'), {NEAR_INT4_MAX})")


def _logged(store: RunStore, run_id: int, steps: range) -> None:
    store.log_metrics(run_id, [("train/loss", step, 1.0) for step in steps])


def test_metric_row_ids_go_past_2_to_the_31_on_both_backends(store_url: str) -> None:
    store = RunStore.open(store_url)
    run_id = store.create_run("r", "run", {})
    _logged(store, run_id, range(1))
    _near_the_end(store_url)
    _logged(store, run_id, range(1, 21))
    assert _sql(store_url, "SELECT count(*), max(id) FROM metrics") == [(21, NEAR_INT4_MAX + 20)]
    assert [step for step, _ in store.metrics(run_id, "train/loss")] == list(range(21))
    store.engine.dispose()


def test_a_postgresql_store_of_32_bit_metric_ids_is_written_until_they_are_used_up_then_says_how_to_widen_them(  # noqa: E501
    pg_url: str,
) -> None:
    # metrics.id as a store made before this change has it: SERIAL
    RunStore.open(pg_url).engine.dispose()
    sequence = "pg_get_serial_sequence('metrics', 'id')"
    _sql(
        pg_url,
        "ALTER TABLE metrics ALTER COLUMN id TYPE integer",
        f"DO $$ BEGIN EXECUTE 'ALTER SEQUENCE ' || {sequence} || ' AS integer'; END $$",
    )
    store = RunStore.open(pg_url)
    run_id = store.create_run("r", "run", {})
    _logged(store, run_id, range(1))
    _near_the_end(pg_url)
    with pytest.raises(UserError) as e:
        _logged(store, run_id, range(1, 21))
    assert e.value.message.startswith("run store postgresql+psycopg://")
    assert e.value.message.endswith(
        ": table metrics has used up its row ids (sequence metrics_id_seq reached 2147483647)"
    )
    # The names in the store's schema: in psql, without the URL's search_path, `ALTER TABLE
    # metrics` named no table, or public's
    schema = _schema(pg_url)
    assert e.value.exit_code == 1 and e.value.hint == (
        f"widen them (this rewrites the table): ALTER TABLE {schema}.metrics ALTER COLUMN id "
        f"TYPE bigint; ALTER SEQUENCE {schema}.metrics_id_seq AS bigint"
    )
    _sql(POSTGRES or "", *e.value.hint.partition(": ")[2].split("; "))  # the fix as given
    _logged(store, run_id, range(1, 21))
    # the failed INSERT's ids are not reused
    [(count, largest)] = _sql(pg_url, "SELECT count(*), max(id) FROM metrics")
    assert count == 21 and largest > 2**31
    store.engine.dispose()


# A config, and the line refusing it: as stored, no --where could name the key.
UNNAMEABLE_CONFIGS = [
    ({"k=v": 6}, "key config['k=v'] holds '=', which --where KEY=VALUE splits on"),
    ({"": 1}, "key config[''] is blank"),
    ({" ": 2}, "key config[' '] is blank"),
    ({"opt": {"a=b": 1}}, "key config['opt']['a=b'] holds '=', which --where KEY=VALUE"),
]


@pytest.mark.parametrize(("config", "line"), UNNAMEABLE_CONFIGS)
def test_track_refuses_a_config_key_no_where_could_name(
    tmp_path: Path, config: dict[str, Any], line: str
) -> None:
    db = tmp_path / "s.db"
    with (
        pytest.raises(UserError, match=re.escape(line)) as e,
        dlperf.track("m", config=config, store=str(db)),
    ):
        pass
    assert "\n" not in str(e.value) and not db.exists()  # refused before the store is made


def test_track_refuses_a_metric_key_holding_an_equals_sign(tmp_path: Path) -> None:
    with dlperf.track("m", store=str(tmp_path / "s.db")) as run:
        with pytest.raises(UserError, match=re.escape("metric key 'a=b' holds '='")):
            run.log(0, **{"a=b": 1.0})
        with pytest.raises(UserError, match=re.escape("metric key ' ' is blank")):
            run.log(0, **{" ": 1.0})
        run.log(0, loss=1.0)  # the run goes on


def test_the_store_refuses_keys_no_where_could_name_on_both_backends(store_url: str) -> None:
    store = RunStore.open(store_url)
    for config, line in UNNAMEABLE_CONFIGS:
        with pytest.raises(UserError, match=re.escape(line)):
            store.create_run("m", "run", config)
    run_id = store.create_run("m", "run", {"k": 1})
    with pytest.raises(UserError, match=re.escape("metric key 'train/a=b' holds '='")):
        store.log_metrics(run_id, [("train/a=b", 0, 1.0)])
    with pytest.raises(UserError, match=re.escape("tag key 'x=y' holds '='")):
        store.set_tags(run_id, {"x=y": "z"})
    assert _sql(store_url, "SELECT count(*) FROM runs") == [(1,)]
    assert _sql(store_url, "SELECT count(*) FROM metrics") == [(0,)]
    store.engine.dispose()


def test_where_never_offers_a_stored_key_it_cannot_name(cli: Cli, db: str) -> None:
    # a key stored before it was refused
    with dlperf.track("m", config={"opt": {"ab": 1}}, store=db):
        pass
    _sql(db, """UPDATE runs SET config = '{"opt": {"a=b": 1}}'""")
    result = cli("runs", "list", "--where", "opt.a=b=1")
    assert result.code == 2
    assert result.err == (
        "error: --where: unknown key 'opt.a' (keys: config keys (model.name, train.lr), status, "
        "kind, name, summary keys (test_accuracy, throughput, final.train/loss) and tag.NAME)\n"
    )


# Since round 39 a NumPy scalar (or 0-d array) is taken as the number it holds
# (test_break_it_39_api_numpy.py): what is refused is an array of one number.
@pytest.mark.parametrize(
    ("value", "name", "plain"),
    [(np.array([32]), "numpy.ndarray", "32"), (np.array([True]), "numpy.ndarray", "True"),
     (np.array([[0.5]], np.float32), "numpy.ndarray", "0.5")],
)  # fmt: skip
def test_track_names_a_numpy_number_in_a_config_as_numpy_s_and_the_fix_that_works(
    tmp_path: Path, value: Any, name: str, plain: str
) -> None:
    with (
        pytest.raises(UserError) as e,
        dlperf.track("m", config={"batch": value}, store=str(tmp_path / "s.db")),
    ):
        pass
    assert e.value.message == f"config['batch'] is not JSON-serialisable ({name})"
    assert e.value.hint == f"give the Python value it holds: .item() gives {plain}"


def test_log_takes_a_whole_decimal_step_and_refuses_the_rest_in_one_line(tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    with dlperf.track("m", store=db) as run:
        run.log(Decimal("10"), loss=1.0)
        run.log(Decimal("1.1E+1"), loss=1.0)
        for step in (Decimal("10.5"), Decimal("NaN"), Decimal("sNaN"), Decimal("Infinity")):
            with pytest.raises(UserError, match=r"^a step is a whole number, got Decimal\("):
                run.log(step, loss=1.0)
        run_id = run.id
    assert [step for step, _ in RunStore.open(db).metrics(run_id, "train/loss")] == [10, 11]


def test_compare_and_legends_judge_config_values_equal_as_where_does(store_url: str) -> None:
    store = RunStore.open(store_url)
    configs = [
        {"lr": 1, "w": 0.0, "flag": True, "n": 1, "xs": [1, 2]},
        {"lr": 1.0, "w": -0.0, "flag": 1, "n": 2, "xs": [1.0, 2]},
    ]
    ids = [store.create_run(f"r{i}", "run", config) for i, config in enumerate(configs)]
    assert select(store.list_runs(), ["lr=1", "w=0.0"]) == store.list_runs()  # both, as before
    # a bool is never a number, as --where holds (flag=1 selects run 2 alone)
    assert compare(store, ids).config_diff == {"flag": [True, 1], "n": [1, 2]}
    labels = legend_labels(store.list_runs())
    assert all(label.endswith(("(flag=1, n=2)", "(flag=true, n=1)")) for label in labels)
    store.engine.dispose()


def test_a_key_or_name_stored_in_nfd_is_found_by_the_same_text_typed_in_nfc(
    cli: Cli, db: str, tmp_path: Path
) -> None:
    nfd = functools.partial(unicodedata.normalize, "NFD")  # as copied from a macOS file name
    with dlperf.track(nfd("café"), config={nfd("café"): 1, "x": nfd("thé")}, store=db) as run:
        run.log(0, **{nfd("val/café"): 1.0})
    store = RunStore.open(db)
    runs = store.list_runs()
    for where in ("café=1", "final.val/café=1", "name=café", "x=thé"):  # typed: NFC
        assert select(runs, [where]) == runs, where
    assert dlperf.Store(db).metrics(run.id, "val/café") == [(0, 1.0)]
    result = cli("runs", "plot", str(run.id), "--key", "val/café", "--out", str(tmp_path / "p.png"))
    assert result.code == 0, result.err


def test_names_and_config_text_with_an_edge_space_read_apart_in_runs_list_show_and_compare(
    cli: Cli, db: str
) -> None:
    for name in ("a", "a "):
        with dlperf.track(name, config={"x": name}, store=db):
            pass
    listed = cli("runs", "list").out.splitlines()[2:]
    assert [row.split("│")[1].strip() for row in listed] == ["'a '", "a"]
    assert cli("runs", "show", "2").out.splitlines()[0].strip() == "run 2: 'a ' (finished)"
    compared = cli("runs", "compare", "1", "2")
    assert [c.strip() for c in compared.out.splitlines()[2].split("│")][:3] == ["x", "a", "'a '"]
    assert json.loads(cli("runs", "compare", "1", "2", "--json").out)["config_diff"] == {
        "x": ["a", "a "]  # the data as stored
    }


def test_the_store_api_takes_a_run_id_as_log_takes_a_step(tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    for name in ("r1", "r2"):
        with dlperf.track(name, store=db) as run:
            run.log(torch.tensor(1), loss=1.0)
    store = dlperf.Store(db)
    assert store.run(1.0).id == 1
    assert store.compare([np.int64(1), torch.tensor(2)]).run_ids == [1, 2]
    assert store.metrics(torch.tensor(1), "loss") == [(1, 1.0)]
    assert [r.id for r in store.runs(limit=torch.tensor(1))] == [2]
    for refused in (1.5, True, "1", torch.tensor(0.5)):
        with pytest.raises(UserError, match=r"^a run id is a whole number, got "):
            store.run(refused)


def test_the_advice_for_a_used_up_table_other_than_metrics_works_on_an_empty_table(
    pg_url: str,
) -> None:
    # runs' sequence set near its end by hand, and no run left: max(id) is NULL, and
    # setval(seq, NULL) changes nothing
    store = RunStore.open(pg_url)
    _sql(pg_url, "SELECT setval(pg_get_serial_sequence('runs', 'id'), 2147483647)")
    with pytest.raises(UserError) as e:
        store.create_run("r", "run", {})
    assert e.value.hint is not None and f"setval('{_schema(pg_url)}.runs_id_seq'" in e.value.hint
    _sql(POSTGRES or "", e.value.hint.partition(": ")[2])  # the fix as given, in psql
    assert store.create_run("r", "run", {}) == 1
    store.engine.dispose()


def test_where_selects_every_run_holding_a_key_or_tag_in_either_normalisation(db: str) -> None:
    # one run's key typed (NFC), another's copied from a macOS file name (NFD): --where
    # selected the runs of one form alone, without a word
    store = RunStore.open(db)
    for form in ("NFC", "NFD"):
        key = unicodedata.normalize(form, "café")
        run_id = store.create_run(form, "run", {key: 1})
        store.set_tags(run_id, {key: "yes"})
    runs = store.list_runs()
    for where in ("café=1", "tag.café=yes"):
        for form in ("NFC", "NFD"):
            typed = unicodedata.normalize(form, where)
            assert [r.name for r in select(runs, [typed])] == ["NFD", "NFC"], (form, where)
    store.engine.dispose()


def test_tag_values_with_an_edge_space_read_apart_in_runs_list_show_and_compare(
    cli: Cli, db: str
) -> None:
    store = RunStore.open(db)
    for value in ("a", "a "):
        store.set_tags(store.create_run(value.strip(), "run", {}), {"x": value})
    listed = cli("runs", "list").out.splitlines()[2:]
    assert [row.split("│")[-1].strip() for row in listed] == ["x='a '", "x=a"]
    shown = cli("runs", "show", "2").out.splitlines()
    assert [c.strip() for c in next(r for r in shown if "tag x" in r).split("│")] == [
        "tag x", "'a '"
    ]  # fmt: skip
    compared = cli("runs", "compare", "1", "2").out.splitlines()
    assert [c.strip() for c in next(r for r in compared if "tag x" in r).split("│")][:3] == [
        "tag x", "a", "'a '"
    ]  # fmt: skip
    store.engine.dispose()


def test_converge_reads_a_metric_stored_in_nfd_by_the_key_typed_in_nfc(db: str) -> None:
    from dlperf.converge.curve import from_run

    with dlperf.track("m", store=db) as run:
        for step in (1, 2):
            run.log(step, **{unicodedata.normalize("NFD", "val/café"): 1.0 / step})
    curve = from_run(RunStore.open(db), run.id, "loss", "val/café")  # typed: NFC
    assert list(curve.values) == [1.0, 0.5]
