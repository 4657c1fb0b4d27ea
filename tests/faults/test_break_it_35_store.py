"""Break-it round 35, P3 (the run store: numbers and text it gives back), causes C1 and on.

C1. `runs compare` printed a config's text as its number, bool or null prints ("1" and 1 as
    1, "yes" and True as yes, "-" and None as -): a key listed as differing with identical
    cells; `runs show` printed text "-" as a missing value's "-". Text that reads as another
    value's cell is quoted: '1', 'yes', '-' in compare, "-" in show. And `runs plot`'s legends
    (x=1 for 1 and "1", x=- for "-" and a key the run lacks): a value as --set takes it, x="1".
C2. `report`'s page of a dlperf.track run folded its config as an experiment's when a key
    matched one of the experiment's (train.lr): keys at the experiment's defaults folded away,
    keys "not used by this run" (data.shape without data.name = "synthetic") left out. A
    tracked run's config is the user's own: shown whole.
C3. `Store.frame(run_id, "xy")` walked the string as keys "x" and "y" (their columns, without a
    word; "no metric 'v'" for "val/acc1"), and `frame(run_id, 5)` raised a bare TypeError: keys
    is a list of metric keys, anything else refused as `runs(where=...)` refuses it.
C4. `runs compare` padded every row of its table to the widest cell: one config value of 1 MB
    beside 10^4 keys made gigabytes (nothing printed for minutes). A text cell is cut at
    CELL_CHARS, saying how long it is and that --json holds it whole.
C5. `runs export --to tensorboard` named a run's event directory with its name's ASCII letters
    alone: "résumé-lr0.1" as run-3-r_sum_-lr0.1, a name all in é or 日本 as run-1, no name in
    TensorBoard's list. Its letters and digits are kept, as docs/export.md says, cut to fit a
    file name.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

import dlperf
from dlperf.exporters import event_dir_name
from dlperf.report.runs import legend_labels
from dlperf.report.site import pages
from dlperf.store import RunStore
from dlperf.store.query import CELL_CHARS
from tests.conftest import CliResult

Cli = Callable[..., CliResult]


def _cells(out: str) -> dict[str, list[str]]:
    """A table's rows by their first cell, the other cells stripped."""
    rows = [[c.strip() for c in line.split("│")] for line in out.splitlines() if "│" in line]
    return {row[0]: row[1:] for row in rows}


def test_c1_config_text_reads_apart_from_a_number_bool_or_null_in_compare_and_show(
    cli: Cli, db: str
) -> None:
    with dlperf.track("num", config={"x": 1, "b": True, "n": None, "f": 1e25}, store=db):
        pass
    with dlperf.track("text", config={"x": "1", "b": "yes", "n": "-", "f": "1e+25"}, store=db):
        pass
    cli("runs", "tag", "2", "t=-", "u=yes")
    compared = _cells(cli("runs", "compare", "1", "2").out)
    assert compared["x"] == ["1", "'1'", "-"]
    assert compared["b"] == ["yes", "'yes'", "-"]
    assert compared["n"] == ["-", "'-'", "-"]
    assert compared["f"] == ["1e+25", "'1e+25'", "-"]
    assert compared["tag t"] == ["-", "'-'", "-"]  # a tag "-" beside none
    assert compared["tag u"] == ["-", "yes", "-"]  # a tag is text: "yes" reads as nothing else
    assert json.loads(cli("runs", "compare", "1", "2", "--json").out)["config_diff"]["n"] == [
        None,
        "-",  # the data as stored
    ]
    shown = _cells(cli("runs", "show", "2").out)
    assert shown["n"] == ['"-"'] and shown["x"] == ['"1"']
    assert _cells(cli("runs", "show", "1").out)["n"] == ["-"]


def test_c1_legends_tell_config_text_from_a_number_bool_or_a_missing_key(tmp_path: Path) -> None:
    store = RunStore.open(str(tmp_path / "s.db"))
    configs = [{"x": 1, "b": True, "n": "-"}, {"x": "1", "b": "true"}, {"x": 2.5, "b": "yes"}]
    for i, config in enumerate(configs):
        store.create_run(f"r{i}", "run", config)
    labels = legend_labels(sorted(store.list_runs(), key=lambda run: run.id))
    assert labels == [
        'run 1: r0 (b=true, n="-", x=1)',
        'run 2: r1 (b="true", n=-, x="1")',
        "run 3: r2 (b=yes, n=-, x=2.5)",
    ]


def test_c2_the_report_shows_a_tracked_runs_config_whole(db: str) -> None:
    config = {"train": {"lr": 0.1, "momentum": 0.9}, "data": {"shape": [3, 8, 8]}}
    with dlperf.track("mine", config=config, store=db) as run:
        run.log(1, loss=1.0)
    store = RunStore.open(db)
    shown = pages.run_page(store, store.get_run(run.id), [], lambda kind, item: False)
    shown = shown.partition("<h2>Config</h2>")[2].partition("<h2>")[0]
    assert "<details>" not in shown and "left out" not in shown
    for key in ("train.lr", "train.momentum", "data.shape"):
        assert f"<th>{key}</th>" in shown


def test_c3_store_frame_refuses_a_lone_key_as_its_keys(db: str) -> None:
    pytest.importorskip("pandas")
    with dlperf.track("c3", store=db) as run:
        run.log(1, x=1.0, y=2.0, xy=3.0)
    store = dlperf.Store(db)
    for keys in ("xy", 5):
        with pytest.raises(dlperf.UserError, match="keys is a list of metric keys") as caught:
            store.frame(run.id, keys)  # type: ignore[arg-type]
        assert caught.value.hint == "e.g. ['val/acc1']"
    assert list(store.frame(run.id, ["xy"]).columns) == ["xy"]
    assert list(store.frame(run.id, ("x", "y")).columns) == ["x", "y"]


def test_c4_compare_cuts_a_long_text_cell_and_says_so(cli: Cli, db: str) -> None:
    long = "x" * 10**5
    with dlperf.track("wide", config={"v": long}, store=db):
        pass
    with dlperf.track("many", config={f"k{i}": i for i in range(50)}, store=db):
        pass
    out = cli("runs", "compare", "1", "2").out
    assert len(out) < 60 * 400  # 52 rows, none padded to 100,000 characters
    cell = f"{'x' * CELL_CHARS}... (100,000 characters; --json holds it whole)"
    assert _cells(out)["v"] == [cell, "-", "-"]
    assert json.loads(cli("runs", "compare", "1", "2", "--json").out)["config_diff"]["v"] == [
        long,
        None,
    ]


def test_c5_a_tensorboard_directory_keeps_a_names_letters_of_every_script(tmp_path: Path) -> None:
    store = RunStore.open(str(tmp_path / "s.db"))
    names = ["résumé-lr0.1", "re\u0301sume\u0301", "é" * 200, "日本" * 100, "\U00020000" * 100]
    names.append("a/b c")
    runs = [store.get_run(store.create_run(name, "run", {})) for name in names]
    assert [event_dir_name(run) for run in runs[:3]] == [
        "run-1-résumé-lr0.1",
        "run-2-résumé",  # NFC, whose é is one letter
        "run-3-" + "é" * 60,
    ]
    assert event_dir_name(runs[3]) == "run-4-" + "日本" * 30
    assert event_dir_name(runs[4]).startswith("run-5-\U00020000")
    assert len(event_dir_name(runs[4]).encode()) <= 255
    assert event_dir_name(runs[5]) == "run-6-a_b_c"
