"""The twenty-fourth break-it round (data tester, P2), converge's tables and sources.

C7: a CSV row with more fields than its header was always told to "quote a field that holds a
comma": wrong for decimal commas (0,4455, whose quoting only moves the refusal to "not a
number") and for a '#' comment line read as the header. C11: `converge speed fit` fitted a
batch of 32.5. Each is now one line and exit 2 naming what is wrong.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from dlperf.converge import speed
from dlperf.errors import UserError
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


# --- C11: a batch that is not a whole number -------------------------------------------------


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (
            "placement,local_bsz,step_time,sync_time\n1,32,0.04,0\n12,32.5,0.05,0.001\n",
            "local_bsz must be a whole number, got 32.5",
        ),
        (
            "workers,global_batch,step_time_s\n1,64,0.04\n2,64.5,0.05\n",
            "global_batch must be a whole number, got 64.5",
        ),
    ],
)
def test_speed_fit_refuses_a_batch_that_is_not_a_whole_number(
    tmp_path: Path, text: str, said: str
) -> None:
    """Read by the loader every speed command shares: before this, both tables were loaded
    (and a big enough one fitted) with the fractional batch."""
    path = tmp_path / "t.csv"
    path.write_text(text)
    with pytest.raises(UserError) as caught:
        speed.load_csv(path)
    assert f"{path}:3: {said}" == caught.value.message
