"""The twenty-fourth break-it round (data tester, P2), converge's tables and sources.

C7: a CSV row with more fields than its header was always told to "quote a field that holds a
comma": wrong for decimal commas (0,4455, whose quoting only moves the refusal to "not a
number") and for a '#' comment line read as the header. C9: `converge regress` cut a CSV
source at its first ':' (`d:20.csv:depth=20` was "d has no depth"), and counted a source given
twice as two curves without a word. C11: `converge speed fit` fitted a batch of 32.5. Each is
now one line and exit 2 naming what is wrong, or read right.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from dlperf.converge import speed
from dlperf.errors import UserError
from tests.cli.test_app import one_line_error
from tests.conftest import CliResult

Cli = Callable[..., CliResult]
STEPS = np.arange(1.0, 41.0)


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


# --- C9: regress's CSV sources ---------------------------------------------------------------


def _optimus_csv(path: Path, depth: int) -> Path:
    """An exact Optimus loss curve whose log β are linear in the depth."""
    b0, b1, b2 = math.exp(-2 - 0.01 * depth), math.exp(0.5 + 0.02 * depth), math.exp(-1)
    rows = "".join(f"{k:g},{float(1.0 / (b0 * k + b1) + b2)!r}\n" for k in STEPS)
    path.write_text("step,loss\n" + rows)
    return path


def test_regress_reads_a_path_holding_a_colon_and_refuses_a_source_given_twice(
    cli: Cli, tmp_path: Path
) -> None:
    """A timestamped log name (12:30.csv) is the file, not `12` with features `30.csv:...`;
    the same file with the same features twice is one curve, not two."""
    colon = f"{_optimus_csv(tmp_path / 'd:20.csv', 20)}:depth=20"
    others = [f"{_optimus_csv(tmp_path / f'd{d}.csv', d)}:depth={d}" for d in (32, 44)]
    common = ["--features", "depth", "--x", "step", "--y", "loss"]
    r = cli("converge", "regress", colon, *others, *common, "--json")
    assert r.code == 0, r.err
    assert len(json.loads(r.out)["runs"]) == 3
    # The same file by another spelling, with the same features: refused, naming both.
    again = f"{tmp_path}/./d32.csv:depth=32"
    r = cli("converge", "regress", colon, *others, again, *common)
    one_line_error(r, f"{again} is {others[0]} again")


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
