"""Diagnostics over stored runs: `examine(store, run_ids)` applies every rule of
`dlperf.doctor.rules.RULES` to each run and returns the findings.

A finding names its rule (a stable name), a severity (info | warning | error), the evidence
(the stored figures it rests on, quoted with their values, as a sentence and as `figures`)
and the fix. Doctor only reads the store, and imports neither torch nor numpy: it runs in a
second shell while the runs it examines are still training.

    from dlperf.store import RunStore
    from dlperf import doctor
    store = RunStore.open("dlperf.db")
    for f in doctor.examine(store, doctor.select(store, last=5)):
        print(f.run_id, f.severity, f.rule, f.evidence)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from dlperf.doctor.rules import RULES, SEVERITIES
from dlperf.doctor.view import RunView, Stored
from dlperf.errors import NoSuchRun, UserError
from dlperf.store import RunStore
from dlperf.store.query import no_runs

__all__ = ["RULES", "SEVERITIES", "Finding", "examine", "select"]


@dataclass(frozen=True)
class Finding:
    run_id: int
    rule: str
    severity: str  # info | warning | error
    evidence: str  # the stored figures, quoted with their values
    fix: str
    figures: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def select(
    store: RunStore,
    run_ids: Iterable[int] = (),
    study_ids: Iterable[int] = (),
    last: int | None = None,
) -> list[int]:
    """The runs to examine, oldest first: `run_ids`, every run of `study_ids` and the newest
    `last` runs; none of them given: the newest run. Unknown IDs are bad input."""
    run_ids, study_ids = list(run_ids), list(study_ids)
    if last is not None and last < 1:
        raise UserError(f"--last must be at least 1, got {last}")
    chosen = {store.get_run(run_id).id for run_id in run_ids}
    for study_id in study_ids:
        store.get_study(study_id)  # an unknown study is an error, not nothing to examine
        chosen |= {r.id for r in store.list_runs(study_id=study_id)}
    if last is not None or not (run_ids or study_ids):
        newest = store.list_runs(limit=last or 1)
        if not newest and not chosen:
            raise no_runs(store.engine)
        chosen |= {r.id for r in newest}
    return sorted(chosen)


def examine(
    store: RunStore,
    run_ids: Sequence[int],
    rules: Sequence[str] | None = None,
    gone: list[int] | None = None,
    db: Sequence[str] = (),
) -> list[Finding]:
    """Every finding of `rules` (default: all of RULES) on each run of `run_ids`, in run
    order, then in the order of the rule table. A run no longer stored (deleted by another
    process since `run_ids` were chosen, e.g. by `select`) is skipped, and its id appended
    to `gone` if given: the user named no such run, and the other runs still have findings.
    `db`: the words that name the store on a command line (`--db URL`, as the CLI was given
    them), which a fix that gives a command to run carries."""
    unknown = sorted(set(rules or ()) - set(RULES))
    if unknown:
        raise UserError(f"unknown rule(s) {', '.join(unknown)}", f"use {', '.join(RULES)}")
    stored = Stored(store, db)
    chosen = {name: handler for name, handler in RULES.items() if rules is None or name in rules}
    views = []
    for run_id in run_ids:
        try:
            views.append(RunView(stored, stored.run(run_id)))
        except NoSuchRun:
            if gone is not None:
                gone.append(run_id)
    return [
        Finding(view.run.id, name, **asdict(issue))
        for view in views
        for name, handler in chosen.items()
        for issue in handler(view)
    ]
