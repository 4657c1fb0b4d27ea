"""Input meant to break what shows it: names holding terminal escape sequences and NUL, as
an older store or another tool may hold them, shown by the commands without being acted on.
"""

from __future__ import annotations

from collections.abc import Callable

from dlperf.store import RunStore
from tests.conftest import CliResult

EVIL = "evil\x1b[31mRED\x1b[2J\x7fnul\x07\r"  # no NUL: no store keeps one


def test_a_stored_name_with_control_characters_is_shown_escaped(
    cli: Callable[..., CliResult], store: RunStore
) -> None:
    """`runs list` and `runs show` wrote ESC, NUL, BEL and CR to the terminal as they were."""
    run_id = store.create_run(EVIL, "run", {}, None, None)
    for args in (["runs", "list"], ["runs", "show", str(run_id)]):
        result = cli(*args)
        assert result.code == 0, result.err
        assert r"evil\x1b[31mRED\x1b[2J\x7fnul\x07\r" in result.out, args
        assert not any(c in result.out for c in "\x1b\x7f\x07\r"), args
