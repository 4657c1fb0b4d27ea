"""dlperf.converge.tables: reading CSV text and numeric columns with one-line errors."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dlperf.converge.tables import header, read_numbers, read_text
from dlperf.errors import UserError


def one_line(call: object, *args: object) -> str:
    with pytest.raises(UserError) as e:
        call(*args)  # type: ignore[operator]
    assert "\n" not in str(e.value)
    return str(e.value)


def csv(tmp_path: Path, text: str | bytes, name: str = "t.csv") -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, newline="")
    return path


def test_read_text_drops_a_bom_and_keeps_line_ends(tmp_path: Path) -> None:
    path = csv(tmp_path, "\ufeffstep,loss\r\n1,2\r\n".encode())
    assert read_text(path) == "step,loss\r\n1,2\r\n"
    assert header(path) == ["step", "loss"]


def test_read_text_refusals_name_what_the_file_is(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    assert one_line(read_text, fifo, "speed table ") == (
        f"speed table {fifo} is not a regular file (a FIFO) (give the path of a regular file)"
    )
    assert one_line(read_text, tmp_path / "none.csv") == (
        f"cannot read {tmp_path / 'none.csv'}: No such file or directory"
    )
    assert one_line(read_text, tmp_path) == f"cannot read {tmp_path}: Is a directory"
    latin = csv(tmp_path, b"step,metric\n1,0.\xe95\n")
    assert one_line(read_text, latin) == f"{latin}: not UTF-8 text (byte 0xe9) (save it as UTF-8)"


def test_header_of_an_empty_file_is_empty(tmp_path: Path) -> None:
    assert header(csv(tmp_path, "")) == []


def test_read_numbers_reads_required_and_present_optional_columns(tmp_path: Path) -> None:
    path = csv(tmp_path, "step,loss,acc\n1,2.5,0.1\n2,1e-1,0.2\n")
    assert read_numbers(path, ["loss", "step"], ("acc", "absent"))[1] == {
        "loss": [2.5, 0.1],
        "step": [1.0, 2.0],
        "acc": [0.1, 0.2],
    }


def test_read_numbers_refusals(tmp_path: Path) -> None:
    empty = csv(tmp_path, "step,loss\n", "empty.csv")
    assert one_line(read_numbers, empty, ["loss"]) == (
        f"{empty} has no rows (a CSV has a header line, then one line per point)"
    )
    path = csv(tmp_path, "step,loss\n1,2\n")
    assert (
        one_line(read_numbers, path, ["Loss"])
        == f"{path} has no column 'Loss' (did you mean 'loss'?)"
    )
    assert (
        one_line(read_numbers, path, ["zzz"]) == f"{path} has no column 'zzz' (columns: step, loss)"
    )


def test_read_numbers_names_the_line_of_a_bad_value(tmp_path: Path) -> None:
    path = csv(tmp_path, "step,loss\n1,2\n2,oops\n")
    assert one_line(read_numbers, path, ["loss"]) == f"{path}:3: 'loss' is not a number: 'oops'"
    short = csv(tmp_path, "step,loss\n1,2\n2\n", "short.csv")  # a missing cell: a short row
    assert one_line(read_numbers, short, ["loss"]) == (
        f"{short}:3: 1 field where the header has 2 (a row gives one field per column: is it "
        "cut short?)"
    )
    inf = csv(tmp_path, "step,loss\n1,inf\n", "inf.csv")
    assert one_line(read_numbers, inf, ["loss"]) == f"{inf}:2: 'loss' is not finite: 'inf'"
