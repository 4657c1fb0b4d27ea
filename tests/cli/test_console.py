"""dlperf.cli.console, the one output sink: JSON documents, tables that are never cut, the
plain reporter off a terminal, and what the library leaves to say."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from dlperf.cli import console, outputs


def test_print_json_writes_non_finite_floats_as_null_and_keys_as_text(
    capsys: pytest.CaptureFixture[str],
) -> None:
    console.print_json({"a": math.nan, 1: [math.inf, (2.5, -math.inf)], "b": {"c": 1}})
    out = capsys.readouterr().out
    assert json.loads(out) == {"a": None, "1": [None, [2.5, None]], "b": {"c": 1}}


def test_printed_json_prints_only_with_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert console.printed_json(False, {"x": 1}) is False
    assert capsys.readouterr().out == ""
    assert console.printed_json(True, {"x": 1}) is True
    assert json.loads(capsys.readouterr().out) == {"x": 1}


def test_documents_only_sends_other_prints_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    with console.documents_only(True):
        print("a model printing in its forward")
        console.print_json({"run_id": 3})
    captured = capsys.readouterr()
    assert json.loads(captured.out) == {"run_id": 3}
    assert "a model printing" in captured.err
    with console.documents_only(False):
        print("plain")
    assert capsys.readouterr().out == "plain\n"


def test_table_width_reads_columns_and_is_none_off_a_terminal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "50")
    assert console.table_width() == 50
    monkeypatch.setenv("COLUMNS", "wide")  # not a number: ignored; pytest's stdout is no tty
    assert console.table_width() is None


def test_share_gives_the_spare_room_in_proportion_to_what_each_column_lacks() -> None:
    # fewest (2, 4), most (10, 8), room 10: spare 4 over lacks 8 and 4 -> 2 + 2, 4 + 1 = 9;
    # the one cell left goes to the column furthest below its most (the first).
    assert console._share([2, 4], [10, 8], 10) == [5, 5]
    assert console._share([3, 3], [3, 9], 9) == [3, 6]


def test_a_table_narrower_than_its_cells_wraps_between_words_never_inside_one(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "30")
    console.print_table("t", ["key", "help"], [["train.lr", "the learning rate of every step"]])
    out = capsys.readouterr().out
    assert all(len(line) <= 30 for line in out.splitlines()), out
    words = out.split()
    for word in ("train.lr", "learning", "every"):
        assert word in words, out


def test_a_table_too_wide_even_wrapped_prints_one_block_per_row(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "20")
    console.print_table(None, ["name", "value"], [["averyveryverylongword", "anotherlongword12"]])
    lines = capsys.readouterr().out.splitlines()
    # No column of values fits beside the names: each row is `column  value` lines, a value
    # longer than its line folded onto the next.
    assert lines[0] == "" and lines[1].startswith("name ") and lines[3].startswith("value ")
    assert "".join(line[7:].strip() for line in lines[1:3]) == "averyveryverylongword"
    assert "".join(line[7:].strip() for line in lines[3:5]) == "anotherlongword12"


def test_print_phases_gives_milliseconds_and_shares_worked_by_hand(
    capsys: pytest.CaptureFixture[str],
) -> None:
    console.print_phases({"phases": {"forward": 0.002, "backward": 0.006}})
    out = capsys.readouterr().out.replace("│", " ")
    rows = [line.split() for line in out.splitlines()]
    assert ["forward", "2", "25"] in rows  # 2 ms of 8 ms
    assert ["backward", "6", "75"] in rows
    console.print_phases({"phases": {}})  # phases not timed: nothing
    assert capsys.readouterr().out == ""


def test_tell_warns_then_names_the_saved_files(capsys: pytest.CaptureFixture[str]) -> None:
    console.tell(["few cores free"], Path("a.png"), None, "b.svg")
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == ["warning: few cores free", "saved a.png", "saved b.svg"]


def test_plain_reporter_logs_open_ended_work_and_rate_limits_counted_work(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    rep = console.RichReporter()
    rep.task("reading the store")
    assert capsys.readouterr().err == "reading the store ...\n"
    monkeypatch.setattr(console.RichReporter, "interval_s", 1e9)
    rep.task("training", total=4)  # counted: no line of its own
    rep.advance(2, "loss 0.5")
    assert capsys.readouterr().err == ""  # inside the interval
    monkeypatch.setattr(console.RichReporter, "interval_s", 0.0)
    rep.advance(1, "loss 0.4")
    assert capsys.readouterr().err == "training: 3/4 loss 0.4\n"


def test_plot_option_refuses_a_format_matplotlib_cannot_write(tmp_path: Path) -> None:
    from dlperf.errors import UserError

    assert outputs._plot_path(None) is None
    assert outputs._plot_path(tmp_path / "f.png") == tmp_path / "f.png"
    with pytest.raises(UserError, match="not a figure format"):
        outputs._plot_path(tmp_path / "f.docx")
