"""Break-it round 71, S2's borderline hints of `--where`, each a selection of nothing or a wrong
hint before:
- `--where e=` was "expected KEY=VALUE", where the empty text is `e=""`: it now says so;
- `--where z=6` beside a key `Z` offered `_z`: a key spelt alike but for case comes first."""

from __future__ import annotations

import json
from collections.abc import Callable

import dlperf
from tests.conftest import CliResult


def test_where_hints(cli: Callable[..., CliResult], db: str) -> None:
    with dlperf.track("a", config={"e": "", "Z": 6, "_z": 5}, store=db):
        pass
    empty = cli("runs", "list", "--where", "e=")
    assert empty.code == 2
    assert empty.err.strip() == (
        "error: --where 'e=': expected KEY=VALUE, got no VALUE "
        "(to select an empty text: --where 'e=\"\"')"
    )
    chosen = cli("runs", "list", "--where", 'e=""', "--json")
    assert [r["id"] for r in json.loads(chosen.out)] == [1]

    twin = cli("runs", "list", "--where", "z=6")
    assert twin.code == 2
    assert "did you mean 'Z'?" in twin.err
