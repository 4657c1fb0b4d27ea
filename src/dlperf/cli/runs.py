"""`dlperf runs list | show | compare | tag | delete`: read the run store, and keep it tidy."""

from __future__ import annotations

import functools
import sys
from dataclasses import asdict
from typing import Any

import typer

from dlperf.cli import console
from dlperf.cli.app import Json, app, open_listing, open_store, state
from dlperf.errors import UserError
from dlperf.parsing import name_text

runs_app = typer.Typer(
    help="List, show, compare, tag, delete and repair stored runs.\n\nExample: dlperf runs list",
    no_args_is_help=True,
)
app.add_typer(runs_app, name="runs")

# The store as the commands that only read it open it: never made or written.
reader = functools.partial(open_store, create=False)


# The store as tag and delete open it: one missing or empty is not made (a mistyped --db made
# a store only to say "no run N") but read as holding no run, into which each write says why
# it cannot be made; one that is there is written as a run writes it.
writer = functools.partial(open_store, create=False, writes=True)


@runs_app.command("list")
def runs_list(
    kind: str = typer.Option(None, "--kind", help="Only runs of this kind (run, scale, ...)."),
    study: int = typer.Option(None, "--study", help="Only the runs of study ID (a sweep...)."),
    where: list[str] = typer.Option(
        None,
        "--where",
        help="Only runs where KEY=VALUE (repeatable): a config key (train.lr=0.1), status, "
        "kind, name, a summary key, tag.NAME, or config.KEY (the config alone). Values are "
        "read as --set reads them.",
        show_default=False,
    ),
    limit: int = typer.Option(50, "--limit", help="Newest N runs (of those --where selects)."),
    as_json: Json = False,
) -> None:
    """List stored runs, newest first. A run stuck in `running` whose process is gone (on this
    host) shows as `lost`.

    Example: dlperf runs list --where model.name=resnet20 --where status=finished --limit 10
    """
    from dlperf.store.query import config_value, cut_text, list_runs, tags_text

    runs = list_runs(open_listing, kind=kind, study=study, where=where or (), limit=limit)
    if console.printed_json(as_json, [r.to_dict() for r in runs]):
        return
    tagged = any(r.tags for r in runs)
    console.print_table(
        None,
        ["id", "name", "kind", "status", "model", "data", "test acc", "samples/s", "started"]
        + (["tags"] if tagged else []),
        [
            [r.id, name_text(r.name), r.kind, r.status,
             *(cut_text(config_value(r.config, k)) for k in ("model.name", "data.name")),
             r.summary.get("test_accuracy"), r.summary.get("throughput"), r.started]
            + ([cut_text(tags_text(r.tags))] if tagged else [])
            for r in runs
        ],
    )  # fmt: skip


# --- runs show ------------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """A stored value as a table shows it: lists as 'a, b', empty ones as '-'."""
    from dlperf.store.query import list_cell

    return list_cell(value) if isinstance(value, list | tuple) else value


def transfer_notes(summary: dict[str, Any]) -> list[str]:
    """What a run made of the weights it started from, as stored in its summary's
    transfer.notes (a first convolution adapted, the head kept or new); none for a run from
    scratch."""
    transfer = summary.get("transfer")
    notes = transfer.get("notes") if isinstance(transfer, dict) else None
    return [str(note) for note in notes] if isinstance(notes, list) else []


