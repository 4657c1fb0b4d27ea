"""Break-it round 30: the lead's causes (and items round 29 left).

C1. (Round 29's Left.) `analyze --csv --json` printed the JSON alone, silently dropping the
    CSV asked for: the two are refused together in one line.
"""

from __future__ import annotations

from collections.abc import Callable

from tests.conftest import CliResult

Cli = Callable[..., CliResult]


def test_analyze_refuses_json_and_csv_together(cli: Cli) -> None:
    done = cli("analyze", "smallcnn", "--input", "1,8,8", "--csv", "--json")
    assert done.code == 2 and done.out == "", done
    assert done.err.strip().splitlines() == [
        "error: give --json (the whole result) or --csv (the per-layer rows), not both"
    ], done.err
