"""Break-it round 28, what the lead fixed beside the testers' causes (round 27's Left list).

- L1: `runs repair SRC sqlite:x.db` wrote a new store file named `sqlite:x.db`, where `--db`
  refuses that name as a URL missing its `//`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from dlperf.store import RunStore
from tests.conftest import CliResult

Cli = Callable[..., CliResult]


@pytest.mark.parametrize(
    ("target", "shown"),
    [("sqlite:x.db", "'sqlite:x.db'"), ("postgresql:/u:pw@h/db", "'postgresql:/u:***@h/db'")],
)
def test_repair_refuses_a_target_that_is_a_url_missing_its_slashes(
    cli: Cli, store: RunStore, tmp_path: Path, target: str, shown: str
) -> None:
    result = cli("runs", "repair", target)
    assert result.code == 2, (result.out, result.err)
    assert result.err.count("\n") == 1 and "Traceback" not in result.err, result.err
    assert f"not the URL {shown}" in result.err and "pw" not in result.err, result.err
    assert "runs repair repaired.db" in result.err
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("dlperf.db")) == []
    # The way the line gives to mean a file of that very name works.
    done = cli("runs", "repair", "./sqlite:x.db")
    assert done.code == 0, (done.out, done.err)
    assert (tmp_path / "sqlite:x.db").is_file()