@runs_app.command("show")
def runs_show(run_id: int = typer.Argument(..., help="Run ID."), as_json: Json = False) -> None:
    """Show a run: summary and tags, config, system, artifacts, phase breakdown and per-epoch
    metrics (of a run of many steps, the first and last rows; --json holds every one).

    Example: dlperf runs show 1
    """
    from dlperf.store.query import (
        config_settings,
        config_value,
        cut_text,
        metric_table,
        show,
        system_rows,
    )

    view = show(store := reader(), run_id, values=as_json)  # the table reads its own rows
    if console.printed_json(as_json, view.to_dict()):
        return
    run = view.run
    summary, system, process = run.summary, run.system or {}, run.process or {}
    rows: list[list[Any]] = [
        ["model", cut_text(config_value(run.config, "model.name"))],
        ["data", cut_text(config_value(run.config, "data.name"))],
        ["device", summary.get("device") or system.get("device")],
        ["study", run.study_id],
        ["started", run.started],
        ["ended", run.ended],
    ]
    if run.status == "lost":
        rows.append(["lost", f"stored as running, but pid {process.get('pid')} is gone"])
    rows += [[f"tag {k}", cut_text(name_text(v))] for k, v in run.tags.items()]
    rows += [list(r) for r in view.results()]
    rows += [["transfer", note] for note in transfer_notes(summary)]
    rows += [["error", run.error]] if run.error else []
    console.print_table(f"run {run_id}: {name_text(run.name)} ({run.status})", ["", "value"], rows)
    console.print_phases(summary)
    if run.config:
        console.print_table("config", ["section", "keys set"], config_settings(run.config))
    if system:
        console.print_table(
            "system", ["key", "value"], [[k, _plain(v)] for k, v in system_rows(system).items()]
        )
    if view.artifacts:
        console.print_table(
            "artifacts",
            ["kind", "path", "exists"],
            [[a["kind"], a["path"], a["exists"]] for a in view.artifacts],
        )
    table = metric_table(store, run)  # of a run of many steps, its first and last rows
    if table.rows:
        console.print_table(f"per {table.axis}", [table.axis, *table.headers], table.rows)
    if note := table.note(run_id):
        console.out.print(note)


# --- runs compare ---------------------------------------------------------------------------


@runs_app.command("compare")
def runs_compare(
    run_ids: list[int] = typer.Argument(None, help="Two or more run IDs.", show_default=False),
    study: int = typer.Option(None, "--study", help="Compare every run of study ID."),
    as_json: Json = False,
) -> None:
    """Compare runs side by side: the config keys that differ, then the results, with a Δ
    column for numbers (two runs: the difference and its %; more: each run's change from the
    first, in %).

    Example: dlperf runs compare 1 2   (or: dlperf runs compare --study 3)
    """
    from dlperf.store.query import compare

    done = compare(reader(), run_ids or [], study)
    if console.printed_json(as_json, done.to_dict()):
        return
    console.print_table(
        None,
        ["", *(f"run {i}" for i in done.run_ids), "Δ"],
        [[row.label, *map(_plain, row.values), row.delta] for row in done.rows()],
    )


# --- runs tag, runs delete ------------------------------------------------------------------


@runs_app.command("tag")
def runs_tag(
    run_id: int = typer.Argument(..., help="Run ID."),
    pairs: list[str] = typer.Argument(
        ..., metavar="KEY=VALUE...", help="Set a tag; KEY= (nothing after =) removes it."
    ),
) -> None:
    """Tag a run: KEY=VALUE sets a tag, KEY= removes it; prints the run's tags. Tags show in
    `runs show`, `runs compare` and `runs list --json`; `runs list --where tag.KEY=VALUE`
    selects by them.

    Example: dlperf runs tag 3 baseline=yes note="lr too high"
    """
    from dlperf.store.query import tag_changes, tag_rows

    tags = tag_changes(pairs)
    store = writer()
    store.get_run(run_id)  # "no run N" before "open read-only" (a missing store is empty)
    result = store.set_tags(run_id, tags)
    if result:
        console.print_table(f"run {run_id} tags", ["tag", "value"], tag_rows(result))
    else:
        console.out.print(f"run {run_id} has no tags")


def _interactive() -> bool:
    return sys.stdin is not None and sys.stdin.isatty()


