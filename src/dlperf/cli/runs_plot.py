"""`dlperf runs plot`: overlays of stored metrics, one subplot per key, one line per run."""

from __future__ import annotations

from pathlib import Path

import typer

from dlperf.cli import console, outputs
from dlperf.cli.app import Json, open_store, state
from dlperf.cli.runs import runs_app

# '' is refused as parsed, not taken as the current directory (outputs.OutPath).
FIGURE = outputs.OutPath("--out names the figure to write", "--out runs.png")


@runs_app.command("plot")
def runs_plot(
    run_ids: list[int] = typer.Argument(..., help="One or more run IDs.", show_default=False),
    keys: list[str] = typer.Option(
        [],
        "--key",
        help="Metric key, e.g. val/loss, or val/error for 1 - val/acc1 (repeatable; default: "
        "training loss, val/acc1, train/lr).",
    ),
    x: str = typer.Option("step", "--x", help="step | epoch | time (seconds since the run began)."),
    out: Path = typer.Option(
        None,
        "--out",
        help="Figure file, .png, .svg or .pdf (default runs-ID-ID.png).",
        click_type=FIGURE,
    ),
    as_json: Json = False,
) -> None:
    """Plot stored metrics of one or many runs against the step, the epoch or the wall time:
    one subplot per key, one line per run.

    Example: dlperf runs plot 1 2 --key val/acc1 --key epoch/time_s --x epoch --out cmp.svg
    """
    from dlperf.paths import check_writable, writing
    from dlperf.report.runs import check_out, check_x, plot_runs
    from dlperf.store.reading import not_the_store

    check_x(x)
    path = out if out is not None else Path(f"runs-{'-'.join(map(str, run_ids))}.png")
    not_the_store(path, "--out", state.db)  # the default name too: a store may have it
    check_out(path)
    check_writable(path, make_parents=False)  # before the store is read
    store = open_store(create=False)
    with writing(path):
        done = plot_runs(store, run_ids, keys, x, path)
    if console.printed_json(as_json, done.to_dict()):
        return
    console.tell(done.warnings, done.path)
