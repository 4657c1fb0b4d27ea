"""The twenty-fourth break-it round (data tester, P2), converge's tables and sources.

C7: a CSV row with more fields than its header was always told to "quote a field that holds a
comma": wrong for decimal commas (0,4455, whose quoting only moves the refusal to "not a
number") and for a '#' comment line read as the header. Each is now one line and exit 2
naming what is wrong.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.cli.test_app import one_line_error
from tests.conftest import CliResult

Cli = Callable[..., CliResult]


# --- C7: a row with more fields than the header ----------------------------------------------


@pytest.mark.parametrize(
    ("text", "args", "said"),
    [
        (  # decimal commas: quoting them only moves the refusal to "not a number"
            "metric\n0,4455\n0,6007\n",
            ["--y", "metric"],
            "t.csv:2: 2 fields where the header has 1: '0,4455' (decimal commas? write '.' for "
            "decimals and no thousands separator)",
        ),
        (  # a comment line read as the header, the data's header as its first row
            "# written by train.py\niteration,metric\n390,0.4455\n",
            ["--x", "iteration", "--y", "metric"],
            "t.csv:1: the first line '# written by train.py' is read as the header, a comment?",
        ),
        (  # a comment holding a comma: as many fields as the header, so a column is missing
            "# lr=0.1, bs=32\niteration,metric\n390,0.4455\n",
            ["--x", "iteration", "--y", "metric"],
            "t.csv:1: the first line '# lr=0.1, bs=32' is read as the header, a comment?",
        ),
        (  # numpy.savetxt's header: its '#' is part of the first column's name
            "# iteration,metric\n390,0.4455\n",
            ["--x", "iteration", "--y", "metric"],
            "t.csv:1: the first line '# iteration,metric' is read as the header, a comment?",
        ),
        (  # a text field holding a comma: the old line is the right one
            "step,loss,note\n1,0.5,warm, then cold\n",
            ["--x", "step", "--y", "loss"],
            "t.csv:2: 4 fields where the header has 3 (quote a field that holds a comma)",
        ),
    ],
)
def test_a_row_past_the_header_names_decimal_commas_and_comment_lines(
    cli: Cli, tmp_path: Path, text: str, args: list[str], said: str
) -> None:
    path = tmp_path / "t.csv"
    path.write_text(text)
    one_line_error(cli("converge", "fit", "--csv", str(path), *args), said)
