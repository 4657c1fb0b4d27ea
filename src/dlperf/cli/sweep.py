"""`dlperf sweep`: recipe sweeps over any config key, every point a run of one study."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import typer

from dlperf import clocks, stopping
from dlperf.cli import console
from dlperf.cli.app import Json, app, open_store
from dlperf.formatting import fmt
from dlperf.study_stop import StudyStop


def _params(params: dict[str, Any]) -> str:
    """A point's values as its run's name writes them, as --set takes them (`setting`); written
    as Python, they were augment.flip=False, {'x': 1}, "s p"=a b, and e= for an empty text."""
    from dlperf.store.query import setting

    return " ".join(f"{k}={setting(v)}" for k, v in params.items())


def _accuracy(group: dict[str, Any]) -> str:
    """Mean test accuracy, ± the standard deviation and the min-max over repeats."""
    mean, std = group["test_accuracy"], group["test_accuracy_std"]
    if std is None:
        return fmt(mean)
    low, high = group["test_accuracy_min"], group["test_accuracy_max"]
    return f"{mean:.4f} ± {std:.4f} ({low:.4f}-{high:.4f})"


def _spread(group: dict[str, Any], key: str) -> str:
    """A figure's mean over the repeats, ± its standard deviation where there is one."""
    mean, std = group[key], group[f"{key}_std"]
    return fmt(mean) if std is None else f"{fmt(mean)} ± {fmt(std)}"


def _reached(group: dict[str, Any]) -> str:
    """Mean epochs to target over the repeats that reached it, and how many did."""
    epochs = _spread(group, "epochs_to_target")
    if group["finished"] and not group["reached_target"]:
        epochs = "not reached"
    if group["repeats"] == 1:
        return epochs
    return f"{epochs} ({group['reached_target']}/{group['repeats']})"


def _elapsed_header(result: Any) -> str:
    """The wall-time column's name: the time for N epochs when every point trained N."""
    return clocks.elapsed_label(r.epochs for r in result.points if r.status == "finished")


def _print_summary(result: Any, sort: str | None) -> None:
    from dlperf.store.query import setting

    repeats = max((g["repeats"] for g in result.groups), default=1)
    spread = "; mean ± std (min-max) over repeats" if repeats > 1 else ""
    order = f", shown by {sort}" if sort is not None else ""
    # Without a target there is no "to target" to show.
    reached = result.target is not None
    console.print_table(
        f"sweep {result.name!r}, study {result.study_id}: points ranked by test "
        f"accuracy{order}{spread}",
        ["rank", "point", "run IDs", "test acc", "best val",
         *(["epochs to target", clocks.TIME_TO_TARGET] if reached else []), _elapsed_header(result),
         "samples/s"],
        [
            [g["rank"], _params(g["params"]), ", ".join(map(str, g["run_ids"])), _accuracy(g),
             _spread(g, "best_val_accuracy"),
             *([_reached(g), _spread(g, "time_to_target_s")] if reached else []),
             _spread(g, "elapsed_s"), _spread(g, "throughput")]
            for g in result.groups
        ],
    )  # fmt: skip
    if reached and not any(g["reached_target"] for g in result.groups):
        console.out.print(
            f"no point reached the target (validation accuracy {result.target:g}) in the "
            "epochs it trained: no time_to_target.png"
        )
    console.print_table(
        "best point per axis value (winner first)",
        ["axis", "value", "test acc", "best point", ""],
        [
            [axis, setting(v["value"]), v["test_accuracy"], _params(v["params"]),
             "winner" if i == 0 else ""]
            for axis, verdict in result.axis_winners.items()
            for i, v in enumerate(verdict["values"])
        ],
    )  # fmt: skip
    if result.winner is not None:
        console.out.print(f"winner: run {result.winner}")
    # Points another sweep of the study still runs: the verdict above is not the study's yet.
    for held in result.held_elsewhere:
        holder, run = held["holder"], held["run_id"]
        how = "was left unfinished by" if held.get("ended") else "is still run by"
        console.out.print(
            f"point {held['point']} ({_params(held['params'])}) {how} pid "
            f"{holder.get('pid')} on {holder.get('host')}"
            f"{f' (run {run})' if run is not None else ''}: the ranking and winner are over "
            "the finished points only"
        )
    for row in result.points:
        # Killed too (a worker its CPU-time limit stopped): its run is stored so, not failed
        if row.status != "finished":
            # a point's error is one line (a worker's too), at any terminal width
            console.err_line(f"run {row.run_id} {row.status}: {row.error}")


@app.command()
def sweep(
    sweep_file: Path = typer.Argument(..., help="Sweep TOML file.", show_default=False),
    jobs: int = typer.Option(1, "--jobs", help="Points run at once, each in its own process."),
    on_failure: str = typer.Option(
        "continue", "--on-failure", help="After a failed point: continue | stop."
    ),
    resume: int = typer.Option(
        None, "--resume", help="Continue study ID (default: the newest study of the sweep's name)."
    ),
    new: bool = typer.Option(False, "--new", help="Start a new study, even if one exists."),
    set_: list[str] = typer.Option(
        [], "--set", help="Fix a key in every point, over the file's [set], e.g. train.epochs=4."
    ),
    sort: str = typer.Option(
        None,
        "--sort",
        help="Show the points by a swept key (ascending) or a result column (best first), "
        "e.g. augment.batch_aug_m or time_to_target_s.",
    ),
    as_json: Json = False,
) -> None:
    """Run a base experiment over grid and zip axes of any config key, each point a run of one
    study; rank the points by test accuracy and time to target, name the winner per axis
    value and save the figures. Running it again skips the points that finished.

    Example: dlperf sweep examples/sweeps/cutout_batchaug.toml --jobs 2 --sort augment.batch_aug_m
    """
    from dlperf.sweep import load_sweep, run_sweep
    from dlperf.sweep.runner import continued_study
    from dlperf.sweep.summary import SPREAD

    # The figures and the ranking inside the stop's line too: a stop after the last point
    # exited 130 saying nothing. The line's command (every point skipped) ranks and draws.
    with StudyStop("sweep", resume, new, console.err_line) as said:
        with console.reporter() as rep:
            spec = load_sweep(sweep_file, list(set_), rep)
            store = open_store()
            said.watch(store, spec.name, lambda: continued_study(store, spec))
            result = run_sweep(spec, store, jobs, on_failure, resume, new, rep, sort)
        # matplotlib only now: a sweep file refused is said without its seconds of import.
        from dlperf.report.sweep import sweep_figures

        plots = [str(p) for p in sweep_figures(store, result)]
        # Every point is stored and its figures drawn: one stop from here does not unsay the
        # sweep (exit 0, not 143 with a "continue it" line), as `run`'s once its run is stored
        stopping.settle()
        if not console.printed_json(
            as_json, {"spread": SPREAD, **dataclasses.asdict(result), "plots": plots}
        ):
            _print_summary(result, sort)
            console.tell([], *plots)
    if result.deleted or any(r.status != "finished" for r in result.points):
        raise typer.Exit(1)
