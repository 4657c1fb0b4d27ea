"""Break-it round 70, T2 borderline 1: `runs compare` shows a boolean config value as `yes`, and
`--where e=yes`, the value copied from the table, selected nothing without a word (--where reads a
value as --set does, where a boolean is `true`). Now it is refused naming the run, the boolean and
`--where e=true`, as a float copied from a table at 4 digits is; text "yes" still matches text."""

from __future__ import annotations

import json
from collections.abc import Callable

import dlperf
from tests.conftest import CliResult


def test_yes_copied_from_a_table_names_the_boolean(cli: Callable[..., CliResult], db: str) -> None:
    with dlperf.track("a", config={"e": True, "f": False}, store=db):
        pass
    with dlperf.track("b", config={"e": "yes"}, store=db):
        pass

    def ids(where: str) -> list[int]:
        listed = cli("runs", "list", "--where", where, "--json")
        assert listed.code == 0, listed.err
        return [run["id"] for run in json.loads(listed.out)]

    assert ids("e=true") == [1]
    assert ids("e=yes") == [2]  # the text "yes" is run 2's, selected as before
    shown = cli("runs", "list", "--where", "f=no")
    assert shown.code == 2
    assert "run 1's f is the boolean false, which tables show as no" in shown.err
    assert "--where f=false" in shown.err
    assert "Traceback" not in shown.err and len(shown.err.strip().splitlines()) == 1
