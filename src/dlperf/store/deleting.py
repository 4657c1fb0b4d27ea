"""What a command says when `dlperf runs delete --force` stopped the run it was training.

The delete marks the run (`query.DELETING_TAG`, naming its own process) before it sends the
run's process SIGTERM, which that process takes as Ctrl-C: the signal carries no word of why
it came, the mark does. A stopped command reads it and says which delete stopped which run,
not how to continue a run that is being deleted. `run`, `sweep`, `distill`, `scale` and
`detect finetune`/`eval` all say it with the lines below; they said it in `run` and `sweep`
only, the others a stop line that read as a Ctrl-C (a study to continue) or nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from dlperf import stopping
from dlperf.store.query import deleted_by

if TYPE_CHECKING:
    from dlperf.store import RunStore
    from dlperf.store.record import RunRecord


def deleting_line(run_id: int, deleter: int) -> str:
    """Run `run_id` stopped by the `runs delete --force` of pid `deleter`, as one line."""
    return f"run {run_id} stopped: `dlperf runs delete` (pid {deleter}) is deleting it"


def deleting_its_run(run_id: int, deleter: int) -> str:
    """The same, said of what ran it (a sweep's point): "... is deleting its run N"."""
    return f"`dlperf runs delete` (pid {deleter}) is deleting its run {run_id}"


def stopped_to_delete(run: RunRecord | None) -> str | None:
    """`deleting_line` of `run` when a live `runs delete --force` stopped it to delete it;
    None for any other run (one stopped otherwise, or whose delete is gone: that run stays)."""
    if run is None or (deleter := deleted_by(run)) is None:
        return None
    return deleting_line(run.id, deleter)


def say_deleted(store: RunStore, run_ids: Iterable[int], say: Callable[[str], None]) -> None:
    """After a stop: `say` the `deleting_line` of each of `run_ids` (this command's runs) that
    a `runs delete --force` stopped. Spared, as `run`'s resume hint: a second stop waits for
    the reads, a third cuts them. A run that cannot be read (the delete removed it already,
    the store does not answer) is left unsaid: any error now is the stop's consequence."""
    with stopping.spared():
        for run_id in run_ids:
            try:
                line = stopped_to_delete(store.get_run(run_id))
            except Exception:
                continue
            if line is not None:
                say(line)


@contextlib.contextmanager
def telling_deleted(
    store: RunStore, run_ids: Callable[[], Iterable[int]], say: Callable[[str], None]
) -> Iterator[None]:
    """Around a command's work: a stop inside says (`say_deleted`) which of its runs, those
    `run_ids` gives then, a `runs delete --force` stopped, before the stop goes on. Inside a
    run's recording block, the run is read before it is marked killed, which the delete waits
    for: read after, it may be deleted already, and nothing is said."""
    try:
        yield
    except KeyboardInterrupt:
        with stopping.spared(), contextlib.suppress(Exception):
            ids = list(run_ids())
            say_deleted(store, ids, say)
        raise