@runs_app.command("delete")
def runs_delete(
    run_ids: list[int] = typer.Argument(..., help="Run IDs.", show_default=False),
    yes: bool = typer.Option(False, "--yes", "-y", help="Delete without asking."),
    force: bool = typer.Option(
        False,
        "--force",
        help="Stop runs still running first (SIGTERM to their process, which marks them "
        "killed; a dlperf.track run's own program is refused, not signalled); one running "
        "on another host is deleted under it, and in a copy of a store, a row of a run the "
        "original's process writes goes without a signal.",
    ),
) -> None:
    """Delete runs: their metrics, tags, artifact records and the files they own (a checkpoint
    under the store's artifact directory; files elsewhere are kept). Asks first unless --yes;
    refuses a run still `running` unless --force, which stops it first (a `lost` one goes
    without).

    Example: dlperf runs delete 3 4 --yes
    """
    from dlperf import stopping
    from dlperf.store.query import stop, to_delete

    store = writer()
    ids = list(dict.fromkeys(run_ids))
    pending = store.deleting(force)  # rows gone, files not: a delete killed midway, finished now
    # One begun on another host is no "no run N": the store's delete names it, with --force.
    runs = to_delete(store, [i for i in ids if i not in store.deleting(force=True)], force)
    if not yes:
        if not _interactive():
            raise UserError(
                "runs delete asks before deleting, but stdin is not a terminal",
                "pass --yes to delete without asking",
            )
        for r in runs:
            console.err.print(
                f"run {r.id}: {name_text(r.name)} ({r.kind}, {r.status}, "
                f"{len(store.artifacts(r.id))} artifacts)"
            )
        for i in pending & set(ids):
            console.err.print(f"run {i}: deleted, but not all of its files yet")
        if not typer.confirm(f"Delete {len(ids)} run(s)?", default=False, err=True):
            console.err.print("nothing deleted")
            raise typer.Exit(1)
    for stopped in stop(store, runs, waiting=console.warn) if force else []:
        line, warning = stopped.said()
        (console.warn if warning else console.out.print)(line)
    # A stop once the rows are committed waits for the files and this report, then exits
    # 128 + the signal: the user is told what is gone (it was gone without a word).
    with stopping.shielded():
        done = store.delete_runs(ids, force)
        for line in [*(f"kept {path}: {why}" for path, why in done.kept), *done.notes]:
            console.warn(line)
        console.out.print(f"deleted run {', '.join(map(str, done.runs))}")
        for path in done.removed:
            console.out.print(f"removed {path}")


@runs_app.command("repair")
def runs_repair(
    # Text, not a Path: Path() drops a trailing slash, which the store refuses ("new.db/").
    out: str = typer.Argument(..., help="The new store file to write (must not exist)."),
    as_json: Json = False,
) -> None:
    """Copy what can still be read of a damaged SQLite store (--db, default ./dlperf.db) into
    a new store file, stepping over damaged pages; the damaged file is only read. The new
    store keeps the store's id, so its runs' checkpoints stay theirs. Point --db at the new
    file, or move it in place of the old one once that is kept aside.

    Example: dlperf --db dlperf.db runs repair repaired.db
    """
    from dlperf.store import repair

    done = repair(state.db, out)
    tables = {name: asdict(counts) for name, counts in done.tables.items()}
    document = {"source": done.source, "out": done.out, "store_id": done.store_id, "tables": tables}
    if console.printed_json(as_json, document):  # paths as strings
        return
    console.print_table(
        f"rows read from {done.source}",
        ["table", "copied", "left out", "damaged stretches skipped"],
        # A table the store lacks is not one copied empty: its row says so, as --json does.
        [
            [n, "missing" if c.missing else c.copied, c.left_out, c.skipped_stretches]
            for n, c in done.tables.items()
        ],
    )
    # A store whose id was on a damaged page: the new store is given one when first opened.
    of = f"of store {done.store_id}" if done.store_id else "(the store's id could not be read)"
    console.out.print(f"wrote {done.out}: {done.runs} run(s) {of}")
