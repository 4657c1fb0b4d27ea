"""Break-it round 62, V2 cause 2: `runs tag N dlperf.deleting=` took away the mark that
`runs delete --force` puts on the run it stops (round 60), mid-delete: the stopped run then
told its user to `--resume` the run the delete went on to remove. The mark is dlperf's own:
`runs tag` refuses to set or remove it, in one line, and changes no tag.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from dlperf.store import RunStore, query
from tests.conftest import CliResult
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]


@pytest.mark.parametrize("pair", [f"{query.DELETING_TAG}=", f"{query.DELETING_TAG}=x"])
def test_runs_tag_leaves_the_deleting_mark_alone(cli: Cli, store: RunStore, pair: str) -> None:
    run_id = store.create_run("r", "run", {})
    store.set_tags(run_id, {query.DELETING_TAG: "held", "mine": "yes"})
    one_line(
        cli("runs", "tag", str(run_id), "mine=no", pair),
        2,
        f"error: runs tag: {query.DELETING_TAG} is dlperf's own mark of a run `runs delete "
        "--force` is deleting (tag the run with a key of your own)",
    )
    assert store.get_run(run_id).tags == {query.DELETING_TAG: "held", "mine": "yes"}
