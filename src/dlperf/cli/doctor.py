"""`dlperf doctor`: findings over stored runs (dlperf.doctor), grouped by run."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import typer

from dlperf.cli import console
from dlperf.cli.app import Json, app, db_words, open_store
from dlperf.errors import CheckFailed, NoSuchRun
from dlperf.formatting import as_written

if TYPE_CHECKING:
    from dlperf.doctor import Finding
    from dlperf.store import RunStore


@app.command()
def doctor(
    run_ids: list[int] = typer.Argument(
        None, metavar="RUN_ID", help="Run IDs (none: the newest run)."
    ),
    study: list[int] = typer.Option(
        [], "--study", metavar="ID", help="Every run of study ID (repeatable)."
    ),
    last: int = typer.Option(None, "--last", metavar="N", help="The newest N runs."),
    as_json: Json = False,
) -> None:
    """Diagnose stored runs: each finding with its severity, the stored figures it rests on,
    and the fix. Exit 0 when clean, 1 when a finding is an error, 2 on bad input.

    Example: dlperf doctor --last 5
    """
    from dlperf import doctor as lib
    from dlperf.store.query import check_limit

    check_limit(last, "--last")
    # A store not there is said by `select` (no runs) or by the run asked of it, space and all.
    store = open_store(create=False)
    ids = lib.select(store, run_ids or (), study, last)
    gone: list[int] = []
    findings = lib.examine(store, ids, gone=gone, db=db_words())
    if not console.printed_json(
        as_json,
        {"runs": [i for i in ids if i not in gone], "findings": [f.to_dict() for f in findings]},
    ):
        _print(store, ids, findings, gone)
    console.gone(gone, "doctor")
    errors = sum(f.severity == "error" and f.run_id not in gone for f in findings)
    if errors:
        raise CheckFailed(f"{errors} finding(s) of severity error")


def _line(text: str) -> None:
    """`text` on stdout as it is written: rich folds it at the width, and where stdout escapes
    what its encoding lacks (a run's name under PYTHONIOENCODING=ascii) it measured the name
    before the escapes widened it, so the line ran past COLUMNS."""
    console.out.print(as_written(text, sys.stdout))


def _print(store: RunStore, ids: list[int], findings: list[Finding], gone: list[int]) -> None:
    """The findings by run; a run deleted meanwhile (by another process) is added to `gone`."""
    by_run: dict[int, list[Finding]] = {run_id: [] for run_id in ids if run_id not in gone}
    for f in findings:
        by_run[f.run_id].append(f)
    for run_id, found in list(by_run.items()):
        try:
            run = store.get_run(run_id)
        except NoSuchRun:
            gone.append(run_id)
            del by_run[run_id]
            continue
        head = f"run {run_id} {run.name} ({run.kind}, {run.status})"
        if not found:
            _line(f"{head}: no findings")
            continue
        _line(head)
        for f in found:
            _line(f"  {f.severity:<8} {f.rule}: {f.evidence}")
            _line(f"           fix: {f.fix}")
    shown = [f for f in findings if f.run_id in by_run]
    counts = {s: sum(f.severity == s for f in shown) for s in ("error", "warning", "info")}
    tally = ", ".join(f"{n} {s}{'s' if n != 1 and s != 'info' else ''}" for s, n in counts.items())
    _line(f"{len(by_run)} run(s) examined: {tally}")
