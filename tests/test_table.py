"""dlperf.table.Table: a library's table as plain text."""

from __future__ import annotations

from dlperf.table import Table


def test_columns_pad_to_their_widest_cell_and_lines_end_clean() -> None:
    table = Table(
        "speed", ["model", "samples/s", "ok"], [["resnet20", 12345.6, True], ["cnn", None, False]]
    )
    assert table.text().splitlines() == [
        "speed",
        "model     samples/s  ok",
        "resnet20  12,346     yes",
        "cnn       -          no",
    ]


def test_no_title_no_rows_and_a_hostile_title() -> None:
    assert Table(None, ["a", "bb"], []).text() == "a  bb"
    assert Table("run \x1b[2J", ["a"], [[1]]).text().splitlines()[0] == "run \\x1b[2J"
