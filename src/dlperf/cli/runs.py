"""`dlperf runs list | show | compare | tag | delete`: read the run store, and keep it tidy."""

from __future__ import annotations

import json
import re
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import typer

from dlperf.cli import console
from dlperf.cli.app import app, open_store, state
from dlperf.errors import NoSuchRun, UserError
from dlperf.parsing import flatten

runs_app = typer.Typer(
    help="List, show, compare, tag, delete and repair stored runs.\n\nExample: dlperf runs list",
    no_args_is_help=True,
)
app.add_typer(runs_app, name="runs")

SUMMARY_KEYS = (
    "test_accuracy",
    "best_val_accuracy",
    "epochs_to_target",
    "time_to_target_s",
    "throughput",
    "train_time_s",
    "epochs",
    "peak_memory_bytes",
)
# The run's own fields that --where reads (besides summary keys, config keys and tag.NAME).
RUN_FIELDS = ("id", "study_id", "name", "kind", "status", "config_hash", "error")
TAG_KEY = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}")
MIB = 2**20


def _config_value(config: dict[str, Any], dotted: str) -> Any:
    node: Any = config
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def _with_status(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Runs as they stand: a `running` run whose process is gone reads `lost`."""
    from dlperf.store import effective_status

    for run in runs:
        run["status"] = effective_status(run)
    return runs


# --- runs list --where ----------------------------------------------------------------------


def _parse_where(text: str) -> tuple[str, Any]:
    from dlperf.config import _parse_value

    key, sep, value = text.partition("=")
    key, value = key.strip(), value.strip()
    if not sep or not key or not value:
        raise UserError(
            f"--where {text!r}: expected KEY=VALUE",
            "e.g. --where model.name=resnet20, --where status=lost, --where tag.baseline=yes",
        )
    return key, _parse_value(value)


def _field(run: dict[str, Any], key: str) -> tuple[bool, Any]:
    """(known for this run, value) of a --where key."""
    if key.startswith("tag."):
        from dlperf.config import _parse_value

        name = key.removeprefix("tag.")
        tags = run.get("tags") or {}
        return name in tags, _parse_value(tags[name]) if name in tags else None
    if key in RUN_FIELDS:
        return True, run[key]
    if "." not in key:
        return key in run["summary"], run["summary"].get(key)
    flat = flatten(run["config"])
    return key in flat, flat.get(key)


def _same(stored: Any, wanted: Any) -> bool:
    """Equal as --set values are: 0.1 == 0.10 and 1 == 1.0, but true is not 1."""
    if isinstance(stored, bool) or isinstance(wanted, bool):
        return type(stored) is type(wanted) and stored == wanted
    return stored == wanted


def _filter(runs: list[dict[str, Any]], where: list[str]) -> list[dict[str, Any]]:
    """The runs every --where KEY=VALUE holds for; a key no run and no experiment has is bad
    input, with the closest key as a hint."""
    from dlperf.config import describe
    from dlperf.parsing import did_you_mean

    tests = [_parse_where(w) for w in where]
    known = {k for k, _ in describe()} | set(RUN_FIELDS) | set(SUMMARY_KEYS)
    tags: set[str] = set()
    for run in runs:
        known |= set(run["summary"]) | set(flatten(run["config"]))
        tags |= {f"tag.{t}" for t in run.get("tags") or {}}
    for key, _ in tests:
        if key.startswith("tag.") and key not in tags:
            hint = did_you_mean(key, tags, "set one with `dlperf runs tag ID KEY=VALUE`")
            raise UserError(f"--where {key}: no listed run has tag {key[4:]!r}", hint)
        if not key.startswith("tag.") and key not in known:
            hint = did_you_mean(
                key,
                known,
                "keys: config keys (model.name, train.lr), status, kind, name, "
                "summary keys (test_accuracy, throughput) and tag.NAME",
                quote=True,
            )
            raise UserError(f"--where: unknown key {key!r}", hint)
    chosen = []
    for run in runs:
        fields = [_field(run, key) for key, _ in tests]
        if all(has and _same(v, want) for (has, v), (_, want) in zip(fields, tests, strict=True)):
            chosen.append(run)
    return chosen


@runs_app.command("list")
def runs_list(
    kind: str = typer.Option(None, "--kind", help="Only runs of this kind (run, scale, ...)."),
    study: int = typer.Option(None, "--study", help="Only the runs of study ID (a sweep...)."),
    where: list[str] = typer.Option(
        None,
        "--where",
        help="Only runs where KEY=VALUE (repeatable): a config key (train.lr=0.1), status, "
        "kind, name, a summary key, or tag.NAME. Values are read as --set reads them.",
        show_default=False,
    ),
    limit: int = typer.Option(50, "--limit", help="Newest N runs (of those --where selects)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON array."),
) -> None:
    """List stored runs, newest first. A run stuck in `running` whose process is gone (on this
    host) shows as `lost`.

    Example: dlperf runs list --where model.name=resnet20 --where status=finished --limit 10
    """
    if limit < 1:
        raise UserError(f"--limit must be at least 1, got {limit}")
    store = open_store()
    if study is not None:
        store.get_study(study)  # an unknown study is an error, not an empty list
    if where:  # filtered here, before the limit: the newest N runs that match
        runs = _filter(_with_status(store.list_runs(kind=kind, study_id=study)), where)[:limit]
    else:
        runs = _with_status(store.list_runs(kind=kind, study_id=study, limit=limit))
    if as_json:
        console.print_json(runs)
        return
    tagged = any(r["tags"] for r in runs)
    console.print_table(
        None,
        ["id", "name", "kind", "status", "model", "data", "test acc", "samples/s", "started"]
        + (["tags"] if tagged else []),
        [
            [
                r["id"],
                r["name"],
                r["kind"],
                r["status"],
                _config_value(r["config"], "model.name"),
                _config_value(r["config"], "data.name"),
                r["summary"].get("test_accuracy"),
                r["summary"].get("throughput"),
                r["started"],
            ]
            + ([_tag_text(r["tags"])] if tagged else [])
            for r in runs
        ],
    )


def _tag_text(tags: dict[str, str]) -> str | None:
    return " ".join(f"{k}={v}" for k, v in tags.items()) or None


# --- runs show ------------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """A stored value as a table shows it: lists as 'a, b', empty ones as '-'."""
    if isinstance(value, list | tuple):
        return ", ".join(console.fmt(v) for v in value) or None
    return value


def _summary_rows(summary: dict[str, Any]) -> list[list[Any]]:
    rows = []
    for key in SUMMARY_KEYS:
        if key not in summary:
            continue
        if key == "peak_memory_bytes":
            value = summary[key]
            rows.append(["peak memory MiB", None if value is None else value / MIB])
        else:
            rows.append([key, summary[key]])
    return rows


def _setting(value: Any) -> str:
    """A config value as --set takes it: 0.05, true, [1, 2], a quoted string with spaces."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        items = (json.dumps(v) if isinstance(v, str) else _setting(v) for v in value)
        return "[" + ", ".join(items) + "]"  # TOML: strings in a list are quoted
    if isinstance(value, str) and (not value or any(c in value for c in " =\"'")):
        return '"' + value.replace('"', '\\"') + '"'
    return str(value)


def _config_rows(config: dict[str, Any]) -> list[list[Any]]:
    """One row per section, its keys as KEY=VALUE (unset keys left out): compact enough to
    read in one screen, and each pair is what --set SECTION.KEY=VALUE takes."""
    rows = []
    for section, value in config.items():
        if not isinstance(value, dict):
            rows.append([section, _setting(value)])
            continue
        pairs = [
            f"{k}={_setting(v)}"
            for k, v in flatten(value).items()
            if v is not None and v != {} and v != []
        ]
        rows.append([section, " ".join(pairs) or None])
    return rows


@runs_app.command("show")
def runs_show(
    run_id: int = typer.Argument(..., help="Run ID."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Show a run: summary and tags, config, system, artifacts, phase breakdown and per-epoch
    metrics.

    Example: dlperf runs show 1
    """
    from pathlib import Path

    store = open_store()
    run = _with_status([store.get_run(run_id)])[0]
    epochs = {
        key: store.metrics(run_id, key)
        for key in store.metric_keys(run_id)
        if key.startswith(("val/", "epoch/"))
    }
    epoch_columns = {  # column header -> metric key, in reading order
        "train loss": "epoch/train_loss",
        "train acc": "epoch/train_acc1",
        "val loss": "val/loss",
        "val acc": "val/acc1",
        "val top5": "val/acc5",
        "lr": "epoch/lr",
        "s": "epoch/time_s",
        "samples/s": "epoch/throughput",
    }
    artifacts = [{**a, "exists": Path(a["path"]).exists()} for a in store.artifacts(run_id)]
    if as_json:
        run["epochs"] = {k: [v for _, v in pairs] for k, pairs in epochs.items()}
        run["artifacts"] = artifacts
        console.print_json(run)
        return
    summary, system = run["summary"], run["system"] or {}
    process = system.get("process") or {}
    rows: list[list[Any]] = [
        ["model", _config_value(run["config"], "model.name")],
        ["data", _config_value(run["config"], "data.name")],
        ["device", summary.get("device") or system.get("device")],
        ["study", run["study_id"]],
        ["started", run["started"]],
        ["ended", run["ended"]],
    ]
    if run["status"] == "lost":
        rows.append(["lost", f"stored as running, but pid {process.get('pid')} is gone"])
    rows += [[f"tag {k}", v] for k, v in run["tags"].items()]
    rows += _summary_rows(summary)
    rows += [["error", run["error"]]] if run["error"] else []
    console.print_table(f"run {run_id}: {run['name']} ({run['status']})", ["", "value"], rows)
    console.print_phases(summary)
    if run["config"]:
        console.print_table("config", ["section", "keys set"], _config_rows(run["config"]))
    if system:
        console.print_table(
            "system", ["key", "value"], [[k, _plain(v)] for k, v in flatten(system).items()]
        )
    if artifacts:
        console.print_table(
            "artifacts",
            ["kind", "path", "exists"],
            [[a["kind"], a["path"], a["exists"]] for a in artifacts],
        )
    if epochs:
        shown = {h: k for h, k in epoch_columns.items() if k in epochs}
        by_epoch: dict[int, dict[str, float]] = {}
        for key, pairs in epochs.items():
            for step, value in pairs:
                by_epoch.setdefault(step, {})[key] = value
        console.print_table(
            "per epoch",
            ["epoch", *shown],
            [[e, *(by_epoch[e].get(k) for k in shown.values())] for e in sorted(by_epoch)],
        )


# --- runs compare ---------------------------------------------------------------------------


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _delta(values: list[Any]) -> str | None:
    """How the other runs differ from the first: for two runs the difference and its share
    of the first ('+0.012 (+1.3%)'); for more, each one's change in % of the first, in
    column order ('+3% -5%'), or the differences when the first is 0. None when not numeric."""
    first, others = values[0], values[1:]
    if not _number(first) or not any(_number(v) for v in others):
        return None

    def signed(v: Any) -> str:
        if not _number(v):
            return "-"
        d = v - first
        return f"+{console.fmt(d)}" if d >= 0 else console.fmt(d)

    def percent(v: Any) -> str:
        return f"{(v - first) / abs(first):+.1%}" if _number(v) else "-"

    if all(v == first for v in others):
        return "0"
    if len(others) == 1:
        return signed(others[0]) + (f" ({percent(others[0])})" if first else "")
    return " ".join(percent(v) if first else signed(v) for v in others)


@runs_app.command("compare")
def runs_compare(
    run_ids: list[int] = typer.Argument(None, help="Two or more run IDs.", show_default=False),
    study: int = typer.Option(None, "--study", help="Compare every run of study ID."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Compare runs side by side: the config keys that differ, then the results, with a Δ
    column for numbers (two runs: the difference and its %; more: each run's change from the
    first, in %).

    Example: dlperf runs compare 1 2   (or: dlperf runs compare --study 3)
    """
    store = open_store()
    if study is not None:
        if run_ids:
            raise UserError("give run IDs or --study, not both")
        store.get_study(study)
        run_ids = sorted(r["id"] for r in store.list_runs(study_id=study))
    if len(run_ids or []) < 2:
        raise UserError("compare needs two or more run IDs", "e.g. dlperf runs compare 1 2")
    runs = _with_status([store.get_run(i) for i in run_ids])
    flat = [flatten(r["config"]) for r in runs]
    differing = sorted(k for k in set().union(*flat) if len({repr(f.get(k)) for f in flat}) > 1)
    if as_json:
        console.print_json(
            {
                "runs": run_ids,
                "config_diff": {k: [f.get(k) for f in flat] for k in differing},
                "summary": {k: [r["summary"].get(k) for r in runs] for k in SUMMARY_KEYS},
            }
        )
        return
    rows = [[k, *(_plain(f.get(k)) for f in flat)] for k in differing]
    for key in SUMMARY_KEYS:
        values = [r["summary"].get(key) for r in runs]
        if all(v is None for v in values):
            continue
        if key == "peak_memory_bytes":
            key, values = "peak memory MiB", [v / MIB if _number(v) else v for v in values]
        rows.append([key, *values])
    tags = sorted(set().union(*(r["tags"] for r in runs)))
    rows += [[f"tag {t}", *(r["tags"].get(t) for r in runs)] for t in tags]
    rows.append(["status", *(r["status"] for r in runs)])
    table = [[*row, _delta(row[1:])] for row in rows]
    console.print_table(None, ["", *(f"run {i}" for i in run_ids), "Δ"], table)


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
    tags: dict[str, str | None] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not TAG_KEY.fullmatch(key):
            raise UserError(
                f"runs tag {pair!r}: expected KEY=VALUE (KEY of letters, digits, _ . -)",
                "e.g. dlperf runs tag 3 baseline=yes; baseline= removes the tag",
            )
        if key in tags:
            raise UserError(f"runs tag: {key} is given twice")
        tags[key] = value.strip() or None
    result = open_store().set_tags(run_id, tags)
    if result:
        console.print_table(f"run {run_id} tags", ["tag", "value"], list(result.items()))
    else:
        console.out.print(f"run {run_id} has no tags", markup=False)


def _interactive() -> bool:
    return sys.stdin is not None and sys.stdin.isatty()


@runs_app.command("delete")
def runs_delete(
    run_ids: list[int] = typer.Argument(..., help="Run IDs.", show_default=False),
    yes: bool = typer.Option(False, "--yes", "-y", help="Delete without asking."),
    force: bool = typer.Option(
        False, "--force", help="Delete runs that may still be running (their writes then fail)."
    ),
) -> None:
    """Delete runs: their metrics, tags, artifact records and the files they own (a checkpoint
    under the store's artifact directory; files elsewhere are kept). Asks first unless --yes;
    refuses a run still `running` unless --force (a `lost` one goes without).

    Example: dlperf runs delete 3 4 --yes
    """
    store = open_store()
    ids = list(dict.fromkeys(run_ids))
    missing = []
    runs = []
    for run_id in ids:
        try:
            runs.append(store.get_run(run_id))
        except NoSuchRun:
            missing.append(str(run_id))
    if missing:
        raise UserError(
            f"no run {', '.join(missing)} in the store; nothing deleted", "see `dlperf runs list`"
        )
    running = [r for r in _with_status(runs) if r["status"] == "running"]
    if running and not force:
        where = ", ".join(
            f"{r['id']} (pid {p.get('pid')} on {p.get('host')})"
            if (p := (r["system"] or {}).get("process"))
            else str(r["id"])
            for r in running
        )
        raise UserError(
            f"run {where} is still running; nothing deleted",
            "stop it first, or pass --force",
        )
    if not yes:
        if not _interactive():
            raise UserError(
                "runs delete asks before deleting, but stdin is not a terminal",
                "pass --yes to delete without asking",
            )
        for r in runs:
            console.err.print(
                f"run {r['id']}: {r['name']} ({r['kind']}, {r['status']}, "
                f"{len(store.artifacts(r['id']))} artifacts)",
                markup=False,
            )
        if not typer.confirm(f"Delete {len(runs)} run(s)?", default=False, err=True):
            console.err.print("nothing deleted", markup=False)
            raise typer.Exit(1)
    done = store.delete_runs(ids)
    for path, why in done.kept:
        console.warn(f"kept {path}: {why}")
    console.out.print(f"deleted run {', '.join(map(str, done.runs))}", markup=False)
    for path in done.removed:
        console.out.print(f"removed {path}", markup=False)


@runs_app.command("repair")
def runs_repair(
    out: Path = typer.Argument(..., help="The new store file to write (must not exist)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Copy what can still be read of a damaged SQLite store (--db, default ./dlperf.db) into
    a new store file, stepping over damaged pages; the damaged file is only read. The new
    store keeps the store's id, so its runs' checkpoints stay theirs. Point --db at the new
    file, or move it in place of the old one once that is kept aside.

    Example: dlperf --db dlperf.db runs repair repaired.db
    """
    from dlperf.store import repair

    done = repair(state.db, out)
    if as_json:
        console.print_json(
            {
                "source": str(done.source),
                "out": str(done.out),
                "store_id": done.store_id,
                "tables": {name: asdict(counts) for name, counts in done.tables.items()},
            }
        )
        return
    console.print_table(
        f"rows read from {done.source}",
        ["table", "copied", "left out", "damaged stretches skipped"],
        [[n, c.copied, c.left_out, c.skipped_stretches] for n, c in done.tables.items()],
    )
    console.out.print(
        f"wrote {done.out}: {done.runs} run(s) of store {done.store_id}", markup=False
    )
