"""`dlperf runs list | show | compare`: read the run store."""

from __future__ import annotations

from typing import Any

import typer

from dlperf.cli import console
from dlperf.cli.app import app, open_store
from dlperf.errors import UserError

runs_app = typer.Typer(
    help="List, show and compare stored runs.\n\nExample: dlperf runs list", no_args_is_help=True
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


def _config_value(config: dict[str, Any], dotted: str) -> Any:
    node: Any = config
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


@runs_app.command("list")
def runs_list(
    kind: str = typer.Option(None, "--kind", help="Only runs of this kind (run, scale, ...)."),
    study: int = typer.Option(None, "--study", help="Only the runs of study ID (a sweep...)."),
    limit: int = typer.Option(50, "--limit", help="Newest N runs."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON array."),
) -> None:
    """List stored runs, newest first.

    Example: dlperf runs list --study 3 --limit 10
    """
    if limit < 1:
        raise UserError(f"--limit must be at least 1, got {limit}")
    store = open_store()
    if study is not None:
        store.get_study(study)  # an unknown study is an error, not an empty list
    runs = store.list_runs(kind=kind, study_id=study, limit=limit)
    if as_json:
        console.print_json(runs)
        return
    console.print_table(
        None,
        ["id", "name", "kind", "status", "model", "data", "test acc", "samples/s", "started"],
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
            for r in runs
        ],
    )


@runs_app.command("show")
def runs_show(
    run_id: int = typer.Argument(..., help="Run ID."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Show a run: config, system, summary, phase breakdown and per-epoch metrics.

    Example: dlperf runs show 1
    """
    store = open_store()
    run = store.get_run(run_id)
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
    if as_json:
        run["epochs"] = {k: [v for _, v in pairs] for k, pairs in epochs.items()}
        run["artifacts"] = store.artifacts(run_id)
        console.print_json(run)
        return
    summary = run["summary"]
    console.print_table(
        f"run {run_id}: {run['name']} ({run['status']})",
        ["", "value"],
        [
            ["model", _config_value(run["config"], "model.name")],
            ["data", _config_value(run["config"], "data.name")],
            ["device", summary.get("device") or (run["system"] or {}).get("device")],
            ["started", run["started"]],
            ["ended", run["ended"]],
        ]
        + [[k, summary.get(k)] for k in SUMMARY_KEYS if k in summary]
        + ([["error", run["error"]]] if run["error"] else []),
    )
    console.print_phases(summary)
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


@runs_app.command("compare")
def runs_compare(
    run_ids: list[int] = typer.Argument(None, help="Two or more run IDs.", show_default=False),
    study: int = typer.Option(None, "--study", help="Compare every run of study ID."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Compare runs side by side: the config keys that differ, then the results.

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
    runs = [store.get_run(i) for i in run_ids]
    flat = [_flatten(r["config"]) for r in runs]
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
    columns = ["", *(f"run {i}" for i in run_ids)]
    rows = [[k, *(repr(f.get(k)) for f in flat)] for k in differing]
    rows += [[k, *(r["summary"].get(k) for r in runs)] for k in SUMMARY_KEYS]
    rows.append(["status", *(r["status"] for r in runs)])
    console.print_table(None, columns, rows)


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out
