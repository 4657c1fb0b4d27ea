"""Break-it round 63, W3 cause 1: `converge fit --to-csv` onto a device whose write fails.

Before: a table written straight to a device (docs: /dev/stdout and the like are written
directly, not through a temporary file) that refused the write, /dev/full's ENOSPC, ended in
"error: No space left on device (the system named no file: dlperf --debug ... shows where)",
naming nothing, though dlperf chose the path itself. Now the line names the device, as a
regular file's refused write names the file.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import CliResult

POLLUX_128 = Path(__file__).parents[1] / "fixtures" / "pollux" / "cifar10_validation-128.csv"


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
def test_a_table_refused_by_a_device_names_the_device(cli: Callable[..., CliResult]) -> None:
    done = cli(
        "converge", "fit", "--csv", str(POLLUX_128), "--y", "metric", "--metric", "accuracy",
        "--upto", "0.3", "--to-csv", "/dev/full",
    )  # fmt: skip
    assert done.code == 1, done.err
    # the last line: a slow fit (a busy machine) prints its progress line first
    assert (
        done.err.strip().splitlines()[-1] == "error: cannot use /dev/full: No space left on device"
    )
    assert "Traceback" not in done.err
