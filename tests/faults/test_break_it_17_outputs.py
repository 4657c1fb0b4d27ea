"""Break-it round 17, part E: `--out FILE` where a command makes a directory."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import CliResult


@pytest.mark.parametrize("command", [["data", "samples", "digits"], ["data", "describe", "digits"]])
def test_an_out_that_is_a_file_is_bad_input(
    cli: Callable[..., CliResult], tmp_path: Path, command: list[str]
) -> None:
    """It was `error: cannot use FILE: File exists`, exit 1 (an OS failure's code)."""
    afile = tmp_path / "afile"
    afile.write_text("mine\n")
    r = cli(*command, "--out", str(afile))
    assert r.code == 2, r.err
    assert r.err == (
        f"error: cannot use {afile}: File exists (a file is where a directory was to be made: "
        "move it, or give another --out)\n"
    )
    assert afile.read_text() == "mine\n"
